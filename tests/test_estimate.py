"""The dry-run estimate: computed from the kernel's measured cost per request-step.

Only how the estimate is computed is checked, never its accuracy (machines are
shared and timing is noisy); ``tools/estimate_vs_measured.py`` prints the ratio.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np
import pytest

from helpers import run_cli
from planner.api import simulate
from planner.kernel import state as S
from planner.sweep import driver

ROOT = Path(__file__).parents[1]
QUICK = ROOT / "sweeps" / "quick.toml"


@pytest.fixture(scope="module")
def small():
    from planner import load_spec

    return (
        load_spec(QUICK)
        .replace(horizon_s=20.0)
        .with_axes(max_num_seqs=[8, 64, 256], num_gpu_blocks=[2000, 7463])
    )


def test_estimate_is_request_steps_over_measured_rate(small):
    sweep = small.sweep
    plan = driver.plan_chunks(sweep, None, 10**9)
    est = driver.estimate(sweep, plan, threads=2, sample=4)
    assert est.sample == 4 and est.grid_configs == 12 and est.threads == 2
    # The sample's request-steps are the decode tokens the kernel schedules for
    # the sampled configs: one from each quarter of the cost order.
    order = [int(i) for c in plan.chunks for i in c.config_ids]
    ids = [order[j] for j in driver.sample_positions(12, 4)]
    res = simulate([sweep.configs[i] for i in ids], sweep.workloads[()], sweep.latency)
    assert est.sample_request_steps == res.state.out.counters[:, S.O_DECODE_TOKENS].sum() > 0
    assert est.rate == pytest.approx(est.sample_request_steps / est.sample_seconds)
    assert est.grid_request_steps == pytest.approx(est.sample_request_steps / 4 * 12)
    # the threads' speed-up is measured on the same sample, within 1..threads
    assert est.parallel_seconds is not None and 1.0 <= est.speedup <= 2.0
    assert est.speedup == pytest.approx(min(max(est.sample_seconds / est.parallel_seconds, 1), 2))
    assert est.seconds == pytest.approx(est.grid_request_steps / (est.rate * est.speedup))
    assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS  # restored


def test_estimate_without_decode_tokens_uses_time_per_config():
    est = driver.Estimate(sample=4, sample_request_steps=0.0, sample_seconds=2.0, grid_configs=8,
                          threads=2)  # fmt: skip
    assert est.seconds == pytest.approx(2.0)  # no parallel measurement: an even split
    slow = driver.Estimate(sample=4, sample_request_steps=0.0, sample_seconds=2.0, grid_configs=8,
                           threads=2, parallel_seconds=1.6)  # fmt: skip
    assert slow.speedup == pytest.approx(1.25) and slow.seconds == pytest.approx(4.0 / 1.25)


def test_dry_run_states_what_the_estimate_is_based_on(capsys):
    code, out, err = run_cli(capsys, "sweep", str(QUICK), "--dry-run", "--workers", "1")
    assert code == 0, err
    text = " ".join(out.split())  # the report goes to stdout; rich may wrap long lines
    line = text[text.index("estimated run time") :]
    assert "request-steps/s per thread" in line and "measured" in line and "1 thread" in line
    assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS  # --workers not kept


def test_api_estimate(small):
    from planner import estimate

    est = estimate(small, workers=1)
    assert est.threads == 1 and est.grid_configs == 12
    assert est.seconds == pytest.approx(est.grid_request_steps / est.rate)


@pytest.mark.parametrize("total,n", [(12, 4), (384, 64), (64, 64), (5, 5), (100_000, 64)])
def test_sample_positions_take_one_config_per_stratum(total, n):
    pos = driver.sample_positions(total, n)
    assert len(pos) == n and 0 <= pos.min() and pos.max() < total
    assert (pos * n // total).tolist() == list(range(n))  # stratum k holds sample k
    assert driver.sample_positions(total, n).tolist() == pos.tolist()  # reproducible


@pytest.mark.parametrize("n,threads", [(1024, 2), (10, 4), (7, 3), (5, 1), (1, 2)])
def test_thread_order_deals_sorted_costs_evenly_to_the_static_blocks(n, threads):
    """numba gives thread t the t-th np.array_split block of a prange loop; on a
    cost-sorted chunk each block must get a near-equal share of the cost."""
    order = driver.thread_order(n, threads)
    assert sorted(order.tolist()) == list(range(n))
    cost = np.arange(n, dtype=float)  # ascending, as in a cost-sorted chunk
    shares = [cost[b].sum() for b in np.array_split(order, threads)]
    assert max(shares) - min(shares) <= n  # at most about one config's cost apart


def test_run_chunk_rows_follow_the_chunk_whatever_the_kernel_order(small):
    sweep = small.sweep
    plan = driver.plan_chunks(sweep, None, 10**9)
    chunk = plan.chunks[0]
    df = driver.run_chunk(sweep, chunk)
    assert df.config_id.tolist() == chunk.config_ids.tolist()
    alone = [
        simulate([sweep.configs[i]], sweep.workloads[()], sweep.latency).metrics()
        for i in chunk.config_ids
    ]
    for row, one in zip(df.itertuples(), alone, strict=True):
        assert (row.completed, row.preemptions, row.steps) == tuple(
            one.loc[0, ["completed", "preemptions", "steps"]]
        )
