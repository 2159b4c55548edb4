"""The ``plan`` command line (Typer). Parses, validates, calls ``planner.api``, prints.

Every error in the user's input ends as one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import click
import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    import pandas as pd

from planner import capacity, distribution
from planner import cli_options as opt
from planner.capacity import analytic_safe_max_num_seqs
from planner.cli_calibrate import register as register_calibrate
from planner.cli_capacity import command_workload, finite, warn
from planner.cli_capacity import register as register_capacity_commands
from planner.cli_inert import (
    BENCH_RULES,
    RUN_RULES,
    given,
    reject_inert,
    reject_inert_hardware,
)
from planner.cli_maxrate import register as register_max_rate
from planner.cli_models import register as register_model_commands
from planner.cli_size import register as register_size
from planner.config import SchedulerConfig, check_compat_latency, clock_bound, compat_settings
from planner.latency import Latency
from planner.metrics import LIVELOCKED, OK, OUTCOMES, OVERLOADED
from planner.safelimit import started_text
from planner.slo import SLO, SLO_PERCENTILE, seconds_text
from planner.text import count
from planner.workload import (
    Workload,
    WorkloadError,
    unused_field_warnings,
)

EXIT_FAILURE_VERDICT = 1  # plan run --fail-on: the outcome is one of the given classes
EXIT_BAD_INPUT = 2
STUCK_SHOWN = 20  # stuck request ids printed in the table output (--json has all)


class _HelpGroup(typer.core.TyperGroup):
    """The ``plan`` group; its help lists each command's whole first sentence
    (Click's default cuts it to the width with "...")."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Write the "Commands" section: name and first sentence, wrapped, never cut."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


# rich_markup_mode=None: help is laid out by Click's own formatter, which
# prints every option name in full at any width (Rich's panels cut names to
# the column, "--max-num-batche…", at 80 columns when stdout is not a
# terminal) and keeps bracketed text such as "[default: from --model/--gpu]"
# (Rich markup swallowed it, leaving "blocks .").
app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    cls=_HelpGroup,
    # Click caps help at 80 columns; use the whole terminal (COLUMNS), as Rich did.
    context_settings={"max_content_width": 10_000},
    help="Capacity planning for LLM servers that run the vLLM v1 scheduler.",
)


class InputError(Exception):
    """Bad user input, reported as one line."""


class PreemptionMode(StrEnum):
    recompute = "recompute"
    restart = "restart"
    swap = "swap"


class StopBound(StrEnum):
    max_model_len = "max_model_len"
    max_servable = "max_servable"


class ColorScale(StrEnum):
    linear = "linear"
    log = "log"


class Policy(StrEnum):
    fcfs = "fcfs"
    priority = "priority"


def _atomic_parquet(df: object, path: Path) -> None:
    """Write ``df`` (a DataFrame) to ``path`` via a temp file and rename."""
    from planner.sweep.store import write_table

    try:
        write_table(df, path)  # type: ignore[arg-type]
    except OSError as e:
        raise InputError(f"cannot write {path}: {os_error_reason(e)}") from None


SUMMARY_ROWS = (
    ("completed", "{:.0f}"),
    ("rejected", "{:.0f}"),
    ("running_end", "{:.0f}"),
    ("waiting_end", "{:.0f}"),
    ("unserved", "{:.0f}"),
    ("unfinished", "{:.0f}"),
    ("preemptions", "{:.0f}"),
    ("preempted_requests", "{:.0f}"),
    ("overloaded", "{}"),
    ("offered_rps", "{:.3f}"),
    ("accepted_rps", "{:.3f}"),
    ("served_rps", "{:.3f}"),
    ("queue_delay_growth_s", "{:.3f}"),
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


@app.command(cls=opt.BoundedCommand)
def run(
    ctx: typer.Context,
    num_gpu_blocks: opt.NumGpuBlocks = None,
    block_size: opt.BlockSize = 16,
    max_num_seqs: opt.MaxNumSeqs = 256,
    max_num_batched_tokens: opt.MaxNumBatchedTokens = 2048,
    max_model_len: opt.MaxModelLen = 4096,
    long_prefill_token_threshold: Annotated[int, typer.Option(help="0 = off.")] = 0,
    watermark: Annotated[float, typer.Option(help="Share of N kept free at admission.")] = 0.0,
    scheduler_reserve_full_isl: Annotated[
        bool, typer.Option(help="Whole-sequence admission gate (vLLM default on).")
    ] = True,
    preemption_mode: Annotated[
        PreemptionMode, typer.Option(help="recompute (vLLM), restart (BLIS) or swap.")
    ] = PreemptionMode.recompute,
    stop_bound: Annotated[
        StopBound, typer.Option(help="max_model_len (vLLM) or max_servable (PR #52530).")
    ] = StopBound.max_model_len,
    null_block: Annotated[bool, typer.Option(help="Reserve block 0 (vLLM); off = BLIS.")] = True,
    async_scheduling: opt.AsyncScheduling = False,
    enable_prefix_caching: opt.EnablePrefixCaching = False,
    compat: opt.CompatOpt = opt.Compat.vllm,
    blis_full_hit_defect: opt.BlisFullHitDefect = False,
    sliding_window: opt.SlidingWindow = None,
    full_attention_groups: opt.FullAttentionGroups = None,
    sliding_window_groups: opt.SlidingWindowGroups = None,
    policy: Annotated[
        Policy,
        typer.Option(help="fcfs, or priority (the trace's priority column, else all 0)."),
    ] = Policy.fcfs,
    max_concurrency: opt.MaxConcurrency = 0,
    think_time: opt.ThinkTime = 0.0,
    turns: opt.Turns = 1,
    replicas: opt.Replicas = 1,
    router: opt.RouterOpt = opt.Router.round_robin,
    router_seed: opt.RouterSeed = 0,
    horizon: opt.Horizon = math.inf,
    max_steps: Annotated[int, typer.Option(help="Safety cap on scheduler steps.")] = 10_000_000,
    victim: opt.VictimOpt = None,
    anti_starvation: Annotated[
        int, typer.Option(help="Mitigation: protect a request after K preemptions (0 = off).")
    ] = 0,
    admission: opt.AdmissionOpt = opt.Admission.vanilla,
    adaptive_window: Annotated[
        int, typer.Option(help="Mitigation: adaptive cap window in steps (0 = off).")
    ] = 0,
    adaptive_threshold: Annotated[
        int, typer.Option(help="Adaptive cap: preemptions per window that cut the cap.")
    ] = 0,
    adaptive_step: Annotated[int, typer.Option(help="Adaptive cap: regain per calm window.")] = 1,
    cpu_swap_blocks: Annotated[
        int, typer.Option(help="Swap preemption: CPU tier capacity in blocks.")
    ] = 0,
    swap_bandwidth_gbps: Annotated[
        float, typer.Option(help="Swap preemption: GB/s each way.")
    ] = 25.0,
    kv_block_bytes: Annotated[
        int | None,
        typer.Option(help="Swap: bytes per KV block [default: from --model, else 2 MiB]."),
    ] = None,
    model: opt.Model = None,
    gpu: opt.Gpu = None,
    gpu_memory_utilization: opt.GpuMemoryUtilization = 0.9,
    tensor_parallel_size: opt.TensorParallelSize = 1,
    quantization: opt.Quantization = None,
    kv_cache_dtype: opt.KvCacheDtype = "auto",
    trace_file: opt.TraceFile = None,
    trace_format: opt.TraceFormatOpt = opt.TraceFormat.auto,
    trace_columns: opt.TraceColumns = None,
    trace_hash_block_size: opt.TraceHashBlockSize = None,
    trace_start: opt.TraceStart = 0.0,
    trace_duration: opt.TraceDuration = math.inf,
    rate_scale: opt.RateScale = 1.0,
    max_requests: opt.MaxRequests = None,
    num_requests: opt.NumRequests = 300,
    rate: opt.Rate = 10.0,
    arrival: opt.ArrivalOpt = opt.Arrival.constant,
    length_dist: opt.LengthDistOpt = opt.LengthKind.gaussian,
    prompt_tokens: opt.PromptTokens = None,
    prompt_tokens_stdev: opt.Stdev = None,
    prompt_tokens_min: opt.Min = None,
    prompt_tokens_max: opt.Max = None,
    output_tokens: opt.OutputTokens = None,
    output_tokens_stdev: opt.Stdev = None,
    output_tokens_min: opt.Min = None,
    output_tokens_max: opt.Max = None,
    seed: opt.Seed = None,
    prefix_groups: opt.PrefixGroups = 0,
    prefix_len: opt.PrefixLen = 0,
    prefix_share: opt.PrefixShare = 0.0,
    latency: opt.LatencyOpt = opt.LatencyKind.linear,
    alpha_coeffs: opt.AlphaCoeffs = None,
    beta_coeffs: opt.BetaCoeffs = None,
    mfu: opt.Mfu = None,
    mbu: opt.Mbu = None,
    step_overhead_us: opt.StepOverheadUs = 0.0,
    measured_scale: opt.MeasuredScale = None,
    ttft_slo: opt.TtftSlo = None,
    tpot_slo: opt.TpotSlo = None,
    itl_slo: opt.ItlSlo = None,
    e2e_slo: opt.E2eSlo = None,
    goodput: opt.Goodput = None,
    as_json: opt.AsJson = False,
    trace: Annotated[
        Path | None, typer.Option(help="Write one row per step to this Parquet file.")
    ] = None,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            metavar="CLASSES",
            help="Exit 1 when the outcome is one of these classes, comma-separated or "
            f"repeated: {', '.join(o for o in OUTCOMES if o != 'ok')}, {OVERLOADED} "
            "(for pipelines).",
        ),
    ] = None,
) -> None:
    """Simulate one scheduler configuration and print its metrics.

    Under a failure outcome the output names the stuck requests (ids are
    0-based positions in the workload, in arrival order).

    Exit status: 0 the run finished (whatever its outcome); 1 with --fail-on,
    when the outcome is one of the given classes; 2 bad input.
    """
    from planner import resolve
    from planner.api import paced_clock_bound, simulate

    rules = dict(
        scheduler_reserve_full_isl=scheduler_reserve_full_isl,
        preemption_mode=preemption_mode.value,
        null_block=null_block,
        enable_prefix_caching=enable_prefix_caching,
    )
    # --compat blis implies these; one the user gave against it is refused, before
    # the inert-option rules (which would ask for what compat forbids).
    rules |= compat_settings(compat.value, {k: v for k, v in rules.items() if given(ctx, k)})
    # Before the step-time model is built (a measured table loads and speaks).
    check_compat_latency(compat.value, latency == opt.LatencyKind.linear)
    reject_inert(ctx, RUN_RULES)
    fail_classes = _fail_on(fail_on)
    slo = opt.slo_from(ttft_slo, tpot_slo, itl_slo, e2e_slo, goodput)

    lat = opt.step_time(
        latency, model, gpu, tensor_parallel_size, alpha_coeffs, beta_coeffs, mfu, mbu,
        step_overhead_us, quantization, kv_cache_dtype, measured_scale,
    )  # fmt: skip
    blocks, derived = resolve.num_gpu_blocks(
        num_gpu_blocks, model, gpu, gpu_memory_utilization, block_size, tensor_parallel_size, 7463,
        quantization=quantization, kv_cache_dtype=kv_cache_dtype,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        full_attention_only=False, simulated=True,
    )  # fmt: skip
    attn = resolve.attention(
        sliding_window, model, quantization, kv_cache_dtype,
        (full_attention_groups, sliding_window_groups),
    )  # fmt: skip
    cfg = SchedulerConfig(
        num_gpu_blocks=blocks,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        long_prefill_token_threshold=long_prefill_token_threshold,
        watermark=watermark,
        **attn,
        **rules,
        stop_bound=stop_bound.value,
        async_scheduling=async_scheduling,
        compat=compat.value,
        blis_full_hit_defect=blis_full_hit_defect,
        policy=policy.value,
        victim=None if victim is None else victim.value,
        anti_starvation=anti_starvation,
        admission=admission.value,
        adaptive_window=adaptive_window,
        adaptive_threshold=adaptive_threshold,
        adaptive_step=adaptive_step,
        cpu_swap_blocks=cpu_swap_blocks,
        swap_bandwidth_gbps=swap_bandwidth_gbps,
        kv_block_bytes=resolve.kv_block_bytes(
            kv_block_bytes, model, block_size, tensor_parallel_size, quantization, kv_cache_dtype
        ),
        max_concurrency=max_concurrency,
        think_time_s=think_time,
        replicas=replicas,
        router=router.value,
        router_seed=router_seed,
        horizon_s=horizon,
        max_steps=max_steps,
    )
    reject_inert_hardware(ctx, cfg.one_full_attention_group, num_gpu_blocks is not None)
    cfg.check_vllm_starts()
    clock_bound(cfg, lat)  # before any work: the int64 ns clock cannot wrap
    topts = {"start_s": trace_start, "duration_s": trace_duration, "rate_scale": rate_scale,
             "max_requests": max_requests, "max_model_len": max_model_len,
             "hash_block_size": trace_hash_block_size}  # fmt: skip
    wl = command_workload(
        trace_file, trace_format.value, trace_columns, topts,
        (num_requests, rate, arrival, length_dist,
         (prompt_tokens, prompt_tokens_stdev, prompt_tokens_min, prompt_tokens_max),
         (output_tokens, output_tokens_stdev, output_tokens_min, output_tokens_max)),
        (prefix_groups, prefix_len, prefix_share), seed, turns,
    )  # fmt: skip
    for message in unused_field_warnings(wl, [cfg]):
        warn(message)
    if compat == opt.Compat.blis and _finer_than_ns(lat):
        warn(
            "--compat blis: a coefficient has more than 3 decimals in us; planner keeps whole "
            "ns, so BLIS's truncation to whole us can differ by 1 us on some steps"
        )
    mean_len = wl.mean_request_tokens(max_model_len)
    safe = analytic_safe_max_num_seqs(
        blocks, block_size, mean_len, null_block, cfg.sliding_window_cap,
        cfg.full_attention_groups, cfg.sliding_window_groups,
    )  # fmt: skip
    warning = (
        f"plan: warning: max_num_seqs {max_num_seqs} exceeds the KV-safe limit {safe} for "
        f"this workload (mean request {mean_len:,.0f} tokens on {blocks:,} blocks): "
        "requests admitted together cannot all grow to full length without preemption"
        if max_num_seqs > safe
        and not 0 < max_concurrency <= safe  # clients cap the batch
        and not wl.rejected(max_model_len).all()  # nothing admitted: no batch at all
        else ""
    )
    paced_clock_bound([cfg], wl, lat)  # closed loop / sessions: the clock cannot wrap
    opt.say_compile([cfg], wl)
    t0 = time.perf_counter()
    res = simulate([cfg], wl, lat)
    wall = time.perf_counter() - t0
    row = res.metrics(slo).iloc[0]
    row["num_gpu_blocks_derived"] = derived
    row["latency_model"] = lat.describe()
    row["wall_s"] = wall
    row["sim_tokens_per_s"] = (row.prefill_tokens + row.decode_tokens) / max(wall, 1e-9)
    if trace is not None:
        _write_trace(trace, cfg, wl, lat, int(row.steps))
        print(f"plan: wrote {int(row.steps)} steps to {trace}", file=sys.stderr)
    if warning:
        print(warning, file=sys.stderr)
    if int(row["invariant_errors"]) > 0:  # a planner bug, never a property of the config
        warn(
            f"the kernel's block accounting broke on {int(row['invariant_errors']):,} steps "
            "(held + free != usable blocks): these figures are wrong; please report it"
        )
    stuck = res.stuck_requests()
    stuck_preempted = stuck[res.state.req.npre[0, stuck] > 0]
    if as_json:
        out = {k: _json_default(v) if hasattr(v, "item") else v for k, v in row.items()}
        out["stuck_request_ids"] = stuck.tolist()
        out["num_gpu_blocks_sized_at"] = resolve.sized_at_json(
            max_num_seqs, max_num_batched_tokens, derived
        )
        out["stuck_preempted_request_ids"] = stuck_preempted.tolist()
        if replicas > 1:
            out["per_replica"] = _per_replica(res, slo).to_dict(orient="records")
        print(json.dumps(finite(out), default=_json_default))
    else:
        source = "given" if num_gpu_blocks else "default"
        if derived:
            at = resolve.sized_at(max_num_seqs, max_num_batched_tokens)
            source = f"derived from presets; {at}"
        _print_run(wl, blocks, source, lat, row, wall, slo, cfg)
        if replicas > 1:
            _print_replicas(_per_replica(res, slo))
        if row["outcome"] != OK and len(stuck):
            _print_stuck(str(row["outcome"]), stuck.tolist(), stuck_preempted.tolist())
        if row["outcome"] == LIVELOCKED:
            _print_gap_fix(cfg)
    if row["outcome"] in fail_classes or (OVERLOADED in fail_classes and row["overloaded"]):
        raise typer.Exit(EXIT_FAILURE_VERDICT)


# Per-replica columns ``plan run`` shows for a fleet (``SimResult.replica_metrics``).
REPLICA_COLUMNS = (
    "replica", "requests_sent", "completed", "preemptions", "ttft_s_p99", "tpot_s_p99",
    "peak_kv_usage", "mean_kv_usage", "outcome",
)  # fmt: skip


def _per_replica(res: object, slo: SLO) -> pd.DataFrame:
    """``REPLICA_COLUMNS`` of each replica of the run's one config."""
    return res.replica_metrics(slo)[list(REPLICA_COLUMNS)]  # type: ignore[attr-defined]


REPLICAS_SHOWN = 32  # rows of plan run's per-replica table; --json has all
REPLICA_HEADERS = (
    "replica", "sent", "completed", "preemptions", "TTFT p99 s", "TPOT p99 s", "peak KV",
    "mean KV", "outcome",
)  # fmt: skip


def _print_replicas(df: pd.DataFrame) -> None:
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


def _fail_on(values: list[str] | None) -> frozenset[str]:
    """Outcome classes named by --fail-on (comma-separated and/or repeated),
    validated against ``planner.metrics.OUTCOMES`` minus ``ok``."""
    known = (*(o for o in OUTCOMES if o != OK), OVERLOADED)
    names = {v.strip() for text in values or () for v in text.split(",") if v.strip()}
    if values is not None and not names:
        raise InputError(f"--fail-on: expected class names from {', '.join(known)}")
    for name in sorted(names):
        if name == OK:
            raise InputError(
                f"--fail-on: {OK!r} is not a failure class (known: {', '.join(known)})"
            )
        if name not in known:
            raise InputError(
                f"--fail-on: unknown failure class {name!r} (known: {', '.join(known)})"
            )
    return frozenset(names)


def _ids(ids: list[int]) -> str:
    """The first STUCK_SHOWN ids, comma-separated, and how many more there are."""
    text = ", ".join(str(i) for i in ids[:STUCK_SHOWN])
    if len(ids) > STUCK_SHOWN:
        text += f", ... ({len(ids) - STUCK_SHOWN:,} more; --json lists all)"
    return text


def _print_stuck(outcome: str, stuck: list[int], preempted: list[int]) -> None:
    """One line naming the requests that were waiting or running and never finished."""
    pre = f"; preempted among them: {_ids(preempted)}" if preempted else ""
    Console(markup=False).print(
        f"{outcome}: {count(len(stuck), 'request')} entered the scheduler and never finished "
        f"(request ids, 0-based in arrival order): {_ids(stuck)}{pre}",
        soft_wrap=True,
    )


def _print_gap_fix(cfg: SchedulerConfig) -> None:
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


def _finer_than_ns(lat: Latency) -> bool:
    """Whether a linear coefficient (us) is not a whole number of ns."""
    coeffs = (*getattr(lat, "alpha", ()), *getattr(lat, "beta", ()))
    return any(abs(c * 1000 - round(c * 1000)) > 1e-6 for c in coeffs)


def _print_run(
    wl: Workload,
    blocks: int,
    source: str,
    lat: Latency,
    row: object,
    wall: float,
    slo: SLO,
    cfg: SchedulerConfig | None = None,
) -> None:
    """The human-readable summary table of ``plan run``; ``source`` says where
    num_gpu_blocks came from; ``cfg`` the config (its attention is named
    when it is not full attention); with an SLO, its verdict
    (``metrics.slo_columns``)."""
    console = Console(markup=False)
    console.print(f"plan run: {wl.name}, {count(wl.num_requests, 'request')}", soft_wrap=True)
    console.print(f"num_gpu_blocks {blocks:,} ({source})", soft_wrap=True)
    if cfg is not None and (line := cfg.attention_line()):
        console.print(line, soft_wrap=True)
    console.print(f"step time: {lat.describe()}", soft_wrap=True)
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
        table.add_row(key, value_text(row, key, fmt))
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
            "an earlier turn of its session was rejected (prompt >= max_model_len), or the run "
            "ended first"
            if wl.session is not None
            else "the run ended while its client waited for a free slot"
        )
        unsent = int(row["never_sent"])  # type: ignore[index]
        console.print(
            f"note: {count(unsent, 'request')} {'was' if unsent == 1 else 'were'} never sent: "
            f"{why}; {'it counts' if unsent == 1 else 'they count'} in no latency",
            soft_wrap=True,
        )
    if int(row["rejected"]) > 0:  # type: ignore[index]
        console.print(f"note: {rejection_text(row)}", soft_wrap=True)
    if slo.given():
        console.print(slo_verdict(row, slo), soft_wrap=True)
    if row["overloaded"]:
        rates = f"verdict: OVERLOADED - {started_text(row)} (the queue grew through it)"
        if row["outcome"] == LIVELOCKED:  # the livelock, not the traffic, stopped service
            why = (
                f"; the run stopped at {row['sim_end_s']:.3f} s on a proven livelock (below), "
                "after which nothing finishes whatever the traffic: remove the livelock first"
            )
        else:  # the outcome class speaks of preemption only
            what = (
                "describes preemption only"
                if row["outcome"] != "step_limit"
                else "says the run was cut by --max-steps"
            )
            why = (
                f"; the outcome '{row['outcome']}' {what}, and no scheduler setting fixes "
                "overload: more capacity or less traffic does"
            )
        console.print(rates + why, soft_wrap=True)


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


def rejection_text(row: object, as_misses: bool = False) -> str:
    """What the front end's rejections mean, for a row with ``rejected`` > 0;
    ``as_misses``: in an SLO verdict, where they count as misses
    (``metrics.slo_columns``)."""
    n, arrived = int(row["rejected"]), int(row["arrived"])  # type: ignore[index]
    mml = int(row["max_model_len"])  # type: ignore[index]
    counted = ", so they count as misses" if as_misses else "; they count in no latency"
    return (
        f"{n:,} of {arrived:,} requests rejected by the front end (prompt >= max_model_len "
        f"{mml:,}: vLLM refuses them{counted}): raise --max-model-len"
    )


def slo_verdict(row: object, slo: SLO) -> str:
    """One line: whether ``row`` (a ``summarize`` row with SLO columns) meets
    ``slo``, naming each metric that misses (a lower bound printed as '>= X')
    overload and front-end rejections, which also deny the claim."""
    misses = []
    for field, limit in slo.items():
        key = f"{field}_p{SLO_PERCENTILE}"
        p = row[key]  # type: ignore[index]
        bound = bool(row[f"{key}_is_lower_bound"])  # type: ignore[index]
        if bound:
            what = "token gaps never produced" if field == "itl_s" else "requests unserved"
            misses.append(
                f"{key} ≥ {seconds_text(float(p))}, with {what} by the end of the "
                "run (they count as misses)"
            )
        elif p > limit:
            misses.append(f"{key} {seconds_text(float(p))} > {seconds_text(limit)}")
    over = bool(row["overloaded"])  # type: ignore[index]
    if int(row["rejected"]) > 0:  # type: ignore[index]  # failed requests: misses
        misses.append(rejection_text(row, as_misses=True))
    if row["outcome"] == "step_limit":  # type: ignore[index]
        return (
            f"verdict: NONE for SLO ({slo.describe()}): the run stopped at --max-steps before "
            "its work ended (outcome step_limit)"
        )
    if not misses and not over and bool(row["concurrency_bound"]):  # type: ignore[index]
        n = int(row["max_concurrency"])  # type: ignore[index]
        return f"verdict: MEETS SLO ({slo.describe()}) with at most {n:,} requests in the system"
    if not misses and not over:
        return f"verdict: MEETS SLO ({slo.describe()}) and keeps up with the offered load"
    parts = misses + (["overloaded"] if over else [])
    return f"verdict: MISSES SLO ({slo.describe()}): " + "; ".join(parts)


def _json_default(v: object) -> object:
    if hasattr(v, "item"):
        return v.item()  # type: ignore[attr-defined]
    return str(v)


MAX_TRACE_LOG_ENTRIES = 8_000_000


def _write_trace(path: Path, cfg: SchedulerConfig, wl: Workload, lat: Latency, steps: int) -> None:
    """Re-run the config step by step and write its per-step trace (Parquet, atomic).

    Adds list columns ``request_ids``/``request_tokens`` (tokens scheduled per
    request) when the request log fits in MAX_TRACE_LOG_ENTRIES entries.
    """
    from planner.api import simulate
    from planner.kernel.state import max_events_per_step

    if path.suffix != ".parquet":
        raise InputError(f"--trace: expected a .parquet file name, got {str(path)!r}")
    entries = steps * max_events_per_step(cfg.max_num_seqs, wl.num_requests)
    log = entries if entries <= MAX_TRACE_LOG_ENTRIES else 0
    res = simulate([cfg], wl, lat, trace_steps=max(steps, 1), log_entries=log)
    df = res.trace()
    if log:
        rl = res.request_log()
        grouped = rl.groupby("step")
        ids = grouped["request"].apply(list)
        toks = grouped["tokens"].apply(list)
        df["request_ids"] = df["step"].map(ids).apply(lambda x: x if isinstance(x, list) else [])
        df["request_tokens"] = (
            df["step"].map(toks).apply(lambda x: x if isinstance(x, list) else [])
        )
    _atomic_parquet(df, path)


@app.command(cls=opt.BoundedCommand)
def sweep(
    spec: opt.SweepSpecArg,
    out: Annotated[
        Path | None, typer.Option(help="Output directory (default results/NAME).")
    ] = None,
    workers: opt.Workers = None,
    chunk_size: Annotated[
        int | None, typer.Option(help="Configs per kernel call (default 1024, memory-capped).")
    ] = None,
    memory_limit: opt.MemoryLimit = "4GiB",
    dry_run: opt.DryRun = False,
    resume: opt.Resume = False,
    overwrite: opt.Overwrite = False,
    executor: opt.ExecutorOpt = opt.Executor.local,
    address: opt.DaskAddress = None,
    dask_workers: opt.DaskWorkers = None,
) -> None:
    """Simulate every configuration of a spec's grid and write one Parquet dataset."""
    from planner.sweep import driver
    from planner.sweep.spec import load_spec

    limit = driver.parse_memory(memory_limit)
    if chunk_size is not None and chunk_size < 1:
        raise InputError(f"--chunk-size must be >= 1, got {chunk_size}")
    opt.check_run_options(workers, resume, overwrite, executor, address, dask_workers)
    sw = load_spec(spec)
    for message in sw.warnings:
        warn(message)
    console = Console(stderr=True, markup=False)  # progress and warnings
    report = Console(markup=False, soft_wrap=True)  # results: stdout, pipeable
    if dry_run:
        driver.dry_run(sw, chunk_size, limit, workers, report)
        return
    dest = out if out is not None else driver.default_out(sw)
    t0 = time.perf_counter()
    try:
        df, ran = driver.run_sweep(
            sw, dest, chunk_size, limit, workers, resume, overwrite, console,
            executor.value, address, dask_workers,
        )  # fmt: skip
    except KeyboardInterrupt:
        raise opt.Interrupted(
            f"interrupted; finished chunks are in {dest}; rerun with --resume to continue"
        ) from None
    wall = time.perf_counter() - t0
    if not ran:
        report.print(f"{dest / 'data.parquet'} is already complete ({count(len(df), 'config')})")
        return
    over = int((df.max_num_seqs > df.kv_safe_max_num_seqs).sum())
    if over:
        console.print(
            f"plan: warning: {over:,} of {len(df):,} configs set max_num_seqs above the "
            "analytic KV-safe limit (column kv_safe_max_num_seqs)"
        )
    counts = df["outcome"].value_counts().to_dict()
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    report.print(
        f"wrote {count(len(df), 'config')} to {dest / 'data.parquet'} in {wall:.1f} s ({summary})"
    )
    hw = sw.spec.hardware
    if hw is not None and "num_gpu_blocks" not in (*sw.axes, *sw.spec.scheduler):
        pools = df.num_gpu_blocks
        report.print(
            f"num_gpu_blocks {pools.min():,} to {pools.max():,} (derived from {hw.model} on "
            f"{hw.tensor_parallel_size} x {hw.gpu}; each configuration's start-up profile at "
            "its own max_num_seqs and max_num_batched_tokens)"
        )


@app.command(cls=opt.BoundedCommand)
def heatmap(
    results: Annotated[Path, typer.Argument(help="Sweep output directory, e.g. results/quick.")],
    x: Annotated[str, typer.Option(help="Column on the x axis.")] = "max_num_seqs",
    y: Annotated[str, typer.Option(help="Column on the y axis.")] = "num_gpu_blocks",
    z: Annotated[
        str, typer.Option(help="Colour: completed, throughput, preemptions, ttft_p99, ...")
    ] = "completed",
    facet: Annotated[str, typer.Option(help="One panel per value ('' for none).")] = (
        "preemption_mode"
    ),
    where: Annotated[
        list[str] | None,
        typer.Option(metavar="AXIS=VALUE", help="Pin another axis: axis=value (repeatable)."),
    ] = None,
    mark: Annotated[
        str | None, typer.Option(help="Your current config as x,y, e.g. 256,7463.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="PNG or SVG, outside the sweep folder "
            "[default: RESULTS.heatmap.png beside it, e.g. results/quick.heatmap.png]"
        ),
    ] = None,
    width: Annotated[int, typer.Option(help="Pixels.")] = 1400,
    height: Annotated[int, typer.Option(help="Pixels.")] = 700,
    color_scale: Annotated[
        ColorScale, typer.Option(help="Colour scale of the metric (log: TTFT spans decades).")
    ] = ColorScale.linear,
    slo_contour: Annotated[
        bool,
        typer.Option(help="Outline the cells that meet the sweep's [slo] and keep up."),
    ] = False,
    recommend: Annotated[
        bool,
        typer.Option(
            help="Mark each panel's recommended cell: meets the SLOs, keeps up, within 1% of "
            "the best goodput, fewest resources on the y then x axis."
        ),
    ] = False,
) -> None:
    """Draw a sweep's metric over two axes with its failure regions and the KV-safe curve."""
    from planner.plots import default_out
    from planner.plots import heatmap as draw

    point = None
    if mark is not None:
        try:
            a, b = (float(v) for v in mark.split(","))
        except ValueError:
            raise InputError(f"--mark: expected x,y numbers, got {mark!r}") from None
        point = (a, b)
    dest = out if out is not None else default_out(results)
    try:
        path = draw(
            results, dest, x, y, z, facet or None, where or [], point, width, height,
            color_scale.value, slo_contour, recommend,
        )  # fmt: skip
    except OSError as e:
        raise InputError(f"cannot write {dest}: {os_error_reason(e)}") from None
    print(f"plan: wrote {path}", file=sys.stderr)


@app.command(cls=opt.BoundedCommand)
def bench(
    ctx: typer.Context,
    grid: Annotated[int, typer.Option(help="Grid side: grid x grid configs.")] = 64,
    reference: Annotated[
        bool, typer.Option(help="Also time the plain-Python reference on one config.")
    ] = True,
    async_scheduling: opt.AsyncScheduling = False,
    enable_prefix_caching: opt.EnablePrefixCaching = False,
    startup: Annotated[
        bool,
        typer.Option(help="Instead: time a first plan run (empty Numba cache) and a warm one."),
    ] = False,
    max_rate: Annotated[
        bool,
        typer.Option(
            help="Instead: time the highest-rate search over the grid against one plain "
            "sweep of it, and print the ratio."
        ),
    ] = False,
    mooncake: Annotated[
        bool,
        typer.Option(
            help="Instead: time one config on the shipped Mooncake trace's first 1,200 s "
            "with prefix caching off and on, and print the ratio."
        ),
    ] = False,
) -> None:
    """Measure kernel speed on scenario S1 across a max_num_seqs x num_gpu_blocks grid."""
    from planner.bench import run_bench, run_startup_bench

    reject_inert(ctx, BENCH_RULES)
    if startup:
        run_startup_bench()
        return

    if mooncake:
        from planner.bench import run_mooncake_bench

        run_mooncake_bench(async_scheduling=async_scheduling)
        return
    if not 1 <= grid <= 1024:
        raise InputError(f"--grid must be in 1..1024 (grid x grid configs), got {grid}")
    if max_rate:
        from planner.bench import run_max_rate_bench

        run_max_rate_bench(
            grid, async_scheduling=async_scheduling, enable_prefix_caching=enable_prefix_caching
        )
        return
    run_bench(
        grid,
        reference,
        async_scheduling=async_scheduling,
        enable_prefix_caching=enable_prefix_caching,
    )


register_capacity_commands(app)
register_max_rate(app)
register_model_commands(app)
register_calibrate(app)
register_size(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``plan`` script: one-line errors, exit code 2 on bad input.

    Exit codes: 0 done; 1 a failure verdict the user asked about (``plan check``:
    unsafe pool; ``plan run --fail-on``: the outcome is one of the classes);
    2 bad input; 130 interrupted.
    """
    try:  # is the imported `planner` ours? (another PyPI distribution installs one)
        distribution.check(sys.modules["planner"])
    except distribution.DistributionClash as e:
        print(f"plan: error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    cmd = typer.main.get_command(app)
    _watch_sigint()
    try:
        # Not standalone: errors come back here as exceptions; typer.Exit comes
        # back as the return value.
        rc = cmd.main(args=argv, prog_name="plan", standalone_mode=False)
        if rc == 130:  # Typer turns KeyboardInterrupt into Exit(130)
            print("plan: interrupted", file=sys.stderr)
        if isinstance(rc, int) and rc != 0:
            sys.exit(rc)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("plan: interrupted", file=sys.stderr)
        sys.exit(130)
    except opt.Interrupted as e:
        print(f"plan: {e}", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as e:  # usage errors: unknown option, malformed value
        if type(e).__name__ == "NoArgsIsHelpError":
            print(e.format_message(), file=sys.stderr)
            sys.exit(0)
        message = e.format_message().replace("Value error, ", "")  # pydantic's prefix
        print(f"plan: error: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except (InputError, WorkloadError, ValueError) as e:
        # One line whatever a library put in its message (pandas ends some in "\n").
        print(f"plan: error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except OSError as e:
        print(f"plan: error: {os_error_line(e)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except Exception:
        if _SIGINT[0]:  # Ctrl-C inside Numba's compiler surfaces as another error
            print("plan: interrupted", file=sys.stderr)
            sys.exit(130)
        raise


_SIGINT = [False]  # whether Ctrl-C arrived (``_watch_sigint``)
_SIGINT_HOOKED: list[bool] = []  # the handlers are installed once per process


def _watch_sigint() -> None:
    """Note Ctrl-C, then raise KeyboardInterrupt as Python does. A Ctrl-C that
    lands in a ctypes callback of Numba's compiler is swallowed there (Python
    prints it as unraisable) and the compile fails with another error, e.g.
    ``RuntimeError: no compiled object yet``; ``main`` then still reports an
    interruption, and the unraisable KeyboardInterrupt is not printed."""
    import signal

    _SIGINT[0] = False
    if threading.current_thread() is not threading.main_thread() or _SIGINT_HOOKED:
        return
    _SIGINT_HOOKED.append(True)

    def on_sigint(signum: int, frame: object) -> None:
        _SIGINT[0] = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    default_hook = sys.unraisablehook

    def hook(unraisable: object) -> None:
        if not isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt):
            default_hook(unraisable)  # type: ignore[arg-type]

    sys.unraisablehook = hook


def os_error_reason(e: OSError) -> str:
    """Why an OSError happened, in one line: its strerror; otherwise its own
    text (pyarrow raises OSErrors with a message and no errno), or its class name."""
    return e.strerror or " ".join(str(e).split()) or type(e).__name__


def os_error_line(e: OSError) -> str:
    """One line for an OSError: "strerror: filename" when the OS gave both,
    otherwise ``os_error_reason``."""
    return f"{e.strerror}: {e.filename}" if e.strerror and e.filename else os_error_reason(e)


if __name__ == "__main__":
    main()
