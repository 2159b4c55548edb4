"""How long a cold compile of the step loop will take on this machine.

A first run compiles the kernel (``api._compile_if_cold``), which takes
tens of CPU-seconds; the tool says so before it starts, with an estimate
measured here rather than a number typed in: it compiles ``_probe`` (a
small function, never cached, so always a real compile), times it, and
scales it by how many such compiles one kernel variant costs
(``PROBES_PER_KERNEL``). The ratio is machine-independent to the extent
that both are the same kind of work (Numba's Python front end plus LLVM);
``tools/compile_calibration.py`` measures it, and ``docs/speed.md`` gives
the estimate against the measured compile.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

# Cold compile CPU of one step-loop variant (with the compile-ahead child on
# 2 cores, ``kernel.warm``) over the steady ``_probe`` compile's, by variant:
# (prefix caching, ``kernel.variant.level``: 0 plain, 1 extras, 2 extras and
# heavy). Measured with ``tools/compile_calibration.py`` on 2026-12-07 (2-core
# x86-64 VM, Python 3.11, Numba 0.68): medians of 3 cold runs each,
# alternating (probe about 0.12 s). The plain variant's (False, 0) measured
# again after the decode fast path's preempting step, the same evening: 3
# cold runs of its ``tools/compile_calibration.py`` child (probe 0.107 s,
# compile 21.4-23.4 CPU-s, ratios 201, 205 and 219; docs/speed.md).
PROBES_PER_KERNEL = {
    (False, 0): 205.0,
    (False, 1): 204.0,
    (False, 2): 304.0,
    (True, 0): 305.0,
    (True, 1): 377.0,
    (True, 2): 556.0,
}


def _probe_source(a, b, n):  # noqa: ANN001, ANN202 (compiled fresh by probe_seconds)
    """Loops, branches and array reads and writes, as the kernel has."""
    s = 0
    for i in range(n):
        if a[i] > b[i]:
            s += a[i] - b[i]
        elif a[i] < 0:
            s -= a[i]
        else:
            b[i] = a[i] + s
    while n > 0 and s > 0:
        s //= 2
        n -= 1
    return s, n


def probe_seconds(repeats: int = 5) -> float:
    """CPU seconds of one compile of ``_probe_source`` in this process: the
    fastest of ``repeats`` fresh compiles after the first two (those also pay
    Numba's one-time set-up, which the kernel's compile does not repeat; 2.0x
    and 1.5x the steady time on 2026-12-04). About 0.12 s on a 2-core
    machine; ``repeats`` >= 3."""
    x = np.zeros(4, dtype=np.int64)
    took = []
    for _ in range(max(repeats, 3)):
        t = time.process_time()
        njit(cache=False)(_probe_source)(x, x.copy(), 4)
        took.append(time.process_time() - t)
    return min(took[2:])


def estimate_cpu_s(variants: set[tuple[bool, int]], probe_s: float | None = None) -> float:
    """Estimated CPU seconds to compile the step-loop ``variants`` ((prefix
    caching, ``variant.level``) pairs) cold: ``probe_s`` (default: measured now,
    ``probe_seconds``) times ``PROBES_PER_KERNEL`` summed over them."""
    if probe_s is None:
        probe_s = probe_seconds()
    return probe_s * sum(PROBES_PER_KERNEL[v] for v in variants)
