"""``plan safe-limit``: the largest KV-safe max_num_seqs, three ways.

1. Analytic (``SchedulerConfig.kv_safe_max_num_seqs``): ``floor((N-1) /
   cdiv(L, bs))`` with L the mean prompt + mean output, and L at percentiles
   of prompt + output, each plus the tokens speculative decoding holds past
   a request's length (its drafts and lookahead slots), per KV cache group.
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
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from planner import metrics
from planner.api import simulate
from planner.capacity import usable_blocks
from planner.config import SchedulerConfig
from planner.latency.step_time import Latency
from planner.metrics import front_end_failures, front_end_text
from planner.slo import FIELDS, NAMES, SLO, seconds_text
from planner.text import count
from planner.workload.arrays import Workload

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
    # tokens each request holds past its length (drafts, lookahead slots:
    # ``SchedulerConfig.kv_slack_tokens``), and whether a sliding window or
    # several KV cache groups shape the limit
    kv_slack: int
    simulated: int | None  # None: even max_num_seqs 1 preempts above the threshold
    throughput_optimal: int
    goodput_optimal: int | None
    slo: SLO
    table: pd.DataFrame
    search_limit: int = 1024  # the largest max_num_seqs evaluated (min(upper, requests))
    # When no value qualifies (``qualifies``): the highest rate scale at which the
    # closest value does (``planner.maxrate.search``, run to completion), and that value.
    closest: int | None = None
    closest_rate_scale: float = float("nan")
    closest_rate_limit: str = ""

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
        at[key] = cfg.kv_safe_max_num_seqs(lengths[key])
    return cfg.kv_safe_max_num_seqs(mean_len), at, lengths


Pool = Callable[[int], int]  # max_num_seqs -> num_gpu_blocks vLLM's profile sizes at it


def _at(cfg: SchedulerConfig, seqs: int, pool: Pool | None) -> SchedulerConfig:
    """``cfg`` at max_num_seqs ``seqs``, on the pool ``pool`` sizes at it (None:
    ``cfg``'s own, a given pool)."""
    blocks = cfg.num_gpu_blocks if pool is None else pool(seqs)
    return dataclasses.replace(cfg, max_num_seqs=int(seqs), num_gpu_blocks=blocks)


def _evaluate(
    seqs: list[int],
    wl: Workload,
    cfg: SchedulerConfig,
    lat: Latency,
    slo: SLO,
    pool: Pool | None = None,
) -> pd.DataFrame:
    """``summarize`` rows (with the SLO columns when ``slo`` sets any) for
    ``cfg`` at each max_num_seqs in ``seqs`` (each on its own pool when
    ``pool`` sizes it), in one kernel call."""
    configs = [_at(cfg, int(s), pool) for s in seqs]
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


SEARCH_CEILING = 1024  # vLLM 0.33's default max_num_seqs on an H100-class GPU


def search_upper(wl: Workload, max_num_batched_tokens: int, ceiling: int = SEARCH_CEILING) -> int:
    """The largest max_num_seqs the search evaluates: ``ceiling``, at most the
    workload's request count (more slots than requests change nothing) and
    max_num_batched_tokens (vLLM 0.33 refuses a larger max_num_seqs:
    ``SchedulerConfig.verify_max_model_len``)."""
    return max(1, min(ceiling, wl.num_requests, max_num_batched_tokens))


def find_safe_limits(
    wl: Workload,
    cfg: SchedulerConfig,
    lat: Latency,
    percentiles: tuple[float, ...] = (50, 90, 99, 100),
    preemption_threshold: float = 0.0,
    slo: SLO | None = None,
    upper: int | None = None,
    pool: Pool | None = None,
) -> SafeLimits:
    """Compute all three limits for ``wl`` on ``cfg``'s pool (its max_num_seqs is ignored).

    ``pool``: for a pool sized from a model and GPU, the num_gpu_blocks vLLM's
    start-up profile gives at each max_num_seqs (``resolve.num_gpu_blocks``):
    each evaluated value runs on its own pool, and the table's
    ``num_gpu_blocks`` column records it; the analytic limits use ``cfg``'s
    pool (the caller sizes it at the largest value searched: the smallest pool).

    Raises ValueError for a percentile outside 0..100 or a negative threshold
    (``SLO`` itself refuses a non-positive objective).
    """
    slo = slo if slo is not None else SLO()
    for p in percentiles:
        if not (0 <= p <= 100):
            raise ValueError(f"--percentile must be in 0..100, got {p:g}")
    if not (preemption_threshold >= 0):
        raise ValueError(f"--preemption-threshold must be >= 0, got {preemption_threshold}")
    mnbt = cfg.max_num_batched_tokens
    upper = search_upper(wl, mnbt, SEARCH_CEILING if upper is None else upper)
    analytic, at, lengths = analytic_limits(wl, cfg, percentiles)
    coarse = sorted({int(round(x)) for x in np.geomspace(1, upper, COARSE_POINTS)} | {analytic})
    coarse = [s for s in coarse if 1 <= s <= upper]
    df = _evaluate(coarse, wl, cfg, lat, slo, pool)
    ok = _passes(df, preemption_threshold)
    first_bad = int(np.argmin(ok)) if not ok.all() else len(ok)
    if 0 < first_bad < len(ok):
        lo, hi = coarse[first_bad - 1], coarse[first_bad]
        fine = list(range(lo + 1, hi))
        if fine:
            df = pd.concat([df, _evaluate(fine, wl, cfg, lat, slo, pool)])
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
                df = pd.concat([df, _evaluate(fine, wl, cfg, lat, slo, pool)])
    df = df.sort_values("max_num_seqs").reset_index(drop=True)
    ok = _passes(df, preemption_threshold)
    n_ok = int(np.argmin(ok)) if not ok.all() else len(ok)
    simulated = int(df.max_num_seqs[n_ok - 1]) if n_ok > 0 else None
    best = int(df.max_num_seqs[_knee(df, "throughput_rps")])
    good = None
    if len(cols) == 2:
        good = int(df.max_num_seqs[_knee(df, "goodput_rps")])
    out = SafeLimits(
        mean_prompt=float(wl.prompt_tokens.mean()),
        mean_output=float(wl.output_tokens.mean()),
        mean_request=wl.mean_request_tokens(cfg.max_model_len),
        analytic=analytic,
        analytic_at=at,
        length_at=lengths,
        usable_blocks=usable_blocks(cfg.num_gpu_blocks, cfg.null_block),
        preemption_threshold=preemption_threshold,
        kv_slack=cfg.kv_slack_tokens,
        simulated=simulated,
        throughput_optimal=best,
        goodput_optimal=good,
        slo=slo,
        table=df,
        search_limit=upper,
    )
    # Rejections fail at every rate and max_num_seqs (``recommend`` says so): no search.
    if not qualifies(out).any() and df.completed.max() > 0 and front_end_failures(df).min() == 0:
        _closest_rate(out, wl, cfg, lat, pool)
    return out


def _closest_rate(
    s: SafeLimits, wl: Workload, cfg: SchedulerConfig, lat: Latency, pool: Pool | None = None
) -> None:
    """Nothing qualifies: find the value that comes closest (the most started
    per second when all are overloaded, else the smallest p99 / SLO ratio among
    those that are not overloaded, or the most started without SLOs) and the
    highest rate scale at which it qualifies
    (``maxrate.search_max_rate``, below 1). Sets ``s.closest*``; an offline
    workload (no rate to scale) leaves them unset."""
    from planner.maxrate.search import SearchRange, search_max_rate

    t = s.table
    alive = (t.completed > 0) & ~t.livelocked & ~t.step_limit_hit
    calm = alive & ~t.overloaded.astype(bool)  # keeps up, or a burst too short to judge
    sub = t[calm] if calm.any() else t[alive]
    by_slo = calm.any() and "slo_margin" in t
    col, pick = ("slo_margin", "idxmin") if by_slo else ("served_rps", "idxmax")
    seqs = int(sub.loc[getattr(sub[col], pick)()].max_num_seqs)
    try:
        found = search_max_rate([_at(cfg, seqs, pool)], wl, lat, s.slo, SearchRange(hi=1.0))
    except ValueError:  # every request arrives at once: no rate to scale
        return
    s.closest = seqs
    s.closest_rate_scale = float(found.table.max_rate_scale[0])
    s.closest_rate_limit = str(found.table.max_rate_limit[0])


def simulated_is_bound(s: SafeLimits) -> bool:
    """True when the simulation-verified limit is the search limit: every value
    tried passed, so the true limit is at least that (a bound, not a finding)."""
    return s.simulated is not None and s.simulated >= s.search_limit


def search_limit_text(s: SafeLimits) -> str:
    """Why the search stopped where it did, for '≥ N (search limit ...)'."""
    why = "the workload's request count" if s.search_limit < 1024 else "the search cap"
    return f"search limit: {why}"


def qualifies(s: SafeLimits) -> np.ndarray:
    """(rows,) bool over ``s.table``: max_num_seqs values that may be
    recommended, ``maxrate.passes``: something completed, no livelock or step
    limit, not overloaded (``metrics.overload``), no request rejected or cut
    short by the front end (it fails whatever max_num_seqs is) and, with SLOs,
    every SLO met (``meets_slo``: unserved requests count as misses)."""
    from planner.maxrate.search import passes

    return passes(s.table, s.slo)


@dataclass
class Recommendation:
    """One answer: ``max_num_seqs`` (None: nothing qualifies), the reason in
    words, and, when nothing qualifies, ``load_fraction``: the share of the
    accepted load that at best keeps up (served / accepted req/s of the best
    max_num_seqs, ``1 / load_ratio``, an upper bound on the load that can be
    served; requests the front end rejects are no load: NaN when the failure
    is an SLO, not overload; when nearly every request started, that ratio
    says nothing, and it is the highest-rate search's scale instead, NaN
    without one)."""

    max_num_seqs: int | None
    reason: str
    text: str
    load_fraction: float = float("nan")


def started_text(row: pd.Series) -> str:
    """'S of O req/s offered started over the arrival window', with the rate
    the front end rejected (``front_end.REJECT_RULE``) when it rejected any:
    those never start, whatever the capacity (``metrics.overload``); on an
    overloaded row, how many more requests were in the system at the end than
    after the fill (``in_system_growth``), since a server that starts every
    request can still fall behind by preempting them."""
    if metrics.is_batch(row):
        return "every request sent at once: no arrival rate to keep up with"
    text = f"{row.served_rps:.3f} of {row.offered_rps:.3f} req/s offered started"
    refused = row.offered_rps - row.accepted_rps
    if refused > 0:
        text += f" ({refused:.3f} req/s rejected by the front end)"
    text += " over the arrival window"
    grew = int(row.get("in_system_growth", 0))
    if bool(row.get("overloaded", False)) and grew > 0:
        text += (
            ", and at its end the requests in the system (arrived, not finished) exceeded what "
            f"the run's own lifetimes explain by {grew} more than once the running set had filled"
        )
    return text


def latency_text(row: pd.Series, slo: SLO) -> str:
    """TTFT, TPOT, ITL and E2E p99 of ``row`` (ITL only when ``slo`` sets an
    ITL SLO), a lower bound printed as '≥ X'."""
    parts = []
    for key in FIELDS:
        if key == "itl_s" and slo.itl_s is None:
            continue
        name = NAMES[key]
        v = row[f"{key}_p99"]
        if isinstance(v, float) and np.isnan(v):
            continue
        bound = "≥ " if bool(row.get(f"{key}_p99_is_lower_bound", False)) else ""
        parts.append(f"{name} p99 {bound}{seconds_text(float(v))}")
    return ", ".join(parts) or "no latency (no request served)"


def recommend(s: SafeLimits) -> Recommendation:
    """The one recommended max_num_seqs and why (``qualifies``): among the
    values that keep up with the offered load and meet the SLOs, those within
    the preemption threshold if any, the smallest within KNEE_TOLERANCE of the
    best goodput (SLOs given) or completions per second. When none qualifies,
    no value is recommended, and the text says what fails and by how much the
    load must fall or the capacity grow."""
    t = s.table
    if front_end_failures(t).min() > 0:  # the same at every max_num_seqs
        what = front_end_text(int(t.rejected.min()), int(t.cut.min()), int(t.max_model_len.iloc[0]))
        text = (
            f"Nothing recommended: at every max_num_seqs {what}, and they fail whatever the "
            "scheduler does: raise --max-model-len."
        )
        return Recommendation(None, "rejects requests", text)
    if t.completed.max() == 0:
        why = (
            "a request it can never finish (a livelock: the pool is too small for the longest "
            "request)"
            if t.livelocked.all()
            else "the pool or the horizon is too small for this workload"
            if "horizon_s" in t and np.isfinite(t.horizon_s.astype(float)).any()
            else "the pool is too small for this workload"
        )
        text = f"No max_num_seqs completes any request on this pool: {why}. Nothing recommended."
        return Recommendation(None, "nothing completes", text)
    ok = qualifies(s)
    crit = (
        "no preemption"
        if s.preemption_threshold == 0
        else f"at most {s.preemption_threshold:g} preemptions per completed request"
    )
    slo_part = f", meet the SLOs ({s.slo.describe()})" if s.slo.given() else ""
    if ok.any():
        kv_safe = ok & _passes(t, s.preemption_threshold)
        pool = kv_safe if kv_safe.any() else ok
        col = "goodput_rps" if s.slo.given() else "throughput_rps"
        sub = t[pool].reset_index(drop=True)
        row = sub.iloc[_knee(sub, col)]
        seqs = int(row.max_num_seqs)
        what = "goodput" if s.slo.given() else "completions per second"
        pace = "keep up with the offered load"
        if metrics.batches(t).all():
            pace = "serve this batch sent at once"
        reason = (
            f"the smallest max_num_seqs within 1% of the best {what} among those that {pace}"
            f"{slo_part}"
            + (f" and have {crit}" if kv_safe.any() else f"; none of those has {crit}")
        )
        text = (
            f"Recommended: max_num_seqs {seqs}, {reason}. At it: "
            f"{row.throughput_rps:.3f} req/s completed"
            + (f", goodput {row.goodput_rps:.3f} req/s" if s.slo.given() else "")
            + f", {latency_text(row, s.slo)}, {row.preemptions:.0f} preemptions, "
            f"{metrics.pace_text(row)} ({started_text(row)})."
        )
        if seqs >= s.search_limit:
            text += (
                f" It is the largest value tried ({search_limit_text(s)}): larger ones may "
                "do better."
            )
        return Recommendation(seqs, reason, text)
    return _nothing_qualifies(s)


# Started within this share of the accepted rate: the rate started says nothing
# of how far off the load is (the first-token rules resolve about 5-7%,
# metrics.OVERLOAD_WINDOW_SHARE; an overload they pass is the in-system rule's,
# whose requests all start and then fall behind).
STARTED_RESOLUTION = 0.05


def _nothing_qualifies(s: SafeLimits) -> Recommendation:
    """Nothing recommended: say what fails at every max_num_seqs, and how far off it is."""
    from planner.maxrate.search import too_short

    t = s.table
    alive = (t.completed > 0) & ~t.livelocked & ~t.step_limit_hit
    keeps_up = alive & metrics.keeps_up(t)
    span = f"from 1 to {s.search_limit:,}"
    calm = alive & ~t.overloaded.astype(bool)  # keeps up, or a burst too short to judge
    short = too_short(t, s.slo)  # only the workload's length stands between it and a pass
    if not keeps_up.any() and short.any():
        text = (
            f"Nothing recommended: whether any max_num_seqs {span} keeps up is not judged: "
            + metrics.burst_text(t[short].iloc[0])
            + "."
        )
        return Recommendation(None, "not judged", text)
    stuck = ~alive & ~t.overloaded.astype(bool)  # neither overloaded nor serving
    if not calm.any() and stuck.any():
        return _stuck_or_overloaded(t, stuck, span)
    if not calm.any():
        best = t[alive].loc[t[alive].served_rps.idxmax()]
        frac = float(1 / best.load_ratio)  # no rejections here (``recommend``)
        head = (
            f"Nothing recommended: no max_num_seqs {span} keeps up with the offered load "
            f"({best.offered_rps:.3f} req/s): every one is overloaded. "
        )
        if frac >= 1 - STARTED_RESOLUTION:  # e.g. the in-system rule: everything started
            frac = s.closest_rate_scale if s.closest is not None else math.nan
            text = head + (
                f"Even the best starts nearly every request ({best.served_rps:.3f} req/s, "
                f"max_num_seqs {int(best.max_num_seqs)}), yet falls behind (requests waiting or "
                "in the system grew), so the rate started bounds nothing; no scheduler "
                "setting fixes overload."
            )
        else:
            text = head + (
                f"The most any starts is {best.served_rps:.3f} req/s (max_num_seqs "
                f"{int(best.max_num_seqs)}), so the load would have to fall by about "
                f"{(1 - frac) * 100:.0f}% or the capacity grow about {1 / frac:.2f}x (blocks, "
                "GPUs, replicas; an estimate from the rate started while overloaded); no "
                "scheduler setting fixes overload."
            )
        text += _rate_text(s)
        return Recommendation(None, "overloaded", text, frac)
    sub = t[keeps_up] if keeps_up.any() else t[calm]
    best = sub.loc[sub.slo_margin.idxmin()]
    how = "keeps up" if keeps_up.any() else "is not overloaded in this burst"
    text = (
        f"Nothing recommended: no max_num_seqs {span} keeps up and meets the SLOs "
        f"({s.slo.describe()}). Closest: "
        f"max_num_seqs {int(best.max_num_seqs)} {how}, with {latency_text(best, s.slo)}: "
        f"{'at least ' if _any_bound(best) else ''}{best.slo_margin:.2f}x its tightest SLO."
        + _rate_text(s)
    )
    return Recommendation(None, "misses the SLOs", text, s.closest_rate_scale)


def _stuck_or_overloaded(t: pd.DataFrame, stuck: pd.Series, span: str) -> Recommendation:
    """Nothing recommended when every max_num_seqs is overloaded or, though not
    overloaded, completed nothing, livelocked or hit --max-steps: say which,
    without calling the latter overloaded."""
    why = []
    if (stuck & (t.completed == 0) & ~t.livelocked & ~t.step_limit_hit).any():
        why.append("complete no request before the run ends (a --horizon shorter than a request)")
    if (stuck & t.livelocked).any():
        why.append("livelock")
    if (stuck & t.step_limit_hit).any():
        why.append("hit --max-steps")
    over = int(t.overloaded.astype(bool).sum())
    seqs = [f"{v:,}" for v in sorted(t[stuck].max_num_seqs.astype(int))]
    which = "max_num_seqs " + ", ".join(seqs if len(seqs) <= 4 else [*seqs[:2], "...", seqs[-1]])
    text = (
        f"Nothing recommended: no max_num_seqs {span} keeps up: {count(over, 'value')} "
        f"{'is' if over == 1 else 'are'} overloaded, and the {count(len(seqs), 'other')} "
        f"({which}) {' or '.join(why)}, which shows nothing about the rate sustained. "
        "Run them longer (a longer --horizon, or none)."
    )
    return Recommendation(None, "nothing completes", text)


def _rate_text(s: SafeLimits) -> str:
    """What the highest-rate search of the closest value found (``_closest_rate``)."""
    if s.closest is None:
        return ""
    cond = "meets the SLOs and keeps up" if s.slo.given() else "keeps up"
    if s.closest_rate_limit == "below_search_min":
        return (
            f" Even at 0.001x the offered rate, max_num_seqs {s.closest} never {cond} "
            "(run to completion): less load alone does not help; the SLOs need faster steps "
            "(hardware, model) or a larger pool."
        )
    r = s.closest_rate_scale
    if s.closest_rate_limit == "workload_too_short":
        return (
            f" Run to completion, max_num_seqs {s.closest} {cond} up to at least {r:.3g}x "
            "the offered rate (plan max-rate; the workload is too short to judge a higher "
            f"one): the load must fall by at most {(1 - r) * 100:.0f}%."
        )
    return (
        f" Run to completion, max_num_seqs {s.closest} {cond} up to {r:.3g}x the offered "
        f"rate (plan max-rate): the load must fall by {(1 - r) * 100:.0f}% or the capacity "
        f"grow {1 / r:.2f}x (replicas)."
    )


def _any_bound(row: pd.Series) -> bool:
    return any(bool(row.get(f"{k}_p99_is_lower_bound", False)) for k in FIELDS)


def recommendation(s: SafeLimits) -> str:
    """One paragraph: the one recommended max_num_seqs (``recommend``) and what
    it gives, or why nothing is recommended."""
    return recommend(s).text
