"""Arrivals: open-loop requests at their times, and closed-loop clients.

Open loop: request r becomes visible to the scheduler at ``entry_ns[r]`` (its
arrival plus the front end's queueing delay, ``api.entry_times_ns``), in the
order ``order`` (entry times ascending, ties by request id).

Closed loop (``max_concurrency`` N > 0) mirrors vLLM bench
(``vllm/benchmarks/serve.py::benchmark``: each request task waits on an
``asyncio.Semaphore(max_concurrency)`` before it is sent and releases it when
its response has ended). Requests are sent in stream order (``order`` holds
the workload's arrival order, the first N sorted by entry); request j >= N
waits for the (j - N + 1)-th release. A release happens when a request
finishes (its last token) or is rejected by the front end; the client then
thinks ``think_time_ns`` (this planner's extension; vLLM bench has none)
before sending. So request j enters at max(its scheduled entry, release time
+ think time + its queueing delay), with its scheduled arrival 0 for a pure
closed loop (vLLM bench's default ``--request-rate inf``) or a rate's arrival
times (vLLM bench's rate capped at N in flight). The queueing delay depends
on the prompt, so a released request is placed among the released ones not
yet arrived by (entry, id), exactly as the open-loop order is.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from planner import config as K
from planner.bounds import INT64_MAX
from planner.kernel import state as S
from planner.latency.step_time import blis_queue_ns

NXT = S.O_NEXT_ARRIVAL


@njit(cache=True, inline="always")
def arrival_limit(cfg, k, n_req):
    """Positions of ``order`` that may arrive now: all ``n_req`` in open loop,
    else N plus the slots released so far. Requests beyond it wait for a
    finish, so once ``k[O_NEXT_ARRIVAL]`` reaches it nothing can arrive
    without progress (the livelock proofs rely on this)."""
    if cfg[K.CONC] == 0:
        return k[S.O_ORDER_END]
    return min(n_req, cfg[K.CONC] + k[S.O_RELEASED])


@njit(cache=True, inline="always")
def routing_open(k):
    """Whether this replica runs behind a router that is still sending
    (``kernel/fleet.py``): it pauses at ``k[O_ROUTE_UNTIL]``, the router's next
    decision, and no decode run passes it."""
    return k[S.O_ROUTE_UNTIL] >= 0


@njit(cache=True, inline="always")
def may_receive(k):
    """Whether the router may still send this replica a request that no
    finish of its own precedes: then more can arrive even when ``order`` is
    used up, so no livelock proof holds (``k[O_ROUTE_MORE]``)."""
    return k[S.O_ROUTE_MORE] != 0


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def first_sends(rq):
    """Requests sent without waiting for another: all but sessions' later turns."""
    n = 0
    for r in range(rq.next_turn.shape[0]):
        if rq.next_turn[r] >= 0:
            n += 1
    return rq.prompt.shape[0] - n


@njit(cache=True, inline="always")
def queue_delay(cfg, prompt):
    """The front end's queueing delay (ns) of a prompt: alpha0 + alpha1 x
    prompt tokens (``api.entry_times_ns``, BLIS's alpha); compat blis:
    truncated to whole microseconds (``latency.blis_queue_ns``)."""
    if cfg[K.COMPAT] != 0:
        return blis_queue_ns(cfg[K.A0], cfg[K.A1], prompt)
    return cfg[K.A0] + cfg[K.A1] * np.int64(prompt)


@njit(cache=True, inline="always")
def later_by(t, d):
    """t + d (ns), saturating at INT64_MAX - 1 (never wraps the clock)."""
    return t + d if t < INT64_MAX - 1 - d else INT64_MAX - 1


@njit(cache=True, inline="always")
def _send_time(cfg, rq, r, t):
    """Entry (ns) of request r sent after an answer at t: t + think time +
    queueing delay, saturating at INT64_MAX - 1."""
    return later_by(t, cfg[K.THINK_NS] + queue_delay(cfg, rq.prompt[r]))


@njit(cache=True, inline="always")
def place(r, j, st, k):
    """Put r at position j of ``order``, then move it back among the requests
    not yet arrived (from ``O_NEXT_ARRIVAL``) to keep (entry, id) order."""
    while j > k[NXT] and _later(st.order[j - 1], r, st.entry_ns):
        st.order[j] = st.order[j - 1]
        j -= 1
    st.order[j] = r


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def answered(cfg, rq, st, k, r, t):
    """Request r's response ended at t (ns): it finished, or the front end
    rejected it. Closed loop: its client sends the stream's next request
    (``release``). Sessions: a finished turn's next turn is sent after the
    think time (``next_turn``; a rejected turn ends its session: its answer,
    which the next prompt would hold, never came). The client has the answer
    alpha2 x outputs later (BLIS's per-token post-processing, which E2E counts
    and the scheduler's clock does not), so it sends from then."""
    if cfg[K.CONC] == 0 and rq.next_turn[r] < 0:
        return
    t += cfg[K.A2] * np.int64(st.nout[r])  # api.simulate bounds it (clock_bound_closed_loop)
    if cfg[K.CONC] != 0:
        release(cfg, rq, st, k, np.int64(1), t)
        return
    nt = rq.next_turn[r]
    if st.status[r] == S.REJECTED:
        return
    st.entry_ns[nt] = _send_time(cfg, rq, nt, t)
    place(nt, k[S.O_ORDER_END], st, k)
    k[S.O_ORDER_END] += 1


@njit(cache=True, inline="always")
def _later(a, b, entry_ns):
    """Whether request a arrives after request b: (entry, id) order."""
    return entry_ns[a] > entry_ns[b] or (entry_ns[a] == entry_ns[b] and a > b)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def release(cfg, rq, st, k, n, t):
    """Release ``n`` client slots at time ``t`` (ns): the next ``n`` requests of
    the stream are sent after the think time. Each enters at
    max(scheduled entry, t + think + alpha0 + alpha1 x prompt) (saturating at
    INT64_MAX - 1) and is moved back among the released requests not yet
    arrived to keep ``order`` sorted by (entry, id). Open loop: no-op."""
    conc = cfg[K.CONC]
    if conc == 0:
        return
    R = rq.prompt.shape[0]
    for _ in range(n):
        j = conc + k[S.O_RELEASED]
        k[S.O_RELEASED] += 1
        if j >= R:
            continue
        r = st.order[j]
        st.entry_ns[r] = max(st.entry_ns[r], _send_time(cfg, rq, r, t))
        place(r, j, st, k)
