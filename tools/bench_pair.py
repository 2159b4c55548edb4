"""Two planner installs side by side: kernel CPU on the S1 grid, alternating.

    python tools/bench_pair.py OLD_PYTHON NEW_PYTHON [--pairs 3] [--grid 32]
        [--big-only] [--big-repeats 1]

Each PYTHON is the interpreter of a virtual environment holding one commit's
planner (an editable install's finder wins over PYTHONPATH, so each commit
needs its own venv). For each case (the plain S1 grid, the same with prefix
caching, the 144-config grid with async scheduling and prefix caching
(vLLM's defaults; a slower path, so a smaller grid), and the 4,096-config
grid 64), the two run one after the other
``--pairs`` times (old, new, old, new, ...), each in a fresh process that
loads the kernel, warms it and times ``simulate`` over ``bench.s1_grid``:
best CPU seconds of 3 calls (``time.process_time``, one Numba thread, so
other load on a shared machine disturbs it least). Printed: the median of
each side, new/old, and every pair. Works with installs from before the
package layout of issue 31 (``planner.bench``, ``planner.latency``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile

CHILD = r"""
import sys, time
from planner.api import simulate
try:
    from planner.answers.bench import s1_workload, s1_grid
except ImportError:
    from planner.bench import s1_workload, s1_grid
try:
    from planner.latency.step_time import LinearLatency
except ImportError:
    from planner.latency import LinearLatency
side, mode, repeats = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
opts = {"0": {}, "1": {"enable_prefix_caching": True}}.get(
    mode, {"enable_prefix_caching": True, "async_scheduling": True}
)
wl, lat = s1_workload(), LinearLatency()
simulate(s1_grid(2, **opts), wl, lat)
cfgs = s1_grid(side, **opts)
best = float("inf")
for _ in range(repeats):
    c0 = time.process_time()
    simulate(cfgs, wl, lat, check_invariants=False)
    best = min(best, time.process_time() - c0)
print(best)
"""

CASES = (
    ("S1 grid {g}, plain", "{g}", "0", 3),
    ("S1 grid {g}, caching", "{g}", "1", 3),
    ("S1 grid 12, async + caching", "12", "2", 3),
)
BIG = ("S1 grid 64 (4,096 configs), plain", "64", "0", 1)


def child_cpu(python: str, child: str, *args: str) -> float:
    """CPU seconds a child script prints on its last line, run by ``python``
    with one Numba thread (also ``tools/fleet_speed.py``'s)."""
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    # From a neutral directory: ``python -c`` puts the working directory first
    # on sys.path, so run inside a checkout it would import that checkout's
    # planner instead of the venv's.
    out = subprocess.run(
        [python, "-c", child, *args],
        env=env,
        cwd=tempfile.gettempdir(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(out.strip().splitlines()[-1])


def _cpu(python: str, side: str, caching: str, repeats: int) -> float:
    return child_cpu(python, CHILD, side, caching, str(repeats))


def main() -> None:
    """Parse the arguments, run the pairs, print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--grid", type=int, default=32)
    ap.add_argument("--big-only", action="store_true", help="only the 4,096-config grid")
    ap.add_argument("--big-repeats", type=int, default=BIG[3], help="calls per 4,096-grid run")
    a = ap.parse_args()
    big = (*BIG[:3], a.big_repeats)
    cases = [(n.format(g=a.grid), s.format(g=a.grid), c, r) for n, s, c, r in CASES] + [big]
    if a.big_only:
        cases = [big]
    for py in (a.old, a.new):  # compile or load each variant once, untimed
        for _, _, caching, _ in cases[:3]:
            _cpu(py, "2", caching, 1)
    print(f"{'case':<36} {'old CPU-s':>10} {'new CPU-s':>10} {'new/old':>8}   pairs (old/new)")
    for name, side, caching, repeats in cases:
        pairs = [
            (_cpu(a.old, side, caching, repeats), _cpu(a.new, side, caching, repeats))
            for _ in range(a.pairs)
        ]
        old = statistics.median(p[0] for p in pairs)
        new = statistics.median(p[1] for p in pairs)
        each = ", ".join(f"{o:.2f}/{n:.2f}" for o, n in pairs)
        print(f"{name:<36} {old:>10.2f} {new:>10.2f} {new / old:>8.2f}   {each}")


if __name__ == "__main__":
    main()
