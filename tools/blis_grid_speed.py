"""docs/blis.md's speed table: BLIS's 8 x 8 S1 grid under three settings.

    python tools/blis_grid_speed.py

The grid is the golden one (tests/golden/blis/grid.csv.gz: 64 max_num_seqs x
num_gpu_blocks pairs), on S1-exact with a 120 s horizon. Each setting is
timed as one ``simulate`` call over the 64 configurations, compiled first,
best wall time of 3 calls: ``--compat blis`` with the defect switch, the
plain restart setting (restart preemption, no null block, no whole-sequence
reservation) and vLLM's defaults (recompute preemption).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from pathlib import Path

import pandas as pd

from planner.api import simulate
from planner.config import SchedulerConfig, blis_config
from planner.workload.traces import s1_exact

GRID = pd.read_csv(Path(__file__).resolve().parents[1] / "tests/golden/blis/grid.csv.gz")
BASE = dict(block_size=16, max_num_batched_tokens=2048, max_model_len=4096, horizon_s=120.0)


def settings() -> dict[str, list[SchedulerConfig]]:
    """The three settings' configurations over the grid."""
    pairs = list(zip(GRID.max_num_seqs, GRID.num_gpu_blocks, strict=True))
    vllm = [SchedulerConfig(num_gpu_blocks=int(b), max_num_seqs=int(s), **BASE) for s, b in pairs]
    restart = [
        dataclasses.replace(
            c, preemption_mode="restart", null_block=False, scheduler_reserve_full_isl=False
        )
        for c in vllm
    ]
    compat = [
        blis_config(num_gpu_blocks=int(b), max_num_seqs=int(s), blis_full_hit_defect=True, **BASE)
        for s, b in pairs
    ]
    return {
        "`--compat blis`": compat,
        "the plain restart setting above": restart,
        "vLLM's defaults, with the fast path": vllm,
    }


def main() -> None:
    wl = s1_exact()
    print(f"Run {datetime.date.today()} with `python tools/blis_grid_speed.py`.\n")
    print("| setting | time for the grid |")
    print("|---|---|")
    for name, cfgs in settings().items():
        simulate(cfgs[:1], wl)  # compile or load this variant
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            simulate(cfgs, wl)
            best = min(best, time.perf_counter() - t0)
        print(f"| {name} | {best:.2f} s |")


if __name__ == "__main__":
    main()
