"""Mitigation policies as small jitted helpers (off by default = vLLM 0.33).

- Victim choice (``victim``): ``youngest`` is vLLM's FCFS rule (the tail of
  ``running``, the most recently admitted); ``priority`` is vLLM's priority
  rule (largest (priority, arrival), the first in ``running`` on a tie,
  ``Scheduler.schedule``); ``least_progress``
  evicts the request with the fewest computed tokens, so the least work is
  lost (progress-aware eviction, as proposed in the BLIS over-admission
  report); ``most_blocks`` evicts the largest KV holder, freeing the most
  memory per eviction. Ties go to the most recently admitted.
- ``anti_starvation`` K: a request preempted K times is not chosen again while
  an unprotected candidate exists (the report's anti-starvation boost).
- ``admission``: ``projected`` admits a waiting request only if the blocks
  every running request and this one would hold at completion fit the usable
  pool, projecting each to its bound: the stop length (max_model_len, as vLLM
  knows when a client sets no max_tokens); ``projected_oracle`` projects to the
  true output length, which only a simulator knows. Both are the report's
  "projected-capacity admission".
- Adaptive cap (``adaptive_window`` W steps, ``adaptive_threshold`` T,
  ``adaptive_step`` s): at the end of every window of W steps, if more than T
  preemptions happened in it, the effective max_num_seqs drops to the running
  count minus one (at least 1); otherwise it grows by s, up to max_num_seqs
  (AIMD-style feedback, as the report's "adaptive batch cap").
- Swap preemption (``preemption_mode = "swap"``, ``cpu_swap_blocks``,
  ``swap_bandwidth_gbps``, ``kv_block_bytes``): a victim's KV moves to a CPU
  tier of that many blocks instead of being dropped, keeping its computed
  tokens; re-admission moves it back. Each transfer adds blocks x
  ``kv_block_bytes`` / bandwidth to the step's time. When the tier has no
  room, the victim is recomputed as in vLLM. (vLLM v0 had swap preemption;
  v1 recomputes.) The kernel code is in ``step.py`` next to the preemption.
"""

from __future__ import annotations

from numba import njit

from planner.capacity import blocks_for_tokens

# The codes of planner.config.VICTIMS and planner.config.ADMISSIONS.
YOUNGEST, PRIORITY, LEAST_PROGRESS, MOST_BLOCKS = 0, 1, 2, 3
VANILLA, PROJECTED, PROJECTED_ORACLE = 0, 1, 2


@njit(cache=True)
def projected_blocks(r, admission, prompt, max_tokens, stop_len, mml, bs):
    """Blocks request r would hold at completion under an admission policy."""
    if admission == PROJECTED_ORACLE:
        return blocks_for_tokens(min(prompt[r] + max_tokens[r], stop_len), mml, bs)
    return blocks_for_tokens(stop_len, mml, bs)


@njit(cache=True, inline="always")
def precedes(a, b, priority, entry_ns):
    """``Request.__lt__`` (``vllm/v1/request.py``): (priority, arrival_time, id)."""
    if priority[a] != priority[b]:
        return priority[a] < priority[b]
    if entry_ns[a] != entry_ns[b]:
        return entry_ns[a] < entry_ns[b]
    return a < b


@njit(cache=True)
def pick_victim(run, n_run, kind, anti_k, npre, ncomp, held, priority, entry_ns):
    """Index in ``running`` of the request to preempt (see the module docstring)."""
    protect = anti_k > 0
    if protect:
        any_open = False
        for j in range(n_run):
            if npre[run[j]] < anti_k:
                any_open = True
                break
        protect = any_open
    best = -1
    if kind == PRIORITY:
        # max(running, key=(priority, arrival_time)): ties go to the first in
        # running order, as Python's max does.
        for j in range(n_run):
            r = run[j]
            if protect and npre[r] >= anti_k:
                continue
            if best < 0:
                best = j
                continue
            b = run[best]
            if priority[r] > priority[b] or (
                priority[r] == priority[b] and entry_ns[r] > entry_ns[b]
            ):
                best = j
        return best
    for j in range(n_run - 1, -1, -1):  # youngest first: ties keep the youngest
        r = run[j]
        if protect and npre[r] >= anti_k:
            continue
        if best < 0:
            best = j
            if kind == YOUNGEST:
                return j
            continue
        b = run[best]
        if kind == LEAST_PROGRESS:
            if ncomp[r] < ncomp[b]:
                best = j
        elif held[r] > held[b]:
            best = j
    return best


@njit(cache=True)
def adaptive_cap_next(cap, max_cap, n_run, window_preemptions, threshold, step):
    """The effective max_num_seqs for the next window (see the module docstring)."""
    if window_preemptions > threshold:
        return max(1, n_run - 1)
    return min(max_cap, cap + step)
