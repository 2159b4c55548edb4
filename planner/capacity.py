"""The only place that computes KV-cache capacity.

Every other module (the jitted kernel, the reference engine, the CLI) calls
these functions; nothing else re-derives usable blocks or servable tokens.
They are Numba ``njit`` functions, so the kernel inlines them and Python code
calls the very same compiled functions.

Sources:
- ``vllm/v1/core/block_pool.py``, ``BlockPool.__init__``: block 0 is taken as
  the null block, so a pool of N blocks hands out N-1.
- ``vllm/v1/core/kv_cache_utils.py`` (start-up check, 0.33 counts the null
  block): ``N >= cdiv(max_model_len, block_size) + 1``.
- vLLM PR #52530 (proposed): ``max_servable_num_tokens = (N-1) * block_size``.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True)
def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers (``vllm.utils.math_utils.cdiv``)."""
    return -(-a // b)


@njit(cache=True)
def usable_blocks(num_gpu_blocks: int, null_block: bool) -> int:
    """Blocks a request can ever hold: N-1 with vLLM's null block, N without (BLIS).

    Args:
        num_gpu_blocks: N, blocks in the pool (>= 1).
        null_block: True for vLLM (block 0 reserved), False for BLIS's pool.
    Returns:
        Usable blocks (int).
    """
    return num_gpu_blocks - 1 if null_block else num_gpu_blocks


@njit(cache=True)
def max_servable_tokens(num_gpu_blocks: int, block_size: int, null_block: bool) -> int:
    """Most tokens one sequence can hold in KV: usable blocks x block_size (tokens)."""
    return usable_blocks(num_gpu_blocks, null_block) * block_size


@njit(cache=True)
def blocks_for_tokens(num_tokens: int, max_model_len: int, block_size: int) -> int:
    """Blocks that hold ``min(num_tokens, max_model_len)`` tokens.

    Mirrors ``KVCacheManager.allocate_slots`` (``vllm/v1/core/kv_cache_manager.py``),
    which caps the slots it allocates (and the whole-sequence gate) at max_model_len.
    """
    return cdiv(min(num_tokens, max_model_len), block_size)


@njit(cache=True)
def stop_length(
    max_model_len: int, num_gpu_blocks: int, block_size: int, null_block: bool, bound: int
) -> int:
    """The ``num_tokens`` at which ``check_stop`` ends a request with reason "length".

    ``bound == 0``: vLLM 0.33, ``max_model_len`` (``vllm/v1/core/sched/utils.py``,
    ``check_stop``). ``bound == 1``: PR #52530, ``min(max_model_len, max_servable)``.
    """
    if bound == 0:
        return max_model_len
    return min(max_model_len, max_servable_tokens(num_gpu_blocks, block_size, null_block))


def min_startup_blocks(max_model_len: int, block_size: int, count_null_block: bool = True) -> int:
    """Smallest pool vLLM accepts at start-up for one max_model_len request.

    vLLM 0.33 counts the null block (``cdiv(mml, bs) + 1``); older releases did
    not (``cdiv(mml, bs)``), which leaves the one-block livelock gap.
    """
    return int(cdiv(max_model_len, block_size)) + (1 if count_null_block else 0)
