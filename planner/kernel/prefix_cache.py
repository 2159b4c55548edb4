"""Prefix caching for the kernel: block identities, the free queue and the hash map.

Mirrors vLLM 0.33 with ``hash_block_size == block_size`` and one full-attention
group:

- ``vllm/v1/core/block_pool.py``: ``BlockPool.get_new_blocks`` (pop from the
  front of the free queue, evicting the block's hash), ``touch`` (a hit takes a
  reference, leaving the free queue), ``free_blocks`` (blocks reaching zero
  references rejoin the queue: unhashed ones at the front, hashed ones at the
  back, so cached blocks are evicted in LRU order), ``BlockHashToBlockMap``
  (per hash, blocks in insertion order; a lookup returns the first).
- ``vllm/v1/core/kv_cache_utils.py``: ``FreeKVCacheBlockQueue`` (a doubly
  linked list; here ``fq_next``/``fq_prev`` with sentinels N and N+1).
- ``vllm/v1/core/single_type_kv_cache_manager.py``: ``FullAttentionManager``
  ``find_longest_cache_hit`` (the longest chain of cached full blocks, at most
  ``num_tokens - 1`` tokens, from ``KVCacheManager.get_computed_blocks``),
  ``cache_blocks`` (hash the full blocks of known tokens), ``free`` (tail first).

Block contents: block j of request r holds its prefix group's tokens while
``(j + 1) * block_size <= shared_len[r]``, else tokens unique to r, so its hash
key is ``(R + group) * maxb + j`` or ``r * maxb + j``.

Per-config arrays (built by ``new_pool``): ``ref`` (N,) int32 reference counts;
``hkey`` (N,) int64 hash key or -1; ``hnext``/``hprev`` (N,) int32 links of
the blocks sharing one key; ``fq_next``/``fq_prev`` (N+2,) int32; ``pc``
(3,) int64 counters: free-queue length, blocks in use, total references;
``tkey``/``thead``/``ttail`` (cap,) the hash map, an open-addressing table
(linear probing, backward-shift deletion; cap = a power of two >= 2N) from a
key to the first and last block holding it.
Block tables live in ``table`` (S, maxb) int32 rows, one per running request
(``slot[r]``), with ``nblk[r]`` blocks and ``ncached[r]`` of them hashed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

FREE_LEN, IN_USE, REFS = 0, 1, 2
GOLDEN = np.uint64(11400714819323198485)  # 2**64 / golden ratio (Fibonacci hashing)


@njit(cache=True)
def table_capacity(n_blocks):
    """Slots of the hash table for ``n_blocks`` blocks: the smallest power of two
    >= max(4, 2 * n_blocks), so the open-addressing table stays at most half full."""
    cap = 4
    while cap < 2 * n_blocks:
        cap *= 2
    return cap


@njit(cache=True)
def new_pool(n_blocks, null_block):
    """Fresh pool state (see the module docstring); block 0 is taken if null_block."""
    ref = np.zeros(n_blocks, dtype=np.int32)
    hkey = np.full(n_blocks, -1, dtype=np.int64)
    hnext = np.full(n_blocks, -1, dtype=np.int32)
    hprev = np.full(n_blocks, -1, dtype=np.int32)
    fq_next = np.empty(n_blocks + 2, dtype=np.int32)
    fq_prev = np.empty(n_blocks + 2, dtype=np.int32)
    head = n_blocks
    tail = n_blocks + 1
    first = 1 if null_block else 0
    prev = head
    for b in range(first, n_blocks):
        fq_next[prev] = b
        fq_prev[b] = prev
        prev = b
    fq_next[prev] = tail
    fq_prev[tail] = prev
    pc = np.zeros(3, dtype=np.int64)
    pc[FREE_LEN] = n_blocks - first
    cap = table_capacity(n_blocks)
    tkey = np.full(cap, -1, dtype=np.int64)
    thead = np.full(cap, -1, dtype=np.int32)
    ttail = np.full(cap, -1, dtype=np.int32)
    return ref, hkey, hnext, hprev, fq_next, fq_prev, pc, tkey, thead, ttail


@njit(cache=True, inline="always")
def _home(k, mask):
    return np.int64((np.uint64(k) * GOLDEN) >> np.uint64(32)) & mask


@njit(cache=True)
def find(k, tkey):
    """Table slot holding key k, or -1."""
    mask = tkey.shape[0] - 1
    i = _home(k, mask)
    while tkey[i] != -1:
        if tkey[i] == k:
            return i
        i = (i + 1) & mask
    return -1


@njit(cache=True)
def _put(k, b, tkey, thead, ttail):
    """Key k's first (and last) block is b: k must be absent."""
    mask = tkey.shape[0] - 1
    i = _home(k, mask)
    while tkey[i] != -1:
        i = (i + 1) & mask
    tkey[i] = k
    thead[i] = b
    ttail[i] = b


@njit(cache=True)
def _delete(i, tkey, thead, ttail):
    """Empty slot i, shifting later entries of its probe run back."""
    mask = tkey.shape[0] - 1
    j = i
    while True:
        j = (j + 1) & mask
        if tkey[j] == -1:
            break
        h = _home(tkey[j], mask)
        # Move the entry at j to the hole at i unless its home lies in (i, j].
        if (j > i and (h <= i or h > j)) or (j < i and h <= i and h > j):
            tkey[i] = tkey[j]
            thead[i] = thead[j]
            ttail[i] = ttail[j]
            i = j
    tkey[i] = -1


@njit(cache=True, inline="always")
def max_hit_blocks(ntok, bs):
    """Blocks a lookup may hit: full blocks within ``num_tokens - 1`` tokens
    (the last token is always recomputed, ``get_computed_blocks``)."""
    return (ntok - 1) // bs


@njit(cache=True, inline="always")
def block_key(r, j, bs, group, shared_len, n_req, maxb):
    """Hash key of block j of request r (see the module docstring)."""
    if (j + 1) * bs <= shared_len[r]:
        return (n_req + group[r]) * maxb + j
    return r * maxb + j


@njit(cache=True)
def _fq_unlink(b, fq_next, fq_prev):
    p = fq_prev[b]
    n = fq_next[b]
    fq_next[p] = n
    fq_prev[n] = p


@njit(cache=True)
def _fq_insert_after(p, b, fq_next, fq_prev):
    n = fq_next[p]
    fq_next[p] = b
    fq_prev[b] = p
    fq_next[b] = n
    fq_prev[n] = b


@njit(cache=True)
def _map_remove(b, hkey, hnext, hprev, tkey, thead, ttail):
    """Drop block b's hash (``_maybe_evict_cached_block``)."""
    i = find(hkey[b], tkey)
    p = hprev[b]
    n = hnext[b]
    if p >= 0:
        hnext[p] = n
    else:
        thead[i] = n
    if n >= 0:
        hprev[n] = p
    else:
        ttail[i] = p
    if p < 0 and n < 0:
        _delete(i, tkey, thead, ttail)
    hkey[b] = -1
    hnext[b] = -1
    hprev[b] = -1


@njit(cache=True)
def _map_insert(b, k, hkey, hnext, hprev, tkey, thead, ttail):
    """``_insert_block_hash``: block b now holds content k (appended to k's list)."""
    if hkey[b] == k:
        return
    hkey[b] = k
    hnext[b] = -1
    i = find(k, tkey)
    if i >= 0:
        t = ttail[i]
        hnext[t] = b
        hprev[b] = t
        ttail[i] = b
    else:
        hprev[b] = -1
        _put(k, b, tkey, thead, ttail)


@njit(cache=True)
def get_new_blocks(
    n, table, s, start, ref, hkey, hnext, hprev, fq_next, fq_prev, pc, tkey, thead, ttail
):
    """Pop n blocks from the front of the free queue into table[s, start:start+n]."""
    head = fq_next.shape[0] - 2
    for i in range(n):
        b = fq_next[head]
        _fq_unlink(b, fq_next, fq_prev)
        if hkey[b] >= 0:
            _map_remove(b, hkey, hnext, hprev, tkey, thead, ttail)
        ref[b] = 1
        table[s, start + i] = b
    pc[FREE_LEN] -= n
    pc[IN_USE] += n
    pc[REFS] += n


@njit(cache=True)
def lookup(r, ntok, bs, group, shared_len, n_req, maxb, tkey, thead, ref, hits):
    """``get_computed_blocks``: fill hits[:k] with the longest cached chain of
    r's full blocks within ntok - 1 tokens. Returns (k, hits still in the free queue)."""
    k = 0
    evictable = 0
    for j in range(max_hit_blocks(ntok, bs)):
        i = find(block_key(r, j, bs, group, shared_len, n_req, maxb), tkey)
        if i < 0:
            break
        b = thead[i]
        hits[k] = b
        k += 1
        if ref[b] == 0:
            evictable += 1
    return k, evictable


@njit(cache=True)
def touch(hits, k, table, s, ref, fq_next, fq_prev, pc):
    """Take a reference on each hit block; copy them to the front of table[s]."""
    for i in range(k):
        b = hits[i]
        if ref[b] == 0:
            _fq_unlink(b, fq_next, fq_prev)
            pc[FREE_LEN] -= 1
            pc[IN_USE] += 1
        ref[b] += 1
        table[s, i] = b
    pc[REFS] += k


@njit(cache=True)
def cache_blocks(
    r, table, s, ncached, upto, bs, group, shared_len, n_req, maxb, hkey, hnext, hprev, tkey,
    thead, ttail,
):  # fmt: skip
    """Hash r's full blocks below ``upto`` known, computed tokens. Returns the
    new count of hashed blocks."""
    n_full = upto // bs
    for j in range(ncached, n_full):
        k = block_key(r, j, bs, group, shared_len, n_req, maxb)
        _map_insert(table[s, j], k, hkey, hnext, hprev, tkey, thead, ttail)
    return max(ncached, n_full)


@njit(cache=True)
def free_blocks(table, s, n, ref, hkey, fq_next, fq_prev, pc):
    """``KVCacheManager.free``: release table[s, :n] tail first. Returns the
    blocks that rejoined the free queue."""
    head = fq_next.shape[0] - 2
    tail = head + 1
    front = head  # unhashed blocks go to the front, in freeing order
    freed = 0
    for i in range(n - 1, -1, -1):
        b = table[s, i]
        ref[b] -= 1
        if ref[b] == 0:
            if hkey[b] < 0:
                _fq_insert_after(front, b, fq_next, fq_prev)
                front = b
            else:
                _fq_insert_after(np.int64(fq_prev[tail]), b, fq_next, fq_prev)
            freed += 1
    pc[FREE_LEN] += freed
    pc[IN_USE] -= freed
    pc[REFS] -= n
    return freed
