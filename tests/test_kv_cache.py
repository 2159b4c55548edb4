"""KV capacity per attention type (issue 16, item 3): planner.kv_cache against
figures recorded from vLLM 0.33.0's own functions by tools/record_vllm_capacity.py
(tests/data/vllm_capacity_0_33.json), and the issue's public figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner import catalog, hardware, kv_cache

RECORDED = json.loads((Path(__file__).parent / "data" / "vllm_capacity_0_33.json").read_text())


def test_recording_is_vllm_0_33_and_covers_every_family():
    assert RECORDED["vllm_version"] == "0.33.0"
    cases = RECORDED["cases"]
    assert len(cases) >= 10
    families = {catalog.entries()[c["model"]]["family"] for c in cases}
    assert families == {"dense", "moe", "mla", "sliding-window", "hybrid"}


@pytest.mark.parametrize(
    "case", RECORDED["cases"], ids=lambda c: f"{c['model']}-{c['max_model_len']}"
)
def test_matches_vllm_0_33(case):
    m = hardware.model(case["model"], None, case["kv_cache_dtype"])
    cap = kv_cache.capacity(
        m,
        case["block_size"],
        case["max_model_len"],
        case["max_num_batched_tokens"],
        case["async_scheduling"],
        case["tensor_parallel_size"],
        available_bytes=case["available_bytes"],
    )
    assert cap.num_gpu_blocks == case["num_gpu_blocks"]
    assert len(cap.groups) == case["num_groups"]
    assert cap.blocks_per_request == case["blocks_per_request"]
    assert cap.max_concurrency == case["max_concurrency"]  # same division, exactly
    assert cap.starts == case["starts"]


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
    group and cdiv(131,072, 16) = 8,192 in the full one."""
    m = hardware.model("llama-4-scout")
    cap = kv_cache.capacity(m, 16, 131072, 8192, False, tp=4, num_gpu_blocks=163840)
    assert [g.kind for g in cap.groups] == ["chunked"] * 3 + ["full"]
    assert cap.blocks_per_request == 3 * 1024 + 8192
    assert round(cap.max_concurrency, 2) == 14.55
