"""Every livelock is proven, whatever its number of requests (kernel/cycle.py).

A generator builds known livelocks: 2-6 requests on a pool that one of them
can never finish on (it needs more blocks than the pool has, the one-block-short
case among them), with recompute, restart and swap preemption, the
whole-sequence gate on and off, FCFS and priority, prefix caching on and off
(with shared prefixes). Each must end
``livelocked`` well before the step limit, in the kernel and the reference
engine alike. Known finishing runs (every request fits the pool alone) must
finish, never be called livelocked (with distinct priorities: see ``cases``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import compare_final
from planner.api import simulate
from planner.capacity import cdiv
from planner.config import SchedulerConfig
from planner.kernel import cycle
from planner.kernel import state as S
from planner.latency.step_time import LinearLatency
from planner.reference import Engine
from planner.workload.arrays import Workload

LAT = LinearLatency(alpha=(0, 0, 0), beta=(1000, 10, 10))
MAX_STEPS = 200_000


def _needs(prompt: int, output: int, mml: int, bs: int) -> int:
    """Blocks a request needs to finish alone: its last sampled token has no KV,
    and it stops at max_model_len."""
    return cdiv(min(prompt + output, mml) - 1, bs)


@st.composite
def cases(draw, doomed: bool):
    bs = draw(st.sampled_from([1, 4, 16]))
    n = draw(st.integers(3, 40))
    usable = n - 1  # the null block
    # The start-up minimum (one block short of what it admits); with 1-token
    # blocks, one token more so that a full-length request cannot fit.
    mml = max(n * bs, usable * bs + 2)
    mode = draw(st.sampled_from(["recompute", "restart", "swap"]))
    cfg = SchedulerConfig(
        num_gpu_blocks=n,
        block_size=bs,
        max_model_len=mml,
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=draw(st.sampled_from([1, 7, 64, 512])),
        scheduler_reserve_full_isl=draw(st.booleans()),
        preemption_mode=mode,
        cpu_swap_blocks=draw(st.sampled_from([0, 8, 1000])) if mode == "swap" else 0,
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        async_scheduling=mode == "recompute" and draw(st.booleans()),
        enable_prefix_caching=mode == "recompute" and draw(st.booleans()),
        max_steps=MAX_STEPS,
    )
    k = draw(st.integers(2, 6))
    prompts, outputs = [], []
    for _ in range(k):
        p = draw(st.integers(1, mml - 1))
        o = draw(st.integers(1, 3 * mml))
        fits = _needs(p, o, mml, bs) <= usable
        if not doomed and not fits:  # shrink it until it fits alone
            p = draw(st.integers(1, max(1, usable * bs // 2)))
            o = draw(st.integers(1, max(1, usable * bs - p)))
        prompts.append(p)
        outputs.append(o)
    if doomed:
        i = draw(st.integers(0, k - 1))
        prompts[i] = draw(st.integers(max(1, usable * bs - 2 * bs), mml - 1))
        outputs[i] = mml  # it runs to max_model_len, one block beyond the pool
    needs = [_needs(p, o, mml, bs) for p, o in zip(prompts, outputs, strict=True)]
    assert (max(needs) > usable) == doomed
    wl = Workload(
        arrival_s=np.array(sorted(draw(st.floats(0, 0.01)) for _ in range(k))),
        prompt_tokens=np.array(prompts, dtype=np.int32),
        output_tokens=np.array(outputs, dtype=np.int32),
        name="generated",
        # A finishing run needs distinct priorities: on a tie, vLLM's victim
        # max(running, key=(priority, arrival)) is the first in running order,
        # the oldest, and restart preemption then livelocks two requests that
        # each fit alone (found by this test, proven by the reference engine).
        priority=(
            np.array([draw(st.integers(0, 2)) for _ in range(k)])
            if doomed
            else np.array(draw(st.permutations(range(k))))
        ),
        # Shared prefixes (with caching: hits on blocks in use and in the free queue).
        prefix_group=np.array([draw(st.integers(-1, 1)) for _ in range(k)], dtype=np.int32),
        prefix_len=np.full(k, draw(st.sampled_from([bs, 4 * bs, mml])), dtype=np.int32),
    )
    return cfg, wl


def _reference(cfg: SchedulerConfig, wl: Workload) -> Engine:
    arr = np.round(wl.arrival_s * 1e9).astype(np.int64).tolist()
    prompt, out = wl.prompt_tokens.tolist(), wl.output_tokens.tolist()
    group, plen = wl.prefix_group.tolist(), wl.prefix_len.tolist()
    return Engine(cfg, LAT, arr, prompt, out, wl.priority.tolist(), group, plen).run()


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(doomed=True))
def test_every_known_livelock_is_proven(case):
    cfg, wl = case
    res = simulate([cfg], wl, LAT)
    k = res.state.out.counters[0]
    assert k[S.O_LIVELOCKED] == 1, "a run that cannot finish was not proven livelocked"
    assert k[S.O_STEP_LIMIT] == 0
    assert k[S.O_STEPS] < 20_000
    assert res.metrics().outcome.iloc[0] == "livelocked"
    eng = _reference(cfg, wl)
    assert eng.livelocked and not eng.step_limit
    compare_final(res, 0, eng)  # the same step, the same state


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(doomed=False))
def test_every_finishing_run_finishes(case):
    cfg, wl = case
    res = simulate([cfg], wl, LAT)
    k = res.state.out.counters[0]
    assert k[S.O_LIVELOCKED] == 0
    assert k[S.O_STEP_LIMIT] == 0
    assert k[S.O_FINISHED] == wl.num_requests


def test_the_two_request_case_is_proven_in_under_1000_steps():
    """Issue 19: two requests of 1,000 + 24 tokens on the one-block-short pool
    (64 blocks, max_model_len 1,024, max_num_batched_tokens 512), gate off, or
    restart preemption with the gate on: before, both ran to the 10 M step
    limit and were reported starved."""
    wl = Workload(
        arrival_s=np.zeros(2),
        prompt_tokens=np.array([1000, 1000], dtype=np.int32),
        output_tokens=np.array([24, 24], dtype=np.int32),
        name="two",
    )
    base = {"num_gpu_blocks": 64, "max_model_len": 1024, "max_num_batched_tokens": 512}
    for kw in (
        {"scheduler_reserve_full_isl": False},
        {"preemption_mode": "restart"},
        {"scheduler_reserve_full_isl": False, "enable_prefix_caching": True},
    ):
        res = simulate([SchedulerConfig(**base, **kw)], wl)
        k = res.state.out.counters[0]
        assert k[S.O_LIVELOCKED] == 1 and k[S.O_STEP_LIMIT] == 0, kw
        assert k[S.O_STEPS] < 1000, kw


def test_a_livelock_on_a_pool_of_millions_of_blocks_is_proven_with_caching():
    """With prefix caching the pool is part of the compared state; a pool of
    2^22 blocks needs a snapshot of 25 M int32 entries (past the 16 Mi cap that
    used to turn detection off) and is proven at the same step as the same
    case 2^16 times smaller: two requests that each need every block of a pool
    that is one block short, preempting each other."""
    steps = []
    for f in (1, 2**16):
        wl = Workload(
            arrival_s=np.zeros(2),
            prompt_tokens=np.array([1024 * f - 64] * 2, dtype=np.int32),
            output_tokens=np.array([64, 64], dtype=np.int32),
            name="two",
        )
        cfg = SchedulerConfig(
            num_gpu_blocks=64 * f,
            max_model_len=1024 * f,
            max_num_batched_tokens=512 * f,
            enable_prefix_caching=True,
            max_steps=2000,
        )
        k = simulate([cfg], wl).state.out.counters[0]
        assert k[S.O_LIVELOCKED] == 1 and k[S.O_STEP_LIMIT] == 0, f
        assert k[S.O_LIVELOCK_STEP] > cycle.QUIET_STEPS  # the detector's proof, not a frozen pool
        steps.append(int(k[S.O_LIVELOCK_STEP]))
    assert S.cycle_cache_entries(2, 64 * 2**16, 2, 64 * 2**16 + 1) > 16 * 2**20
    assert steps[0] == steps[1]
