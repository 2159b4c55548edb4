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
pass and the smallest fail) until their ratio is at most 1 + ``rel_tol``.

The predicate need not be monotone in s (queueing noise, a prefix-affinity
router's placements), so the answer is verified: s x each of
``VERIFY_FRACTIONS`` is run too (one kernel call over every configuration),
and the answer is the largest scale s such that **every** scale tried up to s
passed. A failure below the bisection's answer lowers it, and the lower answer
is verified again (at most ``MAX_VERIFY_ROUNDS`` rounds);
``max_rate_monotone`` says whether any failure lay below a pass. A
configuration that passes at the top of the range reports that top as a bound
(``max_rate_limit`` = ``"at_search_max"``); one that fails at the bottom
reports NaN (``"below_search_min"``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from planner.api import features_for, simulate
from planner.config import SchedulerConfig
from planner.kernel.variant import Features
from planner.latency.step_time import Latency
from planner.maxrate.search_range import SearchError, SearchRange
from planner.metrics import bursts, front_end_failures, keeps_up
from planner.slo import SLO
from planner.workload.arrays import Workload

EXPAND = 4.0  # bracketing step: from 1, x4 or /4 per round until pass and fail are known
# Verification: the answer s stands only if s x each of these passes too (one
# kernel call per round); a failure lowers s, and the new s is verified again.
VERIFY_FRACTIONS = (0.8, 0.9, 0.95)
MAX_VERIFY_ROUNDS = 4
FOUND, AT_MAX, BELOW_MIN = "found", "at_search_max", "below_search_min"
# The smallest failing scale failed only because its arrivals were a burst too
# short to judge overload (``metrics.OVERLOAD_MIN_LIFETIMES``): the answer is a
# lower bound set by the workload's length, not by the configuration.
TOO_SHORT = "workload_too_short"
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
    completed, no livelock or step limit, judged not overloaded
    (``metrics.keeps_up``: a burst too short to judge fails), no request
    rejected or cut short by the front end (``metrics.front_end_failures``),
    every SLO met."""
    return passes_but_judged(df, slo) & keeps_up(df)


def too_short(df: pd.DataFrame, slo: SLO) -> np.ndarray:
    """(C,) bool: the run meets every other condition of ``passes`` but its
    arrivals are a burst too short to judge overload (``metrics.bursts``)."""
    return passes_but_judged(df, slo) & bursts(df)


def passes_but_judged(df: pd.DataFrame, slo: SLO) -> np.ndarray:
    """(C,) bool: every condition of ``passes`` but the overload verdict."""
    ok = (df.completed > 0) & ~df.livelocked & ~df.step_limit_hit
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
    ``max_rate_monotone`` (no failing scale tried below a passing one),
    ``max_rate_tested`` (scales run),
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
    features: Features | None = None,
) -> SearchResult:
    """The highest sustainable rate scale of every configuration (module doc).

    Args:
        configs: C configurations; their ``horizon_s`` is not used (every
            candidate runs to completion).
        wl: the workload at scale 1 (R requests).
        latency: the step-time model of every configuration.
        slo: the SLOs (may set none: then only overload and completion count).
        rng: the scales searched and the tolerance.
        features: the kernel variant's markers for every round
            (``api.simulate``; None: those ``configs`` use, ``api.features_for``),
            so that rounds over different subsets share one compiled kernel.
    Returns:
        SearchResult. Raises SearchError for a workload with no arrival span.
    """
    rps, tps = offered_rates(wl)
    c = len(configs)
    marks = features if features is not None else features_for(configs, wl, latency)
    trials = _Trials(configs, wl, latency, slo, marks)
    refused = np.array([int(wl.rejected(cfg.max_model_len).sum()) for cfg in configs])
    cut = np.array([int(wl.cut(cfg.max_model_len).sum()) for cfg in configs])
    cand = np.where(refused + cut > 0, np.nan, min(max(1.0, rng.lo), rng.hi))
    while True:  # bracket, then bisect: one kernel call per round
        active = np.flatnonzero(~np.isnan(cand))
        if len(active) == 0:
            break
        trials.run(active, cand[active])
        cand[:] = np.nan
        for i in active:
            cand[i] = _next(trials.good(i), trials.bad(i), rng)
    for _ in range(MAX_VERIFY_ROUNDS):  # every fraction of the answer must pass too
        todo = trials.unverified(rng.lo)
        if not todo:
            break
        idx, scales = zip(*todo, strict=True)
        trials.run(np.array(idx), np.array(scales))
    good = np.array([trials.answer(i) for i in range(c)])
    bad = np.array([trials.bad(i) for i in range(c)])
    limit = np.where(
        np.isnan(good), BELOW_MIN, np.where(np.isnan(bad) & (good >= rng.hi), AT_MAX, FOUND)
    )
    limit = np.where([trials.short_at(i, bad[i]) for i in range(c)], TOO_SHORT, limit)
    limit = np.where(refused + cut > 0, REJECTS, limit)
    table = pd.DataFrame(
        {
            "max_rate_scale": good,
            "max_rps": good * rps,
            "max_output_tps": good * tps,
            "max_rate_limit": limit,
            "max_rate_fail_scale": bad,
            "max_rate_monotone": [trials.monotone(i) for i in range(c)],
            "max_rate_tested": [len(trials.log[i]) for i in range(c)],
            "rejected_requests": refused,
            "cut_requests": cut,
            **{
                f"{k}_at_max_rate": [trials.at(i, good[i])[j] for i in range(c)]
                for j, k in enumerate(AT_MAX_COLUMNS)
            },
        }
    )
    return SearchResult(table, trials.rounds, trials.evaluations)


class _Trials:
    """Every (configuration, scale) run so far and whether it passed, with
    the ``AT_MAX_COLUMNS`` of each passing run; ``run`` makes one kernel call
    over any set of them."""

    def __init__(
        self,
        configs: Sequence[SchedulerConfig],
        wl: Workload,
        lat: Latency,
        slo: SLO,
        features: Features,
    ) -> None:
        self.runs = [dataclasses.replace(cfg, horizon_s=math.inf) for cfg in configs]
        self.wl, self.lat, self.slo, self.features = wl, lat, slo, features
        self.log: list[dict[float, bool]] = [{} for _ in configs]
        self.short: list[set[float]] = [set() for _ in configs]  # failed only as a burst
        self.figures: list[dict[float, np.ndarray]] = [{} for _ in configs]
        self.rounds = self.evaluations = 0

    def run(self, idx: np.ndarray, scales: np.ndarray) -> None:
        """Run configuration ``idx[k]`` at ``scales[k]`` for every k, in one call."""
        res = simulate(
            [self.runs[i] for i in idx],
            self.wl,
            self.lat,
            check_invariants=False,
            arrival_s=self.wl.arrival_s[None, :] / scales[:, None],
            features=self.features,
        )
        df = res.metrics(self.slo)
        base = passes_but_judged(df, self.slo)  # one evaluation for both verdicts
        ok, short = base & keeps_up(df), base & bursts(df)
        figures = df.reindex(columns=AT_MAX_COLUMNS).to_numpy(dtype=float)
        for k, (i, scale) in enumerate(zip(idx, scales, strict=True)):
            self.log[i][float(scale)] = bool(ok[k])
            if short[k]:
                self.short[i].add(float(scale))
            if ok[k]:
                self.figures[i][float(scale)] = figures[k]
        self.rounds += 1
        self.evaluations += len(idx)

    def good(self, i: int) -> float:
        """The largest passing scale tried (NaN: none)."""
        return max((s for s, ok in self.log[i].items() if ok), default=math.nan)

    def bad(self, i: int) -> float:
        """The smallest failing scale tried (NaN: none)."""
        return min((s for s, ok in self.log[i].items() if not ok), default=math.nan)

    def answer(self, i: int) -> float:
        """The largest passing scale with no failing scale tried at or below
        it (NaN: none): where pass/fail is not monotone, the lower figure."""
        bad = self.bad(i)
        return max((s for s, ok in self.log[i].items() if ok and not s >= bad), default=math.nan)

    def short_at(self, i: int, scale: float) -> bool:
        """Whether the run at ``scale`` failed only as a burst too short to judge."""
        return scale in self.short[i]

    def monotone(self, i: int) -> bool:
        """No failing scale tried below a passing one."""
        return not self.bad(i) < self.good(i)

    def unverified(self, lo: float) -> list[tuple[int, float]]:
        """(configuration, scale) pairs at ``VERIFY_FRACTIONS`` of each answer,
        down to ``lo``, not yet run."""
        out = []
        for i in range(len(self.log)):
            s = self.answer(i)
            if not np.isnan(s):
                fs = [f * s for f in VERIFY_FRACTIONS]
                out += [(i, x) for x in fs if x >= lo and not self.tried(i, x)]
        return out

    def tried(self, i: int, scale: float) -> bool:
        """Whether a scale within 0.1% of ``scale`` was run."""
        return any(abs(s - scale) <= 1e-3 * scale for s in self.log[i])

    def at(self, i: int, scale: float) -> np.ndarray:
        """The ``AT_MAX_COLUMNS`` of the run at ``scale`` (NaN when none passed)."""
        return self.figures[i].get(scale, np.full(len(AT_MAX_COLUMNS), np.nan))


def _next(good: float, bad: float, rng: SearchRange) -> float:
    """The next candidate scale of one configuration, NaN when it is done."""
    if np.isnan(bad):  # nothing failed yet: expand up to the range's top
        return np.nan if good >= rng.hi else min(good * EXPAND, rng.hi)
    if np.isnan(good):  # nothing passed yet: contract down to the range's bottom
        return np.nan if bad <= rng.lo else max(bad / EXPAND, rng.lo)
    if bad <= good * (1 + rng.rel_tol):
        return np.nan
    return math.sqrt(good * bad)
