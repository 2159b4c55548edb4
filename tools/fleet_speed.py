"""Two planner installs side by side on the replicas' kernel: its first
compile and its run time, alternating.

    python tools/fleet_speed.py OLD_PYTHON NEW_PYTHON [--pairs 2]

Each PYTHON is the interpreter of a virtual environment holding one commit's
planner (an editable install's finder wins over PYTHONPATH, so each commit
needs its own venv; see tools/bench_pair.py). Every measurement runs in a
fresh process with one Numba thread, from a neutral directory:

- compile: the lone server's kernel is loaded (or compiled, untimed), then
  every cached ``fleet.simulate_fleet*`` file is deleted from the planner's
  Numba cache folders and one ``simulate(..., replica_path=True)`` on two S1
  configs at 2 replicas is timed (CPU seconds, compile included), for the
  plain variant and for prefix caching + async scheduling (vLLM's default
  server), each with an open loop and with closed-loop clients;
- run: warm CPU seconds of ``simulate`` (best of 3) on S1 grid 12 (144
  configs) without replicas, at 2 and 4 replicas (open loop), and at 2
  replicas with 64 closed-loop clients.

Prints each case's old and new figures, pair by pair. Deletes cached fleet
kernels of both installs (they recompile on their next use).
"""

from __future__ import annotations

import argparse

from bench_pair import child_cpu as _cpu  # tools/ is the script's folder

COMPILE = r"""
import glob, os, sys, time
from dataclasses import replace
from planner.api import simulate
from planner.latency.step_time import LinearLatency
try:
    from planner.answers.bench import s1_grid, s1_workload
except ImportError:
    from planner.bench import s1_grid, s1_workload
opts = {"plain": {}, "default": {"enable_prefix_caching": True, "async_scheduling": True}}
wl, lat = s1_workload(), LinearLatency()
conc = 16 if sys.argv[2] == "closed" else 0
cfgs = [replace(c, max_concurrency=conc) for c in s1_grid(2, **opts[sys.argv[1]])]
simulate(cfgs, wl, lat)  # the lone server's kernel: loaded or compiled, untimed
base = os.path.expanduser("~/.cache/vllm-capacity-planner/numba")
for f in glob.glob(base + "/*/kernel_*/fleet.simulate_fleet*"):
    os.remove(f)
c0 = time.process_time()
simulate([replace(c, replicas=2) for c in cfgs], wl, lat)
print(time.process_time() - c0)
"""

RUN = r"""
import sys, time
from dataclasses import replace
from planner.api import simulate
from planner.latency.step_time import LinearLatency
try:
    from planner.answers.bench import s1_grid, s1_workload
except ImportError:
    from planner.bench import s1_grid, s1_workload
wl, lat = s1_workload(), LinearLatency()
grid = s1_grid(12)
cfgs = {
    "lone": [c for c in grid for _ in (2, 4)],
    "open": [replace(c, replicas=r) for c in grid for r in (2, 4)],
    "closed": [replace(c, replicas=2, max_concurrency=64) for c in grid],
}[sys.argv[1]]
simulate(cfgs[:2], wl, lat)
best = float("inf")
for _ in range(3):
    c0 = time.process_time()
    simulate(cfgs, wl, lat, check_invariants=False)
    best = min(best, time.process_time() - c0)
print(best)
"""

COMPILE_CASES = (("plain", "open"), ("plain", "closed"), ("default", "open"), ("default", "closed"))
RUN_CASES = ("lone", "open", "closed")


def main() -> None:
    """Parse the arguments, run the pairs, print every figure."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--pairs", type=int, default=2)
    a = ap.parse_args()
    print(f"{'case':<44} pairs (old / new CPU-s)")
    for variant, loop in COMPILE_CASES:
        pairs = [
            (_cpu(a.old, COMPILE, variant, loop), _cpu(a.new, COMPILE, variant, loop))
            for _ in range(a.pairs)
        ]
        each = ", ".join(f"{o:.2f} / {n:.2f}" for o, n in pairs)
        print(f"{f'first fleet compile, {variant}, {loop} loop':<44} {each}")
    for case in RUN_CASES:
        pairs = [(_cpu(a.old, RUN, case), _cpu(a.new, RUN, case)) for _ in range(a.pairs)]
        each = ", ".join(f"{o:.3f} / {n:.3f}" for o, n in pairs)
        print(f"{f'warm run, S1 grid 12, {case}':<44} {each}")


if __name__ == "__main__":
    main()
