"""Issue 33: roofline terms pinned on cases computed by hand, for the
architecture families the other files leave out (dense:
``test_hardware.py``; mixture of experts: ``test_moe_roofline.py``;
tensor-parallel all-reduce: ``test_tp_comm.py``; full + sliding hybrids:
``test_hybrid_roofline.py``). Each expected figure is computed here from the
model's config.json numbers, not read back from the planner."""

from __future__ import annotations

import numpy as np
import pytest

from planner.kernel.step import _attention as _attention_jit
from planner.latency.step_time import ROOFLINE, RooflineLatency, step_time_ns
from planner.models import catalog
from planner.models.hardware import gpu, model

# The kernel's function has no Python entry (``no_cpython_wrapper``): its
# Python source, the same integer arithmetic.
_attention = _attention_jit.py_func


def _ns(lat: RooflineLatency, p: int, d: int, att: int, kv: int) -> int:
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    fp = np.array(lat.floats(), dtype=np.float64)
    return int(step_time_ns(ROOFLINE, ip, fp, p, d, att, kv, np.zeros(4)))


def test_mla_reads_the_latent_kv_by_hand():
    """DeepSeek-V2-Lite (MLA): a token's KV in one layer is the compressed
    latent, kv_lora_rank + qk_rope_head_dim = 512 + 64 values in bf16, not
    heads x head_dim x 2. 16 decodes after 4,000 tokens each are memory-bound:
    weights (shared part and the routed experts 16 tokens pick) + 27 layers x
    576 values x 2 bytes x 16 x 4,001 tokens."""
    name = "deepseek-ai/DeepSeek-V2-Lite-Chat"
    cfg = catalog.entries()[name]["config"]
    latent = cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]
    m, g = model(name), gpu("H100")
    assert m.kv_bytes_per_token(1) == cfg["num_hidden_layers"] * latent * 2
    k, e = cfg["num_experts_per_tok"], cfg["n_routed_experts"]
    experts = m.expert_weight_bytes(1)
    touched = 1.0 - (1.0 - k / e) ** 16
    kv_tokens = 16 * 4_001
    nbytes = (m.weight_bytes(1) - experts) + experts * touched
    nbytes += cfg["num_hidden_layers"] * latent * 2 * kv_tokens
    lat = RooflineLatency(name, "H100")
    flops_s = _ns(lat, 0, 16, kv_tokens, kv_tokens) / 1e9
    assert flops_s == pytest.approx(nbytes / (g.hbm_bytes_per_s * 0.8), rel=1e-9, abs=2e-9)


def test_every_layer_sliding_reads_only_the_window_by_hand():
    """Mistral-7B-v0.1 (every layer slides, window 4,096): a decode after
    10,000 tokens attends 4,096 keys and reads 4,096 tokens of KV
    (``_attention``), so its step costs what a 4,095-token context costs
    under full attention, and the same decode after 100,000 tokens costs the
    same."""
    w = model("mistralai/Mistral-7B-v0.1").sliding_window
    assert w == 4096
    assert _attention(1, 10_000, w) == (4096, 4096)
    assert _attention(1, 100_000, w) == (4096, 4096)
    assert _attention(1, 4_095, 0) == (4096, 4096)  # full attention, 4,095 computed
    # A chunk of 8 after 2,000 tokens, inside the window: 8 x 2,000 + 36 pairs.
    assert _attention(8, 2_000, w) == (8 * 2_000 + 36, 2_008)
    # Query c0 + i attends min(c0 + i, W) keys; the chunk reads the union of windows.
    n, c0 = 100, 4_050
    pairs = sum(min(c0 + i, w) for i in range(1, n + 1))
    assert _attention(n, c0, w) == (pairs, min(c0 + n, n + w - 1))
    lat = RooflineLatency("mistralai/Mistral-7B-v0.1", "H100")
    assert _ns(lat, 0, 1, 4096, 4096) == _ns(lat, 0, 1, *_attention(1, 100_000, w))


def test_linear_attention_moves_each_request_state_by_hand():
    """Qwen3.5-27B (48 Gated DeltaNet + 16 full-attention layers): a
    linear-attention layer holds, per request, a conv state of (kernel - 1) x
    (2 x key heads x key dim + value heads x value dim) values in bf16 and an
    SSM state of value heads x value dim x key dim values in float32; each
    scheduled request reads and writes it once per step. 32 decodes after
    1,000 tokens each: weights + the 16 full layers' KV (4 KV heads x 256 x 2
    x 2 bytes per token) + 32 x 2 x 48 states; the linear layers add no KV."""
    name = "qwen3.5-27b"
    m, g = model(name), gpu("H100")
    conv = (4 - 1) * (2 * 16 * 128 + 48 * 128) * 2
    ssm = 48 * 128 * 128 * 4
    assert m.linear_state_bytes(1) == conv + ssm == 3_207_168
    kv_per_token = 16 * 4 * 256 * 2 * 2
    reqs, kv_tokens = 32, 32 * 1_001
    nbytes = m.weight_bytes(1) + kv_per_token * kv_tokens + reqs * 2 * 48 * (conv + ssm)
    lat = RooflineLatency(name, "H100")
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    fp = np.array(lat.floats(), dtype=np.float64)
    t = step_time_ns(ROOFLINE, ip, fp, 0, reqs, kv_tokens, kv_tokens, np.zeros(4), 0, 0, reqs)
    assert t / 1e9 == pytest.approx(nbytes / (g.hbm_bytes_per_s * 0.8), rel=1e-9, abs=2e-9)
    # without the scheduled requests' count, only the state term goes
    t0 = step_time_ns(ROOFLINE, ip, fp, 0, reqs, kv_tokens, kv_tokens, np.zeros(4), 0, 0, 0)
    state_s = reqs * 2 * 48 * (conv + ssm) / (g.hbm_bytes_per_s * 0.8)
    assert (t - t0) / 1e9 == pytest.approx(state_s, rel=1e-6)
