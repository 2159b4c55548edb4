"""num_gpu_blocks from stated memory terms (issue 16, item 4), against public
start-up logs, each with its tolerance."""

from __future__ import annotations

import pytest

from planner.models import hardware, memory_profile

GIB = 2**30


def test_terms_add_up_and_grow_with_what_drives_them():
    m, g = hardware.model("llama-3.1-8b"), hardware.gpu("H100")
    t = hardware.memory_terms(m, g, 0.9)
    assert t.available == pytest.approx(
        t.requested - t.weights - t.activation - t.non_torch - t.cuda_graphs
    )
    # The forward pass's activation grows with max_num_batched_tokens, the sampler's with
    # max_num_seqs; the peak is the larger.
    small = memory_profile.activation_bytes(m, 2048, 1, 1)
    assert memory_profile.activation_bytes(m, 32768, 1, 1) == pytest.approx(16 * small)
    assert memory_profile.activation_bytes(m, 2048, 1024, 1) == 1024 * 128256 * 14
    # GPUModelRunner._dummy_run spreads T tokens over min(S, T) requests: one sampled row each
    assert memory_profile.activation_bytes(m, 512, 1024, 1) == 512 * 128256 * 14
    assert hardware.memory_terms(m, g, 0.9, cudagraphs=False).cuda_graphs == 0
    assert hardware.memory_terms(m, g, 0.9, tp=2).non_torch > t.non_torch
    assert t.describe().count("GiB") == 2 and "CUDA graphs 0.36" in t.describe()


def test_readme_8b_bf16_h100_within_2_percent():
    """The README's 27,967 blocks (vLLM's log: weights 14.99 GiB, ~54.6 GiB of KV)."""
    n = hardware.num_gpu_blocks(hardware.model("llama-3.1-8b"), hardware.gpu("H100"), 0.9)
    assert n == pytest.approx(27967, rel=0.02)


def test_70b_8bit_on_one_80gb_gpu_is_sized():
    """The 8-bit 70B at 0.98 used to be refused ("no room"); now it is sized."""
    m = hardware.model("llama-3.1-70b", "fp8")
    n = hardware.num_gpu_blocks(m, hardware.gpu("H100"), 0.98, max_num_batched_tokens=2048)
    assert n > 1000


@pytest.mark.xfail(
    strict=True,
    reason="vLLM 0.7's log (1,381 blocks, 6.74 GiB of KV) leaves ~3.2 GiB beyond the fp8 "
    "weights (67.66 GiB); the stated terms for that engine (V0: 2,048 batched tokens, 256 "
    "sequences, no CUDA-graph term) account for 0.95 GiB, so the estimate is 1,840 blocks, "
    "+33%. The missing ~2.2 GiB is not identified without the log's memory lines.",
)
def test_70b_8bit_within_10_percent_of_the_vllm_0_7_log():
    m = hardware.model("llama-3.1-70b", "fp8")
    t = hardware.memory_terms(m, hardware.gpu("H100"), 0.98, 1, 2048, 256, cudagraphs=False)
    n = int(t.available // hardware.kv_page_bytes(m, 16))
    assert n == pytest.approx(1381, rel=0.10)
