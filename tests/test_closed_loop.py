"""Closed-loop clients (issue 17, item 3): vLLM bench's --max-concurrency.

The kernel creates each next arrival at a finish; these tests check the
claims a user relies on, from the per-request times alone: never more than N
requests in the system, N = 1 is strictly one at a time, think time is kept,
Little's law holds, and a cap that never binds changes nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers import run_cli
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.kernel import state as S
from planner.latency.step_time import LinearLatency
from planner.sweep.spec import SpecError, load_spec_text
from planner.workload.arrays import Workload

LAT = LinearLatency(alpha=(300.0, 2.0, 0.0), beta=(5000.0, 20.0, 8.0))


def _workload(rng: np.random.Generator, r: int, offline: bool) -> Workload:
    arrival = np.zeros(r) if offline else np.cumsum(rng.exponential(0.05, r))
    return Workload(
        arrival,
        rng.integers(20, 600, r).astype(np.int32),
        rng.integers(1, 120, r).astype(np.int32),
        name="closed-loop test",
    )


def _in_system_max(sent_ns: np.ndarray, done_ns: np.ndarray) -> int:
    """Largest number of requests with sent <= t < done over all t (a request
    that never ended stays in until the end)."""
    events = [(int(t), 1) for t in sent_ns] + [(int(t), -1) for t in done_ns if t >= 0]
    events.sort(key=lambda e: (e[0], e[1]))  # at a tie an end frees the slot first
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    return peak


def _done_ns(res, c: int) -> np.ndarray:
    """When each request left the system: its finish, or (rejected) its arrival."""
    st = res.state.req
    sent = res.arrival_ns[c]
    return np.where(st.status[c] == S.REJECTED, sent, st.finish_ns[c])


@pytest.mark.parametrize("offline", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_never_more_than_n_requests_in_the_system(seed, offline):
    rng = np.random.default_rng(seed)
    wl = _workload(rng, 60, offline)
    conc = [1, 2, 3, 7]
    cfgs = [
        SchedulerConfig(num_gpu_blocks=int(rng.integers(40, 400)), block_size=16,
                        max_num_seqs=8, max_num_batched_tokens=256, max_model_len=640,
                        max_concurrency=n, max_steps=200_000)
        for n in conc
    ]  # fmt: skip
    res = simulate(cfgs, wl, LAT)
    for c, n in enumerate(conc):
        sent, done = res.arrival_ns[c], _done_ns(res, c)
        assert _in_system_max(sent, done) <= n
        oi = res.state.out.counters[c]
        assert oi[S.O_FINISHED] + oi[S.O_REJECTED] == wl.num_requests  # all were served
        # Nobody is sent before its scheduled time.
        assert np.all(sent >= np.round(wl.arrival_s * 1e9).astype(np.int64))


def test_one_client_sends_each_request_after_the_previous_ended():
    rng = np.random.default_rng(7)
    wl = _workload(rng, 40, offline=True)
    think = 0.25
    res = simulate(
        [SchedulerConfig(num_gpu_blocks=500, max_num_batched_tokens=512, max_model_len=640,
                         max_concurrency=1, think_time_s=think)],
        wl, LAT,
    )  # fmt: skip
    sent, done = res.arrival_ns[0], _done_ns(res, 0)
    order = np.argsort(sent, kind="stable")
    assert np.array_equal(order, np.arange(wl.num_requests))  # stream order kept
    gaps = sent[order][1:] - done[order][:-1]
    assert np.all(gaps == round(think * 1e9))  # exactly the think time after the end


def test_a_cap_that_never_binds_changes_nothing():
    rng = np.random.default_rng(3)
    wl = _workload(rng, 50, offline=True)
    base = dict(num_gpu_blocks=300, max_num_seqs=6, max_num_batched_tokens=300, max_model_len=640)
    res = simulate([SchedulerConfig(**base), SchedulerConfig(**base, max_concurrency=50)], wl, LAT)
    st = res.state.req
    for name in ("first_ns", "finish_ns", "nout", "npre", "sched_ns"):
        assert np.array_equal(getattr(st, name)[0], getattr(st, name)[1]), name
    same = [i for i in range(S.NOUT_I) if i not in (S.O_RELEASED, *S.FAST_PATH_COUNTERS)]
    assert np.array_equal(res.state.out.counters[0, same], res.state.out.counters[1, same])


def test_littles_law_with_n_busy_clients():
    """N clients with no think time keep N requests in the system, so
    throughput x mean E2E = N over the run (Little's law), up to the start and
    the drain at the end."""
    rng = np.random.default_rng(11)
    wl = _workload(rng, 400, offline=True)
    n = 6
    res = simulate(
        [SchedulerConfig(num_gpu_blocks=2000, max_num_batched_tokens=512, max_model_len=640,
                         max_concurrency=n)],
        wl, LAT,
    )  # fmt: skip
    sent, done = res.arrival_ns[0], _done_ns(res, 0)
    total_in_system = float((done - sent).sum())  # request-ns
    span = float(done.max() - sent.min())
    assert total_in_system / span == pytest.approx(n, rel=0.03)


def test_metrics_call_closed_loop_never_overloaded():
    rng = np.random.default_rng(5)
    wl = _workload(rng, 200, offline=False)  # 20 req/s offered, far beyond 1 client
    df = simulate(
        [SchedulerConfig(num_gpu_blocks=2000, max_model_len=640),
         SchedulerConfig(num_gpu_blocks=2000, max_model_len=640, max_num_seqs=1)],
        wl, LAT,
    ).metrics()  # fmt: skip
    assert bool(df.loc[1, "overloaded"])  # open loop, one at a time: overloaded
    closed = simulate(
        [SchedulerConfig(num_gpu_blocks=2000, max_model_len=640, max_concurrency=1)], wl, LAT
    ).metrics()
    assert not bool(closed.loc[0, "overloaded"])
    # The served rate is the same server's: one request at a time either way.
    assert closed.loc[0, "throughput_rps"] == pytest.approx(df.loc[1, "throughput_rps"], rel=0.1)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--max-concurrency", "-1"], "--max-concurrency"),
        (["--think-time", "-0.5", "--max-concurrency", "2"], "--think-time"),
        (["--think-time", "1"], "--max-concurrency"),
        (["--max-concurrency", "2.5"], "--max-concurrency"),
    ],
)
def test_bad_closed_loop_input_is_one_line(capsys, args, needle):
    code, out, err = run_cli(capsys, "run", "--num-requests", "5", *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err


SPEC = """
name = "cl"
horizon_s = 60
[workload]
kind = "synthetic"
num_requests = 40
rate = 5
[workload.prompt]
mean = 200
[workload.output]
mean = 50
[axes]
max_concurrency = [0, 1, 4]
{extra}
"""


def test_max_concurrency_is_a_sweep_axis(tmp_path):
    sweep = load_spec_text(SPEC.format(extra=""), tmp_path)
    assert [c.max_concurrency for c in sweep.configs] == [0, 1, 4]
    with pytest.raises(SpecError, match="think_time_s"):
        load_spec_text(SPEC.format(extra="[scheduler]\nthink_time_s = -1"), tmp_path)
    with pytest.raises(SpecError, match="the traffic is an input"):
        load_spec_text(SPEC.format(extra="[search]\nrate_scale_max = 4"), tmp_path)


@pytest.mark.parametrize("conc", [1, 2, 3])
def test_livelock_is_still_proven_under_a_closed_loop(conc):
    """Issue 19's one-block-short pool (64 blocks for 1,024-token requests, gate
    off): with clients waiting on the stuck requests nothing else can arrive,
    and the run is proven livelocked, not cut by the step limit."""
    wl = Workload(np.zeros(4), np.full(4, 1000, np.int32), np.full(4, 24, np.int32), name="short")
    cfg = SchedulerConfig(
        num_gpu_blocks=64, max_model_len=1024, max_num_batched_tokens=512,
        scheduler_reserve_full_isl=False, max_concurrency=conc, max_steps=1_000_000,
    )  # fmt: skip
    oi = simulate([cfg], wl, LAT).state.out.counters[0]
    assert oi[S.O_LIVELOCKED] == 1 and oi[S.O_STEP_LIMIT] == 0
    assert oi[S.O_ARRIVED] == min(conc, 4)  # the clients behind them never sent


def test_a_client_sends_after_it_has_the_whole_answer():
    """E2E counts alpha2 per output token after the last token's step (BLIS's
    post-processing); the client has its answer only then, so one client's
    next request is sent exactly E2E after the previous one, plus think time."""
    rng = np.random.default_rng(2)
    wl = _workload(rng, 30, offline=True)
    lat = LinearLatency(alpha=(300.0, 2.0, 3000.0), beta=(5000.0, 20.0, 8.0))
    cfg = SchedulerConfig(num_gpu_blocks=500, max_model_len=640, max_concurrency=1,
                          think_time_s=0.1)  # fmt: skip
    res = simulate([cfg], wl, lat)
    df = res.request_tokens(0)
    sent = res.arrival_ns[0] / 1e9
    e2e = (res.state.req.finish_ns[0] - res.arrival_ns[0]) / 1e9 + 3e-3 * res.state.req.nout[0]
    gaps = sent[1:] - sent[:-1]
    np.testing.assert_allclose(gaps, e2e[:-1] + 0.1, rtol=0, atol=1e-9)
    assert len(df) == wl.num_requests
