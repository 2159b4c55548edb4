"""Unsigned indices for the kernel's hot loops.

Numba wraps a signed array index (a negative one counts from the end,
``numba/np/arrayobj.py``, ``fix_integer_index``): every read pays a sign test
and a reload of the array's length, which a loop touching many arrays keeps
on the stack. An unsigned index skips both. Request ids, block ids and ring
positions are never negative where they index, so the hot loops index with
``uidx(i)`` and keep the signed value for everything else (arithmetic,
comparisons and calls, where an unsigned integer would mix into float64 or
compile another specialisation).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def uidx(i):  # noqa: ANN001, ANN201 (jitted: int -> uint64)
    """``i`` (an integer >= 0) as an unsigned 64-bit index. About 10% of the
    S1 grid's CPU in the step loop's per-request loops (2026-12-04, one
    thread, best of 3, alternating with the commit before)."""
    return np.uint64(i)
