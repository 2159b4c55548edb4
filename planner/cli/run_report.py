"""What ``plan run`` prints: its summary table, verdict lines, per-replica
table and stuck requests (``planner.cli.run`` calls these; nothing here simulates)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from planner import capacity
from planner.answers.safelimit import started_text
from planner.config import SchedulerConfig
from planner.latency.step_time import Latency
from planner.metrics import (
    LIVELOCKED,
    OK,
    burst_text,
    front_end_failures,
    front_end_text,
    is_batch,
    open_bounds_text,
    slo_open_bounds,
)
from planner.slo import SLO, SLO_PERCENTILE, seconds_text
from planner.text import count
from planner.workload.arrays import Workload
from planner.workload.front_end import REJECT_RULE

if TYPE_CHECKING:
    import pandas as pd

STUCK_SHOWN = 20  # stuck request ids printed in the table output (--json has all)


SUMMARY_ROWS = (
    ("completed", "{:.0f}"),
    ("rejected", "{:.0f}"),
    ("cut", "{:.0f}"),
    ("output_tokens_asked", "{:.0f}"),
    ("output_tokens_served", "{:.0f}"),
    ("running_end", "{:.0f}"),
    ("waiting_end", "{:.0f}"),
    ("unserved", "{:.0f}"),
    ("unfinished", "{:.0f}"),
    ("preemptions", "{:.0f}"),
    ("preempted_requests", "{:.0f}"),
    ("overloaded", "{}"),
    ("overload_judged", "{}"),
    ("offered_rps", "{:.3f}"),
    ("accepted_rps", "{:.3f}"),
    ("served_rps", "{:.3f}"),
    ("queue_delay_growth_s", "{:.3f}"),
    ("in_system_growth", "{:.0f}"),
    ("throughput_rps", "{:.3f}"),
    ("output_tps", "{:.1f}"),
    ("first_completion_s", "{:.3f}"),
    ("ttft_s_mean", "{:.3f}"),
    ("ttft_s_p50", "{:.3f}"),
    ("ttft_s_p90", "{:.3f}"),
    ("ttft_s_p99", "{:.3f}"),
    ("tpot_s_mean", "{:.4f}"),
    ("tpot_s_p50", "{:.4f}"),
    ("tpot_s_p90", "{:.4f}"),
    ("tpot_s_p99", "{:.4f}"),
    ("e2e_s_mean", "{:.3f}"),
    ("e2e_s_p50", "{:.3f}"),
    ("e2e_s_p90", "{:.3f}"),
    ("e2e_s_p99", "{:.3f}"),
    ("queue_delay_s_p50", "{:.3f}"),
    ("queue_delay_s_p99", "{:.3f}"),
    ("itl_s_p50", "{:.4f}"),
    ("itl_s_p90", "{:.4f}"),
    ("itl_s_p99", "{:.4f}"),
    ("max_token_stall_s", "{:.4f}"),
    ("peak_kv_blocks", "{:.0f}"),
    ("peak_kv_usage", "{:.3f}"),
    ("mean_kv_usage", "{:.3f}"),
    ("steps", "{:.0f}"),
    ("zero_token_steps", "{:.0f}"),
    ("waste_share", "{:.3f}"),
    ("sim_end_s", "{:.3f}"),
    ("outcome", "{}"),
)


# Per-replica columns ``plan run`` shows for a fleet (``SimResult.replica_metrics``).
REPLICA_COLUMNS = (
    "replica", "requests_sent", "completed", "preemptions", "ttft_s_p99", "tpot_s_p99",
    "peak_kv_usage", "mean_kv_usage", "outcome",
)  # fmt: skip


def per_replica(res: object, slo: SLO) -> pd.DataFrame:
    """``REPLICA_COLUMNS`` of each replica of the run's one config."""
    return res.replica_metrics(slo)[list(REPLICA_COLUMNS)]  # type: ignore[attr-defined]


REPLICAS_SHOWN = 32  # rows of plan run's per-replica table; --json has all
REPLICA_HEADERS = (
    "replica", "sent", "completed", "preemptions", "TTFT p99 s", "TPOT p99 s", "peak KV",
    "mean KV", "outcome",
)  # fmt: skip


def print_replicas(df: pd.DataFrame) -> None:
    """The per-replica table under ``plan run``'s fleet summary."""
    table = Table(*REPLICA_HEADERS, box=None)
    for rec in df.head(REPLICAS_SHOWN).itertuples(index=False):
        table.add_row(*(_cell(v) for v in rec))
    console = Console(markup=False, width=120)
    console.print(table)
    if len(df) > REPLICAS_SHOWN:
        console.print(f"... {len(df) - REPLICAS_SHOWN:,} more replicas (--json lists all)")


def _cell(v: object) -> str:
    """A per-replica table cell: floats to 3 decimals, '-' for none (NaN)."""
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:.3f}"
    return str(v)


def ids_text(ids: list[int]) -> str:
    """The first STUCK_SHOWN ids, comma-separated, and how many more there are."""
    text = ", ".join(str(i) for i in ids[:STUCK_SHOWN])
    if len(ids) > STUCK_SHOWN:
        text += f", ... ({len(ids) - STUCK_SHOWN:,} more; --json lists all)"
    return text


def print_stuck(
    outcome: str, stuck: list[int], preempted: list[int], horizon_s: float | None = None
) -> None:
    """One line naming the requests that were waiting or running and never
    finished; ``horizon_s``: the --horizon that ended the run (None: it ran
    to its end), whose requests only had not finished by then."""
    pre = f"; preempted among them: {ids_text(preempted)}" if preempted else ""
    ended = "never finished"
    if horizon_s is not None:
        ended = f"had not finished when --horizon {horizon_s:g} s ended the run"
    why = ""
    if horizon_s is not None and outcome == "starved":
        why = (
            "; nothing completed within the horizon, which says nothing about the server when "
            "the horizon is shorter than a request's run: run longer, or without --horizon"
        )
    Console(markup=False).print(
        f"{outcome}: {count(len(stuck), 'request')} entered the scheduler and {ended} "
        f"(request ids, 0-based in arrival order): {ids_text(stuck)}{pre}{why}",
        soft_wrap=True,
    )


def print_gap_fix(cfg: SchedulerConfig) -> None:
    """Under a livelock on a pool with the null-block gap (``capacity.livelock_gap``),
    the fix ``plan check`` gives for it."""
    n, bs, mml = cfg.num_gpu_blocks, cfg.block_size, cfg.max_model_len
    gap = capacity.livelock_gap(n, bs, mml, cfg.null_block)
    if gap is None or not cfg.null_block or cfg.sliding_window:  # the gap is full attention's
        return
    Console(markup=False).print(
        f"the pool is short for max_model_len: requests of {gap[0]:,}-{gap[1]:,} tokens can "
        f"never finish; fix: --num-gpu-blocks {capacity.min_safe_num_gpu_blocks(mml, bs):,} "
        f"or --max-model-len {capacity.max_safe_model_len(n, bs):,} (plan check explains)",
        soft_wrap=True,
    )


def outcome_text(row: object) -> str:
    """The outcome row of ``plan run``'s table, which cannot contradict the
    overload verdict: the outcome class (``metrics.outcome``, about preemption
    and progress) with ", overloaded" when the queue grew
    (``metrics.overloaded``); an overloaded run without preemption trouble
    reads "overloaded (no preemption)", never "ok"."""
    cls, over = str(row["outcome"]), bool(row["overloaded"])  # type: ignore[index]
    if not over:
        return cls
    return "overloaded (no preemption)" if cls == OK else f"{cls}, overloaded"


def value_text(row: object, key: str, fmt: str) -> str:
    """``row[key]`` formatted for people: '-' for NaN, and "≥ X" when the row
    says the value is only a lower bound (``{key}_is_lower_bound``: requests not
    served by the end of the run count at the time they had waited)."""
    v = row[key]  # type: ignore[index]
    if isinstance(v, float) and math.isnan(v):
        return "-"
    bound = f"{key}_is_lower_bound"
    prefix = "≥ " if bound in row and bool(row[bound]) else ""  # type: ignore[operator,index]
    return prefix + fmt.format(v)


def print_run(
    wl: Workload,
    blocks: int,
    source: str,
    lat: Latency,
    row: object,
    wall: float,
    slo: SLO,
    cfg: SchedulerConfig | None = None,
    more: str = "more requests (a longer workload)",
) -> None:
    """The human-readable summary table of ``plan run``; ``source`` says where
    num_gpu_blocks came from; ``cfg`` the config (its attention is named
    when it is not full attention); with an SLO, its verdict
    (``metrics.slo_columns``); ``more`` how to offer more requests when the run
    is a burst (``metrics.burst_text``)."""
    console = Console(markup=False)
    console.print(f"plan run: {wl.name}, {count(wl.num_requests, 'request')}", soft_wrap=True)
    console.print(f"num_gpu_blocks {blocks:,} ({source})", soft_wrap=True)
    if cfg is not None and (line := cfg.attention_line()):
        console.print(line, soft_wrap=True)
    console.print(f"step time: {lat.describe()}", soft_wrap=True)
    if cfg is not None and cfg.speculation is not None:
        console.print(cfg.speculation.line(), soft_wrap=True)
    if row["compat"] == "blis":  # type: ignore[index]
        defect = ", with its full-hit defect" if row["blis_full_hit_defect"] else ""  # type: ignore[index]
        console.print(
            f"compat blis: BLIS b563c440's scheduler rules{defect} (restart preemption, no null "
            "block, no whole-prompt gate, prefix caching; README: BLIS compatibility)",
            soft_wrap=True,
        )
    conc = int(row["max_concurrency"])  # type: ignore[index]
    think = float(row["think_time_s"])  # type: ignore[index]
    reps = int(row["replicas"])  # type: ignore[index]
    if reps > 1:
        console.print(
            f"fleet: {reps} replicas behind a {row['router']} router, each with this pool and "  # type: ignore[index]
            f"these flags; busiest replica / mean: requests "
            f"{row['replica_request_imbalance']:.2f}, busy time "  # type: ignore[index]
            f"{row['replica_busy_imbalance']:.2f}",  # type: ignore[index]
            soft_wrap=True,
        )
    if conc > 0:
        held = bool(row["concurrency_bound"])  # type: ignore[index]
        console.print(
            f"closed loop: at most {conc:,} in the system, each request sent when one ends"
            + (f" plus {think:g} s think time" if think > 0 else "")
            + (
                "; the cap held requests back, so the clients set the rate (overload does "
                "not apply)"
                if held
                else "; the cap never held a request back (overload is judged as open loop)"
            ),
            soft_wrap=True,
        )
    elif wl.session is not None:
        console.print(
            f"sessions: each later turn sent {think:g} s after the previous answer", soft_wrap=True
        )
    table = Table(show_header=False)
    for key, fmt in SUMMARY_ROWS:
        text = outcome_text(row) if key == "outcome" else value_text(row, key, fmt)
        table.add_row(key, text)
    if slo.given():
        table.add_row("goodput_rps", value_text(row, "goodput_rps", "{:.3f}"))
        table.add_row("meets_slo", str(bool(row["meets_slo"])))  # type: ignore[index]
    for key, text in _cache_rows(row):
        table.add_row(key, text)
    table.add_row("wall_s", f"{wall:.2f}")
    console.print(table)
    if any(bool(row[f"{k}_is_lower_bound"]) for k in LATENCY_STATS):  # type: ignore[index]
        console.print(
            "≥ : a lower bound: requests that arrived and had no first token (TTFT), "
            "were never scheduled (queue delay) or had not finished (TPOT, E2E) by the end "
            "of the run count at the time they had waited; ITL: so many token gaps were "
            "never produced by the end (they count as +inf) that the percentile is +inf, "
            "shown with those gaps at their lower bounds",
            soft_wrap=True,
        )
    if int(row["never_sent"]) > 0:  # type: ignore[index]
        why = (
            f"an earlier turn of its session was rejected ({REJECT_RULE}), or the run ended first"
            if wl.session is not None
            else "the run ended while its client waited for a free slot"
        )
        unsent = int(row["never_sent"])  # type: ignore[index]
        console.print(
            f"note: {count(unsent, 'request')} {'was' if unsent == 1 else 'were'} never sent: "
            f"{why}; {'it counts' if unsent == 1 else 'they count'} in no latency",
            soft_wrap=True,
        )
    if _front_end_failed(row):
        console.print(f"note: {rejection_text(row)}", soft_wrap=True)
    if bool(row.get("ended_by_horizon", False)):  # type: ignore[attr-defined]
        console.print(
            f"note: the horizon ended the run at {row['sim_end_s']:.3f} s, before the last "  # type: ignore[index]
            f"arrival: overload is judged on the {row['overload_window_s']:.3f} s of arrivals "  # type: ignore[index]
            "it covered, and the rates are theirs (a request due later had no chance to start)",
            soft_wrap=True,
        )
    if slo.given():
        console.print(slo_verdict(row, slo), soft_wrap=True)
    if row["overloaded"]:
        rates = f"verdict: OVERLOADED - {started_text(row)} (it fell behind through the window)"
        if row["outcome"] == LIVELOCKED:  # the livelock, not the traffic, stopped service
            why = (
                f"; the run stopped at {row['sim_end_s']:.3f} s on a proven livelock (below), "
                "after which nothing finishes whatever the traffic: remove the livelock first"
            )
        else:  # the outcome class speaks of preemption only
            if row["outcome"] == OK:
                what = "nothing was preempted"
            elif row["outcome"] == "step_limit":
                what = "the run was cut by --max-steps"
            else:
                what = f"the outcome '{row['outcome']}' describes preemption only"
            why = (
                f"; {what}, and no scheduler setting fixes overload: more capacity or less "
                "traffic does"
            )
        console.print(rates + why, soft_wrap=True)
    elif not judged(row):
        console.print(f"note: overload not judged: {burst_text(row, more)}", soft_wrap=True)


def judged(row: object) -> bool:
    """Whether the run's overload verdict was judged (``metrics.overload_judged``;
    a row from before that column counts as judged)."""
    return bool(row.get("overload_judged", True))  # type: ignore[attr-defined]


def _cache_rows(row: object) -> list[tuple[str, str]]:
    """Prefix-cache rows of ``plan run``'s table: the hit rate when something
    was looked up (``metrics._prefix_cache_stats``), the ideal when the
    workload has block hash ids; none otherwise (no NaN printed)."""
    out = []
    r = row  # a pandas row
    if r["prefix_cache_queries"] > 0:  # type: ignore[index]
        out.append(
            (
                "prefix_cache_hit_rate",
                f"{r['prefix_cache_hit_rate']:.1%} ({r['prefix_cache_hits']:,} of "  # type: ignore[index]
                f"{r['prefix_cache_queries']:,} tokens; after preemption "  # type: ignore[index]
                f"{r['prefix_cache_preempted_hits']:,} of "  # type: ignore[index]
                f"{r['prefix_cache_preempted_queries']:,})",  # type: ignore[index]
            )
        )
    if not math.isnan(r["ideal_prefix_cache_hit_rate"]):  # type: ignore[index]
        ideal = r["ideal_prefix_cache_hit_rate"]  # type: ignore[index]
        out.append(("ideal_prefix_cache_hit_rate", f"{ideal:.1%} (unbounded cache)"))
    return out


# Statistics that carry an ``_is_lower_bound`` flag (``metrics._stats``,
# ``metrics.itl_columns``).
LATENCY_STATS = tuple(k for k, _ in SUMMARY_ROWS if k.endswith(("_mean", "_p50", "_p90", "_p99")))


def _front_end_failed(row: object) -> bool:
    """Whether the front end rejected or cut short any request of ``row``."""
    import pandas as pd

    return bool(front_end_failures(pd.DataFrame([row]))[0] > 0)


def rejection_text(row: object, as_misses: bool = False) -> str:
    """What the front end's failures mean (``metrics.front_end_text``), for a
    row with ``rejected`` or ``cut`` > 0; ``as_misses``: in an SLO verdict,
    where they count as misses (``metrics.slo_columns``)."""
    arrived = int(row["arrived"])  # type: ignore[index]
    what = front_end_text(
        int(row["rejected"]),  # type: ignore[index]
        int(row.get("cut", 0)),  # type: ignore[attr-defined]
        int(row["max_model_len"]),  # type: ignore[index]
    )
    counted = "they count as misses" if as_misses else "they are failed requests"
    return f"of {arrived:,} requests, {what}; {counted}: raise --max-model-len"


def slo_verdict(row: object, slo: SLO) -> str:
    """One line: whether ``row`` (a ``summarize`` row with SLO columns) meets
    ``slo``, naming each metric that misses (a lower bound printed as '>= X')
    overload and front-end rejections, which also deny the claim."""
    misses = []
    for field, limit in slo.items():
        key = f"{field}_p{SLO_PERCENTILE}"
        p = row[key]  # type: ignore[index]
        upper = row.get(f"{key}_upper_bound", math.inf)  # type: ignore[attr-defined]
        # Unserved requests that cannot lift it past the SLO: met whatever they do.
        bound = bool(row[f"{key}_is_lower_bound"]) and not upper <= limit  # type: ignore[index]
        if bound:
            what = "token gaps never produced" if field == "itl_s" else "requests unserved"
            misses.append(
                f"{key} ≥ {seconds_text(float(p))}, with {what} by the end of the "
                "run (they count as misses)"
            )
        elif p > limit:
            misses.append(f"{key} {seconds_text(float(p))} > {seconds_text(limit)}")
    over = bool(row["overloaded"])  # type: ignore[index]
    if _front_end_failed(row):  # failed requests: misses
        misses.append(rejection_text(row, as_misses=True))
    if row["outcome"] == "step_limit":  # type: ignore[index]
        return (
            f"verdict: NONE for SLO ({slo.describe()}): the run stopped at --max-steps before "
            "its work ended (outcome step_limit)"
        )
    horizon = bool(row.get("ended_by_horizon", False))  # type: ignore[attr-defined]
    if all(math.isnan(float(row[f"{f}_p{SLO_PERCENTILE}"])) for f, _ in slo.items()):  # type: ignore[index]
        if horizon and not over:
            return (
                f"verdict: NONE for SLO ({slo.describe()}): the horizon ended the run before any "
                "request could be judged; run without --horizon, or longer"
            )
        misses.append("no request could be judged")
    if not over and (open_bounds := slo_open_bounds(row, slo)):  # type: ignore[arg-type]
        return f"verdict: NONE for SLO ({slo.describe()}): {open_bounds_text(open_bounds)}"
    if not misses and not over and bool(row["concurrency_bound"]):  # type: ignore[index]
        n = int(row["max_concurrency"])  # type: ignore[index]
        return f"verdict: MEETS SLO ({slo.describe()}) with at most {n:,} requests in the system"
    if not misses and not over and not judged(row):
        return (
            f"verdict: MEETS SLO ({slo.describe()}) for this burst; whether it keeps up with "
            "the offered rate is not judged (below)"
        )
    if not misses and not over and is_batch(row):  # type: ignore[arg-type]
        return f"verdict: MEETS SLO ({slo.describe()}) for this batch sent at once (no rate)"
    if not misses and not over:
        return f"verdict: MEETS SLO ({slo.describe()}) and keeps up with the offered load"
    parts = misses + (["overloaded"] if over else [])
    return f"verdict: MISSES SLO ({slo.describe()}): " + "; ".join(parts)


def json_default(v: object) -> object:
    if hasattr(v, "item"):
        return v.item()  # type: ignore[attr-defined]
    return str(v)


def startup_warning(cfg: SchedulerConfig) -> list[str]:
    """vLLM 0.33's start-up check on a full-attention pool
    (``capacity.vllm_starts``: one max_model_len request must fit the pool
    less the null block, ``check_enough_kv_cache_memory``): a pool it
    refuses is simulated anyway (tests and the livelock scenarios use tiny
    pools), and the output says vLLM would not start it."""
    why = cfg.startup_refusal()
    if why is None:
        return []
    return [f"plan: warning: {why}; simulated anyway (plan check gives the fix)"]


def said_of(warnings: list[str], who: str) -> list[str]:
    """``warnings`` ("plan: warning: ...") naming ``who`` they are about, for
    a disaggregated run, whose two pools each have their own."""
    return [w.replace("plan: warning: ", f"plan: warning: {who}: ", 1) for w in warnings]
