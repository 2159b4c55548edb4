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
(3,) int64 counters: free-queue length, blocks in use, total references.
Block tables live in ``table`` (S, maxb) int32 rows, one per running request
(``slot[r]``), with ``nblk[r]`` blocks and ``ncached[r]`` of them hashed.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import Dict

FREE_LEN, IN_USE, REFS = 0, 1, 2


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
    khead = Dict.empty(key_type=types.int64, value_type=types.int32)
    ktail = Dict.empty(key_type=types.int64, value_type=types.int32)
    return ref, hkey, hnext, hprev, fq_next, fq_prev, pc, khead, ktail


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
def _map_remove(b, hkey, hnext, hprev, khead, ktail):
    """Drop block b's hash (``_maybe_evict_cached_block``)."""
    k = hkey[b]
    p = hprev[b]
    n = hnext[b]
    if p >= 0:
        hnext[p] = n
    elif n >= 0:
        khead[k] = n
    else:
        del khead[k]
    if n >= 0:
        hprev[n] = p
    elif p >= 0:
        ktail[k] = p
    else:
        del ktail[k]
    hkey[b] = -1
    hnext[b] = -1
    hprev[b] = -1


@njit(cache=True)
def _map_insert(b, k, hkey, hnext, hprev, khead, ktail):
    """``_insert_block_hash``: block b now holds content k (appended to k's list)."""
    if hkey[b] == k:
        return
    hkey[b] = k
    hnext[b] = -1
    if k in ktail:
        t = ktail[k]
        hnext[t] = b
        hprev[b] = t
    else:
        hprev[b] = -1
        khead[k] = b
    ktail[k] = b


@njit(cache=True)
def get_new_blocks(n, row, start, ref, hkey, hnext, hprev, fq_next, fq_prev, pc, khead, ktail):
    """Pop n blocks from the front of the free queue into row[start:start+n]."""
    head = fq_next.shape[0] - 2
    for i in range(n):
        b = fq_next[head]
        _fq_unlink(b, fq_next, fq_prev)
        if hkey[b] >= 0:
            _map_remove(b, hkey, hnext, hprev, khead, ktail)
        ref[b] = 1
        row[start + i] = b
    pc[FREE_LEN] -= n
    pc[IN_USE] += n
    pc[REFS] += n


@njit(cache=True)
def lookup(r, ntok, bs, group, shared_len, n_req, maxb, khead, ref, hits):
    """``get_computed_blocks``: fill hits[:k] with the longest cached chain of
    r's full blocks within ntok - 1 tokens. Returns (k, hits still in the free queue)."""
    k = 0
    evictable = 0
    for j in range((ntok - 1) // bs):
        key = block_key(r, j, bs, group, shared_len, n_req, maxb)
        if key not in khead:
            break
        b = khead[key]
        hits[k] = b
        k += 1
        if ref[b] == 0:
            evictable += 1
    return k, evictable


@njit(cache=True)
def touch(hits, k, row, ref, fq_next, fq_prev, pc):
    """Take a reference on each hit block; copy them to the front of row."""
    for i in range(k):
        b = hits[i]
        if ref[b] == 0:
            _fq_unlink(b, fq_next, fq_prev)
            pc[FREE_LEN] -= 1
            pc[IN_USE] += 1
        ref[b] += 1
        row[i] = b
    pc[REFS] += k


@njit(cache=True)
def cache_blocks(
    r, row, ncached, upto, bs, group, shared_len, n_req, maxb, hkey, hnext, hprev, khead, ktail
):  # fmt: skip
    """Hash r's full blocks below ``upto`` known, computed tokens. Returns the
    new count of hashed blocks."""
    n_full = upto // bs
    for j in range(ncached, n_full):
        k = block_key(r, j, bs, group, shared_len, n_req, maxb)
        _map_insert(row[j], k, hkey, hnext, hprev, khead, ktail)
    return max(ncached, n_full)


@njit(cache=True)
def free_blocks(row, n, ref, hkey, fq_next, fq_prev, pc):
    """``KVCacheManager.free``: release row[:n] tail first. Returns the blocks
    that rejoined the free queue."""
    head = fq_next.shape[0] - 2
    tail = head + 1
    front = head  # unhashed blocks go to the front, in freeing order
    freed = 0
    for i in range(n - 1, -1, -1):
        b = row[i]
        ref[b] -= 1
        if ref[b] == 0:
            if hkey[b] < 0:
                _fq_insert_after(front, b, fq_next, fq_prev)
                front = b
            else:
                _fq_insert_after(fq_prev[tail], b, fq_next, fq_prev)
            freed += 1
    pc[FREE_LEN] += freed
    pc[IN_USE] -= freed
    pc[REFS] -= n
    return freed
