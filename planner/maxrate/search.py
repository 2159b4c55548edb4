"""The highest arrival rate each configuration sustains under given SLOs.

For every configuration, the largest rate scale s (arrival times divided by s,
so s = 2 offers the workload twice as fast; every request is still offered)
at which the configuration is not overloaded (``metrics.overload``), every
given SLO holds (``metrics.slo_columns``: p99s with unserved requests as
misses), something completes and no livelock or step limit stopped the run.
Every candidate runs to completion (no horizon), so every figure is exact and
``plan run --rate-scale S`` (no ``--horizon``) reproduces it.

All configurations are searched at once: each round is **one** kernel call
(``api.simulate`` with per-config arrivals, ``arrival_s`` of shape (C, R))
over every configuration still searching, each at its own candidate scale.
Per configuration, in lockstep: start at 1 (clipped to the range); while no
candidate has failed, multiply by ``EXPAND``; while none has passed, divide by
it; once bracketed, bisect in log space (the geometric mean of the largest
pass and the smallest fail) until their ratio is at most 1 + ``rel_tol``. The
answer is the largest scale that passed. A configuration that passes at the
top of the range reports that top as a bound (``max_rate_limit`` =
``"at_search_max"``); one that fails at the bottom reports NaN
(``"below_search_min"``).

The predicate need not be monotone in s (queueing noise); the search assumes
it is, as any bisection does, and ``tests/test_maxrate.py`` checks the answer
at 0.9 s and 1.1 s on several configurations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from planner.api import simulate
from planner.config import SchedulerConfig
from planner.latency.step_time import Latency
from planner.maxrate.search_range import SearchError, SearchRange
from planner.metrics import front_end_failures
from planner.slo import SLO
from planner.workload.arrays import Workload

EXPAND = 4.0  # bracketing step: from 1, x4 or /4 per round until pass and fail are known
FOUND, AT_MAX, BELOW_MIN = "found", "at_search_max", "below_search_min"
# A configuration whose max_model_len makes the front end reject or cut short
# some requests (``metrics.front_end_failures``): they fail at every rate, so it
# is not searched.
REJECTS = "rejects_requests"
# Figures of the run at the answer (the largest passing scale), as columns
# ``{name}_at_max_rate``: exact (runs go to completion).
AT_MAX_COLUMNS = (
    "ttft_s_p99",
    "tpot_s_p99",
    "itl_s_p99",
    "e2e_s_p99",
    "goodput_rps",
    "throughput_rps",
)


def passes(df: pd.DataFrame, slo: SLO) -> np.ndarray:
    """(C,) bool: the search's predicate on ``summarize`` rows: something
    completed, no livelock or step limit, not overloaded, no request rejected
    or cut short by the front end (``metrics.front_end_failures``), every SLO
    met."""
    ok = (df.completed > 0) & ~df.livelocked & ~df.step_limit_hit & ~df.overloaded.astype(bool)
    ok &= front_end_failures(df) == 0
    if slo.given():
        ok &= df.meets_slo.astype(bool)
    return ok.to_numpy()


def offered_rates(wl: Workload) -> tuple[float, float]:
    """(requests per second, output tokens per second) the workload offers at
    scale 1: requests (or their output tokens) over the arrival window, last
    minus first arrival (as ``metrics.overload``'s ``offered_rps``). Raises
    SearchError when all requests arrive at once (no rate to scale)."""
    window = float(wl.arrival_s.max() - wl.arrival_s.min()) if wl.num_requests else 0.0
    if not window > 0:
        raise SearchError(
            f"{wl.name}: every request arrives at the same time (offline): there is no "
            "arrival rate to scale"
        )
    return wl.num_requests / window, float(wl.output_tokens.sum()) / window


@dataclass
class SearchResult:
    """``table``: one row per configuration (input order): ``max_rate_scale``
    (NaN when even the range's low end fails), ``max_rps`` and
    ``max_output_tps`` (what the workload offers at that scale: requests and
    output tokens per second over the arrival window), ``max_rate_limit``
    (``found``, ``at_search_max``: a lower bound, ``below_search_min``,
    ``rejects_requests``: not searched, the front end rejects
    ``rejected_requests`` of the workload's requests and cuts ``cut_requests``
    short at its max_model_len, and they fail at every rate),
    ``max_rate_fail_scale`` (the smallest failing scale tried; NaN if none),
    and ``{AT_MAX_COLUMNS}_at_max_rate``: the run at ``max_rate_scale`` (NaN
    when nothing passed; ``goodput_rps`` NaN without SLOs);
    ``rounds``: kernel calls made; ``evaluations``: configuration runs."""

    table: pd.DataFrame
    rounds: int
    evaluations: int


def search_max_rate(
    configs: Sequence[SchedulerConfig],
    wl: Workload,
    latency: Latency,
    slo: SLO,
    rng: SearchRange = SearchRange(),
) -> SearchResult:
    """The highest sustainable rate scale of every configuration (module doc).

    Args:
        configs: C configurations; their ``horizon_s`` is not used (every
            candidate runs to completion).
        wl: the workload at scale 1 (R requests).
        latency: the step-time model of every configuration.
        slo: the SLOs (may set none: then only overload and completion count).
        rng: the scales searched and the tolerance.
    Returns:
        SearchResult. Raises SearchError for a workload with no arrival span.
    """
    rps, tps = offered_rates(wl)
    c = len(configs)
    runs = [dataclasses.replace(cfg, horizon_s=math.inf) for cfg in configs]
    good = np.full(c, np.nan)  # largest passing scale
    bad = np.full(c, np.nan)  # smallest failing scale
    refused = np.array([int(wl.rejected(cfg.max_model_len).sum()) for cfg in configs])
    cut = np.array([int(wl.cut(cfg.max_model_len).sum()) for cfg in configs])
    cand = np.where(refused + cut > 0, np.nan, min(max(1.0, rng.lo), rng.hi))
    at_max = np.full((c, len(AT_MAX_COLUMNS)), np.nan)
    rounds = evaluations = 0
    while True:
        active = np.flatnonzero(~np.isnan(cand))
        if len(active) == 0:
            break
        scales = cand[active]
        res = simulate(
            [runs[i] for i in active],
            wl,
            latency,
            check_invariants=False,
            arrival_s=wl.arrival_s[None, :] / scales[:, None],
        )
        df = res.metrics(slo)
        ok = passes(df, slo)
        rounds += 1
        evaluations += len(active)
        for j in np.flatnonzero(ok & ~(scales <= good[active])):  # a new largest pass
            at_max[active[j]] = df.reindex(columns=AT_MAX_COLUMNS).iloc[j].to_numpy(dtype=float)
        good[active] = np.where(ok, np.fmax(good[active], scales), good[active])
        bad[active] = np.where(ok, bad[active], np.fmin(bad[active], scales))
        cand[:] = np.nan
        for i in active:
            cand[i] = _next(good[i], bad[i], rng)
    limit = np.where(
        np.isnan(good), BELOW_MIN, np.where(np.isnan(bad) & (good >= rng.hi), AT_MAX, FOUND)
    )
    limit = np.where(refused + cut > 0, REJECTS, limit)
    table = pd.DataFrame(
        {
            "max_rate_scale": good,
            "max_rps": good * rps,
            "max_output_tps": good * tps,
            "max_rate_limit": limit,
            "max_rate_fail_scale": bad,
            "rejected_requests": refused,
            "cut_requests": cut,
            **{f"{k}_at_max_rate": at_max[:, j] for j, k in enumerate(AT_MAX_COLUMNS)},
        }
    )
    return SearchResult(table, rounds, evaluations)


def _next(good: float, bad: float, rng: SearchRange) -> float:
    """The next candidate scale of one configuration, NaN when it is done."""
    if np.isnan(bad):  # nothing failed yet: expand up to the range's top
        return np.nan if good >= rng.hi else min(good * EXPAND, rng.hi)
    if np.isnan(good):  # nothing passed yet: contract down to the range's bottom
        return np.nan if bad <= rng.lo else max(bad / EXPAND, rng.lo)
    if bad <= good * (1 + rng.rel_tol):
        return np.nan
    return math.sqrt(good * bad)
