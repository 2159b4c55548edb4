"""Block-hash traces: prefix-chained block ids and the ideal prefix-cache hit rate.

A block-hash trace (the Mooncake FAST'25 trace, or a generic trace with a
``hash_ids`` column) gives each request one id per ``hash_block_size`` prompt
tokens; equal ids at equal positions mean equal content. vLLM 0.33 hashes a
block together with its parent's hash (``hash_block_tokens`` in
``vllm/v1/core/kv_cache_utils.py``), so a block matches only when every block
before it matches too. ``chain_ids`` turns the trace's ids into ids of whole
prefixes, so that the kernel's per-block keys have that property whatever the
trace's ids do (the Mooncake ids are already chained: each id occurs at one
position after one parent id, which ``tests/test_block_hashes.py`` checks).

``ideal_hits`` is the reference figure: the hit rate with an unbounded cache
and requests replayed one at a time, counted as vLLM counts it
(``PrefixCacheStats``: hit tokens / queried tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from planner.workload.arrays import Workload

if TYPE_CHECKING:
    pass


def chain_ids(workload: Workload) -> np.ndarray:
    """Prefix ids for the workload's full trace blocks.

    Returns (H,) int64 aligned with ``workload.hash_ids``: for request r's
    trace block t, a dense id (0, 1, ... in order of first occurrence) shared
    by exactly the blocks whose ids at positions 0..t are all equal, or -1
    when the block is partial (it ends past the prompt: unique to the
    request). When the trace's own ids are chained already (each occurs at
    one depth after one parent id, as Mooncake's do), they are those ids;
    otherwise they are built one depth at a time, one per distinct (id at
    depth t - 1, raw id) pair. Raises ValueError when the workload has no
    hash ids.
    """
    ids, off, hb = workload.hash_ids, workload.hash_offsets, workload.hash_block_size
    if ids is None or off is None:
        raise ValueError(f"{workload.name}: no block hash ids")
    out = np.full(len(ids), -1, dtype=np.int64)
    n_full = np.asarray(workload.prompt_tokens, dtype=np.int64) // hb
    if not n_full.any():
        return out
    depth = np.arange(n_full.sum()) - np.repeat(np.cumsum(n_full) - n_full, n_full)
    pos = np.repeat(np.asarray(off, dtype=np.int64)[:-1], n_full) + depth  # in (r, t) order
    raw = np.asarray(ids, dtype=np.int64)
    parent = np.where(depth > 0, raw[pos - 1], -1)  # the raw id before (pos - 1 is full too)
    _, first, inverse = np.unique(raw[pos], return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    if (depth[first][inverse] == depth).all() and (parent[first][inverse] == parent).all():
        out[pos] = inverse
    else:
        out[pos] = _chain_by_depth(raw[pos], depth)
        _, first, inverse = np.unique(out[pos], return_index=True, return_inverse=True)
        inverse = inverse.ravel()
    # Renumber in order of first occurrence.
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    out[pos] = rank[inverse]
    return out


def _chain_by_depth(raw: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Chained ids (not yet dense in order) for full blocks given in (request,
    depth) order, ``raw`` (B,) int64 trace ids and ``depth`` (B,) int64: the
    blocks at depth t take one id per distinct (id at depth t - 1, raw id)."""
    out = np.full(len(raw), -1, dtype=np.int64)
    order = np.argsort(depth, kind="stable")  # depth by depth
    bounds = np.searchsorted(depth[order], np.arange(depth.max() + 2))
    _, dense = np.unique(raw, return_inverse=True)  # small raw ids: a pair fits one int64
    dense = dense.ravel().astype(np.int64)
    width = int(dense.max()) + 1
    next_id = 0
    for d in range(depth.max() + 1):
        at = order[bounds[d] : bounds[d + 1]]
        parent = out[at - 1] if d else np.full(len(at), -1, dtype=np.int64)
        pairs, inverse = np.unique((parent + 1) * width + dense[at], return_inverse=True)
        out[at] = next_id + inverse.ravel()
        next_id += len(pairs)
    return out


def private_singletons(chained: np.ndarray) -> np.ndarray:
    """``chained`` (``chain_ids``) with -1 for every id that only one
    request's blocks carry, as the kernel reads them (``state.Requests``).

    No other request can look such a block up, so the kernel gives it its
    request's private key (``prefix_cache.block_key``): hashing it then skips
    the hash map until the request is preempted (``prefix_cache.publish``),
    and what vLLM does is unchanged. A chained id occurs at most once per
    request (its depth is its position), so its count is its request count;
    every block after a singleton is a singleton too (its parent is unique).
    Returns a new (H,) int64 array."""
    out = np.array(chained, dtype=np.int64, copy=True)
    used = out >= 0
    if not used.any():
        return out
    counts = np.bincount(out[used])
    out[used & (counts[np.maximum(out, 0)] == 1)] = -1
    return out


@dataclass(frozen=True)
class IdealHits:
    """Prefix-cache tokens hit and queried over a workload (``ideal_hits``)."""

    hits: int
    queries: int

    @property
    def rate(self) -> float:
        """hits / queries (NaN with no queries)."""
        return self.hits / self.queries if self.queries else float("nan")


def ideal_hits(workload: Workload, block_size: int, max_model_len: int | None = None) -> IdealHits:
    """The hit rate of an unbounded prefix cache on a block-hash workload.

    Requests are taken in arrival order, each looked up once after every
    earlier one finished, with nothing evicted. Request r queries its prompt
    (``request.num_tokens``) and hits the full vLLM blocks of its leading full
    trace blocks that an earlier request's prompt also held as full trace
    blocks (only full blocks are cached; a partial trace block is unique),
    capped at prompt - 1 tokens (``get_computed_blocks``: the last token is
    always computed) rounded down to whole blocks. Output tokens carry no ids,
    so they are never shared. Requests the front end rejects (prompt >=
    ``max_model_len``) are not looked up. Plain Python over the raw ids (a
    trie of prefixes), independent of ``chain_ids`` and of the kernel.

    Raises ValueError when the workload has no hash ids or ``block_size`` does
    not divide its hash block size.
    """
    ids, off, hb = workload.hash_ids, workload.hash_offsets, workload.hash_block_size
    if ids is None or off is None:
        raise ValueError(f"{workload.name}: no block hash ids")
    if block_size < 1 or hb % block_size:
        raise ValueError(
            f"block_size {block_size} does not divide the trace's hash block size {hb}"
        )
    root: dict[int, dict] = {}
    hits = queries = 0
    raw = ids.tolist()
    for r, prompt in enumerate(workload.prompt_tokens.tolist()):
        if max_model_len is not None and prompt >= max_model_len:
            continue
        blocks = raw[int(off[r]) : int(off[r + 1])][: prompt // hb]
        node, matched = root, 0
        for h in blocks:
            if h not in node:
                break
            node, matched = node[h], matched + 1
        hit_blocks = min(matched * (hb // block_size), (prompt - 1) // block_size)
        hits += hit_blocks * block_size
        queries += prompt
        node = root
        for h in blocks:
            node = node.setdefault(h, {})
    return IdealHits(hits, queries)


_IDEAL: dict[tuple[str, int, int | None], float] = {}


def ideal_hit_rate(workload: Workload, block_size: int, max_model_len: int | None) -> float:
    """``ideal_hits(...).rate``, memoized per (workload fingerprint, block_size,
    max_model_len); NaN for a workload without hash ids, or for a block_size
    that does not divide its hash block size (only runs without prefix caching
    may have one: ``planner.workload_checks.check_block_sizes``)."""
    hb = workload.hash_block_size
    if workload.hash_ids is None or block_size < 1 or hb % block_size:
        return float("nan")
    key = (workload.fingerprint(), block_size, max_model_len)
    if key not in _IDEAL:
        _IDEAL[key] = ideal_hits(workload, block_size, max_model_len).rate
    return _IDEAL[key]
