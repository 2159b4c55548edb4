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
from planner.kernel.variant import VARIANTS
from planner.speculative import Speculation
from planner.workload.arrays import LengthDist, synthetic
caching, level = json.loads(sys.argv[1])
probe = probe_seconds()
d = LengthDist("constant", 32)
spec = Speculation("ngram", 2, (0.7,)) if level == 2 else None  # a heavy feature
cfg = SchedulerConfig(num_gpu_blocks=200, enable_prefix_caching=caching,
                      async_scheduling=level >= 1, speculation=spec)
wl = synthetic(20, 10.0, d, d, seed=1)
assert api.features_for([cfg], wl) == VARIANTS[level]
api.simulate([cfg], wl)
print(json.dumps({"probe_s": probe, "compile_cpu_s": sum(c for _, c in api.COMPILES),
                  "compile_wall_s": sum(w for w, _ in api.COMPILES)}))
"""

# (prefix caching, kernel.variant.level): plain, extras (async), heavy (async + n-gram drafts)
VARIANTS = [(c, v) for c in (False, True) for v in (0, 1, 2)]


def one(variant: tuple[bool, int]) -> dict:
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
    ratios: dict[tuple[bool, int], list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.repeats):
        for v in VARIANTS:  # alternating, so drift hits every variant alike
            r = one(v)
            ratios[v].append(r["compile_cpu_s"] / r["probe_s"])
            print(f"caching={v[0]!s:5} level={v[1]} probe {r['probe_s']:.3f} s  "
                  f"compile {r['compile_cpu_s']:.1f} CPU-s {r['compile_wall_s']:.1f} s wall  "
                  f"ratio {ratios[v][-1]:.0f}", flush=True)  # fmt: skip
    for v, rs in ratios.items():
        print(f"PROBES_PER_KERNEL[{v}] = {statistics.median(rs):.0f}  (runs: {len(rs)})")


if __name__ == "__main__":
    main()
