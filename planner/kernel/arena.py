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

How: ``Arenas`` keeps two buffers per thread, each the size the batch's
largest configuration needs (``state.scratch_layout``): an int32 one whose
front is the livelock snapshot, and a ``uint8`` one from which the prefix
cache carves its typed arrays (``take_i32``/``take_i64``), each starting at
a multiple of ``ALIGN`` bytes. The kernel writes every entry it later reads
before reading it, so nothing depends on what an earlier configuration left
in the buffers. The sizes are computed in plain Python, so sizing compiles
nothing.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import njit

ALIGN = 64  # bytes: every carved array starts on a cache line


@njit(cache=True)
def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of ``ALIGN``."""
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


@njit(cache=True)
def _span(arena: np.ndarray, off: int, nbytes: int) -> np.ndarray:
    """``arena[off:off + nbytes]``. Raises ValueError past the arena's end
    (Numba would clamp the slice, and the kernel write past the view)."""
    if off + nbytes > arena.shape[0]:
        raise ValueError("kernel arena too small (state.scratch_layout)")
    return arena[off : off + nbytes]


@njit(cache=True)
def take_i32(arena: np.ndarray, off: int, n: int) -> tuple[np.ndarray, int]:
    """An (n,) int32 view of ``arena`` (uint8, 1-D) at byte ``off``, and the
    byte offset after it (``aligned``). Raises ValueError if it does not fit."""
    return _span(arena, off, 4 * n).view(np.int32), off + aligned(4 * n)


@njit(cache=True)
def take_i64(arena: np.ndarray, off: int, n: int) -> tuple[np.ndarray, int]:
    """An (n,) int64 view of ``arena`` at byte ``off`` (a multiple of 8), and
    the byte offset after it. Raises ValueError if it does not fit."""
    return _span(arena, off, 8 * n).view(np.int64), off + aligned(8 * n)


class Arenas:
    """Reusable scratch buffers, one pair per thread (module docstring).

    Create one per batch of configurations with the largest sizes any of them
    needs (``step.scratch_sizes``; ``api._run_kernel``), so a thread
    allocates once however the batch's sizes are ordered. Its buffers live as
    long as it does, one pair per worker thread (``state.kernel_scratch_bytes``
    counts one config's scratch per running thread)."""

    def __init__(self, snap_entries: int, cache_bytes: int) -> None:
        self.sizes = (max(int(snap_entries), 1), max(int(cache_bytes), ALIGN))
        self._local = threading.local()

    def get(self) -> tuple[np.ndarray, np.ndarray]:
        """This thread's (snapshot (entries,) int32, prefix-cache arena
        (bytes,) uint8) buffers, allocated on first use."""
        bufs = getattr(self._local, "bufs", None)
        if bufs is None:
            snap = np.empty(self.sizes[0], dtype=np.int32)
            bufs = (snap, np.empty(self.sizes[1], dtype=np.uint8))
            self._local.bufs = bufs
        return bufs
