"""The jitted step loop: C scheduler configurations against one workload.

Each configuration runs the vLLM v1 scheduler step by step in simulated time:

- ``Scheduler.schedule`` (``vllm/v1/core/sched/scheduler.py``): running phase,
  then waiting phase, chunked prefill under ``max_num_batched_tokens``.
- ``KVCacheManager.allocate_slots`` (``vllm/v1/core/kv_cache_manager.py``):
  all-or-nothing allocation, the whole-sequence gate, the watermark; with a
  sliding window (``SW``) ``SlidingWindowManager.remove_skipped_blocks``
  first (``_remove_skipped_blocks``), and with several KV cache groups
  (``GROUPS_FULL``, ``GROUPS_SW``) one table per group in one pool; Mamba
  groups (``GROUPS_MAMBA``, mode "none") one block each per request.
- ``Scheduler._preempt_request``: recompute preemption of the tail of
  ``running``, prepended to ``waiting``.
- ``Scheduler.update_from_output`` and ``check_stop``
  (``vllm/v1/core/sched/utils.py``): a token is sampled only when the step's
  chunk reached the end of the known tokens; finished requests free at once.

The plain-Python ``planner.reference`` engine implements the same rules one
class at a time; tests require both to agree step for step.

- ``AsyncScheduler`` (``vllm/v1/core/sched/async_scheduler.py``) with
  ``EngineCore.step_with_batch_queue`` when ``ASYNC`` is set: step N+1 is
  scheduled before step N's output lands (``num_output_placeholders``,
  ``num_in_flight_tokens``, stale output of preempted requests).
- Prefix caching when ``CACHING`` is set (``prefix_cache.py``).

Both are vLLM defaults and both default off here (see the README). Time is
integer nanoseconds.

Shape: ``run_steps`` is the step loop (``simulate_one`` starts it for one
configuration); each phase of a step is one
function below, in the order the loop calls it (arrivals, the adaptive cap, the
decode fast path, ``schedule()``'s running and waiting phases, step time,
``_update_after_schedule``, ``update_from_output``, end of step). State
travels as the named records of ``state`` (``ReqState``, ``Queues``, ``Out``),
``prefix_cache.PrefixCache`` and this module's ``Scratch``; a config's scalar
state lives in ``Out.counters`` (``state.O_*``), a step's in ``Scratch.step``.

Compilation: the phase functions are compiled with Numba's ``_nrt=False``
(they allocate nothing), so passing a record costs no reference counting; with
it, an atomic increment and decrement per array per call made the step loop
1.8x slower. They are also compiled with ``no_cpython_wrapper=True``: only
jitted code calls them, and the wrapper that would unbox their records from
Python objects was about 13% of a first run's compile (16.8 against 14.6 CPU-s,
alternating, 2026-12-01). Their helpers are ``inline="always"``, which keeps the call tree
shallow: Numba re-optimizes every callee's IR inside each caller, so a deep
tree compiles slower. Only ``_init`` and ``new_prefix_cache`` allocate, and
they take their large arrays from the caller's per-thread buffers
(``kernel/arena.py``: ``scratch_sizes``), so a thread running many configs
does not fault in fresh pages for each.

Variants: the prefix cache ``p`` is None without prefix caching, and every
caching statement sits under ``if p is not None`` (Numba drops the branch
when compiling for None), so a run without caching compiles none of it: a
smaller first compile (``prefix_cache_of``, ``warm.py``).

Deliberate differences are named options (config
columns): ``PREEMPT`` (1 = BLIS restart, 2 = swap), ``STOP`` (1 =
max_servable bound), ``NULL`` (0 = BLIS pool without a null block), ``GATE``
(0 = gate off), and the mitigations of ``policies.py``.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from planner import config as K
from planner.capacity import blocks_for_tokens, cdiv, stop_length, usable_blocks
from planner.kernel import prefix_cache as PC
from planner.kernel import remote_kv as RKV
from planner.kernel import state as S
from planner.kernel.arena import Arenas
from planner.kernel.arrivals import (
    answered,
    arrival_limit,
    first_sends,
    may_receive,
    routing_open,
)
from planner.kernel.cycle import after_fast_path, livelock_proven, new_cycle
from planner.kernel.kv_send import held_for_read, hold_for_read, release_read
from planner.kernel.policies import (
    VANILLA,
    YOUNGEST,
    adaptive_cap_next,
    pick_victim,
    precedes,
    projected_blocks,
)
from planner.kernel.remote_kv import (
    apply_landed,
    drain_deferred,
    finish_loads,
    in_flight_victim,
    leave_inflight,
    load_wait_ns,
)
from planner.kernel.state import (
    ATTENDED,
    ATTENDED_W,
    BUDGET,
    CYCLE,
    DECODE,
    KV_TOUCHED,
    KV_W,
    N_ADM,
    N_FIN,
    N_FLIGHT,
    N_PRE,
    N_SCHED,
    NO_RUN_NEXT,
    NSTEP,
    PREFILL,
    START,
    SWAP_NS,
    THR_NOW,
)
from planner.kernel.token_gaps import gap_bin
from planner.kernel.uindex import uidx
from planner.kernel.variant import gated
from planner.latency.draft import draft_ns
from planner.latency.step_time import (
    LINEAR,
    MEASURED,
    analytic_step_ns,
    blis_step_ns,
    measured_step_ns,
)
from planner.speculative import MAX_SPEC_TOKENS, accepted_drafts
from planner.workload.front_end import front_end_rejects

INT64_MAX = np.iinfo(np.int64).max

# Live counters under the names the scheduler code uses (``state.O_*``).
FREE = S.O_FREE
N_RUN = S.O_RUNNING_END
WL = S.O_WAITING_END
WH = S.O_WAITING_HEAD
NXT = S.O_NEXT_ARRIVAL
CLOCK = S.O_END_NS
STEPS = S.O_STEPS


# Per-config scratch the kernel allocates: the step's accumulators, the fast
# path's first-need histogram (min(block_size, S.FAST_PATH_MAX_BLOCK_SIZE) + 1,)
# int64, async's skipped
# waiting requests (R,) int32, the livelock detector (``cycle.Cycle``), and
# with prefix caching the fast path's block events (2 x min(max_num_seqs, R),)
# int32 (``_replay_cache_run``).
Scratch = namedtuple("Scratch", "step hist skipbuf cycle cache_ev")


@njit(cache=True)
def _init(cfg, rq, k, snap):
    """Zero the counters, set the derived ones and allocate the scratch; the
    livelock detector's snapshot is the front of ``snap``, the thread's int32
    buffer (``scratch_sizes``). Returns the ``Scratch``. The pool starts with
    ``usable_blocks`` free (``BlockPool.__init__`` takes the null block)."""
    R = rq.prompt.shape[0]
    n, bs, mml = cfg[K.N], cfg[K.BS], cfg[K.MML]
    null_block = cfg[K.NULL] != 0
    k[:] = 0
    k[S.O_USABLE] = usable_blocks(n, null_block)
    k[S.O_STOP_LEN] = stop_length(mml, n, bs, null_block, cfg[K.STOP])
    k[FREE] = k[S.O_USABLE]
    k[S.O_MIN_FREE] = k[FREE]
    k[S.O_SEQS] = cfg[K.SEQS]
    k[S.O_WINDOW_END] = cfg[K.ADAPT_WINDOW] if cfg[K.ADAPT_WINDOW] > 0 else INT64_MAX
    k[S.O_CPU_FREE] = cfg[K.SWAP_CPU_BLOCKS]
    k[S.O_LIVELOCK_STEP] = -1
    k[S.O_LONE_R] = -1
    k[S.O_LONE_NTOK] = -1
    k[S.O_ORDER_END] = first_sends(rq)
    k[S.O_ROUTE_UNTIL] = -1  # a lone server; kernel/fleet.py opens routing for replicas
    caching = cfg[K.CACHING] != 0
    slots, maxb = _cache_shape(cfg, rq)
    cache_entries = S.cycle_cache_entries(R, n, slots, maxb) if caching else 0
    return Scratch(
        np.zeros(NSTEP, dtype=np.int64),
        np.zeros(min(bs, S.FAST_PATH_MAX_BLOCK_SIZE) + 1, dtype=np.int64),
        np.empty(R if cfg[K.ASYNC] != 0 or cfg[K.XFER] != 0 else 1, dtype=np.int32),
        new_cycle(R, cache_entries, snap),
        np.empty(2 * slots if caching else 1, dtype=np.int32),
    )


def scratch_sizes(cfg: np.ndarray, rq: tuple) -> tuple[int, int, int]:
    """The largest ``state.scratch_layout`` of the configs ``cfg`` (C, NCOLS)
    (``config.pack_configs`` rows) on requests ``rq``: entries of the three
    buffers a worker thread reuses (``kernel/arena.py``), each the largest
    over the configs. Plain Python and NumPy, so sizing compiles nothing."""
    tokens = rq.prompt.astype(np.int64) + rq.max_tokens
    most = int(tokens.max()) if tokens.shape[0] else 0
    R = rq.prompt.shape[0]
    sizes = {
        S.scratch_layout(
            R,
            int(c[K.N]),
            int(c[K.BS]),
            R if c[K.XFER] != 0 else int(c[K.SEQS]),  # as ``_cache_shape``
            min(most + draft_slack(int(c[K.SPEC_K])), int(c[K.MML])),
            bool(c[K.CACHING] != 0),
            int(c[K.GROUPS_FULL] + c[K.GROUPS_SW]),
        )
        for c in cfg
    }
    return tuple(max(x[i] for x in sizes) for i in range(3))  # type: ignore[return-value]


@njit(cache=True, inline="always")
def draft_slack(k):  # noqa: ANN001, ANN201 (jitted: int -> int)
    """Tokens past prompt + output a request's blocks can cover with k draft
    tokens per step: its last steps' drafts, two steps of 1 + k under async
    scheduling (one in flight), so 2 (k + 1); 0 without drafts."""
    return 2 * (k + 1) if k > 0 else 0


@njit(cache=True, inline="always")
def _cache_shape(cfg, rq):
    """(block-table rows, blocks per row) of the prefix cache: min(max_num_seqs,
    R) rows per KV cache group of the blocks the longest request can reach
    (min(prompt + output + ``draft_slack``, max_model_len) tokens) plus one;
    (1, 1) without caching."""
    if cfg[K.CACHING] == 0:
        return np.int64(1), np.int64(1)
    R = rq.prompt.shape[0]
    longest = 0
    slack = draft_slack(cfg[K.SPEC_K])
    for r in range(R):
        longest = max(longest, min(rq.prompt[r] + rq.max_tokens[r] + slack, cfg[K.MML]))
    # A disaggregated decode side: requests loading KV hold blocks outside
    # ``running``, so any request may hold a row.
    rows = R if cfg[K.XFER] != 0 else min(cfg[K.SEQS], R)
    return rows * (cfg[K.GROUPS_FULL] + cfg[K.GROUPS_SW]), cdiv(longest, cfg[K.BS]) + 1


@njit(cache=True)
def new_prefix_cache(cfg, rq, a32, a64):
    """A fresh ``prefix_cache.PrefixCache`` for a config with prefix caching
    (``_cache_shape``), its large arrays slices of ``a32``/``a64``, the
    thread's int32 and int64 arenas (``scratch_sizes``)."""
    slots, maxb = _cache_shape(cfg, rq)
    R = rq.prompt.shape[0]
    groups, sw_groups = cfg[K.GROUPS_FULL] + cfg[K.GROUPS_SW], cfg[K.GROUPS_SW]
    # ``SlidingWindowManager._contiguous_blocks_for_hit``: the window less
    # the query token, in blocks
    need = cdiv(cfg[K.SW] - 1, cfg[K.BS]) if cfg[K.SW] > 0 else 0
    return PC.new_cache(
        cfg[K.N], cfg[K.NULL] != 0, slots, maxb, R, a32, a64, groups, sw_groups, need,
        hash_lookahead(cfg),
    )  # fmt: skip


@njit(cache=True, inline="always")
def hash_lookahead(cfg):
    """Tokens past a block its prefix-cache hash covers: vLLM 0.33's
    ``VllmConfig.num_hash_lookahead_tokens``, the drafter's prefill lookahead
    (``num_prefill_lookahead_tokens``: 1 for EAGLE, EAGLE-3 and
    single-module MTP, whose KV at a block's last position depends on the
    next token) when prefix caching is on, else 0 (n-gram, no drafts). With
    it vLLM drops no trailing cached block (``Scheduler.__init__``:
    ``use_eagle_block_drop`` off); the disaggregated decode side, where vLLM
    keeps the legacy hashes, is refused (``SchedulerConfig``)."""
    return 1 if cfg[K.SPEC_LA] > 0 and cfg[K.CACHING] != 0 else 0


def prefix_cache_of(cfg: np.ndarray, rq: tuple, a32: np.ndarray, a64: np.ndarray) -> tuple | None:
    """The prefix cache a config runs with: ``new_prefix_cache`` with prefix
    caching, else None. Every caching statement of the kernel sits under
    ``if p is not None``, so Numba compiles the step loop for None without
    any of them (a smaller first compile; ``warm.py``): the variant is
    chosen by the argument's type, never by a runtime flag."""
    return None if caching_marker(cfg) is None else new_prefix_cache(cfg, rq, a32, a64)


def caching_marker(cfg: np.ndarray) -> bool | None:
    """True for a config (its ``config.pack_configs`` row) with prefix caching,
    else None: the argument that picks the kernel variant where no prefix
    cache is passed (``fleet.simulate_fleet``, ``warm.compile_ahead``)."""
    return True if cfg[K.CACHING] != 0 else None


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _log(ev, k, step, r, value, kind):
    """Append one event (``state.EV_*``) if the log exists and has room; counts
    every event in ``k[O_EVENTS]``."""
    if ev.shape[0] == 0:
        return
    n = k[S.O_EVENTS]
    if n < ev.shape[0]:
        ev[n, 0] = step
        ev[n, 1] = r
        ev[n, 2] = value
        ev[n, 3] = kind
    k[S.O_EVENTS] = n + 1


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _enqueue_sorted(r, wq, wh, wl, priority, entry_ns):
    """Insert r into the waiting ring in priority order (``PriorityRequestQueue``);
    equal keys keep their order. Returns the new length."""
    R = wq.shape[0]
    j = wl
    while j > 0 and precedes(r, wq[(wh + j - 1) % R], priority, entry_ns):
        wq[(wh + j) % R] = wq[(wh + j - 1) % R]
        j -= 1
    wq[(wh + j) % R] = r
    return wl + 1


# Priority scheduling and the mitigations of ``policies.py`` (other victims,
# anti-starvation, projected admission, the adaptive cap) are compiled only
# into the variant whose marker is on (``variant.features_of``); the plain
# variant's victim is vLLM's FCFS tail (``_preempt_one``). Their off values
# are never seen: no plain config reaches the calls.
_enqueue_sorted_if = gated(_enqueue_sorted, 0)
_projected_blocks_if = gated(projected_blocks, 0)
_pick_victim_if = gated(pick_victim, -1)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _remove_waiting(r, wq, wh, wl):
    """Remove r from the waiting ring, keeping the others' order. Returns the length."""
    R = wq.shape[0]
    m = 0
    for j in range(wl):
        x = wq[(wh + j) % R]
        if x != r:
            wq[(wh + m) % R] = x
            m += 1
    return m


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _drop_finished(run, n_run, status):
    """Remove finished requests from ``running``, keeping order (``remove_all``)."""
    m = 0
    for i in range(n_run):
        r = run[i]
        if status[uidx(r)] == S.RUNNING:
            run[m] = r
            m += 1
    return m


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _blis_last_slot(cfg, rq, st, k, p, r):
    """compat blis: ``Simulator.processCompletions`` (``sim/simulator.go``)
    allocates a slot for a finished request's last token before freeing it
    (not for one force-completed at max_model_len). When its blocks are full
    that pops the free queue's front block (evicting its hash), which the
    release then puts back at the tail; with no free block the allocation
    fails and is only counted (``O_KV_ALLOC_FAILURES``). Returns the blocks
    taken (0 or 1)."""
    if st.nout[r] < rq.max_tokens[r] or (st.ncomp[r] - st.koff[r]) % cfg[K.BS] != 0:
        return 0
    if k[FREE] == 0:
        k[S.O_KV_ALLOC_FAILURES] += 1
        return 0
    PC.get_new_blocks(np.int64(1), p.slot_of[r], np.int64(st.held[r]), p)
    st.held[r] += 1
    return 1


_blis_last_slot_if = gated(_blis_last_slot, 0)
_answered_if = gated(answered)
_blis_step_ns_if = gated(blis_step_ns, 0)


@njit(cache=True)
def _mamba_groups(cfg):
    """The config's Mamba state groups (``K.GROUPS_MAMBA``)."""
    return cfg[K.GROUPS_MAMBA]


# 0 below the heavy variant: ``variant.features_of`` turns heavy on for Mamba groups
_mamba_groups_if = gated(_mamba_groups, np.int64(0))


@njit(cache=True, inline="always")
def _finish(r, t, cfg, rq, st, k, p):
    """``check_stop`` ended r at time t (ns): free its blocks (``_free_request``);
    its client may send again (``arrivals.answered``). Returns the change in
    free blocks (compat blis: less the last token's slot, ``_blis_last_slot``)."""
    blis = cfg[K.COMPAT] != 0
    taken = 0
    if p is not None:  # compat blis implies prefix caching
        taken = _blis_last_slot_if(rq.features.extras, cfg, rq, st, k, p, r) if blis else 0
    mamba = _mamba_groups_if(rq.features.heavy, cfg)
    freed = _pool_blocks(cfg, st, r, mamba)  # its null blocks were never pool blocks
    if p is not None:
        if p.slot_of[r] >= 0:
            freed = PC.release(r, st.held[r], p, blis)
    st.held[r] = 0
    _finish_later(r, t, cfg, rq, st, k)
    return freed - taken


@njit(cache=True, inline="always")
def _finish_or_hold(r, t, cfg, rq, st, k, p, x):
    """``_finish``, but on a prefill instance a request the decode side
    reads keeps its blocks until the read completes (``delay_free_blocks``,
    ``kernel/kv_send.py``). Returns the change in free blocks."""
    if _held_for_read_if(rq.features.heavy, cfg, rq, r):
        _finish_later(r, t, cfg, rq, st, k)
        _hold_for_read_if(rq.features.heavy, r, t, rq, st, x, k)
        return 0
    return _finish(r, t, cfg, rq, st, k, p)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _finish_later(r, t, cfg, rq, st, k):
    """``_finish`` but for its blocks: r is finished at t and its client may
    send again; the caller frees its blocks (``_finish``), or they stay held
    until the step in flight lands (``remote_kv.drain_deferred``)."""
    st.skip[r] = 0
    st.koff[r] = 0
    st.status[r] = S.FINISHED
    st.finish_ns[r] = t
    _answered_if(rq.features.extras, cfg, rq, st, k, r, t)


# ---- Arrivals --------------------------------------------------------------


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _arrivals(cfg, rq, st, q, k):
    """Requests whose entry time has come join the tail of ``waiting``
    (``Scheduler.add_request``; priority: ``PriorityRequestQueue``). The front
    end rejects what ``workload.front_end.front_end_rejects`` says it does. Closed loop:
    only released requests arrive (``arrivals.py``)."""
    R = rq.prompt.shape[0]
    by_priority = cfg[K.POLICY] == 1
    while k[NXT] < arrival_limit(cfg, k, R) and st.entry_ns[st.order[k[NXT]]] <= k[CLOCK]:
        r = st.order[k[NXT]]
        k[NXT] += 1
        k[S.O_ARRIVED] += 1
        if front_end_rejects(rq.prompt[r], rq.max_tokens[r], cfg[K.MML]):
            st.status[r] = S.REJECTED
            k[S.O_REJECTED] += 1
            # closed loop: the client's answer
            _answered_if(rq.features.extras, cfg, rq, st, k, r, st.entry_ns[r])
        elif by_priority:
            st.status[r] = S.WAITING
            k[WL] = _enqueue_sorted_if(rq.features.extras, r, q.wq, k[WH], k[WL], rq.priority, st.entry_ns)  # noqa: E501  # fmt: skip
        else:
            st.status[r] = S.WAITING
            q.wq[(k[WH] + k[WL]) % R] = r
            k[WL] += 1


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _adapt_cap(cfg, k):
    """Adaptive cap (``policies.py``, a named mitigation, not vLLM): every window,
    cut max_num_seqs on too many preemptions, otherwise recover additively."""
    if cfg[K.ADAPT_WINDOW] > 0 and k[STEPS] >= k[S.O_WINDOW_END]:
        k[S.O_SEQS] = adaptive_cap_next(
            k[S.O_SEQS], cfg[K.SEQS], k[N_RUN], k[S.O_PREEMPTIONS] - k[S.O_WINDOW_PRE],
            cfg[K.ADAPT_THRESHOLD], cfg[K.ADAPT_STEP],
        )  # fmt: skip
        k[S.O_WINDOW_PRE] = k[S.O_PREEMPTIONS]
        k[S.O_WINDOW_END] = k[STEPS] + cfg[K.ADAPT_WINDOW]


_adapt_cap_if = gated(_adapt_cap)


# A step's output tokens mostly share their gap since the previous token, so
# their histogram counts are batched: ``memo`` is (gap ns, its bin, tokens
# counted for it and not yet added to the histogram). Each loop that samples
# tokens starts from ``NO_GAPS`` and ends with ``_flush_gaps``.
NO_GAPS = (np.int64(-1), np.int64(0), np.int64(0))


@njit(cache=True, inline="always")
def _count_gap(g, ih, memo):
    """One token gap of ``g`` ns for the ITL histogram ``ih``
    (``planner.kernel.token_gaps``; vLLM bench's ITL,
    ``vllm/benchmarks/serve.py``), batched in ``memo``. Returns the new memo."""
    if g == memo[0]:
        return (memo[0], memo[1], memo[2] + 1)
    if memo[2] > 0:
        ih[memo[1]] += memo[2]
    return (g, gap_bin(g), np.int64(1))


@njit(cache=True, inline="always")
def _flush_gaps(ih, memo):
    """Add the memo's batched count to the ITL histogram ``ih``."""
    if memo[2] > 0:
        ih[memo[1]] += memo[2]


@njit(cache=True, inline="always")
def _token_gap(r, t, st, ih, memo):
    """An output token of r at t (ns): the gap since its previous token updates
    its largest gap and gap count and goes to the ITL histogram (``_count_gap``).
    Returns the new memo."""
    last = st.last_ns[r]
    st.last_ns[r] = t
    if last >= 0:
        g = t - last
        if g > st.max_gap_ns[r]:
            st.max_gap_ns[r] = g
        st.ngap[r] += 1
        memo = _count_gap(g, ih, memo)
    return memo


# ---- Decode fast path ------------------------------------------------------


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _head_blocked(r, ntok, c0, n_run, free, seqs, mnbt, thr, wm_blocks, gate, mml, bs):
    """Whether the waiting phase would refuse request ``r`` (the head) now.

    Used only by the decode fast path; the rules are the waiting phase's."""
    if n_run >= seqs:
        return True
    budget = mnbt - n_run
    if budget <= 0:
        return True
    num_new = ntok - c0
    if 0 < thr < num_new:
        num_new = thr
    if num_new > budget:
        num_new = budget
    wm = wm_blocks if n_run > 0 else 0
    if gate and blocks_for_tokens(ntok, mml, bs) + wm > free:
        return True
    return blocks_for_tokens(c0 + num_new, mml, bs) + wm > free


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _blocks_needed_after(n, run, n_run, ncomp, held, mml, bs):
    """New blocks the running decodes need over the next n steps."""
    total = 0
    for i in range(n_run):
        u = uidx(run[i])
        nb = blocks_for_tokens(ncomp[u] + n, mml, bs) - held[u]
        if nb > 0:
            total += nb
    return total


@njit(cache=True, inline="always")
def _decodes_one(u, ntok, async_, pro_rata, st):
    """Whether running request ``u`` (``ntok`` prompt + output tokens) takes
    exactly one plain decode token in the next step, the fast path's test per
    request: sync, one token not yet computed; async, its previous step's
    token in flight and nothing else; and with a pro-rata step time
    (``pro_rata``: roofline, measured) no re-decode of preempted output left,
    whose waste is only attributed step by step."""
    if async_:
        if st.ph[u] != 1 or st.infl[u] != 1 or st.ncomp[u] != ntok:
            return False
    elif ntok - st.ncomp[u] != 1:
        return False
    return not (pro_rata and st.hw[u] > st.ncomp[u])


@njit(cache=True, inline="always")
def _head_admitted(cfg, rq, st, k, head, hits, free):
    """Whether the waiting phase would admit the head ``head`` now, with
    ``hits`` of its blocks cached and in use and ``free`` free blocks
    (``_head_blocked`` under the config's flags)."""
    bs = cfg[K.BS]
    return not _head_blocked(
        head, rq.prompt[head] + st.nout[head], st.ncomp[head] + hits * bs, k[N_RUN], free,
        k[S.O_SEQS], cfg[K.MNBT], cfg[K.THR], cfg[K.WM_BLOCKS], cfg[K.GATE] != 0, cfg[K.MML], bs,
    )  # fmt: skip


@njit(cache=True, inline="always")
def _decode_scan(cfg, rq, st, q, k, hist, p):
    """The fast path's per-request test: every running request decodes exactly
    one token (async: has exactly the previous step's token in flight).
    Returns (steps until the first finish, blocks needed by the first step,
    cached tokens, projected blocks, whether first needs repeat every
    block_size steps, how prefix caching can be replayed:
    ``_cache_run_kind``), or a first element < 2 when no run is possible.
    Fills ``hist[j]``: requests whose first new block is needed j steps
    ahead."""
    bs, mml, admission = cfg[K.BS], cfg[K.MML], cfg[K.ADMISSION]
    async_ = cfg[K.ASYNC] != 0
    pro_rata = cfg[K.LAT_KIND] != LINEAR  # roofline, measured: waste is the step time pro rata
    stop_len = k[S.O_STOP_LEN]
    kf, need1, ctx0, proj, periodic, kind = INT64_MAX, 0, 0, 0, True, 1
    for j in range(bs + 1):
        hist[j] = 0
    for i in range(k[N_RUN]):
        r = q.run[i]
        u = uidx(r)
        ntok = rq.prompt[u] + st.nout[u]
        if not _decodes_one(u, ntok, async_, pro_rata, st):
            return 0, 0, 0, 0, False, 0
        f = min(rq.max_tokens[u] - st.nout[u], stop_len - ntok) - (1 if async_ else 0)
        # First of the next steps that needs a new block; then one every bs steps.
        j1 = st.held[u] * bs - st.ncomp[u] + 1
        if p is not None:  # prefix caching
            kind = _cache_run_kind(kind, r, j1 - 1, bs, rq, st, p)
            if kind == 0:
                return 0, 0, 0, 0, False, 0
        ctx0 += st.ncomp[u]
        if admission != VANILLA:
            proj += _projected_blocks_if(
                rq.features.extras, np.int64(r), admission, rq.prompt, rq.max_tokens, stop_len, mml,
                bs,
            )  # fmt: skip
        kf = min(kf, f)
        if j1 == 1:
            need1 += 1
        if 1 <= j1 <= bs:
            hist[j1] += 1
        else:
            periodic = False
    return kf, need1, ctx0, proj, periodic, kind


@njit(cache=True, inline="always")
def _decode_run_length(cfg, cfgf, rq, st, q, k, hist, head, next_entry, ih, p, to_finish):
    """How many upcoming steps are provably identical decode-only steps.

    They are when every running request decodes one token, the waiting head
    (``head``, or -1) stays refused (its admission test only gets harder as
    blocks are used), no request arrives that could become the head
    (``next_entry``, ns, or INT64_MAX when arrivals cannot matter) and no
    allocation fails. The run may end with the step in which the first
    requests finish. Async: the run ends before any request's last token is
    scheduled, so nothing finishes in it. Returns (steps, elapsed ns, duration
    of the first and of the last step, the largest token gap inside the run,
    blocks in use x step time summed over the run, the run's prefix-caching
    kind, ``_cache_run_kind``); steps < 2 means "take a normal step", and
    then ``ih`` is untouched; -1 also says that every running request
    decodes one token and the next step needs more new blocks than are free,
    so it preempts (``_preempting_step``). The run's token gaps are the same for every
    running request (sync: steps 1..n-1's durations; async: steps 0..n-2's,
    as tokens land at step starts), so each accepted step adds n_run gaps to
    the ITL histogram ``ih``; blocks in use grow by ``hist``'s first needs
    (periodic) or by ``_blocks_needed_after``. ``to_finish``: only a run
    that ends with the step in which the first requests finish (sync), else
    none (restart preemption once nothing can arrive, ``_decode_fast_path``)."""
    bs, mml, n_run, free = cfg[K.BS], cfg[K.MML], k[N_RUN], k[FREE]
    kf, need1, ctx0, proj, periodic, kind = _decode_scan(cfg, rq, st, q, k, hist, p)
    if need1 > free:  # the next step preempts (``_preempting_step``)
        return -1, 0, 0, 0, 0, 0, 0
    if kf < 2:
        return 0, 0, 0, 0, 0, 0, 0
    kmax = min(kf, min(cfg[K.MAX_STEPS], k[S.O_WINDOW_END]) - k[STEPS])
    if kmax < 2:
        return 0, 0, 0, 0, 0, 0, 0
    # With caching the head may hit up to h cached blocks in use (only those
    # lower its need: hits still in the free queue cost a free block each), so
    # it stays refused if it is refused with h such hits (``_admission_test``).
    h = 0
    if p is not None:  # prefix caching
        if head >= 0 and st.ncomp[head] == 0:
            nmax = PC.max_hit_blocks(st.nout[head] + rq.prompt[head], bs)
            if kind == 1:
                # No block of a shared key is hashed in the run and none leaves
                # use: the in-use hits of the head's lookup now can only fall.
                nhit, evictable = PC.lookup(head, nmax, bs, rq, p)
                h = nhit - evictable
            else:
                h = min(PC.shareable_blocks(head, bs, rq, p.pc[PC.LOOK]), nmax)
    if head >= 0 and _head_admitted(cfg, rq, st, k, head, h, free - need1 + h):
        # Projected admission can still refuse it; the projection is fixed
        # while nothing is admitted or finishes.
        admission = cfg[K.ADMISSION]
        if admission == VANILLA:
            return 0, 0, 0, 0, 0, 0, 0
        p_h = _projected_blocks_if(
            rq.features.extras, np.int64(head), admission, rq.prompt, rq.max_tokens,
            k[S.O_STOP_LEN], mml, bs,
        )  # fmt: skip
        if proj + p_h <= k[S.O_USABLE]:
            return 0, 0, 0, 0, 0, 0, 0
    if periodic:
        # Each request needs one block per bs steps: after q whole periods q*n
        # blocks are gone, and the (rem+1)-th smallest first-need step fails.
        cum, v = 0, bs
        for j in range(1, bs + 1):
            cum += hist[j]
            if cum > free % n_run:
                v = j
                break
        kmax = min(kmax, (free // n_run) * bs + v - 1)
    elif _blocks_needed_after(kmax, q.run, n_run, st.ncomp, st.held, mml, bs) > free:
        lo, hi = 1, kmax
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _blocks_needed_after(mid, q.run, n_run, st.ncomp, st.held, mml, bs) <= free:
                lo = mid
            else:
                hi = mid
        kmax = lo
    # Step j (from 0) decodes after ctx0 + n*j cached tokens; steps after the
    # first must start before the next relevant arrival and the horizon.
    limit = min(next_entry, cfg[K.HORIZON_NS])
    ip = cfg[K.B0 : K.B2 + 1]
    tab = rq.lat_tables[cfg[K.LAT_TABLE]]
    if to_finish and kmax != kf:
        return 0, 0, 0, 0, 0, 0, 0
    if periodic and cfg[K.LAT_KIND] == LINEAR:
        dt = _decode_step_ns(cfg, ip, cfgf, n_run, np.int64(0), tab, rq.features.extras)
        if dt > 0:
            used0 = k[S.O_USABLE] - free
            room = limit - k[CLOCK]
            return _linear_run(kmax, room, dt, n_run, used0, hist, bs, ih, kind, to_finish)
    if to_finish:
        n = _timed_run_length(kmax, limit, ctx0, n_run, ip, cfgf, tab, cfg, k, rq.features.extras)
        if n != kmax:
            return 0, 0, 0, 0, 0, 0, 0  # the clock's limit cuts it before the finish
    elapsed, first, n = 0, 0, 0
    prev, gmax, gbin, glast, used, kv_int = 0, 0, 0, -1, k[S.O_USABLE] - free, 0
    jb = 0  # (n mod bs) + 1: hist's slot of the requests needing a block in step n
    while n < kmax:
        if n > 0 and k[CLOCK] + elapsed >= limit:
            break
        kv = ctx0 + n_run * (n + 1)
        dt = _decode_step_ns(cfg, ip, cfgf, n_run, kv, tab, rq.features.extras)
        if n == 0:
            first = dt
        else:
            gap = prev if cfg[K.ASYNC] != 0 else dt
            if gap != glast:
                gbin, glast = gap_bin(gap), gap
            ih[gbin] += n_run
            gmax = max(gmax, gap)
        if periodic:
            jb = jb + 1 if jb < bs else 1
            used += hist[jb]
        else:
            used = k[S.O_USABLE] - free
            used += _blocks_needed_after(n + 1, q.run, n_run, st.ncomp, st.held, mml, bs)
        kv_int += used * dt
        elapsed += dt
        prev = dt
        n += 1
    if n < 2:
        return 0, 0, 0, 0, 0, 0, 0
    return n, elapsed, first, prev, gmax, kv_int, kind


# ``_decode_run_length`` as a function of its own, for the plain variant
# (``_decode_fast_path``); the same Python source.
_decode_run_length_apart = njit(cache=True, _nrt=False, no_cpython_wrapper=True)(
    _decode_run_length.py_func
)


@njit(cache=True, inline="always")
def _decode_step_ns(cfg, ip, cfgf, n_run, kv, tab, extras):
    """``step_time_ns`` of a decode-only step of ``n_run`` requests touching
    ``kv`` KV tokens (each request scheduled once: ``nreq`` = n_run), called
    with the argument types of ``_step_time``'s call, so Numba compiles one
    ``analytic_step_ns`` (three signatures of ``step_time_ns`` cost 1.35 CPU-s
    of a cold compile against 0.9 for one, 2026-12-06). ``extras``: the
    variant's marker (``_model_step_ns``)."""
    z = np.int64(0)
    return _model_step_ns(cfg[K.LAT_KIND], ip, cfgf, z, n_run, kv, kv, tab, z, z, n_run, extras)


_measured_step_ns_if = gated(measured_step_ns, 0)


@njit(cache=True, inline="always")
def _model_step_ns(kind, ip, fp, prefill, decode, attended, kv, tab, att_w, kv_w, nreq, extras):
    """``latency.step_time_ns`` (same arguments), its measured tables
    (``measured_step_ns``) compiled only into the variant whose marker
    ``extras`` is on (``variant.features_of``: a run with a ``MEASURED``
    config)."""
    if kind == MEASURED:
        return _measured_step_ns_if(extras, ip, fp, tab, prefill, decode, attended, kv)
    return analytic_step_ns(kind, ip, fp, prefill, decode, attended, kv, att_w, kv_w, nreq)


@njit(cache=True, inline="always")
def _timed_run_length(kmax, limit, ctx0, n_run, ip, cfgf, tab, cfg, k, extras):
    """The steps ``_decode_run_length``'s loop takes before the clock's
    ``limit`` (ns) or ``kmax``, from the step times alone (nothing written)."""
    elapsed, n = 0, 0
    while n < kmax:
        if n > 0 and k[CLOCK] + elapsed >= limit:
            break
        kv = ctx0 + n_run * (n + 1)
        elapsed += _decode_step_ns(cfg, ip, cfgf, n_run, kv, tab, extras)
        n += 1
    return n


@njit(cache=True, inline="always")
def _linear_run(kmax, room, dt, n_run, used0, hist, bs, ih, kind, to_finish):
    """``_decode_run_length``'s step loop in closed form, for the linear step
    time (every step of a decode run lasts ``dt`` ns: no term depends on the
    context) with periodic block needs. ``room``: ns from the clock to the
    limit (a step after the first must start before it). The run has
    n = min(kmax, max(1, ceil(room / dt))) steps; its n - 1 token gaps per
    running request are all ``dt``; blocks in use after step m are ``used0``
    plus the first m entries of ``hist``'s cycle 1..bs, summed in O(bs)
    (int64 arithmetic, so the integral equals the loop's bit for bit).
    With ``to_finish``, only a run of all ``kmax`` steps (none otherwise).
    Returns what ``_decode_run_length`` returns."""
    n = min(kmax, (room - 1) // dt + 1) if room > 0 else 1
    if n < 2 or (to_finish and n != kmax):
        return 0, 0, 0, 0, 0, 0, 0
    ih[gap_bin(dt)] += n_run * (n - 1)
    q, rem = n // bs, n % bs
    prefix, sum_prefix, sum_rem = 0, 0, 0  # P[x]; sum of P[0..bs-1]; of P[1..rem]
    for x in range(bs):
        sum_prefix += prefix
        prefix += hist[x + 1]
        if x + 1 <= rem:
            sum_rem += prefix
    total = prefix  # P[bs]: blocks taken per whole cycle
    floors = bs * q * (q - 1) // 2 + q * (rem + 1)  # sum of m // bs for m = 1..n
    used_sum = n * used0 + total * floors + q * sum_prefix + sum_rem
    return n, n * dt, dt, dt, dt, used_sum * dt, kind


@njit(cache=True, inline="always")
def _apply_decode_run(n, elapsed, first_dt, last_dt, gmax, cfg, rq, st, q, k, ih, p):
    """Advance every running request by n decode steps; finish those that stop
    at the end of step n. Async: the token in flight before the run lands at
    its start (a first token then counts at the clock), and one token is still
    in flight after it. Token gaps: a request's first token of the run closes
    the gap since its previous one (histogram ``ih``); the run's own gaps
    (largest ``gmax``) are already in ``ih``. Returns (blocks allocated,
    blocks freed, finished, blocks still held, recompute waste in ns)."""
    bs, mml, stop_len, n_run = cfg[K.BS], cfg[K.MML], k[S.O_STOP_LEN], k[N_RUN]
    share = cfg[K.B0] / n_run + cfg[K.B2]  # waste per re-decoded token (ns)
    clock = k[CLOCK]
    async_ = cfg[K.ASYNC] != 0
    used, alloc, freed, n_fin, waste = 0, 0, 0, 0, 0.0
    memo = NO_GAPS
    t_first = clock if async_ else clock + first_dt
    t_last = clock + elapsed - (last_dt if async_ else 0)
    for i in range(n_run):
        r = q.run[i]
        u = uidx(r)
        c0 = st.ncomp[u]
        w = min(c0 + n, st.hw[u]) - c0
        if w > 0:
            waste += w * share
        st.ncomp[u] = c0 + n
        st.nout[u] += n
        if st.first_ns[u] < 0:
            st.first_ns[u] = t_first
        # The run's own n - 1 gaps (largest gmax), and the gap before its first
        # token (``_token_gap``, read and written once here).
        last, ngap, max_gap = st.last_ns[u], st.ngap[u] + n - 1, max(st.max_gap_ns[u], gmax)
        if last >= 0:
            g = t_first - last
            max_gap = max(max_gap, g)
            ngap += 1
            memo = _count_gap(g, ih, memo)
        st.ngap[u], st.max_gap_ns[u], st.last_ns[u] = ngap, max_gap, t_last
        if c0 + n > st.hw[u]:
            st.hw[u] = c0 + n
        if c0 + n > st.held[u] * bs:
            nb = blocks_for_tokens(c0 + n, mml, bs)
            alloc += nb - st.held[u]
            st.held[u] = nb
        if st.nout[u] >= rq.max_tokens[u] or rq.prompt[u] + st.nout[u] >= stop_len:
            if p is not None:  # prefix caching (simulate_one passes no cache without it)
                freed += PC.release(r, st.held[u], p, np.bool_(False))
            else:
                freed += st.held[u]
            st.held[u] = 0
            st.status[u] = S.FINISHED
            st.finish_ns[u] = clock + elapsed
            _answered_if(rq.features.extras, cfg, rq, st, k, r, clock + elapsed)
            n_fin += 1
        else:
            used += st.held[u]
    _flush_gaps(ih, memo)
    return alloc, freed, n_fin, used, waste


@njit(cache=True, inline="always")
def _cache_run_kind(kind, r, a, bs, rq, st, p):
    """How a decode run's prefix caching can be replayed (``_replay_cache_run``),
    folded over the running requests from 1 (``_decode_scan``, before the run
    is measured): 0, it cannot (r's first taking or hash does not fall in the
    run's first bs steps); 1, the takings in step order and the hashes per
    request after them (every block a running request can hash next has a
    private key, ``PC.set_hash``); 2, both in step order (a request may hash a
    block with a shared key, as a multi-turn session's output is: appends to
    one key's list keep their order). For a request with c0 computed tokens,
    ``held`` blocks and ``ncached`` hashed ones, step j (from 0) computes
    token c0 + j + 1: a block is taken at j = a = held x bs - c0 (the scan's
    first need less one) and every bs steps after, and blocks are hashed
    from j = (ncached + 1) x bs - c0 - 1, every bs steps after."""
    c = (p.ncached[r] + 1) * bs - st.ncomp[r] - 1
    if not (0 <= a < bs and 0 <= c < bs):
        return 0
    n_req, maxb = p.slot_of.shape[0], p.table.shape[1]
    # keys only turn private along a request's blocks (``PC.block_key``)
    if kind == 1 and PC.block_key(r, p.ncached[r], bs, rq, n_req, maxb, p.pc[PC.LOOK]) >= (
        n_req * maxb
    ):
        return 2
    return kind


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _replay_cache_run(n, kind, cfg, rq, st, q, k, p, offs, ev):
    """Prefix caching over an n-step decode run of ``_cache_run_kind`` kind
    (1 or 2), with the result of the one-by-one engine
    (``_schedule_running``: per step, per running request in order,
    ``allocate_slots`` first takes a new block from the free queue's front
    when the next token needs one, then hashes the blocks its tokens have
    filled, ``cache_blocks``). A counting sort by phase j mod bs (``offs``,
    (bs + 1,) int64; ``ev``, (2 x n_run,) int32 holding 2r + e, e 0 a taking,
    1 a hash, in running order) lets each step touch only its own events
    (``_run_cache_events``). Kind 1 sorts only the takings: a hash touches
    only its request's own blocks, which no taking reaches, and appends to no
    list another request appends to, so the hashes are written per request
    after (``PC.cache_blocks``). Updates the prefix cache only:
    ``_apply_decode_run`` then moves the requests' counters."""
    bs, n_run = cfg[K.BS], k[N_RUN]
    for j in range(bs + 1):
        offs[j] = 0
    for i in range(n_run):
        u = uidx(q.run[i])
        offs[st.held[u] * bs - st.ncomp[u] + 1] += 1
        if kind == 2:
            offs[(p.ncached[u] + 1) * bs - st.ncomp[u]] += 1
    for j in range(bs):
        offs[j + 1] += offs[j]
    for i in range(n_run):  # a stable placement: running order within a phase
        r = q.run[i]
        u = uidx(r)
        a = st.held[u] * bs - st.ncomp[u]
        ev[offs[a]] = 2 * r
        offs[a] += 1
        if kind == 2:
            c = (p.ncached[u] + 1) * bs - st.ncomp[u] - 1
            ev[offs[c]] = 2 * r + 1
            offs[c] += 1
    for j in range(bs, 0, -1):  # offs[j] was the end of phase j: shift back to starts
        offs[j] = offs[j - 1]
    offs[0] = 0
    _run_cache_events(n, bs, rq, st, p, offs, ev)
    if kind == 1:
        for i in range(n_run):  # hash what each request's run fills
            r = q.run[i]
            PC.cache_blocks(r, st.ncomp[r] + n, bs, rq, p)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _run_cache_events(n, bs, rq, st, p, offs, ev):
    """The events ``_replay_cache_run`` sorted, step by step. A taking is
    ``get_new_blocks(1)``: the free queue's front block, its old hash dropped
    (``PC.drop_hash``). Nothing rejoins the free queue during a run, so the
    takings are its first blocks in order, and its head moves once. A hash is
    ``cache_blocks`` of the one block just filled (``PC.set_hash``). The
    cache's counters are updated once for the run. The bodies restate
    ``PC.get_new_blocks`` and ``PC.cache_blocks`` on purpose: calls with the
    whole record cost more than the work."""
    n_req, maxb = p.slot_of.shape[0], p.table.shape[1]
    private = n_req * maxb
    ref = p.ref
    hkey, hnext, hprev = p.hkey, p.hnext, p.hprev
    tkey, thead, ttail = p.tkey, p.thead, p.ttail
    fq, mask = p.fq, p.fq.shape[0] - 1
    c = p.pc[PC.FQ_HEAD]
    taken = 0
    for j in range(n):
        ph = j % bs
        for e in range(offs[ph], offs[ph + 1]):
            r = ev[e] >> 1
            u = uidx(r)
            s = p.slot_of[u]
            if ev[e] & 1 == 0:
                c = PC.fq_next_live(c, fq)
                b = fq[uidx(c & mask)]
                c += 1
                if hkey[uidx(b)] != -1:
                    PC.drop_hash(b, hkey, hnext, hprev, tkey, thead, ttail)
                ref[uidx(b)] = 1
                p.table[s, st.held[u] + (j - ph) // bs] = b
                taken += 1
            else:
                jb = (st.ncomp[u] + j + 1) // bs - 1  # the block just filled
                key = PC.block_key(r, jb, bs, rq, n_req, maxb, p.pc[PC.LOOK])
                PC.set_hash(p.table[s, jb], key, private, hkey, hnext, hprev, tkey, thead, ttail)
                p.ncached[u] = jb + 1
    p.pc[PC.FQ_HEAD] = c
    p.pc[PC.FREE_LEN] -= taken
    p.pc[PC.IN_USE] += taken
    p.pc[PC.REFS] += taken


@njit(cache=True, inline="always")
def _next_step_needs(hist, n, n_run, bs):
    """New blocks the step after an n-step decode run needs, from the run's
    ``hist`` (``_decode_scan``: requests whose first new block is needed j
    steps ahead) when every running request is in it (periodic needs: one
    block each every bs steps, so step n + 1 is slot (n mod bs) + 1); -1
    when not, or when bs is past the fast path's histogram."""
    if bs >= hist.shape[0]:
        return -1
    total = 0
    for j in range(1, bs + 1):
        total += hist[j]
    return hist[n % bs + 1] if total == n_run else -1


@njit(cache=True, inline="always")
def _check_decode_invariants(cfg, rq, st, q, k, p, used, check):
    """After a decode run or step taken at once (with ``check``): the pool's
    invariants with prefix caching (``_check_invariants``), else blocks held
    by running requests (``used``) + free = usable; a failure counts in
    ``O_INVARIANT_ERRORS``."""
    if p is not None:
        if check:
            _check_invariants(cfg, st, q, k, p, _mamba_groups_if(rq.features.heavy, cfg))
    elif check and used + k[FREE] != k[S.O_USABLE]:
        k[S.O_INVARIANT_ERRORS] += 1


@njit(cache=True, inline="always")
def _preempting_precheck(run, n_run, free, st, bs, mml, caching):
    """Whether the next step (every running request decoding one token) is a
    step ``_preempting_step`` takes: it preempts (its blocks needed exceed
    the free ones), no request is at max_model_len - 1 tokens (its token
    would be cut to 0), and the head of ``running`` is scheduled (otherwise
    nothing is, and the step is an empty one the engine takes one by one):
    it needs no block, or one is free, or (without prefix caching, where a
    victim frees all it holds) the others hold one. O(len(running)), no
    writes."""
    need, others = 0, 0
    for i in range(n_run):
        u = uidx(run[i])
        c0 = st.ncomp[u]
        if c0 + 2 > mml:
            return False
        need += c0 + 1 > st.held[u] * bs
        if i > 0:
            others += st.held[u]
    if need <= free:
        return False
    u = uidx(run[0])
    if st.ncomp[u] + 1 > st.held[u] * bs and free < 1:
        return not caching and others > 0
    return True


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _preempting_step(cfg, cfgf, rq, st, q, o, sc, p, check):
    """One decode step that preempts, taken at once (sync, FCFS recompute
    preemption, with or without prefix caching; the caller knows every
    running request decodes exactly one token, ``_decode_scan``). Returns
    whether it did (``_preempting_precheck``); the result is the one-by-one
    engine's step: the running phase (``_schedule_running``: in order, a
    request at a block boundary takes a block, and when none is free the
    tail is preempted, ``_evict`` and ``_requeue``, until one is or the
    request is the tail; with prefix caching ``get_new_blocks`` then ``cache_blocks``
    per request, in the same order); no waiting phase, as a step that
    preempts admits nothing (``Scheduler.schedule``); the survivors' decode
    step (``_step_time``), ``_update_after_schedule`` (recompute waste,
    high-water mark) and ``_update_from_output`` (a token each, token gaps,
    finishes), in the same order and arithmetic. Survivors decode, so the
    livelock detector sees progress (``after_fast_path``, as after a run)."""
    k = o.counters
    bs, n_run = cfg[K.BS], k[N_RUN]
    if not _preempting_precheck(q.run, n_run, k[FREE], st, bs, cfg[K.MML], p is not None):
        return False
    free, n, i, kv = k[FREE], n_run, 0, 0
    while i < n:
        r = q.run[i]
        u = uidx(r)
        c0 = st.ncomp[u]
        need = 1 if c0 + 1 > st.held[u] * bs else 0
        if need > free:
            gone = False
            k[FREE] = free
            while need > k[FREE] and not gone:
                n -= 1
                v = q.run[n]
                _evict(cfg, v, st, k, sc.step, p, _mamba_groups_if(rq.features.heavy, cfg))
                _requeue(cfg, rq, st, q, k, v)
                gone = v == r
            free = k[FREE]
            if gone:
                break
        free -= need
        if p is not None:  # prefix caching: the new block, then the filled ones hashed
            upto = min(c0 + 1, PC.hashed_tokens(rq.prompt[u] + st.nout[u], p))
            if need > 0 or upto >= (p.ncached[u] + 1) * bs:
                if need > 0:
                    PC.get_new_blocks(1, p.slot_of[u], np.int64(st.held[u]), p)
                PC.cache_blocks(r, upto, bs, rq, p)
        st.held[u] += need
        kv += c0 + 1
        i += 1
    n_sched, n_pre = i, n_run - n
    k[N_RUN] = n
    k[FREE] = free
    # _step_time
    ip = cfg[K.B0 : K.B2 + 1]
    tab = rq.lat_tables[cfg[K.LAT_TABLE]]
    dt = _decode_step_ns(cfg, ip, cfgf, n_sched, kv, tab, rq.features.extras)
    start = k[CLOCK]
    clock = start + dt
    k[CLOCK] = clock
    k[S.O_BUSY_NS] += dt
    k[STEPS] += 1
    k[S.O_MACRO_STEPS] += 1
    k[S.O_PREEMPT_STEPS] += 1
    k[S.O_DECODE_TOKENS] += n_sched
    k[S.O_PREEMPTIONS] += n_pre
    k[S.O_MIN_FREE] = min(k[S.O_MIN_FREE], free)
    # _update_after_schedule, then _update_from_output
    o.floats[S.F_KV_BLOCK_NS] += (k[S.O_USABLE] - free) * dt
    linear = cfg[K.LAT_KIND] == LINEAR
    for i in range(n_sched):
        u = uidx(q.run[i])
        c0 = st.ncomp[u]
        w = min(c0 + 1, st.hw[u]) - c0
        if w > 0:  # ``_update_after_schedule``'s waste with n = 1 token (w / n is w)
            if linear:
                o.floats[S.F_WASTE_NS] += (cfg[K.B0] / n_sched) * w + cfg[K.B2] * w
            else:
                o.floats[S.F_WASTE_NS] += dt * w / n_sched
        st.hw[u] = max(st.hw[u], c0 + 1)
        st.ncomp[u] = c0 + 1
        if st.sched_ns[u] < 0:
            st.sched_ns[u] = start
    memo = NO_GAPS
    n_fin, used, stop_len = 0, 0, k[S.O_STOP_LEN]
    for i in range(n_sched):
        r = q.run[i]
        u = uidx(r)
        st.nout[u] += 1
        if st.first_ns[u] < 0:
            st.first_ns[u] = clock
        memo = _token_gap(r, clock, st, o.itl_hist, memo)
        if st.nout[u] >= rq.max_tokens[u] or rq.prompt[u] + st.nout[u] >= stop_len:
            freed = st.held[u]
            if p is not None and p.slot_of[u] >= 0:  # ``_finish``
                freed = PC.release(r, st.held[u], p, np.bool_(False))
            k[FREE] += freed
            st.held[u] = 0
            _finish_later(r, clock, cfg, rq, st, k)
            n_fin += 1
        else:
            used += st.held[u]
    _flush_gaps(o.itl_hist, memo)
    if n_fin > 0:
        k[N_RUN] = _drop_finished(q.run, n, st.status)
        k[S.O_FINISHED] += n_fin
    _check_decode_invariants(cfg, rq, st, q, k, p, used, check)
    return True


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _decode_fast_path(cfg, cfgf, rq, st, q, o, sc, p, check):
    """Jump over a run of identical decode-only steps when one is provable
    (``_decode_run_length``). Returns whether it did; the result is the same
    as taking the steps one by one (tests compare both). With prefix caching
    the run's block allocations and hashes are replayed in step order
    (``_replay_cache_run``)."""
    hist = sc.hist
    k = o.counters
    n_run = k[N_RUN]
    # A decode step that preempts is taken at once (``_preempting_step``)
    # under sync scheduling and FCFS recompute preemption; others step one
    # by one.
    preempts = cfg[K.ASYNC] == 0 and cfg[K.PREEMPT] == 0 and cfg[K.POLICY] == 0
    preempts = preempts and cfg[K.VICTIM] == YOUNGEST and cfg[K.ANTI_STARVATION] == 0
    preempts = preempts and 0 < n_run <= cfg[K.MNBT]
    if sc.step[NO_RUN_NEXT] != 0:  # the last run ended before a failing allocation
        sc.step[NO_RUN_NEXT] = 0
        n, elapsed, first_dt, last_dt, gmax, kv_int, kind = -1, 0, 0, 0, 0, 0, 0
        ih = o.itl_hist
    else:
        if not 0 < n_run <= cfg[K.MNBT] or cfg[K.BS] > S.FAST_PATH_MAX_BLOCK_SIZE:
            return False
        if cfg[K.ASYNC] != 0 and (k[S.O_N_PEND] != n_run or k[S.O_N_STALE] != 0):
            return False
        R = rq.prompt.shape[0]
        nxt = k[NXT]
        # Restart preemption discards outputs, so decodes are not progress: once
        # nothing can arrive, the livelock detector counts quiet steps and takes
        # snapshots (cycle.py). A run that ends with a finish is still exact: no
        # state inside it can repeat an earlier one (the finish would never come),
        # and the finish resets the detector as after_fast_path does. Async runs
        # end before any finish, so they are not taken then.
        to_finish = cfg[K.PREEMPT] == 1 and not (nxt < arrival_limit(cfg, k, R) or may_receive(k))
        if to_finish and cfg[K.ASYNC] != 0:
            return False
        # The run stops before an arrival that can become the head (nothing waits,
        # or priority order), and in any case before the last arrival: that one
        # starts the livelock detector (cycle.py), which must see it at the step
        # the one-by-one engine does. Closed loop: before any arrival (each can be
        # the last before the gate closes).
        next_entry = INT64_MAX
        if nxt < arrival_limit(cfg, k, R):
            arrivals_matter = k[WL] == 0 or cfg[K.POLICY] == 1 or cfg[K.CONC] != 0
            last = arrival_limit(cfg, k, R) - 1
            next_entry = st.entry_ns[st.order[nxt if arrivals_matter else last]]
        if routing_open(k):  # the router reads this replica's state at its next send
            next_entry = min(next_entry, k[S.O_ROUTE_UNTIL])
        head = q.wq[k[WH]] if k[WL] > 0 else -1
        if (
            p is None
            and head >= 0
            and cfg[K.ADMISSION] == VANILLA
            and _head_admitted(cfg, rq, st, k, head, 0, k[FREE] - n_run)
        ):
            # The head is admitted even if every running request takes a block
            # this step (``_head_blocked`` only refuses for fewer free blocks), so
            # ``_decode_run_length`` would fail at its head test after scanning
            # every running request: most failed attempts of S1's grid (0.65 M
            # of 0.70 M in its ok configs, 0.53 M of 1.4 M in its churning ones).
            return False
        ih = o.itl_hist
        if p is None:  # the plain variant: compiled apart (1.1 CPU-s less to compile cold)
            n, elapsed, first_dt, last_dt, gmax, kv_int, kind = _decode_run_length_apart(
                cfg, cfgf, rq, st, q, k, hist, head, next_entry, ih, p, to_finish
            )
        else:  # prefix caching: inlined (as a call, the S1 caching grid took 4% longer)
            n, elapsed, first_dt, last_dt, gmax, kv_int, kind = _decode_run_length(
                cfg, cfgf, rq, st, q, k, hist, head, next_entry, ih, p, to_finish
            )
    if n < 2:  # -1: every request decodes one token and the step preempts
        return n == -1 and preempts and _preempting_step(cfg, cfgf, rq, st, q, o, sc, p, check)
    need_next = _next_step_needs(hist, n, n_run, cfg[K.BS])  # before the replay reuses hist
    if p is not None:
        _replay_cache_run(n, kind, cfg, rq, st, q, k, p, hist, sc.cache_ev)
    alloc, freed, n_fin, used, w = _apply_decode_run(
        n, elapsed, first_dt, last_dt, gmax, cfg, rq, st, q, k, ih, p
    )
    o.floats[S.F_WASTE_NS] += w
    o.floats[S.F_KV_BLOCK_NS] += kv_int
    k[FREE] -= alloc
    k[S.O_MIN_FREE] = min(k[S.O_MIN_FREE], k[FREE])
    k[FREE] += freed
    # No request finished and the next step needs more new blocks than are
    # free: the next step preempts (``_decode_run_length``: need1 > free;
    # nothing before it changes the running requests or the pool), so its
    # scan is skipped (S1's 4,096-config grid: 0.77 M of the churning
    # configs' 2.2 M failed attempts, each a scan of every running request).
    sc.step[NO_RUN_NEXT] = n_fin == 0 and need_next > k[FREE]
    k[S.O_DECODE_TOKENS] += n * n_run
    k[CLOCK] += elapsed
    if n_fin > 0:
        k[N_RUN] = _drop_finished(q.run, n_run, st.status)
        k[S.O_FINISHED] += n_fin
    k[S.O_BUSY_NS] += elapsed
    k[STEPS] += n
    k[S.O_MACRO_STEPS] += n
    _check_decode_invariants(cfg, rq, st, q, k, p, used, check)
    return True


# ---- Speculative decoding (``planner.speculative``) -----------------------


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _drafts(st, u):
    """Draft tokens pending for request u (``len(request.spec_token_ids)``:
    ``num_tokens_with_spec`` counts them in ``Scheduler.schedule``'s running
    phase); -1 (after a non-final prefill chunk) counts as none."""
    return max(st.spec[u], 0)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _padded(cfg, q, st, s, c0, n_run_sched):
    """``Scheduler.schedule``'s waiting phase, ``pad_spec_decode``: a waiting
    request with exactly one token left (its c0 computed ones include
    prefix-cache hits) is padded to 1 + k tokens (k invalid drafts) when no
    running request scheduled this step was mid-prefill
    (``prefill_scheduled``) and some running request was scheduled
    (``scheduled_running_reqs``, the first ``n_run_sched`` of ``slist``) or c0
    > 0, if c0 + 1 + k + 1 <= max_model_len. Returns the tokens to schedule
    (1 or 1 + k), or -1 when the padded count exceeds the budget (vLLM then
    ends the waiting phase)."""
    kk = cfg[K.SPEC_K]
    if n_run_sched == 0 and c0 == 0:
        return 1
    for j in range(n_run_sched):
        if st.spec[q.slist[j]] < 0:  # ``request.is_prefill_chunk``
            return 1
    if c0 + 1 + kk + 1 > cfg[K.MML]:
        return 1
    return -1 if 1 + kk > s[BUDGET] else 1 + kk


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _drafts_scheduled(cfg, st, u, c1, known):
    """At ``_update_after_schedule``: the draft positions s this chunk (ending
    at c1 computed tokens, ``known`` tokens known before it) scheduled
    (``scheduled_spec_decode_tokens``) and the real drafts d among them (a
    padded request's are invalid), returned as 32 s + d; then the request's
    drafts for its next step: k if it samples (``update_draft_token_ids``;
    async: ``AsyncScheduler._update_after_schedule``'s placeholders), none
    after a prefill chunk (-1, ``is_prefill_chunk``)."""
    s = max(c1 - known, 0)
    d = min(max(st.spec[u], 0), s)
    st.spec[u] = cfg[K.SPEC_K] if c1 >= known else -1
    return s * 32 + d


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _update_from_output_spec(cfg, rq, st, q, o, s, p, x):
    """``Scheduler.update_from_output`` (sync) with speculative decoding. A
    request whose chunk reached its known tokens verifies the d real drafts
    of its s draft positions (``_drafts_scheduled``):
    ``speculative.accepted_drafts`` gives a leading run a of them; the s - a
    rejected ones leave ``num_computed_tokens``, a + 1 tokens are appended
    with ``check_stop`` after each (the rest trimmed,
    ``_update_request_with_output``), its verified full blocks are hashed
    (``kv_cache_manager.cache_blocks`` on num_computed_tokens) and a finished
    request is freed. The step's tokens land together: one token gap (vLLM
    bench's ITL counts one per streamed chunk). Rejected positions do not
    raise the high-water mark of recompute waste."""
    k = o.counters
    clock, bs = k[CLOCK], cfg[K.BS]
    thr = cfg[K.SPEC_T : K.SPEC_T + MAX_SPEC_TOKENS]
    memo = NO_GAPS
    for j in range(s[N_SCHED]):
        r = q.slist[j]
        u = uidx(r)
        if st.ncomp[u] < rq.prompt[u] + st.nout[u]:
            continue  # a prefill chunk: it samples nothing
        code = q.sspec[j]
        extra = code >> 5
        a = accepted_drafts(cfg[K.SPEC_SEED], r, st.nout[u], code & 31, thr)
        st.ncomp[u] -= extra - a
        st.hw[u] = max(st.ncomp[u], st.hw[u] - (extra - a))
        if st.first_ns[u] < 0:
            st.first_ns[u] = clock
        memo = _token_gap(r, clock, st, o.itl_hist, memo)
        done = False
        for t in range(a + 1):
            st.nout[u] += 1
            if st.nout[u] >= rq.max_tokens[u] or rq.prompt[u] + st.nout[u] >= k[S.O_STOP_LEN]:
                st.ncomp[u] -= a - t
                done = True
                break
        if p is not None:  # prefix caching
            if st.ncomp[u] >= (p.ncached[u] + 1) * bs:
                PC.cache_blocks(r, st.ncomp[u], bs, rq, p)
        if done:
            k[FREE] += _finish_or_hold(r, clock, cfg, rq, st, k, p, x)
            s[N_FIN] += 1
            _log(o.events, k, k[STEPS] - 1, r, 0, S.EV_FINISH)
    _flush_gaps(o.itl_hist, memo)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _lookahead(cfg):
    """vLLM's ``num_lookahead_tokens`` (``SPEC_LA``): KV slots ``allocate_slots``
    reserves past the scheduled tokens for a drafter (EAGLE, MTP); 0 n-gram."""
    return cfg[K.SPEC_LA]


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _draft_step_ns(cfg, cfgf, s):
    """The drafter's time in this step (``latency.draft.draft_ns``: EAGLE,
    EAGLE-3, MTP), 0 for n-gram and without speculative decoding."""
    if cfg[K.SPEC_LA] == 0:
        return 0
    tokens = s[PREFILL] + s[DECODE]
    return draft_ns(cfgf, cfg[K.SPEC_K], tokens, s[N_SCHED], s[ATTENDED], s[KV_TOUCHED])


_lookahead_if = gated(_lookahead, 0)
_draft_step_ns_if = gated(_draft_step_ns, 0)
_drafts_if = gated(_drafts, 0)
_drafts_scheduled_if = gated(_drafts_scheduled, 0)
_padded_if = gated(_padded, 1)
_update_from_output_spec_if = gated(_update_from_output_spec)


# ---- schedule(): the running phase -----------------------------------------


@njit(cache=True, inline="always")
def _is_decode(n, c0, known, pend):
    """Whether a chunk of n tokens after c0 computed ones (``known`` tokens
    known) is priced as decode: S1-exact's convention, the one last token,
    with the draft tokens verified after it under speculative decoding (each
    of its n tokens then counts as a decode token, ``_add_to_batch``; without
    drafts n is 1 whenever c0 == known - 1); compat blis (``pend`` = the
    prompt's length, else -1): the chunk starts past the prompt
    (``BlackboxLatencyModel.StepTime``, ``sim/latency/latency.go``:
    ProgressIndex >= len(InputTokens); docs/blis-compat.md, rule 6)."""
    if pend >= 0:
        return c0 >= pend
    return c0 == known - 1


@njit(cache=True, inline="always")
def _attention(n, c0, win):
    """The roofline's attention work of a chunk of n tokens after c0 computed
    ones: (query, key) pairs and KV tokens touched. Full attention (``win``
    0): n*c0 + n(n+1)/2 pairs, c0 + n tokens. A sliding window of ``win``
    tokens: query c0 + i (i = 1..n) attends min(c0 + i, win) keys, and the
    chunk reads the union of its windows, min(c0 + n, n + win - 1) tokens
    (a modelling choice, not a vLLM rule: vLLM's kernels skip keys outside
    the window)."""
    if win == 0:
        return n * c0 + n * (n + 1) // 2, c0 + n
    k = min(max(win - c0, 0), n)  # queries whose window reaches token 0
    return k * c0 + k * (k + 1) // 2 + (n - k) * win, min(c0 + n, n + win - 1)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _priced_window(cfg):
    """The window of the main attention sums: the sliding window when every
    layer slides; 0 for full attention and for a hybrid, whose full layers
    attend everything (its sliding layers are summed apart, ``K.PRICE_WIN2``)."""
    return cfg[K.SW] if cfg[K.GROUPS_FULL] == 0 else 0


@njit(cache=True, inline="always")
def _add_to_batch(r, num_new, c0, known, q, s, pend, win, win2):
    """Put r in this step's batch with num_new tokens after c0 computed ones
    (``known`` tokens known), priced as ``_is_decode`` says (``pend``), its
    attention work as ``_attention`` says (``win``: the sliding window, 0 for
    full attention; ``win2`` > 0: also bounded by that window, for a hybrid's
    sliding layers, ``K.PRICE_WIN2``). A 0-token entry (compat blis: a fully
    cached prompt) samples its first token without being priced."""
    q.sched_tok[r] = num_new
    q.slist[s[N_SCHED]] = r
    s[N_SCHED] += 1
    s[BUDGET] -= num_new
    if num_new == 0:
        return
    if _is_decode(num_new, c0, known, pend):
        s[DECODE] += 1 if pend >= 0 else num_new
    else:
        s[PREFILL] += num_new
    pairs, kv = _attention(num_new, c0, win)
    s[ATTENDED] += pairs
    s[KV_TOUCHED] += kv
    if win2 > 0:
        pairs, kv = _attention(num_new, c0, win2)
        s[ATTENDED_W] += pairs
        s[KV_W] += kv


@njit(cache=True, inline="always")
def _unschedule(v, rq, st, q, s, pend, win, win2):
    """A victim that already ran this step gives its tokens back (async may have
    skipped it: then it is not in the batch); ``pend`` as ``_is_decode``,
    ``win`` as ``_add_to_batch``."""
    m = 0
    for j in range(s[N_SCHED]):
        if q.slist[j] != v:
            q.slist[m] = q.slist[j]
            m += 1
    if m == s[N_SCHED]:
        return
    s[N_SCHED] = m
    n = q.sched_tok[v]
    c0 = st.ncomp[v]
    s[BUDGET] += n
    if n == 0:
        return
    if _is_decode(n, c0, rq.prompt[v] + st.nout[v] + st.ph[v], pend):
        s[DECODE] -= 1 if pend >= 0 else n
    else:
        s[PREFILL] -= n
    pairs, kv = _attention(n, c0, win)
    s[ATTENDED] -= pairs
    s[KV_TOUCHED] -= kv
    if win2 > 0:
        pairs, kv = _attention(n, c0, win2)
        s[ATTENDED_W] -= pairs
        s[KV_W] -= kv


@njit(cache=True, inline="always")
def _evict(cfg, v, st, k, s, p, mamba):
    """Free victim v's KV. Recompute (``Scheduler._preempt_request``): free its
    blocks, num_computed_tokens = 0; restart (BLIS, a named option) also drops
    its outputs (compat blis frees in BLIS's order, ``PC.free_blocks``); swap
    (``policies.py``, a named option) moves the KV to the CPU tier when it
    fits there, keeping num_computed_tokens."""
    h = st.held[v]
    st.npre[v] += 1
    st.status[v] = S.WAITING
    st.spec[v] = 0  # ``_preempt_request`` drops its drafts
    if cfg[K.PREEMPT] == 2 and 0 < h <= k[S.O_CPU_FREE]:
        k[FREE] += h  # st.held[v] now counts CPU blocks
        k[S.O_CPU_FREE] -= h
        s[SWAP_NS] += h * cfg[K.SWAP_NS_PER_BLOCK]
        return
    if p is not None:
        PC.publish(v, h, p)  # its lookup at re-admission may hit its own blocks
        k[FREE] += PC.release(v, h, p, cfg[K.COMPAT] != 0)
    else:
        k[FREE] += _pool_blocks(cfg, st, v, mamba)
    st.held[v] = 0
    st.skip[v] = 0
    st.koff[v] = 0
    st.ncomp[v] = 0
    if cfg[K.PREEMPT] == 1:
        st.nout[v] = 0


@njit(cache=True, inline="always")
def _requeue(cfg, rq, st, q, k, v):
    """Victim v, evicted (``_evict``), back in ``waiting``: at its front
    (FCFS) or in priority order (``Scheduler._preempt_request``). Async: its
    output still in flight becomes stale (delivered, but it no longer
    advances the request's counters)."""
    if st.infl[v] > 0 and st.stale[v] == 0:
        k[S.O_N_STALE] += 1
    elif st.infl[v] == 0 and st.stale[v] > 0:
        k[S.O_N_STALE] -= 1
    st.stale[v] = st.infl[v]
    st.ph[v] = 0
    if cfg[K.POLICY] == 1:
        k[WL] = _enqueue_sorted_if(rq.features.extras, v, q.wq, k[WH], k[WL], rq.priority, st.entry_ns)  # noqa: E501  # fmt: skip
    else:
        R = rq.prompt.shape[0]
        k[WH] = (k[WH] - 1 + R) % R
        q.wq[k[WH]] = v
        k[WL] += 1


@njit(cache=True, inline="always")
def _preempt_one(cfg, rq, st, q, o, s, p, i, r):
    """Preempt one request to make room for ``running[i]`` = r. FCFS: the tail
    of ``running``; priority: the largest (priority, arrival); other victims:
    ``policies.py``. The victim is prepended to ``waiting``
    (``Scheduler._preempt_request``). Returns (the index of r's successor
    position, whether r itself was the victim)."""
    k = o.counters
    R = rq.prompt.shape[0]
    if cfg[K.VICTIM] == YOUNGEST and cfg[K.ANTI_STARVATION] == 0:
        vi = k[N_RUN] - 1  # vLLM's FCFS victim, the tail (``pick_victim``'s answer)
    else:  # a mitigation or priority scheduling: the extras variant
        vi = _pick_victim_if(
            rq.features.extras, q.run, k[N_RUN], cfg[K.VICTIM], cfg[K.ANTI_STARVATION],
            st.npre, st.ncomp, st.held, rq.priority, st.entry_ns,
        )  # fmt: skip
    v = q.run[vi]
    if vi < i:
        i -= 1
        _unschedule(
            v,
            rq,
            st,
            q,
            s,
            rq.prompt[v] if cfg[K.COMPAT] != 0 else -1,
            _priced_window(cfg),
            cfg[K.PRICE_WIN2],
        )
    for j in range(vi, k[N_RUN] - 1):
        q.run[j] = q.run[j + 1]
    k[N_RUN] -= 1
    _evict(cfg, v, st, k, s, p, _mamba_groups_if(rq.features.heavy, cfg))
    _requeue(cfg, rq, st, q, k, v)
    s[N_PRE] += 1
    _log(o.events, k, k[STEPS], v, 0, S.EV_PREEMPT)
    alone = k[N_RUN] == 0 and k[WL] == 1 and k[NXT] >= arrival_limit(cfg, k, R)
    alone = alone and k[S.O_HOLD_LEN] == 0
    if v == r and alone and not may_receive(k):
        # Alone in the system with nothing left to arrive: the state after this
        # preemption repeats the last one => a cycle.
        vt = rq.prompt[v] + st.nout[v]
        if k[S.O_LONE_R] == v and k[S.O_LONE_NTOK] == vt:
            s[CYCLE] = 1
        k[S.O_LONE_R] = v
        k[S.O_LONE_NTOK] = vt
    return i, v == r


@njit(cache=True, inline="always")
def _skipped_blocks(cfg, processed):
    """``SlidingWindowManager.get_num_skipped_tokens`` in whole blocks: the
    blocks before the window of the token after ``processed`` tokens,
    max(0, processed - window + 1) // block_size."""
    return max(0, processed - cfg[K.SW] + 1) // cfg[K.BS]


@njit(cache=True, inline="always")
def _remove_skipped_blocks(cfg, st, r, p):
    """Sliding window: ``SlidingWindowManager.remove_skipped_blocks``
    (``vllm/v1/core/single_type_kv_cache_manager.py``), which
    ``KVCacheManager.allocate_slots`` calls before it counts a running
    request's new blocks (even when the allocation then fails). Tokens before
    the window of the next token, max(0, processed - window + 1) with
    processed = num_computed_tokens - num_in_flight_tokens
    (``get_num_skipped_tokens``), skip their whole blocks (at most the
    table's length); the newly skipped ones become null blocks and return to
    the pool, in each sliding-window group (the same entries of every such
    group's table; with prefix caching blocks other requests hold stay in
    use, ``PC.drop_window``). Returns the blocks back in the pool."""
    skipped = min(_skipped_blocks(cfg, st.ncomp[r] - st.infl[r]), st.held[r])
    if skipped <= st.skip[r]:
        return 0
    lo = st.skip[r]
    st.skip[r] = skipped
    if p is not None:  # prefix caching
        return PC.drop_window(r, lo, skipped, p)
    return (skipped - lo) * cfg[K.GROUPS_SW]


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _pool_blocks(cfg, st, r, mamba):
    """Pool blocks request r holds without prefix caching: its table's length
    in every KV cache group, less the null blocks of the sliding-window
    groups (``KVCacheCoordinator``: one table per group, one pool), plus one
    block per Mamba group while it holds any (``MambaManager``, mode "none";
    ``mamba``: ``_mamba_groups_if``, 0 in the plain variant)."""
    groups = cfg[K.GROUPS_FULL] + cfg[K.GROUPS_SW]
    held = st.held[r]
    return groups * held - cfg[K.GROUPS_SW] * st.skip[r] + mamba * (held > 0)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _schedule_running(cfg, rq, st, q, o, s, p):
    """``Scheduler.schedule``, running phase: walk ``running`` in order while
    budget remains; each request gets min(its new tokens, the budget,
    long_prefill_token_threshold, max_model_len - 1 - computed) tokens, and
    ``allocate_slots`` failing preempts (``_preempt_one``) until it fits.
    Async: in-flight tokens count as known (num_output_placeholders), and a
    request whose last token is in flight is skipped; on a disaggregated
    decode side (``defer_block_free``) a victim scheduled in the step in
    flight is not preempted and the phase stops (``remote_kv.in_flight_victim``)."""
    k = o.counters
    bs, mml = cfg[K.BS], cfg[K.MML]
    async_ = cfg[K.ASYNC] != 0
    defer_free = async_ and cfg[K.XFER] != 0  # ``Scheduler.defer_block_free``
    blis = cfg[K.COMPAT] != 0
    groups = cfg[K.GROUPS_FULL] + cfg[K.GROUPS_SW]
    # Loop-invariant settings read once (the loop writes other arrays, so the
    # compiler cannot keep cfg's entries in registers by itself).
    windowed, win, win2 = cfg[K.SW] > 0, _priced_window(cfg), cfg[K.PRICE_WIN2]
    la = _lookahead_if(rq.features.heavy, cfg)  # a drafter's lookahead KV slots
    thr_now = s[THR_NOW]
    # The hot scalars live in locals during the walk (the counters array is
    # written back before a preemption, which updates it, and at the end).
    budget, free, n_run = s[BUDGET], k[FREE], k[N_RUN]
    i = 0
    while i < n_run and budget > 0:
        r = q.run[i]
        u = uidx(r)
        c0 = st.ncomp[u]
        ntok = rq.prompt[u] + st.nout[u]
        if async_ and st.ph[u] > 0 and c0 + 2 - st.ph[u] >= rq.prompt[u] + rq.max_tokens[u]:
            i += 1
            continue
        num_new = ntok + st.ph[u] - c0 + _drafts_if(rq.features.heavy, st, u)
        num_new = min(num_new, budget, mml - 1 - c0)
        if 0 < thr_now < num_new:
            num_new = thr_now
        if num_new <= 0:
            i += 1
            continue
        if windowed:  # blocks that left the window go back to the pool first
            free += _remove_skipped_blocks(cfg, st, r, p)
        grow = 0  # new entries of its block table (in each KV cache group)
        # compat blis, the full-hit defect: prompt tokens without blocks (read only
        # then: the hot loop of every other config skips the load)
        off = st.koff[u] if blis else 0
        if c0 + num_new + la - off > st.held[u] * bs:  # skips the division on most decodes
            grow = max(blocks_for_tokens(c0 + num_new + la - off, mml, bs) - st.held[u], 0)
        need = grow * groups
        if need > free:
            s[BUDGET], k[FREE], k[N_RUN] = budget, free, n_run
            preempted_self = blocked = False
            while need > k[FREE]:
                if defer_free and _in_flight_victim_if(rq.features.heavy, cfg, rq, st, q, k):
                    blocked = True  # its blocks could not be freed at once
                    break
                i, preempted_self = _preempt_one(cfg, rq, st, q, o, s, p, i, r)
                if preempted_self:
                    break
            budget, free, n_run = s[BUDGET], k[FREE], k[N_RUN]
            if blocked:
                break
            if preempted_self:
                if cfg[K.POLICY] == 1:
                    continue  # the lowest-priority request went; later ones may fit
                break
        free -= need
        # Prefix caching: new blocks get identities, filled blocks get hashed
        # (most decode steps do neither). compat blis hashes prompt blocks only
        # (``AllocateKVBlocks``: output blocks are never looked up).
        if p is not None:
            upto = min(c0 + num_new, rq.prompt[u] if blis else PC.hashed_tokens(ntok, p))
            if need > 0 or upto >= (p.ncached[u] + 1) * bs:
                if need > 0:  # ``grow`` in each group
                    PC.get_new_blocks(grow, p.slot_of[u], np.int64(st.held[u]), p)
                PC.cache_blocks(r, upto, bs, rq, p)
        st.held[u] += grow
        s[BUDGET] = budget
        pend = rq.prompt[u] if blis else -1
        _add_to_batch(r, num_new, c0, ntok + st.ph[u], q, s, pend, win, win2)
        budget = s[BUDGET]
        i += 1
    s[BUDGET], k[FREE], k[N_RUN] = budget, free, n_run


# ---- schedule(): the waiting phase -----------------------------------------


@njit(cache=True, inline="always")
def _admission_test(cfg, rq, st, q, k, s, p, r, n_run_sched):
    """Whether the waiting head r can be admitted now, as ``Scheduler.schedule``'s
    waiting phase and ``KVCacheManager.allocate_slots`` decide: prefix-cache
    hits first (``get_computed_blocks``: full blocks already cached; those
    still in the free queue must leave it), then the whole-sequence gate, the
    all-or-nothing allocation and the watermark (none with ``running`` empty).
    Blocks are asked in every KV cache group (``KVCacheCoordinator.
    get_num_blocks_to_allocate`` sums its managers); a sliding-window group's
    gate asks for at most ``SW_CAP`` blocks
    (``SingleTypeKVCacheManager.get_num_blocks_to_allocate`` with
    ``apply_admission_cap``); a waiting request holds no blocks, so nothing
    leaves its window before this allocation. Returns (tokens computed at
    admission, hit blocks, blocks it will hold, new blocks to take, tokens to
    schedule); tokens to schedule is -1 when the head is refused.

    compat blis (``VLLMBatchFormation.FormBatch``, ``sim/batch_formation.go``;
    docs/blis-compat.md, rules 1, 2 and 5): the lookup covers all
    prompt // block_size prompt blocks (``GetCachedBlocks``), so a fully
    cached prompt of k x block_size tokens schedules 0 tokens and claims its
    hits. With the full-hit defect switch such a prompt claims nothing
    (``AllocateKVBlocks`` claims hits only inside its loop over new tokens,
    which does not run); it is still refused unless its hits in the free
    queue fit in the free blocks."""
    bs, mml = cfg[K.BS], cfg[K.MML]
    gate = cfg[K.GATE] != 0
    ntok = rq.prompt[r] + st.nout[r]
    c0 = st.ncomp[r]  # 0, or the KV kept on the CPU tier by a swap
    nhit, evictable = 0, 0
    wm = cfg[K.WM_BLOCKS] if k[N_RUN] > 0 else 0
    if p is not None and c0 == 0:  # prefix caching
        # Only hits on blocks in use lower the gate, and only shared-prefix
        # blocks can be in use: if even those cannot make it fit, skip the
        # lookup (it has no side effects; the gate refuses anyway).
        in_use_max = min(PC.shareable_blocks(r, bs, rq, p.pc[PC.LOOK]), PC.max_hit_blocks(ntok, bs))
        asked_min = blocks_for_tokens(ntok, mml, bs)  # one full-attention group's ask
        if cfg[K.GROUPS_FULL] == 0:  # a sliding-window group asks at most its cap
            asked_min = min(asked_min, cfg[K.SW_CAP])
        if gate and asked_min - in_use_max + wm > k[FREE]:
            return 0, 0, 0, 0, -1
        nmax = rq.prompt[r] // bs if cfg[K.COMPAT] != 0 else PC.max_hit_blocks(ntok, bs)
        nhit, evictable = PC.lookup(np.int64(r), nmax, bs, rq, p)  # one signature
        c0 = nhit * bs
        if cfg[K.DEFECT] != 0 and c0 == ntok:  # BLIS's full-hit defect
            if evictable > k[FREE]:
                return 0, 0, 0, 0, -1
            return c0, 0, 0, 0, 0
    num_new = ntok - c0
    if num_new == 1 and cfg[K.SPEC_K] > 0:  # speculative decoding: ``_padded``
        num_new = _padded_if(rq.features.heavy, cfg, q, st, s, c0, n_run_sched)
        if num_new < 0:
            return 0, 0, 0, 0, -1
    num_new = min(num_new, s[BUDGET])
    if 0 < s[THR_NOW] < num_new:
        num_new = s[THR_NOW]
    full = blocks_for_tokens(ntok, mml, bs)
    # Summed over the KV cache groups; a sliding-window group asks for at most
    # its admission cap (``sliding_window_cap``). Every group's hit has nhit
    # entries (a sliding-window group's nulls among them).
    # A Mamba group asks one block (``MambaManager`` in mode "none": its
    # block_size is max_model_len, so cdiv(tokens, block_size) = 1).
    mamba = _mamba_groups_if(rq.features.heavy, cfg)
    asked = cfg[K.GROUPS_FULL] * max(full - nhit, 0) + mamba
    asked += cfg[K.GROUPS_SW] * max(min(full, cfg[K.SW_CAP]) - nhit, 0)
    if gate and asked + evictable + wm > k[FREE]:
        return 0, 0, 0, 0, -1
    # a drafter's lookahead slots (``allocate_slots``' num_lookahead_tokens)
    total = blocks_for_tokens(c0 + num_new + _lookahead_if(rq.features.heavy, cfg), mml, bs)
    need = (cfg[K.GROUPS_FULL] + cfg[K.GROUPS_SW]) * (total - nhit) + evictable
    need += mamba  # a waiting request holds no blocks
    if need + wm > k[FREE]:
        return 0, 0, 0, 0, -1
    return c0, nhit, total, need, num_new


@njit(cache=True, inline="always")
def _admit(cfg, rq, st, q, o, s, p, r, a):
    """Move the waiting head r to ``running`` with the allocation ``a`` of
    ``_admission_test`` (``Scheduler.schedule``: ``waiting.pop_request``,
    ``running.append``). A swapped request's KV comes back from the CPU tier;
    with caching its hits take references and its new blocks get identities."""
    k = o.counters
    c0, nhit, total, need, num_new = a
    R = rq.prompt.shape[0]
    k[WH] = (k[WH] + 1) % R
    k[WL] -= 1
    q.run[k[N_RUN]] = r
    k[N_RUN] += 1
    st.status[r] = S.RUNNING
    _log(o.events, k, k[STEPS], r, c0, S.EV_ADMIT)
    if st.ncomp[r] > 0:  # swap the KV back in
        k[S.O_CPU_FREE] += st.held[r]
        s[SWAP_NS] += st.held[r] * cfg[K.SWAP_NS_PER_BLOCK]
    k[FREE] -= need
    ntok = rq.prompt[r] + st.nout[r]
    blis = cfg[K.COMPAT] != 0
    if p is not None:  # prefix caching
        bs = cfg[K.BS]
        PC.take_slot(r, p)
        PC.touch(nhit, p.slot_of[r], p)
        PC.get_new_blocks(total - nhit, p.slot_of[r], nhit, p)
        # A sliding-window hit's null blocks (``add_local_computed_blocks``).
        if cfg[K.SW] > 0:
            st.skip[r] = _skipped_blocks(cfg, c0)
        # Cached tokens it holds no blocks for (the full-hit defect), else 0.
        st.koff[r] = c0 - nhit * bs
        p.ncached[r] = nhit + st.koff[r] // bs
        known = rq.prompt[r] if blis else PC.hashed_tokens(ntok, p)
        PC.cache_blocks(r, min(c0 + num_new, known), bs, rq, p)
        st.ncomp[r] = c0
        S.record_prefix_cache_stats(k, ntok, c0, st.npre[r] > 0)
    st.held[r] = total
    _add_to_batch(
        r, num_new, c0, ntok, q, s, rq.prompt[r] if blis else -1, _priced_window(cfg),
        cfg[K.PRICE_WIN2],
    )  # fmt: skip
    s[N_ADM] += 1


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _admit_loaded(cfg, rq, st, x, q, o, s, p, r, n_run_sched):
    """Schedule r, the head of ``kv_holding_waiting`` whose KV has landed, as
    a new request (``Scheduler.schedule``'s waiting phase with
    num_computed_tokens > 0): ``allocate_slots`` for its remaining tokens
    (its last prompt token; with drafts padded to 1 + k, ``_padded``) and a
    drafter's lookahead on top of the blocks it holds, the gate and the
    watermark as for any waiting request. Returns False (nothing changed)
    when they do not fit."""
    k = o.counters
    bs, mml = cfg[K.BS], cfg[K.MML]
    ntok = rq.prompt[r] + st.nout[r]
    c0, have = st.ncomp[r], st.held[r]
    num_new = ntok - c0
    if num_new == 1 and cfg[K.SPEC_K] > 0:  # speculative decoding: ``_padded``
        num_new = _padded(cfg, q, st, s, c0, n_run_sched)
        if num_new < 0:
            return False
    num_new = min(num_new, s[BUDGET])
    if 0 < s[THR_NOW] < num_new:
        num_new = s[THR_NOW]
    wm = cfg[K.WM_BLOCKS] if k[N_RUN] > 0 else 0
    if cfg[K.GATE] != 0 and max(blocks_for_tokens(ntok, mml, bs) - have, 0) + wm > k[FREE]:
        return False
    total = blocks_for_tokens(c0 + num_new + _lookahead(cfg), mml, bs)
    need = max(total - have, 0)
    if need + wm > k[FREE]:
        return False
    R = rq.prompt.shape[0]
    k[S.O_HOLD_HEAD] = (k[S.O_HOLD_HEAD] + 1) % R
    k[S.O_HOLD_LEN] -= 1
    k[S.O_HOLD_BLOCKS] -= have
    q.run[k[N_RUN]] = r
    k[N_RUN] += 1
    st.status[r] = S.RUNNING
    _log(o.events, k, k[STEPS], r, c0, S.EV_ADMIT)
    k[FREE] -= need
    if p is not None:
        if c0 == 0:  # a one-token prompt recomputes from 0: a lookup, no hit possible
            S.record_prefix_cache_stats(k, ntok, 0, st.npre[r] > 0)
        if need > 0:
            PC.get_new_blocks(need, p.slot_of[r], have, p)
            PC.cache_blocks(r, min(c0 + num_new, PC.hashed_tokens(ntok, p)), bs, rq, p)
    st.held[r] = have + need
    RKV.set_inflight(x, r, c0 + num_new < ntok)
    _add_to_batch(r, num_new, c0, ntok, q, s, -1, _priced_window(cfg), cfg[K.PRICE_WIN2])
    s[N_ADM] += 1
    return True


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _schedule_waiting_pd(cfg, rq, st, x, q, o, sc, p):
    """``Scheduler.schedule``, waiting phase, on a disaggregated decode side
    (``planner.kv_transfer``): ``kv_holding_waiting`` is drained first, a
    request whose load has not landed skipped
    (``_handle_blocked_waiting_request``) and one whose load landed
    promoted (``_update_waiting_for_remote_kv``) and scheduled; then
    ``waiting``, where a remote request starts its load (``RKV.start_load``)
    and moves to ``kv_holding_waiting`` without counting against
    max_num_seqs, and a local one is admitted as on any server. Strict
    head-of-line blocking in both queues; skipped and loading requests go
    back to the front of ``kv_holding_waiting`` in their order (priority
    policy: in priority order)."""
    k = o.counters
    s = sc.step
    R = rq.prompt.shape[0]
    n_skip = 0
    n_run_sched = s[N_SCHED]
    while s[BUDGET] > 0:
        hold = k[S.O_HOLD_LEN] > 0
        if (not hold and k[WL] == 0) or k[N_RUN] >= k[S.O_SEQS]:
            break
        if hold:
            r = x.hq[k[S.O_HOLD_HEAD]]
            if x.pd[r] & S.PD_LOADING:
                if not x.pd[r] & S.PD_RECV:
                    sc.skipbuf[n_skip] = r
                    n_skip += 1
                    k[S.O_HOLD_HEAD] = (k[S.O_HOLD_HEAD] + 1) % R
                    k[S.O_HOLD_LEN] -= 1
                    continue
                RKV.update_waiting_for_remote_kv(cfg, rq, st, x, p, r)
            if not _admit_loaded(cfg, rq, st, x, q, o, s, p, r, n_run_sched):
                break
            continue
        r = q.wq[k[WH]]
        if x.pd[r] & S.PD_REMOTE:
            if not RKV.start_load(cfg, rq, st, x, q, k, s, p, r, sc.skipbuf, n_skip):
                break
            k[WH] = (k[WH] + 1) % R
            k[WL] -= 1
            sc.skipbuf[n_skip] = r
            n_skip += 1
            continue
        a = _admission_test(cfg, rq, st, q, k, s, p, r, n_run_sched)
        if a[4] < 0:
            break
        _admit(cfg, rq, st, q, o, s, p, r, a)
        RKV.set_inflight(x, r, a[0] + a[4] < rq.prompt[r] + st.nout[r])
    if cfg[K.POLICY] == 1:  # ``PriorityRequestQueue.prepend_requests`` re-sorts
        for j in range(n_skip):
            k[S.O_HOLD_LEN] = _enqueue_sorted(
                sc.skipbuf[j], x.hq, k[S.O_HOLD_HEAD], k[S.O_HOLD_LEN], rq.priority, st.entry_ns
            )
    else:
        for j in range(n_skip - 1, -1, -1):  # back in front, in their order
            k[S.O_HOLD_HEAD] = (k[S.O_HOLD_HEAD] - 1 + R) % R
            x.hq[k[S.O_HOLD_HEAD]] = sc.skipbuf[j]
            k[S.O_HOLD_LEN] += 1


_schedule_waiting_pd_if = gated(_schedule_waiting_pd)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _load_wait(cfg, st, x, k, s):
    """``_step_time`` for a step that scheduled nothing while KV loads are in
    flight or blocks wait for a read (``remote_kv.load_wait_ns``): it runs no
    model and lasts until the next load lands, read ends or request arrives.
    Returns its length (ns)."""
    dt = load_wait_ns(cfg, st, x, k)
    s[S.WAITED] = 1
    k[CLOCK] += dt
    k[STEPS] += 1
    k[S.O_ZERO_STEPS] += 1
    k[S.O_PREEMPTIONS] += s[N_PRE]  # it may have preempted before scheduling nothing
    k[S.O_MIN_FREE] = min(k[S.O_MIN_FREE], k[FREE])
    return dt


_finish_loads_if = gated(finish_loads)
_apply_landed_if = gated(apply_landed)
_in_flight_victim_if = gated(in_flight_victim, False)
_load_wait_if = gated(_load_wait, 0)
_leave_inflight_if = gated(leave_inflight)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _schedule_waiting(cfg, rq, st, q, o, sc, p):
    """``Scheduler.schedule``, waiting phase (skipped in a step that preempted):
    admit from the head while budget and max_num_seqs allow; strict
    head-of-line blocking, except that async skips (and keeps in place) a
    preempted request whose stale output is still in flight. Projected
    admission (``policies.py``, a named option) also refuses a head whose
    completion would overfill the pool."""
    k = o.counters
    s = sc.step
    R = rq.prompt.shape[0]
    bs, mml, admission = cfg[K.BS], cfg[K.MML], cfg[K.ADMISSION]
    stop_len = k[S.O_STOP_LEN]
    proj = 0  # projected-capacity admission: blocks held at completion
    if admission != VANILLA:
        for j in range(k[N_RUN]):
            proj += _projected_blocks_if(
                rq.features.extras, np.int64(q.run[j]), admission, rq.prompt, rq.max_tokens,
                stop_len, mml, bs,
            )  # fmt: skip
    n_skip = 0
    n_run_sched = s[N_SCHED]  # ``scheduled_running_reqs``
    while k[WL] > 0 and s[BUDGET] > 0 and k[N_RUN] < k[S.O_SEQS]:
        r = q.wq[k[WH]]
        if st.stale[r] > 0:
            sc.skipbuf[n_skip] = r
            n_skip += 1
            k[WH] = (k[WH] + 1) % R
            k[WL] -= 1
            continue
        a = _admission_test(cfg, rq, st, q, k, s, p, r, n_run_sched)
        if a[4] < 0:
            break
        if admission != VANILLA:
            p_r = _projected_blocks_if(
                rq.features.extras, np.int64(r), admission, rq.prompt, rq.max_tokens, stop_len, mml,
                bs,
            )  # fmt: skip
            if proj + p_r > k[S.O_USABLE]:
                break
            proj += p_r
        _admit(cfg, rq, st, q, o, s, p, r, a)
    for j in range(n_skip - 1, -1, -1):  # back in front, in their order
        k[WH] = (k[WH] - 1 + R) % R
        q.wq[k[WH]] = sc.skipbuf[j]
        k[WL] += 1


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _begin_step(cfg, k, s):
    """Open a step of ``Scheduler.schedule``: zero its accumulators, the token
    budget is max_num_batched_tokens, and long_prefill_token_threshold
    applies only when another request exists (compat blis: always,
    ``VLLMBatchFormation.FormBatch``)."""
    for j in range(s.shape[0]):
        s[j] = 0
    s[START] = k[CLOCK]
    s[BUDGET] = cfg[K.MNBT]
    alone = k[N_RUN] + k[WL] + k[S.O_HOLD_LEN] <= 1 and cfg[K.COMPAT] == 0
    s[THR_NOW] = 0 if alone else cfg[K.THR]


# ---- Step time and output processing ---------------------------------------


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _step_time(cfg, cfgf, rq, k, s):
    """Advance the clock by the step's duration (``planner.latency.step_time``; an empty
    step runs no model; ``rq.lat_tables`` holds the measured tables; compat
    blis: ``latency.blis_step_ns``, whole microseconds, docs/blis-compat.md
    rule 3) plus its KV swap time, and count the step. Returns the duration (ns)."""
    p_tok, d_tok = s[PREFILL], s[DECODE]
    ip = cfg[K.B0 : K.B2 + 1]
    tab = rq.lat_tables[cfg[K.LAT_TABLE]]
    if cfg[K.COMPAT] != 0:
        dt = _blis_step_ns_if(rq.features.extras, ip, p_tok, d_tok)
    else:
        dt = _model_step_ns(
            cfg[K.LAT_KIND], ip, cfgf, p_tok, d_tok, s[ATTENDED], s[KV_TOUCHED], tab,
            s[ATTENDED_W], s[KV_W], s[N_SCHED], rq.features.extras,
        )  # fmt: skip
        dt += _draft_step_ns_if(rq.features.heavy, cfg, cfgf, s)  # EAGLE, MTP
    dt += s[SWAP_NS]
    k[CLOCK] += dt
    k[S.O_BUSY_NS] += dt
    k[STEPS] += 1
    if p_tok + d_tok == 0:
        k[S.O_ZERO_STEPS] += 1
    k[S.O_PREFILL_TOKENS] += p_tok
    k[S.O_DECODE_TOKENS] += d_tok
    k[S.O_PREEMPTIONS] += s[N_PRE]
    k[S.O_MIN_FREE] = min(k[S.O_MIN_FREE], k[FREE])
    return dt


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _update_after_schedule(cfg, dt, rq, st, q, o, s):
    """``Scheduler._update_after_schedule``: num_computed_tokens advances by the
    scheduled tokens; tokens below the high-water mark count as recompute
    waste (linear model: the step's fixed cost shared per request plus the
    token's unit cost; roofline: the step time pro rata). Async: scheduled
    tokens go in flight, and a chunk reaching the known end adds a
    placeholder (its ``sched_tok`` is negated: it samples), one more per
    draft position it scheduled (speculative decoding, ``_drafts_scheduled``,
    which also sets each request's drafts for its next step). First it logs
    the state after scheduling (EV_STATE, EV_FREE) and adds blocks in use x
    the step's duration to ``F_KV_BLOCK_NS``; a request scheduled for the
    first time gets ``sched_ns`` (the step's start)."""
    k = o.counters
    _log(o.events, k, k[STEPS] - 1, k[N_RUN], k[WL] + k[S.O_HOLD_LEN], S.EV_STATE)
    _log(o.events, k, k[STEPS] - 1, -1, k[FREE], S.EV_FREE)
    o.floats[S.F_KV_BLOCK_NS] += (k[S.O_USABLE] - k[FREE]) * dt
    async_ = cfg[K.ASYNC] != 0
    linear = cfg[K.LAT_KIND] == LINEAR
    blis = cfg[K.COMPAT] != 0
    spec = cfg[K.SPEC_K] > 0
    n_sched, n_tok = s[N_SCHED], s[PREFILL] + s[DECODE]
    for j in range(n_sched):
        r = q.slist[j]
        u = uidx(r)
        n = q.sched_tok[u]
        c0 = st.ncomp[u]
        known = rq.prompt[u] + st.nout[u] + st.ph[u]
        w = min(c0 + n, st.hw[u]) - c0
        if w > 0:
            if linear:
                dec = _is_decode(n, c0, known, rq.prompt[u] if blis else -1)
                unit = cfg[K.B2] if dec else cfg[K.B1]
                o.floats[S.F_WASTE_NS] += (cfg[K.B0] / n_sched) * (w / n) + unit * w
            else:
                o.floats[S.F_WASTE_NS] += dt * w / n_tok
        st.hw[u] = max(st.hw[u], c0 + n)
        st.ncomp[u] = c0 + n
        if st.sched_ns[u] < 0:
            st.sched_ns[u] = s[START]
        _log(o.events, k, k[STEPS] - 1, r, n, S.EV_SCHED)
        drafts = 0
        if spec:  # speculative decoding: ``_drafts_scheduled``
            q.sspec[j] = _drafts_scheduled_if(rq.features.heavy, cfg, st, u, c0 + n, known)
            drafts = q.sspec[j] >> 5
        if async_:
            st.infl[u] += n
            if c0 + n >= known:
                st.ph[u] += 1 + drafts
                q.sched_tok[u] = -n


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _update_from_output(cfg, rq, st, q, o, s, p, x):
    """``Scheduler.update_from_output`` (sync): a request whose chunk reached
    its known tokens samples one now; ``check_stop`` finishes it at
    max_tokens or the stop length, freeing its blocks at once. Speculative
    decoding: ``_update_from_output_spec``."""
    if cfg[K.SPEC_K] > 0:
        _update_from_output_spec_if(rq.features.heavy, cfg, rq, st, q, o, s, p, x)
        return
    k = o.counters
    clock = k[CLOCK]
    memo = NO_GAPS
    for j in range(s[N_SCHED]):
        r = q.slist[j]
        u = uidx(r)
        if st.ncomp[u] != rq.prompt[u] + st.nout[u]:
            continue
        st.nout[u] += 1
        if st.first_ns[u] < 0:
            st.first_ns[u] = clock
        memo = _token_gap(r, clock, st, o.itl_hist, memo)
        if st.nout[u] >= rq.max_tokens[u] or rq.prompt[u] + st.nout[u] >= k[S.O_STOP_LEN]:
            k[FREE] += _finish_or_hold(r, clock, cfg, rq, st, k, p, x)
            s[N_FIN] += 1
            _log(o.events, k, k[STEPS] - 1, r, 0, S.EV_FINISH)
    _flush_gaps(o.itl_hist, memo)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _update_from_output_async(cfg, rq, st, q, o, s, p, x):
    """``Scheduler.update_from_output`` under ``AsyncScheduler``
    (``EngineCore.step_with_batch_queue``): the previous step's output lands
    now, at this step's start; its tokens leave flight; stale output of a
    preempted request is delivered without advancing it (but can still end
    it). With speculative decoding a sampling entry verifies its real drafts
    (``pspec``, ``_drafts_scheduled``): a leading run a accepted
    (``speculative.accepted_drafts``), the rejected ones taken back from
    ``num_computed_tokens`` and the placeholders, a + 1 tokens appended with
    ``check_stop`` after each. Then this step's batch becomes the one in
    flight. On a disaggregated decode side (``defer_block_free``) a request
    that ends while the step in flight holds it (drafts accepted past what
    the scheduler counted on) keeps its blocks until that step lands
    (``_free_request_blocks``, ``remote_kv.drain_deferred``)."""
    k = o.counters
    bs, start = cfg[K.BS], s[START]
    spec = cfg[K.SPEC_K] > 0
    defer = cfg[K.XFER] != 0  # ``Scheduler.defer_block_free``: a KV consumer, async
    if k[S.O_DEFER_BLOCKS] > 0 and k[S.O_N_PEND] > 0:
        k[FREE] += _drain_deferred_if(rq.features.heavy, cfg, st, q, k, x, p)
    thr = cfg[K.SPEC_T : K.SPEC_T + MAX_SPEC_TOKENS]
    memo = NO_GAPS
    for j in range(k[S.O_N_PEND]):
        r = q.plist[j]
        u = uidx(r)
        n = q.ptok[j]
        samples = n < 0
        n = abs(n)
        st.infl[u] -= n
        was_stale = st.stale[u] > 0
        if was_stale:
            st.stale[u] -= n
            if st.stale[u] == 0:
                k[S.O_N_STALE] -= 1
        if st.status[u] == S.FINISHED or not samples:
            continue
        code = q.pspec[j] if spec else 0
        extra, a = code >> 5, 0
        if extra > 0:
            a = accepted_drafts(cfg[K.SPEC_SEED], r, st.nout[u], code & 31, thr)
            if not was_stale:  # the rejected drafts
                if st.ncomp[u] > 0:
                    st.ncomp[u] -= extra - a
                    st.hw[u] = max(st.ncomp[u], st.hw[u] - (extra - a))
                if st.ph[u] > 0:
                    st.ph[u] -= extra - a
        had_ph = st.ph[u] > 0
        if st.first_ns[u] < 0:
            st.first_ns[u] = start
        memo = _token_gap(r, start, st, o.itl_hist, memo)
        stopped = False
        for t in range(a + 1):  # ``_update_request_with_output``
            st.nout[u] += 1
            if st.nout[u] >= rq.max_tokens[u] or rq.prompt[u] + st.nout[u] >= k[S.O_STOP_LEN]:
                stopped = True
                if not was_stale:
                    st.ncomp[u] -= a - t  # the trimmed tokens
                break
        if not was_stale and st.ph[u] > 0:
            st.ph[u] -= a + 1
        if p is not None:  # prefix caching
            upto = min(st.ncomp[u] - st.infl[u], PC.hashed_tokens(rq.prompt[u] + st.nout[u], p))
            if not was_stale and st.status[u] == S.RUNNING and (had_ph or spec):
                # Blocks whose tokens are now all known join the cache.
                if upto >= (p.ncached[u] + 1) * bs:
                    PC.cache_blocks(r, upto, bs, rq, p)
        if stopped:
            if st.status[u] == S.WAITING:  # preempted; its stale token ended it
                k[WL] = _remove_waiting(r, q.wq, k[WH], k[WL])
            if defer and st.infl[u] > 0 and not held_for_read(cfg, rq, r):
                # its blocks wait for the step in flight
                x.pd[u] |= S.PD_DEFER
                k[S.O_DEFER_BLOCKS] += st.held[u]
                _finish_later(r, start, cfg, rq, st, k)
            else:
                k[FREE] += _finish_or_hold(r, start, cfg, rq, st, k, p, x)
            s[N_FIN] += 1
            _log(o.events, k, k[STEPS] - 2, r, 0, S.EV_FINISH)
    _flush_gaps(o.itl_hist, memo)
    s[N_FLIGHT] = k[S.O_N_PEND]
    for j in range(s[N_SCHED]):
        q.plist[j] = q.slist[j]
        q.ptok[j] = q.sched_tok[q.slist[j]]
        if spec:
            q.pspec[j] = q.sspec[j]
    k[S.O_N_PEND] = s[N_SCHED]


_update_from_output_async_if = gated(_update_from_output_async)
_drain_deferred_if = gated(drain_deferred, 0)
_held_for_read_if = gated(held_for_read, False)
_hold_for_read_if = gated(hold_for_read)
_release_read_if = gated(release_read, 0)


# ---- End of step -----------------------------------------------------------


@njit(cache=True, inline="always")
def _check_invariants(cfg, st, q, k, p, mamba):
    """Count a step that breaks block conservation: blocks held by running
    requests + free blocks = usable blocks (with caching: references, distinct
    blocks in use and the free queue's length agree)."""
    used = 0
    for i in range(k[N_RUN]):
        used += _pool_blocks(cfg, st, q.run[i], mamba)
    used += k[S.O_HOLD_BLOCKS]  # kv_holding_waiting's (remote_kv.py), 0 on other servers
    used += k[S.O_DEFER_BLOCKS]  # finished, freed when the step in flight lands
    used += k[S.O_SEND_BLOCKS]  # finished, freed when the decode side has read them
    if p is not None:  # prefix caching
        pc = p.pc
        free, usable = k[FREE], k[S.O_USABLE]
        if pc[PC.FREE_LEN] != free or pc[PC.IN_USE] + free != usable or pc[PC.REFS] != used:
            k[S.O_INVARIANT_ERRORS] += 1
    elif used + k[FREE] != k[S.O_USABLE]:
        k[S.O_INVARIANT_ERRORS] += 1


@njit(cache=True, inline="always")
def _write_trace(o, s):
    """Record the step just taken in the per-step trace, if it has room."""
    k = o.counters
    t = k[STEPS] - 1
    if t >= o.trace.shape[0]:
        return
    row_ = o.trace[t]
    row_[S.T_START_NS] = s[START]
    row_[S.T_END_NS] = k[CLOCK]
    row_[S.T_SCHEDULED] = s[PREFILL] + s[DECODE]
    row_[S.T_PREFILL] = s[PREFILL]
    row_[S.T_DECODE] = s[DECODE]
    row_[S.T_RUNNING] = k[N_RUN]
    row_[S.T_WAITING] = k[WL] + k[S.O_HOLD_LEN]
    row_[S.T_FREE] = k[FREE]
    row_[S.T_PREEMPTED] = s[N_PRE]
    row_[S.T_FINISHED] = s[N_FIN]
    row_[S.T_ADMITTED] = s[N_ADM]


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _end_step(cfg, st, q, o, s, p, check, mamba):
    """Drop finished requests from ``running`` (``remove_all``), check the
    invariants, write the trace, and prove a livelock when there is one.
    Frozen: nothing scheduled, preempted or admitted (compat blis admits a
    fully cached prompt with 0 tokens), no output in flight, requests
    waiting. Running is then empty, so the head is refused with the whole
    pool free and no later event can change that (arrivals queue behind it).
    Returns whether the run is livelocked."""
    k = o.counters
    if s[N_FIN] > 0:
        k[N_RUN] = _drop_finished(q.run, k[N_RUN], st.status)
        k[S.O_FINISHED] += s[N_FIN]
    if check:
        _check_invariants(cfg, st, q, k, p, mamba)
    _write_trace(o, s)
    frozen = s[PREFILL] + s[DECODE] == 0 and s[N_PRE] == 0 and s[N_FLIGHT] == 0
    frozen = frozen and s[N_ADM] == 0 and s[S.WAITED] == 0
    if frozen or s[CYCLE] != 0:
        k[S.O_LIVELOCKED] = 1
        k[S.O_LIVELOCK_STEP] = k[STEPS] - 1
        return True
    return False


# ---- The step loop ---------------------------------------------------------


# What ``run_steps`` returns.
ENDED, PAUSED = 0, 1


@njit(cache=True, inline="always")
def _past_horizon(cfg, clock):
    """Whether no step may start at ``clock`` (ns): at or past the horizon;
    compat blis: past it (``ClusterSimulator.Run``, ``sim/cluster/cluster.go``,
    runs every event at or before the horizon; docs/blis-compat.md, rule 4)."""
    if cfg[K.COMPAT] != 0:
        return clock > cfg[K.HORIZON_NS]
    return clock >= cfg[K.HORIZON_NS]


@njit(cache=True, inline="always")
def fast_path_allowed(cfg, o, use_macro):
    """Whether the decode fast path may run for this config: asked for, no
    per-step trace or event log, not compat blis (the fast path knows none of
    its rules; restart preemption alone takes it only while requests can still
    arrive, ``_decode_fast_path``), and not
    caching under async scheduling (blocks are hashed as outputs land, step by
    step), nor a sliding window (blocks leave the window step by step; the
    run's block counts assume full attention), nor several KV cache groups
    or Mamba groups (the run counts one table's blocks), nor speculative decoding (each
    step's accepted drafts differ)."""
    macro = use_macro and o.trace.shape[0] == 0 and o.events.shape[0] == 0
    macro = macro and cfg[K.COMPAT] == 0 and cfg[K.SW] == 0 and cfg[K.PRICE_WIN2] == 0
    macro = macro and cfg[K.GROUPS_FULL] + cfg[K.GROUPS_SW] == 1 and cfg[K.SPEC_K] == 0
    macro = macro and cfg[K.GROUPS_MAMBA] == 0
    macro = macro and cfg[K.XFER] == 0
    return macro and not (cfg[K.CACHING] != 0 and cfg[K.ASYNC] != 0)


@njit(cache=True, nogil=True)
def run_steps(cfg, cfgf, rq, st, q, o, x, sc, p, ctl, macro, check):
    """The step loop of one configuration, from its current state: to the
    horizon, the end of its work, a proven livelock, ``max_steps`` or the
    caller's stop flag (returns ``ENDED``), or, for a replica behind a router
    (``arrivals.routing_open``), until its clock reaches the router's next
    send ``O_ROUTE_UNTIL``, before it takes in what has arrived by then (an
    idle replica waits there; returns ``PAUSED``: the router reads its state,
    sends, and calls again). ``x`` is the decode side's state (``state.Remote``;
    only its gated calls read it), ``sc`` ``_init``'s scratch, ``p`` the prefix
    cache or None without caching (``prefix_cache_of``: Numba compiles the
    loop once per case, without the caching code for None); ``macro`` is
    ``fast_path_allowed``. ``O_FIN_BEFORE_STEP`` keeps O_FINISHED as it was
    before the latest step (or decode run), whose finishes happen at its end
    (sync) or start (async)."""
    k = o.counters
    R = rq.prompt.shape[0]
    async_ = cfg[K.ASYNC] != 0
    xfer = cfg[K.XFER] != 0
    mamba = _mamba_groups_if(rq.features.heavy, cfg)
    routed = routing_open(k)
    while True:
        if routed and k[CLOCK] >= k[S.O_ROUTE_UNTIL]:
            return PAUSED  # the router first sends what arrived by now
        _arrivals(cfg, rq, st, q, k)
        if k[S.O_SEND_LEN] > 0 and not async_:  # the last step's output (kernel/kv_send.py)
            k[FREE] += _release_read_if(rq.features.heavy, st, x, k, p, k[CLOCK])
        if k[N_RUN] == 0 and k[WL] == 0 and k[S.O_HOLD_LEN] == 0:
            # Only finished requests can still have output in flight; as it
            # lands, the blocks it held return (``remote_kv.drain_deferred``).
            if k[S.O_DEFER_BLOCKS] > 0:
                k[FREE] += _drain_deferred_if(rq.features.heavy, cfg, st, q, k, x, p)
            k[S.O_N_PEND] = 0
            if k[NXT] >= arrival_limit(cfg, k, R):
                if routed:
                    return PAUSED  # idle until the router sends something
                if k[S.O_SEND_LEN] > 0:  # the engine polls until the reads complete
                    k[FREE] += _release_read_if(rq.features.heavy, st, x, k, p, INT64_MAX)
                break  # all arrived (closed loop: a request waits for a release; none can come)
            nxt = st.entry_ns[st.order[k[NXT]]]
            k[CLOCK] = min(nxt, k[S.O_ROUTE_UNTIL]) if routed else nxt  # idle until then
            if k[S.O_SEND_LEN] > 0:  # the engine polls while blocks are held
                k[FREE] += _release_read_if(rq.features.heavy, st, x, k, p, k[CLOCK])
            continue
        if _past_horizon(cfg, k[CLOCK]):
            break
        if k[STEPS] >= cfg[K.MAX_STEPS]:
            k[S.O_STEP_LIMIT] = 1
            break
        if ctl[0] != 0:
            k[S.O_INTERRUPTED] = 1
            break
        k[S.O_FIN_BEFORE_STEP] = k[S.O_FINISHED]
        _adapt_cap_if(rq.features.extras, cfg, k)
        if macro and _decode_fast_path(cfg, cfgf, rq, st, q, o, sc, p, check):
            after_fast_path(cfg, k, sc.cycle)
            continue
        # Scheduler.schedule: the running phase, then (if nothing was
        # preempted) the waiting phase.
        _begin_step(cfg, k, sc.step)
        _schedule_running(cfg, rq, st, q, o, sc.step, p)
        if sc.step[N_PRE] == 0 and xfer:  # a disaggregated decode side (remote_kv.py)
            _schedule_waiting_pd_if(rq.features.heavy, cfg, rq, st, x, q, o, sc, p)
        elif sc.step[N_PRE] == 0:
            _schedule_waiting(cfg, rq, st, q, o, sc, p)
        if sc.step[PREFILL] + sc.step[DECODE] == 0 and k[S.O_LOADS] + k[S.O_SEND_LEN] > 0:
            dt = _load_wait_if(rq.features.heavy, cfg, st, x, k, sc.step)
        else:
            dt = _step_time(cfg, cfgf, rq, k, sc.step)
        _update_after_schedule(cfg, dt, rq, st, q, o, sc.step)
        if xfer:  # requests no longer prefilling leave _inflight_prefills
            _leave_inflight_if(rq.features.heavy, rq, st, x, q, sc.step)
        if async_:
            _update_from_output_async_if(rq.features.extras, cfg, rq, st, q, o, sc.step, p, x)
            if k[S.O_SEND_LEN] > 0:  # the landed output's finished_sending (kernel/kv_send.py)
                k[FREE] += _release_read_if(rq.features.heavy, st, x, k, p, sc.step[START])
            if xfer:  # the loads the previous step's output reported become visible
                _apply_landed_if(rq.features.heavy, x, k, sc.step)
        else:
            _update_from_output(cfg, rq, st, q, o, sc.step, p, x)
        if k[S.O_LOADS] > 0:
            _finish_loads_if(rq.features.heavy, x, k, S.PD_LANDED if async_ else S.PD_RECV)
        if _end_step(cfg, st, q, o, sc.step, p, check, mamba):
            break
        if livelock_proven(cfg, st, q, k, p, sc.cycle):  # a state repeated (cycle.py)
            k[S.O_LIVELOCKED] = 1
            k[S.O_LIVELOCK_STEP] = k[STEPS] - 1
            break
    return ENDED


def simulate_one(cfg, cfgf, rq, st, q, o, x, ctl, use_macro, check, scratch=None) -> None:
    """Simulate one configuration to the horizon, the end of its work, a proven
    livelock, ``max_steps`` or the caller's stop flag (``run_steps``).

    Plain Python, not jitted: it calls the jitted ``_init`` and ``run_steps``
    (which releases the GIL). A jitted wrapper would be one more LLVM module
    holding the whole step loop for Numba to optimize again (about 11 of a
    first run's 39 CPU-s of compile, measured 2026-12-01).

    Args: ``cfg`` (NCOLS,) int64 and ``cfgf`` (NFLOAT,) float64, this config's
    row of ``config.pack_configs``; ``rq`` the shared ``state.Requests``;
    ``st``/``q``/``o`` this config's rows of ``state.ReqState``, ``Queues`` and
    ``Out`` (results are written there: ``o.counters`` holds ``state.O_*``),
    ``x`` its row of ``state.Remote`` (the disaggregated decode side's);
    ``ctl`` (1,) int64, a stop flag the caller may set from another thread
    (the run then ends with ``O_INTERRUPTED`` = 1); ``use_macro`` allows the
    decode fast path (off while tracing or logging events); ``check`` counts
    steps that break block conservation (one pass over ``running`` per step);
    ``scratch`` the thread's (int32, int32, int64) buffers for the large scratch
    (``kernel/arena.py``, at least ``scratch_sizes``; new ones when None).
    """
    if scratch is None:
        scratch = Arenas(*scratch_sizes(cfg[None, :], rq)).get()
    sc = _init(cfg, rq, o.counters, scratch[0])
    p = prefix_cache_of(cfg, rq, scratch[1], scratch[2])
    macro = bool(fast_path_allowed(cfg, o, use_macro))
    run_steps(cfg, cfgf, rq, st, q, o, x, sc, p, ctl, macro, bool(check))
