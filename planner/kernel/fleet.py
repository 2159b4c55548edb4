"""Replicas behind a router: one configuration served by R identical vLLM
servers fed from one request stream.

Each replica is a whole ``step`` simulation on its own row of the state
arrays (its pool, queues, clock). The router sends the stream's requests one
at a time, in arrival order. Before sending request j (arrival time t) it
advances every replica to t: each runs the steps that start before t
(``step.run_steps`` pauses when its clock reaches t, before taking in
arrivals, and its decode fast path never runs past t). It then reads the
replicas' live state as of t and puts j in one replica's ``order`` (by entry
time: arrival + that server's queueing delay); the replica sees the request
at its first step start after its entry, as a lone server would. After the last send,
every replica runs on to its end (horizon, work done, livelock, step limit).
So replicas advance in time order and no router decision reads the future.

What the router reads, as a real one would (``replica_loads``):
- outstanding requests: sent to the replica and not yet answered by t
  (finished or rejected), the count an HTTP router keeps of its in-flight
  requests; a finish in the step that is still running at t (sync
  scheduling: outputs land at the step's end) is not yet an answer.
- KV blocks in use: the replica's pool after its latest step's allocations
  and frees (vLLM's ``kv_cache_usage`` gauge, which the engine updates each
  step; a router polling it sees at most that step's lag).

Policies: ``routers.py``.

With R = 1 the results equal ``step.simulate_one``'s (tests run the golden
scenarios both ways); only the diagnostics ``O_MACRO_STEPS`` and
``O_PREEMPT_STEPS`` can differ, because decode runs stop at every send.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit, types
from numba.extending import overload
from numba.typed import List

from planner import config as K
from planner.bounds import INT64_MAX
from planner.kernel import state as S
from planner.kernel.arrivals import later_by, place, queue_delay
from planner.kernel.routers import (
    LEAST_KV,
    LLM_D,
    PREFIX_AFFINITY,
    RANDOM,
    ROUND_ROBIN,
    affinity,
    argmin2,
    llm_d_route,
    splitmix64,
)
from planner.kernel.rowview import row
from planner.kernel.step import ENDED, _init, fast_path_allowed, new_prefix_cache, run_steps
from planner.workload.front_end import front_end_rejects


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def replica_loads(cfg, o, lo, n_rep, t, load, used):
    """Fill ``load`` (outstanding requests) and ``used`` (KV blocks in use),
    (n_rep,) int64, as the router sees replicas lo..lo+n_rep-1 at time t (ns).
    A sync step still running at t (its end, the clock, is after t) has not
    answered the requests it finishes."""
    late_ok = cfg[lo, K.ASYNC] == 0
    for i in range(n_rep):
        k = o.counters[lo + i]
        late = k[S.O_FINISHED] - k[S.O_FIN_BEFORE_STEP] if late_ok and k[S.O_END_NS] > t else 0
        load[i] = k[S.O_ORDER_END] - k[S.O_FINISHED] - k[S.O_REJECTED] + late
        used[i] = k[S.O_USABLE] - k[S.O_FREE]


# A fleet's replicas: their scratch and prefix caches (``step._init``), which
# have ended, the router's view (``replica_loads``), prefix_affinity's memory
# (``owner``: (keys, 1) int32, key -> replica) or llm_d's (``owner``: (keys,
# replicas) int32, 1 where the router sent that key to that replica); (1, 1)
# for other routers.
Replicas = namedtuple("Replicas", "scs pcs ended load used owner")

# Closed-loop clients of a fleet (vLLM bench's semaphore of N, as
# ``arrivals.py`` for one server): requests in flight (request, replica),
# answers not yet final (sorted) and final answer times in order.
Clients = namedtuple("Clients", "fl_r fl_rep pend final counts")
N_FLIGHT, N_PEND, N_FINAL = 0, 1, 2
# Arguments passed as typed values, not literals: Numba compiles a function
# once per literal value it is called with.
NO_UNTIL = np.int64(-1)  # run to the end
OPEN, CLOSED = np.bool_(False), np.bool_(True)


@njit(cache=True, inline="always")
def _start(kx, lo, n_rep, n_keys, caching, bufs):
    """``step._init`` every replica with routing open and nothing sent; their
    prefix caches (``step.new_prefix_cache``) when ``caching`` is not None."""
    cfg, rq, o = kx[0], kx[2], kx[5]
    scs = List()
    for i in range(n_rep):
        k = o.counters[lo + i]
        scs.append(_init(cfg[lo + i], rq, k, bufs[0][i]))
        k[S.O_ORDER_END] = 0
        k[S.O_ROUTE_UNTIL] = 0
        k[S.O_ROUTE_MORE] = 1
    pcs = None
    if caching is not None:
        pcs = List()
        for i in range(n_rep):
            pcs.append(new_prefix_cache(cfg[lo + i], rq, bufs[1][i], bufs[2][i]))
    policy = cfg[lo, K.ROUTER]
    owner = np.full((1, 1), -1, np.int32)
    if policy == PREFIX_AFFINITY:
        owner = np.full((n_keys[0], 1), -1, np.int32)
    elif policy == LLM_D:
        owner = np.zeros((n_keys[0], n_rep), np.int32)
    zeros = np.zeros(n_rep, dtype=np.int64)
    return Replicas(scs, pcs, np.zeros(n_rep, dtype=np.bool_), zeros, zeros.copy(), owner)


def _cache_at(pcs, i):  # noqa: ANN001, ANN202 (a jitted call's stub)
    """Replica i's prefix cache, or None without prefix caching."""
    return None if pcs is None else pcs[i]


@overload(_cache_at)
def _cache_at_typed(pcs, i):  # noqa: ANN001, ANN202
    """Chosen by ``pcs``' type at compile time. An ``if caching is None``
    around two ``run_steps`` calls was not pruned once inlined, so every
    fleet with prefix caching also compiled the whole step loop with ``p``
    None: a fleet with async scheduling and caching took 66.3 CPU-s to
    compile, now 26.5 (2-core machine, the lone server's variant already
    cached, 2026-12-06)."""
    if isinstance(pcs, types.NoneType):
        return lambda pcs, i: None
    return lambda pcs, i: pcs[i]


@njit(cache=True, inline="always")
def _advance(kx, lo, i, until, rp, ctl, macro, check):
    """Run replica i until its clock reaches ``until`` (-1: to its end), with
    its prefix cache if it has one (``_cache_at``; ``step.prefix_cache_of``)."""
    cfg, cfgf, rq, st, q, o, x = kx
    c = lo + i
    o.counters[c, S.O_ROUTE_UNTIL] = until
    code = run_steps(
        cfg[c], cfgf[c], rq, row(st, c), row(q, c), row(o, c), row(x, c), rp.scs[i],
        _cache_at(rp.pcs, i), ctl, macro, check,
    )  # fmt: skip
    rp.ended[i] = code == ENDED


@njit(cache=True, inline="always")
def _choose(kx, lo, n_rep, j, r, t, rp, keys, rng):
    """The router's replica for stream request j (request r) at time t (ns),
    and the random router's next state (``routers.py``)."""
    cfg, rq, o = kx[0], kx[2], kx[5]
    replica_loads(cfg, o, lo, n_rep, t, rp.load, rp.used)
    policy = cfg[lo, K.ROUTER]
    if policy == ROUND_ROBIN:
        return j % n_rep, rng
    if policy == RANDOM:
        rng, x = splitmix64(rng)
        return np.int64(x % np.uint64(n_rep)), rng
    if policy == LEAST_KV:
        return argmin2(rp.used, rp.load), rng
    key_off, key_ids, key_tokens = keys[0], keys[1], keys[2]
    if policy == LLM_D:
        return llm_d_route(
            r, rq.prompt[r], cfg[lo, K.BS], o.counters, lo, key_off, key_ids, key_tokens,
            rp.owner, rp.load, rng,
        )  # fmt: skip
    dest = -1
    if policy == PREFIX_AFFINITY:
        dest = affinity(r, rq.prompt[r], key_off, key_ids, key_tokens, rp.owner, rp.load)
    if dest < 0:
        dest = argmin2(rp.load, rp.used)
    if policy == PREFIX_AFFINITY:
        for m in range(key_off[r], key_off[r + 1]):
            rp.owner[key_ids[m], 0] = dest
    return dest, rng


@njit(cache=True, inline="always")
def _send(kx, lo, dest, r, t, closed):
    """Request r reaches replica ``dest`` at time t (ns): closed loop, its
    entry is t + the queueing delay (alpha0 + alpha1 x prompt, saturating);
    it joins the replica's ``order`` by (entry, id) among those not arrived."""
    cfg, rq, st, o = kx[0], kx[2], kx[3], kx[5]
    c = lo + dest
    if closed:
        st.entry_ns[c, r] = later_by(t, queue_delay(cfg[c], rq.prompt[r]))
    k = o.counters[c]
    place(r, k[S.O_ORDER_END], row(st, c), k)
    k[S.O_ORDER_END] += 1


@njit(cache=True, inline="always")
def _end_routing(kx, lo, n_rep):
    """Routing is over: no replica pauses for the router any more."""
    o = kx[5]
    for i in range(n_rep):
        o.counters[lo + i, S.O_ROUTE_UNTIL] = NO_UNTIL
        o.counters[lo + i, S.O_ROUTE_MORE] = 0


@njit(cache=True, inline="always")
def _arrival(kx, lo, r):
    """Stream request r's arrival (ns): its entry less the queueing delay."""
    cfg, rq, st = kx[0], kx[2], kx[3]
    return st.entry_ns[lo, r] - queue_delay(cfg[lo], rq.prompt[r])


@njit(cache=True, inline="always")
def _route_time(kx, lo, keys, r):
    """When the open loop's router sends stream request r (ns): its route
    time in ``keys[4]`` where given (a disaggregated decode pool: llm-d picks
    the decode replica at the client's arrival, and the request enters it
    when its prefill ends), else its arrival."""
    route = keys[4]
    if route.shape[0] > 0:
        return route[r]
    return _arrival(kx, lo, r)


@njit(cache=True, inline="always")
def _event_time(kx, c):
    """When replica row c acts next: its clock while it has work, the entry
    of its next routed request while idle, INT64_MAX with nothing to do."""
    st, o = kx[3], kx[5]
    k = o.counters[c]
    if k[S.O_RUNNING_END] > 0 or k[S.O_WAITING_END] > 0:
        return k[S.O_END_NS]
    if k[S.O_NEXT_ARRIVAL] < k[S.O_ORDER_END]:
        return max(k[S.O_END_NS], st.entry_ns[c, st.order[c, k[S.O_NEXT_ARRIVAL]]])
    return INT64_MAX


@njit(cache=True, inline="always")
def _collect_answers(kx, lo, i, cl):
    """Answers of replica i's requests in flight that finished join the
    pending answer times: a client has its answer alpha2 x outputs after the
    last token (``arrivals.answered``). (Requests the front end rejects are
    answered at their entry, known when they are sent.)"""
    cfg, st = kx[0], kx[3]
    c = lo + i
    n = cl.counts
    f = 0
    while f < n[N_FLIGHT]:
        r = cl.fl_r[f]
        if cl.fl_rep[f] != i or st.status[c, r] != S.FINISHED:
            f += 1
            continue
        n[N_FLIGHT] -= 1
        cl.fl_r[f], cl.fl_rep[f] = cl.fl_r[n[N_FLIGHT]], cl.fl_rep[n[N_FLIGHT]]
        _add_answer(cl, st.finish_ns[c, r] + cfg[c, K.A2] * np.int64(st.nout[c, r]))


@njit(cache=True, inline="always")
def _add_answer(cl, t):
    """An answer at t (ns) joins the pending ones, kept sorted."""
    n = cl.counts
    p = n[N_PEND]
    while p > 0 and cl.pend[p - 1] > t:
        cl.pend[p] = cl.pend[p - 1]
        p -= 1
    cl.pend[p] = t
    n[N_PEND] += 1


@njit(cache=True, inline="always")
def _finalize(cl, m):
    """Answers at or before m (ns) are final: every later one ends a step
    that starts at or after m, the replicas' earliest clock."""
    n = cl.counts
    moved = 0
    while moved < n[N_PEND] and cl.pend[moved] <= m:
        cl.final[n[N_FINAL]] = cl.pend[moved]
        n[N_FINAL] += 1
        moved += 1
    for p in range(moved, n[N_PEND]):
        cl.pend[p - moved] = cl.pend[p]
    n[N_PEND] -= moved


@njit(cache=True, inline="always")
def _send_time(kx, lo, stream, j, conc, think, cl):
    """When the client sends stream request j: its scheduled arrival, and for
    j >= N no earlier than think time after the (j - N + 1)-th answer
    (``arrivals.release``); INT64_MAX while that answer is not final."""
    if j >= stream.shape[0]:
        return INT64_MAX
    t = _arrival(kx, lo, stream[j])  # its scheduled arrival
    if j < conc:
        return t
    if cl.counts[N_FINAL] < j - conc + 1:
        return INT64_MAX
    return max(t, later_by(cl.final[j - conc], think))


@njit(cache=True, nogil=True)
def simulate_fleet(kx, lo, n_rep, conc, think, keys, ctl, use_macro, check, caching, bufs, clients):
    """Simulate one fleet: replicas on rows lo..lo+n_rep-1 of every array of
    ``kx`` = (cfg (C, NCOLS), cfgf, rq, st, q, o, x), the kernel's inputs
    and ``state.allocate`` records, rows identical per fleet. Row lo's
    ``order`` holds the stream by arrival, ties by id; every replica row's
    ``entry_ns`` the same entry times. ``conc`` > 0: closed-loop clients
    (the replicas' own CONC column is 0: each serves what it is sent) with
    ``think`` ns between an answer and the next send. ``keys`` = (key_off
    (R + 1,) int64, keys (H,) int64 dense prefix keys, key_tokens (H,) int64
    tokens each key covers, n_keys (1,) int64), for ``prefix_affinity`` and
    ``llm_d``, and route_ns (R,) int64 when the open loop's router sends
    each request (``_route_time``; (0,) for its arrival).
    ``caching``: None without prefix caching, else True (the step loop is
    compiled for each: ``step.prefix_cache_of``). ``bufs``: the thread's
    reused scratch (``kernel/arena.py``), (n_rep, entries) int32, int32 and
    int64 arrays, a row per replica (``step.scratch_sizes``). ``clients``:
    True when some fleet of the run has closed-loop clients, else None (a
    compile-time choice, as ``caching``: Numba prunes the closed loop's
    code for None; the replicas' own rows carry no CONC, so the kernel
    variant's markers do not say it).

    Open loop: before each send (at its route time: its arrival, or
    ``keys[4]``) every replica advances to
    that time; then the router chooses (module docstring). Closed loop: an
    answer in any replica frees a client, whose next request goes through
    the router; send times depend on answers, so the replicas advance in
    lockstep: the replica that acts first takes one step; before it, every
    send due by then is routed, once the answers it waits for are final
    (``_finalize``). The decode fast path is off there (each step is one
    call). Livelock proofs: with one replica as a lone server's (only its
    own finish can send more); with several, only after the last send
    (another replica's finish could send one more), so replicas that all
    cycle before then end at ``max_steps``. After the last send (or a stop)
    every replica runs to its end.

    ``run_steps`` is called at two places (``_advance``, inlined): while
    routing and in the run to the end. Numba links the step loop into this
    module and LLVM optimizes it again with every inlined call site: the
    four sites before (an advance and a run to the end, in the open and in
    the closed loop) compiled the plain variant in 14.2-18.9 CPU-s, these
    two in 8.3-10.2 (2-core machine, the lone server's kernel cached,
    2026-12-07; ``tools/fleet_speed.py``, docs/speed.md). One site compiled
    in 7.5, but open-loop fleets then ran 8% slower (cause not found), so
    the run to the end keeps its own."""
    cfg, rq, st, o = kx[0], kx[2], kx[3], kx[5]
    closed = conc > 0
    # ``macro`` stays a runtime bool (a literal False would make Numba compile
    # the whole step loop a second time for it).
    macro = fast_path_allowed(cfg[lo], row(o, lo), use_macro) and not closed
    stream = st.order[lo].copy()
    n_req = stream.shape[0]
    rp = _start(kx, lo, n_rep, keys[3], caching, bufs)
    n_cl = n_req if closed else 0
    cl = Clients(
        np.empty(n_cl, np.int64), np.empty(n_cl, np.int64), np.empty(n_cl, np.int64),
        np.empty(n_cl, np.int64), np.zeros(3, np.int64),
    )  # fmt: skip
    rng = np.uint64(cfg[lo, K.ROUTER_SEED])
    routing = n_req > 0
    if not routing:
        _end_routing(kx, lo, n_rep)
    t = _route_time(kx, lo, keys, stream[0]) if routing and not closed else NO_UNTIL
    j, i = 0, 0  # the next stream request to send; the next replica to advance
    while True:
        if routing and ctl[0] != 0:  # stopped: every replica runs to its end
            routing, i = False, 0
            _end_routing(kx, lo, n_rep)
        if not routing:
            while i < n_rep and rp.ended[i]:
                i += 1
            if i == n_rep:
                break  # every replica has run to its end
            _advance(kx, lo, i, NO_UNTIL, rp, ctl, macro, check)
            if closed:
                _collect_answers(kx, lo, i, cl)
            i += 1
            continue
        elif clients is not None and closed:
            m, first = INT64_MAX, -1
            for c in range(n_rep):
                e = INT64_MAX if rp.ended[c] else _event_time(kx, lo + c)
                if e < m:
                    m, first = e, c
            _finalize(cl, m)
            t = _send_time(kx, lo, stream, j, conc, think, cl)
            if t < INT64_MAX and t <= m:
                r = stream[j]
                dest, rng = _choose(kx, lo, n_rep, j, r, t, rp, keys, rng)
                _send(kx, lo, dest, r, t, CLOSED)
                if front_end_rejects(rq.prompt[r], rq.max_tokens[r], cfg[lo, K.MML]):
                    # the front end rejects it on entry: answered then
                    _add_answer(cl, st.entry_ns[lo + dest, r])
                else:
                    n = cl.counts[N_FLIGHT]
                    cl.fl_r[n], cl.fl_rep[n] = r, dest
                    cl.counts[N_FLIGHT] += 1
                j += 1
                continue
            if first < 0 or j == n_req:  # all sent, or nothing runs and nothing can be sent
                routing, i = False, 0
                _end_routing(kx, lo, n_rep)
                continue
            if n_rep == 1:  # only its own finish can send more: its livelock is provable
                o.counters[lo, S.O_ROUTE_MORE] = t < INT64_MAX or cl.counts[N_PEND] > 0
            nxt, until = first, m + 1
        elif i < n_rep:  # open loop: replica i advances to request j's arrival t
            if rp.ended[i]:
                i += 1
                continue
            nxt, until = i, t
            i += 1
        else:  # open loop: every replica is at request j's arrival: route it
            r = stream[j]
            dest, rng = _choose(kx, lo, n_rep, j, r, t, rp, keys, rng)
            _send(kx, lo, dest, r, t, OPEN)
            j, i = j + 1, 0
            if j < n_req:
                t = _route_time(kx, lo, keys, stream[j])
            else:
                routing = False
                _end_routing(kx, lo, n_rep)
            continue
        _advance(kx, lo, nxt, until, rp, ctl, macro, check)
        if closed:
            _collect_answers(kx, lo, nxt, cl)
    if closed:
        for c in range(n_rep):
            _collect_answers(kx, lo, c, cl)
        o.counters[lo, S.O_RELEASED] = cl.counts[N_FINAL] + cl.counts[N_PEND]  # every answer
