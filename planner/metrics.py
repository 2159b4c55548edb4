"""Per-config metrics and the outcome class, from a finished ``SimResult``.

Latency definitions (BLIS conventions, ``shared/docs/semantics.md``), seconds:

- TTFT = first-token time - arrival + alpha2 (the queueing delay is inside).
- TPOT = (finish - first token) / (outputs - 1) + alpha2, per request with >= 2
  outputs: its mean inter-token latency (ITL), so TPOT percentiles are taken
  across requests.
- E2E  = finish - arrival + alpha2 * outputs (TTFT plus every ITL sample).
- ITL  = the gap between two consecutive output tokens of a request + alpha2
  (``vllm/benchmarks/serve.py``: one sample per gap, percentiles over every
  gap of every request). Percentiles come from the kernel's per-config
  histogram (``planner.kernel.token_gaps``: exact integer bins, 16 per octave; a
  percentile is its bin's midpoint, within 3.1 % of the exact gap). Gaps a
  request that arrived still owed at the end of the run count as +inf
  (``itl_columns``; the ITL SLO, ``planner.slo``).
- Max token stall = the largest such gap of a request + alpha2.
- Queueing delay = first scheduled (the start of the first step that
  scheduled it) - arrival (vLLM's ``queued_ts`` -> ``scheduled_ts``,
  ``vllm/v1/metrics/stats.py``, with BLIS's alpha0/alpha1 entry delay inside).

Counts use the horizon: ``completed`` are finishes at or before it (compat
blis: finishes in steps that started at or before it, ``counted_by``), and the
throughputs divide by the horizon (or, with none, by the simulated span).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import pandas as pd

from planner import config as K
from planner import replicas as RP
from planner.capacity import usable_blocks, vllm_starts
from planner.kernel import state as S
from planner.kernel.token_gaps import bin_edges_ns, gap_bins, percentiles_s
from planner.slo import SLO, SLO_PERCENTILE
from planner.workload.arrays import Workload


class SimResult(Protocol):
    """What metrics read of a finished run (``planner.api.SimResult`` has it;
    declared here so that metrics never imports the module that calls it)."""

    configs: list
    latencies: list
    workload: Workload
    cfg: np.ndarray  # (C, NCOLS) int64 packed configs
    arrival_ns: np.ndarray  # (R,) int64, or (C, R) with per-config arrivals
    state: S.State


# Outcome classes.
OK, CHURNING, THRASHING, STARVED, LIVELOCKED, STEP_LIMIT = (
    "ok",
    "churning",
    "thrashing",
    "starved",
    "livelocked",
    "step_limit",
)
OUTCOMES = (OK, CHURNING, THRASHING, STARVED, LIVELOCKED, STEP_LIMIT)
# A config thrashes when at least this share of its busy step time recomputed
# KV it had computed before (re-prefill after recompute preemption, or the
# re-decode of discarded outputs under BLIS restart). Calibrated on scenario S1
# at max_num_seqs 256: restart spends ~43% of its time redoing work and gains
# nothing over max_num_seqs 32 (collapse); recompute spends ~11% and completes
# ~55% more (churn). A config that preempts below this share is "churning".
THRASHING_WASTE_SHARE = 0.25

PERCENTILES = (50, 90, 99)

# Overload (queue growth over the arrival window). With requests offered at
# rate lam and served at mu < lam, the queueing delay of a request arriving at
# t grows as (lam / mu - 1) t; between the median arrivals of the first and
# last quarters of the window W it grows by about (lam / mu - 1) * 3W/4. A
# growth above OVERLOAD_WINDOW_SHARE * W (and above OVERLOAD_MIN_GROWTH_S, so
# that short windows are not judged on noise) therefore means lam exceeds mu by
# about 7% or more, sustained over the window. Calibrated on S1 (growth 0.0 s
# at 60,000 blocks, 43-77 s at 7,463) and the Azure conversation trace on
# Llama-3.1-8B/H100 (0.0 s at 1x, 2x, 4x; 50 s at 8x over a 438 s window).
OVERLOADED = "overloaded"  # a verdict beside the outcome class (column ``overloaded``)
OVERLOAD_WINDOW_SHARE = 0.05
OVERLOAD_MIN_GROWTH_S = 1.0
# The delay rule underestimates when the run ends before most requests are
# served (their delay is only known to exceed end - arrival, which falls with
# arrival). The backlog rule covers that case: requests waiting for a first
# token grew by more than OVERLOAD_WINDOW_SHARE of the arrivals over the last
# three quarters of the window (and by more than OVERLOAD_MIN_BACKLOG requests,
# so that a request still in prefill at the last arrival is no verdict). The
# backlog is taken just before the last arrival instant: requests arriving at
# it cannot have started, and a trace with coarse timestamps (Mooncake's come
# in 3 s steps) can end with a batch of them.
OVERLOAD_MIN_BACKLOG = 2
# Both rules need a steady state: until the first requests finish, a server
# below its max_num_seqs admits every arrival at once, so a workload whose
# requests all arrive within one request lifetime is a burst the running set
# absorbs, whatever the rate (100 requests of ~3,400 output tokens offered at
# 153 req/s: TTFT p99 71 ms and each runs about a minute, while the same
# traffic sustained, 3,000 requests, overloads above 2.58 req/s). The first
# lifetime of the window fills the running set; the queue can only be seen to
# grow after it, so the verdict is judged only when the arrival window spans
# at least this many lifetimes: one to fill, one to watch (column
# ``overload_judged``). The lifetime is the occupancy-weighted median
# (``occupancy_median``), which with a long tail of lengths is the tail's: a
# plain median judged 301 lognormal requests at 30 req/s (median E2E 3.5 s,
# a few of minutes) "keeping up" where 3,000 of them show 3.3 req/s served.
# At 1 nothing is left to watch: 110 requests at 3 req/s (1.05 lifetimes)
# "kept up" although 2.58 req/s is the most the server sustains. Measured with
# ``plan max-rate --ttft-slo 2`` on the default synthetic workload at 2: 100
# requests only bound the answer (>= 1.502 req/s, a bound printed as one), 300
# give 2.677 req/s, 1,000 give 2.585, 3,000 give 2.583 (at 1: 2.81 from 100
# requests, 153 without the rule). Near capacity the rules can still pass what
# a longer run overloads (docs/overload.md, "Known gaps").
# Few requests need no separate minimum: overload needs more requests in
# flight than the server holds (max_num_seqs or the KV pool), and past that cap
# the backlog rule counts the queue.
OVERLOAD_MIN_LIFETIMES = 2.0
# The in-system rule (``_in_system_growth``). Both rules above watch requests
# waiting for a *first* token; when the KV pool binds, vLLM admits a request,
# gives it a first token and later preempts it (RECOMPUTE), so an overloaded
# server can start every request on time and still fall behind. The requests
# in the system (arrived, not finished) count those too: in a steady state
# their number is what the arrivals and the lifetimes explain, under
# overload it grows by (lambda - mu) per second beyond that. It is counted once the
# running set has filled, OVERLOAD_FILL_QUANTILE of the request lifetimes
# after the first arrival (and not before a quarter of the window), and again
# just before the last arrival, and judged only where enough of the requests
# arriving in between were preempted (the pool churned); growth above
# OVERLOAD_WINDOW_SHARE of the arrivals between and above
# OVERLOAD_NOISE_SDS standard deviations of its chance spread (each request
# still there or not by chance: the sum of p (1 - p)) is overload; at two a
# tryout found gamma arrivals with CV 8 at a third of capacity flagged (2.9),
# while every overload measured lies at 5.4 or more. Measured on the default synthetic
# workload (capacity 2.58 req/s at a constant rate): 355 requests at 2.95
# req/s grow by 31 (both other rules pass them; 3,000 such requests serve
# 2.48 req/s); with Poisson arrivals at 2.2 req/s (85%) one run of eight
# (355 requests, a burst at its end) was called overloaded, and gamma
# arrivals with CV 3 at 1.5-2.0 req/s none of twelve (docs/overload.md).
OVERLOAD_FILL_QUANTILE = 95.0
OVERLOAD_NOISE_SDS = 3.0


def overload(
    arrival_s: np.ndarray,
    first_s: np.ndarray,
    end_s: np.ndarray,
    offered: np.ndarray,
    rejected: np.ndarray | None = None,
    refused: np.ndarray | None = None,
    until: np.ndarray | None = None,
    lifetime_s: np.ndarray | None = None,
    unfinished: np.ndarray | None = None,
    finish_s: np.ndarray | None = None,
    preempted: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per config: the growth of queueing delay over the arrival window and the
    overload verdict, with the offered and served rates.

    Args:
        arrival_s: (C, R) float64 arrival times, seconds.
        first_s: (C, R) float64 first-token times, seconds; NaN = none by the end.
        end_s: (C,) float64 end of the run (horizon or last step), seconds.
        offered: (C,) requests offered in the arrival window (sent, arrived
            or due), the numerator of ``offered_rps``.
        rejected: (C, R) bool, requests the front end refused (prompt >=
            max_model_len): they never wait for a first token, so neither rule
            counts them; None = none.
        refused: (C,) int, how many of ``offered`` the front end rejected
            (vLLM's ``InputProcessor`` check against max_model_len, made before
            the scheduler sees a request); None = none.
        until: (C,) float64 seconds: judge only the arrivals up to it, for a
            run a horizon ended before the last arrival (requests due later
            never had a chance, which is no overload); None = the last
            arrival. ``offered`` and ``refused`` then count those arrivals.
        lifetime_s: (C, R) float64 E2E seconds of each request (an unfinished
            one's end - arrival, a lower bound; NaN = rejected or not sent);
            None = every window is long enough (``overload_judged`` True).
        unfinished: (C, R) bool, requests whose ``lifetime_s`` is only a lower
            bound (their lifetime counts as unknown, +inf); None = none.
        finish_s: (C, R) float64 seconds each request finished (NaN = not by
            the end), for the in-system rule; None = that rule is not applied.
        preempted: (C, R) bool, requests preempted at least once by the end:
            the in-system rule applies only where enough of those it watched
            were; None = that rule is not applied.
    Returns:
        ``queue_delay_growth_s``: median delay (first token - arrival; for a
        request never served, end - arrival, a lower bound) of the last quarter
        of arrivals minus that of the first quarter; ``backlog_growth``:
        requests waiting for a first token just before the last arrival
        instant (those arriving at it excluded) minus those waiting a quarter
        into the window; ``overloaded``: delay growth >
        max(OVERLOAD_MIN_GROWTH_S, OVERLOAD_WINDOW_SHARE x window), or backlog
        growth > max(OVERLOAD_MIN_BACKLOG, OVERLOAD_WINDOW_SHARE x arrivals
        after that quarter), or ``in_system_growth`` (``_in_system_growth``)
        > max(OVERLOAD_MIN_BACKLOG, OVERLOAD_WINDOW_SHARE x arrivals between
        its two counts, OVERLOAD_NOISE_SDS x its chance spread);
        and ``offered_rps`` (arrivals / window), ``accepted_rps`` (arrivals the
        front end passed to the scheduler, offered - refused, / window),
        ``served_rps`` (requests whose first token came by the last arrival,
        / window), ``load_ratio`` (accepted / served: a rejected request asks
        the scheduler for nothing, so it is no load that capacity could serve).
        Rates and verdict cover the judged window (``overload_window_s``:
        first arrival to the last judged one).
        A window of 0 (all at once) is never overloaded and
        has NaN rates. ``overload_lifetime_s``: the occupancy-weighted median
        lifetime of the judged requests (``occupancy_median``);
        ``overload_judged``: False when the window is > 0 but shorter than
        OVERLOAD_MIN_LIFETIMES x that lifetime and the queue did not grow (a
        burst: ``overloaded`` is then False and says nothing about the rate
        sustained; a queue that grew within the window is overload however
        short). All (C,).
    """
    first = arrival_s.min(axis=1)
    judged = np.ones(arrival_s.shape, bool) if until is None else arrival_s <= until[:, None]
    judged_wait = judged if rejected is None else judged & ~rejected
    delay = np.where(np.isnan(first_s), end_s[:, None] - arrival_s, first_s - arrival_s)
    delay = np.where(judged_wait, delay, np.nan)
    # Quarters of the judged arrivals (rejected ones among them, as NaN).
    order = np.argsort(np.where(judged, arrival_s, np.inf), axis=1, kind="stable")
    d = np.take_along_axis(delay, order, axis=1)
    n = judged.sum(axis=1)[:, None]
    q = np.maximum(1, n // 4)
    rank = np.arange(arrival_s.shape[1])[None, :]
    with warnings.catch_warnings():  # a quarter made only of rejected requests
        warnings.simplefilter("ignore", RuntimeWarning)
        head = np.nanmedian(np.where(rank < q, d, np.nan), axis=1)
        tail = np.nanmedian(np.where((rank >= n - q) & (rank < n), d, np.nan), axis=1)
    growth = np.nan_to_num(tail - head, nan=0.0)
    last = np.where(judged, arrival_s, -np.inf).max(axis=1)
    window = last - first
    limit = np.maximum(OVERLOAD_MIN_GROWTH_S, OVERLOAD_WINDOW_SHARE * window)
    t1 = first + window / 4
    waits = np.where(judged_wait, arrival_s, np.inf)
    backlog = _backlog_growth(waits, first_s, t1, last)
    arrived_late = ((waits > t1[:, None]) & (waits < last[:, None])).sum(axis=1)
    backlogged = backlog > np.maximum(OVERLOAD_MIN_BACKLOG, OVERLOAD_WINDOW_SHARE * arrived_late)
    with np.errstate(divide="ignore", invalid="ignore"):
        offered_rps = np.where(window > 0, offered / window, np.nan)
        accepted = offered if refused is None else offered - refused
        accepted_rps = np.where(window > 0, accepted / window, np.nan)
        started = (first_s <= last[:, None]).sum(axis=1)
        served_rps = np.where(window > 0, started / window, np.nan)
        ratio = accepted_rps / served_rps
    in_system, counted = _in_system_growth(waits, preempted, finish_s, end_s, first, last, window)
    grew = in_system > np.maximum(
        np.maximum(OVERLOAD_MIN_BACKLOG, OVERLOAD_WINDOW_SHARE * counted[0]),
        OVERLOAD_NOISE_SDS * np.sqrt(counted[1]),  # chance in which requests still live
    )
    # a queue that grew is a finding
    over = (window > 0) & ((growth > limit) | backlogged | grew)
    life = occupancy_median(lifetime_s, unfinished, judged_wait)
    return {
        "offered_rps": offered_rps,
        "accepted_rps": accepted_rps,
        "served_rps": served_rps,
        "load_ratio": ratio,
        "queue_delay_growth_s": growth,
        "backlog_growth": backlog,
        "in_system_growth": in_system,
        "overload_window_s": window,
        "overloaded": over,
        "overload_lifetime_s": life,
        "overload_judged": over | (window <= 0) | ~(window < OVERLOAD_MIN_LIFETIMES * life),
    }


def occupancy_median(
    lifetime_s: np.ndarray | None, unfinished: np.ndarray | None, mask: np.ndarray
) -> np.ndarray:
    """(C,) float64 seconds: the median lifetime of the requests in ``mask``
    (C, R) weighted by their lifetimes, i.e. by how long each holds a place in
    the running set: half the request-seconds of a steady running set belong
    to requests at least this long. With equal lengths it is the median; with
    a long tail (a few requests of minutes among many of seconds) it is the
    tail's, which is what fills the running set (a plain median of 3.5 s
    judged 10 s of arrivals whose long requests had not yet piled up). An
    ``unfinished`` request counts as +inf, weighted by its lower bound. 0 with
    no request; 0 everywhere when ``lifetime_s`` is None (``overload``)."""
    if lifetime_s is None:
        return np.zeros(mask.shape[0])
    done = np.zeros(mask.shape, bool) if unfinished is None else unfinished
    ok = mask & ~np.isnan(lifetime_s)
    finite = np.isfinite(lifetime_s)
    value = np.where(ok, np.where(done | ~finite, np.inf, lifetime_s), np.inf)
    # weight: the time held (its lower bound if unfinished; 1 s if not even that is known)
    weight = np.where(ok, np.where(finite, np.maximum(lifetime_s, 0.0), 1.0), 0.0)
    order = np.argsort(value, axis=1, kind="stable")
    v = np.take_along_axis(value, order, axis=1)
    cum = np.cumsum(np.take_along_axis(weight, order, axis=1), axis=1)
    total = cum[:, -1:] if cum.shape[1] else np.zeros((mask.shape[0], 1))
    at = np.argmax(cum >= total / 2, axis=1)
    out = v[np.arange(v.shape[0]), at] if v.shape[1] else np.zeros(mask.shape[0])
    return np.where(total[:, 0] > 0, out, 0.0)


def burst_text(row: pd.Series, more: str = "more requests (a longer workload)") -> str:
    """Why a ``summarize`` row's arrivals are too short to judge overload
    (``overload_judged`` False), for people: the window and the lifetime the
    rule used (``overload_lifetime_s``). ``more`` says how this command offers
    more requests (e.g. '--num-requests')."""
    window = float(row["overload_window_s"])
    life = float(row.get("overload_lifetime_s", row["e2e_s_p50"]))  # a frame from before it
    held = (
        "its unfinished requests hold most of the running set"
        if math.isinf(life)
        else f"{life:.3g} s, the E2E at which half the running set's request-seconds are held"
    )
    return (
        f"its arrivals span {window:.3g} s, less than {OVERLOAD_MIN_LIFETIMES:g} x its "
        f"occupancy-weighted median E2E ({held}): a burst the running set absorbs, which says "
        f"nothing about the rate sustained; offer {more} to judge it"
    )


def keeps_up(df: pd.DataFrame) -> np.ndarray:
    """(C,) bool on ``summarize`` rows: the run is judged not overloaded
    (``overloaded`` False on a window long enough to judge, ``overload_judged``)."""
    return ~df["overloaded"].astype(bool).to_numpy() & ~bursts(df)


def pool_starts(df: pd.DataFrame) -> np.ndarray:
    """(C,) bool on ``summarize`` rows: vLLM 0.33 starts on the row's pool
    (``SchedulerConfig.pool_starts``). A dataset written before the column
    existed is judged from its config columns by the same rule."""
    if "pool_starts" in df:
        return df["pool_starts"].astype(bool).to_numpy()
    need = {"num_gpu_blocks", "max_model_len", "block_size"}
    if not need <= set(df.columns):
        return np.ones(len(df), bool)
    plain = np.ones(len(df), bool)
    plain_values = {"compat": "vllm", "sliding_window": 0, "mamba_groups": 0,
                    "sliding_window_groups": 0, "full_attention_groups": 1}  # fmt: skip
    for col, plain_value in plain_values.items():
        if col in df:
            plain &= (df[col] == plain_value).to_numpy()
    cols = (df[c].to_numpy(np.int64) for c in ("num_gpu_blocks", "max_model_len", "block_size"))
    starts = [vllm_starts(int(n), int(m), int(b), True) for n, m, b in zip(*cols, strict=True)]
    return ~plain | np.array(starts, dtype=bool)


def batches(df: pd.DataFrame) -> np.ndarray:
    """(C,) bool on ``summarize`` rows: every request was sent at once
    (``overload_window_s`` 0, offline). Such a run has no arrival rate, so it is
    never overloaded and never a burst, and "keeps up" says nothing about it: a
    verdict on it covers this batch only. A frame without that column has none."""
    if "overload_window_s" not in df:
        return np.zeros(len(df), bool)
    return ~(df["overload_window_s"].to_numpy(float) > 0)


def is_batch(row: Mapping[str, Any]) -> bool:
    """``batches`` for one row (a ``summarize`` Series or a command's JSON
    dict); a row without ``overload_window_s`` is none."""
    window = row.get("overload_window_s")
    return window is not None and not float(window) > 0


def pace_text(row: Mapping[str, Any]) -> str:
    """How a run that is not overloaded fared against its arrivals, for people:
    'keeps up', or for a batch (``is_batch``) that it has no rate to keep up with."""
    return "serves this batch" if is_batch(row) else "keeps up"


def bursts(df: pd.DataFrame) -> np.ndarray:
    """(C,) bool on ``summarize`` rows: not overloaded, but a burst too short to
    judge it (``overload_judged`` False, which implies not overloaded). A frame
    written before that column existed has none."""
    if "overload_judged" not in df:
        return np.zeros(len(df), bool)
    return ~df["overload_judged"].astype(bool).to_numpy()


def _backlog_growth(
    arrival_s: np.ndarray, first_s: np.ndarray, t1: np.ndarray, t2: np.ndarray
) -> np.ndarray:
    """Requests waiting for their first token just before t2 minus those waiting
    at t1, per config: arrivals in (t1, t2) minus first tokens in (t1, t2] (a
    request arriving at t2 cannot start by then). Shapes (C, R), (C, R), (C,),
    (C,)."""
    started = np.nan_to_num(first_s, nan=np.inf)
    arrivals = ((arrival_s > t1[:, None]) & (arrival_s < t2[:, None])).sum(axis=1)
    starts = ((started > t1[:, None]) & (started <= t2[:, None])).sum(axis=1)
    return arrivals - starts


def _in_system_growth(
    arrival_s: np.ndarray,
    preempted: np.ndarray | None,
    finish_s: np.ndarray | None,
    end_s: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    window: np.ndarray,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The in-system rule's figures (see OVERLOAD_FILL_QUANTILE), per config.

    Args: ``arrival_s`` (C, R) float64 seconds of the requests judged (+inf
    for the others), ``preempted`` (C, R) bool, requests preempted at least
    once by the end, or None, ``finish_s`` (C, R) float64 (NaN = unfinished) or
    None, ``end_s``, ``first``, ``last`` and ``window`` (C,) float64 seconds.

    The fill time L is the OVERLOAD_FILL_QUANTILE percentile of the
    lifetimes (an unfinished request's end - arrival, a lower bound). At
    t1 = first + max(window / 4, L) and just before the last arrival instant
    (those arriving at it excluded) the requests in the system (arrived, not
    finished) are counted and compared with the number expected from the
    arrivals themselves: each request that has arrived by then and is x
    seconds old is still in the system with the probability that a lifetime
    exceeds x, from the run's own lifetimes (the empirical survival
    function). A steady server's lifetimes do not depend on when a request
    arrives, so a count above that expectation is chance (variance: the sum
    of p (1 - p)), whatever the arrivals' bursts or their rate; an overloaded
    one's later requests live longer than the run's lifetimes say. The
    growth is the excess at the end less the excess at t1.

    The rule applies only where the KV pool churned while it was watched:
    more of the requests arriving between t1 and the last arrival were
    preempted (by the end of the run; the run keeps no preemption times) than
    max(OVERLOAD_MIN_BACKLOG, OVERLOAD_WINDOW_SHARE x those arrivals).
    With room in the pool, more requests in the system mostly means longer
    ones running side by side, not a server falling behind, and a request
    that cannot start waits for its first token, which the backlog rule
    counts: Mooncake's conversation trace on two H100 replicas of
    Llama-3.1-8B (28,000 blocks each) holds four times as many at the end of
    a 90 s window as after its fill with one preemption or none, and 600 s
    of it keep up at that rate.
    Under KV-bound churn the requests in the system are admitted ones
    preempted and slowed, and their number grows with the backlog (S1's
    lengths at 2.95 req/s on 7,463 blocks: from 70 to 108 over 120 s of
    arrivals while fewer than 3 wait for a first token).

    Returns ``in_system_growth`` (C,) float64, 0 where the rule does not
    apply (t1 not before the last arrival, too few preemptions in between, or
    ``finish_s``/``preempted`` None); and (arrivals in (t1, last) (C,)
    int64, the variance of the growth (C,) float64)."""
    c = arrival_s.shape[0]
    zero = np.zeros(c, np.int64)
    if finish_s is None or preempted is None:
        return np.zeros(c), (zero, zero)
    seen = np.isfinite(arrival_s)
    fin = np.where(np.isnan(finish_s), np.inf, finish_s)
    life = np.where(seen, np.minimum(fin, end_s[:, None]) - arrival_s, np.inf)
    order = np.sort(life, axis=1)  # the lifetimes of each config, the judged ones first
    m = seen.sum(axis=1)
    fill = _sorted_percentile(order, m, OVERLOAD_FILL_QUANTILE)
    t1 = first + np.maximum(window / 4, fill)
    watched = (arrival_s > t1[:, None]) & (arrival_s < last[:, None])
    late, churned = watched.sum(axis=1), (watched & preempted).sum(axis=1)
    applies = (t1 < last) & (
        churned > np.maximum(OVERLOAD_MIN_BACKLOG, OVERLOAD_WINDOW_SHARE * late)
    )

    def excess(t: np.ndarray, before: bool) -> tuple[np.ndarray, np.ndarray]:
        """In the system at t less the expected number, and its variance."""
        came = arrival_s < t[:, None] if before else arrival_s <= t[:, None]
        held = (came & (fin > t[:, None])).sum(axis=1).astype(float)
        mean, var = np.zeros(c), np.zeros(c)
        for i in np.flatnonzero(applies):
            age = t[i] - arrival_s[i, came[i]]
            alive = (m[i] - np.searchsorted(order[i, : m[i]], age, side="right")) / m[i]
            mean[i], var[i] = alive.sum(), (alive * (1 - alive)).sum()
        return held - mean, var

    x1, v1 = excess(t1, before=False)
    x2, v2 = excess(last, before=True)
    growth = np.where(applies, x2 - x1, 0.0)
    return growth, (np.where(applies, late, 0), np.where(applies, v1 + v2, 0.0))


def _sorted_percentile(order: np.ndarray, m: np.ndarray, q: float) -> np.ndarray:
    """(C,) float64: the q-th percentile of the first ``m[c]`` values of each
    sorted row of ``order`` (C, R), interpolated linearly between the values
    around it as ``numpy.percentile``'s default does; +inf where m is 0. One
    vectorised pass (``numpy.nanpercentile`` along an axis loops in Python
    over the rows: a quarter of a 4,096-configuration summary)."""
    pos = q / 100 * np.maximum(m - 1, 0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(m - 1, 0))
    rows = np.arange(order.shape[0])
    a, b = order[rows, lo], order[rows, hi]
    with np.errstate(invalid="ignore"):  # inf - inf where nothing was judged
        out = a + (b - a) * (pos - lo)
    return np.where((m > 0) & np.isfinite(a), np.where(hi == lo, a, out), np.inf)


# Stands in for +inf (an unserved request) in the upper percentile of
# ``_stats``: finite, so that numpy's interpolation stays defined.
_UNSERVED = 1e18


def row_percentiles(
    x: np.ndarray, percentiles: tuple[int, ...], higher: bool = False
) -> np.ndarray:
    """``np.nanpercentile(x, percentiles, axis=1)`` (method "linear", or
    "higher" with ``higher``), bit for bit, without its Python loop over rows.

    ``x``: (C, R) float64, NaN not counted. Returns (P, C) float64, NaN for a
    row with no value. Follows NumPy 2's ``_quantile`` (``lib/_function_base_impl.py``):
    virtual index (n - 1) q, its floor and the next index (both the last value
    at or past n - 1), and ``_lerp``'s two-sided interpolation. numpy's own
    call applies a 1-D quantile per row (about 55 us each: 2.8 s of a 4,096-config
    grid's 3.3 s of metrics)."""
    srt = np.sort(x, axis=1)  # NaN sorts last
    n = (~np.isnan(x)).sum(axis=1)
    rows = np.arange(x.shape[0])
    out = np.full((len(percentiles), x.shape[0]), np.nan)
    has = n > 0
    last = np.maximum(n - 1, 0)
    for i, pct in enumerate(percentiles):
        v = (n - 1) * (np.float64(pct) / 100)
        if higher:
            val = srt[rows, np.minimum(np.ceil(v).astype(np.intp), last)]
        else:
            above = v >= n - 1
            prev = np.floor(v)
            lo = np.where(above, last, prev).astype(np.intp)
            hi = np.where(above, last, prev + 1).astype(np.intp)
            gamma = v - np.where(above, -1, prev)
            a, b = srt[rows, np.maximum(lo, 0)], srt[rows, np.maximum(hi, 0)]
            d = b - a
            val = np.where(gamma >= 0.5, b - d * (1 - gamma), a + d * gamma)
        out[i] = np.where(has, val, np.nan)
    return out


def _stats(prefix: str, x: np.ndarray, censored: np.ndarray) -> dict[str, np.ndarray]:
    """mean, p50, p90, p99 across axis 1 of a (C, R) float array (NaN = not
    counted), where ``censored`` (C, R) bool marks values that are only lower
    bounds (requests not served by the end of the run).

    Each statistic is computed with the lower bounds (so it is itself a lower
    bound when it depends on one), and ``{stat}_is_lower_bound`` says whether it
    does: the percentile recomputed with every censored value at +inf differs.
    Returns ``{prefix}_{stat}`` (float64) and ``{prefix}_{stat}_is_lower_bound``
    (bool), all (C,), and ``{prefix}_p{SLO_PERCENTILE}_upper_bound`` (float64,
    +inf when censored values reach it): the percentile with every censored
    value at +inf, so the true one lies between it and the lower bound (a few
    requests still unserved at a horizon shift the order by a rank or two and
    leave it finite: an SLO at or above it holds whatever they turn out to be)."""
    hi = np.where(censored, _UNSERVED, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = {f"{prefix}_mean": np.nanmean(x, axis=1)}
        q = row_percentiles(x, PERCENTILES)
        q_hi = row_percentiles(hi, PERCENTILES)
        # An order statistic that is an unserved request's: the bound is +inf
        # (interpolating toward the 1e18 stand-in would give a huge finite one).
        top = row_percentiles(hi, PERCENTILES, higher=True)
    out[f"{prefix}_mean_is_lower_bound"] = censored.any(axis=1)
    for p, row, row_hi, row_top in zip(PERCENTILES, q, q_hi, top, strict=True):
        out[f"{prefix}_p{p}"] = row
        out[f"{prefix}_p{p}_is_lower_bound"] = ~np.isnan(row) & (row_hi != row)
        if p == SLO_PERCENTILE:
            out[f"{prefix}_p{p}_upper_bound"] = np.where(row_top >= _UNSERVED, np.inf, row_hi)
    return out


def latency_stats(prefix: str, x: np.ndarray, censored: np.ndarray) -> dict[str, np.ndarray]:
    """``_stats`` for callers outside this module (``planner.disagg``): mean,
    p50, p90, p99 of a (C, R) float array with its lower-bound flags."""
    return _stats(prefix, x, censored)


def outcome(
    livelocked: np.ndarray,
    completed: np.ndarray,
    offered: np.ndarray,
    preemptions: np.ndarray,
    waste_share: np.ndarray,
    step_limit: np.ndarray | None = None,
) -> np.ndarray:
    """Outcome class per config, shape (C,) of str, first match wins:

    ``livelocked`` (the kernel proved a request can never be scheduled again:
    a frozen pool or a repeating cycle), ``step_limit`` (the run stopped at
    max_steps with requests unfinished and nothing proven: its counts are a
    truncated run's, so no other verdict is claimed), ``starved`` (requests
    were offered, none completed: also when the front end rejected them all,
    since such a configuration serves nothing), ``thrashing`` (waste share >=
    THRASHING_WASTE_SHARE), ``churning`` (preempted, below that share), else
    ``ok``. All arguments have shape (C,); ``step_limit`` is the kernel's
    O_STEP_LIMIT flag (None: no run hit it).
    """
    cls = np.full(len(completed), OK, dtype=object)
    cls[preemptions > 0] = CHURNING
    cls[waste_share >= THRASHING_WASTE_SHARE] = THRASHING
    cls[(completed == 0) & (offered > 0)] = STARVED
    if step_limit is not None:
        cls[step_limit.astype(bool)] = STEP_LIMIT
    cls[livelocked.astype(bool)] = LIVELOCKED
    return cls


def counted_by(cfg: np.ndarray) -> np.ndarray:
    """(C,) int64 ns: the latest time an event (a first token, a finish) may
    have to count, the horizon; compat blis: none (INT64_MAX), since its steps
    start at or before the horizon and every event of such a step counts,
    even after it (``ClusterSimulator.Run``, ``sim/cluster/cluster.go``;
    docs/blis-compat.md, rule 4). ``cfg``: (C, NCOLS) packed configs."""
    return np.where(cfg[:, K.COMPAT] != 0, np.iinfo(np.int64).max, cfg[:, K.HORIZON_NS])


def per_request(res: SimResult) -> dict[str, np.ndarray]:
    """Per-request latencies, each (C, R) float64 seconds, NaN = not counted.

    ``done``: finished by the horizon (bool). ``ttft``, ``tpot``, ``e2e`` and
    ``queue_delay`` (arrival to first scheduled) are exact for the requests
    served (scheduled), and **lower bounds** for the requests that arrived (and
    were not rejected) but had no first token (``ttft``), were never scheduled
    (``queue_delay``) or had
    not finished (``tpot``, ``e2e``) by the end of the run (the horizon, or the
    last step of a run stopped early): end - arrival (+ alpha2), and for TPOT
    (end - first token) / (most outputs - 1) + alpha2, or alpha2 with no first
    token. ``{name}_censored`` (bool) marks those. Requests arriving after the
    end are not counted; single-output requests have no TPOT. ``max_itl``: the
    largest gap between two consecutive output tokens so far + alpha2 (NaN
    with no gap).
    """
    st, cfg = res.state, res.cfg
    horizon = cfg[:, K.HORIZON_NS][:, None]
    end = np.minimum(st.out.counters[:, S.O_END_NS][:, None], horizon)
    a2_s = cfg[:, K.A2][:, None] / 1e9
    arr = res.arrival_ns if res.arrival_ns.ndim == 2 else res.arrival_ns[None, :]
    by = counted_by(cfg)[:, None]
    done = (st.req.finish_ns >= 0) & (st.req.finish_ns <= by)
    first = (st.req.first_ns >= 0) & (st.req.first_ns <= by)
    sched = (st.req.sched_ns >= 0) & (st.req.sched_ns <= by)
    waited = (arr <= end) & (st.req.status != S.REJECTED) & sent_mask(res)
    no_first = waited & ~first
    no_sched = waited & ~sched
    unfinished = waited & ~done
    most = most_outputs(res)
    multi = done & (st.req.nout >= 2)
    multi_open = unfinished & (most >= 2)
    since_first = np.where(first, (end - st.req.first_ns) / 1e9, 0.0) / np.maximum(most - 1, 1)
    waited_s = (end - arr) / 1e9
    ttft = np.where(first, (st.req.first_ns - arr) / 1e9 + a2_s, np.nan)
    queue = np.where(sched, (st.req.sched_ns - arr) / 1e9, np.nan)
    e2e = np.where(done, (st.req.finish_ns - arr) / 1e9 + a2_s * st.req.nout, np.nan)
    tpot = np.where(
        multi,
        (st.req.finish_ns - st.req.first_ns) / 1e9 / np.maximum(st.req.nout - 1, 1) + a2_s,
        np.nan,
    )
    return {
        "done": done,
        "ttft": np.where(no_first, waited_s + a2_s, ttft),
        "ttft_censored": no_first,
        "queue_delay": np.where(no_sched, waited_s, queue),
        "queue_delay_censored": no_sched,
        "e2e": np.where(unfinished, waited_s + a2_s, e2e),
        "e2e_censored": unfinished,
        "tpot": np.where(multi_open, since_first + a2_s, tpot),
        "tpot_censored": multi_open,
        "max_itl": np.where(st.req.ngap > 0, st.req.max_gap_ns / 1e9 + a2_s, np.nan),
    }


def requests_table(res: SimResult, config: int = 0) -> pd.DataFrame:
    """One row per request of config ``config`` (``plan run --requests-out``):
    ``request`` (0-based, arrival order), ``arrival_s``, ``prompt_tokens``,
    ``max_tokens``, ``output_tokens`` (generated), ``first_scheduled_s``, ``first_token_s``,
    ``finish_s`` (seconds from the run's start, NaN if it never happened; the
    engine's times, before any BLIS alpha2 a latency adds),
    ``ttft_s``, ``tpot_s``, ``e2e_s``, ``queue_delay_s`` (``per_request``: NaN
    where not measured; the ``*_censored`` columns mark lower bounds for
    requests the run did not finish) and ``preemptions``."""
    st = res.state.req
    pr = per_request(res)
    arr = res.arrival_ns if res.arrival_ns.ndim == 2 else res.arrival_ns[None, :]

    def at(ns: np.ndarray) -> np.ndarray:
        return np.where(ns >= 0, ns / 1e9, np.nan)

    out = {
        "request": np.arange(arr.shape[1]),
        "arrival_s": arr[config] / 1e9,
        "prompt_tokens": res.workload.prompt_tokens,
        "max_tokens": res.workload.output_tokens,
        "output_tokens": st.nout[config],
        "first_scheduled_s": at(st.sched_ns[config]),
        "first_token_s": at(st.first_ns[config]),
        "finish_s": at(st.finish_ns[config]),
    }
    for k in ("ttft", "tpot", "e2e", "queue_delay"):
        out[f"{k}_s"] = pr[k][config]
        out[f"{k}_censored"] = pr[f"{k}_censored"][config]
    out["preemptions"] = st.npre[config]
    return pd.DataFrame(out)


def sent_mask(res: SimResult) -> np.ndarray:
    """(C, R) bool: requests their client sent during the run. All of an
    open-loop workload; closed loop, the first N and one per answer; sessions,
    first turns and the turns after a finished one. Requests never sent have
    no latency (they count in neither percentiles nor SLO misses). A
    replica's rows (``SimResult.replica_metrics``) carry what the router sent
    them (``SimResult.sent``)."""
    if res.sent is not None:
        return res.sent
    st, cfg = res.state, res.cfg
    r = st.req.entry_ns.shape[1]
    out = S.entered(st.req.entry_ns)
    for i in np.flatnonzero(cfg[:, K.CONC] > 0):
        n = min(r, int(cfg[i, K.CONC] + st.out.counters[i, S.O_RELEASED]))
        row = np.zeros(r, dtype=bool)
        row[st.req.order[i, :n]] = True
        out[i] = row
    return out


def most_outputs(res: SimResult) -> np.ndarray:
    """(1 or C, R) int64: the most outputs each request can produce,
    min(max_tokens, max_model_len - prompt) (vLLM stops a request at either)."""
    wl = res.workload
    return np.minimum(
        wl.output_tokens[None, :].astype(np.int64),
        res.cfg[:, K.MML][:, None] - wl.prompt_tokens[None, :].astype(np.int64),
    )


def kv_loads(res: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """Each request's KV load on a disaggregated decode replica (config
    ``kv_transfer``): (C, R) bool, the load started (``remote_kv.start_load``;
    False for a request not remote or a config without ``kv_transfer``), and
    (C, R) int64 ns it takes, ``KVTransfer.duration_ns`` of the tokens it
    carries, or of none (the link's latency, the least it will take) for one
    not started; 0 where there is no load. A config with ``kv_transfer`` is
    one replica (``SchedulerConfig`` refuses more), so its row holds every
    load. Loads do not share the link (``kernel/remote_kv.py``): their time
    is delay that no scheduler setting or added capacity removes, so the
    overload verdict judges a decode replica on its requests as they land,
    arrival + it (``summarize``)."""
    shape = res.state.req.first_ns.shape
    started, took = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=np.int64)
    if res.workload.remote is None:
        return started, took
    remote = np.asarray(res.workload.remote, dtype=bool)
    x = res.state.remote
    for c, config in enumerate(res.configs):
        if config.kv_transfer is None:
            continue
        started[c] = remote & ((x.pd[c] & S.PD_REMOTE) == 0)
        carried = np.where(started[c], x.xfer_tok[c].astype(np.int64), 0)
        took[c] = np.where(remote, config.kv_transfer.duration_ns(carried), 0)
    return started, took


def span_s(res: SimResult) -> np.ndarray:
    """Seconds the throughputs divide by: the horizon, or the simulated span."""
    horizon = res.cfg[:, K.HORIZON_NS]
    s = np.where(horizon != K.NO_HORIZON_NS, horizon, res.state.out.counters[:, S.O_END_NS]) / 1e9
    return np.where(s > 0, s, np.nan)


def request_meets_slo(q: dict[str, np.ndarray], slo: SLO) -> np.ndarray:
    """(C, R) bool: vLLM's goodput rule (``vllm/benchmarks/serve.py``,
    ``calculate_metrics``): a request finished by the horizon whose every given
    metric is at or below its SLO (a single-output request has no TPOT and
    meets a TPOT SLO, as vLLM's TPOT of 0). ITL (this planner's extension,
    ``planner.slo``): the request's largest gap between two consecutive output
    tokens + alpha2 (``max_itl``) at or below the SLO; a request with no gap
    meets it. ``q``: ``per_request``'s output."""
    ok = q["done"].copy()
    if slo.ttft_s is not None:
        ok &= q["ttft"] <= slo.ttft_s
    if slo.tpot_s is not None:
        ok &= np.isnan(q["tpot"]) | (q["tpot"] <= slo.tpot_s)
    if slo.itl_s is not None:
        ok &= np.isnan(q["max_itl"]) | (q["max_itl"] <= slo.itl_s)
    if slo.e2e_s is not None:
        ok &= q["e2e"] <= slo.e2e_s
    return ok


def slo_columns(df: pd.DataFrame, slo: SLO) -> dict[str, np.ndarray]:
    """Run-level SLO verdict from ``summarize``'s columns: ``meets_slo`` (C,)
    bool, True when for each given metric its p99 (``slo.SLO_PERCENTILE``) is
    at or below the SLO even with every unserved request at +inf (its
    ``_upper_bound``; the p99 itself where a frame lacks that column and the
    p99 is exact), or no request has that metric; and ``slo_margin`` (C,) float, the
    largest p99 / SLO ratio (at most 1 when met; a lower bound when a p99 is;
    +inf with a rejected request).
    A request the front end rejected (``rejected``) has no latency but
    failed, as vLLM returns it an error, and one it cut short (``cut``) got
    fewer tokens than asked: like an unserved one each counts as a miss
    (``front_end_failures``), so a run with any is not ``meets_slo`` (a run
    that rejects everything has no p99 at all); nor is a run max_steps cut
    (``step_limit_hit``), which claims no verdict. Overload is not part of
    it: callers combine it with ``overloaded``."""
    meets = front_end_failures(df) == 0
    judged = np.zeros(len(df), dtype=bool)  # some SLO metric has a value: a run to judge
    margin = np.zeros(len(df))
    for field, limit in slo.items():
        p = df[f"{field}_p{SLO_PERCENTILE}"].to_numpy(dtype=float)
        judged |= ~np.isnan(p)
        meets &= np.isnan(p) | (slo_upper_bound(df, field) <= limit)
        margin = np.fmax(margin, p / limit)
    meets &= judged  # a run no request of which had any SLO metric meets nothing
    if "step_limit_hit" in df:  # a run --max-steps cut claims no verdict (``outcome``)
        meets &= ~df["step_limit_hit"].to_numpy(dtype=bool)
    # A rejection is a miss no p99 shows: no margin (+inf), so that sorting
    # by it never ranks such a run first.
    margin = np.where(front_end_failures(df) > 0, np.inf, margin)
    return {"meets_slo": meets, "slo_margin": margin}


def slo_open_bounds(row: Mapping[str, Any], slo: SLO) -> list[str]:
    """The p99 columns (e.g. ``ttft_s_p99``) that leave a ``summarize`` row's
    SLO verdict undecided, or [] when it is decided: ``horizon_s`` ended the
    run (before or after the last arrival), nothing failed at the front end,
    and every objective the row does not meet has a p99 that is only a lower
    bound (requests unserved when the run ended) at or below its limit, so a
    longer run could still meet it. Such a row is not ``meets_slo``, yet
    nothing in it misses either (overload, a separate verdict, may still)."""
    horizon = row.get("horizon_s")
    cut = horizon is not None and not math.isnan(float(horizon))
    cut = cut and float(row.get("sim_end_s", 0.0)) >= float(horizon)  # type: ignore[arg-type]
    if not (cut or bool(row.get("ended_by_horizon", False))):
        return []
    if front_end_failures(pd.DataFrame([row]))[0] > 0:  # failed requests: misses
        return []
    open_keys = []
    for field, limit in slo.items():
        key = f"{field}_p{SLO_PERCENTILE}"
        p = float(row[key])
        upper = float(row.get(f"{key}_upper_bound", math.inf))
        if math.isnan(p) or upper <= limit:
            continue  # no request to judge, or met whatever the unserved do
        if not bool(row[f"{key}_is_lower_bound"]) or p > limit:
            return []  # a miss no longer run can undo
        open_keys.append(key)
    return open_keys


def open_bounds_text(keys: list[str]) -> str:
    """Why ``slo_open_bounds`` ``keys`` leave an SLO verdict open, for people."""
    which = " and ".join(keys)
    bounds = "is only a lower bound" if len(keys) == 1 else "are only lower bounds"
    return (
        "the horizon ended the run while requests that had waited less than the SLO were "
        f"unserved ({which} {bounds} below it): run without --horizon, or longer"
    )


def slo_upper_bound(df: pd.DataFrame, field: str) -> np.ndarray:
    """(C,) float64: the most ``field``'s p99 (``SLO_PERCENTILE``) can be,
    every request unserved at the end of the run counted at +inf: the
    ``_upper_bound`` column, or for a frame without it the p99 when exact and
    +inf when it is only a lower bound."""
    key = f"{field}_p{SLO_PERCENTILE}"
    if f"{key}_upper_bound" in df:
        return df[f"{key}_upper_bound"].to_numpy(dtype=float)
    bound = df[f"{key}_is_lower_bound"].to_numpy(dtype=bool)
    return np.where(bound, np.inf, df[key].to_numpy(dtype=float))


def front_end_failures(df: pd.DataFrame) -> np.ndarray:
    """(C,) int64: requests of each ``summarize`` row the front end failed:
    ``rejected`` (HTTP 400, ``front_end.front_end_rejects``) plus ``cut``
    (admitted with max_tokens clamped, ``Workload.cut``: the client asked
    for more tokens than it got). Every verdict counts them as failed
    requests, so no answer gets cheaper by serving fewer tokens. Columns a
    frame lacks count 0."""
    out = np.zeros(len(df), dtype=np.int64)
    for col in ("rejected", "cut"):
        if col in df:
            out += df[col].to_numpy(dtype=np.int64)
    return out


def front_end_text(rejected: int, cut: int, max_model_len: int) -> str:
    """The front end's failures in words: how many requests it rejected
    (``front_end.REJECT_RULE``) and cut short (``front_end.CUT_RULE``) at
    ``max_model_len``; '' when neither. The fix is a larger max_model_len."""
    from planner.text import count
    from planner.workload.front_end import CUT_RULE, REJECT_RULE

    parts = []
    if rejected:
        parts.append(f"rejects {count(rejected, 'request')} ({REJECT_RULE} {max_model_len:,})")
    if cut:
        parts.append(
            f"cuts {count(cut, 'request')} short ({CUT_RULE} {max_model_len:,}: vLLM clamps "
            "max_tokens)"
        )
    if not parts:
        return ""
    return "the front end " + " and ".join(parts)


def summarize(res: SimResult, slo: SLO | None = None) -> pd.DataFrame:
    """One row per config: config columns, counts, throughput, latency, outcome.

    Latency statistics count every request that arrived, the unserved ones by
    a lower bound (``per_request``), and say when they are lower bounds
    (``*_is_lower_bound``); ``unserved``/``unfinished`` count those requests.
    With an ``slo`` that sets any objective, also ``goodput_rps``
    (``request_meets_slo`` and not ``cut``, per second of ``span_s``: vLLM
    bench would count a clamped request; the planner does not), ``meets_slo`` and
    ``slo_margin`` (``slo_columns``) and the SLOs themselves (``ttft_slo_s``,
    ``tpot_slo_s``, ``itl_slo_s``, ``e2e_slo_s``, NaN = not given).

    Front-end outcomes: ``rejected`` (HTTP 400), ``cut`` (admitted with
    max_tokens clamped: ``Workload.cut``), ``output_tokens_asked`` (output
    tokens of every request sent, up to the horizon when it ended the run)
    and ``output_tokens_served`` (of the requests completed), so a short
    answer shows beside the asked one.

    Token-level columns (``token_columns``): ITL p50/p90/p99 (``itl_s_*``,
    gaps owed at the end as +inf, with ``_is_lower_bound`` flags),
    the largest gap between two output tokens of any request
    (``max_token_stall_s``) and the time-averaged KV usage
    (``mean_kv_usage``). ``queue_delay_s_*`` is arrival to first scheduled.
    The prefix-cache hit rate: ``_prefix_cache_stats``."""
    st, cfg = res.state, res.cfg
    oi = st.out.counters
    q = per_request(res)
    done = q["done"]
    span = span_s(res)
    completed = done.sum(axis=1)
    out_tok = np.where(done, st.req.nout, 0).sum(axis=1)
    fin = np.where(done, st.req.finish_ns, np.iinfo(np.int64).max).min(axis=1)
    usable = np.array(
        [usable_blocks(int(n), bool(b)) for n, b in zip(cfg[:, K.N], cfg[:, K.NULL], strict=True)]
    )
    busy = oi[:, S.O_BUSY_NS].astype(float)
    waste_share = np.divide(
        st.out.floats[:, S.F_WASTE_NS], busy, out=np.zeros(len(busy)), where=busy > 0
    )
    offered = oi[:, S.O_ARRIVED]  # rejected requests were offered too
    arr = res.arrival_ns if res.arrival_ns.ndim == 2 else res.arrival_ns[None, :]
    # Arrivals as the scheduler can serve them: a disaggregated decode
    # replica's requests as their KV lands (``kv_loads``; the arrival elsewhere).
    land = np.broadcast_to(arr, st.req.first_ns.shape) + kv_loads(res)[1]
    arrival_s = land / 1e9
    horizon = cfg[:, K.HORIZON_NS]
    end_s = np.minimum(oi[:, S.O_END_NS], horizon) / 1e9
    # The horizon ended the run before the last arrival: overload is judged
    # on the arrivals it covered (a request due later had no chance to start).
    ended_by_horizon = (oi[:, S.O_END_NS] >= horizon) & (horizon < land.max(axis=1))
    # So did --max-steps (``outcome``'s step_limit): judged on the arrivals
    # due by the step the run stopped at.
    steps_cut = oi[:, S.O_STEP_LIMIT].astype(bool) & (oi[:, S.O_END_NS] < land.max(axis=1))
    cut_at = np.where(ended_by_horizon, horizon, np.where(steps_cut, oi[:, S.O_END_NS], -1))
    until = np.where(cut_at >= 0, cut_at / 1e9, np.inf)
    due = arrival_s <= until[:, None]  # the arrivals the overload verdict judges
    # Asked and cut count the requests sent and due within the run: one due
    # after the horizon was never asked of this server.
    sent = sent_mask(res)
    asked = sent & due
    cut = res.workload.cut(cfg[:, K.MML]) & asked  # (C, R): served fewer tokens than asked
    first_s = np.where(
        (st.req.first_ns >= 0) & (st.req.first_ns <= counted_by(cfg)[:, None]),
        st.req.first_ns / 1e9,
        np.nan,
    )

    df = pd.DataFrame([c.columns() for c in res.configs])
    df["workload"] = res.workload.name
    cols: dict[str, np.ndarray] = {
        "pool_starts": np.array([c.pool_starts for c in res.configs], dtype=bool),
        "completed": completed,
        "finished": oi[:, S.O_FINISHED],
        "rejected": oi[:, S.O_REJECTED],
        "cut": cut.sum(axis=1),
        "output_tokens_asked": np.where(asked, res.workload.output_tokens[None, :], 0).sum(axis=1),
        "output_tokens_served": out_tok,
        "running_end": oi[:, S.O_RUNNING_END],
        "waiting_end": oi[:, S.O_WAITING_END],
        "arrived": oi[:, S.O_ARRIVED],
        "preemptions": oi[:, S.O_PREEMPTIONS],
        "preempted_requests": (st.req.npre > 0).sum(axis=1),
        # compat blis: last-token slots that found no free block (BLIS's counter)
        "kv_allocation_failures": oi[:, S.O_KV_ALLOC_FAILURES],
        "throughput_rps": completed / span,
        "output_tps": out_tok / span,
        "first_completion_s": np.where(completed > 0, fin / 1e9, np.nan),
        "unserved": q["ttft_censored"].sum(axis=1),
        "unfinished": q["e2e_censored"].sum(axis=1),
        # closed loop / sessions: requests whose client never sent them (no latency)
        "never_sent": (~sent).sum(axis=1),
        **_stats("ttft_s", q["ttft"], q["ttft_censored"]),
        **_stats("tpot_s", q["tpot"], q["tpot_censored"]),
        **_stats("e2e_s", q["e2e"], q["e2e_censored"]),
        **_queue_stats(q),
        "peak_kv_blocks": usable - oi[:, S.O_MIN_FREE],
        "peak_kv_usage": (usable - oi[:, S.O_MIN_FREE]) / usable,
        **token_columns(res, usable),
        "steps": oi[:, S.O_STEPS],
        "zero_token_steps": oi[:, S.O_ZERO_STEPS],
        "prefill_tokens": oi[:, S.O_PREFILL_TOKENS],
        "decode_tokens": oi[:, S.O_DECODE_TOKENS],
        **_prefix_cache_stats(res),
        "waste_share": waste_share,
        "sim_end_s": oi[:, S.O_END_NS] / 1e9,
        "livelocked": oi[:, S.O_LIVELOCKED].astype(bool),
        "livelock_step": oi[:, S.O_LIVELOCK_STEP],
        "step_limit_hit": oi[:, S.O_STEP_LIMIT].astype(bool),
        "invariant_errors": oi[:, S.O_INVARIANT_ERRORS],
        **replica_columns(res),
        # The offered rate is the traffic's: every request sent in the arrival
        # window, also those due after a run that a proven livelock stopped;
        # a run the horizon or --max-steps cut is judged on what was due by then.
        **overload(
            arrival_s,  # as they land (``kv_loads``)
            first_s,
            end_s,
            np.where(cut_at >= 0, asked.sum(axis=1), np.maximum(offered, sent.sum(1))),
            (st.req.status == S.REJECTED) | ~sent,
            (res.workload.rejected(cfg[:, K.MML]) & asked).sum(axis=1),  # the front end's
            until,
            q["e2e"],
            q["e2e_censored"],
            np.where(q["done"], st.req.finish_ns / 1e9, np.nan),
            st.req.npre > 0,
        ),
        "ended_by_horizon": ended_by_horizon,
    }
    # No arrival within the judged window (a decode replica cut before any
    # KV landed): nothing to judge either way.
    none_due = ~(due & sent).any(axis=1)
    cols["overloaded"] = cols["overloaded"] & ~none_due
    cols["overload_judged"] = cols["overload_judged"] & ~none_due
    # Closed loop: when the cap held a request back, clients send only as
    # slots free, so the server's queue cannot grow: overload is an open-loop
    # verdict (the highest-rate search likewise), and offered_rps is the rate
    # the clients reached. A cap that never held one back changed nothing.
    scheduled = np.round(res.workload.arrival_s * 1e9).astype(np.int64)[None, :]
    cols["concurrency_bound"] = (cfg[:, K.CONC] > 0) & np.any(arr > scheduled, axis=1)
    cols["overloaded"] = cols["overloaded"] & ~cols["concurrency_bound"]
    cols["overload_judged"] = cols["overload_judged"] | cols["concurrency_bound"]
    # One concat, not a column at a time: a frame this wide would fragment.
    df = pd.concat([df, pd.DataFrame(cols, index=df.index)], axis=1)
    df["outcome"] = outcome(
        oi[:, S.O_LIVELOCKED],
        completed,
        offered,  # rejected ones included: a run that completes nothing is never ok
        oi[:, S.O_PREEMPTIONS],
        waste_share,
        oi[:, S.O_STEP_LIMIT],
    )
    if slo is not None and slo.given():
        # A request cut short is no good answer, though vLLM bench counts it.
        df["goodput_rps"] = (request_meets_slo(q, slo) & ~cut).sum(axis=1) / span
        for k, v in slo_columns(df, slo).items():
            df[k] = v
        for k, v in slo.as_dict().items():
            df[k] = np.nan if v is None else v
    return df


def replica_columns(res: SimResult) -> dict[str, np.ndarray]:
    """Per config, (C,) float64: ``replicas.imbalance`` of its replicas (1.0
    for a lone server that was sent any request)."""
    fleet = getattr(res, "fleet", None)
    if fleet is None:
        return RP.imbalance(res.state, RP.lone(len(res.cfg)))
    return RP.imbalance(fleet.state, fleet.layout)


def _prefix_cache_stats(res: SimResult) -> dict[str, np.ndarray]:
    """Prefix-cache hits as vLLM 0.33 counts them (``PrefixCacheStats``,
    recorded at each admission after a lookup): ``prefix_cache_queries`` and
    ``prefix_cache_hits`` (tokens; the ``vllm:prefix_cache_queries``/``_hits``
    counters) over admissions of requests never preempted, and
    ``prefix_cache_hit_rate`` = hits / queries (NaN with no lookup: caching
    off); re-admissions after a preemption count apart, as vLLM's
    ``preempted_queries``/``preempted_hits`` (``prefix_cache_preempted_*``).
    ``ideal_prefix_cache_hit_rate``: the workload's hit rate with an unbounded
    cache, one request at a time (``block_hashes.ideal_hits``), for block-hash
    workloads only (else NaN). Each (C,)."""
    from planner.workload.block_hashes import ideal_hit_rate

    oi = res.state.out.counters
    queries, hits = oi[:, S.O_PC_QUERIES], oi[:, S.O_PC_HITS]
    ideal = [
        ideal_hit_rate(res.workload, int(bs), int(mml))
        for bs, mml in zip(res.cfg[:, K.BS], res.cfg[:, K.MML], strict=True)
    ]
    return {
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "prefix_cache_hit_rate": np.divide(
            hits, queries, out=np.full(len(hits), np.nan), where=queries > 0
        ),
        "prefix_cache_preempted_queries": oi[:, S.O_PC_PRE_QUERIES],
        "prefix_cache_preempted_hits": oi[:, S.O_PC_PRE_HITS],
        "ideal_prefix_cache_hit_rate": np.array(ideal, dtype=np.float64),
    }


def _queue_stats(q: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``queue_delay_s_p50``/``_p99`` (arrival to first scheduled, seconds; see
    ``per_request``) and their ``_is_lower_bound`` flags, (C,) each."""
    full = _stats("queue_delay_s", q["queue_delay"], q["queue_delay_censored"])
    return {k: v for k, v in full.items() if "_p50" in k or "_p99" in k}


def token_columns(res: SimResult, usable: np.ndarray) -> dict[str, np.ndarray]:
    """Per config, (C,): the ITL columns (``itl_columns``),
    ``max_token_stall_s`` (float64: the largest gap between two consecutive
    output tokens of any request + alpha2; NaN with no gap) and
    ``mean_kv_usage`` (float64: blocks in use after each step's allocations,
    weighted by step time, / busy time / ``usable`` blocks; NaN with no busy
    time). Gaps count every token the run simulated, including those of the
    step that crossed the horizon."""
    st = res.state
    a2_s = res.cfg[:, K.A2] / 1e9
    gaps = st.req.ngap > 0
    stall = np.where(gaps, st.req.max_gap_ns, -1).max(axis=1)
    busy = st.out.counters[:, S.O_BUSY_NS].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        kv = np.where(busy > 0, st.out.floats[:, S.F_KV_BLOCK_NS] / busy / usable, np.nan)
    out = itl_columns(res)
    out["max_token_stall_s"] = np.where(stall >= 0, stall / 1e9 + a2_s, np.nan)
    out["mean_kv_usage"] = kv
    return out


def missing_gaps(res: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """Token gaps owed at the end of the run, per request, (C, R) each:

    ``missing`` (int64): for a request that arrived by the end (the horizon, or
    the last step), was sent (``sent_mask``), was not rejected and had not
    finished, m - max(n, 1) with
    m its most outputs (``most_outputs``) and n its outputs so far: m outputs
    have m - 1 gaps, of which n - 1 closed (none before the first token); 0
    for every other request. ``open_ns`` (int64): a lower bound on the first
    missing gap of a request with a token, end - its last token (clipped at
    0); 0 elsewhere (a gap is >= 0)."""
    st, cfg = res.state, res.cfg
    horizon = cfg[:, K.HORIZON_NS][:, None]
    end = np.minimum(st.out.counters[:, S.O_END_NS][:, None], horizon)
    arr = res.arrival_ns if res.arrival_ns.ndim == 2 else res.arrival_ns[None, :]
    owing = (arr <= end) & (st.req.status != S.REJECTED) & (st.req.finish_ns < 0) & sent_mask(res)
    missing = np.where(owing, np.maximum(most_outputs(res) - np.maximum(st.req.nout, 1), 0), 0)
    has_token = owing & (missing > 0) & (st.req.last_ns >= 0)
    open_ns = np.where(has_token, np.maximum(end - st.req.last_ns, 0), 0)
    return missing.astype(np.int64), open_ns.astype(np.int64)


def itl_distribution(res: SimResult, config: int = 0) -> dict[str, list]:
    """The ITL distribution of config ``config``: the kernel's gap histogram
    (``planner.kernel.token_gaps``) as its non-empty bins, ``itl_s`` (bin
    midpoint + alpha2, seconds, as ``itl_columns``'s percentiles) and
    ``count`` (gaps in the bin), each a list in increasing ITL. Gaps still
    owed at the run's end are not in it (``itl_columns`` counts them)."""
    hist = res.state.out.itl_hist[config]
    a2_s = res.cfg[config, K.A2] / 1e9
    bins = np.flatnonzero(hist)
    mids = [0.0 if i == 0 else sum(bin_edges_ns(int(i))) / 2 / 1e9 for i in bins]
    return {"itl_s": [m + a2_s for m in mids], "count": hist[bins].astype(int).tolist()}


def itl_columns(res: SimResult) -> dict[str, np.ndarray]:
    """ITL percentiles per config, (C,) each: ``itl_s_p50``/``_p90``/``_p99``
    (float64 seconds) over every gap between two consecutive output tokens of
    every request + alpha2, from the kernel's histogram (``planner.kernel.token_gaps``:
    bin midpoints, within 3.1 % of the exact gap), with every gap owed at the
    end of the run (``missing_gaps``) counted as +inf (a miss: ``planner.slo``).
    When that puts the percentile at +inf (more than 100 - p % of the gaps are
    owed), the column holds a lower bound instead, the percentile with the
    owed gaps at their lower bounds (``open_ns`` for a request's next token, 0
    for the rest), and ``{column}_is_lower_bound`` (bool) is True. NaN when the
    run has no gap at all (no request with two outputs, none owed)."""
    hist = res.state.out.itl_hist
    a2_s = res.cfg[:, K.A2] / 1e9
    missing, open_ns = missing_gaps(res)
    owed = missing.sum(axis=1)
    upper = percentiles_s(hist, PERCENTILES, owed)
    lower = upper
    if owed.any():
        low = hist.copy()
        opened = np.broadcast_to(open_ns > 0, missing.shape)
        bins = gap_bins(open_ns)
        for c in np.flatnonzero(owed):
            np.add.at(low[c], bins[c][opened[c]], 1)
            low[c, 0] += owed[c] - opened[c].sum()
        lower = percentiles_s(low, PERCENTILES)
    out: dict[str, np.ndarray] = {}
    for p, hi, lo in zip(PERCENTILES, upper, lower, strict=True):
        bound = np.isinf(hi)
        out[f"itl_s_p{p}"] = np.where(bound, lo, hi) + a2_s
        out[f"itl_s_p{p}_is_lower_bound"] = bound
        if p == SLO_PERCENTILE:  # every owed gap at +inf: an upper bound (_stats)
            out[f"itl_s_p{p}_upper_bound"] = hi + a2_s
    return out


def request_token_metrics(res: SimResult, c: int = 0) -> pd.DataFrame:
    """Config c's per-request token timing, one row per request (workload
    order), seconds: ``first_scheduled_s`` (start of the first step that
    scheduled it), ``queue_delay_s`` (that - arrival), ``first_token_s``,
    ``last_token_s``, ``max_token_stall_s`` (its largest gap between two
    consecutive output tokens + alpha2), ``itl_count`` (gaps) and
    ``itl_mean_s`` (their mean + alpha2: (last - first token) / gaps; vLLM's
    per-request TPOT for a finished request). NaN where a time or gap does
    not exist."""
    st = res.state.req
    a2_s = res.cfg[c, K.A2] / 1e9
    arr = res.arrival_ns[c] if res.arrival_ns.ndim == 2 else res.arrival_ns

    def t(x: np.ndarray) -> np.ndarray:
        return np.where(x >= 0, x / 1e9, np.nan)

    n = st.ngap[c]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n > 0, (st.last_ns[c] - st.first_ns[c]) / 1e9 / n + a2_s, np.nan)
    return pd.DataFrame(
        {
            "first_scheduled_s": t(st.sched_ns[c]),
            "queue_delay_s": t(st.sched_ns[c]) - np.where(st.sched_ns[c] >= 0, arr / 1e9, np.nan),
            "first_token_s": t(st.first_ns[c]),
            "last_token_s": t(st.last_ns[c]),
            "max_token_stall_s": np.where(n > 0, st.max_gap_ns[c] / 1e9 + a2_s, np.nan),
            "itl_count": n.astype(np.int64),
            "itl_mean_s": mean,
        }
    )
