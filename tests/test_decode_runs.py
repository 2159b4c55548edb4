"""The decode fast path's bookkeeping between runs (``kernel/step.py``):
after a run whose next step cannot allocate, the next attempt is skipped
(``NO_RUN_NEXT``), which is exact only if ``_next_step_needs`` counts the
blocks that step needs. Checked against a direct count, request by request."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.kernel.step import _next_step_needs


@settings(max_examples=300, deadline=None)
@given(
    bs=st.integers(1, 32),
    n=st.integers(2, 200),
    firsts=st.lists(st.integers(-3, 40), min_size=1, max_size=40),
)
def test_next_step_needs_counts_the_requests_needing_a_block(bs, n, firsts):
    """Each request first needs a new block ``j1`` steps ahead, then one
    every bs steps (``_decode_scan``); step n + 1 needs one block for each
    request with n + 1 >= j1 and n + 1 - j1 divisible by bs. When some j1
    lies outside 1..bs the scan's histogram does not hold every request and
    the answer is -1 (unknown: no attempt is skipped)."""
    hist = np.zeros(bs + 1, dtype=np.int64)  # the scratch's size (``step._init``)
    inside = [j for j in firsts if 1 <= j <= bs]
    for j in inside:
        hist[j] += 1
    got = _next_step_needs(hist, np.int64(n), np.int64(len(firsts)), np.int64(bs))
    if len(inside) < len(firsts):
        assert got == -1
        return
    want = sum(1 for j in firsts if n + 1 >= j and (n + 1 - j) % bs == 0)
    assert got == want
