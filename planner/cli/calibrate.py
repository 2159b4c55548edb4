"""``plan calibrate``: fit the chosen step-time model to measured step times
(``planner.latency.fit``) or to a benchmark's per-request results
(``planner.answers.calibrate``), and print the options that reproduce the fit."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from planner.cli import options as opt
from planner.cli import server
from planner.cli.inert import reject_inert
from planner.cli.json_out import print_json
from planner.inert import CALIBRATE_RULES
from planner.models import vllm_defaults

if TYPE_CHECKING:
    from planner.config import SchedulerConfig


def calibrate(
    ctx: typer.Context,
    measurements: Annotated[
        Path,
        typer.Argument(
            help="A CSV of engine steps (prefill_tokens, decode_requests, kv_tokens, "
            "step_ms), or the JSON of vllm bench serve --save-result --save-detailed "
            "(per-request TTFT and ITLs, replayed on the scheduler options given).",
            show_default=False,
        ),
    ],
    latency: opt.LatencyOpt = opt.LatencyKind.linear,
    model: opt.Model = None,
    gpu: opt.Gpu = None,
    tensor_parallel_size: opt.TensorParallelSize = 1,
    quantization: opt.Quantization = None,
    kv_cache_dtype: opt.KvCacheDtype = "auto",
    step_overhead_us: opt.StepOverheadUs = 0.0,
    alpha_coeffs: opt.AlphaCoeffs = None,
    beta_coeffs: opt.BetaCoeffs = None,
    num_gpu_blocks: opt.NumGpuBlocks = None,
    gpu_memory_utilization: opt.GpuMemoryUtilization = None,
    usage_context: opt.UsageContextOpt = vllm_defaults.SERVE,
    block_size: opt.BlockSize = None,
    max_num_seqs: opt.MaxNumSeqs = None,
    max_num_batched_tokens: opt.MaxNumBatchedTokens = None,
    max_model_len: opt.MaxModelLen = None,
    async_scheduling: opt.AsyncScheduling = None,
    as_json: opt.AsJson = False,
) -> None:
    """Fit a step-time model to measurements and print its options.

    From engine steps (a CSV file): linear fits --beta-coeffs (non-negative least
    squares); roofline fits --mfu, --mbu and --step-overhead-us for --model on
    --gpu; measured fits --measured-scale (its overhead is --step-overhead-us,
    kept). From a vllm bench serve result (a JSON file): the requests are replayed
    at their send times on the server the scheduler options describe, and
    linear fits beta (prefill and per-step factors on --beta-coeffs or the
    preset), roofline --mfu and --mbu, measured --measured-scale, so that the
    per-request TTFT and TPOT match. Prints the fit error. Exit status: 0
    fitted; 2 bad input (a missing column or key, a non-numeric value, no
    rows).
    """
    from planner.latency import fit as cal

    reject_inert(ctx, CALIBRATE_RULES)
    if is_bench_result(measurements):
        _calibrate_requests(ctx, measurements, ctx.params)
        return
    if step_overhead_us and latency != opt.LatencyKind.measured:
        raise ValueError("--step-overhead-us is fitted here; give it only with --latency measured")
    if latency == opt.LatencyKind.linear:
        _no_hardware(model, gpu, tensor_parallel_size, quantization, kv_cache_dtype)
    steps = cal.read_steps(measurements)
    if latency == opt.LatencyKind.linear:
        fit, _ = cal.fit_linear(steps)
    else:
        base = opt.step_time(
            latency, model, gpu, tensor_parallel_size, None, None, None, None,
            step_overhead_us if latency == opt.LatencyKind.measured else 0.0,
            quantization, kv_cache_dtype,
        )  # fmt: skip
        if latency == opt.LatencyKind.roofline:
            fit, _ = cal.fit_roofline(steps, base)  # type: ignore[arg-type]
        else:
            fit, _ = cal.fit_measured(steps, base)  # type: ignore[arg-type]
    if as_json:
        out = {"options": fit.options, "steps": fit.n, "rms_ms": fit.rms_ms}
        print_json({**out, "mean_rel_error": fit.mean_rel, "max_rel_error": fit.max_rel})
        return
    print(fit.options)
    print(fit.describe())


def _no_hardware(
    model: str | None, gpu: str | None, tp: int, quantization: str | None, kv_dtype: str
) -> None:
    hw = {
        "--model": model is not None,
        "--gpu": gpu is not None,
        "--tensor-parallel-size": tp != 1,
        "--quantization": quantization is not None,
        "--kv-cache-dtype": kv_dtype != "auto",
    }
    if any(hw.values()):
        named = ", ".join(k for k, v in hw.items() if v)
        raise ValueError(f"--latency linear fits no hardware; drop {named}")


def is_bench_result(path: Path) -> bool:
    """A .json measurements file is a vllm bench serve result (request level);
    anything else is read as a steps CSV."""
    return path.suffix.lower() == ".json"


def _calibrate_requests(ctx: typer.Context, path: Path, o: dict) -> None:
    """The request-level fit (``planner.answers.calibrate``) for ``calibrate``'s
    parameters ``o`` (``click.Context.params``), on the server they describe
    (``server.resolve_server``: given, else vLLM's defaults for --model/--gpu)."""
    from planner import resolve
    from planner.answers import calibrate as creq
    from planner.config import SchedulerConfig

    srv = server.resolve_server(
        ctx, o, o["model"], o["gpu"], quantization=o["quantization"],
        kv_cache_dtype=o["kv_cache_dtype"], usage=o["usage_context"],
    )  # fmt: skip
    o = {**o, **server.values(srv)}

    run = creq.read_bench_result(path)
    base = opt.step_time(
        o["latency"], o["model"], o["gpu"], o["tensor_parallel_size"], o["alpha_coeffs"],
        o["beta_coeffs"], None, None, o["step_overhead_us"], o["quantization"], o["kv_cache_dtype"],
    )  # fmt: skip
    blocks, derived = resolve.num_gpu_blocks(
        o["num_gpu_blocks"], o["model"], o["gpu"], o["gpu_memory_utilization"], o["block_size"],
        o["tensor_parallel_size"], None, quantization=o["quantization"],
        kv_cache_dtype=o["kv_cache_dtype"], max_num_batched_tokens=o["max_num_batched_tokens"],
        max_num_seqs=o["max_num_seqs"],
    )  # fmt: skip
    if blocks is None:
        raise ValueError(
            "a request-level fit needs the pool: --num-gpu-blocks, or --model and --gpu"
        )
    cfg = SchedulerConfig(
        num_gpu_blocks=blocks,
        block_size=o["block_size"],
        max_num_seqs=o["max_num_seqs"],
        max_num_batched_tokens=o["max_num_batched_tokens"],
        max_model_len=o["max_model_len"],
        async_scheduling=o["async_scheduling"],
        enable_prefix_caching=o["enable_prefix_caching"],
    )
    cfg.check_vllm_starts()
    with opt.say_compile([cfg], latency=base):
        fit = creq.fit_requests(run, cfg, base, f"bench {path.name}")
    fit = dataclasses.replace(fit, options=f"{fit.options}{_replayed_on(cfg)}")
    if o["as_json"]:
        finite = {"ttft": fit.ttft_err, "tpot": fit.tpot_err}
        finite = {k: (v if math.isfinite(v) else None) for k, v in finite.items()}
        out = {"options": fit.options, "requests": fit.requests, "failed": fit.failed}
        out |= {"unserved": fit.unserved, "at_edge": list(fit.at_edge)}
        out |= {"at_limit": list(fit.at_limit)}
        out |= {"ttft_median_rel_error": finite["ttft"], "tpot_median_rel_error": finite["tpot"]}
        out["percentiles_s"] = {
            k: {"measured": m, "simulated": s} for k, (m, s) in fit.table.items()
        }
        out["num_gpu_blocks"] = blocks
        out["num_gpu_blocks_sized_at"] = resolve.sized_at_json(
            o["max_num_seqs"], o["max_num_batched_tokens"], derived
        )
        out["server_settings"] = resolve.server_json(srv)
        print_json(out)
        return
    at = resolve.sized_at(o["max_num_seqs"], o["max_num_batched_tokens"])
    print(fit.options)  # first: the line to copy
    print(f"num_gpu_blocks {blocks:,} ({f'derived from presets; {at}' if derived else 'given'})")
    server.print_settings(srv)
    print(fit.describe())


def _replayed_on(cfg: SchedulerConfig) -> str:
    """The replay's pool (given or sized) and every scheduler option it ran
    with, so that the printed line, pasted into ``plan run``, replays the fit
    on the same server whatever defaults ``plan run`` would pick."""
    out = f" --num-gpu-blocks {cfg.num_gpu_blocks}"
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size"):
        out += f" --{name.replace('_', '-')} {getattr(cfg, name)}"
    for name in ("async_scheduling", "enable_prefix_caching"):
        out += f" --{'' if getattr(cfg, name) else 'no-'}{name.replace('_', '-')}"
    return out


def register(app: typer.Typer) -> None:
    """Add ``plan calibrate`` to ``app``."""
    app.command("calibrate", cls=opt.BoundedCommand)(calibrate)
