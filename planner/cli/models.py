"""``plan models``: the model catalog and the GPU presets, each with its source.
Listing only; the data are in ``planner.models.catalog`` and ``planner.models.hardware``."""

from __future__ import annotations

import typer
from rich.console import Console

from planner.cli import options as opt
from planner.cli.json_out import print_json
from planner.models import catalog, hardware
from planner.models.config_json import KINDS


def models(as_json: opt.AsJson = False) -> None:
    """List the catalog models (ids and preset aliases for --model) and the GPUs
    (for --gpu), with parameter counts, attention types and sources."""
    rows = []
    for mid, e in catalog.entries().items():
        m = catalog.spec(mid)
        kinds = {k: m.layer_types.count(k) for k in KINDS}
        rows.append(
            {
                "id": mid,
                "aliases": e.get("aliases", []),
                "family": e["family"],
                "params_b": round(m.params / 1e9, 2),
                "layers": {k: v for k, v in kinds.items() if v},
                "mla": bool(m.mla_dim),
                "quantization": m.quantization,
                "source": e["source"],
                "recorded": e["recorded"],
            }
        )
    gpus = [
        {"name": g.name, "memory_gib": g.memory_gib, "bf16_tflops": g.bf16_flops / 1e12,
         "hbm_tb_s": g.hbm_bytes_per_s / 1e12, "source": hardware.GPU_SOURCES[g.name],
         "recorded": hardware.GPU_SOURCES_RECORDED}
        for g in hardware.GPUS.values()
    ]  # fmt: skip
    if as_json:
        print_json({"models": rows, "gpus": gpus})
        return
    c = Console(markup=False, soft_wrap=True)
    c.print("models (--model: a Hugging Face id, an alias, or a path to a config.json):")
    for r in rows:
        layers = ", ".join(f"{v} {k}" for k, v in r["layers"].items()) + (
            " MLA" if r["mla"] else ""
        )
        alias = f" ({', '.join(r['aliases'])})" if r["aliases"] else ""
        c.print(
            f"  {r['id']}{alias}: {r['family']}, {r['params_b']:g}B params, {layers} layers, "
            f"quantization {r['quantization'] or 'none'}"
        )
    c.print("GPUs (--gpu): memory GiB, bf16 dense TFLOP/s, memory TB/s:")
    for r in gpus:
        c.print(
            f"  {r['name']}: {r['memory_gib']:g} GiB, {r['bf16_tflops']:g} TFLOP/s, "
            f"{r['hbm_tb_s']:g} TB/s"
        )
    c.print(
        "sources: each model's config.json on Hugging Face and each GPU's datasheet "
        "(plan models --json lists them)"
    )


def register(app: typer.Typer) -> None:
    """Add ``models`` to the ``plan`` app."""
    app.command("models")(models)
