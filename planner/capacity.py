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

import math

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


def vllm_starts(num_gpu_blocks: int, max_model_len: int, block_size: int, count_null: bool) -> bool:
    """Whether vLLM's start-up check accepts the pool (0.33: ``count_null=True``)."""
    return num_gpu_blocks >= min_startup_blocks(max_model_len, block_size, count_null)


def livelock_gap(
    num_gpu_blocks: int, block_size: int, max_model_len: int, null_block: bool = True
) -> tuple[int, int] | None:
    """Request sizes (final prompt + output tokens, capped at max_model_len) that
    are admitted but can never finish, as an inclusive range, or None.

    A request that ends with T tokens computes KV for T - 1 of them (the last
    sampled token is never fed back), so it needs ``cdiv(T - 1, bs)`` blocks.
    With U = max_servable_tokens, sizes U + 2 .. max_model_len stall for ever
    once they hold U + 1 tokens (scenario S3: N = 64, bs 16 -> 1010..1024).
    Prompts alone above U are refused by the whole-sequence gate at the head of
    ``waiting`` and block it: they are inside this range too.
    """
    lo = max_servable_tokens(num_gpu_blocks, block_size, null_block) + 2
    return (lo, max_model_len) if lo <= max_model_len else None


def max_concurrency(num_gpu_blocks: int, block_size: int, tokens: int, vllm_style: bool) -> float:
    """Requests of ``tokens`` tokens that fit the pool at once.

    ``vllm_style``: as vLLM's "Maximum concurrency for T tokens per request" log
    line, ``N / cdiv(T, bs)`` (it counts the null block); else the true
    ``(N - 1) / cdiv(T, bs)``.
    """
    blocks = num_gpu_blocks if vllm_style else usable_blocks(num_gpu_blocks, True)
    return blocks / cdiv(tokens, block_size)


def analytic_safe_max_num_seqs(
    num_gpu_blocks: int, block_size: int, request_tokens: float, null_block: bool = True
) -> int:
    """``floor((N - 1) / cdiv(L, bs))``: how many requests of L tokens (e.g. the
    mean prompt + mean output) fit the usable pool together, so that requests
    admitted together can all grow to full length without preemption."""
    per_request = max(1, math.ceil(request_tokens / block_size))
    return usable_blocks(num_gpu_blocks, null_block) // per_request
