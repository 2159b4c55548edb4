"""``plan calibrate``: fit the chosen step-time model to a CSV of measured steps
(``planner.calibrate``) and print the options that reproduce the fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from planner import cli_options as opt


def calibrate(
    steps_csv: Annotated[
        Path,
        typer.Argument(
            help="CSV, one row per engine step: prefill_tokens, decode_requests, "
            "kv_tokens (the decodes' summed KV tokens), step_ms.",
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
    as_json: opt.AsJson = False,
) -> None:
    """Fit a step-time model to measured step times and print its options.

    linear fits --beta-coeffs (non-negative least squares); roofline fits
    --mfu, --mbu and --step-overhead-us for --model on --gpu; measured fits
    --measured-scale, a factor on aiconfigurator's table (its overhead is
    --step-overhead-us, kept). Prints the fit error (RMS, mean and max
    relative). Exit status: 0 fitted; 2 bad input (a missing column, a
    non-numeric value, no rows).
    """
    from planner import calibrate as cal
    from planner import resolve

    if step_overhead_us and latency != opt.LatencyKind.measured:
        raise ValueError("--step-overhead-us is fitted here; give it only with --latency measured")
    if latency == opt.LatencyKind.linear:
        hw = {
            "--model": model is not None,
            "--gpu": gpu is not None,
            "--tensor-parallel-size": tensor_parallel_size != 1,
            "--quantization": quantization is not None,
            "--kv-cache-dtype": kv_cache_dtype != "auto",
        }
        if any(hw.values()):
            named = ", ".join(k for k, v in hw.items() if v)
            raise ValueError(f"--latency linear fits no hardware; drop {named}")
    steps = cal.read_steps(steps_csv)
    if latency == opt.LatencyKind.linear:
        fit, _ = cal.fit_linear(steps)
    else:
        base = resolve.latency(
            latency.value, model, gpu, tensor_parallel_size, None, None, None, None,
            step_overhead_us if latency == opt.LatencyKind.measured else 0.0,
            quantization, kv_cache_dtype,
        )  # fmt: skip
        if latency == opt.LatencyKind.roofline:
            fit, _ = cal.fit_roofline(steps, base)  # type: ignore[arg-type]
        else:
            fit, _ = cal.fit_measured(steps, base)  # type: ignore[arg-type]
    if as_json:
        out = {"options": fit.options, "steps": fit.n, "rms_ms": fit.rms_ms}
        print(json.dumps({**out, "mean_rel_error": fit.mean_rel, "max_rel_error": fit.max_rel}))
        return
    print(fit.options)
    print(fit.describe())


def register(app: typer.Typer) -> None:
    """Add ``plan calibrate`` to ``app``."""
    app.command("calibrate", cls=opt.BoundedCommand)(calibrate)
