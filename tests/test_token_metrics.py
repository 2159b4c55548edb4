"""Per-token metrics (issue 13 item 5): ITL, max token stall, queueing delay to
first scheduled, time-averaged KV usage. Expected values are derived by hand
from the linear step-time model, not read from a run."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import STEP_LATENCY, run_reference
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.kernel import state as S
from planner.kernel.token_gaps import NBINS, bin_edges_ns, gap_bin, percentiles_s
from planner.latency.step_time import SEED_ALPHA_US, SEED_BETA_US, LinearLatency
from planner.workload.arrays import Workload

S1_LAT = LinearLatency(alpha=SEED_ALPHA_US, beta=SEED_BETA_US)
B0, B1, B2, _A0, _A1, A2 = S1_LAT.ns()
MNBT = 8192


def _long_prompt_case() -> tuple[SchedulerConfig, Workload]:
    """The issue's case: one request (4,094 prompt / 8,192 output) decoding, a
    65,535-token prompt with 1 output token arriving 5 s later."""
    cfg = SchedulerConfig(
        num_gpu_blocks=20_000,
        block_size=16,
        max_num_seqs=256,
        max_num_batched_tokens=MNBT,
        max_model_len=131_072,
    )
    wl = Workload(
        np.array([0.0, 5.0]),
        np.array([4094, 65_535], np.int32),
        np.array([8192, 1], np.int32),
        name="long-prompt",
    )
    return cfg, wl


@pytest.fixture(scope="module")
def long_prompt():
    cfg, wl = _long_prompt_case()
    res = simulate([cfg], wl, S1_LAT)
    return res, res.metrics().iloc[0], res.request_tokens(0)


def test_a_long_prefill_stalls_the_decoding_request_by_one_chunk_step(long_prompt):
    """While the 65,535-token prompt is prefilled, each step carries the decode
    and an 8,191-token chunk: the decoding request's largest gap is that step,
    b0 + 8,191 b1 + b2 (+ alpha2 per ITL sample), at least 0.147 s, while its
    TPOT stays near a plain decode step (b0 + b2 + alpha2, ~9.1 ms): nine slow
    gaps among 8,191."""
    res, row, req = long_prompt
    chunk_step_s = (B0 + B1 * (MNBT - 1) + B2) / 1e9
    assert chunk_step_s >= 0.147
    assert req.max_token_stall_s[0] == pytest.approx(chunk_step_s + A2 / 1e9, abs=1e-9)
    assert row.max_token_stall_s == pytest.approx(chunk_step_s + A2 / 1e9, abs=1e-9)
    decode_s = (B0 + B2 + A2) / 1e9
    chunks = -(-65_535 // (MNBT - 1))  # 9 steps of prefill share a step with the decode
    tpot0 = res.state.req.finish_ns[0, 0] - res.state.req.first_ns[0, 0]
    tpot0 = tpot0 / 1e9 / (8192 - 1) + A2 / 1e9
    assert decode_s < tpot0 < decode_s * 1.02  # the stall hides in the mean
    assert req.itl_count[0] == 8191
    assert req.itl_mean_s[0] == pytest.approx(tpot0, rel=1e-12)
    assert chunks == 9
    # ITL percentiles over all 8,191 gaps: the median and p99 are plain decode steps.
    for p in ("itl_s_p50", "itl_s_p99"):
        assert row[p] == pytest.approx(decode_s, rel=1 / 33)


@pytest.mark.slow
def test_the_reference_engine_agrees_on_the_long_prompt_case(long_prompt):
    res, _, _ = long_prompt
    cfg, wl = _long_prompt_case()
    eng = run_reference(cfg, wl, S1_LAT)
    r0 = eng.requests[0]
    assert res.state.req.max_gap_ns[0, 0] == r0.max_token_gap_ns == B0 + B1 * (MNBT - 1) + B2
    assert res.state.out.itl_hist[0].tolist() == eng.sched.itl_hist


def test_queueing_delay_ends_at_first_scheduled_not_first_token(long_prompt):
    """The long prompt is scheduled in the first step after it arrives (a
    decode step is at most ~9 ms) but needs nine chunk steps before its first
    token: its queueing delay is under a step, its TTFT over 1.2 s."""
    res, _, req = long_prompt
    entry = 5.0 + (_A0 + _A1 * 65_535) / 1e9  # BLIS alpha0 + alpha1 x prompt before entry
    assert 5.0 <= req.first_scheduled_s[1] <= entry + (B0 + B2) / 1e9 + 1e-9
    assert req.queue_delay_s[1] == pytest.approx(req.first_scheduled_s[1] - 5.0)
    assert req.first_token_s[1] - 5.0 > 9 * 0.13


def test_mean_kv_usage_is_the_time_weighted_share_of_used_blocks():
    """One request, 16-token prompt, 4 outputs, block_size 16, 1 us per step:
    step 0 prefills 16 tokens (1 block), steps 1-3 decode tokens 17-19 (2
    blocks). On 11 blocks (10 usable, the null block aside): (1 + 2 + 2 + 2)
    block-us / 4 us / 10 = 0.175. The fast path and the step-by-step kernel
    agree."""
    cfg = SchedulerConfig(num_gpu_blocks=11, block_size=16, max_num_seqs=4)
    wl = Workload(np.zeros(1), np.array([16], np.int32), np.array([4], np.int32), name="one")
    for fast in (True, False):
        row = simulate([cfg], wl, STEP_LATENCY, fast_path=fast).metrics().iloc[0]
        assert row.mean_kv_usage == pytest.approx(0.175, rel=1e-12)
        assert row.max_token_stall_s == pytest.approx(1e-6)
        assert row.itl_s_p50 == pytest.approx(1e-6, rel=1 / 33)


def test_histogram_bins_hold_their_gaps_and_percentiles_are_bin_midpoints():
    rng = np.random.default_rng(0)
    for g in [0, 1, 15, 16, 17, 31, 32, 33, *rng.integers(1, 1 << 45, 2000).tolist()]:
        b = gap_bin(g)
        lo, hi = bin_edges_ns(b)
        assert lo <= g and (g < hi or b == NBINS - 1)
        assert hi - lo <= max(1, lo / 16)
    hist = np.zeros((1, NBINS), np.int64)
    gaps = [5_000_000] * 98 + [150_000_000] * 2  # 98 fast gaps, 2 stalls
    for g in gaps:
        hist[0, gap_bin(g)] += 1
    p50, p99 = percentiles_s(hist, (50, 99))[:, 0]
    assert p50 == pytest.approx(0.005, rel=1 / 33)
    assert p99 == pytest.approx(0.15, rel=1 / 33)  # rank ceil(0.99 x 100) = 99: a stall
    assert np.isnan(percentiles_s(np.zeros((1, NBINS), np.int64), (50,))[0, 0])


SLOW = pytest.mark.slow  # block sizes 1 and 48 only in the full suite (fast subset: 16)


@pytest.mark.parametrize(
    "block_size", [pytest.param(1, marks=SLOW), 16, pytest.param(48, marks=SLOW)]
)
def test_linear_decode_runs_in_closed_form_equal_the_reference(block_size):
    """Long linear-time decode runs (``step._linear_run``): cut by arrivals,
    by a later arrival that waits, and by the horizon, at block sizes whose
    periods the run crosses many times. The fast run's per-token outputs, ITL
    histogram and KV integral equal the plain-Python reference's, and runs
    were taken (so the closed form was exercised)."""
    from helpers import compare_final

    rng = np.random.default_rng(block_size)
    n = 12
    arrivals = np.sort(rng.uniform(0, 3.0, n))
    wl = Workload(
        arrivals,
        rng.integers(1, 300, n).astype(np.int32),
        rng.integers(200, 3000, n).astype(np.int32),
        name="long-decodes",
    )
    for seqs, blocks, horizon in [(4, 4000, 600.0), (16, 120, 600.0), (16, 4000, 7.5)]:
        cfg = SchedulerConfig(
            num_gpu_blocks=max(blocks, 4000 // block_size + 2) if block_size == 1 else blocks,
            block_size=block_size,
            max_num_seqs=seqs,
            max_model_len=4096,
            horizon_s=horizon,
        )
        res = simulate([cfg], wl, S1_LAT)
        assert res.state.out.counters[0, S.O_MACRO_STEPS] > 100
        compare_final(res, 0, run_reference(cfg, wl, S1_LAT))
