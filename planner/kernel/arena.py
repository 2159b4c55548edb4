"""Scratch memory a worker thread reuses from one configuration to the next.

Why: a configuration's large scratch (the livelock detector's snapshot, and
with prefix caching the block pool, its hash map and the block tables:
``state.kernel_scratch_bytes``) is megabytes on a large pool. Allocated
afresh for every configuration, each page of it is mapped, faulted in and
zeroed by the operating system again, because glibc's ``malloc`` hands
blocks this large back with ``munmap`` when they are freed. On the 32 x 32
S1 grid with prefix caching that was about a tenth of the run's CPU time
(2026-12-01, 2-core machine: the grid took 5.7-5.8 CPU-s with glibc told to
keep freed memory, ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``,
against 6.4-6.5 without).

How: ``Arenas`` keeps three buffers per thread, each the size the batch's
largest configuration needs (``state.scratch_layout``): an int32 one whose
front is the livelock snapshot, and an int32 and an int64 one that the
prefix cache slices its arrays from (``prefix_cache.new_cache``). Typed
buffers need no byte views, which cost Numba compile time. The kernel writes
every entry it later reads before reading it, so nothing depends on what an
earlier configuration left in the buffers. The sizes are computed in plain
Python, so sizing compiles nothing.
"""

from __future__ import annotations

import threading

import numpy as np


class Arenas:
    """Reusable scratch buffers, one set per thread (module docstring).

    Create one per batch of configurations with the largest sizes any of them
    needs (``step.scratch_sizes``; ``api._run_kernel``), so a thread
    allocates once however the batch's sizes are ordered. Its buffers live as
    long as it does, one set per worker thread (``state.kernel_scratch_bytes``
    counts one config's scratch per running thread)."""

    def __init__(self, snap: int, i32: int, i64: int) -> None:
        """Sizes in entries: the snapshot (int32), the prefix cache's int32
        and int64 arenas."""
        self.sizes = (max(int(snap), 1), max(int(i32), 1), max(int(i64), 1))
        self._local = threading.local()

    def get(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This thread's (snapshot int32, cache int32, cache int64) buffers,
        allocated on first use."""
        bufs = getattr(self._local, "bufs", None)
        if bufs is None:
            types = (np.int32, np.int32, np.int64)
            bufs = tuple(np.empty(n, dtype=t) for n, t in zip(self.sizes, types, strict=True))
            self._local.bufs = bufs
        return bufs
