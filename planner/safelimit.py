"""``plan safe-limit``: the largest KV-safe max_num_seqs, three ways.

1. Analytic (``capacity.analytic_safe_max_num_seqs``): ``floor((N-1) /
   cdiv(L, bs))`` with L the mean prompt + mean output, and L at percentiles
   of prompt + output.
2. Simulation-verified: the largest max_num_seqs such that it and every
   smaller value keep the preemption rate (preemptions per completed request)
   at or below a threshold, 0 by default. Found with the batch kernel: a
   log-spaced pass over 1..upper, then every integer between the last passing
   and the first failing value.
3. Throughput- and goodput-optimal: the smallest max_num_seqs within 1%
   (``KNEE_TOLERANCE``) of the best completions per second, and of the best
   completions per second that meet the TTFT and TPOT SLOs (goodput). Both are
   refined over every integer below the coarse knee.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from planner.api import simulate
from planner.capacity import analytic_safe_max_num_seqs, usable_blocks
from planner.config import SchedulerConfig
from planner.latency import Latency
from planner.slo import SLO
from planner.workload import Workload

COARSE_POINTS = 40
# Past its knee the throughput curve is flat within noise (S1-exact: 262-266
# completions from max_num_seqs 60 to 300), so "optimal" is the smallest
# max_num_seqs within 1% of the best: more buys preemptions, not throughput.
KNEE_TOLERANCE = 0.01


@dataclass
class SafeLimits:
    """Results; ``table`` has one row per evaluated max_num_seqs (sorted)."""

    mean_prompt: float
    mean_output: float
    mean_request: float  # L: Workload.mean_request_tokens(max_model_len)
    analytic: int
    analytic_at: dict[str, int]  # "p50" ... "max" -> limit at that request length
    length_at: dict[str, float]
    usable_blocks: int
    preemption_threshold: float
    simulated: int | None  # None: even max_num_seqs 1 preempts above the threshold
    throughput_optimal: int
    goodput_optimal: int | None
    slo: SLO
    table: pd.DataFrame

    def row(self, seqs: int | None) -> pd.Series | None:
        if seqs is None:
            return None
        return self.table.loc[self.table.max_num_seqs == seqs].iloc[0]


def analytic_limits(
    wl: Workload, cfg: SchedulerConfig, percentiles: tuple[float, ...]
) -> tuple[int, dict[str, int], dict[str, float]]:
    """Analytic limit at the mean and at each percentile of the request length
    (prompt + output, capped at max_model_len, admitted requests:
    ``Workload.request_tokens``)."""
    mean_len = wl.mean_request_tokens(cfg.max_model_len)
    total = wl.request_tokens(cfg.max_model_len)
    if len(total) == 0:
        total = np.array([cfg.max_model_len])
    at, lengths = {}, {}
    for p in percentiles:
        key = "max" if p == 100 else f"p{p:g}"
        lengths[key] = float(np.percentile(total, p))
        at[key] = analytic_safe_max_num_seqs(
            cfg.num_gpu_blocks, cfg.block_size, lengths[key], cfg.null_block
        )
    return (
        analytic_safe_max_num_seqs(cfg.num_gpu_blocks, cfg.block_size, mean_len, cfg.null_block),
        at,
        lengths,
    )


def _evaluate(
    seqs: list[int],
    wl: Workload,
    cfg: SchedulerConfig,
    lat: Latency,
    slo: SLO,
) -> pd.DataFrame:
    """``summarize`` rows (with the SLO columns when ``slo`` sets any) for
    ``cfg`` at each max_num_seqs in ``seqs``, in one kernel call."""
    configs = [dataclasses.replace(cfg, max_num_seqs=int(s)) for s in seqs]
    df = simulate(configs, wl, lat, check_invariants=False).metrics(slo)
    if "goodput_rps" not in df:
        df["goodput_rps"] = np.nan
    return df


def _passes(df: pd.DataFrame, threshold: float) -> np.ndarray:
    rate = df.preemptions / np.maximum(df.completed, 1)
    return ((rate <= threshold) & ~df.livelocked).to_numpy()


def _knee(df: pd.DataFrame, col: str) -> int:
    """Index of the smallest max_num_seqs within KNEE_TOLERANCE of the column's best."""
    v = df[col].fillna(0).to_numpy()
    return int(np.argmax(v >= (1 - KNEE_TOLERANCE) * v.max()))


def find_safe_limits(
    wl: Workload,
    cfg: SchedulerConfig,
    lat: Latency,
    percentiles: tuple[float, ...] = (50, 90, 99, 100),
    preemption_threshold: float = 0.0,
    slo: SLO | None = None,
    upper: int = 1024,
) -> SafeLimits:
    """Compute all three limits for ``wl`` on ``cfg``'s pool (its max_num_seqs is ignored).

    Raises ValueError for a percentile outside 0..100 or a negative threshold
    (``SLO`` itself refuses a non-positive objective).
    """
    slo = slo if slo is not None else SLO()
    for p in percentiles:
        if not (0 <= p <= 100):
            raise ValueError(f"--percentile must be in 0..100, got {p:g}")
    if not (preemption_threshold >= 0):
        raise ValueError(f"--preemption-threshold must be >= 0, got {preemption_threshold}")
    upper = max(1, min(upper, wl.num_requests))
    analytic, at, lengths = analytic_limits(wl, cfg, percentiles)
    coarse = sorted({int(round(x)) for x in np.geomspace(1, upper, COARSE_POINTS)} | {analytic})
    coarse = [s for s in coarse if 1 <= s <= upper]
    df = _evaluate(coarse, wl, cfg, lat, slo)
    ok = _passes(df, preemption_threshold)
    first_bad = int(np.argmin(ok)) if not ok.all() else len(ok)
    if 0 < first_bad < len(ok):
        lo, hi = coarse[first_bad - 1], coarse[first_bad]
        fine = list(range(lo + 1, hi))
        if fine:
            df = pd.concat([df, _evaluate(fine, wl, cfg, lat, slo)])
    # Refine where each curve first comes within KNEE_TOLERANCE of its maximum.
    cols = ["throughput_rps"]
    if slo.given():
        cols.append("goodput_rps")
    for col in cols:
        df = df.sort_values("max_num_seqs").reset_index(drop=True)
        j = _knee(df, col)
        if j > 0:
            lo, hi = int(df.max_num_seqs[j - 1]), int(df.max_num_seqs[j])
            fine = [x for x in range(lo + 1, hi) if x not in set(df.max_num_seqs)]
            if fine:
                df = pd.concat([df, _evaluate(fine, wl, cfg, lat, slo)])
    df = df.sort_values("max_num_seqs").reset_index(drop=True)
    ok = _passes(df, preemption_threshold)
    n_ok = int(np.argmin(ok)) if not ok.all() else len(ok)
    simulated = int(df.max_num_seqs[n_ok - 1]) if n_ok > 0 else None
    best = int(df.max_num_seqs[_knee(df, "throughput_rps")])
    good = None
    if len(cols) == 2:
        good = int(df.max_num_seqs[_knee(df, "goodput_rps")])
    return SafeLimits(
        mean_prompt=float(wl.prompt_tokens.mean()),
        mean_output=float(wl.output_tokens.mean()),
        mean_request=wl.mean_request_tokens(cfg.max_model_len),
        analytic=analytic,
        analytic_at=at,
        length_at=lengths,
        usable_blocks=usable_blocks(cfg.num_gpu_blocks, cfg.null_block),
        preemption_threshold=preemption_threshold,
        simulated=simulated,
        throughput_optimal=best,
        goodput_optimal=good,
        slo=slo,
        table=df,
    )


def _overload_note(row: pd.Series, table: pd.DataFrame) -> str:
    """'' unless ``row`` is overloaded (``metrics.overload``); then what is offered,
    what is served, and the smallest max_num_seqs that keeps up, if any does."""
    if not row.overloaded:
        return ""
    text = (
        f" It is overloaded: {row.offered_rps:.3f} req/s offered, {row.served_rps:.3f} "
        "started per second over the arrival window"
    )
    keeps_up = table.max_num_seqs[~table.overloaded.astype(bool)]
    if len(keeps_up):
        return text + f"; max_num_seqs {int(keeps_up.min())} is the smallest that keeps up."
    return (
        text + "; no max_num_seqs on this pool keeps up: only more capacity (blocks, GPUs, "
        "replicas) or less traffic does."
    )


def recommendation(s: SafeLimits) -> str:
    """One paragraph: the safe choice, the fastest, and what the difference costs."""
    if s.table.completed.max() == 0:
        return (
            "No max_num_seqs completes any request on this pool within the horizon: "
            "the pool or the horizon is too small for this workload."
        )
    if s.simulated is None:
        return (
            "Even max_num_seqs 1 preempts above the threshold: a single request does "
            "not fit this pool; check it with plan check."
        )
    safe = s.simulated
    a, b = s.row(safe), s.row(s.throughput_optimal)
    assert a is not None and b is not None
    text = (
        f"Safe: max_num_seqs {safe} ({a.preemptions:.0f} preemptions, "
        f"{a.throughput_rps:.3f} req/s, TTFT p99 {a.ttft_s_p99:.2f} s, "
        f"TPOT p99 {a.tpot_s_p99 * 1e3:.1f} ms)."
    )
    if s.slo.given() and not a.meets_slo:
        text += " Its p99 latency misses the SLOs you gave."
    text += _overload_note(a, s.table)
    if s.throughput_optimal < safe:
        text += (
            f" It is past the throughput knee: max_num_seqs {s.throughput_optimal} already "
            "reaches within 1% of the best completions/s, and going higher buys nothing."
        )
    elif s.throughput_optimal > safe:
        gain = (b.throughput_rps / a.throughput_rps - 1) * 100 if a.throughput_rps > 0 else np.inf
        text += (
            f" Fastest: max_num_seqs {s.throughput_optimal} ({b.throughput_rps:.3f} req/s, "
            f"{gain:+.0f}%), at the cost of {b.preemptions:.0f} preemptions "
            f"({b.preempted_requests:.0f} requests preempted), TTFT p99 {b.ttft_s_p99:.2f} s "
            f"and TPOT p99 {b.tpot_s_p99 * 1e3:.1f} ms ({b.outcome})."
        )
    else:
        text += " It is also the fastest."
    if s.goodput_optimal is not None:
        g = s.row(s.goodput_optimal)
        assert g is not None
        text += (
            f" Within the SLOs, max_num_seqs {s.goodput_optimal} serves the most: "
            f"{g.goodput_rps:.3f} req/s."
        )
        if s.goodput_optimal != safe:
            text += _overload_note(g, s.table)
    return text
