"""Print the dry-run estimate of a sweep next to its measured run time.

    .venv/bin/python tools/estimate_vs_measured.py sweeps/quick.toml [--workers N]

Loads (or compiles) the kernel, prints the estimate (``planner.estimate``, what
``plan sweep --dry-run`` prints), runs the whole sweep into a temporary
directory (``planner.run_sweep``, removed afterwards) and prints the measured
wall time and the ratio. Also prints the load average before and after: the
figures mean little on a busy machine. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    """Parse the arguments, estimate, run, print."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", help="sweep spec (TOML)")
    ap.add_argument("--workers", type=int, default=None, help="kernel threads (default: all)")
    args = ap.parse_args()

    from planner import estimate, load_spec, run_sweep

    spec = load_spec(args.spec)
    print(f"load average before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    est = estimate(spec, workers=args.workers)
    print(f"estimate: {est.describe()}")
    t = time.perf_counter()
    df = run_sweep(spec, workers=args.workers)
    wall = time.perf_counter() - t
    print(f"measured: {wall:.2f} s for {len(df):,} configs (run_sweep, compile excluded)")
    print(f"estimate / measured: {est.seconds / wall:.2f}")
    print(f"load average after:  {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
