"""``metrics.row_percentiles`` is ``np.nanpercentile(..., axis=1)`` bit for bit
(issue 34 item 2: numpy's per-row loop was most of a grid's metrics time)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from planner.metrics import row_percentiles


@pytest.mark.parametrize("higher", [False, True])
def test_equals_numpy_on_random_rows_with_nans_ties_and_empty_rows(higher):
    rng = np.random.default_rng(20261204)
    pcts = (0, 37, 50, 90, 99, 100)
    for t in range(1500):
        c, r = int(rng.integers(1, 6)), int(rng.integers(1, 40))
        kind = t % 3
        x = (
            rng.uniform(0, 10, (c, r))
            if kind == 0
            else rng.integers(0, 5, (c, r)).astype(float)  # ties
            if kind == 1
            else np.exp(rng.normal(0, 5, (c, r)))  # wide range
        )
        x[rng.uniform(size=(c, r)) < rng.uniform()] = np.nan
        if t % 7 == 0:
            x[0, :] = np.nan  # a row with no value
        if t % 11 == 0:
            x[rng.uniform(size=(c, r)) < 0.3] = 1e18  # metrics' unserved stand-in
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows
            want = np.nanpercentile(x, pcts, axis=1, method="higher" if higher else "linear")
        got = row_percentiles(x, pcts, higher=higher)
        assert np.array_equal(want, got, equal_nan=True), (x, want, got)
