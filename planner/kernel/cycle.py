"""Livelock proof for any number of requests: a scheduler state that repeats.

Once every request has arrived, the scheduler is a deterministic function of
its state: if a state repeats, the run cycles forever and never finishes its
work (a livelock, whatever the number of requests). ``livelock_proven`` looks
for a repeat with Brent's cycle detection (R. P. Brent, "An improved Monte
Carlo factorization algorithm", BIT 20, 1980): it keeps a snapshot taken at
steps s0, s0 + 1, s0 + 3, s0 + 7, ... and compares each later state with the
latest one. The comparison is exact (no hash): the state's scalars first, in
O(1), and only when they match every live request, stopping at the first
difference.

The state is everything the next step depends on (``_walk``): free blocks,
len(running) and len(waiting), the CPU tier's free blocks, the effective
max_num_seqs and the adaptive window's position, the async batch in flight;
and for every request in ``running`` (in order), ``waiting`` (in order) or in
flight: its status, num_computed_tokens, output tokens, blocks (its block
table's length and, under a sliding window, its leading null blocks), async
placeholders, in-flight and stale tokens, its preemption count where
anti-starvation reads it (saturated at that bound: beyond it the count no
longer changes a decision), and its pending drafts (speculative decoding).
Finished and rejected requests are never read again; no request is still to
arrive. Not part of it: the clock (with no arrival left it matters only to
the horizon) and the recompute high-water mark (it only attributes waste).

Detection runs only while nothing can be progress: after every arrival (closed
loop: every arrival a release has allowed; more need a finish; replicas behind
a router: once the router has sent its last request), and
``QUIET_STEPS`` steps with no request finished and, under recompute or swap
preemption, no decode token scheduled (a decode samples a token, and a
request's output count never falls then, so no cycle contains one; restart
preemption discards outputs, so there only finishes count). With prefix
caching the pool is state too (``_walk_pool``): each running request's block
ids and hashed-block count, the free queue's order, and every block's hash
key and place among the blocks of its key, whatever the pool's size (the
snapshot is counted in ``state.kernel_scratch_bytes``).

When the proof comes: if detection starts at step s0 and the states from step
s0 + m on repeat with period L, the snapshot taken at the first s0 + 2^k - 1
with 2^k - 1 >= m and 2^k >= L is met again L steps later, so the run ends
``livelocked`` within 2 * max(m + 1, L) + L steps of s0. The first repeat is
at s0 + m + L; the proof comes fewer than max(m + 1, 2L) steps after it, not
at it (the proof's step is ``O_LIVELOCK_STEP``).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from planner import config as K
from planner.kernel import prefix_cache as PC
from planner.kernel import state as S
from planner.kernel.arrivals import arrival_limit, may_receive
from planner.kernel.state import CYCLE_DET as NDET
from planner.kernel.state import CYCLE_FIELDS_IN_FLIGHT as FIELDS_IN_FLIGHT
from planner.kernel.state import CYCLE_FIELDS_PER_REQUEST as FIELDS_PER_REQUEST
from planner.kernel.state import CYCLE_SCALARS as SCALARS

QUIET_STEPS = 32
# det fields (int64)
ACTIVE, QUIET, POWER, LAM, MARK_FIN, MARK_NXT, MARK_DEC, _UNUSED = range(NDET)
# Modes of ``_walk``, passed as int64 values (a bare constant would be a
# literal type, and Numba would compile the walk once per mode).
WRITE, COMPARE = np.int64(1), np.int64(2)

# ``snap`` (int32) holds a snapshot of the state, ``det`` the detector's counters.
Cycle = namedtuple("Cycle", "snap det")


@njit(cache=True)
def new_cycle(n_req, cache_entries, buf):
    """Detector state for ``n_req`` requests. Its snapshot, of
    ``state.cycle_snapshot_len(n_req)`` entries plus ``cache_entries`` for the
    prefix cache (``state.cycle_cache_entries``), is the front of ``buf``, the
    thread's reused int32 buffer (``kernel/arena.py``; every entry is written
    before it is compared). Raises ValueError if ``buf`` is shorter."""
    size = (FIELDS_PER_REQUEST + FIELDS_IN_FLIGHT) * n_req + SCALARS + cache_entries
    if buf.shape[0] < size:
        raise ValueError("livelock snapshot buffer too small (state.scratch_layout)")
    return Cycle(buf[:size], np.zeros(NDET, dtype=np.int64))


@njit(cache=True, inline="always")
def _emit(x, mode, snap, pos, same):
    """Feed one state value to the walk: store it or compare it."""
    v = np.int32(x)
    if mode == WRITE:
        snap[pos] = v
    else:
        same = same and snap[pos] == v
    return pos + 1, same


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _emit_request(r, anti_k, st, mode, snap, pos, same):
    """A live request's fields, in a fixed order."""
    sat = min(np.int64(st.npre[r]), anti_k) if anti_k > 0 else np.int64(0)
    i64 = np.int64
    fields = (i64(r), i64(st.status[r]), i64(st.ncomp[r]), i64(st.nout[r]), i64(st.held[r]),
              i64(st.skip[r]), i64(st.ph[r]), i64(st.infl[r]), i64(st.stale[r]), sat,
              i64(st.spec[r]))  # fmt: skip
    for x in fields:
        pos, same = _emit(x, mode, snap, pos, same)
    return pos, same


@njit(cache=True, inline="always")
def _scalars(cfg, k):
    """The state's scalars (module docstring), in a fixed order."""
    adapt = cfg[K.ADAPT_WINDOW] > 0
    return (
        k[S.O_FREE], k[S.O_RUNNING_END], k[S.O_WAITING_END], k[S.O_CPU_FREE], k[S.O_SEQS],
        k[S.O_N_PEND], k[S.O_N_STALE],
        k[S.O_WINDOW_END] - k[S.O_STEPS] if adapt else np.int64(0),
        k[S.O_PREEMPTIONS] - k[S.O_WINDOW_PRE] if adapt else np.int64(0),
    )  # fmt: skip


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _same_scalars(cfg, k, snap):
    """Whether the scalars equal the snapshot's: O(1), screens ``_walk``."""
    pos, same = 0, True
    for x in _scalars(cfg, k):
        pos, same = _emit(x, COMPARE, snap, pos, same)
    return same


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _walk(cfg, st, q, k, p, snap, mode):
    """Store the state (the module docstring lists it) in ``snap`` in canonical
    order, or compare it with ``snap`` (stopping at the first difference).
    Returns whether it is equal (always True when storing)."""
    R = st.ncomp.shape[0]
    anti_k = cfg[K.ANTI_STARVATION]
    # Typed, not literal: one signature of _emit_request (0.16 CPU-s of a
    # cold compile each, 2026-12-07)
    pos, same = np.int64(0), np.bool_(True)
    for x in _scalars(cfg, k):
        pos, same = _emit(x, mode, snap, pos, same)
    for i in range(k[S.O_RUNNING_END]):
        if not same:
            return False
        pos, same = _emit_request(np.int64(q.run[i]), anti_k, st, mode, snap, pos, same)
    wh = k[S.O_WAITING_HEAD]
    for j in range(k[S.O_WAITING_END]):
        if not same:
            return False
        r = np.int64(q.wq[(wh + j) % R])  # one signature of _emit_request
        pos, same = _emit_request(r, anti_k, st, mode, snap, pos, same)
    i64 = np.int64
    for j in range(k[S.O_N_PEND]):
        r = q.plist[j]
        fields = (i64(r), i64(q.ptok[j]), i64(st.status[r]), i64(st.infl[r]), i64(st.stale[r]),
                  i64(q.pspec[j]))  # fmt: skip
        for x in fields:
            pos, same = _emit(x, mode, snap, pos, same)
    if p is not None:  # prefix caching
        if same:
            return _walk_pool(st, q, k, p, mode, snap, pos)
    return same


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _walk_pool(st, q, k, p, mode, snap, pos):
    """The prefix cache's part of the state (``state.cycle_cache_entries``):
    each running request's hashed-block count and block ids (in each KV
    cache group, and a hybrid's junction), the free queue in
    order, and per block its hash key and its predecessor among the blocks of
    that key (the lists a lookup reads first to last, as vLLM holds them:
    ``PC.published_prev``, so a block's lazy publication makes no difference).
    Returns whether equal."""
    same = True
    for i in range(k[S.O_RUNNING_END]):
        r = q.run[i]
        s = p.slot_of[r]
        # compat blis's full-hit defect: a request holding no prompt blocks
        # (``st.koff``) is told apart by a negated count.
        nc = p.ncached[r] if st.koff[r] == 0 else -1 - p.ncached[r]
        pos, same = _emit(nc, mode, snap, pos, same)
        G = p.pc[PC.GROUPS]  # one row per KV cache group
        for row in range(s * G, s * G + G):
            for j in range(st.held[r]):
                pos, same = _emit(p.table[row, j], mode, snap, pos, same)
        if G > 1:
            pos, same = _emit(p.junction[r], mode, snap, pos, same)
        if not same:
            return False
    mask = p.fq.shape[0] - 1
    for c in range(p.pc[PC.FQ_HEAD], p.pc[PC.FQ_TAIL]):
        if p.fq[c & mask] >= 0:  # the free queue in order (``prefix_cache``'s ring)
            pos, same = _emit(p.fq[c & mask], mode, snap, pos, same)
    if not same:
        return False
    for b in range(p.hkey.shape[0]):
        key = PC.hash_of(b, p.hkey)  # pending or not: vLLM's view
        pos, same = _emit(key & 0xFFFFFFFF, mode, snap, pos, same)
        pos, same = _emit(key >> 32, mode, snap, pos, same)
        pos, same = _emit(PC.published_prev(b, p), mode, snap, pos, same)
        if not same:
            return False
    return same


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _progressed(cfg, k, det):
    """Whether anything that cannot recur happened since the last call: an
    arrival, a finish, or (recompute and swap preemption) a decode. Updates
    the marks."""
    dec = k[S.O_DECODE_TOKENS] if cfg[K.PREEMPT] != 1 else 0
    fin, nxt = k[S.O_FINISHED], k[S.O_NEXT_ARRIVAL]
    if det[MARK_FIN] == fin and det[MARK_NXT] == nxt and det[MARK_DEC] == dec:
        return False
    det[MARK_FIN], det[MARK_NXT], det[MARK_DEC] = fin, nxt, dec
    return True


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def after_fast_path(cfg, k, cyc):
    """The decode fast path jumped over steps that each decoded: progress, as
    the detector would have seen at each of them (the reference engine takes
    them one by one)."""
    _progressed(cfg, k, cyc.det)
    cyc.det[QUIET] = 0
    cyc.det[ACTIVE] = 0


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def livelock_proven(cfg, st, q, k, p, cyc):
    """One step of Brent's detection, after a normal step (module docstring).
    Returns True when this step's state equals the latest snapshot exactly
    (the scalars first, in O(1); then every live request)."""
    det = cyc.det
    can_arrive = k[S.O_NEXT_ARRIVAL] < arrival_limit(cfg, k, st.ncomp.shape[0]) or may_receive(k)
    # Requests in ``kv_holding_waiting`` (disaggregated decode side) or blocks
    # waiting for the decode side's read (a prefill instance): loads land and
    # reads complete with time, so the state is not a cycle's.
    if can_arrive or k[S.O_HOLD_LEN] + k[S.O_SEND_LEN] > 0 or _progressed(cfg, k, det):
        det[QUIET] = 0
        det[ACTIVE] = 0
        return False
    det[QUIET] += 1
    if det[QUIET] < QUIET_STEPS:
        return False
    if det[ACTIVE] == 0:
        det[ACTIVE], det[POWER], det[LAM] = 1, 1, 0
        _walk(cfg, st, q, k, p, cyc.snap, WRITE)
        return False
    det[LAM] += 1
    if _same_scalars(cfg, k, cyc.snap) and _walk(cfg, st, q, k, p, cyc.snap, COMPARE):
        return True
    if det[LAM] == det[POWER]:
        det[POWER] *= 2
        det[LAM] = 0
        _walk(cfg, st, q, k, p, cyc.snap, WRITE)
    return False
