"""The prefill side of disaggregated prefill/decode in the kernel: blocks held
until the decode side has read them.

What vLLM 0.33 does on a prefill instance with NixlConnector (the reference
engine, ``planner.reference``, implements the same rules):

- ``NixlConnectorScheduler.request_finished``
  (``distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py``): a
  request sent with ``do_remote_decode`` that ends by ``check_stop``
  (``FINISHED_LENGTH_CAPPED`` after its one output token) returns
  ``delay_free_blocks``, so ``Scheduler._free_request``
  (``vllm/v1/core/sched/scheduler.py``) leaves its blocks allocated. A
  request ended otherwise (rejected, aborted) frees them at once.
- The decode instance reads the blocks (NIXL READ) once its own scheduler
  has allocated the request's blocks; its heartbeats renew the prefill
  side's lease (``kv_lease_duration``, 30 s) from the moment it receives the
  request, so the blocks stay held while the request queues there. When the
  read completes the decode worker notifies the prefill worker, whose next
  step's output lists the request in ``finished_sending``, and
  ``_update_from_kv_xfer_finished`` frees its blocks (``_free_blocks``: tail
  first, ``KVCacheManager.free``).
- With async scheduling a connector that is a consumer too (``kv_both``, as
  NixlConnector deployments run both roles) sets ``defer_block_free``, but
  a held request's free is never deferred (``release_read``).

The planner's model: ``Requests.read_end_ns[r]`` (ns, the clock's time at
which the decode side's read of r's KV completes; ``planner.disagg`` derives
it from the decode pool's simulation) is given. The output of the first
step that ends at or after it, and after r finished, reports r in
``finished_sending`` (as a decode side's load lands, ``planner.kv_transfer``)
and frees its blocks where that output is applied: before the next
``schedule()`` under sync scheduling, after it under async scheduling
(``EngineCore.step_with_batch_queue``); requests due together in (time,
index) order (vLLM iterates a set). A step that schedules nothing while
reads are pending runs no model and lasts until the next read completes or
request arrives (``remote_kv.load_wait_ns``), and an idle engine frees what
is due before the next arrival, as vLLM's engine keeps polling while a
connector holds blocks (``Scheduler.has_requests``).

State: ``state.Remote``'s ``sq`` (a binary min-heap of the held requests on
(``xfer_ns``, r), ``O_SEND_LEN`` entries; ``xfer_ns[r]`` is when r's blocks
free); ``O_SEND_BLOCKS`` counts the blocks held,
``O_SEND_PEAK`` the most held at once (exact without prefix caching; with
it, at most the blocks in use, as shared blocks count once per holder).
Only configs with ``kv_transfer`` reach this module, through the ``heavy``
marker (``kernel/variant.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from planner import config as K
from planner.kernel import prefix_cache as PC
from planner.kernel import state as S


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def held_for_read(cfg, rq, r):
    """Whether r's blocks outlive its finish: a config with a KV connector and
    a request the decode side reads (``rq.read_end_ns[r]`` >= 0)."""
    return cfg[K.XFER] != 0 and rq.read_end_ns[r] >= 0


@njit(cache=True, inline="always")
def _before(a, b, x):
    """Heap order: request a's blocks free before b's (then by index)."""
    ta, tb = x.xfer_ns[a], x.xfer_ns[b]
    return ta < tb or (ta == tb and a < b)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def hold_for_read(r, t, rq, st, x, k):
    """r finished at t (ns) and keeps its ``st.held[r]`` blocks until
    ``rq.read_end_ns[r]``, and past t (``delay_free_blocks``; a step's output
    reports only sends that ended during it, and none began before r
    finished): it joins the heap."""
    x.xfer_ns[r] = max(t + 1, rq.read_end_ns[r])
    k[S.O_SEND_BLOCKS] += st.held[r]
    # distinct blocks: at most those in use (prefix caching shares blocks,
    # which O_SEND_BLOCKS counts once per reference)
    held = min(k[S.O_SEND_BLOCKS], k[S.O_USABLE] - k[S.O_FREE])
    k[S.O_SEND_PEAK] = max(k[S.O_SEND_PEAK], held)
    i = k[S.O_SEND_LEN]
    k[S.O_SEND_LEN] = i + 1
    while i > 0:  # sift up
        up = (i - 1) // 2
        if not _before(r, x.sq[up], x):
            break
        x.sq[i] = x.sq[up]
        i = up
    x.sq[i] = r


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _pop(x, k):
    """Remove and return the heap's first request."""
    top = x.sq[0]
    n = k[S.O_SEND_LEN] - 1
    k[S.O_SEND_LEN] = n
    last = x.sq[n]
    i = 0
    while True:  # sift ``last`` down from the root
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _before(x.sq[c + 1], x.sq[c], x):
            c += 1
        if not _before(x.sq[c], last, x):
            break
        x.sq[i] = x.sq[c]
        i = c
    if n > 0:
        x.sq[i] = last
    return top


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def next_read_ns(x, k):
    """When the first held request's blocks free (ns); -1 with none held."""
    return x.xfer_ns[x.sq[0]] if k[S.O_SEND_LEN] > 0 else -1


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def release_read(st, x, k, p, now):
    """``_update_from_kv_xfer_finished``'s ``finished_sending``: free the
    blocks of every held request whose read completed by ``now`` (ns), in
    heap order (``_free_blocks``: tail first). Never deferred
    (``defer_block_free``): a request is reported no earlier than in the
    output of the step after the one whose output finished it, and under
    async scheduling that output is applied after the step that last
    scheduled it has landed (``_request_blocks_can_be_freed``). Returns the
    change in free blocks."""
    freed = 0
    while k[S.O_SEND_LEN] > 0 and x.xfer_ns[x.sq[0]] <= now:
        r = _pop(x, k)
        k[S.O_SEND_BLOCKS] -= st.held[r]
        if p is not None:
            if p.slot_of[r] >= 0:
                freed += PC.release(r, st.held[r], p, np.bool_(False))
        else:
            freed += st.held[r]
        st.held[r] = 0
    return freed
