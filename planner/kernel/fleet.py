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
scenarios both ways); only the diagnostic ``O_MACRO_STEPS`` can differ,
because decode runs stop at every send.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numba.typed import List

from planner import config as K
from planner.kernel import state as S
from planner.kernel.arrivals import place
from planner.kernel.routers import (
    LEAST_KV,
    PREFIX_AFFINITY,
    RANDOM,
    ROUND_ROBIN,
    affinity,
    argmin2,
    splitmix64,
)
from planner.kernel.rowview import row
from planner.kernel.step import ENDED, _init, fast_path_allowed, run_steps


@njit(cache=True, _nrt=False)
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


@njit(cache=True, nogil=True)
def simulate_fleet(cfg, cfgf, rq, st, q, o, lo, n_rep, keys, ctl, use_macro, check):
    """Simulate one fleet: replicas on rows lo..lo+n_rep-1 of every array
    (``cfg`` (C, NCOLS) and ``cfgf`` rows identical; ``st``/``q``/``o``
    the (C, ...) records of ``state.allocate``). Row lo's ``order`` and
    ``entry_ns`` hold the stream (open loop, by (entry, id)); every replica
    row's ``entry_ns`` must hold the same times. ``keys`` = (key_off (R + 1,)
    int64, keys (H,) int64 dense prefix keys, key_tokens (H,) int64 tokens
    each key covers, n_keys (1,) int64), used by ``prefix_affinity`` only."""
    key_off, key_ids, key_tokens, n_keys = keys
    R = rq.prompt.shape[0]
    stream = st.order[lo].copy()
    scs, pcs = List(), List()
    for i in range(n_rep):
        k = o.counters[lo + i]
        sc, p = _init(cfg[lo + i], rq, k)
        k[S.O_ORDER_END] = 0
        k[S.O_ROUTE_UNTIL] = 0
        scs.append(sc)
        pcs.append(p)
    macro = fast_path_allowed(cfg[lo], row(o, lo), use_macro)
    ended = np.zeros(n_rep, dtype=np.bool_)
    load = np.zeros(n_rep, dtype=np.int64)
    used = np.zeros(n_rep, dtype=np.int64)
    owner = np.full(n_keys[0] if cfg[lo, K.ROUTER] == PREFIX_AFFINITY else 1, -1, np.int32)
    policy, rng = cfg[lo, K.ROUTER], np.uint64(cfg[lo, K.ROUTER_SEED])
    for j in range(R):
        r = stream[j]
        t = st.entry_ns[lo, r] - cfg[lo, K.A0] - cfg[lo, K.A1] * np.int64(rq.prompt[r])
        for i in range(n_rep):
            if not ended[i]:
                c = lo + i
                o.counters[c, S.O_ROUTE_UNTIL] = t
                code = run_steps(
                    cfg[c], cfgf[c], rq, row(st, c), row(q, c), row(o, c),
                    scs[i], pcs[i], ctl, macro, check,
                )  # fmt: skip
                ended[i] = code == ENDED
        if ctl[0] != 0:
            break
        replica_loads(cfg, o, lo, n_rep, t, load, used)
        if policy == ROUND_ROBIN:
            dest = j % n_rep
        elif policy == RANDOM:
            rng, x = splitmix64(rng)
            dest = np.int64(x % np.uint64(n_rep))
        elif policy == LEAST_KV:
            dest = argmin2(used, load)
        else:
            dest = -1
            if policy == PREFIX_AFFINITY:
                dest = affinity(r, rq.prompt[r], key_off, key_ids, key_tokens, owner, load)
            if dest < 0:
                dest = argmin2(load, used)
            if policy == PREFIX_AFFINITY:
                for m in range(key_off[r], key_off[r + 1]):
                    owner[key_ids[m]] = dest
        c = lo + dest
        k = o.counters[c]
        place(r, k[S.O_ORDER_END], row(st, c), k)
        k[S.O_ORDER_END] += 1
    for i in range(n_rep):
        c = lo + i
        o.counters[c, S.O_ROUTE_UNTIL] = -1
        if not ended[i]:
            run_steps(
                cfg[c], cfgf[c], rq, row(st, c), row(q, c), row(o, c),
                scs[i], pcs[i], ctl, macro, check,
            )  # fmt: skip


@njit(parallel=True, cache=True, nogil=True)
def simulate_fleets(cfg, cfgf, rq, st, q, o, starts, sizes, keys, ctl, use_macro, check):
    """Run ``simulate_fleet`` for every fleet f (rows starts[f] ..
    starts[f] + sizes[f] - 1; (F,) int64 each), in parallel over fleets."""
    for f in prange(starts.shape[0]):
        simulate_fleet(cfg, cfgf, rq, st, q, o, starts[f], sizes[f], keys, ctl, use_macro, check)
