"""Inter-token latency (ITL) histogram: exact integer bins over token gaps.

vLLM bench (``vllm/benchmarks/serve.py``, ``calculate_metrics``) takes ITL
percentiles over every gap between consecutive output tokens of every request.
A run cannot keep every gap (C configs x R requests x outputs), so the kernel
counts them per config in a fixed histogram of gaps in integer nanoseconds,
HdrHistogram-style (log-linear, integer edges, no floating point):

- gaps 0..15 ns: one bin each (bin = gap);
- a gap g >= 16 ns with e = floor(log2 g) falls in bin
  16 * (e - 3) + (g >> (e - 4)) - 16, i.e. each octave [2^e, 2^(e+1)) is cut
  into 16 equal bins of width 2^(e - 4); bin i >= 16 holds
  [(16 + i % 16) << (i // 16 - 1), (17 + i % 16) << (i // 16 - 1)).
- gaps >= 2^MAX_OCTAVE ns (about 4.9 h) go to the last bin.

A bin's width is at most 1/16 of its lower edge, so a percentile reported at the
bin's midpoint is within 1/33 (3.1 %) of the true gap percentile
(``GAP_RESOLUTION``). The kernel (``planner.kernel.step``) and the reference
engine (``planner.reference``) both fill it; this module is plain integer code
so that both compute the same bins.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SUB_BITS = 4  # 16 bins per octave
SUB = 1 << SUB_BITS
MAX_OCTAVE = 44  # 2^44 ns ~ 4.9 h: the top bin holds that and above
NBINS = SUB * (MAX_OCTAVE - SUB_BITS + 1)
GAP_RESOLUTION = 1 / (2 * SUB + 1)  # largest relative error of a bin midpoint


@njit(cache=True, inline="always")
def gap_bin(gap_ns):  # noqa: ANN001, ANN201 (jitted)
    """Bin of a gap of ``gap_ns`` (int, >= 0) nanoseconds (module docstring)."""
    g = max(gap_ns, 0)
    if g < SUB:
        return g
    e = 0  # floor(log2 g), by halving the range
    for s in (32, 16, 8, 4, 2, 1):
        if (g >> (e + s)) != 0:
            e += s
    if e >= MAX_OCTAVE:
        return NBINS - 1
    return SUB * (e - SUB_BITS + 1) + (g >> (e - SUB_BITS)) - SUB


def bin_edges_ns(i: int) -> tuple[int, int]:
    """[lower, upper) edges of bin i in ns (the last bin's upper edge is open:
    returned as its nominal edge)."""
    if i < SUB:
        return i, i + 1
    octave = i // SUB - 1 + SUB_BITS
    shift = octave - SUB_BITS
    sub = i % SUB
    return (SUB + sub) << shift, (SUB + sub + 1) << shift


def gap_bins(gaps_ns: np.ndarray) -> np.ndarray:
    """``gap_bin`` of every element of an int64 array of gaps in ns (negative
    gaps count as 0), vectorized: the same integer arithmetic, the octave from
    ``np.frexp`` (exact: every gap below 2^53 ns is a float64 integer).
    Returns an int64 array of the same shape."""
    g = np.maximum(np.asarray(gaps_ns, dtype=np.int64), 0)
    e = np.frexp(g.astype(np.float64))[1].astype(np.int64) - 1  # floor(log2 g) for g >= 1
    shift = np.maximum(e - SUB_BITS, 0)
    log = SUB * (e - SUB_BITS + 1) + (g >> shift) - SUB
    return np.where(g < SUB, g, np.where(e >= MAX_OCTAVE, NBINS - 1, log)).astype(np.int64)


def percentiles_s(
    hist: np.ndarray, percentiles: tuple[int, ...], inf_count: np.ndarray | None = None
) -> np.ndarray:
    """Gap percentiles from histograms, seconds, at bin midpoints.

    ``hist``: (C, NBINS) int64 counts; ``inf_count``: (C,) int64 gaps above
    every bin (+inf: gaps never produced, ``planner.metrics``), None = none.
    Nearest-rank: percentile p is the bin holding the ceil(p/100 x N)-th
    smallest of the N gaps (+inf when that rank falls among the +inf ones).
    Returns (len(percentiles), C) float64; NaN for a config with no gap."""
    c = hist.shape[0]
    out = np.full((len(percentiles), c), np.nan)
    mids = np.array([sum(bin_edges_ns(i)) / 2 for i in range(NBINS)]) / 1e9
    mids[0] = 0.0
    cum = np.cumsum(hist, axis=1)
    finite = cum[:, -1]
    total = finite + (0 if inf_count is None else np.asarray(inf_count, dtype=np.int64))
    for j, p in enumerate(percentiles):
        rank = np.ceil(p / 100 * total)
        for ci in np.flatnonzero(total > 0):
            r = max(rank[ci], 1)
            out[j, ci] = np.inf if r > finite[ci] else mids[int(np.searchsorted(cum[ci], r))]
    return out
