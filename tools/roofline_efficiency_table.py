"""Print docs/validate.md's table of the roofline efficiencies that
aiconfigurator-core's measured kernels imply, and one transfer of them to a
GPU without such data. Run: ``python tools/roofline_efficiency_table.py``
(about 20 s; needs the optional extra ``aic``).

For each GPU with aiconfigurator vLLM data (``latency.aic_systems.AIC_SYSTEMS``)
and two dense models, the measured forward-pass model
(``latency.measured.Estimator``) is evaluated on a fixed set of steps: decode
batches of 1 to 256 requests at 256, 1,024 and 4,096 tokens of context each,
and prefill chunks of 128 to 8,192 tokens alone or beside 16 or 64 decodes at
1,024 tokens. ``plan calibrate``'s roofline fit (``latency.fit.fit_roofline``:
MFU and MBU on a 0.01 grid, the per-step overhead in closed form) is run on
those steps at tensor parallelism 1. Nothing here reads a real run: the
steps are aiconfigurator's kernel measurements composed by its own model.

The transfer: the RTX 4090 has no aiconfigurator data; the L40S is the GPU
with data on the same die (AD102, compute capability 8.9). The shipped RTX
4090 run (``planner/data/real-runs-llmservingsim``) is replayed by ``plan
validate`` with the L40S fit for Llama-3.1-8B, beside the roofline's default
efficiencies, to show whether a same-architecture fit carries over.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from plan_json import plan_json

from planner.latency import measured
from planner.latency.aic_systems import AIC_SYSTEMS
from planner.latency.fit import COLUMNS, fit_roofline
from planner.latency.step_time import RooflineLatency

MODELS = ("llama-3.1-8b", "qwen3-32b")
DECODES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = (256, 1024, 4096)
CHUNKS = (128, 512, 2048, 8192)
BESIDE = (0, 16, 64)
RUN = (
    Path(__file__).resolve().parents[1]
    / "planner"
    / "data"
    / "real-runs-llmservingsim"
    / "RTX4090_Llama-3.1-8B"
)
SOURCE_GPU, TARGET_GPU, MODEL = "L40S", "RTX-4090", "llama-3.1-8b"


def steps(est: measured.Estimator) -> dict[str, np.ndarray]:
    """The fixed steps (module docstring) in ``fit.read_steps``' form."""
    rows = [(0, d, d * a) for d in DECODES for a in CONTEXTS]
    rows += [(p, d, d * 1024) for p in CHUNKS for d in BESIDE]
    cols = [np.array(c, dtype=np.int64) for c in zip(*rows, strict=True)]
    ms = np.array([est.ms(p, d, kv, 0) for p, d, kv in rows])
    return dict(zip(COLUMNS, [*cols, ms], strict=True))


def fitted(model: str, gpu: str) -> tuple[RooflineLatency, float]:
    """The roofline fitted to aiconfigurator's steps of ``model`` on one
    ``gpu``, and the fit's mean |relative error|."""
    name, gname, aic_model, system = measured.resolve(model, gpu, None, "auto")
    est = measured.Estimator(aic_model, system, 1, None, "auto")
    fit, lat = fit_roofline(steps(est), RooflineLatency(name, gname, 1))
    return lat, fit.mean_rel


def replay(options: list[str]) -> str:
    """Signed errors of the RTX 4090 run's TPOT and E2E means and throughput."""
    o = plan_json(["validate", str(RUN), "--model", MODEL, *options])
    err = {(r["metric"], r["stat"]): r["error"] for r in o["comparison"]}
    keys = (("tpot_s", "mean"), ("e2e_s", "mean"), ("throughput_rps", ""))
    return " | ".join(f"{err[k]:+.1%}" for k in keys)


def table() -> list[str]:
    """The markdown lines docs/validate.md quotes."""
    lines = [
        "| GPU | model | MFU | MBU | overhead | fit's mean error |",
        "|---|---|---|---|---|---|",
    ]
    fits = {}
    for gpu in AIC_SYSTEMS:
        for model in MODELS:
            lat, err = fitted(model, gpu)
            fits[gpu, model] = lat
            lines.append(
                f"| {gpu} | {model} | {lat.mfu:.2f} | {lat.mbu:.2f} | "
                f"{lat.overhead_us / 1000:.2f} ms | {err:.1%} |"
            )
    src = fits[SOURCE_GPU, MODEL]
    lines += [
        "",
        f"| {TARGET_GPU} run, roofline | TPOT mean | E2E mean | throughput |",
        "|---|---|---|---|",
        f"| default (MFU 0.5, MBU 0.8, no overhead) | {replay(['--latency', 'roofline'])} |",
    ]
    opts = ["--latency", "roofline", "--mfu", f"{src.mfu:g}", "--mbu", f"{src.mbu:g}"]
    for label, oh in (("with its overhead", src.overhead_us), ("without overhead", 0.0)):
        row = replay([*opts, "--step-overhead-us", f"{oh:g}"])
        lines.append(
            f"| {SOURCE_GPU}'s {MODEL} fit (MFU {src.mfu:.2f}, MBU {src.mbu:.2f}), {label} "
            f"| {row} |"
        )
    return lines


if __name__ == "__main__":
    print("\n".join(table()))
