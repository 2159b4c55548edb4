"""The decode fast path's preempting step (``step._preempting_step``): a
decode step in which the pool runs out and the tail of ``running`` is
preempted, taken at once instead of through the one-by-one engine. Seeded
cases built to reach it (sync, FCFS recompute preemption, pools too small for
every request's decode, with and without prefix caching and shared prefixes)
must match the reference engine step for step, traced and on the fast path,
and must really take that step."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import assert_step_for_step, run_both
from planner.config import SchedulerConfig
from planner.kernel import state as S
from planner.latency.step_time import LinearLatency
from planner.workload.arrays import Workload


def _case(rng: np.random.Generator, caching: bool) -> tuple[list[SchedulerConfig], Workload]:
    """A burst of decoders on a pool that holds their prompts but not their
    outputs: three configs differing in block size and pool."""
    r = int(rng.integers(2, 9))
    prompt = rng.integers(1, 120, r).astype(np.int32)
    output = rng.integers(2, 90, r).astype(np.int32)
    wl = Workload(
        np.cumsum(rng.uniform(0, 0.002, r)),
        prompt,
        output,
        name="preempting",
        prefix_group=rng.integers(-1, 2, r).astype(np.int32) if caching else None,
        prefix_len=rng.choice([16, 48], r).astype(np.int32) if caching else None,
    )
    cfgs = []
    for bs in (1, 4, 16):
        need = int(np.max(-(-(prompt + output) // bs)))  # the longest request's blocks
        prompts = int(np.sum(-(-prompt // bs)))
        cfgs.append(
            SchedulerConfig(
                num_gpu_blocks=int(rng.integers(need + 1, max(need + 2, prompts + need // 2))),
                block_size=bs,
                max_num_seqs=int(rng.integers(2, 9)),
                max_num_batched_tokens=int(rng.integers(64, 512)),
                max_model_len=512,
                null_block=bool(rng.random() < 0.8),
                enable_prefix_caching=caching,
                max_steps=4000,
            )
        )
    return cfgs, wl


@pytest.mark.parametrize("caching", [False, True])
def test_preempting_steps_match_the_reference(caching):
    """40 seeded cases x 3 configs: kernel (traced and fast) == reference,
    and the fast path took preempting steps in many of them."""
    rng = np.random.default_rng(20261207 + caching)
    lat = LinearLatency(alpha=(0, 0, 0), beta=(1000, 3, 0))
    taken = preempted = 0
    for _ in range(40):
        cfgs, wl = _case(rng, caching)
        traced, fast, engines = run_both(cfgs, wl, lat)
        for c, eng in enumerate(engines):
            assert_step_for_step(traced, fast, c, eng)
            oi = fast.state.out.counters[c]
            assert oi[S.O_INVARIANT_ERRORS] == 0
            assert oi[S.O_PREEMPT_STEPS] <= oi[S.O_MACRO_STEPS]
            assert traced.state.out.counters[c, S.O_PREEMPT_STEPS] == 0  # traced: one by one
            taken += oi[S.O_PREEMPT_STEPS] > 0
            preempted += oi[S.O_PREEMPTIONS] > 0
    assert taken >= 30, (taken, preempted)
