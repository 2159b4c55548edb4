"""Prefix caching for the kernel: block identities, the free queue and the hash map.

Mirrors vLLM 0.33 with ``hash_block_size == block_size``, for one
full-attention group and (below, "Several KV cache groups") for sliding-window
and hybrid models:

- ``vllm/v1/core/block_pool.py``: ``BlockPool.get_new_blocks`` (pop from the
  front of the free queue, evicting the block's hash), ``touch`` (a hit takes a
  reference, leaving the free queue), ``free_blocks`` (blocks reaching zero
  references rejoin the queue: unhashed ones at the front, hashed ones at the
  back, so cached blocks are evicted in LRU order), ``BlockHashToBlockMap``
  (per hash, blocks in insertion order; a lookup returns the first).
- ``vllm/v1/core/kv_cache_utils.py``: ``FreeKVCacheBlockQueue`` (a doubly
  linked list; here a ring ``fq`` of block ids in queue order, see below).
- ``vllm/v1/core/single_type_kv_cache_manager.py``: ``FullAttentionManager``
  ``find_longest_cache_hit`` (the longest chain of cached full blocks, at most
  ``num_tokens - 1`` tokens, from ``KVCacheManager.get_computed_blocks``),
  ``cache_blocks`` (hash the full blocks of known tokens), ``free`` (tail first).

Block contents: block j of request r holds its prefix group's tokens while
``(j + 1) * block_size <= shared_len[r]``, else tokens unique to r, so its hash
key is ``(R + group) * maxb + j`` or ``r * maxb + j``. With a block-hash trace
(``hash_block[0]`` = B > 0 tokens per trace block, block_size dividing B) block
j lies in trace block t = j * block_size // B; while that trace block is full
it has the identity (hash id h of t, offset o = j - t * B / block_size), key
``R * maxb + h * (B / block_size) + o``, else (the partial last trace block,
output tokens, or a trace block no other request carries:
``planner.workload.block_hashes.private_singletons``) it is unique to r. The
trace ids are prefix-chained
(``planner.workload.block_hashes.chain_ids``), so one key names the whole prefix up to
its block, as vLLM's chain hash (``hash_block_tokens`` of the parent hash and
the block's tokens, ``vllm/v1/core/kv_cache_utils.py``) does; ``lookup``
walks from block 0 and stops at the first miss.

Hash lookahead (``pc[LOOK]`` = L tokens, 1 with an EAGLE / MTP drafter and
prefix caching, else 0; ``step.hash_lookahead``): vLLM hashes a block with
the L tokens after it (``get_request_block_hasher``'s
``num_hash_lookahead_tokens``), so block j is shared only while
``(j + 1) * block_size + L <= shared_len[r]`` (with a trace: ``<= prompt``,
the token after a full trace block taken as shared with it), and a block is
hashed only once those tokens exist (``hashed_tokens``).

Per-config arrays, one ``PrefixCache`` record (built by ``new_cache``): ``ref``
(N,) int32 reference counts; ``hkey`` (N,) int64 hash key, -1 (none) or
``pending(k)``; ``hnext``/``hprev`` (N,) int32 links of the blocks sharing
one key; ``fq`` (cap,) int32 the free queue, ``fpos`` (N,) int32 a queued
block's slot in it; ``pc`` (6,) int64 counters: free-queue length, blocks in
use, total references, free block-table rows, and the ring's head and tail
positions;
``tkey``/``thead``/``ttail`` (cap,) the hash map, an open-addressing table
(linear probing, backward-shift deletion; cap = a power of two >= 2N) from a
key to the first and last block holding it.
Block tables live in ``table`` (S, maxb) int32 rows, one per running request
(``slot_of[r]``), whose first ``ncached[r]`` blocks are hashed; ``slots`` is the
stack of free rows and ``hits`` (maxb,) int32 a lookup's result.

Several KV cache groups (a sliding window, or a hybrid of full-attention and
sliding-window groups in one pool; ``pc[GROUPS]`` G groups, the first
``pc[SW_GROUPS]`` of them sliding, as the recorder orders vLLM's groups):
request r's table in group g is row ``slot_of[r] * G + g``, and a block of
group g caches content key k as ``k * G + g`` (vLLM's
``BlockHashWithGroupId``). A sliding-window row holds -1 (vLLM's null block)
for the blocks that left the window (``drop_window``,
``SlidingWindowManager.remove_skipped_blocks``). A lookup
(``HybridKVCacheCoordinator.find_longest_cache_hit``) takes the full groups'
chain, then within it the last run of ``pc[NEED]`` blocks cached in every
sliding group (``SlidingWindowManager.find_longest_cache_hit``), and cuts the
full hit to that; a full hit longer than the result is r's junction
(``junction[r]``, tokens; vLLM's ``shared_prefix_boundary``). A sliding
group hashes only the ``pc[NEED]`` blocks ending at the prompt's replay
boundary and at the junction (``reachable_block_mask`` under vLLM's default
``prefix_cache_retention_interval`` 0). Allocation, hashing and freeing go
group by group (``KVCacheCoordinator``); with G = 1 every function takes the
one-group path unchanged.

Private keys are published lazily. A key below ``R * maxb`` names a block only
request r can hold (``block_key``), so only r's own lookup can hit it, and r
looks up only when it is admitted: first (nothing of its own is cached yet)
or after a preemption. Hashing such a block stores ``pending(k)`` (a value
below -1) in ``hkey`` without touching the map or the block's links, so the
work is one write; ``publish`` enters r's
pending blocks into the map when r is preempted (``step._evict``), and a
block still pending when its owner finished is never entered, as no lookup
can reach it. What vLLM does is unchanged: each lookup returns the block
vLLM's map returns (a key has at most one pending block, r's own, and it
would stand last in the key's list), and a hashed block, pending or not,
rejoins the free queue at its back (``free_blocks``). The map operations
skipped are an insert and a removal per private block, which are most of
the cost on workloads without shared prefixes.

The free queue is a ring rather than vLLM's linked list, with the same order
and operations: the queue is ``fq[c & (cap - 1)]`` for positions c from
``pc[FQ_HEAD]`` to ``pc[FQ_TAIL]``, skipping -1. A hit on a free block
(``touch``; vLLM's ``remove``) leaves a -1 where it stood (``fpos``);
``get_new_blocks`` pops from the head (``popleft_n``), ``free_blocks`` adds
at either end (``prepend_n``/``append_n``). Popping n blocks then
reads n consecutive entries instead of chasing n links through the pool;
when the ring fills with gaps, ``_fq_compact`` closes them (cap >= 2N, so
that happens at most once per N removals).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from planner.kernel.uindex import uidx
from planner.kernel.variant import gated

FREE_LEN, IN_USE, REFS, FREE_SLOTS, FQ_HEAD, FQ_TAIL = 0, 1, 2, 3, 4, 5
GROUPS, SW_GROUPS, NEED = 6, 7, 8  # KV cache groups, the sliding ones, a window hit's run
LOOK = 9  # tokens past a block its hash covers (``hash_lookahead``)
PC_FIELDS = 10  # the length of ``pc``

PrefixCache = namedtuple(
    "PrefixCache",
    "table slots slot_of ncached hits ref hkey hnext hprev fq fpos pc tkey thead ttail junction",
)
GOLDEN = np.uint64(11400714819323198485)  # 2**64 / golden ratio (Fibonacci hashing)


@njit(cache=True)
def table_capacity(n_blocks):
    """Slots of the hash table and of the free-queue ring for ``n_blocks``
    blocks: the smallest power of two >= max(4, 2 * n_blocks), so the
    open-addressing table stays at most half full and the ring at most half
    live."""
    cap = 4
    while cap < 2 * n_blocks:
        cap *= 2
    return cap


def cache_entries(n_blocks: int, n_slots: int, maxb: int, n_req: int) -> tuple[int, int]:
    """(int32, int64) entries ``new_cache`` takes from its two arenas:
    ``table`` (n_slots x maxb; n_slots counts one row per KV cache group of
    each request slot), ``slot_of``/``ncached``/``junction`` (n_req),
    ``ref``/``hnext``/``hprev``/``fpos`` (n_blocks) and ``fq``/``thead``/``ttail``
    (cap) int32; ``hkey`` (n_blocks) and ``tkey`` (cap) int64, cap =
    ``table_capacity(n_blocks)``. Plain Python (``table_capacity``'s own
    code): the caller sizes the arenas before anything is compiled."""
    cap = int(table_capacity.py_func(n_blocks))
    i32 = n_slots * maxb + 3 * n_req + 4 * n_blocks + 3 * cap
    return int(i32), int(n_blocks + cap)


@njit(cache=True)
def new_cache(n_blocks, null_block, n_slots, maxb, n_req, a32, a64, groups, sw_groups, need, look):
    """Fresh prefix-cache state (see the module docstring) for ``n_blocks`` blocks,
    ``n_slots`` block-table rows of ``maxb`` blocks (``groups`` rows per
    request slot, the first ``sw_groups`` sliding-window ones, whose hits
    need runs of ``need`` blocks), ``n_req`` requests and ``look`` tokens of
    hash lookahead (``hash_lookahead``);
    block 0 is taken if null_block. Its large arrays are consecutive slices
    of the thread's arenas ``a32`` (int32) and ``a64`` (int64), as
    ``cache_entries`` counts them, initialized here except ``table``, whose
    entries are written before they are read. Raises ValueError if an arena
    is too short (Numba would clamp the slices)."""
    cap = table_capacity(n_blocks)
    o = n_slots * maxb
    flat_table = a32[:o]
    slot_of, ncached = a32[o : o + n_req], a32[o + n_req : o + 2 * n_req]
    junction = a32[o + 2 * n_req : o + 3 * n_req]
    o += 3 * n_req
    ref, hnext, hprev, fpos = (
        a32[o : o + n_blocks],
        a32[o + n_blocks : o + 2 * n_blocks],
        a32[o + 2 * n_blocks : o + 3 * n_blocks],
        a32[o + 3 * n_blocks : o + 4 * n_blocks],
    )
    o += 4 * n_blocks
    fq, thead, ttail = a32[o : o + cap], a32[o + cap : o + 2 * cap], a32[o + 2 * cap : o + 3 * cap]
    hkey, tkey = a64[:n_blocks], a64[n_blocks : n_blocks + cap]
    if o + 3 * cap > a32.shape[0] or n_blocks + cap > a64.shape[0]:  # before any write
        raise ValueError("prefix-cache arena too small (state.scratch_layout)")
    table = flat_table.reshape((n_slots, maxb))
    for a in (slot_of, hnext, hprev, thead, ttail):
        a[:] = -1
    ncached[:] = 0
    junction[:] = 0
    ref[:] = 0
    hkey[:] = -1
    tkey[:] = -1
    first = 1 if null_block else 0
    for b in range(first, n_blocks):
        fq[b - first] = b
        fpos[b] = b - first
    pc = np.zeros(PC_FIELDS, dtype=np.int64)
    pc[FREE_LEN] = n_blocks - first
    pc[FREE_SLOTS] = n_slots // groups
    pc[FQ_TAIL] = n_blocks - first
    pc[GROUPS], pc[SW_GROUPS], pc[NEED], pc[LOOK] = groups, sw_groups, need, look
    return PrefixCache(
        table,
        np.arange(n_slots // groups).astype(np.int32),
        slot_of,
        ncached,
        np.empty(groups * maxb, dtype=np.int32),
        ref,
        hkey,
        hnext,
        hprev,
        fq,
        fpos,
        pc,
        tkey,
        thead,
        ttail,
        junction,
    )


@njit(cache=True, inline="always")
def _home(k, mask):
    """Key k's first table slot: keys that differ only in their last 3 bits
    (consecutive blocks of a request or of a trace block) get consecutive
    slots, and each run of 8 a Fibonacci-hashed place, so entering, looking
    up and dropping a prefix's blocks in order touch few cache lines."""
    h = np.int64((np.uint64(k >> 3) * GOLDEN) >> np.uint64(32))
    return ((h << 3) | (k & 7)) & mask


@njit(cache=True, _nrt=False)
def find(k, tkey):
    """Table slot holding key k, or -1."""
    mask = tkey.shape[0] - 1
    i = _home(k, mask)
    while tkey[i] != -1:
        if tkey[i] == k:
            return i
        i = (i + 1) & mask
    return -1


@njit(cache=True, _nrt=False)
def _put(k, b, tkey, thead, ttail):
    """Key k's first (and last) block is b: k must be absent."""
    mask = tkey.shape[0] - 1
    i = _home(k, mask)
    while tkey[i] != -1:
        i = (i + 1) & mask
    tkey[i] = k
    thead[i] = b
    ttail[i] = b


@njit(cache=True, _nrt=False)
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
def key_run(r, j, bs, rq, n_req, maxb, look):
    """(offset, end): blocks j..end-1 of request r have the hash keys offset + j
    onwards (see the module docstring), so a loop over a request's blocks
    pays one division per trace block, not per block. ``rq`` is the
    workload's ``state.Requests``; ``look``: the tokens past a block its
    hash covers (``hash_lookahead``), which must be shared too."""
    hb = rq.hash_block[0]
    if hb > 0:
        per = hb // bs
        t = j // per
        if t < rq.prompt[r] // hb:
            h = rq.hash_key[rq.hash_off[r] + t]
            end = (t + 1) * per
            if look > 0 and end * bs + look > rq.prompt[r]:
                end = (rq.prompt[r] - look) // bs  # the last block looks past the prompt
            if h >= 0 and j < end:  # -1: an id no other request carries
                return n_req * maxb + (h - t) * per, end
            return r * maxb, (t + 1) * per
        return r * maxb, maxb
    if (j + 1) * bs + look <= rq.shared_len[r]:  # (no division on the private path)
        return (n_req + rq.group[r]) * maxb, (rq.shared_len[r] - look) // bs
    return r * maxb, maxb


@njit(cache=True, inline="always")
def block_key(r, j, bs, rq, n_req, maxb, look):
    """Hash key of block j of request r (``key_run``)."""
    return key_run(r, j, bs, rq, n_req, maxb, look)[0] + j


@njit(cache=True, inline="always")
def shareable_blocks(r, bs, rq, look):
    """Blocks of r that other requests can hold too (in a shared prefix or a
    full trace block, their ``look`` tokens of hash lookahead included): only
    hits on these can be on blocks in use."""
    hb = rq.hash_block[0]
    if hb > 0:
        full = (rq.prompt[r] // hb) * (hb // bs)
        return min(full, (rq.prompt[r] - look) // bs) if look > 0 else full
    return max(rq.shared_len[r] - look, 0) // bs


@njit(cache=True, inline="always")
def hashed_tokens(ntok, p):
    """Tokens of a request of ``ntok`` tokens whose blocks have hashes: vLLM
    hashes a block once the ``p.pc[LOOK]`` tokens after it exist
    (``get_request_block_hasher``'s ``num_hash_lookahead_tokens``), so
    ``cache_blocks`` reaches at most this far
    (``SingleTypeKVCacheManager.cache_blocks``: ``num_hashed_tokens``)."""
    return ntok - p.pc[LOOK]


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _fq_compact(p):
    """Close the ring's gaps (blocks ``touch`` took out), keeping the order."""
    mask = p.fq.shape[0] - 1
    out = p.pc[FQ_HEAD]
    for c in range(p.pc[FQ_HEAD], p.pc[FQ_TAIL]):
        b = p.fq[c & mask]
        if b >= 0:
            p.fq[out & mask] = b
            p.fpos[b] = out & mask
            out += 1
    p.pc[FQ_TAIL] = out


@njit(cache=True, inline="always")
def _fq_push(b, front, p):
    """Block b joins the free queue at its front or its back
    (``FreeKVCacheBlockQueue.prepend_n``/``append_n``, one block at a time:
    ``BlockPool.free_blocks`` prepends unhashed blocks, appends hashed ones)."""
    mask = p.fq.shape[0] - 1
    if p.pc[FQ_TAIL] - p.pc[FQ_HEAD] > mask:
        _fq_compact(p)
    if front:
        c = p.pc[FQ_HEAD] - 1
        p.pc[FQ_HEAD] = c
    else:
        c = p.pc[FQ_TAIL]
        p.pc[FQ_TAIL] = c + 1
    p.fq[uidx(c & mask)] = b
    p.fpos[uidx(b)] = c & mask


@njit(cache=True, inline="always")
def fq_next_live(c, fq):
    """The first position >= c of the free-queue ring holding a block."""
    mask = fq.shape[0] - 1
    while fq[uidx(c & mask)] < 0:
        c += 1
    return c


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
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


@njit(cache=True, inline="always")
def pending(k):
    """The ``hkey`` entry of a block holding private key k >= 0 that is not in
    the map yet: -2 - k, so -1 (no hash) and every key stay apart. Its own
    inverse: ``pending(pending(k)) == k``."""
    return -2 - k


@njit(cache=True, inline="always")
def hash_of(b, hkey):
    """Block b's content key (published or pending), or -1."""
    return hkey[b] if hkey[b] >= -1 else pending(hkey[b])


@njit(cache=True, inline="always")
def drop_hash(b, hkey, hnext, hprev, tkey, thead, ttail):
    """Block b is taken from the free queue: forget its hash, leaving the map
    alone when it was never published (``pending``)."""
    if hkey[b] < -1:
        hkey[b] = -1
    else:
        _map_remove(b, hkey, hnext, hprev, tkey, thead, ttail)


@njit(cache=True, inline="always")
def set_hash(b, k, private, hkey, hnext, hprev, tkey, thead, ttail):
    """Block b (holding no hash) now holds content k: a private key
    (``k < R * maxb``) is stored ``pending``, any other enters the map
    (``_map_insert``)."""
    if k < private:
        hkey[b] = pending(k)
    else:
        _map_insert(b, k, hkey, hnext, hprev, tkey, thead, ttail)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def publish(r, held, p):
    """r is preempted: enter its pending blocks (``table[slot_of[r], :held]``)
    into the map, so its lookup at re-admission finds them as vLLM's does."""
    G = p.pc[GROUPS]
    for row in range(p.slot_of[r] * G, p.slot_of[r] * G + G):
        for j in range(held):
            _publish_block(p.table[row, j], p)


@njit(cache=True, inline="always")
def _publish_block(b, p):
    """``publish`` one table entry (nothing for a null block, -1)."""
    if b >= 0:
        if p.hkey[b] < -1:
            k = pending(p.hkey[b])
            p.hkey[b] = -1
            _map_insert(b, k, p.hkey, p.hnext, p.hprev, p.tkey, p.thead, p.ttail)


@njit(cache=True, inline="always")
def published_prev(b, p):
    """Block b's predecessor in its key's list as vLLM's map holds it: for a
    pending block, the last published block of its key (it would follow it)."""
    if p.hkey[b] >= -1:
        return p.hprev[b]
    i = find(pending(p.hkey[b]), p.tkey)
    return p.ttail[i] if i >= 0 else -1


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
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


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def get_new_blocks(n, s, start, p):
    """``allocate_new_blocks`` for slot s: n blocks from the front of the free
    queue into entries start..start+n-1 of each KV cache group's row, group
    after group (``_take_blocks``)."""
    G = p.pc[GROUPS]
    n, start = np.int64(n), np.int64(start)  # one signature of _take_blocks
    if G == 1:
        _take_blocks(n, np.int64(s), start, p)
        return
    for row in range(s * G, s * G + G):
        _take_blocks(n, np.int64(row), start, p)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _take_blocks(n, s, start, p):
    """Pop n blocks from the front of the free queue into p.table[s, start:start+n]:
    the queue's first n blocks in order, each's old hash dropped."""
    mask = p.fq.shape[0] - 1
    c = p.pc[FQ_HEAD]
    for i in range(n):
        c = fq_next_live(c, p.fq)
        b = p.fq[uidx(c & mask)]
        ub = uidx(b)
        c += 1
        if p.hkey[ub] != -1:
            drop_hash(b, p.hkey, p.hnext, p.hprev, p.tkey, p.thead, p.ttail)
        p.ref[ub] = 1
        p.table[s, start + i] = b
    p.pc[FQ_HEAD] = c
    p.pc[FREE_LEN] -= n
    p.pc[IN_USE] += n
    p.pc[REFS] += n


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def lookup(r, nmax, bs, rq, p):
    """``get_computed_blocks``: fill p.hits[:k] with the longest cached chain of
    r's first ``nmax`` full blocks (vLLM: ``max_hit_blocks``, within num_tokens
    - 1 tokens; compat blis: all prompt // block_size prompt blocks, BLIS's
    ``KVCacheState.GetCachedBlocks``, ``sim/kv/cache.go``). Returns (k, hits
    still in the free queue). Several KV cache groups: ``_lookup_groups``,
    compiled only into the heavy variant (``variant.features_of``)."""
    if p.pc[GROUPS] != 1 or p.pc[SW_GROUPS] != 0:
        return _lookup_groups_if(rq.features.heavy, r, nmax, bs, rq, p)
    n_req = p.slot_of.shape[0]
    maxb = p.table.shape[1]
    k = 0
    evictable = 0
    for j in range(nmax):
        i = find(block_key(r, j, bs, rq, n_req, maxb, p.pc[LOOK]), p.tkey)
        if i < 0:
            break
        b = p.thead[i]
        p.hits[k] = b
        k += 1
        if p.ref[uidx(b)] == 0:
            evictable += 1
    return k, evictable


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _lookup_groups(r, nmax, bs, rq, p):
    """``lookup`` with several KV cache groups (``HybridKVCacheCoordinator.
    find_longest_cache_hit``, one pass: full attention first, then the
    sliding-window groups within its hit): group g's hits go to
    ``p.hits[g * maxb:]``, -1 where a sliding-window hit skips; sets r's
    junction. Returns (hit blocks per group, non-null hits still in the free
    queue)."""
    G, SW = p.pc[GROUPS], p.pc[SW_GROUPS]
    maxb = p.table.shape[1]
    n = nmax
    if G > SW:  # ``FullAttentionManager.find_longest_cache_hit``
        n = 0
        while n < nmax and _cached_row(r, n, SW, G, bs, rq, p):
            n += 1
    longest = n
    if SW > 0:
        n = _window_hit(r, n, bs, rq, p)
    p.junction[r] = longest * bs if G > SW and SW > 0 and longest > n else 0
    evictable = 0
    for g in range(G):
        for j in range(n):
            b = p.hits[g * maxb + j]
            if b >= 0 and p.ref[b] == 0:
                evictable += 1
    return n, evictable


# (0, 0) below the heavy variant, where no config has several groups
_lookup_groups_if = gated(_lookup_groups, (np.int64(0), np.int64(0)))


@njit(cache=True, inline="always")
def _cached_row(r, j, g0, g1, bs, rq, p):
    """``BlockPool.get_cached_block`` for groups g0..g1-1: whether block j of r
    is cached in each (its first block written to ``p.hits``)."""
    G = p.pc[GROUPS]
    maxb = p.table.shape[1]
    key = block_key(r, j, bs, rq, p.slot_of.shape[0], maxb, p.pc[LOOK]) * G
    for g in range(g0, g1):
        i = find(key + g, p.tkey)
        if i < 0:
            return False
        p.hits[g * maxb + j] = p.thead[i]
    return True


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _window_hit(r, n, bs, rq, p):
    """``SlidingWindowManager.find_longest_cache_hit`` within r's first n
    blocks: from the right, the first run of ``pc[NEED]`` blocks cached in
    every sliding-window group ends the hit, the blocks before it null (-1);
    with no such run, the cached run from block 0. Returns its length."""
    SW, need = p.pc[SW_GROUPS], p.pc[NEED]
    maxb = p.table.shape[1]
    run = 0
    for i in range(n - 1, -1, -1):
        if not _cached_row(r, i, 0, SW, bs, rq, p):
            run = 0
            continue
        run += 1
        if run >= need:
            for g in range(SW):
                p.hits[g * maxb : g * maxb + i] = -1
            return i + run
    return run


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def touch(k, s, p):
    """Take a reference on each of the k hit blocks; copy them to the front of
    table[s] (several groups: each group's row, ``_touch_groups``)."""
    if p.pc[GROUPS] != 1 or p.pc[SW_GROUPS] != 0:
        _touch_groups(k, s, p)
        return
    for i in range(k):
        b = p.hits[i]
        ub = uidx(b)
        if p.ref[ub] == 0:
            p.fq[p.fpos[ub]] = -1  # leaves the free queue (``remove``)
            p.pc[FREE_LEN] -= 1
            p.pc[IN_USE] += 1
        p.ref[ub] += 1
        p.table[s, i] = b
    p.pc[REFS] += k


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _touch_groups(k, s, p):
    """``touch`` group by group (``add_local_computed_blocks``): a null hit
    (-1, before a sliding window) is copied and takes no reference."""
    G = p.pc[GROUPS]
    maxb = p.table.shape[1]
    for g in range(G):
        for i in range(k):
            b = p.hits[g * maxb + i]
            p.table[s * G + g, i] = b
            if b < 0:
                continue
            if p.ref[b] == 0:
                p.fq[p.fpos[b]] = -1  # leaves the free queue (``remove``)
                p.pc[FREE_LEN] -= 1
                p.pc[IN_USE] += 1
            p.ref[b] += 1
            p.pc[REFS] += 1


@njit(cache=True, inline="always")
def cache_blocks(r, upto, bs, rq, p):
    """Hash r's full blocks below ``upto`` known, computed tokens (``cache_blocks``);
    updates ``p.ncached[r]``, the count of r's hashed blocks. Several KV
    cache groups: ``_cache_groups``, compiled only into the variant whose
    marker is on (``variant.features_of``). Inlined, so the several-group
    call sits at each caller: inside one shared function it made the
    one-group path of the S1 caching grid 1.4 times slower (LLVM inlined the
    large callee into it, and it stopped being inlined where it is hot)."""
    if p.pc[GROUPS] != 1 or p.pc[SW_GROUPS] != 0:
        _cache_groups_if(rq.features.heavy, r, upto, bs, rq, p)
    else:
        _cache_one(r, upto, bs, rq, p)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _cache_one(r, upto, bs, rq, p):
    """``cache_blocks`` with one full-attention group."""
    n_req = p.slot_of.shape[0]
    maxb = p.table.shape[1]
    s = p.slot_of[r]
    n_full = upto // bs
    j = p.ncached[r]
    while j < n_full:
        off, end = key_run(r, j, bs, rq, n_req, maxb, p.pc[LOOK])
        stop = min(end, n_full)
        for i in range(j, stop):
            b, k = p.table[s, i], off + i
            if hash_of(uidx(b), p.hkey) != k:
                set_hash(b, k, n_req * maxb, p.hkey, p.hnext, p.hprev, p.tkey, p.thead, p.ttail)
        j = stop
    if n_full > p.ncached[r]:
        p.ncached[r] = n_full


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def _cache_groups(r, upto, bs, rq, p):
    """``cache_blocks`` in every KV cache group (``KVCacheCoordinator.
    cache_blocks``): null blocks are skipped (``cache_full_blocks``) and a
    sliding-window group hashes only the ``pc[NEED]`` blocks ending at r's
    replay boundary (prompt - 1 tokens) and at its junction, each rounded
    down to a block (``SlidingWindowManager.reachable_block_mask`` with
    ``prefix_cache_retention_interval`` 0, vLLM's default)."""
    n_full = upto // bs
    j0 = p.ncached[r]
    if n_full <= j0:
        return
    G, SW, need = p.pc[GROUPS], p.pc[SW_GROUPS], p.pc[NEED]
    n_req = p.slot_of.shape[0]
    maxb = p.table.shape[1]
    private = n_req * maxb * G
    s = p.slot_of[r]
    replay = (rq.prompt[r] - 1) // bs
    junction = p.junction[r] // bs
    for j in range(j0, n_full):
        key = block_key(r, j, bs, rq, n_req, maxb, p.pc[LOOK]) * G
        reachable = replay - need <= j < replay or junction - need <= j < junction
        for g in range(G):
            b = p.table[s * G + g, j]
            if b < 0 or (g < SW and not reachable):
                continue
            if hash_of(b, p.hkey) != key + g:
                set_hash(b, key + g, private, p.hkey, p.hnext, p.hprev, p.tkey, p.thead, p.ttail)
    p.ncached[r] = n_full


_cache_groups_if = gated(_cache_groups)


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def free_blocks(s, n, p, blis):
    """``KVCacheManager.free``: release table[s, :n] tail first; unhashed
    blocks rejoin the free queue at its front, hashed ones at its back, each
    group in freeing order. ``blis`` (compat blis): every block goes to the
    back, tail first (``KVCacheState.ReleaseKVBlocks``, ``sim/kv/cache.go``).
    The row's entries are scratch afterwards: the unhashed blocks are parked
    at its top, which has already been read, until they go to the front.
    Returns the blocks that rejoined the free queue."""
    return free_range(np.int64(s), np.int64(0), np.int64(n), p, np.bool_(blis))


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def free_range(s, lo, n, p, blis):
    """``free_blocks`` of table[s, lo:n] (``BlockPool.free_blocks``, tail
    first), its entries scratch afterwards. Returns the blocks that rejoined
    the free queue."""
    freed = 0
    u = 0  # unhashed blocks freed so far, parked at table[s, n - u:]
    for i in range(n - 1, lo - 1, -1):
        b = p.table[s, i]
        ub = uidx(b)
        p.ref[ub] -= 1
        if p.ref[ub] == 0:
            freed += 1
            if p.hkey[ub] != -1 or blis:
                _fq_push(b, False, p)
            else:
                u += 1
                p.table[s, n - u] = b  # n - u >= i: a read entry
    # The first freed ends up first: push the others to the front before it.
    for i in range(n - u, n):
        _fq_push(p.table[s, i], True, p)
    p.pc[FREE_LEN] += freed
    p.pc[IN_USE] -= freed
    p.pc[REFS] -= n - lo
    return freed


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def drop_window(r, lo, hi, p):
    """Blocks lo..hi-1 of r left the sliding window
    (``SlidingWindowManager.remove_skipped_blocks``): in each sliding-window
    group, freed last to first (``_remove_blocks_in_range``) and replaced by
    null blocks (-1). A block still pending enters the map first (``publish``:
    it leaves r's table, so r's own preemption would not publish it, and
    vLLM's map holds it; r may find it again after a preemption). Returns the
    blocks that rejoined the free queue."""
    G = p.pc[GROUPS]
    freed = 0
    for row in range(p.slot_of[r] * G, p.slot_of[r] * G + p.pc[SW_GROUPS]):
        for j in range(lo, hi):
            _publish_block(p.table[row, j], p)
        freed += free_range(np.int64(row), np.int64(lo), np.int64(hi), p, np.bool_(False))
        p.table[row, lo:hi] = -1
    return freed


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def release(r, held, p, blis):
    """Free r's ``held`` blocks (``free_blocks``, ``blis``: BLIS's order) and
    its block-table row. Returns the blocks back in the free queue."""
    s = p.slot_of[r]
    G = p.pc[GROUPS]
    if G == 1 and p.pc[SW_GROUPS] == 0:
        freed = free_blocks(s, held, p, blis)
    else:  # group by group (``KVCacheCoordinator.free``), past the null head
        freed = 0
        for row in range(s * G, s * G + G):
            lo = 0
            while lo < held and p.table[row, lo] < 0:
                lo += 1
            freed += free_range(np.int64(row), np.int64(lo), np.int64(held), p, np.bool_(blis))
    p.slots[p.pc[FREE_SLOTS]] = s
    p.pc[FREE_SLOTS] += 1
    p.slot_of[r] = -1
    p.ncached[r] = 0
    p.junction[r] = 0
    return freed


@njit(cache=True, _nrt=False, no_cpython_wrapper=True)
def take_slot(r, p):
    """Give r a free block-table row (it was admitted)."""
    p.pc[FREE_SLOTS] -= 1
    p.slot_of[r] = p.slots[p.pc[FREE_SLOTS]]
