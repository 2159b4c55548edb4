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
replays every case through ``planner.models.kv_cache`` and requires equal figures.

Hybrid (Gated DeltaNet linear attention + full attention) cases, in
``HYBRID_CASES``, add the prefix-caching mode ("none" = prefix caching off,
"align" = on, vLLM's default) and the GDN prefill backend. For them the block
size comes from vLLM's own ``Platform._align_hybrid_block_size`` on the stub
(FlashAttention as the attention backend; the model class, whose module does
not import without its optional quantization packages, is stood in for by a
class whose two state methods are those of ``qwen3_5.py``: vLLM's
``MambaStateShapeCalculator.gated_delta_net_state_shape`` and
``MambaStateDtypeCalculator.gated_delta_net_state_dtype``; the layers'
prefill-checkpoint alignment, 64 with the FlashInfer backend in "align" mode,
is supplied the way ``GatedDeltaNetAttention`` declares it). Each linear layer
gets the ``MambaSpec`` that ``MambaBase.get_kv_cache_spec`` and
``GatedDeltaNetAttention.get_kv_cache_spec`` build.

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
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.core import kv_cache_planning as planning
from vllm.v1.core.kv_cache_utils import (
    get_kv_cache_capacity,
    get_max_concurrency_for_kv_cache_config,
)
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
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

# (catalog id, GiB available for KV per GPU, tp, kv dtype, block, max_model_len,
#  max_num_batched_tokens, async scheduling, mamba_cache_mode, GDN prefill backend)
QWEN35 = "Qwen/Qwen3.5-27B"
# a config.json fixture (qwen3_next: no mamba_ssm_dtype rule, SSM state in bf16)
NEXT_LIKE = "tests/data/configs/qwen3-next-like.json"
ISSUE_POOL = 1487 * 16 * 784 * 4096  # issue 16: 1,487 blocks of 16 layers x 784 x 4,096 B
HYBRID_CASES = [
    (QWEN35, ISSUE_POOL / GIB, 1, "auto", 16, 32768, 8192, False, "none", "triton"),
    (QWEN35, ISSUE_POOL / GIB, 1, "auto", 16, 32768, 8192, False, "align", "triton"),
    (QWEN35, ISSUE_POOL / GIB, 1, "auto", 16, 32768, 8192, False, "align", "flashinfer"),
    (QWEN35, 30.0, 2, "auto", 16, 131072, 8192, True, "none", "triton"),
    (QWEN35, 30.0, 2, "auto", 16, 131072, 8192, True, "align", "flashinfer"),
    (QWEN35, 50.0, 1, "fp8", 16, 65536, 4096, False, "align", "triton"),
    (QWEN35, 12.0, 4, "auto", 64, 262144, 8192, False, "none", "triton"),
    (QWEN35, 2.5, 1, "auto", 16, 262144, 8192, False, "none", "triton"),
    (QWEN35, 0.1, 1, "auto", 16, 32768, 8192, False, "align", "flashinfer"),
    (NEXT_LIKE, 8.0, 1, "auto", 16, 65536, 8192, False, "none", "triton"),
    (NEXT_LIKE, 8.0, 2, "auto", 16, 65536, 8192, False, "align", "flashinfer"),
]

# Mamba2 hybrids: (catalog id or fixture, GiB, tp, kv dtype, block, max_model_len,
#  max_num_batched_tokens, async scheduling, mamba_cache_mode)
NEMOTRON_H = "nvidia/Nemotron-H-8B-Base-8K"
GRANITE_FIXTURE = "tests/data/configs/granite-hybrid-invented.json"
MAMBA2_CASES = [
    (NEMOTRON_H, 20.0, 1, "auto", 16, 8192, 8192, False, "none"),
    (NEMOTRON_H, 20.0, 1, "auto", 16, 8192, 8192, False, "align"),
    (NEMOTRON_H, 30.0, 2, "auto", 16, 131072, 8192, True, "none"),
    (NEMOTRON_H, 30.0, 2, "auto", 16, 131072, 8192, True, "align"),
    (NEMOTRON_H, 12.0, 1, "fp8", 16, 65536, 4096, False, "align"),
    (NEMOTRON_H, 12.0, 4, "fp8", 32, 32768, 8192, False, "none"),
    (NEMOTRON_H, 0.08, 1, "auto", 16, 8192, 8192, False, "align"),
    (GRANITE_FIXTURE, 8.0, 1, "auto", 16, 32768, 8192, False, "none"),
    (GRANITE_FIXTURE, 8.0, 2, "auto", 16, 32768, 8192, False, "align"),
    (GRANITE_FIXTURE, 4.0, 2, "fp8", 16, 131072, 8192, True, "align"),
    (GRANITE_FIXTURE, 0.02, 1, "auto", 16, 131072, 8192, False, "none"),
]


def mamba2_specs(
    cfg: dict, tp: int, kv_dtype: str, block_size: int, mml: int, mode: str
) -> tuple[dict, int]:
    """(vLLM's per-layer specs, block size) for a Mamba2 hybrid (nemotron_h,
    granitemoehybrid). The model classes import, so their own
    ``get_mamba_state_shape_from_config`` / ``get_mamba_state_dtype_from_config``
    size the state (through ``MambaStateShapeCalculator.mamba2_state_shape``);
    nemotron_h's SSM dtype comes from ``NemotronHForCausalLMConfig``; the block
    is aligned by ``Platform._align_hybrid_block_size`` with the layers'
    prefill-checkpoint alignment None (``MambaMixer2`` does not declare one);
    each Mamba2 layer gets the ``MambaSpec`` that ``MambaMixer2.get_kv_cache_spec``
    builds (one prefill checkpoint block, alignment 1); MLP-only layers none."""
    import vllm.model_executor.layers.mamba.abstract as mamba_abstract
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.config import NemotronHForCausalLMConfig
    from vllm.model_executor.models.granitemoehybrid import GraniteMoeHybridForCausalLM
    from vllm.model_executor.models.nemotron_h import NemotronHForCausalLM
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}  # fixture notes
    hf = CONFIG_MAPPING[cfg["model_type"]](**cfg)
    nemotron = cfg["model_type"] == "nemotron_h"
    cls = NemotronHForCausalLM if nemotron else GraniteMoeHybridForCausalLM
    cache = CacheConfig(block_size=block_size)
    cache.cache_dtype = kv_dtype
    cache.mamba_cache_mode = mode
    if nemotron:
        NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype(cache_config=cache, hf_config=hf)
    cache.mamba_block_size = block_size if mode == "align" else mml
    kv = hf.num_key_value_heads
    head = (getattr(hf, "head_dim", None) if nemotron else None) or (
        hf.hidden_size // hf.num_attention_heads
    )
    model = SimpleNamespace(
        dtype=torch.bfloat16, use_mla=False, hf_text_config=hf, hf_config=hf,
        architecture=cls.__name__, is_hybrid=True,
        get_num_kv_heads=lambda pc: max(1, kv // pc.tensor_parallel_size),
        get_head_size=lambda: head,
    )  # fmt: skip
    vc = SimpleNamespace(
        model_config=model, cache_config=cache, speculative_config=None,
        parallel_config=SimpleNamespace(tensor_parallel_size=tp), num_speculative_tokens=0,
    )  # fmt: skip
    ModelRegistry.resolve_model_cls = lambda *a, **k: (cls, cls.__name__)
    Platform._find_non_ssm_backends = classmethod(lambda c, v: [FlashAttentionBackend])
    mamba_abstract.get_mamba_prefill_checkpoint_alignment = lambda v: None
    Platform._align_hybrid_block_size(vc, FlashAttentionBackend)
    bs = cache.block_size
    dtype = torch.uint8 if kv_dtype.startswith("fp8") else torch.bfloat16
    mamba = MambaSpec(
        shapes=tuple(cls.get_mamba_state_shape_from_config(vc)),
        dtypes=cls.get_mamba_state_dtype_from_config(vc),
        block_size=cache.mamba_block_size, page_size_padded=cache.mamba_page_size_padded,
        mamba_type=MambaAttentionBackendEnum.MAMBA2, mamba_cache_mode=mode,
        num_speculative_blocks=0, num_prefill_checkpoint_blocks=1,
        prefill_checkpoint_alignment=1,
    )  # fmt: skip
    out = {}
    for i, t in enumerate(hf.layer_types):
        if t in ("mamba", "linear_attention"):
            out[f"l{i}"] = mamba
        elif t in ("attention", "full_attention"):
            out[f"l{i}"] = FullAttentionSpec(
                block_size=bs, num_kv_heads=max(1, kv // tp), head_size=head, dtype=dtype
            )
    return out, bs


def hybrid_specs(
    cfg: dict, tp: int, kv_dtype: str, block_size: int, mml: int, mode: str, backend: str
) -> tuple[dict, int]:
    """(vLLM's per-layer specs, block size) for a Gated DeltaNet hybrid, the
    block size aligned by vLLM's ``_align_hybrid_block_size`` (module docstring)."""
    import vllm.model_executor.layers.mamba.abstract as mamba_abstract
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )
    from vllm.model_executor.models import ModelRegistry
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    text = cfg.get("text_config", cfg)
    hf = CONFIG_MAPPING[text["model_type"]](**text)
    cache = CacheConfig(block_size=block_size)
    cache.cache_dtype = kv_dtype
    cache.mamba_cache_mode = mode
    # Qwen3_5ForConditionalGenerationConfig (qwen3_5 architectures only)
    ssm = getattr(hf, "mamba_ssm_dtype", None) if text["model_type"].startswith("qwen3_5") else None
    if ssm is not None:
        cache.mamba_ssm_cache_dtype = ssm
    # MambaModelConfig.verify_and_update_config: the block size with prefix
    # caching (then the aligned one), max_model_len without
    cache.mamba_block_size = block_size if mode == "align" else mml
    kv = hf.num_key_value_heads
    model = SimpleNamespace(
        dtype=torch.bfloat16, use_mla=False, hf_text_config=hf, hf_config=hf,
        architecture="Qwen3_5ForCausalLM", is_hybrid=True,
        get_num_kv_heads=lambda pc: max(1, kv // pc.tensor_parallel_size),
        get_head_size=lambda: hf.head_dim,
    )  # fmt: skip
    vc = SimpleNamespace(
        model_config=model, cache_config=cache, speculative_config=None,
        parallel_config=SimpleNamespace(tensor_parallel_size=tp),
    )  # fmt: skip

    class Qwen35StateStandIn:
        """qwen3_5.py's two classmethods, through vLLM's own calculators."""

        @classmethod
        def get_mamba_state_shape_from_config(cls, v: SimpleNamespace) -> tuple:
            h = v.model_config.hf_text_config
            return MambaStateShapeCalculator.gated_delta_net_state_shape(
                v.parallel_config.tensor_parallel_size, h.linear_num_key_heads,
                h.linear_num_value_heads, h.linear_key_head_dim, h.linear_value_head_dim,
                h.linear_conv_kernel_dim, 0,
            )  # fmt: skip

        @classmethod
        def get_mamba_state_dtype_from_config(cls, v: SimpleNamespace) -> tuple:
            return MambaStateDtypeCalculator.gated_delta_net_state_dtype(
                v.model_config.dtype, v.cache_config.mamba_cache_dtype,
                v.cache_config.mamba_ssm_cache_dtype,
            )  # fmt: skip

    exports = mode == "align" and backend == "flashinfer"
    ModelRegistry.resolve_model_cls = lambda *a, **k: (Qwen35StateStandIn, "stand-in")
    Platform._find_non_ssm_backends = classmethod(lambda cls, v: [FlashAttentionBackend])
    mamba_abstract.get_mamba_prefill_checkpoint_alignment = lambda v: 64 if exports else None
    Platform._align_hybrid_block_size(vc, FlashAttentionBackend)
    bs = cache.block_size
    dtype = torch.uint8 if kv_dtype.startswith("fp8") else torch.bfloat16
    per_rank = max(1, kv // tp)
    mamba = MambaSpec(
        shapes=tuple(Qwen35StateStandIn.get_mamba_state_shape_from_config(vc)),
        dtypes=Qwen35StateStandIn.get_mamba_state_dtype_from_config(vc),
        block_size=cache.mamba_block_size, page_size_padded=cache.mamba_page_size_padded,
        mamba_type=MambaAttentionBackendEnum.GDN_ATTN, mamba_cache_mode=mode,
        num_speculative_blocks=0,
        num_prefill_checkpoint_blocks=1 if exports else 0,
        prefill_checkpoint_alignment=bs if exports else None,
    )  # fmt: skip
    out = {}
    for i, t in enumerate(hf.layer_types):
        if t == "linear_attention":
            out[f"l{i}"] = mamba
        else:
            out[f"l{i}"] = FullAttentionSpec(
                block_size=bs, num_kv_heads=per_rank, head_size=hf.head_dim, dtype=dtype
            )
    return out, bs


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
    mid, gib, tp, kvd, bs, mml, mnbt, asy = case[:8]
    hybrid = len(case) > 9
    mamba2 = len(case) == 9
    entries = [json.loads(p.read_text()) for p in CATALOG.glob("*.json")]
    if mid.endswith(".json"):  # a config.json fixture
        entry = {"config": json.loads((ROOT / mid).read_text())}
    else:
        entry = next(e for e in entries if e["id"] == mid)
    vc = stub_config(mml, mnbt, asy)
    if mamba2:
        mode, backend = case[8], "triton"
        specs, run_bs = mamba2_specs(entry["config"], tp, kvd, bs, mml, mode)
        vc.cache_config.mamba_cache_mode = mode
    elif hybrid:
        mode, backend = case[8:]
        specs, run_bs = hybrid_specs(entry["config"], tp, kvd, bs, mml, mode, backend)
        vc.cache_config.mamba_cache_mode = mode
    else:
        specs = layer_specs(entry["config"], tp, kvd, bs)
    available = int(gib * GIB)
    groups = planning.get_kv_cache_groups(vc, dict(specs))
    kcc = planning.get_kv_cache_config_from_groups(vc, groups, available)
    conc = get_max_concurrency_for_kv_cache_config(vc, kcc)
    try:
        planning.check_enough_kv_cache_memory(vc, specs, available)
        starts = True
    except ValueError:
        starts = False
    extra = {}
    if hybrid or mamba2:
        extra = {
            "mamba_cache_mode": mode,
            **({"gdn_prefill_backend": backend} if hybrid else {
                "state": "mamba2",
                "state_bytes": next(
                    v.real_page_size_bytes for v in specs.values() if isinstance(v, MambaSpec)
                ),
            }),
            "aligned_block_size": run_bs,
            "bytes_per_block": planning._get_kv_cache_bytes_per_block(
                groups, vc.cache_config.get_resolved_kv_cache_layout()
            ),
            "log_tokens": get_kv_cache_capacity(vc, kcc)[0],
        }  # fmt: skip
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
        **extra,
    }  # fmt: skip


def main() -> None:
    rows = [record(c) for c in CASES + HYBRID_CASES + MAMBA2_CASES]
    OUT.write_text(json.dumps({"vllm_version": VLLM_VERSION, "cases": rows}, indent=1) + "\n")
    for r in rows:
        print(r["model"], r["num_gpu_blocks"], f"{r['max_concurrency']:.2f}", r["starts"])


if __name__ == "__main__":
    main()
