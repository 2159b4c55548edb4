"""The decode side of disaggregated prefill/decode in the kernel: KV loads.

The rules are vLLM 0.33's (``planner.kv_transfer`` lists them with their
functions); ``step._schedule_waiting_pd`` composes these pieces with the
waiting phase. The reference engine (``planner.reference``) implements the
same rules one class at a time.

Only configs with ``kv_transfer`` (``config.XFER``) reach this module, through
the ``heavy`` marker (``kernel/variant.py``): a run without a KV transfer
compiles none of it.
State: ``state.Remote`` (``x``: ``pd``, the ``state.PD_*`` flags; ``xfer_ns``,
when a load lands; ``xfer_tok``, the tokens it carries; ``hq``,
``kv_holding_waiting``, a ring buffer with ``O_HOLD_HEAD``/``O_HOLD_LEN``),
``O_LOADS`` (loads in flight), ``O_HOLD_BLOCKS`` (blocks the holding
requests hold) and ``O_HOLD_PEAK`` (the most they held at once).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from planner import config as K
from planner.capacity import blocks_for_tokens, cdiv
from planner.kernel import prefix_cache as PC
from planner.kernel import state as S
from planner.kernel.arrivals import arrival_limit, routing_open
from planner.kernel.kv_send import next_read_ns
from planner.kernel.policies import pick_victim

INT64_MAX = np.iinfo(np.int64).max
NOT_DONE = ~np.int8(S.PD_LOADING | S.PD_RECV)
NOT_INFLIGHT = ~np.int8(S.PD_INFLIGHT)
NOT_LANDED = ~np.int8(S.PD_LANDED)
REPORTED = np.int8(S.PD_RECV | S.PD_LANDED)  # in a step's finished_recving


@njit(cache=True, inline="always")
def _spec_step_tokens(cfg):
    """Tokens of one speculative step, 1 + k + lookahead (``Scheduler.
    __init__``'s num_spec_decode_tokens); 0 without drafts."""
    kk = cfg[K.SPEC_K]
    return 1 + kk + cfg[K.SPEC_LA] if kk > 0 else 0


@njit(cache=True, inline="always")
def _remaining(cfg, rq, st, r, extra):
    """``_request_remaining_blocks``: cdiv(min(num_tokens, max_model_len) +
    ``extra``, block_size) less the blocks r holds (full attention)."""
    full = min(rq.prompt[r] + st.nout[r], cfg[K.MML]) + extra
    return max(cdiv(full, cfg[K.BS]) - st.held[r], 0)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def reserved_blocks(cfg, rq, st, x, q, k, aside, n_aside):
    """``Scheduler._inflight_prefill_reserved_blocks``: blocks the requests in
    ``_inflight_prefills`` still need to hold their whole sequence
    (``_request_remaining_blocks``: cdiv(min(num_tokens, max_model_len) +
    one speculative step's 1 + k + lookahead tokens with drafts,
    block_size) less the blocks they hold), plus, with drafts, one
    speculative step's own blocks (``_spec_decode_step_blocks``), which a
    load also leaves free. Without drafts only running requests can need
    any: a request in ``kv_holding_waiting`` (or set aside from it this step,
    ``aside[:n_aside]``) holds its whole prompt's blocks, and its num_tokens
    is its prompt; with drafts those count too."""
    extra = _spec_step_tokens(cfg)
    total = 0
    for i in range(k[S.O_RUNNING_END]):
        r = q.run[i]
        if x.pd[r] & S.PD_INFLIGHT:
            total += _remaining(cfg, rq, st, r, extra)
    if extra > 0:
        R = x.hq.shape[0]
        for j in range(k[S.O_HOLD_LEN]):
            r = x.hq[(k[S.O_HOLD_HEAD] + j) % R]
            if x.pd[r] & S.PD_INFLIGHT:
                total += _remaining(cfg, rq, st, r, extra)
        for j in range(n_aside):
            r = aside[j]
            if x.pd[r] & S.PD_INFLIGHT:
                total += _remaining(cfg, rq, st, r, extra)
        total += cdiv(extra, cfg[K.BS])
    return total


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def leave_inflight(rq, st, x, q, s):
    """After ``step._update_after_schedule``: each request of the step whose
    chunk reached its known tokens leaves ``_inflight_prefills``
    (``Scheduler._update_after_schedule``)."""
    for j in range(s[S.N_SCHED]):
        r = q.slist[j]
        if st.ncomp[r] >= rq.prompt[r] + st.nout[r]:
            x.pd[r] &= NOT_INFLIGHT


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def set_inflight(x, r, prefilling):
    """At admission: in ``_inflight_prefills`` iff its prefill goes on after
    this step's chunk (``Scheduler.schedule``)."""
    if prefilling:
        x.pd[r] |= S.PD_INFLIGHT
    else:
        x.pd[r] &= NOT_INFLIGHT


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def start_load(cfg, rq, st, x, q, k, s, p, r, aside, n_aside):
    """The waiting head r, remote and fresh, starts its KV load if its blocks
    fit (``Scheduler.schedule``'s ``load_kv_async`` path): the connector loads
    every prompt token past the local prefix-cache hit
    (``NixlConnectorScheduler.get_num_new_matched_tokens``); ``allocate_slots``
    with no token to compute checks the whole-sequence gate and the watermark
    (none with ``running`` empty), then takes the prompt's blocks out of the
    free blocks less ``reserved_blocks`` (``reserved_blocks=``), caching none
    yet (``delay_cache_blocks``). Returns False (nothing changed) if they do
    not fit; else r holds them with num_computed_tokens = its prompt, is
    WAITING_FOR_REMOTE_KVS and in ``_inflight_prefills``, and its load lands
    at the step's start + ``KVTransfer.duration_ns``. The caller moves it to
    ``kv_holding_waiting`` (``aside[:n_aside]``: those set aside this step).
    A drafter's lookahead is not allocated for a load
    (``limit_lookahead_tokens``)."""
    bs, mml = cfg[K.BS], cfg[K.MML]
    ntok = rq.prompt[r] + st.nout[r]
    wm = cfg[K.WM_BLOCKS] if k[S.O_RUNNING_END] > 0 else 0
    nhit, evictable = 0, 0
    if p is not None:  # prefix caching: the local hit
        nhit, evictable = PC.lookup(np.int64(r), PC.max_hit_blocks(ntok, bs), bs, rq, p)
    c0 = nhit * bs
    external = rq.prompt[r] - c0
    full = blocks_for_tokens(ntok, mml, bs)
    if cfg[K.GATE] != 0 and max(full - nhit, 0) + evictable + wm > k[S.O_FREE]:
        return False
    total = blocks_for_tokens(c0 + external, mml, bs)
    need = total - nhit + evictable
    if need + wm > k[S.O_FREE] - reserved_blocks(cfg, rq, st, x, q, k, aside, n_aside):
        return False
    k[S.O_FREE] -= need
    if p is not None:
        PC.take_slot(r, p)
        PC.touch(nhit, p.slot_of[r], p)
        PC.get_new_blocks(total - nhit, p.slot_of[r], nhit, p)
        st.koff[r] = 0
        p.ncached[r] = nhit
        S.record_prefix_cache_stats(k, ntok, c0, st.npre[r] > 0)
    st.held[r] = total
    st.ncomp[r] = c0 + external
    x.pd[r] = (x.pd[r] & ~np.int8(S.PD_REMOTE)) | S.PD_LOADING | S.PD_INFLIGHT
    x.xfer_ns[r] = s[S.START] + cfg[K.XFER_LAT_NS] + external * cfg[K.XFER_PS] // 1000
    x.xfer_tok[r] = external
    k[S.O_LOADS] += 1
    k[S.O_HOLD_BLOCKS] += total
    k[S.O_HOLD_PEAK] = max(k[S.O_HOLD_PEAK], k[S.O_HOLD_BLOCKS])
    return True


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def update_waiting_for_remote_kv(cfg, rq, st, x, p, r):
    """``Scheduler._update_waiting_for_remote_kv``: r's landed blocks join the
    prefix cache; a whole-prompt load recomputes its last token (so the next
    one can be sampled); r is WAITING again."""
    if p is not None:
        PC.cache_blocks(r, st.ncomp[r], cfg[K.BS], rq, p)
    ntok = rq.prompt[r] + st.nout[r]
    if st.ncomp[r] == ntok:
        st.ncomp[r] = ntok - 1
    x.pd[r] &= NOT_DONE


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def finish_loads(x, k, flag):
    """The step's output reports the loads landed by its end
    (``finished_recving``, ``Scheduler._update_from_kv_xfer_finished``): each
    gets ``flag``, ``PD_RECV`` (sync: applied now) or ``PD_LANDED`` (async: the
    output is applied after the next ``schedule()``, ``apply_landed``)."""
    R = x.hq.shape[0]
    for j in range(k[S.O_HOLD_LEN]):
        r = x.hq[(k[S.O_HOLD_HEAD] + j) % R]
        f = x.pd[r]
        if f & S.PD_LOADING and not f & REPORTED and x.xfer_ns[r] <= k[S.O_END_NS]:
            x.pd[r] = f | flag
            k[S.O_LOADS] -= 1


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def apply_landed(x, k, s):
    """Async (``EngineCore.step_with_batch_queue``): the previous step's output,
    applied after this step's ``schedule()``, makes the loads it reported
    visible (``PD_LANDED`` becomes ``PD_RECV``). A step that applied any is
    not idle: the next one schedules them (``s[WAITED]``)."""
    R = x.hq.shape[0]
    for j in range(k[S.O_HOLD_LEN]):
        r = x.hq[(k[S.O_HOLD_HEAD] + j) % R]
        if x.pd[r] & S.PD_LANDED:
            x.pd[r] = (x.pd[r] & NOT_LANDED) | S.PD_RECV
            s[S.WAITED] = 1


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def in_flight_victim(cfg, rq, st, q, k):
    """``Scheduler.defer_block_free`` (a KV consumer under async scheduling):
    whether the request ``schedule()``'s running phase would preempt next
    (``policies.pick_victim``) was scheduled in the step in flight
    (``_request_blocks_can_be_freed`` is False: its tokens are in flight).
    vLLM then preempts nothing ("A deferred free will not help with immediate
    allocation") and the running phase stops there."""
    vi = pick_victim(
        q.run, k[S.O_RUNNING_END], cfg[K.VICTIM], cfg[K.ANTI_STARVATION], st.npre, st.ncomp,
        st.held, rq.priority, st.entry_ns,
    )  # fmt: skip
    return st.infl[q.run[vi]] > 0


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def load_wait_ns(cfg, st, x, k):
    """A step that scheduled nothing while loads are in flight (or, on a
    prefill instance, blocks wait for the decode side's read,
    ``kernel/kv_send.py``) runs no model: it lasts until the next load lands,
    read completes or request arrives, whichever is first (vLLM's engine
    polls with empty steps). Returns its length, ns."""
    R = x.hq.shape[0]
    t = INT64_MAX
    for j in range(k[S.O_HOLD_LEN]):
        r = x.hq[(k[S.O_HOLD_HEAD] + j) % R]
        if x.pd[r] & S.PD_LOADING and not x.pd[r] & REPORTED:
            t = min(t, x.xfer_ns[r])
    if k[S.O_NEXT_ARRIVAL] < arrival_limit(cfg, k, st.ncomp.shape[0]):
        t = min(t, st.entry_ns[st.order[k[S.O_NEXT_ARRIVAL]]])
    if routing_open(k):  # behind a router: no later than its next send (kernel/fleet.py)
        t = min(t, k[S.O_ROUTE_UNTIL])
    if k[S.O_SEND_LEN] > 0:  # a prefill instance: the next read the decode side completes
        t = min(t, next_read_ns(x, k))
    return max(0, t - k[S.O_END_NS])


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def drain_deferred(cfg, st, q, k, x, p):
    """``Scheduler._drain_deferred_frees`` as the step in flight's output
    lands: the requests of that batch (``plist``) that finished while it held
    them (``PD_DEFER``) return their blocks to the pool, tail first
    (``free_blocks(reversed(blocks))``), in the batch's order. Returns the
    change in free blocks."""
    freed = 0
    for j in range(k[S.O_N_PEND]):
        r = q.plist[j]
        if x.pd[r] & S.PD_DEFER:
            x.pd[r] &= ~np.int8(S.PD_DEFER)
            k[S.O_DEFER_BLOCKS] -= st.held[r]
            if p is not None and p.slot_of[r] >= 0:
                freed += PC.release(r, st.held[r], p, np.bool_(False))
            elif p is None:
                freed += st.held[r]
            st.held[r] = 0
    return freed
