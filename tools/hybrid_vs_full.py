"""The README's hybrid figures: a hybrid model as vLLM 0.33 runs it (its KV
cache groups, sliding-window blocks freed) against the same GPU memory treated
as full attention (vLLM with the hybrid KV cache manager off,
``--disable-hybrid-kv-cache-manager``: every layer full, one group).

    .venv/bin/python tools/hybrid_vs_full.py [--model gemma-3-27b] [--rate 0.35]

Workload: R requests of 8,000 prompt and 2,000 output tokens, Poisson arrivals
(seed 7). Both rows use the same roofline step time (the sliding layers
priced on their window), so only the KV accounting differs.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pandas as pd

from planner import resolve
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.latency.step_time import RooflineLatency
from planner.models import hardware
from planner.workload.arrays import Workload

COLUMNS = [
    "num_gpu_blocks", "completed", "preemptions", "preempted_requests", "decodes_per_step",
    "output_tps", "ttft_s_p99", "tpot_s_p50", "peak_kv_usage", "outcome",
]  # fmt: skip


DEFAULTS = {"model": "gemma-3-27b", "gpu": "H100", "tp": 2, "rate": 0.35, "requests": 400}
HEADER = [
    "| KV accounting | blocks | preemptions | preempted requests | decodes per step "
    "| output tok/s | TTFT p99 s | peak KV | outcome |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---|",
]


def frame(
    model: str, gpu: str, tp: int, rate: float, requests: int, max_model_len: int = 32768
) -> tuple[str, pd.DataFrame]:
    """The workload's name and both runs' metrics, one row each."""
    m, g = hardware.model(model), hardware.gpu(gpu)
    full_m = dataclasses.replace(m, layer_types=("full",) * m.num_layers)
    sizes = [hardware.num_gpu_blocks(x, g, 0.9, 16, tp, 2048, 256) for x in (m, full_m)]
    attn = resolve.simulated_model(m)
    rng = np.random.default_rng(7)
    wl = Workload(
        np.cumsum(rng.exponential(1 / rate, requests)),
        np.full(requests, 8000, np.int32),
        np.full(requests, 2000, np.int32),
        name=f"8,000 + 2,000 tokens, Poisson {rate}/s",
    )
    cfgs = [
        SchedulerConfig(num_gpu_blocks=sizes[0], max_model_len=max_model_len, **attn),
        SchedulerConfig(num_gpu_blocks=sizes[1], max_model_len=max_model_len),
    ]
    df = simulate(cfgs, wl, RooflineLatency(m.name, g.name, tp=tp)).metrics()
    df["decodes_per_step"] = df.decode_tokens / df.steps
    f, w = attn["full_attention_groups"], attn["sliding_window_groups"]
    df.index = [
        f"{f} full + {w} sliding groups, window {attn['sliding_window']:,}",
        "same memory, full attention",
    ]
    return wl.name, df


def table() -> list[str]:
    """docs/sliding-window.md's table at the defaults (``tests/test_doc_tables.py``)."""
    _, df = frame(**DEFAULTS)
    rows = [
        f"| {label} | {r.num_gpu_blocks:,} | {r.preemptions:,} | {r.preempted_requests:,} | "
        f"{r.decodes_per_step:.1f} | {r.output_tps:,.0f} | {r.ttft_s_p99:.1f} | "
        f"{r.peak_kv_usage:.2f} | {r.outcome} |"
        for label, r in df.iterrows()
    ]
    return HEADER + rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, value in DEFAULTS.items():
        ap.add_argument(f"--{name}", type=type(value), default=value)
    ap.add_argument("--max-model-len", type=int, default=32768)
    a = ap.parse_args()
    name, df = frame(a.model, a.gpu, a.tp, a.rate, a.requests, a.max_model_len)
    print(name)
    print(df[COLUMNS].to_string())


if __name__ == "__main__":
    main()
