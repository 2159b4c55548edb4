"""KV cache groups, blocks per request, "Maximum concurrency" and the start-up
check per attention type, as vLLM 0.33.0 computes them.

Sources (vLLM 0.33.0):
- page size: ``vllm/v1/kv_cache_interface.py``, ``AttentionSpec.page_size_bytes``
  = block_size x kv_heads x (head_size + head_size_v) x dtype bytes; MLA
  (``MLAAttentionSpec``) has no V: block_size x head_size x dtype bytes.
- blocks one request may hold (``max_memory_usage_bytes`` / page):
  full attention (``FullAttentionSpec``) ``cdiv(max_model_len, bs)``;
  sliding window (``SlidingWindowSpec.max_admission_blocks_per_request``)
  ``cdiv(min(window - 1 + in_flight, max_model_len), bs) + 1``; chunked local
  (``ChunkedLocalAttentionSpec``) ``cdiv(min(chunk + in_flight, max_model_len), bs)``,
  where in_flight = ``VllmConfig.max_in_flight_tokens`` = max_concurrent_batches
  x max_num_batched_tokens, and max_concurrent_batches is 2 with async
  scheduling (pipeline parallel size 1), else 1.
- groups: ``vllm/v1/core/kv_cache_planning.py``, ``get_kv_cache_groups``: one
  group when every layer has the same spec; otherwise, with one page size,
  ``_get_kv_cache_groups_uniform_page_size``: layers bucketed by spec, group
  size = the smallest bucket (the largest if it is < 1.5 x the smallest),
  each bucket split into cdiv(len, group size) groups.
- bytes per block: ``_get_kv_cache_bytes_per_block``, the largest group's sum
  of layer pages; ``num_blocks = available // bytes per block``
  (``get_kv_cache_config_from_groups``).
- "Maximum concurrency": ``vllm/v1/core/kv_cache_utils.py``,
  ``get_max_concurrency_for_kv_cache_config``: num_blocks / sum over groups of
  the blocks a request holds in that group.
- start-up check: ``get_kv_cache_configs`` and ``_check_enough_kv_cache_memory``:
  available - one block's bytes (the null block) must be > 0 and hold the sum
  over layers of each layer's ``max_memory_usage_bytes``.

Linear attention (Gated DeltaNet, a ``MambaSpec`` per layer):
- state page: ``ModelSpec.linear_state_bytes`` (``MambaSpec.page_size_bytes``).
- block size: ``vllm/platforms/interface.py``, ``_align_hybrid_block_size``
  (called by ``update_block_size_for_backend`` for ``is_hybrid`` models):
  alignment a = max(kernel block, block_size), with a = lcm(a, 64) in "align"
  mode when the GDN prefill backend is FlashInfer
  (``FLASHINFER_GDN_CHECKPOINT_ALIGNMENT``, ``GatedDeltaNetAttention.
  get_prefill_checkpoint_alignment``); attention block = a x cdiv(state page,
  a x attention bytes per token and layer), if larger than block_size; the
  state page is padded to the attention page (``mamba_page_size_padded``), so
  every layer has one page size and ``_get_kv_cache_groups_uniform_page_size``
  groups them. kernel block = 16 (FlashAttention's ``MultipleOf(16)``).
- ``mamba_cache_mode`` (``vllm/config/cache.py``; ``MambaModelConfig.
  verify_and_update_config`` in ``vllm/model_executor/models/config.py``):
  "none" with prefix caching off, "align" with it on (vLLM's default).
- blocks a request holds in a linear group (``MambaSpec.max_memory_usage_bytes``
  / page): 1 in "none" mode; 2 in "align" mode, + 1 prefill checkpoint block
  when the layers export checkpoints (FlashInfer GDN prefill,
  ``num_prefill_checkpoint_blocks``); no speculative decoding.
Mamba2 layers (nemotron_h, granitemoehybrid: ``MambaMixer2``, a ``MambaSpec``
per layer, ``ModelSpec.state_kind`` "mamba2") go through the same block raising,
padding and grouping, with two differences (``vllm/model_executor/layers/
mamba/mamba_mixer2.py``): ``MambaMixer2.get_kv_cache_spec`` always declares one
prefill checkpoint block, so a request holds 2 + 1 blocks per Mamba2 group in
"align" mode (1 in "none"), whatever the GDN prefill backend; and the layer
declares no checkpoint alignment (``MambaBase.get_prefill_checkpoint_alignment``
is None), so the block is not raised to a multiple of 64. MLP-only layers
(nemotron_h "-" / "E", kind ``mlp``) have no KV cache spec and are in no group.

- logged figures (``kv_cache_utils.update_kv_cache_capacity``): vLLM 0.33 logs
  "GPU KV cache size: int(concurrency x max_model_len) tokens"; releases
  before it logged num_blocks // len(groups) x the smallest group block size
  (``_report_kv_cache_config``), which ``Capacity.per_group_tokens`` keeps.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from planner.models.config_json import CHUNKED, FULL, LINEAR, MLP, SLIDING, ModelSpec

KERNEL_BLOCK = 16  # FlashAttention's smallest kernel block (MultipleOf(16))
FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64  # vllm/v1/attention/backends/gdn_attn.py
MAMBA_CACHE_MODES = ("none", "align")
GDN_PREFILL_BACKENDS = ("triton", "flashinfer")


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers (``vllm.utils.math_utils.cdiv``)."""
    return -(-a // b)


@dataclass(frozen=True)
class Group:
    """One KV cache group: an attention kind (with its window or chunk, tokens),
    how many layers it holds, and one layer's page bytes on one GPU."""

    kind: str
    span: int  # sliding window or attention chunk size, tokens (0 for full)
    layers: int
    page_bytes: int


def page_bytes(m: ModelSpec, block_size: int, tp: int = 1) -> int:
    """One layer's page: block_size x per-token-per-layer KV bytes on one GPU
    (block_size as given: see ``aligned_block_size`` for hybrids)."""
    return block_size * m.kv_bytes_per_token_layer(tp)


def checkpoint_alignment(mamba_cache_mode: str, gdn_prefill_backend: str) -> int | None:
    """Token alignment of the prefill checkpoints the linear-attention layers
    export (``get_mamba_prefill_checkpoint_alignment``): 64 in "align" mode
    with FlashInfer's GDN prefill (vLLM's "auto" choice on Hopper, and on
    Blackwell with CUDA >= 13), else None (Triton)."""
    if mamba_cache_mode == "align" and gdn_prefill_backend == "flashinfer":
        return FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
    return None


def aligned_block_size(
    m: ModelSpec,
    block_size: int,
    tp: int = 1,
    mamba_cache_mode: str = "none",
    gdn_prefill_backend: str = "triton",
) -> int:
    """The block size vLLM 0.33 runs with, in tokens: ``block_size`` for a
    model without linear-attention layers, else raised so one attention page
    holds a layer's state (``_align_hybrid_block_size``, module docstring)."""
    state = m.linear_state_bytes(tp)
    if not state:
        return block_size
    align = max(KERNEL_BLOCK, block_size)
    ckpt = checkpoint_alignment(mamba_cache_mode, gdn_prefill_backend)
    if m.state_kind == "mamba2":  # MambaMixer2 declares no checkpoint alignment
        ckpt = None
    if mamba_cache_mode == "align":
        align = math.lcm(align, ckpt or 1)
    attn = align * cdiv(state, align * m.kv_bytes_per_token_layer(tp))
    attn = KERNEL_BLOCK * cdiv(attn, KERNEL_BLOCK)
    return max(block_size, attn)


def max_concurrent_batches(async_scheduling: bool) -> int:
    """``VllmConfig.max_concurrent_batches`` with pipeline parallel size 1."""
    return 2 if async_scheduling else 1


def groups(
    m: ModelSpec,
    block_size: int,
    tp: int = 1,
    mamba_cache_mode: str = "none",
    gdn_prefill_backend: str = "triton",
) -> list[Group]:
    """The model's KV cache groups (see module docstring); pages at
    ``aligned_block_size`` (a linear layer's state padded to that page)."""
    bs = aligned_block_size(m, block_size, tp, mamba_cache_mode, gdn_prefill_backend)
    page = page_bytes(m, bs, tp)
    spans = {
        FULL: 0,
        SLIDING: m.sliding_window or 0,
        CHUNKED: m.attention_chunk_size or 0,
        LINEAR: 0,
    }
    buckets = Counter(t for t in m.layer_types if t != MLP)  # first-seen order: layer order
    if len(buckets) == 1:
        kind, n = next(iter(buckets.items()))
        return [Group(kind, spans[kind], n, page)]
    smallest, largest = min(buckets.values()), max(buckets.values())
    size = largest if largest < smallest * 1.5 else smallest
    out = []
    for kind, n in buckets.items():
        k = cdiv(n, size)
        for i in range(k):
            out.append(Group(kind, spans[kind], len(range(i, n, k)), page))
    return out


def linear_blocks_per_request(
    mamba_cache_mode: str, gdn_prefill_backend: str = "triton", state_kind: str = "gdn"
) -> int:
    """Blocks one request holds in a linear-attention (GDN) or Mamba2 group
    (``MambaSpec.max_memory_usage_bytes`` / page, no speculative decoding):
    1 in "none" mode; in "align" mode 2 + the prefill checkpoint block, which
    Mamba2 layers always declare and GDN layers only with FlashInfer's prefill."""
    if mamba_cache_mode == "align":
        if state_kind == "mamba2":
            return 3
        return 2 + (checkpoint_alignment(mamba_cache_mode, gdn_prefill_backend) is not None)
    return 1


def blocks_per_request(
    g: Group,
    max_model_len: int,
    block_size: int,
    in_flight: int,
    mamba_cache_mode: str = "none",
    gdn_prefill_backend: str = "triton",
    state_kind: str = "gdn",
) -> int:
    """Blocks one request may hold in group ``g`` (``max_memory_usage_bytes`` / page)."""
    if g.kind == LINEAR:
        return linear_blocks_per_request(mamba_cache_mode, gdn_prefill_backend, state_kind)
    if g.kind == SLIDING:
        return cdiv(min(g.span - 1 + in_flight, max_model_len), block_size) + 1
    if g.kind == CHUNKED:
        return cdiv(min(g.span + in_flight, max_model_len), block_size)
    return cdiv(max_model_len, block_size)


def bytes_per_block(gs: list[Group]) -> int:
    """Bytes one block id takes in the pool: the largest group's layers x page."""
    return max(g.layers * g.page_bytes for g in gs)


@dataclass(frozen=True)
class Capacity:
    """vLLM 0.33's KV figures for one model, pool and scheduler setting."""

    num_gpu_blocks: int
    bytes_per_block: int
    blocks_per_request: int  # summed over groups
    max_concurrency: float  # vLLM's "Maximum concurrency for max_model_len tokens"
    needed_bytes: int  # start-up check: KV of one max_model_len request, all layers
    check_bytes: int  # start-up check: available minus the null block
    starts: bool
    groups: tuple[Group, ...]
    in_flight_tokens: int
    block_size: int  # tokens per block vLLM runs with (raised for linear-attention hybrids)
    mamba_cache_mode: str  # "none" (prefix caching off) or "align" (on)
    log_tokens: int  # vLLM 0.33's "GPU KV cache size": int(max_concurrency x max_model_len)
    per_group_tokens: int  # earlier releases' log: num_blocks // groups x smallest block


def capacity(
    m: ModelSpec,
    block_size: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    async_scheduling: bool,
    tp: int = 1,
    available_bytes: int | None = None,
    num_gpu_blocks: int | None = None,
    mamba_cache_mode: str = "none",
    gdn_prefill_backend: str = "triton",
) -> Capacity:
    """KV figures from the bytes profiled for the KV cache (``available_bytes``)
    or from a block count (``num_gpu_blocks``, vLLM's
    ``--num-gpu-blocks-override``: the available bytes become N x bytes per
    block, N counted in blocks of the aligned size).

    ``mamba_cache_mode``: "none" (prefix caching off) or "align" (on, vLLM's
    default); ``gdn_prefill_backend``: "triton" or "flashinfer" (module
    docstring). Both matter only for models with linear-attention layers.
    """
    if mamba_cache_mode not in MAMBA_CACHE_MODES:
        raise ValueError(f"mamba_cache_mode must be one of {MAMBA_CACHE_MODES}")
    if gdn_prefill_backend not in GDN_PREFILL_BACKENDS:
        raise ValueError(f"gdn_prefill_backend must be one of {GDN_PREFILL_BACKENDS}")
    bs = aligned_block_size(m, block_size, tp, mamba_cache_mode, gdn_prefill_backend)
    gs = groups(m, block_size, tp, mamba_cache_mode, gdn_prefill_backend)
    bpb = bytes_per_block(gs)
    if num_gpu_blocks is not None:
        available_bytes = num_gpu_blocks * bpb
    assert available_bytes is not None
    n = max(0, available_bytes // bpb)
    in_flight = max_concurrent_batches(async_scheduling) * max_num_batched_tokens
    modes = (mamba_cache_mode, gdn_prefill_backend, m.state_kind)
    per_req = sum(blocks_per_request(g, max_model_len, bs, in_flight, *modes) for g in gs)
    page = page_bytes(m, bs, tp)
    needed = sum(
        blocks_per_request(Group(g.kind, g.span, 1, page), max_model_len, bs, in_flight, *modes)
        * page
        * g.layers
        for g in gs
    )
    check = available_bytes - bpb
    conc = n / per_req
    # the smallest group block size: a linear group's MambaSpec.block_size is
    # max_model_len in "none" mode and the attention block in "align" mode
    smallest = (
        bs
        if mamba_cache_mode == "align"
        else min(max_model_len if g.kind == LINEAR else bs for g in gs)
    )
    return Capacity(
        num_gpu_blocks=int(n),
        bytes_per_block=bpb,
        blocks_per_request=per_req,
        max_concurrency=conc,
        needed_bytes=needed,
        check_bytes=check,
        starts=check > 0 and needed <= check,
        groups=tuple(gs),
        in_flight_tokens=in_flight,
        block_size=bs,
        mamba_cache_mode=mamba_cache_mode,
        log_tokens=int(conc * max_model_len),
        per_group_tokens=int(n) // len(gs) * smallest,
    )
