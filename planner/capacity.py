"""The only place that computes KV-cache capacity.

Every other module (the jitted kernel, the reference engine, the CLI) calls
these functions; nothing else re-derives usable blocks or servable tokens.
They are Numba ``njit`` functions, so the kernel inlines them and Python code
calls the very same compiled functions.

Sources:
- ``vllm/v1/core/block_pool.py``, ``BlockPool.__init__``: block 0 is taken as
  the null block, so a pool of N blocks hands out N-1.
- ``vllm/v1/core/kv_cache_planning.py`` in 0.33 (``kv_cache_utils.py`` before),
  start-up check, which counts the null block since 0.29.0:
  ``N >= cdiv(max_model_len, block_size) + 1``; 0.28.0 compared max_model_len
  with all N blocks (``STARTUP_CHECK_HISTORY``).
- vLLM PR #52530 (proposed): ``max_servable_num_tokens = (N-1) * block_size``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

from numba import njit

from planner.models import hardware


@njit(cache=True, inline="always")
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


@njit(cache=True, inline="always")
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


# Which vLLM releases' start-up check counts the null block, read in each
# release's source (``get_kv_cache_configs`` and ``check_enough_kv_cache_memory``
# in ``vllm/v1/core/kv_cache_utils.py``, ``kv_cache_planning.py`` in 0.33):
# 0.10.0, 0.27.1 and 0.28.0 compare max_model_len's KV bytes with the whole
# pool; 0.29.0 first subtracts one block's bytes ("reserve the null block", the
# change of vLLM PR #47272), and 0.30.0-0.33.0 keep doing so. The "Maximum
# concurrency" log line divides all N blocks in 0.28.0, 0.29.0 and 0.33.0.
NULL_BLOCK_COUNTED = "vLLM >= 0.29.0"
NULL_BLOCK_NOT_COUNTED = "vLLM <= 0.28.0"
STARTUP_CHECK_HISTORY = (
    "the start-up check counts the null block since vLLM 0.29.0 (PR #47272); "
    "0.28.0 and earlier v1 releases do not, so they start on a pool one block short"
)


def min_startup_blocks(max_model_len: int, block_size: int, count_null_block: bool = True) -> int:
    """Smallest pool vLLM accepts at start-up for one max_model_len request.

    vLLM >= 0.29.0 counts the null block (``cdiv(mml, bs) + 1``); 0.28.0 and
    earlier did not (``cdiv(mml, bs)``), which leaves the one-block livelock gap
    (see ``STARTUP_CHECK_HISTORY``).
    """
    return int(cdiv(max_model_len, block_size)) + (1 if count_null_block else 0)


def vllm_starts(num_gpu_blocks: int, max_model_len: int, block_size: int, count_null: bool) -> bool:
    """Whether vLLM's start-up check accepts the pool (``count_null=True``:
    vLLM >= 0.29.0, including 0.33; False: <= 0.28.0)."""
    return num_gpu_blocks >= min_startup_blocks(max_model_len, block_size, count_null)


def mamba_max_num_seqs(num_gpu_blocks: int) -> int:
    """The largest max_num_seqs vLLM 0.33 starts with on a model with
    Mamba-style state layers (Gated DeltaNet, Mamba2: every decode sequence
    holds one Mamba cache block while the full CUDA graphs are captured):
    ``kv_cache_config.num_blocks``, the whole pool, null block included
    (``CompilationConfig.resolve_cudagraph_mode_and_sizes``,
    ``vllm/config/compilation.py``: "max_num_seqs (M) exceeds available Mamba
    cache blocks (N)"). It assumes vLLM's default CUDA graph mode
    (FULL_AND_PIECEWISE); ``--enforce-eager`` lifts the rule, and the planner
    does not model eager step times."""
    return num_gpu_blocks


def largest_starting_max_num_seqs(pool_at: Callable[[int], int], asked: int) -> int:
    """The largest n <= ``asked`` vLLM 0.33 starts with under the Mamba rule
    (``mamba_max_num_seqs``: n at most the pool's blocks) when the pool
    itself depends on max_num_seqs: ``pool_at(n)`` is num_gpu_blocks as vLLM
    profiles it at max_num_seqs n (smaller n, a smaller activation peak and
    fewer CUDA graphs, a larger pool), non-increasing in n, so whether n
    starts flips once and a bisection finds the last n that does. 0 when
    none does. Raises nothing of its own (``pool_at``'s errors pass)."""
    lo, hi = 0, asked  # lo starts (0 trivially), every n > hi does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if mid <= mamba_max_num_seqs(pool_at(mid)):
            lo = mid
        else:
            hi = mid - 1
    return lo


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
    num_gpu_blocks: int,
    block_size: int,
    request_tokens: float,
    null_block: bool = True,
    window_cap: int = 0,
    full_groups: int = 1,
    window_groups: int = 0,
    state_groups: int = 0,
) -> int:
    """``floor((N - 1) / cdiv(L, bs))``: how many requests of L tokens (e.g. the
    mean prompt + mean output) fit the usable pool together, so that requests
    admitted together can all grow to full length without preemption.

    ``window_cap`` > 0 (a sliding window, ``SchedulerConfig.sliding_window_cap``):
    a request holds at most that many pool blocks at once (vLLM's
    ``SlidingWindowSpec.max_admission_blocks_per_request``, the bound its
    ``remove_skipped_blocks`` keeps), so the per-request need is
    min(cdiv(L, bs), window_cap). With ``full_groups`` and ``window_groups``
    KV cache groups sharing the pool (a hybrid model; without them, one group
    of the kind ``window_cap`` says), a request holds that in each group;
    ``state_groups`` Mamba groups add one block each (``MambaManager`` in
    ``mamba_cache_mode`` "none": its block holds max_model_len tokens)."""
    blocks = max(1, math.ceil(request_tokens / block_size))
    if window_groups == 0 and window_cap > 0:  # one sliding-window group
        full_groups, window_groups = 0, 1
    windowed = min(blocks, window_cap) if window_cap > 0 else blocks
    per_request = max(1, full_groups * blocks + window_groups * windowed + state_groups)
    return usable_blocks(num_gpu_blocks, null_block) // per_request


def min_safe_num_gpu_blocks(max_model_len: int, block_size: int) -> int:
    """Smallest pool on which vLLM >= 0.29 starts *and* no request can livelock.

    Both conditions, from ``vllm_starts`` (``N >= cdiv(mml, bs) + 1``) and
    ``livelock_gap`` (none when ``(N - 1) * bs + 2 > mml``); the start-up rule
    is always the binding one, so this is ``cdiv(mml, bs) + 1`` blocks
    (S3: mml 1,024, bs 16 -> 65).
    """
    gap_free = int(cdiv(max_model_len - 1, block_size)) + 1  # (N-1)*bs >= mml-1
    return max(min_startup_blocks(max_model_len, block_size, True), gap_free)


def max_safe_model_len(num_gpu_blocks: int, block_size: int) -> int:
    """Largest max_model_len (tokens) that vLLM >= 0.29 accepts on this pool with
    no livelock gap: the servable tokens ``(N - 1) * bs`` (S3: 64 blocks ->
    1,008). Both rules (``vllm_starts``, ``livelock_gap``) hold up to it."""
    return int(max_servable_tokens(num_gpu_blocks, block_size, True))


UTILIZATION_STEP = 1000  # gpu_memory_utilization is searched in steps of 1/1000


def min_gpu_memory_utilization(
    need_blocks: int,
    model: str,
    gpu: str,
    block_size: int,
    tp: int = 1,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    disable_hybrid_kv_cache_manager: bool | None = None,
) -> float | None:
    """Smallest ``gpu_memory_utilization`` (a multiple of 0.001, in (0, 1]) at
    which vLLM's pool sizing (``hardware.num_gpu_blocks``, same allowances)
    gives at least ``need_blocks`` blocks; None if even 1.0 does not.

    Found by bisection over the sizing function itself, which grows with the
    utilisation, so the sizing formula lives in one place only.
    """
    m = hardware.model(model, quantization, kv_cache_dtype, disable_hybrid_kv_cache_manager)
    g = hardware.gpu(gpu)
    seqs, mnbt = max_num_seqs, max_num_batched_tokens

    def enough(k: int) -> bool:
        u = k / UTILIZATION_STEP
        try:
            n = hardware.num_gpu_blocks(m, g, u, block_size, tp, mnbt, seqs)
            return n >= need_blocks
        except hardware.HardwareError:  # no room for the KV cache at this utilisation
            return False

    steps = range(1, UTILIZATION_STEP + 1)
    i = bisect.bisect_left(steps, True, key=enough)
    return steps[i] / UTILIZATION_STEP if i < len(steps) else None
