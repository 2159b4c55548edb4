"""Record KV capacity figures from vLLM 0.33.0's own functions (not a runtime dependency).

For each case (catalog model, KV bytes available per GPU, tensor-parallel size,
KV dtype, block size, max_model_len, max_num_batched_tokens, async scheduling)
this builds vLLM's per-layer KV cache specs (``FullAttentionSpec``,
``SlidingWindowSpec``, ``ChunkedLocalAttentionSpec``, ``MLAAttentionSpec``),
with each layer's attention type taken from the transformers config class
(``CONFIG_MAPPING[model_type](**config)``, whose defaults fill ``layer_types``
as vLLM sees them), and calls vLLM's
``get_kv_cache_groups``, ``get_kv_cache_config_from_groups``,
``get_max_concurrency_for_kv_cache_config`` and ``check_enough_kv_cache_memory``.
It writes ``tests/data/vllm_capacity_0_33.json``; ``tests/test_kv_cache.py``
replays every case through ``planner.kv_cache`` and requires equal figures.

vLLM's engine config is replaced by a stub holding only the attributes these
functions read (max_model_len, decode_context_parallel_size, the in-flight
tokens, cache layout, no override, no speculative decoding), so no GPU, model
weights or network are needed. Install as in ``tools/record_vllm_traces.py``,
then::

    /tmp/vllm-venv/bin/python tools/record_vllm_capacity.py
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import CONFIG_MAPPING
from vllm import __version__ as VLLM_VERSION
from vllm.config.cache import CacheConfig
from vllm.utils.math_utils import cdiv
from vllm.v1.core import kv_cache_planning as planning
from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

ROOT = Path(__file__).parents[1]
CATALOG = ROOT / "planner" / "data" / "models"
OUT = ROOT / "tests" / "data" / "vllm_capacity_0_33.json"
GIB = 2**30

# (catalog id, GiB available for KV per GPU, tp, kv dtype, block, max_model_len,
#  max_num_batched_tokens, async scheduling)
CASES = [
    ("meta-llama/Llama-3.1-8B-Instruct", 54.6, 1, "auto", 16, 131072, 8192, False),
    ("meta-llama/Llama-3.1-8B-Instruct", 54.6, 1, "fp8", 16, 8192, 2048, True),
    ("meta-llama/Llama-3.1-70B-Instruct", 35.6, 4, "auto", 16, 32768, 8192, False),
    ("meta-llama/Llama-3.1-70B-Instruct", 6.74, 1, "auto", 16, 2048, 2048, False),
    ("Qwen/Qwen2.5-7B-Instruct", 40.0, 2, "fp8", 32, 32768, 8192, False),
    ("Qwen/Qwen3-30B-A3B", 60.0, 8, "auto", 16, 40960, 8192, True),
    ("bigcode/starcoder2-3b", 137407 * 491520 / GIB, 1, "auto", 16, 16384, 8192, False),
    ("bigcode/starcoder2-3b", 137407 * 491520 / GIB, 1, "auto", 16, 16384, 8192, True),
    ("bigcode/starcoder2-15b", 20.0, 2, "fp8", 16, 16384, 2048, False),
    ("google/gemma-2-9b-it", 30.0, 1, "auto", 16, 8192, 2048, False),
    ("google/gemma-3-27b-it", 20.0, 2, "auto", 16, 131072, 8192, True),
    ("google/gemma-3-27b-it", 20.0, 1, "fp8", 16, 32768, 4096, False),
    ("openai/gpt-oss-20b", 50.0, 1, "auto", 16, 131072, 8192, False),
    ("openai/gpt-oss-120b", 40.0, 4, "fp8", 16, 131072, 8192, True),
    ("deepseek-ai/DeepSeek-V3", 30.0, 8, "auto", 64, 163840, 8192, False),
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", 50.0, 1, "fp8", 16, 32768, 2048, False),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 10.0, 8, "auto", 16, 32768, 8192, False),
    ("meta-llama/Llama-3.2-1B-Instruct", 0.01, 1, "auto", 16, 131072, 8192, False),
    ("mistralai/Mistral-7B-v0.1", 50.0, 1, "auto", 16, 32768, 8192, False),
    ("microsoft/Phi-3-mini-4k-instruct", 10.0, 1, "fp8", 16, 4096, 2048, True),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 30.0, 4, "auto", 16, 131072, 8192, False),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 30.0, 8, "fp8", 16, 1048576, 16384, True),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 2.0, 8, "auto", 16, 4096, 8192, False),
]


def layer_specs(cfg: dict, tp: int, kv_dtype: str, block_size: int) -> dict:
    """vLLM's KV cache spec of each layer, as its attention layers build them."""
    text = cfg.get("text_config", cfg)
    hf = CONFIG_MAPPING[text["model_type"]](**text)
    dtype = torch.uint8 if kv_dtype.startswith("fp8") else torch.bfloat16  # fp8 is stored as uint8
    n = hf.num_hidden_layers
    if getattr(hf, "kv_lora_rank", None):
        head = hf.kv_lora_rank + hf.qk_rope_head_dim
        return {
            f"l{i}": MLAAttentionSpec(
                block_size=block_size, num_kv_heads=1, head_size=head, dtype=dtype,
                cache_dtype_str=kv_dtype,
            )
            for i in range(n)
        }  # fmt: skip
    heads = hf.num_attention_heads
    kv = getattr(hf, "num_key_value_heads", None) or heads
    head = getattr(hf, "head_dim", None) or hf.hidden_size // heads
    per_rank = max(1, kv // tp)
    types = getattr(hf, "layer_types", None)
    if types is None and getattr(hf, "sliding_window", None):
        # EngineArgs.create_engine_config: no layer_types -> CacheConfig.sliding_window,
        # which every Attention layer without a per-layer window falls back to
        types = ["sliding_attention"] * n
    out = {}
    for i in range(n):
        t = types[i] if types else "full_attention"
        common = dict(block_size=block_size, num_kv_heads=per_rank, head_size=head, dtype=dtype)
        if t == "sliding_attention":
            out[f"l{i}"] = SlidingWindowSpec(**common, sliding_window=hf.sliding_window)
        elif t == "chunked_attention":
            out[f"l{i}"] = ChunkedLocalAttentionSpec(
                **common, attention_chunk_size=hf.attention_chunk_size
            )
        else:
            out[f"l{i}"] = FullAttentionSpec(**common)
    return out


def stub_config(mml: int, mnbt: int, async_scheduling: bool) -> SimpleNamespace:
    """The attributes of ``VllmConfig`` the capacity functions read."""
    cache = CacheConfig()
    cache.kv_cache_layout = "NHD"  # FlashAttention's layer-outer layout (legacy name of LBNHC)
    return SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=mml, original_max_model_len=mml),
        parallel_config=SimpleNamespace(
            decode_context_parallel_size=1, pipeline_parallel_size=1
        ),
        scheduler_config=SimpleNamespace(
            disable_hybrid_kv_cache_manager=False, max_num_batched_tokens=mnbt,
            async_scheduling=async_scheduling,
        ),
        cache_config=cache,
        speculative_config=None,
        attention_config=SimpleNamespace(hisparse_config=None),
        max_in_flight_tokens=(2 if async_scheduling else 1) * mnbt,
    )  # fmt: skip


def record(case: tuple) -> dict:
    mid, gib, tp, kvd, bs, mml, mnbt, asy = case
    entries = [json.loads(p.read_text()) for p in CATALOG.glob("*.json")]
    entry = next(e for e in entries if e["id"] == mid)
    specs = layer_specs(entry["config"], tp, kvd, bs)
    vc = stub_config(mml, mnbt, asy)
    available = int(gib * GIB)
    groups = planning.get_kv_cache_groups(vc, dict(specs))
    kcc = planning.get_kv_cache_config_from_groups(vc, groups, available)
    conc = get_max_concurrency_for_kv_cache_config(vc, kcc)
    try:
        planning.check_enough_kv_cache_memory(vc, specs, available)
        starts = True
    except ValueError:
        starts = False
    return {
        "model": mid, "available_bytes": available, "tensor_parallel_size": tp,
        "kv_cache_dtype": kvd, "block_size": bs, "max_model_len": mml,
        "max_num_batched_tokens": mnbt, "async_scheduling": asy,
        "num_gpu_blocks": kcc.num_blocks, "max_concurrency": conc,
        "num_groups": len(groups), "starts": starts,
        "blocks_per_request": sum(
            cdiv(g.kv_cache_spec.max_memory_usage_bytes(vc), g.kv_cache_spec.page_size_bytes)
            for g in groups
        ),
    }  # fmt: skip


def main() -> None:
    rows = [record(c) for c in CASES]
    OUT.write_text(json.dumps({"vllm_version": VLLM_VERSION, "cases": rows}, indent=1) + "\n")
    for r in rows:
        print(r["model"], r["num_gpu_blocks"], f"{r['max_concurrency']:.2f}", r["starts"])


if __name__ == "__main__":
    main()
