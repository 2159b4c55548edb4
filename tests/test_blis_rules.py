"""compat blis's rules one at a time, on cases small enough to work out by hand
(docs/blis-compat.md; the golden tests check them all together against BLIS)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.api import entry_times_ns, simulate
from planner.config import SchedulerConfig, blis_config
from planner.latency.step_time import LinearLatency, blis_queue_ns, blis_step_ns
from planner.workload.arrays import Workload

SEED_NS = np.array([5_752_710, 17_250, 6_000], dtype=np.int64)


def test_step_and_queue_times_are_whole_microseconds():
    """Rule 3, BLIS's own first steps at 256 x 7,463 (tests/golden/blis): the
    300-token prefill starts at 100,757 us (arrival 0.1 s + trunc(232.46 +
    1.75 x 300)) and the next step 10,927 us later (trunc(5,752.71 + 17.25 x 300))."""
    assert blis_queue_ns(232_460, 1_750, 300) == 757_000
    assert blis_step_ns(SEED_NS, 300, 0) == 10_927_000
    assert blis_step_ns(SEED_NS, 0, 1) == 5_758_000  # 5,758.71 truncated
    assert blis_step_ns(SEED_NS, 0, 0) == 5_752_000  # a step that priced nothing: beta0


def test_entry_times_use_the_kernels_queueing_delay():
    """``api.entry_times_ns`` (vectorized) equals ``blis_queue_ns`` prompt by prompt."""
    prompt = np.arange(1, 5000, 7)
    got = entry_times_ns(np.zeros(len(prompt), np.int64), prompt, 232_460, 1_750, blis=True)
    assert got.tolist() == [blis_queue_ns(232_460, 1_750, int(p)) for p in prompt]


def _one(prompt: int, out: int) -> Workload:
    return Workload(
        np.zeros(1), np.array([prompt], np.int32), np.array([out], np.int32), name="one"
    )


# 1 ms per step, nothing else: step k runs from k ms to k + 1 ms.
MS = LinearLatency(alpha=(0.0, 0.0, 0.0), beta=(1000.0, 0.0, 0.0))


@pytest.mark.parametrize("horizon_ms,vllm,blis", [(1.5, 0, 1), (1.0, 0, 1), (0.999, 0, 0)])
def test_a_finish_counts_by_its_step_start(horizon_ms, vllm, blis):
    """Rule 4: the prefill runs 0-1 ms, the decode that finishes the request
    1-2 ms. vLLM's rules count finishes by the horizon; compat blis runs a step
    that starts at or before it and counts its finishes."""
    kw = dict(num_gpu_blocks=10, block_size=16, max_num_seqs=4, horizon_s=horizon_ms / 1e3)
    plain = SchedulerConfig(**kw, preemption_mode="restart", null_block=False)
    got = simulate([plain, blis_config(**kw)], _one(16, 2), MS).metrics().completed
    assert got.tolist() == [vllm, blis]


def test_a_one_token_last_prefill_chunk_is_prefill():
    """Rule 6: a 17-token prompt under a 16-token budget runs as 16 + 1 prefill
    tokens; the one-token chunk is decode under S1-exact's convention."""
    kw = dict(num_gpu_blocks=10, block_size=16, max_num_seqs=4, max_num_batched_tokens=16)
    plain = SchedulerConfig(**kw, preemption_mode="restart", null_block=False)
    res = simulate([plain, blis_config(**kw)], _one(17, 3), MS, trace_steps=10)
    vllm, blis = res.trace(0), res.trace(1)
    assert vllm.prefill_tokens.tolist()[:2] == [16, 0] and vllm.decode_tokens.tolist()[:2] == [0, 1]
    assert blis.prefill_tokens.tolist()[:2] == [16, 1] and blis.decode_tokens.tolist()[:2] == [0, 0]
