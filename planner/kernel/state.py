"""Struct-of-arrays simulation state: the kernel's records and column layouts.

The workload is one ``Requests`` record of (R,) arrays shared by all configs.
Per config, ``ReqState`` holds the per-request arrays, ``Queues`` the
scheduler's queues and ``Out`` the counters (a config's scalar state, and its
integer outputs, ``O_*``), float outputs and logs; each is a named tuple of
(C, ...) arrays and the kernel runs config c on row c of each. ``allocate``
builds them at once; the kernel itself allocates only per-config scratch
(``kernel_scratch_bytes``).
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np
from numba import njit

from planner.bounds import INT64_MAX
from planner.kernel.token_gaps import NBINS

# The decode fast path's histogram and counting sort (``step._decode_scan``,
# ``step._replay_cache_run``) take O(block_size) per call: above this block
# size (vLLM takes any positive one; its attention kernels use 16-256 and
# hybrid models' aligned pages a few thousand) the kernel takes the steps one
# by one instead, with the same result.
FAST_PATH_MAX_BLOCK_SIZE = 4096

# Request status codes (C x R int8).
FUTURE, WAITING, RUNNING, FINISHED, REJECTED = 0, 1, 2, 3, 4

# Per-config counters, shape (C, NOUT_I), int64: the kernel's scalar state
# while it runs and its integer outputs when it returns.
(
    O_FINISHED,  # requests finished (any time, also in the step that crossed the horizon)
    O_REJECTED,  # rejected by the front end (prompt >= max_model_len)
    O_RUNNING_END,  # len(running)
    O_WAITING_END,  # len(waiting)
    O_ARRIVED,  # requests that entered the scheduler (or were rejected)
    O_PREEMPTIONS,  # preemption events
    O_STEPS,  # scheduler steps simulated
    O_ZERO_STEPS,  # steps that scheduled zero tokens
    O_MIN_FREE,  # fewest free blocks seen after a step's allocations
    O_END_NS,  # the clock (ns); when the simulation stopped, at the end
    O_BUSY_NS,  # sum of step durations (ns)
    O_LIVELOCKED,  # 1 if a livelock was proven (frozen pool or a repeating cycle)
    O_LIVELOCK_STEP,  # step index at which it was proven, else -1
    O_STEP_LIMIT,  # 1 if max_steps stopped the run
    O_PREFILL_TOKENS,  # scheduled prefill tokens (re-prefill included)
    O_DECODE_TOKENS,  # scheduled decode tokens
    O_INVARIANT_ERRORS,  # steps where held blocks + free blocks != usable blocks
    O_MACRO_STEPS,  # steps simulated by the decode fast path (diagnostic only)
    O_EVENTS,  # event-log entries written (may exceed the log's length: then truncated)
    O_INTERRUPTED,  # 1 if the caller's stop flag ended the run early
    # Prefix-cache stats, counted at admission as vLLM 0.33 does
    # (``Scheduler.schedule`` -> ``KVCacheManager.record_prefix_cache_stats``,
    # ``PrefixCacheStats.record``): tokens queried (the request's num_tokens)
    # and hit (cached tokens found), for requests never preempted, and apart
    # for re-admissions after a preemption (``preempted_queries/_hits``).
    O_PC_QUERIES,
    O_PC_HITS,
    O_PC_PRE_QUERIES,
    O_PC_PRE_HITS,
    # Kernel state, not results:
    O_FREE,  # free blocks (the free queue's length)
    O_NEXT_ARRIVAL,  # position in ``order`` of the next request to arrive
    O_WAITING_HEAD,  # ring-buffer index of waiting's head
    O_SEQS,  # effective max_num_seqs (the adaptive cap changes it)
    O_WINDOW_END,  # step at which the adaptive window closes
    O_WINDOW_PRE,  # preemptions when the window opened
    O_CPU_FREE,  # free CPU blocks (swap preemption)
    O_N_PEND,  # async: requests of the step whose output is in flight
    O_N_STALE,  # async: preempted requests whose stale output is still in flight
    O_LONE_R,  # the lone request of the last preemption with nothing else left, or -1
    O_LONE_NTOK,  # its known tokens then
    O_USABLE,  # usable blocks (num_gpu_blocks less the null block)
    O_STOP_LEN,  # tokens at which check_stop ends a request (capacity.stop_length)
    O_RELEASED,  # closed loop: client slots released (requests finished or rejected)
    O_ORDER_END,  # positions of ``order`` holding requests sent so far (sessions add turns)
    # Replicas behind a router (``kernel/fleet.py``): the time (ns) of the
    # router's next request, before which this replica may run; -1 once the
    # router sends nothing more (always -1 for a lone server).
    O_ROUTE_UNTIL,
    O_FIN_BEFORE_STEP,  # O_FINISHED before the latest step (the router's view of late finishes)
    O_ROUTE_MORE,  # 1 while the router may still send this replica a request without a finish in it
    # compat blis: completion-time allocations that found no free block
    # (BLIS's ``kv_allocation_failures``, ``Simulator.processCompletions``).
    O_KV_ALLOC_FAILURES,
    # Disaggregated decode side (``planner.kv_transfer``): ``kv_holding_waiting``
    # (ring buffer ``Queues.hq``) head and length, and KV loads in flight
    # (started, not yet reported landed).
    O_HOLD_HEAD,
    O_HOLD_LEN,
    O_LOADS,
    O_HOLD_BLOCKS,  # blocks held by the requests in kv_holding_waiting
    # Blocks of finished requests whose free waits for the step in flight
    # (``Scheduler.defer_block_free``; those requests carry ``PD_DEFER``)
    O_DEFER_BLOCKS,
    # A prefill instance's KV connector (``kv_send.hold_for_read``): finished
    # requests whose blocks wait for the decode side's read (NixlConnector's
    # ``delay_free_blocks``), in the heap ``Remote.sq``; the block references
    # they hold now, and the most blocks they held at once (with prefix
    # caching a bound: at most the blocks in use).
    O_SEND_LEN,
    O_SEND_BLOCKS,
    O_SEND_PEAK,
    # Decode side: the most blocks the requests in kv_holding_waiting held at
    # once (their KV in flight or landed, not yet scheduled; with prefix
    # caching a bound, as their hits are shared).
    O_HOLD_PEAK,
    # Of O_MACRO_STEPS, the decode steps that preempted (``step._preempting_step``;
    # diagnostic only).
    O_PREEMPT_STEPS,
) = range(53)
NOUT_I = 53
# Counters that say how the steps were taken (by the decode fast path or one by
# one), not what they did: two runs with equal results may differ in these.
FAST_PATH_COUNTERS = (O_MACRO_STEPS, O_PREEMPT_STEPS)

# One step's accumulators, the kernel's ``step.Scratch.step`` (int64), zeroed as each step starts.
(
    BUDGET,  # token budget left (max_num_batched_tokens)
    N_SCHED,  # requests scheduled
    N_PRE,  # preemptions
    N_ADM,  # admissions
    PREFILL,  # prefill tokens scheduled
    DECODE,  # decode tokens scheduled
    SWAP_NS,  # KV transfer time to and from the CPU tier (ns)
    ATTENDED,  # (query, key) pairs, for the roofline model
    KV_TOUCHED,  # KV tokens read or written
    CYCLE,  # 1: a lone request's preemption repeated the previous one
    START,  # clock when the step began (ns)
    THR_NOW,  # long_prefill_token_threshold in force this step
    N_FLIGHT,  # async: requests whose output landed this step
    N_FIN,  # requests finished
    ATTENDED_W,  # ATTENDED bounded by PRICE_WIN2 (a hybrid's sliding layers, roofline)
    KV_W,  # KV_TOUCHED bounded by PRICE_WIN2
    WAITED,  # 1: nothing scheduled while KV loads were in flight (the step waited for one)
    NO_RUN_NEXT,  # 1: the decode run just taken ended where the next step cannot allocate
) = range(18)
NSTEP = 18

# ``ReqState.pd`` flags (disaggregated decode side, ``planner.kv_transfer``).
PD_REMOTE = 1  # its KV comes from a prefill instance (``do_remote_prefill``), load not started
PD_LOADING = 2  # WAITING_FOR_REMOTE_KVS
PD_RECV = 4  # its load landed (``finished_recving_kv_req_ids``)
PD_INFLIGHT = 8  # in ``_inflight_prefills`` (its prefill or load is not done)
PD_LANDED = 16  # async: its load landed, reported by the step in flight (not yet applied)
PD_DEFER = 32  # finished while the step in flight held it: its blocks free when that lands

# Float outputs, shape (C, NOUT_F), float64.
F_WASTE_NS = 0  # step time spent recomputing KV that had been computed before (ns)
F_KV_BLOCK_NS = 1  # integral of blocks in use (after the step's allocations) x step time (block ns)
NOUT_F = 2

# Per-step trace columns, shape (C, T, NTRACE), int64.
(
    T_START_NS,
    T_END_NS,
    T_SCHEDULED,
    T_PREFILL,
    T_DECODE,
    T_RUNNING,
    T_WAITING,
    T_FREE,
    T_PREEMPTED,
    T_FINISHED,
    T_ADMITTED,
) = range(11)
NTRACE = 11
TRACE_COLUMNS = (
    "start_s",
    "end_s",
    "scheduled_tokens",
    "prefill_tokens",
    "decode_tokens",
    "running",
    "waiting",
    "free_blocks",
    "preempted",
    "finished",
    "admitted",
)


# Event log kinds (Out.events[..., 3]); the value column means:
EV_SCHED = 0  # tokens scheduled for the request in this step
EV_PREEMPT = 1  # (none) the request was preempted in this step
EV_FINISH = 2  # (none) this step's output finished the request
EV_ADMIT = 3  # num_computed_tokens at admission (prefix-cache hit, swap-in)
EV_STATE = 4  # request column: len(running), value: len(waiting), after scheduling
EV_FREE = 5  # free blocks after scheduling


def max_events_per_step(max_num_seqs: int, num_requests: int) -> int:
    """Upper bound on event-log rows one step writes: per request at most an
    admission, a schedule and a finish (or a preemption), plus the step's
    EV_STATE and EV_FREE rows. Used to size ``log_entries``."""
    return 3 * min(max_num_seqs, num_requests) + 2


# The workload, shared by all configs: (R,) arrays.
Requests = namedtuple(
    "Requests",
    [
        "prompt",  # int32 prompt tokens
        "max_tokens",  # int32 output tokens (SamplingParams.max_tokens)
        "priority",  # int64 priority (lower is served first under the priority policy)
        "group",  # int32 prefix group, or -1
        "shared_len",  # int32 tokens shared with the group (prefix caching)
        # Block-hash traces (prefix caching), CSR per request: request r's
        # trace blocks are hash_key[hash_off[r]:hash_off[r + 1]], one per
        # hash_block[0] prompt tokens, each an int64 id of the whole prefix up
        # to that block's end (``planner.workload.block_hashes.chain_ids``), -1 for a
        # partial last block or an id no other request carries
        # (``private_singletons``). hash_off (R + 1,) int64, hash_key (H,) int64,
        # hash_block (1,) int64 (0: the workload has no hash ids).
        "hash_off",
        "hash_key",
        "hash_block",
        # Multi-turn sessions: the request sent when this one finishes (its
        # session's next turn), int32, -1 for none. A next turn is not in
        # ``order`` until then (``kernel/arrivals.py``).
        "next_turn",
        # int8 (R,) 1: its prompt's KV comes from a prefill instance (a config
        # with ``kv_transfer``; ``planner.kv_transfer``), else 0
        "remote",
        # int64 (R,) a prefill instance's side (a config with ``kv_transfer``):
        # when (ns) the decode side's read of its KV ends, its blocks held
        # from its finish until then (``kv_send.hold_for_read``); -1: freed
        # at its finish
        "read_end_ns",
        # (T, L) float64 measured step-time tables (``latency.measured_table_ns``),
        # one row per table, padded; config c reads row cfg[c, LAT_TABLE].
        # ``latency.NO_TABLE`` when no config uses one.
        "lat_tables",
        # The run's compile-time feature markers (``kernel.variant.Features``:
        # None for a feature no config uses, whose code is then not compiled).
        "features",
    ],
)

# Per-config, per-request state (``ReqState``), all shape (C, R): the request's
# side of ``vllm/v1/request.py::Request`` plus its arrival. Async scheduling
# (``vllm/v1/core/sched/async_scheduler.py``) adds ph/infl/stale.
ReqState = namedtuple(
    "ReqState",
    [
        "entry_ns",  # int64 when the request becomes visible (arrival + queueing delay), ns
        "order",  # int32 request indices sorted by entry time (a permutation, not per request)
        "ncomp",  # int32 num_computed_tokens
        "nout",  # int32 num_output_tokens
        "held",  # int32 blocks in its block table (null blocks included, see skip)
        "status",  # int8 status code (FUTURE .. REJECTED)
        "first_ns",  # int64 first-token time (ns), -1 if none
        "finish_ns",  # int64 finish time (ns), -1 if none
        "npre",  # int32 preemptions of this request
        "hw",  # int32 high-water mark of computed positions (recompute waste)
        "ph",  # int32 num_output_placeholders (async)
        "infl",  # int32 num_in_flight_tokens (async)
        "stale",  # int32 num_stale_output_tokens (async)
        "sched_ns",  # int64 start of the first step that scheduled it (ns), -1 if none
        "last_ns",  # int64 time of its latest output token (ns), -1 if none
        "max_gap_ns",  # int64 largest gap between two consecutive output tokens (ns)
        "ngap",  # int32 gaps counted (output tokens after the first; their sum is last - first)
        # int32 prompt tokens it holds no blocks for: compat blis with the
        # full-hit defect (docs/blis-compat.md, rule 5), else 0
        "koff",
        # int32 leading entries of its block table that are the null block:
        # blocks freed outside a sliding window
        # (``SlidingWindowManager.remove_skipped_blocks``); it holds held - skip
        # pool blocks. 0 for full attention.
        "skip",
        # int32 speculative decoding (``planner.speculative``): draft tokens
        # pending for its next step (``Request.spec_token_ids``), or -1 after
        # a non-final prefill chunk (``Request.is_prefill_chunk``); 0 without
        "spec",
    ],
)

# Per-config queues and per-step lists, all shape (C, R) int32 (the
# scheduler's ``running`` and ``waiting``, and the batch scheduled/in flight).
Queues = namedtuple(
    "Queues",
    [
        "run",  # running, in admission order
        "wq",  # waiting ring buffer (a deque with prepend)
        "slist",  # requests scheduled this step
        "sched_tok",  # per request: tokens scheduled this step
        "plist",  # requests of the step whose output is in flight (async)
        "ptok",  # their scheduled tokens, negated when they sample (async)
        # speculative decoding: per ``slist`` entry, 32 x the draft positions
        # scheduled + the real drafts among them (``step._drafts_scheduled``)
        "sspec",
        "pspec",  # the same per ``plist`` entry (async)
    ],
)

# The disaggregated decode side's state (``planner.kv_transfer``,
# ``kernel/remote_kv.py``), apart from ``ReqState`` and ``Queues`` so that
# the phases of a plain run, which never read it, do not carry it: only the
# step loop and the gated decode-side calls take it. Each (C, R) when some
# config has ``kv_transfer``, else (C, 1) (never read).
Remote = namedtuple(
    "Remote",
    [
        "pd",  # int8 ``PD_*`` flags
        "xfer_ns",  # int64 when its KV load lands (ns)
        "xfer_tok",  # int32 the tokens its load carries (prompt past the local hit)
        "hq",  # int32 ``kv_holding_waiting`` ring buffer (O_HOLD_HEAD, O_HOLD_LEN)
        # int32 a prefill instance's requests waiting for the decode side's
        # read, a binary min-heap on (``xfer_ns``: when their blocks free, r)
        # of O_SEND_LEN entries (``kv_send.hold_for_read``)
        "sq",
    ],
)

# Per-config counters and logs. ``counters`` (C, NOUT_I) int64 is both the
# kernel's scalar state while it runs and its integer output (O_* columns).
Out = namedtuple(
    "Out",
    [
        "counters",  # (C, NOUT_I) int64
        "floats",  # (C, NOUT_F) float64
        "trace",  # (C, T, NTRACE) int64 per-step trace, T = 0 disables
        "events",  # (C, L, 4) int64 event log (step, request, value, EV_*), L = 0 disables
        # (C, token_gaps.NBINS) int64 counts of inter-token gaps (planner.kernel.token_gaps)
        "itl_hist",
    ],
)


@dataclass
class State:
    """All kernel arrays for C configs x R requests, as three records (see each
    record's field comments for dtypes). Adding a state array means adding a
    field to one record and a line to ``allocate``."""

    req: ReqState
    queues: Queues
    out: Out
    remote: Remote


def entered(entry_ns: np.ndarray) -> np.ndarray:
    """Bool, the shape of ``entry_ns`` (int64 ns): the requests that entered
    the server during the run. One never sent (a closed-loop client's or a
    session's later request still waiting at the end, or a request the
    router sent another replica) keeps ``entry_ns`` INT64_MAX
    (``api._fill_entries``, ``replicas.replica_rows``)."""
    return entry_ns < INT64_MAX


def rows(record: tuple, c: int) -> tuple:
    """Config c's row of every array in a record (the kernel's per-config view)."""
    return type(record)(*(a[c] for a in record))


def allocate(
    num_configs: int,
    num_requests: int,
    trace_steps: int = 0,
    log_entries: int = 0,
    kv_transfer: bool = False,
) -> State:
    """Allocate state for C configs x R requests: zeros, except first/finish,
    first-scheduled and last-token times (-1: none yet). ``entry_ns``/``order``
    are the caller's to fill. Memory is about 133 bytes x C x R plus 5 KB per
    config (``itl_hist``), plus the traces; ``kv_transfer`` (some config has
    a disaggregated decode side) adds 17 bytes x C x R (``pd``, ``xfer_ns``,
    ``xfer_tok``, ``hq``). The kernel's own scratch (per running thread) is
    ``kernel_scratch_bytes``."""
    c, r = num_configs, num_requests

    def z(dt: type) -> np.ndarray:
        return np.zeros((c, r), dtype=dt)

    req = ReqState(
        entry_ns=z(np.int64),
        order=z(np.int32),
        ncomp=z(np.int32),
        nout=z(np.int32),
        held=z(np.int32),
        status=z(np.int8),
        first_ns=np.full((c, r), -1, dtype=np.int64),
        finish_ns=np.full((c, r), -1, dtype=np.int64),
        npre=z(np.int32),
        hw=z(np.int32),
        ph=z(np.int32),
        infl=z(np.int32),
        stale=z(np.int32),
        sched_ns=np.full((c, r), -1, dtype=np.int64),
        last_ns=np.full((c, r), -1, dtype=np.int64),
        max_gap_ns=z(np.int64),
        ngap=z(np.int32),
        koff=z(np.int32),
        skip=z(np.int32),
        spec=z(np.int32),
    )
    queues = Queues(*(z(np.int32) for _ in Queues._fields))
    n = r if kv_transfer else 1
    remote = Remote(
        pd=np.zeros((c, n), dtype=np.int8),
        xfer_ns=np.zeros((c, n), dtype=np.int64),
        xfer_tok=np.zeros((c, n), dtype=np.int32),
        hq=np.zeros((c, n), dtype=np.int32),
        sq=np.zeros((c, n), dtype=np.int32),
    )
    out = Out(
        counters=np.zeros((c, NOUT_I), dtype=np.int64),
        floats=np.zeros((c, NOUT_F), dtype=np.float64),
        trace=np.zeros((c, trace_steps, NTRACE), dtype=np.int64),
        events=np.zeros((c, log_entries, 4), dtype=np.int64),
        itl_hist=np.zeros((c, NBINS), dtype=np.int64),
    )
    return State(req, queues, out, remote)


def _state_bytes(num_requests: int) -> int:
    """Bytes of one ``allocate(1, num_requests)`` (no traces), read from the arrays."""
    st = allocate(1, num_requests)
    return sum(a.nbytes for rec in (st.req, st.queues, st.out, st.remote) for a in rec)


def bytes_per_config(num_requests: int) -> int:
    """State bytes one config holds for a whole kernel call (no traces): the
    arrays of ``allocate`` (measured on a 1- and a 2-request allocation, so every
    field counts, the arrivals ``entry_ns``/``order`` included). Used to size
    sweep chunks."""
    one, two = _state_bytes(1), _state_bytes(2)
    per_request = two - one
    return one - (two - one) + per_request * num_requests


# Bytes per array object Numba allocates (its MemInfo header and the array
# struct; arrays sliced from a thread's arenas have no header, so this
# overcounts them); a config has at most 22 arrays (4 in step._init itself,
# 2 in cycle.new_cycle, with prefix caching 16 in prefix_cache.new_cache).
_ARRAY_OVERHEAD = 128
_SCRATCH_ARRAYS = 22


def pool_table_capacity(n_blocks: int) -> int:
    """Slots of the prefix cache's hash table for ``n_blocks`` blocks (the kernel's
    own ``prefix_cache.table_capacity``, run as plain Python)."""
    from planner.kernel.prefix_cache import table_capacity

    return int(table_capacity.py_func(n_blocks))


def _table_shape(
    num_requests: int, max_num_seqs: int, longest_tokens: int, block_size: int, kv_groups: int
) -> tuple[int, int]:
    """The prefix cache's block tables as ``step._cache_shape`` sizes them:
    S = min(max_num_seqs, R) x kv_groups rows (one per KV cache group of each
    request slot) of maxb = ceil(longest_tokens / block_size) + 1 blocks."""
    return min(max_num_seqs, num_requests) * kv_groups, -(-longest_tokens // block_size) + 1


def scratch_layout(
    num_requests: int,
    num_gpu_blocks: int,
    block_size: int,
    max_num_seqs: int,
    longest_tokens: int,
    caching: bool,
    kv_groups: int = 1,
) -> tuple[int, int, int]:
    """(int32 entries of the livelock detector's snapshot, int32 and int64
    entries the prefix cache takes from its arenas: ``prefix_cache.
    cache_entries``, 0 without caching) for one config: the buffers a worker
    thread reuses (``kernel/arena.py``). ``longest_tokens``: the largest
    min(prompt + output, max_model_len) of the workload's requests;
    ``kv_groups``: the model's KV cache groups (one block-table row each)."""
    r = num_requests
    if not caching:
        return cycle_snapshot_len(r), 0, 0
    from planner.kernel.prefix_cache import cache_entries

    slots, maxb = _table_shape(r, max_num_seqs, longest_tokens, block_size, kv_groups)
    entries = cycle_snapshot_len(r) + int(
        cycle_cache_entries.py_func(r, num_gpu_blocks, slots, maxb)
    )
    return (entries, *cache_entries(num_gpu_blocks, slots, maxb, r))


def kernel_scratch_bytes(
    num_requests: int,
    num_gpu_blocks: int,
    block_size: int,
    max_num_seqs: int,
    longest_tokens: int,
    caching: bool,
    async_scheduling: bool,
    kv_groups: int = 1,
) -> int:
    """Bytes of one config's scratch while it runs, so one per running
    thread: the buffers of ``scratch_layout`` (the livelock snapshot and the
    prefix cache's large arrays, which a worker thread keeps for its batch,
    sized to its largest config: ``kernel/arena.py``), and the small arrays
    ``step._init`` and ``step.new_prefix_cache`` allocate: the step's
    accumulators (NSTEP int64), ``hist`` (min(block_size,
    FAST_PATH_MAX_BLOCK_SIZE) + 1) int64 (the decode fast path), ``skipbuf``
    (R int32 when async), the detector's counters
    (CYCLE_DET int64), the decode fast path's block events (2 S int32, one
    entry without caching), and with caching ``slots`` (S, built as int64
    then int32), ``hits`` (maxb int32) and ``pc`` (``prefix_cache.PC_FIELDS``
    int64).
    Arguments as ``scratch_layout``'s."""
    r = num_requests
    snap, i32, i64 = scratch_layout(
        r, num_gpu_blocks, block_size, max_num_seqs, longest_tokens, caching, kv_groups
    )
    hist = min(block_size, FAST_PATH_MAX_BLOCK_SIZE) + 1
    total = 4 * (snap + i32) + 8 * i64 + 8 * NSTEP + 8 * hist + 8 * CYCLE_DET
    total += 4 * (r if async_scheduling else 1)
    if caching:
        from planner.kernel.prefix_cache import PC_FIELDS

        slots, maxb = _table_shape(r, max_num_seqs, longest_tokens, block_size, kv_groups)
        total += 12 * slots + 4 * maxb * kv_groups + 8 * PC_FIELDS + 8 * slots
    else:
        total += 4
    return total + _ARRAY_OVERHEAD * _SCRATCH_ARRAYS


# The livelock detector's snapshot layout (``cycle._walk``): per request in
# running or waiting, its id and 9 fields; per request in flight (async), 5
# values; 9 scalars. ``cycle.new_cycle`` also keeps CYCLE_DET int64 counters.
CYCLE_FIELDS_PER_REQUEST = 11
CYCLE_FIELDS_IN_FLIGHT = 6
CYCLE_SCALARS = 9
CYCLE_DET = 8


def cycle_snapshot_len(n_req: int) -> int:
    """int32 entries of a snapshot for ``n_req`` requests (its largest state)."""
    return (CYCLE_FIELDS_PER_REQUEST + CYCLE_FIELDS_IN_FLIGHT) * n_req + CYCLE_SCALARS


# With prefix caching the pool is state too (``cycle._walk_pool``): per running
# request its hashed-block count, its junction and block ids (at most the block
# tables' S x maxb entries), the free queue's order (N) and per block its hash key (2
# int32) and its predecessor among blocks of that key (N each). The snapshot is
# allocated whatever the pool's size and counted in ``kernel_scratch_bytes``, so
# the sweep's memory budget sees it and a configuration that cannot fit the
# limit is refused before any work.


@njit(cache=True)
def cycle_cache_entries(num_requests: int, num_gpu_blocks: int, slots: int, maxb: int) -> int:
    """Extra int32 snapshot entries for the prefix cache's state (see above).
    Jitted: the kernel's ``step._init``, ``kernel_scratch_bytes`` and the
    reference engine all call this one definition."""
    return 2 * num_requests + slots * maxb + 4 * num_gpu_blocks


@njit(cache=True, inline="always")
def record_prefix_cache_stats(k, ntok, hit_tokens, preempted):  # noqa: ANN001, ANN201 (jitted)
    """``KVCacheManager.record_prefix_cache_stats`` at admission (vLLM 0.33
    records a lookup only when the request is admitted): ``ntok`` tokens
    queried (``request.num_tokens``), ``hit_tokens`` found cached; a request
    preempted before counts apart (``PrefixCacheStats.preempted_*``)."""
    if preempted:
        k[O_PC_PRE_QUERIES] += ntok
        k[O_PC_PRE_HITS] += hit_tokens
    else:
        k[O_PC_QUERIES] += ntok
        k[O_PC_HITS] += hit_tokens
