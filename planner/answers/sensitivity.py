"""How an answer moves when the step time is off by its model's validated
error (issue 33, item 6).

Every answer of ``plan size`` and ``plan max-rate`` is a function of the step
time, and each step-time model was measured against real GPU runs
(``planner.latency.validated``: the median absolute TPOT error over the
shipped runs). This module reruns the answer with every step ``1 + e`` and
``1 - e`` times as long (``Latency.slower``), e that error or the user's
``--step-time-error``:

- ``replicas``: the fewest replicas of the chosen deployment (same GPU,
  tensor parallelism and vLLM flags) that still meet the target at each
  factor, searched 1..max_replicas in one kernel call per factor
  (``maxrate.passes``, the sizing's own predicate);
- ``max_rate``: the highest sustainable rate of a configuration at each
  factor (``maxrate.search.search_max_rate``).

Both are plain reruns of the planner: nothing is extrapolated.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from planner.api import features_for, simulate
from planner.config import SchedulerConfig
from planner.latency import validated
from planner.latency.step_time import Latency
from planner.maxrate.search import passes, search_max_rate
from planner.maxrate.search_range import SearchRange
from planner.slo import SLO
from planner.workload.arrays import Workload


@dataclass(frozen=True)
class Shift:
    """Step times ``factor`` x the model's, and the answer there: ``value`` is
    the fewest replicas (None: none up to the search's maximum) or the
    highest rate in requests per second (NaN: none in the search range)."""

    factor: float
    value: int | float | None


def chosen_error(given: float | None, lat: Latency) -> tuple[float, str] | None:
    """The error to apply and where it comes from: ``given`` (the user's
    ``--step-time-error``; 0 turns the lines off), else ``lat``'s validated
    error (``planner.latency.validated``), else None (nothing validated it).
    Raises ValueError for a given error outside [0, 1)."""
    if given is not None:
        factors(given)
        return None if given == 0 else (given, "--step-time-error")
    v = validated.for_latency(lat)
    return None if v is None else (v.error, v.text())


def no_error_text(given: float | None) -> str:
    """Why ``chosen_error`` gave None, for the output."""
    if given == 0:
        return "--step-time-error 0"
    return "no real run validated this step-time model; give --step-time-error"


def factors(error: float) -> tuple[float, float]:
    """(slower, faster) step-time factors for a fractional ``error`` in [0, 1).
    Raises ValueError outside that range."""
    if not (0.0 <= error < 1.0) or not math.isfinite(error):
        raise ValueError(f"--step-time-error must be at least 0 and below 1, got {error!r}")
    return 1.0 + error, 1.0 - error


def replicas(
    cfg: SchedulerConfig,
    wl: Workload,
    lat: Latency,
    slo: SLO,
    error: float,
    max_replicas: int,
) -> tuple[Shift, Shift]:
    """The fewest replicas of ``cfg`` (its ``replicas`` ignored) meeting the
    target with step times 1 + ``error`` and 1 - ``error`` times ``lat``'s.

    Args:
        cfg: the chosen deployment's configuration (its pool, flags, router).
        wl: the workload it was sized for.
        lat: its step-time model.
        slo: the target's SLOs (none: not overloaded only).
        error: fraction in [0, 1).
        max_replicas: the largest fleet to try.
    Returns:
        (slower, faster) shifts, each with the fewest replicas or None.
    Raises:
        ValueError: for an error outside [0, 1).
    """
    fleets = [
        dataclasses.replace(cfg, replicas=k, horizon_s=math.inf) for k in range(1, max_replicas + 1)
    ]
    marks = features_for(fleets, wl, lat)
    out = []
    for f in factors(error):
        res = simulate(fleets, wl, lat.slower(f), check_invariants=False, features=marks)
        ok = np.flatnonzero(passes(res.metrics(slo), slo))
        out.append(Shift(f, int(ok[0]) + 1 if len(ok) else None))
    return out[0], out[1]


def max_rate(
    cfg: SchedulerConfig,
    wl: Workload,
    lat: Latency,
    slo: SLO,
    error: float,
    rng: SearchRange,
) -> tuple[Shift, Shift]:
    """The highest sustainable rate of ``cfg`` (requests per second) with step
    times 1 + ``error`` and 1 - ``error`` times ``lat``'s, searched over
    ``rng`` as ``plan max-rate`` searches. Raises ValueError for an error
    outside [0, 1) and ``SearchError`` for a workload without an arrival span."""
    out = []
    for f in factors(error):
        t = search_max_rate([cfg], wl, lat.slower(f), slo, rng).table.iloc[0]
        out.append(Shift(f, float(t["max_rps"])))
    return out[0], out[1]
