"""Write docs/calibrate_bench_example.json: a ``vllm bench serve --save-result
--save-detailed`` result for the README's request-level ``plan calibrate``
example. Not GPU measurements: the planner's own replay of 80 Poisson requests
(4 per second, prompts ~ N(600, 300) in [16, 2000], outputs ~ N(48, 24) in
[2, 160], seed 5) on Llama-3.1-8B / one H100 at gpu_memory_utilization 0.9,
max_num_batched_tokens 8192, under the roofline at MFU 0.35 and MBU 0.60, with
3% lognormal noise on every TTFT and ITL (seed 6), so a fit has a known answer.
Usage: python tools/calibrate_bench_example.py"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from planner import resolve
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.latency.step_time import RooflineLatency
from planner.metrics import per_request
from planner.workload.arrays import LengthDist, synthetic

OUT = Path(__file__).resolve().parents[1] / "docs" / "calibrate_bench_example.json"
MFU, MBU = 0.35, 0.60
START = 5000.0  # a perf_counter() origin: the file's times are absolute, as vLLM's


def main() -> None:
    """Simulate the requests and write their per-request results."""
    wl = synthetic(
        80,
        4.0,
        LengthDist("gaussian", 600, 300, 16, 2000),
        LengthDist("gaussian", 48, 24, 2, 160),
        arrival="poisson",
        seed=5,
    )
    blocks, _ = resolve.num_gpu_blocks(
        None, "llama-3.1-8b", "H100", 0.9, 16, 1, None, max_num_batched_tokens=8192,
        max_num_seqs=256,
    )  # fmt: skip
    cfg = SchedulerConfig(num_gpu_blocks=blocks, max_num_batched_tokens=8192)
    lat = RooflineLatency("llama-3.1-8b", "H100", mfu=MFU, mbu=MBU)
    q = per_request(simulate([cfg], wl, lat))
    rng = np.random.default_rng(6)
    out = wl.output_tokens.tolist()
    ttft = q["ttft"][0] * rng.lognormal(0.0, 0.03, len(out))
    itls = [
        [round(float(q["tpot"][0][i] * g), 6) for g in rng.lognormal(0.0, 0.03, n - 1)]
        for i, n in enumerate(out)
    ]
    doc = {
        "backend": "vllm",
        "completed": len(out),
        "start_times": [round(START + float(t), 6) for t in wl.arrival_s],
        "input_lens": wl.prompt_tokens.tolist(),
        "output_lens": out,
        "ttfts": [round(float(t), 6) for t in ttft],
        "itls": itls,
        "errors": [""] * len(out),
    }
    OUT.write_text(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
