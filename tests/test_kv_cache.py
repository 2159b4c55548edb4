"""KV capacity per attention type (issue 16, item 3): planner.models.kv_cache against
figures recorded from vLLM 0.33.0's own functions by tools/record_vllm_capacity.py
(tests/data/vllm_capacity_0_33.json), and the issue's public figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.models import catalog, hardware, kv_cache

RECORDED = json.loads((Path(__file__).parent / "data" / "vllm_capacity_0_33.json").read_text())


def test_recording_is_vllm_0_33_and_covers_every_family():
    assert RECORDED["vllm_version"] == "0.33.0"
    cases = RECORDED["cases"]
    assert len(cases) >= 10
    families = {
        catalog.entries()[c["model"]]["family"] for c in cases if c["model"] in catalog.entries()
    }
    assert families == {"dense", "moe", "mla", "sliding-window", "hybrid"}


def _case_id(c: dict) -> str:
    tail = ""
    if "mamba_cache_mode" in c:
        tail = f"-{c['mamba_cache_mode']}-{c.get('gdn_prefill_backend', c.get('state'))}"
    if c["kv_cache_dtype"] != "auto":
        tail += f"-{c['kv_cache_dtype']}"
    return f"{c['model']}-{c['max_model_len']}-tp{c['tensor_parallel_size']}{tail}"


@pytest.mark.parametrize("case", RECORDED["cases"], ids=_case_id)
def test_matches_vllm_0_33(case):
    name = case["model"]
    if name.endswith(".json"):  # a config.json fixture, relative to the repository
        name = str(Path(__file__).parents[1] / name)
    m = hardware.model(name, None, case["kv_cache_dtype"])
    if "chunked" in m.promoted_layers:  # recorded from vLLM's functions with the manager on
        m = hardware.model(name, None, case["kv_cache_dtype"], False)
    modes = {}
    if "mamba_cache_mode" in case:
        modes = {k: case[k] for k in ("mamba_cache_mode", "gdn_prefill_backend") if k in case}
    cap = kv_cache.capacity(
        m,
        case["block_size"],
        case["max_model_len"],
        case["max_num_batched_tokens"],
        case["async_scheduling"],
        case["tensor_parallel_size"],
        available_bytes=case["available_bytes"],
        **modes,
    )
    assert cap.num_gpu_blocks == case["num_gpu_blocks"]
    assert len(cap.groups) == case["num_groups"]
    assert cap.blocks_per_request == case["blocks_per_request"]
    assert cap.max_concurrency == case["max_concurrency"]  # same division, exactly
    assert cap.starts == case["starts"]
    if modes:  # hybrids: the block size vLLM aligned, a block's bytes, the logged tokens
        assert cap.block_size == case["aligned_block_size"]
        assert cap.bytes_per_block == case["bytes_per_block"]
        assert cap.log_tokens == case["log_tokens"]
    if "state_bytes" in case:  # Mamba2: the state vLLM's MambaSpec holds, unpadded
        assert m.state_kind == "mamba2"
        assert m.linear_state_bytes(case["tensor_parallel_size"]) == case["state_bytes"]


def test_recording_covers_mamba2_hybrids():
    """nemotron_h (catalog) and granitemoehybrid (fixture), prefix caching off
    and on, tp 1 and 2, fp8 KV, and a pool too small to start."""
    m2 = [c for c in RECORDED["cases"] if c.get("state") == "mamba2"]
    models = {c["model"] for c in m2}
    assert "nvidia/Nemotron-H-8B-Base-8K" in models
    assert any(x.endswith("granite-hybrid-invented.json") for x in models)
    assert {c["mamba_cache_mode"] for c in m2} == {"none", "align"}
    assert {c["tensor_parallel_size"] for c in m2} >= {1, 2}
    assert {c["kv_cache_dtype"] for c in m2} == {"auto", "fp8"}
    assert {c["starts"] for c in m2} == {True, False}


def test_nemotron_h_block_groups_and_blocks_per_request():
    """Independent arithmetic: the 4,255,744 B Mamba2 state over 16 x 4,096 B
    attention token-layers -> 16 x cdiv(4,255,744, 65,536) = 1,040 tokens (no
    64-alignment in align mode: MambaMixer2 declares none). 24 Mamba2 + 4
    attention layers (the 24 MLP layers hold no KV): groups of 4, 6 + 1. A
    request holds cdiv(8,192, 1,040) = 8 attention blocks plus 1 (none) or
    2 + 1 checkpoint (align) per Mamba2 group, whatever the GDN backend."""
    m = hardware.model("nemotron-h-8b")
    for mode, per_group in (("none", 1), ("align", 3)):
        for backend in ("triton", "flashinfer"):
            cap = kv_cache.capacity(m, 16, 8192, 8192, False, num_gpu_blocks=1000,
                                    mamba_cache_mode=mode, gdn_prefill_backend=backend)  # fmt: skip
            assert cap.block_size == 1040
            assert [(g.kind, g.layers) for g in cap.groups] == [("linear", 4)] * 6 + [("full", 4)]
            assert cap.blocks_per_request == 8 + 6 * per_group
            assert cap.bytes_per_block == 4 * 1040 * 4096


def test_recording_covers_hybrid_modes_and_tensor_parallel():
    hybrid = [c for c in RECORDED["cases"] if "gdn_prefill_backend" in c]
    assert {(c["mamba_cache_mode"], c["gdn_prefill_backend"]) for c in hybrid} == {
        ("none", "triton"),
        ("align", "triton"),
        ("align", "flashinfer"),
    }
    assert {c["tensor_parallel_size"] for c in hybrid} >= {1, 2, 4}
    assert any(c["model"].endswith("qwen3-next-like.json") for c in hybrid)  # bf16 SSM state
    assert {c["starts"] for c in hybrid} == {True, False}


def test_qwen35_27b_issue_figures_prefix_caching_off():
    """Issue 16: a 290,864-token pool and 33.04x at max_model_len 32,768.

    Independent arithmetic: a linear layer's state is 48 x 128 x 128 x 4 B (SSM,
    float32) + 3 x (2 x 16 x 128 + 48 x 128) x 2 B (conv) = 3,207,168 B; an
    attention token-layer is 2 x 4 x 256 x 2 B = 4,096 B, so the block grows to
    16 x cdiv(3,207,168, 16 x 4,096) = 784 tokens. 16 full + 48 linear layers:
    groups of 16, 1 + 3 groups. The logged pool 290,864 = 371 x 784 means
    num_blocks // 4 = 371, and 33.04 x 45 blocks per request (cdiv(32,768, 784) =
    42 plus one per linear group) pins num_blocks = 1,487."""
    m = hardware.model("qwen3.5-27b")
    assert m.linear_state_bytes() == 48 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 48 * 128) * 2
    cap = kv_cache.capacity(m, 16, 32768, 8192, False, num_gpu_blocks=1487)
    assert cap.block_size == 784
    assert [(g.kind, g.layers) for g in cap.groups] == [("linear", 16)] * 3 + [("full", 16)]
    assert cap.blocks_per_request == 42 + 3
    assert round(cap.max_concurrency, 2) == 33.04
    assert cap.per_group_tokens == 290864  # the issue's log (releases before 0.33)
    assert cap.log_tokens == 1487 * 32768 // 45  # what vLLM 0.33 logs for this pool
    # without the linear layers' state blocks, the 8.88x the planner printed:
    assert round(cap.per_group_tokens / 32768, 2) == 8.88


def test_qwen35_27b_prefix_caching_on_is_vllm_default_mode():
    """Prefix caching on (vLLM's default): mamba_cache_mode "align" keeps 2
    state blocks per linear group; with FlashInfer's GDN prefill (Hopper's
    default) one more, and the block aligns to a multiple of 64: 64 x
    cdiv(3,207,168, 64 x 4,096) = 832 tokens, so the same bytes hold fewer blocks."""
    m = hardware.model("qwen3.5-27b")
    pool = 1487 * 16 * 784 * 4096
    tri = kv_cache.capacity(m, 16, 32768, 8192, False, available_bytes=pool,
                            mamba_cache_mode="align")  # fmt: skip
    assert (tri.block_size, tri.num_gpu_blocks, tri.blocks_per_request) == (784, 1487, 42 + 6)
    assert round(tri.max_concurrency, 2) == 30.98
    fi = kv_cache.capacity(m, 16, 32768, 8192, False, available_bytes=pool,
                           mamba_cache_mode="align", gdn_prefill_backend="flashinfer")  # fmt: skip
    assert fi.block_size == 832 and fi.num_gpu_blocks == pool // (16 * 832 * 4096) == 1401
    assert fi.blocks_per_request == cdiv(32768, 832) + 3 * 3 == 49
    assert round(fi.max_concurrency, 2) == 28.59


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_starcoder2_sliding_window_public_figure():
    """vLLM logged 178.68x for 137,407 blocks and 16,384 tokens: each request holds
    cdiv(4,096 - 1 + 8,192, 16) + 1 = 769 blocks with one batch in flight."""
    m = hardware.model("bigcode/starcoder2-3b")
    one = kv_cache.capacity(m, 16, 16384, 8192, False, num_gpu_blocks=137407)
    assert one.blocks_per_request == 769
    assert round(one.max_concurrency, 2) == 178.68
    both = kv_cache.capacity(m, 16, 16384, 8192, True, num_gpu_blocks=137407)
    # async: two batches in flight, min(4,095 + 16,384, 16,384) -> 1,024 + 1 blocks
    assert both.blocks_per_request == 1025
    assert round(both.max_concurrency, 2) == round(137407 / 1025, 2) == 134.06


def test_full_attention_start_up_check_is_the_null_block_rule():
    """For one full-attention group the byte check is N >= cdiv(mml, bs) + 1."""
    m = hardware.model("llama-3.1-8b")
    for n, starts in ((65, True), (64, False)):
        assert kv_cache.capacity(m, 16, 1024, 2048, False, num_gpu_blocks=n).starts is starts


def test_hybrid_groups_follow_vllm_group_size_rule():
    """gemma-3: 52 sliding + 10 full layers -> group size 10, 6 + 1 groups;
    gpt-oss: 12 + 12 -> 2 groups of 12."""
    g3 = kv_cache.groups(hardware.model("gemma-3-27b"), 16)
    assert [(g.kind, g.layers) for g in g3] == [("sliding", 9)] * 4 + [("sliding", 8)] * 2 + [
        ("full", 10)
    ]
    oss = kv_cache.groups(hardware.model("gpt-oss-20b"), 16)
    assert [(g.kind, g.layers) for g in oss] == [("sliding", 12), ("full", 12)]


def test_mla_page_is_one_latent_shared_by_tp_ranks():
    m = hardware.model("deepseek-v3")
    assert m.mla_dim == 512 + 64
    assert kv_cache.page_bytes(m, 64, tp=8) == kv_cache.page_bytes(m, 64, tp=1) == 64 * 576 * 2


def test_chunked_local_attention_blocks_per_request():
    """Llama 4 Scout: 36 chunked (8,192) + 12 NoPE full layers -> 3 + 1 groups; a
    request holds cdiv(min(8,192 + 8,192, mml), 16) = 1,024 blocks per chunked
    group and cdiv(131,072, 16) = 8,192 in the full one, with the hybrid KV cache
    manager on (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1). vLLM 0.33's
    default turns it off for chunked local attention (``VllmConfig.__post_init__``):
    every layer then stores every token, one full group of 48 layers."""
    m = hardware.model("llama-4-scout", disable_hybrid_kv_cache_manager=False)
    cap = kv_cache.capacity(m, 16, 131072, 8192, False, tp=4, num_gpu_blocks=163840)
    assert [g.kind for g in cap.groups] == ["chunked"] * 3 + ["full"]
    assert cap.blocks_per_request == 3 * 1024 + 8192
    assert round(cap.max_concurrency, 2) == 14.55
    off = hardware.model("llama-4-scout")  # vLLM's default: the manager off
    assert off.layer_types == ("full",) * 48 and off.promoted_layers.count("chunked") == 36
    cap = kv_cache.capacity(off, 16, 131072, 8192, False, tp=4, num_gpu_blocks=40960)
    assert [g.kind for g in cap.groups] == ["full"] and cap.blocks_per_request == 8192
    assert hardware.kv_page_bytes(off, 16, 4) == 16 * 48 * 2 * 2 * 128 * 2  # 2 KV heads per rank
