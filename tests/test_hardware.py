"""Model/GPU presets, num_gpu_blocks sizing and the step-time models."""

from __future__ import annotations

import numpy as np
import pytest

from planner.latency.step_time import (
    LINEAR,
    NO_TABLE,
    ROOFLINE,
    LinearLatency,
    RooflineLatency,
    step_time_ns,
)
from planner.models.hardware import (
    GIB,
    GPU_ALIASES,
    GPU_SOURCES,
    GPUS,
    MODELS,
    HardwareError,
    gpu,
    model,
    num_gpu_blocks,
)
from planner.resolve import latency


def test_worked_example_llama8b_h100():
    """vLLM's rule: (total x util - weights - activation - non-torch - CUDA graphs) // page."""
    m, g = model("llama-3.1-8b"), gpu("H100")
    page = 16 * 2 * m.num_layers * m.num_kv_heads * m.head_dim * 2  # K and V, bf16
    assert page == 2 * 2**20
    act = max(8192 * (4 * 4096 + 3 * 14336) * 2, 1024 * 128256 * 14)  # sampler wins
    kv = 79.19 * GIB * 0.9 - m.params * 2 - act - (0.50 + 0.36) * GIB
    assert num_gpu_blocks(m, g, 0.9) == int(kv // page)
    # The README's 27,967 blocks (vLLM's start-up log: ~54.6 GiB of KV cache), within 2%.
    assert num_gpu_blocks(m, g, 0.9) == pytest.approx(27967, rel=0.02)


def test_tensor_parallel_splits_weights_and_kv_heads():
    m, g = model("llama-3.1-70b"), gpu("H100")
    with pytest.raises(HardwareError):
        num_gpu_blocks(m, g, 0.9, tp=1)  # 141 GB of weights do not fit one GPU
    n2, n4 = num_gpu_blocks(m, g, 0.9, tp=2), num_gpu_blocks(m, g, 0.9, tp=4)
    assert 0 < n2 < n4
    assert m.kv_bytes_per_token(8) == m.kv_bytes_per_token(1) // 8
    assert m.kv_bytes_per_token(16) == m.kv_bytes_per_token(8)  # kv heads replicated


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_preset_fits_an_h200(name):
    assert num_gpu_blocks(model(name), gpu("H200"), 0.9, tp=4) > 1000


def test_unknown_presets_and_bad_utilisation():
    with pytest.raises(HardwareError, match="--model"):
        model("gpt-5")
    with pytest.raises(HardwareError, match="--gpu"):
        gpu("TPUv9")
    with pytest.raises(HardwareError, match="utilization"):
        num_gpu_blocks(model("qwen2.5-7b"), gpu("L40S"), 1.5)
    assert gpu("h100") is GPUS["H100"] and gpu("a100") is GPUS["A100-80GB"]


# Issue 33 item 4: the GPUs the presets must cover (SXM parts as H100/A100/H200).
ISSUE_33_GPUS = (
    "RTX-4090", "RTX-PRO-6000", "L40S", "L4", "A10G", "A100-40GB", "A100-80GB", "H100",
    "H100-PCIe", "H100-NVL", "H200", "B200", "GB200", "MI300X", "MI325X",
)  # fmt: skip


@pytest.mark.parametrize("name", ISSUE_33_GPUS)
def test_issue_33_gpu_presets_exist_with_figures_and_sources(name):
    g = gpu(name)
    assert g is GPUS[name] and g.name == name
    assert g.memory_gib > 0 and g.bf16_flops > 0 and g.hbm_bytes_per_s > 0
    assert 0 < g.link_bytes_per_s < g.hbm_bytes_per_s  # a link is slower than HBM
    assert (g.sm == 0) == name.startswith("MI")  # compute capability on CUDA, 0 on ROCm
    assert GPU_SOURCES[name].strip()
    assert gpu(name.lower()) is g and gpu(name.upper()) is g  # case-insensitive
    # Llama-3.1-8B (16 GB of bf16 weights) fits one of each, even a 24 GB card.
    assert num_gpu_blocks(model("llama-3.1-8b"), g, 0.9) > 1000


def test_every_gpu_alias_resolves_to_its_preset():
    assert set(GPU_ALIASES.values()) <= set(GPUS)
    for alias, name in GPU_ALIASES.items():
        assert alias == alias.lower() and gpu(alias) is GPUS[name]
    assert gpu("h100-pcie") is GPUS["H100-PCIe"] and gpu("h100nvl") is GPUS["H100-NVL"]
    assert gpu("a10g") is GPUS["A10G"] and gpu("l4") is GPUS["L4"]
    assert gpu("gb200") is GPUS["GB200"] and gpu("mi325x") is GPUS["MI325X"]


def test_roofline_decode_is_memory_bound_and_prefill_compute_bound():
    lat = RooflineLatency("llama-3.1-8b", "H100")
    fp = np.array(lat.floats())
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    m, g = model("llama-3.1-8b"), gpu("H100")
    # 32 decodes after 1,000 tokens each: weights + KV of 32,032 tokens, read once.
    kv = 32 * 1001
    t = step_time_ns(ROOFLINE, ip, fp, 0, 32, kv, kv, NO_TABLE[0])
    mem = (m.params * 2 + m.kv_bytes_per_token() * kv) / (g.hbm_bytes_per_s * lat.mbu)
    assert t == pytest.approx(mem * 1e9, abs=1)
    # One 2,048-token prefill chunk: compute dominates.
    att = 2048 * 2049 // 2
    tp = step_time_ns(ROOFLINE, ip, fp, 2048, 0, att, 2048, NO_TABLE[0])
    flops = 2 * m.params * 2048 + 4 * m.num_layers * m.num_heads * m.head_dim * att
    assert tp == pytest.approx(flops / (g.bf16_flops * lat.mfu) * 1e9, abs=1)
    assert tp > t
    # More decodes never take less time.
    times = [
        step_time_ns(ROOFLINE, ip, fp, 0, b, b * 1001, b * 1001, NO_TABLE[0])
        for b in (1, 8, 64, 512)
    ]
    assert times == sorted(times)


def test_linear_step_time_and_presets():
    lat = LinearLatency()
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    fp = np.array(lat.floats())
    assert step_time_ns(LINEAR, ip, fp, 0, 32, 0, 0, NO_TABLE[0]) == 5752710 + 32 * 6000
    assert step_time_ns(LINEAR, ip, fp, 0, 0, 0, 0, NO_TABLE[0]) == 0
    assert latency("linear", "llama-3.1-8b", "H100") == LinearLatency()
    with pytest.raises(ValueError, match="no linear coefficients"):
        latency("linear", "qwen2.5-7b", "L40S")
    with pytest.raises(ValueError, match="needs --model"):
        latency("roofline", None, None)
