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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-27b")
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--rate", type=float, default=0.35)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--max-model-len", type=int, default=32768)
    a = ap.parse_args()
    m, g = hardware.model(a.model), hardware.gpu(a.gpu)
    full_m = dataclasses.replace(m, layer_types=("full",) * m.num_layers)
    sizes = [hardware.num_gpu_blocks(x, g, 0.9, 16, a.tp, 2048, 256) for x in (m, full_m)]
    attn = resolve.simulated_model(m)
    rng = np.random.default_rng(7)
    r = a.requests
    wl = Workload(
        np.cumsum(rng.exponential(1 / a.rate, r)),
        np.full(r, 8000, np.int32),
        np.full(r, 2000, np.int32),
        name=f"8,000 + 2,000 tokens, Poisson {a.rate}/s",
    )
    cfgs = [
        SchedulerConfig(num_gpu_blocks=sizes[0], max_model_len=a.max_model_len, **attn),
        SchedulerConfig(num_gpu_blocks=sizes[1], max_model_len=a.max_model_len),
    ]
    df = simulate(cfgs, wl, RooflineLatency(m.name, g.name, tp=a.tp)).metrics()
    df["decodes_per_step"] = df.decode_tokens / df.steps
    f, w = attn["full_attention_groups"], attn["sliding_window_groups"]
    df.index = [
        f"{f} full + {w} sliding groups, window {attn['sliding_window']}",
        "same memory, full attention",
    ]
    print(wl.name)
    print(df[COLUMNS].to_string())


if __name__ == "__main__":
    main()
