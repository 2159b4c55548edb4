"""``plan run``: simulate one scheduler configuration and print its metrics.

Its options are one table (``RUN_OPTIONS``, in help panels), read by the
command through ``o[name]``; the body is a few calls: the step-time model and
the config (``_config``), the workload (``_workload``), the warnings, one
simulation, then the output (``planner.cli.run_report``).
"""

from __future__ import annotations

import math
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from planner import capacity, resolve
from planner.cli import disagg, server
from planner.cli import options as opt
from planner.cli import run_report as report
from planner.cli.capacity import command_workload, warn
from planner.cli.errors import InputError, os_error_reason
from planner.cli.inert import given, reject_inert, reject_inert_hardware
from planner.cli.json_out import print_json
from planner.cli.result_folder import check_result_folder, write_requests_table
from planner.config import SchedulerConfig, check_compat_latency, clock_bound, compat_settings
from planner.inert import RUN_RULES
from planner.kv_transfer import DEFAULT_BANDWIDTH_GBPS, DEFAULT_LATENCY_US
from planner.latency.step_time import Latency
from planner.metrics import LIVELOCKED, OK, OUTCOMES, OVERLOADED
from planner.models import vllm_defaults
from planner.slo import SLO
from planner.workload.arrays import Workload
from planner.workload_checks import unused_field_warnings

EXIT_FAILURE_VERDICT = 1  # plan run --fail-on: the outcome is one of the given classes
DEFAULT_NUM_GPU_BLOCKS = 7463  # scenario S1's pool (docs/scenario-s1.md), without --model/--gpu


class PreemptionMode(StrEnum):
    recompute = "recompute"
    restart = "restart"
    swap = "swap"


class StopBound(StrEnum):
    max_model_len = "max_model_len"
    max_servable = "max_servable"


class Policy(StrEnum):
    fcfs = "fcfs"
    priority = "priority"


def _option(kind: type, text: str) -> Any:
    """``Annotated[kind, typer.Option(help=text)]``: an option only ``plan run`` takes."""
    return Annotated[kind, typer.Option(help=text)]


FAIL_ON_HELP = (
    "Exit 1 when the outcome is one of these classes, comma-separated or repeated: "
    f"{', '.join(o for o in OUTCOMES if o != OK)}, {OVERLOADED} (for pipelines)."
)
P = opt.Param
# Every option of plan run, in the help panels its --help shows. A shared option's
# type (and help) is the one in planner.cli.options; the run-only ones are here.
RUN_OPTIONS = (
    *opt.panel(
        "Server (vLLM flags)",
        P("num_gpu_blocks", opt.NumGpuBlocks),
        P("block_size", opt.BlockSize),
        P("max_num_seqs", opt.MaxNumSeqs),
        P("max_num_batched_tokens", opt.MaxNumBatchedTokens),
        P("max_model_len", opt.MaxModelLen),
        P("long_prefill_token_threshold", _option(int, "0 = off."), 0),
        P("async_scheduling", opt.AsyncScheduling),
        P("enable_prefix_caching", opt.EnablePrefixCaching),
        P("speculative_config", opt.SpeculativeConfigOpt),
        P("spec_acceptance", opt.SpecAcceptance),
        P("spec_acceptance_log", opt.SpecAcceptanceLog),
        P("spec_seed", opt.SpecSeed, 0),
        P(
            "policy",
            _option(Policy, "fcfs, or priority (the trace's priority column, else all 0)."),
            Policy.fcfs,
        ),
    ),
    *opt.panel(
        "Model and hardware",
        P("model", opt.Model),
        P("gpu", opt.Gpu),
        P("gpu_memory_utilization", opt.GpuMemoryUtilization),
        P("usage_context", opt.UsageContextOpt, vllm_defaults.SERVE),
        P("disable_hybrid_kv_cache_manager", opt.DisableHybridKvCacheManager),
        P("tensor_parallel_size", opt.TensorParallelSize, 1),
        P("quantization", opt.Quantization),
        P("kv_cache_dtype", opt.KvCacheDtype, "auto"),
        P("sliding_window", opt.SlidingWindow),
        P("full_attention_groups", opt.FullAttentionGroups),
        P("sliding_window_groups", opt.SlidingWindowGroups),
    ),
    *opt.panel(
        "Scheduler model (where it differs from vLLM, a named choice)",
        P("watermark", _option(float, "Share of N kept free at admission."), 0.0),
        P(
            "scheduler_reserve_full_isl",
            _option(bool, "Whole-sequence admission gate (vLLM default on)."),
            True,
        ),
        P(
            "preemption_mode",
            _option(PreemptionMode, "recompute (vLLM), restart (BLIS) or swap."),
            PreemptionMode.recompute,
        ),
        P(
            "stop_bound",
            _option(StopBound, "max_model_len (vLLM) or max_servable (PR #52530)."),
            StopBound.max_model_len,
        ),
        P("null_block", _option(bool, "Reserve block 0 (vLLM); off = BLIS."), True),
        P("compat", opt.CompatOpt, opt.Compat.vllm),
        P("blis_full_hit_defect", opt.BlisFullHitDefect, False),
        P("horizon", opt.Horizon, math.inf),
        P("max_steps", _option(int, "Safety cap on scheduler steps."), 10_000_000),
    ),
    *opt.panel(
        "Mitigations",
        P("victim", opt.VictimOpt),
        P(
            "anti_starvation",
            _option(int, "Mitigation: protect a request after K preemptions (0 = off)."),
            0,
        ),
        P("admission", opt.AdmissionOpt, opt.Admission.vanilla),
        P(
            "adaptive_window",
            _option(int, "Mitigation: adaptive cap window in steps (0 = off)."),
            0,
        ),
        P(
            "adaptive_threshold",
            _option(int, "Adaptive cap: preemptions per window that cut the cap."),
            0,
        ),
        P("adaptive_step", _option(int, "Adaptive cap: regain per calm window."), 1),
        P("cpu_swap_blocks", _option(int, "Swap preemption: CPU tier capacity in blocks."), 0),
        P("swap_bandwidth_gbps", _option(float, "Swap preemption: GB/s each way."), 25.0),
        P(
            "kv_block_bytes",
            _option(int | None, "Swap: bytes per KV block [default: from --model, else 2 MiB]."),
            None,
        ),
    ),
    *opt.panel(
        "Workload: a trace",
        P("trace_file", opt.TraceFile),
        P("trace_format", opt.TraceFormatOpt, opt.TraceFormat.auto),
        P("trace_columns", opt.TraceColumns),
        P("trace_hash_block_size", opt.TraceHashBlockSize),
        P("trace_start", opt.TraceStart, 0.0),
        P("trace_duration", opt.TraceDuration, math.inf),
        P("rate_scale", opt.RateScale, 1.0),
        P("max_requests", opt.MaxRequests),
    ),
    *opt.panel(
        "Workload: synthetic",
        P("num_requests", opt.NumRequests, 300),
        P("rate", opt.Rate, 10.0),
        P("arrival", opt.ArrivalOpt, opt.Arrival.constant),
        P("gamma_cv", opt.GammaCv),
        P("length_dist", opt.LengthDistOpt, opt.LengthKind.gaussian),
        P("prompt_tokens", opt.PromptTokens),
        P("prompt_tokens_stdev", opt.Stdev),
        P("prompt_tokens_min", opt.Min),
        P("prompt_tokens_max", opt.Max),
        P("output_tokens", opt.OutputTokens),
        P("output_tokens_stdev", opt.Stdev),
        P("output_tokens_min", opt.Min),
        P("output_tokens_max", opt.Max),
        P("seed", opt.Seed),
        P("prefix_groups", opt.PrefixGroups, 0),
        P("prefix_len", opt.PrefixLen, 0),
        P("prefix_share", opt.PrefixShare, 0.0),
    ),
    *opt.panel(
        "Clients and replicas",
        P("max_concurrency", opt.MaxConcurrency, 0),
        P("think_time", opt.ThinkTime, 0.0),
        P("turns", opt.Turns, 1),
        P("replicas", opt.Replicas, 1),
        P("router", opt.RouterOpt, opt.Router.round_robin),
        P("router_seed", opt.RouterSeed, 0),
    ),
    *opt.panel(
        "Disaggregated prefill/decode (planner.disagg)",
        P(
            "prefill_replicas",
            _option(
                int,
                "Prefill replicas (0 = colocated). With P > 0 the other options describe the "
                "decode replicas (--replicas of them); the prefill ones take them too, but for "
                "the prefill options below.",
            ),
            0,
        ),
        P("prefill_gpu", _option(str | None, "The prefill replicas' GPU [default: --gpu]."), None),
        P(
            "prefill_tensor_parallel_size",
            _option(int | None, "The prefill replicas' TP [default: --tensor-parallel-size]."),
            None,
        ),
        P("prefill_max_num_seqs", opt.PrefillMaxNumSeqs),
        P("prefill_max_num_batched_tokens", opt.PrefillMaxNumBatchedTokens),
        P("kv_transfer_bandwidth", opt.KvTransferBandwidth, DEFAULT_BANDWIDTH_GBPS),
        P("kv_transfer_latency", opt.KvTransferLatency, DEFAULT_LATENCY_US),
    ),
    *opt.panel(
        "Step time",
        P("latency", opt.LatencyOpt, opt.LatencyKind.linear),
        P("alpha_coeffs", opt.AlphaCoeffs),
        P("beta_coeffs", opt.BetaCoeffs),
        P("mfu", opt.Mfu),
        P("mbu", opt.Mbu),
        P("step_overhead_us", opt.StepOverheadUs, 0.0),
        P("measured_scale", opt.MeasuredScale),
    ),
    *opt.panel(
        "SLOs",
        P("ttft_slo", opt.TtftSlo),
        P("tpot_slo", opt.TpotSlo),
        P("itl_slo", opt.ItlSlo),
        P("e2e_slo", opt.E2eSlo),
        P("goodput", opt.Goodput),
    ),
    *opt.panel(
        "Output",
        P("as_json", opt.AsJson, False),
        P("trace", _option(Path | None, "Write one row per step to this Parquet file."), None),
        P(
            "out",
            _option(
                Path | None,
                "Write the run to this folder for plan report: run.json (the --json result), "
                "requests.parquet (--requests-out) and, for one server, steps.parquet (--trace).",
            ),
            None,
        ),
        P(
            "requests_out",
            _option(
                Path | None,
                "Write one row per request (arrival, first scheduled, first token, finish, "
                "tokens, TTFT/TPOT/E2E, preemptions) to this file: CSV, or Parquet when its "
                "name ends in parquet.",
            ),
            None,
        ),
        P(
            "fail_on",
            Annotated[list[str] | None, typer.Option(metavar="CLASSES", help=FAIL_ON_HELP)],
            None,
        ),
    ),
)


def run(ctx: typer.Context, **o: Any) -> None:
    """Simulate one scheduler configuration and print its metrics.

    Under a failure outcome the output names the stuck requests (ids are
    0-based positions in the workload, in arrival order).

    Exit status: 0 the run finished (whatever its outcome); 1 with --fail-on,
    when the outcome is one of the given classes; 2 bad input.
    """
    from planner.api import paced_clock_bound, simulate

    fail_classes = _fail_on(o["fail_on"])
    _check_distinct_outputs(o)
    if o["out"] is not None:
        check_result_folder(o["out"], RUN_FILES, "plan run result")  # before any work
    slo = opt.slo_from(o["ttft_slo"], o["tpot_slo"], o["itl_slo"], o["e2e_slo"], o["goodput"])
    srv = _server(ctx, o)
    given_hybrid = o["disable_hybrid_kv_cache_manager"]
    o = {**o, **server.values(srv), "disable_hybrid_kv_cache_manager_given": given_hybrid}
    disagg.check_options(ctx, o)
    cfg, lat, derived = _config(ctx, o)
    wl = _workload(o)
    warnings = _warnings(cfg, wl, lat, o)
    if o["prefill_replicas"] > 0:  # a disaggregated deployment (planner.cli.disagg)
        said = report.said_of(warnings, "decode replicas")  # said after any refusal
        return disagg.run(ctx, o, (cfg, lat), wl, slo, fail_classes, (srv, _s1_assumes(o)), said)
    paced_clock_bound([cfg], wl, lat)  # closed loop / sessions: the clock cannot wrap
    t0 = time.perf_counter()
    with opt.say_compile([cfg], wl, lat):
        res = simulate([cfg], wl, lat)
    wall = time.perf_counter() - t0
    row = res.metrics(slo).iloc[0]
    row["num_gpu_blocks_derived"] = derived
    row["latency_model"] = lat.describe()
    row["wall_s"] = wall
    row["sim_tokens_per_s"] = (row.prefill_tokens + row.decode_tokens) / max(wall, 1e-9)
    if o["requests_out"] is not None:
        _write_requests(o["requests_out"], res)
    if o["trace"] is not None:
        _write_trace(o["trace"], cfg, wl, lat, int(row.steps))
        print(f"plan: wrote {int(row.steps)} steps to {o['trace']}", file=sys.stderr)
    _to_stderr(warnings)
    if int(row["invariant_errors"]) > 0:  # a planner bug, never a property of the config
        warn(
            f"the kernel's block accounting broke on {int(row['invariant_errors']):,} steps "
            "(held + free != usable blocks): these figures are wrong; please report it"
        )
    out = {**_json(res, row, cfg, slo, derived), "server_settings": resolve.server_json(srv)}
    out |= {"model": o["model"], "gpu": o["gpu"], "tensor_parallel_size": o["tensor_parallel_size"]}
    if o["out"] is not None:
        _write_folder(o["out"], out, res, cfg, wl, lat, int(row.steps))
    if o["as_json"]:
        print_json(out)
    else:
        server.print_settings(srv, also=_s1_assumes(o))
        given = o["num_gpu_blocks"] is not None
        more = opt.more_requests(o["trace_file"] is not None)
        _table(res, row, cfg, wl, lat, slo, wall, given, derived, more)
    if row["outcome"] in fail_classes or (OVERLOADED in fail_classes and row["overloaded"]):
        raise typer.Exit(EXIT_FAILURE_VERDICT)


def _to_stderr(lines: list[str]) -> None:
    """Print ``lines`` (warnings) to stderr."""
    for line in lines:
        print(line, file=sys.stderr)


def _server(ctx: typer.Context, o: dict[str, Any]) -> dict[str, Any]:
    """The server settings of this run (``server.resolve_server``): given,
    else vLLM 0.33's defaults for --model/--gpu, else scenario S1's."""
    return server.resolve_server(
        ctx, o, o["model"], o["gpu"], quantization=o["quantization"],
        kv_cache_dtype=o["kv_cache_dtype"], usage=o["usage_context"],
        preemption_mode=o["preemption_mode"].value, compat=o["compat"].value,
    )  # fmt: skip


def _s1_assumes(o: dict[str, Any]) -> str:
    """What a run without --model and --gpu assumes besides the settings: the
    step time and pool, where not given (scenario S1's)."""
    parts = []
    if o["beta_coeffs"] is None and o["latency"] == opt.LatencyKind.linear:
        parts.append("step time S1's fitted linear coefficients")
    if o["num_gpu_blocks"] is None:
        parts.append(f"pool S1's {DEFAULT_NUM_GPU_BLOCKS:,} blocks")
    return "; " + ", ".join(parts) if parts else ""


def _config(ctx: typer.Context, o: dict[str, Any]) -> tuple[SchedulerConfig, Latency, bool]:
    """The step-time model and the scheduler config ``o`` describes, and whether
    num_gpu_blocks was derived from --model/--gpu. Raises ValueError (one line)
    on an option that does not act, a compat conflict or a pool vLLM refuses."""
    rules = dict(
        scheduler_reserve_full_isl=o["scheduler_reserve_full_isl"],
        preemption_mode=o["preemption_mode"].value,
        null_block=o["null_block"],
        enable_prefix_caching=o["enable_prefix_caching"],
    )
    # --compat blis implies these; one the user gave against it is refused, before
    # the inert-option rules (which would ask for what compat forbids).
    compat = o["compat"].value
    rules |= compat_settings(compat, {k: v for k, v in rules.items() if given(ctx, k)})
    # Before the step-time model is built (a measured table loads and speaks).
    check_compat_latency(compat, o["latency"] == opt.LatencyKind.linear)
    reject_inert(ctx, RUN_RULES)
    model, tp, quant, kv_dtype = (
        o[k] for k in ("model", "tensor_parallel_size", "quantization", "kv_cache_dtype")
    )
    hybrid = o["disable_hybrid_kv_cache_manager_given"]
    no_preset = model is not None and o["gpu"] is not None and o["beta_coeffs"] is None
    if compat != "vllm" and no_preset and not resolve.has_linear_preset(model, o["gpu"], tp):
        # resolve.latency's message suggests the roofline, which compat refuses
        raise ValueError(
            f"--compat {compat} needs the linear step time, and there are no linear "
            f"coefficients for {model} on {tp} x {o['gpu']}: pass --beta-coeffs (and "
            "--alpha-coeffs)"
        )
    spec = opt.speculation_from(
        o["speculative_config"], o["spec_acceptance"], o["spec_seed"], o["spec_acceptance_log"]
    )
    lat = opt.step_time(
        o["latency"], model, o["gpu"], tp, o["alpha_coeffs"], o["beta_coeffs"], o["mfu"],
        o["mbu"], o["step_overhead_us"], quant, kv_dtype, o["measured_scale"],
        latency_given=given(ctx, "latency") or compat != "vllm",  # blis: linear only
        speculation=spec,
    )  # fmt: skip

    def pool(explicit: int | None, seqs: int) -> tuple[int, bool]:  # resolve.num_gpu_blocks
        return resolve.num_gpu_blocks(
            explicit, model, o["gpu"], o["gpu_memory_utilization"], o["block_size"], tp,
            DEFAULT_NUM_GPU_BLOCKS, quantization=quant, kv_cache_dtype=kv_dtype,
            max_num_batched_tokens=o["max_num_batched_tokens"], max_num_seqs=seqs,
            full_attention_only=False, simulated=True, disable_hybrid_kv_cache_manager=hybrid,
            speculation=spec,
        )  # fmt: skip

    blocks, derived = pool(o["num_gpu_blocks"], o["max_num_seqs"])
    groups = (o["full_attention_groups"], o["sliding_window_groups"])
    attn = resolve.attention(o["sliding_window"], model, quant, kv_dtype, groups, hybrid)
    kv_block_bytes = resolve.kv_block_bytes(
        o["kv_block_bytes"], model, o["block_size"], tp, quant, kv_dtype, hybrid, spec
    )
    same = ("block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
            "long_prefill_token_threshold", "watermark", "async_scheduling",
            "blis_full_hit_defect", "anti_starvation", "adaptive_window", "adaptive_threshold",
            "adaptive_step", "cpu_swap_blocks", "swap_bandwidth_gbps", "max_concurrency",
            "replicas", "router_seed", "max_steps")  # fmt: skip
    # vLLM raises the block size of a model with linear-attention layers
    # (``resolve.simulated_block_size``); attention_line() names it
    sized = {"block_size": resolve.simulated_block_size(
        o["block_size"], model, tp, quant, kv_dtype, hybrid
    )}  # fmt: skip
    cfg = SchedulerConfig(
        num_gpu_blocks=blocks,
        **({k: o[k] for k in same} | sized),
        **attn,
        **rules,
        **{k: o[k].value for k in ("stop_bound", "compat", "policy", "admission", "router")},
        victim=None if o["victim"] is None else o["victim"].value,
        kv_block_bytes=kv_block_bytes,
        think_time_s=o["think_time"],
        horizon_s=o["horizon"],
        speculation=spec,
    )
    reject_inert_hardware(ctx, cfg.one_full_attention_group, o["num_gpu_blocks"] is not None)
    largest = None
    if derived and cfg.mamba_groups and cfg.max_num_seqs > blocks:  # the pool moves with it
        largest = capacity.largest_starting_max_num_seqs(
            lambda seqs: pool(None, seqs)[0], cfg.max_num_seqs
        )
    cfg.check_vllm_starts(largest)
    clock_bound(cfg, lat)  # before any work: the int64 ns clock cannot wrap
    return cfg, lat, derived


def _workload(o: dict[str, Any]) -> Workload:
    """The trace or synthetic workload ``o`` describes (``command_workload``)."""
    topts = {"start_s": o["trace_start"], "duration_s": o["trace_duration"],
             "rate_scale": o["rate_scale"], "max_requests": o["max_requests"],
             "hash_block_size": o["trace_hash_block_size"]}  # fmt: skip
    lengths = tuple(
        tuple(o[f"{side}_tokens{s}"] for s in ("", "_stdev", "_min", "_max"))
        for side in ("prompt", "output")
    )
    synthetic = (
        o["num_requests"], o["rate"], o["arrival"], o["length_dist"], *lengths, o["gamma_cv"],
    )  # fmt: skip
    prefix = (o["prefix_groups"], o["prefix_len"], o["prefix_share"])
    return command_workload(
        o["trace_file"], o["trace_format"].value, o["trace_columns"], topts, synthetic, prefix,
        o["seed"], o["turns"],
    )  # fmt: skip


def _warnings(cfg: SchedulerConfig, wl: Workload, lat: Latency, o: dict[str, Any]) -> list[str]:
    """Warn now about fields the workload carries that the config ignores and
    BLIS's microsecond truncation; return the start-up and KV-safe warnings,
    printed after the run."""
    return report.startup_warning(cfg) + _kv_safe_warning(cfg, wl, lat)


def _kv_safe_warning(cfg: SchedulerConfig, wl: Workload, lat: Latency) -> list[str]:
    """Warn now about ignored workload fields and BLIS's truncation; return the
    KV-safe warning (``SchedulerConfig.kv_safe_max_num_seqs``)."""
    for message in unused_field_warnings(wl, [cfg]):
        warn(message)
    if cfg.compat == "blis" and _finer_than_ns(lat):
        warn(
            "--compat blis: a coefficient has more than 3 decimals in us; planner keeps whole "
            "ns, so BLIS's truncation to whole us can differ by 1 us on some steps"
        )
    mean_len = wl.mean_request_tokens(cfg.max_model_len)
    safe = cfg.kv_safe_max_num_seqs(mean_len)
    slack = f" + {cfg.kv_slack_tokens:,} of drafts" if cfg.kv_slack_tokens else ""
    if (
        cfg.max_num_seqs <= safe
        or 0 < cfg.max_concurrency <= safe  # clients cap the batch
        or wl.num_requests <= safe  # too few requests to fill more
        or wl.rejected(cfg.max_model_len).all()  # nothing admitted: no batch at all
    ):
        return []
    if safe == 0:
        return [
            "plan: warning: no max_num_seqs is KV-safe for this workload: a request of its mean "
            f"length ({mean_len:,.0f} tokens{slack}) does not fit in {cfg.num_gpu_blocks:,} "
            "blocks even alone by the analytic rule, so even a request running alone may be "
            "preempted or never finish (the run's verdict says which)"
        ]
    return [
        f"plan: warning: max_num_seqs {cfg.max_num_seqs} exceeds the KV-safe limit {safe} for "
        f"this workload (mean request {mean_len:,.0f} tokens{slack} on {cfg.num_gpu_blocks:,} "
        "blocks): "
        "requests admitted together cannot all grow to full length without preemption"
    ]


def _json(res: Any, row: Any, cfg: SchedulerConfig, slo: SLO, derived: bool) -> dict:
    """``plan run --json``: the metrics row, the stuck requests and, for a fleet, each replica."""
    from planner.install_check import provenance

    stuck = res.stuck_requests()
    out: dict = provenance()
    out |= {k: report.json_default(v) if hasattr(v, "item") else v for k, v in row.items()}
    out["stuck_request_ids"] = stuck.tolist()
    out["num_gpu_blocks_sized_at"] = resolve.sized_at_json(
        cfg.max_num_seqs, cfg.max_num_batched_tokens, derived
    )
    out["stuck_preempted_request_ids"] = stuck[res.state.req.npre[0, stuck] > 0].tolist()
    if cfg.replicas > 1:
        out["per_replica"] = report.per_replica(res, slo).to_dict(orient="records")
    out["speculation"] = _speculation_json(cfg)
    return out


def _speculation_json(cfg: SchedulerConfig) -> dict | None:
    """``--json``'s ``speculation`` (``Speculation.as_json``); None without."""
    return None if cfg.speculation is None else cfg.speculation.as_json()


def _table(
    res: Any, row: Any, cfg: SchedulerConfig, wl: Workload, lat: Latency, slo: SLO, wall: float,
    given_blocks: bool, derived: bool, more: str,
) -> None:  # fmt: skip
    """``plan run``'s table output: the summary, each replica, the stuck requests, the gap fix."""
    source = "given" if given_blocks else "default"
    if derived:
        at = resolve.sized_at(cfg.max_num_seqs, cfg.max_num_batched_tokens)
        source = f"derived from presets; {at}"
    report.print_run(wl, cfg.num_gpu_blocks, source, lat, row, wall, slo, cfg, more)
    if cfg.replicas > 1:
        report.print_replicas(report.per_replica(res, slo))
    stuck = res.stuck_requests()
    if row["outcome"] != OK and len(stuck):
        preempted = stuck[res.state.req.npre[0, stuck] > 0]
        h = cfg.horizon_s
        cut = h if h is not None and float(row["sim_end_s"]) >= h else None
        report.print_stuck(str(row["outcome"]), stuck.tolist(), preempted.tolist(), cut)
    if row["outcome"] == LIVELOCKED:
        report.print_gap_fix(cfg)


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


def _finer_than_ns(lat: Latency) -> bool:
    """Whether a linear coefficient (us) is not a whole number of ns."""
    coeffs = (*getattr(lat, "alpha", ()), *getattr(lat, "beta", ()))
    return any(abs(c * 1000 - round(c * 1000)) > 1e-6 for c in coeffs)


def _atomic_parquet(df: object, path: Path) -> None:
    """Write ``df`` (a DataFrame) to ``path`` via a temp file and rename."""
    from planner.sweep.store import write_table

    try:
        write_table(df, path)  # type: ignore[arg-type]
    except OSError as e:
        raise InputError(f"cannot write {path}: {os_error_reason(e)}") from None


def _write_requests(path: Path, res: Any) -> None:
    """``metrics.requests_table`` to ``path`` (.csv or .parquet), atomically."""
    from planner.metrics import requests_table

    write_requests_table(path, requests_table(res))


MAX_TRACE_LOG_ENTRIES = 8_000_000
RUN_FILES = ("run.json", "requests.parquet", "steps.parquet")  # a plan run --out folder


def _check_distinct_outputs(o: dict[str, Any]) -> None:
    """Raise InputError (one line) when two outputs of one run name the same
    file: ``--trace``, ``--requests-out`` and the files ``--out`` writes
    (``RUN_FILES``); the second write would replace the first, whose message
    had already said it was written."""
    named: dict[Path, str] = {}
    files = [("--trace", o["trace"]), ("--requests-out", o["requests_out"])]
    if o["out"] is not None:
        files += [(f"--out ({name})", Path(o["out"]) / name) for name in RUN_FILES]
    for flag, path in files:
        if path is None:
            continue
        key = Path(path).resolve()
        if key in named:
            raise InputError(f"{named[key]} and {flag} name the same file {path}: give two names")
        named[key] = flag


def _write_folder(
    folder: Path, out: dict, res: Any, cfg: SchedulerConfig, wl: Workload, lat: Latency, steps: int
) -> None:
    """``plan run --out``: the result (``run.json``, with the planner's and the
    mirrored vLLM's versions and the command line), per request and, for one
    server, per step; each file atomic, ``run.json`` last (a folder without it
    is not a finished run). The folder was checked before the run."""
    from planner.cli.json_out import dumps
    from planner.sweep.store import atomic_write_bytes

    _write_requests(folder / "requests.parquet", res)
    (folder / "steps.parquet").unlink(missing_ok=True)
    if cfg.replicas == 1:
        _write_trace(folder / "steps.parquet", cfg, wl, lat, steps)
    from planner.metrics import itl_distribution

    record = {"command": ["plan", *sys.argv[1:]], "workload": wl.name, **out}
    if cfg.replicas == 1:  # a fleet's gaps are kept per replica
        record["itl_histogram"] = itl_distribution(res)
    try:
        atomic_write_bytes(folder / "run.json", lambda tmp: Path(tmp).write_text(dumps(record)))
    except OSError as e:
        raise InputError(f"cannot write {folder / 'run.json'}: {os_error_reason(e)}") from None
    print(f"plan: wrote {folder}/ (plan report {folder} draws it)", file=sys.stderr)


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


def register(app: typer.Typer) -> None:
    """Add ``plan run`` to ``app``."""
    app.command(cls=opt.BoundedCommand)(opt.takes(*RUN_OPTIONS)(run))
