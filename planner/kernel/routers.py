"""Routing policies of a fleet of replicas (``kernel/fleet.py``).

Policies (``ROUTERS``; each reads the loads ``fleet.replica_loads`` fills):
- ``round_robin``: replicas in turn.
- ``random``: uniform, from a SplitMix64 stream seeded by ``router_seed``
  (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
  OOPSLA 2014).
- ``least_outstanding``: fewest outstanding requests (the load SGLang's
  router falls back to when its cache-aware choice would unbalance), ties by
  KV blocks in use, then the lowest index.
- ``least_kv``: fewest KV blocks in use, ties by outstanding requests.
- ``prefix_affinity``: the replica that was last sent the longest prefix of
  this request (the router remembers, per prefix key, the replica it sent
  it to), when that prefix covers at least ``AFFINITY_MIN_MATCH`` of the
  prompt and the loads are balanced; otherwise ``least_outstanding``. Loads
  are imbalanced when max - min outstanding > ``BALANCE_ABS`` and max >
  ``BALANCE_REL`` x min. This is SGLang's cache-aware router (sgl-router,
  now the SGLang Model Gateway, ``--policy cache_aware`` with its documented
  defaults ``--cache-threshold 0.3``, ``--balance-abs-threshold 64``,
  ``--balance-rel-threshold 1.5``) with two simplifications: the router's
  memory of prefixes is never evicted, and a prefix sent to two replicas is
  remembered for the latest one only. Prefix keys: a block-hash trace's
  chained ids of full trace blocks (each stands for the whole prefix up to
  its block), else a request's prefix group (its shared tokens).
- ``llm_d``: llm-d's endpoint picker as its P/D sample configuration
  (llm-d-inference-scheduler ``deploy/config/pd-epp-config.yaml``) scores
  each profile's pods: ``prefix-cache-scorer`` with weight
  ``LLM_D_PREFIX_WEIGHT`` plus ``queue-scorer`` with weight
  ``LLM_D_QUEUE_WEIGHT``, then ``max-score-picker`` (``llm_d_choice``).

"""

from __future__ import annotations

import numpy as np
from numba import njit

from planner.kernel import state as S

# The codes of planner.config.ROUTERS.
ROUND_ROBIN, RANDOM, LEAST_OUTSTANDING, LEAST_KV, PREFIX_AFFINITY, LLM_D = range(6)

# llm-d's P/D sample configuration (llm-d-inference-scheduler,
# deploy/config/pd-epp-config.yaml): the weights of its two scorers in both
# the prefill and the decode profile.
LLM_D_PREFIX_WEIGHT = 2.0
LLM_D_QUEUE_WEIGHT = 1.0
# The same file's ``maxPrefixBlocksToMatch``: the prompt's blocks the index hashes.
LLM_D_MAX_PREFIX_BLOCKS = 256
# The same file's ``prefix-based-pd-decider`` ``nonCachedTokens``: a prompt
# under this many tokens (not cached on the decode pod) skips the prefill
# pod (``planner.disagg.PDRouter.prefills``).
LLM_D_NON_CACHED_TOKENS = 16

# SGLang Model Gateway's cache-aware defaults (docs/getting-started/load-balancing.md).
AFFINITY_MIN_MATCH = 0.3
BALANCE_ABS = 64
BALANCE_REL = 1.5


@njit(cache=True, inline="always")
def splitmix64(state):
    """SplitMix64: (next state, a 64-bit output), as uint64."""
    z = state + np.uint64(0x9E3779B97F4A7C15)
    nxt = z
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return nxt, z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def argmin2(a, b):
    """Index of the smallest a, ties by the smallest b, then the lowest index."""
    best = 0
    for i in range(1, a.shape[0]):
        if a[i] < a[best] or (a[i] == a[best] and b[i] < b[best]):
            best = i
    return best


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def affinity(r, prompt, key_off, keys, key_tokens, owner, load):
    """``prefix_affinity``'s choice for request r, or -1 for least_outstanding
    (``owner``: (keys, 1) int32, each key's replica, -1 for none):
    the replica last sent r's longest remembered prefix, if that prefix covers
    AFFINITY_MIN_MATCH of the prompt and the loads are balanced."""
    lo_load, hi_load = load[0], load[0]
    for i in range(1, load.shape[0]):
        lo_load, hi_load = min(lo_load, load[i]), max(hi_load, load[i])
    if hi_load - lo_load > BALANCE_ABS and hi_load > BALANCE_REL * lo_load:
        return -1
    for j in range(key_off[r + 1] - 1, key_off[r] - 1, -1):
        rep = owner[keys[j], 0]
        if rep >= 0:
            if key_tokens[j] >= AFFINITY_MIN_MATCH * prompt:
                return rep
            return -1
    return -1


@njit(cache=True, inline="always")
def _llm_d_score(i, r, prompt, block, key_off, keys, key_tokens, held, waiting, lo, hi):
    """Replica i's ``llm_d`` score for request r (``llm_d_choice``; ``lo``,
    ``hi``: the smallest and largest waiting queue)."""
    q = 1.0 if hi == lo else (hi - waiting[i]) / (hi - lo)
    blocks = (prompt + block - 1) // block if prompt >= block else 0
    total = min(blocks, LLM_D_MAX_PREFIX_BLOCKS)
    p = 0.0
    if total > 0:
        for j in range(key_off[r + 1] - 1, key_off[r] - 1, -1):
            if held[keys[j], i] != 0:
                m = blocks if key_tokens[j] >= prompt else key_tokens[j] // block
                p = min(m, total) / total
                break
    return LLM_D_PREFIX_WEIGHT * p + LLM_D_QUEUE_WEIGHT * q


@njit(cache=True, _nrt=False)
def llm_d_choice(r, prompt, block, key_off, keys, key_tokens, held, waiting, rng):
    """``llm_d``'s replica for request r (``prompt`` tokens) and the next
    state of the SplitMix64 stream ``rng``. Each replica i scores
    ``LLM_D_PREFIX_WEIGHT`` x prefix + ``LLM_D_QUEUE_WEIGHT`` x queue:

    - prefix (``prefix-cache-scorer``; its index from the approximate prefix
      producer, ``approximateprefix/hashing.go``): the prompt's leading
      ``block``-token blocks that the router sent to replica i before, over
      the prompt's blocks (a partial last block counts; at most
      ``LLM_D_MAX_PREFIX_BLOCKS``; 0 for a prompt under one block). The
      index's block size is the server's (its ``autoTune``); ``held`` (keys,
      replicas) int32 is nonzero where a prefix key was sent to a replica,
      and a key covers ``key_tokens`` tokens from the prompt's start (the
      whole prompt: its partial block matches too).
    - queue (``queue-scorer``): (max - w_i) / (max - min) over the replicas'
      waiting queues ``waiting`` (n,) int64, 1 for all when they are equal.

    ``max-score-picker`` shuffles the pods, then sorts them by score, stably:
    a uniform choice among the replicas of the highest score, drawn here from
    ``rng`` (only when several tie). Scores are computed twice (to find the
    best, then to pick among ties), the same way, so no scratch is kept."""
    n = waiting.shape[0]
    lo, hi = waiting[0], waiting[0]
    for i in range(1, n):
        lo, hi = min(lo, waiting[i]), max(hi, waiting[i])
    best, ties = -1.0, 0
    for i in range(n):
        sc = _llm_d_score(i, r, prompt, block, key_off, keys, key_tokens, held, waiting, lo, hi)
        if sc > best:
            best, ties = sc, 1
        elif sc == best:
            ties += 1
    pick = 0
    if ties > 1:
        rng, x = splitmix64(rng)
        pick = np.int64(x % np.uint64(ties))
    for i in range(n):
        if (
            _llm_d_score(i, r, prompt, block, key_off, keys, key_tokens, held, waiting, lo, hi)
            == best
        ):
            if pick == 0:
                return i, rng
            pick -= 1
    return 0, rng


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def llm_d_route(r, prompt, block, counters, lo, key_off, keys, key_tokens, held, waiting, rng):
    """``llm_d`` in a fleet (``fleet._choose``; a call of its own, not
    inlined, so that the fleet kernel's variants compile no more for it):
    fills ``waiting`` with each replica's ``vllm:num_requests_waiting`` from
    ``counters`` rows lo.., picks (``llm_d_choice``), and records the pick in
    the router's index (``held``, (keys, replicas) int32: its prefix keys
    now on that replica).
    Returns (replica, the next ``rng``).

    vLLM 0.33 reports waiting + kv_holding_waiting less the requests a
    ``schedule()`` skipped (``Scheduler.make_stats``, ``deferred_waiting``);
    a request holding KV blocks (a decode replica's load) was skipped, so the
    gauge is the waiting queue, as of the replica's latest step. (Async
    requests skipped for stale output tokens are counted here: a
    difference.)"""
    for i in range(waiting.shape[0]):
        waiting[i] = counters[lo + i, S.O_WAITING_END]
    dest, rng = llm_d_choice(r, prompt, block, key_off, keys, key_tokens, held, waiting, rng)
    for m in range(key_off[r], key_off[r + 1]):
        held[keys[m], dest] = 1
    return dest, rng
