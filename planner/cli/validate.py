"""``plan validate RUN``: replay a real run and print predicted against measured.

The run's own engine settings take effect (``planner.answers.validate``);
an option the run also states must agree with it (no silent overrides), and
what neither states takes vLLM 0.33's default (``server.resolve_server``).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from planner import bounds, resolve
from planner.cli import options as opt
from planner.cli import server
from planner.cli.errors import InputError
from planner.cli.inert import given
from planner.cli.json_out import print_json
from planner.cli.result_folder import check_result_folder
from planner.config import SchedulerConfig
from planner.install_check import provenance
from planner.latency.step_time import RooflineLatency
from planner.models import hardware, vllm_defaults

# Settings a run may state (meta.json's engine_kwargs and kv_cache), by field.
STATED = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "block_size",
    "enable_prefix_caching",
    "async_scheduling",
    "gpu_memory_utilization",
    "num_gpu_blocks",
    "tensor_parallel_size",
    "kv_cache_dtype",
)


def validate(
    ctx: typer.Context,
    run: Annotated[
        Path,
        typer.Argument(
            help="A run folder (meta.json + requests.jsonl, as LLMServingSim records real vLLM "
            "runs) or a vllm bench serve --save-result --save-detailed JSON.",
            show_default=False,
        ),
    ],
    model: opt.Model = None,
    gpu: opt.Gpu = None,
    tensor_parallel_size: opt.TensorParallelSize = 1,
    num_gpu_blocks: opt.NumGpuBlocks = None,
    max_num_seqs: opt.MaxNumSeqs = None,
    max_num_batched_tokens: opt.MaxNumBatchedTokens = None,
    max_model_len: opt.MaxModelLen = None,
    block_size: opt.BlockSize = None,
    enable_prefix_caching: opt.EnablePrefixCaching = None,
    async_scheduling: opt.AsyncScheduling = None,
    gpu_memory_utilization: opt.GpuMemoryUtilization = None,
    latency: opt.LatencyOpt = opt.LatencyKind.linear,
    alpha_coeffs: opt.AlphaCoeffs = None,
    beta_coeffs: opt.BetaCoeffs = None,
    mfu: opt.Mfu = None,
    mbu: opt.Mbu = None,
    step_overhead_us: opt.StepOverheadUs = 0.0,
    measured_scale: opt.MeasuredScale = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            help="Also draw predicted against measured per request (E2E, TTFT) and TTFT over "
            "the run to this PNG file."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Also write the comparison to this folder for plan report: validate.json (the "
            "--json result) and requests.parquet (measured and predicted per request)."
        ),
    ] = None,
    as_json: opt.AsJson = False,
) -> None:
    """Replay a real benchmark run and print predicted against measured TTFT,
    TPOT and E2E (mean, p50, p90, p99) and throughput, with signed errors.

    The run's recorded engine settings and KV pool are used as they are; an
    option the run also states must agree with it. Exit status: 0 compared;
    2 bad input (a run without per-request timings, settings the planner
    cannot express, a GPU it has no specs for).
    """
    from planner.answers import validate as v
    from planner.api import simulate
    from planner.metrics import per_request

    if out is not None:
        check_result_folder(out, VALIDATE_FILES, "plan validate result")  # before any work
    if plot is not None and plot.suffix.lower() != ".png":  # before any work or note
        raise InputError(f"--plot: expected a .png file name, got {str(plot)!r}")
    r = v.read_run(run)
    eng = r.engine
    if int(eng.get("pipeline_parallel_size") or 1) > 1:
        raise v.RunError(
            f"{run}: pipeline_parallel_size {eng['pipeline_parallel_size']} is not modelled "
            "(tensor and data parallelism only); no replay"
        )
    dp = int(eng.get("data_parallel_size") or 1)  # a Count (``answers.validate``)
    if dp > bounds.MAX_REPLICAS:
        raise v.RunError(
            f"{run}: data_parallel_size {dp:,}: at most {bounds.MAX_REPLICAS:,} ranks are "
            "replayed (one replica each)"
        )
    o = dict(ctx.params)
    for k in STATED:
        mine = given(ctx, k)
        if eng.get(k) is not None and mine and o[k] != eng[k]:
            flag = "--" + k.replace("_", "-")
            raise v.RunError(f"{flag} {o[k]} contradicts the run, which states {eng[k]}")
        if not mine and eng.get(k) is not None:
            o[k] = eng[k]
    name = model or eng.get("model")
    if name is None:
        raise v.RunError(f"{run}: names no model; pass --model")
    if model is None:
        _check_recorded_model(run, name)
    recorded = v.gpu_preset(r.gpu_name)
    if gpu is not None and recorded is not None and hardware.gpu(gpu).name != recorded:
        raise v.RunError(f"--gpu {gpu} contradicts the run, which ran on {r.gpu_name}")
    gpu_name = gpu or recorded
    if gpu_name is None and r.gpu_name:
        raise v.RunError(
            f"{run}: no GPU preset for {r.gpu_name!r}; pass --gpu with a preset whose specs match"
        )
    if gpu_name is None and latency != opt.LatencyKind.linear:
        raise v.RunError(
            f"{run}: names no GPU; pass --gpu (the {latency.value} step time needs it)"
        )
    tp = int(o.get("tensor_parallel_size") or 1)
    kv_dtype = str(o.get("kv_cache_dtype") or "auto")
    srv = server.resolve_server(ctx, o, name, gpu_name, kv_cache_dtype=kv_dtype)
    s = server.values(srv)
    lat = opt.step_time(
        latency, name, gpu_name, tp, alpha_coeffs, beta_coeffs, mfu, mbu, step_overhead_us,
        None, kv_dtype, measured_scale, latency_given=given(ctx, "latency"),
    )  # fmt: skip
    blocks, derived = resolve.num_gpu_blocks(
        o.get("num_gpu_blocks"), name, gpu_name, s["gpu_memory_utilization"], s["block_size"], tp,
        None, max_num_seqs=s["max_num_seqs"], max_num_batched_tokens=s["max_num_batched_tokens"],
        kv_cache_dtype=kv_dtype, full_attention_only=False, simulated=True,
        data_parallel_size=dp,
    )  # fmt: skip
    if dp > 1 and isinstance(lat, RooflineLatency):
        lat = dataclasses.replace(lat, data_parallel_size=dp)
    attn = resolve.attention(None, name, None, kv_dtype)
    fields = {k: s[k] for k in vllm_defaults.FIELDS if k != "gpu_memory_utilization"}
    fields["block_size"] = resolve.simulated_block_size(s["block_size"], name, tp, None, kv_dtype)
    cfg = SchedulerConfig(num_gpu_blocks=blocks, **fields, **attn, **dp_fleet(dp))
    cfg.check_vllm_starts()
    wl = r.workload()
    with opt.say_compile([cfg], wl, lat):
        res = simulate([cfg], wl, lat)
    pr = per_request(res)
    # lower bounds (requests the replay did not finish) are not predictions
    predicted = {k: np.where(pr[f"{k[:-2]}_censored"][0], np.nan, pr[k[:-2]][0]) for k in v.METRICS}
    table = v.compare(r, predicted)
    if plot is not None:
        _plot(plot, r, predicted, f"plan validate: {r.name} on {tp} x {gpu_name}, {lat.describe()}")
    source = "sized from the presets" if derived else "the run logged"
    if given(ctx, "num_gpu_blocks"):
        source = "given"
    pool = f"{blocks:,} blocks ({source})"
    if dp > 1:
        pool = f"{pool} per rank, {dp} data-parallel ranks"
    record = {
        **provenance(),
        "run": str(run),
        "run_name": r.name,
        "run_vllm_version": r.engine.get("vllm_version"),
        "requests": int(len(r.prompt)),
        "model": name,
        "gpu": gpu_name,
        "tensor_parallel_size": tp,
        "data_parallel_size": dp,
        "data_parallel_notes": dp_notes(dp, lat),
        "num_gpu_blocks": blocks,
        "latency_model": lat.describe(),
        "server_settings": resolve.server_json(srv),
        "comparison": table.to_dict("records"),
    }
    if out is not None:
        _write_folder(out, record, r, predicted)
    if as_json:
        print_json(record)
        return
    _print(r, table, name, gpu_name, tp, pool, lat.describe(), srv)
    for note in record["data_parallel_notes"]:
        print(f"note: {note}")


# vLLM 0.33's data-parallel front end (``vllm/v1/engine/core_client.py``,
# ``DPLBAsyncMPClient.get_core_engine_for_request``) sends a request to the
# rank with the lowest max(in flight, waiting + running), plus 6 x waiting x
# (KV cache usage - 0.5) when usage is above half, rotating where the scan
# starts to break ties. least_outstanding (fewest in flight, ties by KV in
# use, then the lowest rank) is the same rule while no rank has requests
# waiting on a KV cache more than half full.
DP_ROUTER = "least_outstanding"


def dp_fleet(dp: int) -> dict:
    """SchedulerConfig fields for ``dp`` data-parallel ranks: each is a vLLM
    engine core with its own scheduler and KV cache (``vllm/v1/engine/core.py``,
    ``DPEngineCoreProc``), so each is a replica behind ``DP_ROUTER``."""
    return {"replicas": dp, "router": DP_ROUTER} if dp > 1 else {}


def dp_notes(dp: int, lat: Any) -> list[str]:
    """How a replay of ``dp`` data-parallel ranks is modelled and what it
    leaves out, for people; only the roofline step time ``lat`` prices the
    split (``RooflineLatency.data_parallel_size``)."""
    if dp <= 1:
        return []
    notes = [
        f"data_parallel_size {dp}: {dp} engine cores, each a replica with its own scheduler and "
        f"KV pool of the size above (a mixture of experts' routed experts split over the "
        f"{dp} ranks), routed by {DP_ROUTER} (vLLM's DP load balancer, DPLBAsyncMPClient, "
        "while no rank queues on a KV cache over half full); the replicas step independently, "
        "whereas vLLM steps a mixture of experts' ranks together (an idle rank runs a dummy "
        "batch): not modelled"
    ]
    if isinstance(lat, RooflineLatency):
        notes.append(
            f"step time: one of {dp} ranks: 1/{dp} of the routed experts read, touched by the "
            f"tokens of all {dp} ranks (taken as {dp} x its own batch), plus the MoE layers' "
            "all-gather and reduce-scatter at the GPU link's bandwidth (RooflineLatency)"
        )
    else:
        notes.append(
            f"step time: {lat.describe().split(' ')[0]} prices each rank as the whole model, "
            "every expert and no data-parallel collective (the split is not modelled)"
        )
    return notes


def _plot(path: Path, r: Any, predicted: dict, title: str) -> None:
    """``plots.validate.validate_png`` for this run (``path`` a .png name,
    checked before the replay); an unwritable path is one line."""
    from planner.cli.errors import os_error_reason
    from planner.plots.validate import validate_png

    measured = {"ttft_s": r.ttft_s, "e2e_s": r.e2e_s}
    try:
        validate_png(r.arrival_s, measured, predicted, title, path)
    except OSError as e:
        raise InputError(f"cannot write {path}: {os_error_reason(e)}") from None
    print(f"plan: drew {path}", file=sys.stderr)


VALIDATE_FILES = ("validate.json", "requests.parquet")  # a plan validate --out folder


def _write_folder(folder: Path, record: dict, r: Any, predicted: dict) -> None:
    """``plan validate --out``: ``requests.parquet`` (per request: arrival,
    tokens, measured and predicted TTFT/TPOT/E2E seconds, NaN where a replay
    did not finish one), then ``validate.json`` (atomic each). A folder
    holding anything else was refused before the replay."""
    import pandas as pd

    from planner.cli.errors import os_error_reason
    from planner.cli.json_out import dumps
    from planner.sweep.store import atomic_write_bytes

    rows = {"request": np.arange(len(r.prompt)), "arrival_s": r.arrival_s,
            "prompt_tokens": r.prompt, "output_tokens": r.output}  # fmt: skip
    for m, measured in (("ttft_s", r.ttft_s), ("tpot_s", r.tpot_s), ("e2e_s", r.e2e_s)):
        rows[f"measured_{m}"] = measured
        rows[f"predicted_{m}"] = predicted[m]
    df = pd.DataFrame(rows)
    try:
        atomic_write_bytes(folder / "requests.parquet", lambda tmp: df.to_parquet(tmp, index=False))
        text = dumps(record)
        atomic_write_bytes(folder / "validate.json", lambda tmp: Path(tmp).write_text(text))
    except OSError as e:
        raise InputError(f"cannot write {folder}: {os_error_reason(e)}") from None
    print(f"plan: wrote {folder}/ (plan report {folder} draws it)", file=sys.stderr)


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.1%}"


def _check_recorded_model(run: object, name: str) -> None:
    """Raise RunError (one line) when the model the run records is not one the
    catalog or a preset names, suggesting the preset of the same name when one
    exists (a base model and its Instruct variant share an architecture)."""
    from planner.answers import validate as v

    try:
        hardware.model(name)
    except hardware.HardwareError:
        base = name.rsplit("/", 1)[-1].lower()
        hint = " (plan models lists them; or a path to its config.json)"
        for guess in (base, base.split("-instruct")[0]):  # an Instruct variant: the base's shapes
            try:
                hint = f" (e.g. --model {hardware.model(guess).name}, its architecture)"
                break
            except hardware.HardwareError:
                continue
        raise v.RunError(
            f"{run}: the run records model {name!r}, which no preset or catalog entry names; "
            f"pass --model{hint}"
        ) from None


def _print(
    r: Any, table: Any, name: str, gpu: str | None, tp: int, pool: str, lat: str, srv: dict
) -> None:
    c = Console(markup=False, soft_wrap=True)
    c.print(f"plan validate: {r.name}, {len(r.prompt):,} requests ({r.source})")
    ver = r.engine.get("vllm_version")
    named = r.engine.get("model")
    given = f" (given; the run names {named})" if named and named != name else ""
    c.print(
        f"server: {name}{given} on {tp} x {gpu or 'no GPU'}, pool {pool}"
        + (f"; the run used vLLM {ver}" if ver else "")
    )
    server.print_settings(srv)
    c.print(f"step time: {lat}")
    t = Table("metric", "stat", "measured", "predicted", "error")
    for row in table.itertuples():
        unit = "" if row.metric == "throughput_rps" else " s"
        t.add_row(row.metric, row.stat, f"{row.measured:.4g}{unit}",
                  f"{row.predicted:.4g}{unit}", _pct(row.error))  # fmt: skip
    c.print(t)
    c.print("error = predicted / measured - 1; nothing was fitted to this run")


def register(app: typer.Typer) -> None:
    """Add ``plan validate`` to ``app``."""
    app.command("validate", cls=opt.BoundedCommand)(validate)
