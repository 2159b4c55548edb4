"""Two cold ``plan run``s at once on one empty Numba cache: wall and CPU.

Measures what ``planner.kernel.warm.variant_lock`` saves when two processes
on one machine would compile the same kernel variant at the same time
(pytest-xdist or Dask workers, two commands): with the lock the second waits
and loads the first's compile from the cache.

    python tools/two_cold_runs.py [PLAN]   # PLAN: the plan executable (default: plan)

Prints the wall seconds of the pair and the CPU seconds of both processes
and their children (``resource.getrusage(RUSAGE_CHILDREN)``).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time


def main() -> None:
    plan = sys.argv[1] if len(sys.argv) > 1 else "plan"
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen(
                [plan, "run", "--num-requests", str(n)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for n in (20, 30)
        ]
        codes = [p.wait() for p in procs]
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"two cold plan runs at once: {wall:.1f} s wall, {cpu:.1f} CPU-s (exit {codes})")


if __name__ == "__main__":
    main()
