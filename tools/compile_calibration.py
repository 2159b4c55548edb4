"""Measure ``kernel.compile_time.PROBES_PER_KERNEL``: per step-loop variant,
the cold compile's CPU seconds over the probe compile's.

Each run is a fresh process with an empty Numba cache (``NUMBA_CACHE_DIR``
set to a new temporary directory): it times ``compile_time.probe_seconds``,
then one ``simulate`` of a single config of the variant, whose compile
``api`` records in ``api.COMPILES``. Prints one line per run and the median
ratio per variant.

    python tools/compile_calibration.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys
from planner import api
from planner.config import SchedulerConfig
from planner.kernel.compile_time import probe_seconds
from planner.workload.arrays import LengthDist, synthetic
caching, extras = json.loads(sys.argv[1])
probe = probe_seconds()
d = LengthDist("constant", 32)
cfg = SchedulerConfig(num_gpu_blocks=200, enable_prefix_caching=caching, async_scheduling=extras)
api.simulate([cfg], synthetic(20, 10.0, d, d, seed=1))
print(json.dumps({"probe_s": probe, "compile_cpu_s": sum(c for _, c in api.COMPILES),
                  "compile_wall_s": sum(w for w, _ in api.COMPILES)}))
"""

VARIANTS = [(False, False), (False, True), (True, False), (True, True)]


def one(variant: tuple[bool, bool]) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        out = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(variant)],
            env=env, capture_output=True, text=True, check=True, cwd=cache,
        ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    ratios: dict[tuple[bool, bool], list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.repeats):
        for v in VARIANTS:  # alternating, so drift hits every variant alike
            r = one(v)
            ratios[v].append(r["compile_cpu_s"] / r["probe_s"])
            print(f"caching={v[0]!s:5} extras={v[1]!s:5} probe {r['probe_s']:.3f} s  "
                  f"compile {r['compile_cpu_s']:.1f} CPU-s {r['compile_wall_s']:.1f} s wall  "
                  f"ratio {ratios[v][-1]:.0f}", flush=True)  # fmt: skip
    for v, rs in ratios.items():
        print(f"PROBES_PER_KERNEL[{v}] = {statistics.median(rs):.0f}  (runs: {len(rs)})")


if __name__ == "__main__":
    main()
