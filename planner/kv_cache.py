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
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from planner.model_config import CHUNKED, FULL, SLIDING, ModelSpec


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
    """One layer's page: block_size x per-token-per-layer KV bytes on one GPU."""
    return block_size * m.kv_bytes_per_token_layer(tp)


def max_concurrent_batches(async_scheduling: bool) -> int:
    """``VllmConfig.max_concurrent_batches`` with pipeline parallel size 1."""
    return 2 if async_scheduling else 1


def groups(m: ModelSpec, block_size: int, tp: int = 1) -> list[Group]:
    """The model's KV cache groups (see module docstring)."""
    page = page_bytes(m, block_size, tp)
    spans = {FULL: 0, SLIDING: m.sliding_window or 0, CHUNKED: m.attention_chunk_size or 0}
    buckets = Counter(m.layer_types)  # first-seen order: layer order
    if len(buckets) == 1:
        kind = m.layer_types[0]
        return [Group(kind, spans[kind], m.num_layers, page)]
    smallest, largest = min(buckets.values()), max(buckets.values())
    size = largest if largest < smallest * 1.5 else smallest
    out = []
    for kind, n in buckets.items():
        k = cdiv(n, size)
        for i in range(k):
            out.append(Group(kind, spans[kind], len(range(i, n, k)), page))
    return out


def blocks_per_request(g: Group, max_model_len: int, block_size: int, in_flight: int) -> int:
    """Blocks one request may hold in group ``g`` (``max_memory_usage_bytes`` / page)."""
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


def capacity(
    m: ModelSpec,
    block_size: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    async_scheduling: bool,
    tp: int = 1,
    available_bytes: int | None = None,
    num_gpu_blocks: int | None = None,
) -> Capacity:
    """KV figures from the bytes profiled for the KV cache (``available_bytes``)
    or from a block count (``num_gpu_blocks``, vLLM's
    ``--num-gpu-blocks-override``: the available bytes become N x bytes per block).
    """
    gs = groups(m, block_size, tp)
    bpb = bytes_per_block(gs)
    if num_gpu_blocks is not None:
        available_bytes = num_gpu_blocks * bpb
    assert available_bytes is not None
    n = max(0, available_bytes // bpb)
    in_flight = max_concurrent_batches(async_scheduling) * max_num_batched_tokens
    per_req = sum(blocks_per_request(g, max_model_len, block_size, in_flight) for g in gs)
    page = page_bytes(m, block_size, tp)
    needed = sum(
        blocks_per_request(Group(k, g.span, 1, page), max_model_len, block_size, in_flight)
        * page
        * g.layers
        for g in gs
        for k in (g.kind,)
    )
    check = available_bytes - bpb
    return Capacity(
        num_gpu_blocks=int(n),
        bytes_per_block=bpb,
        blocks_per_request=per_req,
        max_concurrency=n / per_req,
        needed_bytes=needed,
        check_bytes=check,
        starts=check > 0 and needed <= check,
        groups=tuple(gs),
        in_flight_tokens=in_flight,
    )
