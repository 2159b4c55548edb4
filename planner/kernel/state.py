"""Struct-of-arrays simulation state and the column layout of the kernel's outputs.

Per-config scalars are length-C arrays (or columns of ``out_i``/``out_f``);
per-request fields are C x R arrays. ``allocate`` builds all of them at once so
the kernel never allocates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Request status codes (C x R int8).
FUTURE, WAITING, RUNNING, FINISHED, REJECTED = 0, 1, 2, 3, 4

# Integer outputs, shape (C, NOUT_I), int64.
(
    O_FINISHED,  # requests finished (any time, also in the step that crossed the horizon)
    O_REJECTED,  # rejected by the front end (prompt >= max_model_len)
    O_RUNNING_END,
    O_WAITING_END,
    O_ARRIVED,  # requests that entered the scheduler (or were rejected)
    O_PREEMPTIONS,  # preemption events
    O_STEPS,  # scheduler steps simulated
    O_ZERO_STEPS,  # steps that scheduled zero tokens
    O_MIN_FREE,  # fewest free blocks seen after a step's allocations
    O_END_NS,  # clock when the simulation stopped (ns)
    O_BUSY_NS,  # sum of step durations (ns)
    O_LIVELOCKED,  # 1 if a livelock was proven (frozen pool or a repeating cycle)
    O_LIVELOCK_STEP,  # step index at which it was proven, else -1
    O_STEP_LIMIT,  # 1 if max_steps stopped the run
    O_PREFILL_TOKENS,  # scheduled prefill tokens (re-prefill included)
    O_DECODE_TOKENS,  # scheduled decode tokens
    O_INVARIANT_ERRORS,  # steps where held blocks + free blocks != usable blocks
    O_MACRO_STEPS,  # steps simulated by the decode fast path (diagnostic only)
) = range(18)
NOUT_I = 18

# Float outputs, shape (C, NOUT_F), float64.
F_WASTE_NS = 0  # step time spent recomputing KV that had been computed before (ns)
NOUT_F = 1

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


# Event log kinds (rlog[..., 3]); the value column means:
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


@dataclass
class State:
    """All kernel arrays for C configs x R requests (see field comments for shapes)."""

    ncomp: np.ndarray  # (C, R) int32 num_computed_tokens
    nout: np.ndarray  # (C, R) int32 num_output_tokens
    held: np.ndarray  # (C, R) int32 blocks held
    status: np.ndarray  # (C, R) int8 status code
    first_ns: np.ndarray  # (C, R) int64 first-token time (ns), -1 if none
    finish_ns: np.ndarray  # (C, R) int64 finish time (ns), -1 if none
    npre: np.ndarray  # (C, R) int32 preemptions of this request
    hw: np.ndarray  # (C, R) int32 high-water mark of computed positions
    run: np.ndarray  # (C, R) int32 running, in admission order
    wq: np.ndarray  # (C, R) int32 waiting ring buffer (deque with prepend)
    sched_tok: np.ndarray  # (C, R) int32 scratch: tokens scheduled this step
    slist: np.ndarray  # (C, R) int32 scratch: requests scheduled this step
    out_i: np.ndarray  # (C, NOUT_I) int64
    out_f: np.ndarray  # (C, NOUT_F) float64
    trace: np.ndarray  # (C, T, NTRACE) int64, T = 0 disables
    rlog: np.ndarray  # (C, L, 4) int64 event log (step, request, value, EV_*), L = 0 disables
    rlog_n: np.ndarray  # (C,) int64 entries written (may exceed L: then truncated)
    # Async scheduling (vllm/v1/core/sched/async_scheduler.py): per request,
    # and the previous step's batch whose output is still in flight.
    ph: np.ndarray  # (C, R) int32 num_output_placeholders
    infl: np.ndarray  # (C, R) int32 num_in_flight_tokens
    stale: np.ndarray  # (C, R) int32 num_stale_output_tokens
    plist: np.ndarray  # (C, R) int32 requests of the in-flight step
    ptok: np.ndarray  # (C, R) int32 their scheduled tokens, negated when they sample


def allocate(
    num_configs: int, num_requests: int, trace_steps: int = 0, log_entries: int = 0
) -> State:
    """Allocate zeroed state. Memory is about 40 bytes x C x R, plus the traces."""
    c, r = num_configs, num_requests

    def z(dt: type) -> np.ndarray:
        return np.zeros((c, r), dtype=dt)

    return State(
        ncomp=z(np.int32),
        nout=z(np.int32),
        held=z(np.int32),
        status=z(np.int8),
        first_ns=np.full((c, r), -1, dtype=np.int64),
        finish_ns=np.full((c, r), -1, dtype=np.int64),
        npre=z(np.int32),
        hw=z(np.int32),
        run=z(np.int32),
        wq=z(np.int32),
        sched_tok=z(np.int32),
        slist=z(np.int32),
        out_i=np.zeros((c, NOUT_I), dtype=np.int64),
        out_f=np.zeros((c, NOUT_F), dtype=np.float64),
        trace=np.zeros((c, trace_steps, NTRACE), dtype=np.int64),
        rlog=np.zeros((c, log_entries, 4), dtype=np.int64),
        rlog_n=np.zeros(c, dtype=np.int64),
        ph=z(np.int32),
        infl=z(np.int32),
        stale=z(np.int32),
        plist=z(np.int32),
        ptok=z(np.int32),
    )


def _state_bytes(num_requests: int) -> int:
    """Bytes of one ``allocate(1, num_requests)`` (no traces), read from the arrays."""
    return sum(a.nbytes for a in vars(allocate(1, num_requests)).values())


# api.simulate's per-config inputs beside the state: ``entry`` (int64) and
# ``order`` (int32), shape (C, R).
SIMULATE_BYTES_PER_REQUEST = 8 + 4


def bytes_per_config(num_requests: int) -> int:
    """State bytes one config holds for a whole kernel call (no traces): the
    arrays of ``allocate`` (measured on a 1- and a 2-request allocation, so every
    field counts) plus ``api.simulate``'s per-config ``entry``/``order`` rows.
    Used to size sweep chunks."""
    one, two = _state_bytes(1), _state_bytes(2)
    per_request = two - one + SIMULATE_BYTES_PER_REQUEST
    return one - (two - one) + per_request * num_requests


# Bytes per array object Numba allocates (its MemInfo header and the array
# struct); simulate_one allocates 17 arrays per config.
_ARRAY_OVERHEAD = 128
_SCRATCH_ARRAYS = 17


def pool_table_capacity(n_blocks: int) -> int:
    """Slots of the prefix cache's hash table for ``n_blocks`` blocks (the kernel's
    own ``prefix_cache.table_capacity``, run as plain Python)."""
    from planner.kernel.prefix_cache import table_capacity

    return int(table_capacity.py_func(n_blocks))


def kernel_scratch_bytes(
    num_requests: int,
    num_gpu_blocks: int,
    block_size: int,
    max_num_seqs: int,
    longest_tokens: int,
    caching: bool,
    async_scheduling: bool,
) -> int:
    """Bytes ``step.simulate_one`` allocates for one config while it runs (freed
    when it returns), so one per running thread. Counted from its allocations:
    ``hist`` (block_size + 1) int64 (the decode fast path), ``skipbuf`` (R int32
    when async), and with prefix caching the block tables ``table`` (S x maxb
    int32, S = min(max_num_seqs, R), maxb = ceil(longest_tokens / block_size)
    + 1), ``slots`` (S, built as int64 then int32), ``slot_of``/``ncached``
    (R int32), ``hits`` (maxb int32) and the pool of ``prefix_cache.new_pool``
    for num_gpu_blocks blocks N: ``ref``/``hnext``/``hprev`` (N int32), ``hkey``
    (N int64), ``fq_next``/``fq_prev`` (N + 2 int32), ``tkey`` (cap int64),
    ``thead``/``ttail`` (cap int32). Without caching those are 1-element arrays.
    ``longest_tokens``: the largest min(prompt + output, max_model_len) of the
    workload's requests."""
    r = num_requests
    n = num_gpu_blocks if caching else 1
    slots = min(max_num_seqs, r) if caching else 1
    maxb = -(-longest_tokens // block_size) + 1 if caching else 1
    per_req = r if caching else 1
    cap = pool_table_capacity(n)
    total = 8 * (block_size + 1) + 4 * (r if async_scheduling else 1)
    total += 4 * slots * maxb + 12 * slots + 8 * per_req + 4 * maxb
    total += 12 * n + 8 * n + 8 * (n + 2) + 24 + 16 * cap
    return total + _ARRAY_OVERHEAD * _SCRATCH_ARRAYS
