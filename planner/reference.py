"""A plain, readable engine with the kernel's semantics, shaped like vLLM's classes.

This is the specification the jitted kernel is tested against: one object per
vLLM concept, one step at a time, no fast path.

- ``BlockPool``      ~ ``vllm/v1/core/block_pool.py`` (free queue, null block,
  prefix-cache hash map)
- ``KVCacheManager`` ~ ``vllm/v1/core/kv_cache_manager.py`` (``allocate_slots``,
  ``get_computed_blocks``, ``free``) with ``FullAttentionManager`` of
  ``single_type_kv_cache_manager.py`` (``cache_blocks``, ``find_longest_cache_hit``)
  or, with ``sliding_window``, its ``SlidingWindowManager``
  (``remove_skipped_blocks``: blocks outside the window become null blocks;
  with prefix caching ``find_longest_cache_hit`` and the sparse retention of
  ``reachable_block_mask``), several groups joined as
  ``kv_cache_coordinator.py``'s ``HybridKVCacheCoordinator`` joins them
- ``Scheduler``      ~ ``vllm/v1/core/sched/scheduler.py`` (``schedule``,
  ``_preempt_request``, ``update_from_output``) and ``check_stop`` in
  ``vllm/v1/core/sched/utils.py``
- ``Engine``         drives the scheduler in simulated time (BLIS alpha/beta
  step times, integer nanoseconds) and proves livelocks.

Scheduling is synchronous, or asynchronous (``vllm/v1/core/sched/async_scheduler.py``
with ``EngineCore.step_with_batch_queue``) when ``async_scheduling`` is set.
BLIS compatibility (``compat="blis"``, docs/blis-compat.md) follows BLIS
b563c440's rules where they differ, each marked "compat blis" below with the
BLIS file and function it follows.

Prefix caching (``enable_prefix_caching``) hashes full blocks; a block's content
is its request's shared-prefix group's tokens while it lies in the shared
prefix, else tokens unique to the request. With block hash ids (a Mooncake-style
trace) a block inside a full trace block is (the tuple of the request's ids up
to that trace block, the offset in it): the whole prefix, as vLLM's chained
block hash; in a partial trace block or the output it is unique to the request.
"""

from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from planner.capacity import blocks_for_tokens, cdiv, stop_length, usable_blocks
from planner.config import (
    PREEMPTION_MODES,
    STOP_BOUNDS,
    SchedulerConfig,
    draft_floats_of,
    lat_kind,
    pack_tables,
)
from planner.kernel.cycle import QUIET_STEPS
from planner.kernel.token_gaps import NBINS, SUB, SUB_BITS
from planner.latency.draft import draft_ns
from planner.latency.step_time import (
    LINEAR,
    SW_WINDOW,
    Latency,
    blis_alpha2_ns,
    blis_queue_ns,
    blis_step_ns,
    step_time_ns,
)
from planner.speculative import accepted_drafts_py
from planner.workload.front_end import front_end_rejects


@dataclass
class Request:
    """``vllm/v1/request.py``: one request's scheduling state."""

    rid: int
    prompt_len: int
    max_tokens: int
    arrival_ns: int
    entry_ns: int = 0
    priority: int = 0
    num_output_tokens: int = 0
    num_computed_tokens: int = 0
    num_preemptions: int = 0
    high_water: int = 0
    blocks: list[int] = field(default_factory=list)
    first_token_ns: int = -1
    finish_ns: int = -1
    status: str = "future"
    swapped_blocks: int = 0  # blocks held on the CPU tier while swapped out
    placeholders: int = 0  # async: num_output_placeholders (tokens in flight)
    in_flight: int = 0  # async: num_in_flight_tokens
    stale: int = 0  # async: num_stale_output_tokens (in flight when preempted)
    prefix_group: int = -1  # shared-prefix group (-1: none)
    shared_len: int = 0  # prompt tokens shared with the group: min(prefix_len, prompt)
    num_cached_blocks: int = 0  # blocks hashed into the prefix cache so far
    first_scheduled_ns: int = -1  # start of the first step that scheduled it
    last_token_ns: int = -1  # time of its latest output token
    max_token_gap_ns: int = 0  # largest gap between two consecutive output tokens
    num_token_gaps: int = 0  # gaps between consecutive output tokens
    hash_block: int = 0  # tokens per trace hash id (0: no hash ids)
    hash_prefixes: list[tuple[int, ...]] = field(default_factory=list)  # per full trace block
    session: int | None = None  # multi-turn session id (its turns share one token stream)
    # compat blis with the full-hit defect: prompt tokens it holds no blocks for
    uncounted: int = 0
    # block tables of the KV cache groups after the first (hybrid models)
    more: list[list[int]] = field(default_factory=list)
    # ``shared_prefix_boundary``: a hybrid's full-attention hit past the
    # sliding-window groups' hit at its last lookup (tokens; 0: none)
    junction: int = 0
    # speculative decoding: draft tokens pending (``spec_token_ids``), or -1
    # after a non-final prefill chunk (``is_prefill_chunk``)
    spec: int = 0
    # disaggregated decode side (``kv_transfer``): the prompt's KV comes from a
    # prefill instance (``do_remote_prefill``, cleared once the load starts);
    # ``loading``: WAITING_FOR_REMOTE_KVS; ``recv_done``: in
    # ``finished_recving_kv_req_ids``; ``inflight``: in ``_inflight_prefills``
    remote: bool = False
    loading: bool = False
    recv_done: bool = False
    inflight: bool = False
    # disaggregated prefill side (``kv_transfer``): when (ns) the decode side's
    # read of its KV ends, its blocks held from its finish until then
    # (``delay_free_blocks``, ``planner/kernel/kv_send.py``); -1: freed at once
    read_end_ns: int = -1

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens

    def sort_key(self) -> tuple[int, int, int]:
        """``Request.__lt__``: priority, then arrival (entry into the scheduler), then id."""
        return (self.priority, self.entry_ns, self.rid)


class BlockPool:
    """``vllm/v1/core/block_pool.py``: blocks 0..N-1 (block 0 is the null block
    when ``null_block`` is set), a free queue in eviction order
    (``FreeKVCacheBlockQueue``) and, with prefix caching, the hash -> blocks map
    (``BlockHashToBlockMap``: per hash, blocks in insertion order)."""

    def __init__(
        self, num_gpu_blocks: int, null_block: bool, caching: bool, blis: bool = False
    ) -> None:
        self.caching = caching
        self.blis = blis
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_gpu_blocks))
        if null_block:
            self.free_queue.popitem(last=False)
        self.ref_cnt = [0] * num_gpu_blocks
        self.block_hash: list[tuple | None] = [None] * num_gpu_blocks
        self.cached: dict[tuple, dict[int, None]] = {}
        self.num_usable = usable_blocks(num_gpu_blocks, null_block)
        assert len(self.free_queue) == self.num_usable

    def num_free(self) -> int:
        return len(self.free_queue)

    def get_cached_block(self, key: tuple) -> int | None:
        """The first block cached under ``key`` (``get_one_block``), or None."""
        blocks = self.cached.get(key)
        return next(iter(blocks)) if blocks else None

    def get_new_blocks(self, n: int) -> list[int]:
        """Pop n blocks from the front of the free queue, evicting their hashes."""
        assert n <= len(self.free_queue)
        out = []
        for _ in range(n):
            b, _ = self.free_queue.popitem(last=False)
            key = self.block_hash[b]
            if key is not None:  # _maybe_evict_cached_block
                del self.cached[key][b]
                if not self.cached[key]:
                    del self.cached[key]
                self.block_hash[b] = None
            self.ref_cnt[b] = 1
            out.append(b)
        return out

    def touch(self, blocks: list[int]) -> None:
        """A prefix-cache hit takes a reference (leaving the free queue at 0)."""
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self.free_queue[b]
            self.ref_cnt[b] += 1

    def free_blocks(self, ordered: list[int]) -> None:
        """Drop one reference each; blocks that reach 0 rejoin the free queue:
        unhashed ones at the front (reused first), hashed ones at the back (LRU).
        compat blis: all at the back, in the given order
        (``KVCacheState.ReleaseKVBlocks``, ``sim/kv/cache.go``)."""
        first, last = [], []
        for b in ordered:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                to_back = self.blis or (self.caching and self.block_hash[b] is not None)
                (last if to_back else first).append(b)
        for b in reversed(first):
            self.free_queue[b] = None
            self.free_queue.move_to_end(b, last=False)
        for b in last:
            self.free_queue[b] = None

    def cache_block(self, b: int, key: tuple) -> None:
        """``_insert_block_hash``: record that block b holds the content ``key``."""
        if self.block_hash[b] == key:
            return
        assert self.block_hash[b] is None
        self.block_hash[b] = key
        self.cached.setdefault(key, {})[b] = None


# A block-table entry that is the null block (``BlockPool.null_block``): a
# sliding-window block freed outside the window. Not a pool block.
NULL = -1


class KVCacheManager:
    """``allocate_slots`` (all or nothing, the whole-sequence gate, the watermark),
    ``get_computed_blocks`` (prefix-cache hits) and ``free``; with a sliding
    window, ``SlidingWindowManager.remove_skipped_blocks`` before each
    allocation (``vllm/v1/core/single_type_kv_cache_manager.py``)."""

    def __init__(self, cfg: SchedulerConfig) -> None:
        self.caching = cfg.enable_prefix_caching
        self.blis = cfg.compat == "blis"
        self.defect = cfg.blis_full_hit_defect
        self.alloc_failures = 0  # compat blis: ``last_token_slot`` found no free block
        self.pool = BlockPool(cfg.num_gpu_blocks, cfg.null_block, self.caching, self.blis)
        self.block_size = cfg.block_size
        self.max_model_len = cfg.max_model_len
        self.watermark_blocks = cfg.watermark_blocks
        self.window = cfg.sliding_window
        # SlidingWindowSpec.max_admission_blocks_per_request (the gate's cap)
        self.window_cap = cfg.sliding_window_cap
        self.window_freed = 0  # blocks freed outside the window, summed
        # The KV cache groups in table order (sliding-window ones first, as the
        # recorder lists them): one block table per group, one pool.
        self.kinds = ["sliding"] * cfg.sliding_window_groups + ["full"] * cfg.full_attention_groups
        # Mamba groups last (``req.blocks`` stays an attention table): under
        # ``mamba_cache_mode`` "none" a ``MambaSpec``'s block_size is
        # max_model_len, so ``MambaManager`` gives a request one block per group
        # from its first allocation until it is freed (prefix caching is off).
        self.kinds += ["mamba"] * cfg.mamba_groups
        # one full-attention table and no window: ``_allocate_plain`` serves it
        self.single_full = self.kinds == ["full"] and not self.window
        # ``SlidingWindowManager._contiguous_blocks_for_hit``: cached blocks in a
        # row that make a hit (the window less the query token, in blocks)
        self.need = cdiv(self.window - 1, self.block_size) if self.window else 0
        # ``VllmConfig.num_hash_lookahead_tokens``: with prefix caching, an
        # EAGLE / MTP drafter's hash of a block covers the next token too
        # (``get_request_block_hasher``), so a block is hashed once that token
        # exists and is shared only while that token is.
        spec = cfg.speculation
        self.look = 1 if self.caching and spec is not None and spec.lookahead_tokens else 0

    def tables(self, req: Request) -> list[list[int]]:
        """The request's block table in each KV cache group (``req.blocks`` first)."""
        while len(req.more) < len(self.kinds) - 1:
            req.more.append([])
        return [req.blocks, *req.more]

    def block_key(self, req: Request, j: int) -> tuple:
        """The content of block j: its shared-prefix group's tokens while the block
        and its ``look`` hash-lookahead tokens lie inside the shared prefix,
        else tokens unique to the request."""
        if req.hash_block:
            per = req.hash_block // self.block_size
            t = j // per
            inside = (j + 1) * self.block_size + self.look <= req.prompt_len
            if t < len(req.hash_prefixes) and inside:
                return ("hash", req.hash_prefixes[t], j - t * per)
            return ("request", req.rid, j)
        if req.session is not None:  # every turn holds a prefix of the session's tokens
            return ("session", req.session, j)
        if (j + 1) * self.block_size + self.look <= req.shared_len:
            return ("group", req.prefix_group, j)
        return ("request", req.rid, j)

    def get_computed_blocks(self, req: Request) -> list[list[int]]:
        """``KVCacheManager.get_computed_blocks``: each KV cache group's hit
        blocks (table order; ``NULL`` where a sliding-window hit skips), all
        of one length, within num_tokens - 1 tokens (compat blis: every full
        prompt block, ``KVCacheState.GetCachedBlocks``). The full-attention
        groups take the longest chain of cached blocks
        (``FullAttentionManager.find_longest_cache_hit``), the sliding-window
        groups the last run of ``need`` cached blocks within it
        (``SlidingWindowManager.find_longest_cache_hit``), and the full hit is
        cut to theirs (``HybridKVCacheCoordinator.find_longest_cache_hit``,
        one pass for one full and one sliding spec); a full hit longer than
        the reconciled one is the request's junction
        (``shared_prefix_boundary``)."""
        hits: list[list[int]] = [[] for _ in self.kinds]
        if not self.caching:
            return hits
        limit = req.prompt_len if self.blis else req.num_tokens - 1
        full = [g for g, kind in enumerate(self.kinds) if kind == "full"]
        sliding = [g for g, kind in enumerate(self.kinds) if kind == "sliding"]
        n = limit // self.block_size
        if full:
            for j in range(n):
                row = self._cached(req, j, full)
                if row is None:
                    break
                for g, b in zip(full, row, strict=True):
                    hits[g].append(b)
            n = len(hits[full[0]])
        longest = n
        if sliding:
            for g, row in zip(sliding, self._window_hit(req, n, sliding), strict=True):
                hits[g] = row
            n = len(hits[sliding[0]])
            for g in full:
                del hits[g][n:]
        req.junction = longest * self.block_size if full and sliding and longest > n else 0
        return hits

    def _cached(self, req: Request, j: int, groups: list[int]) -> list[int] | None:
        """``BlockPool.get_cached_block``: block j's cached block in each of
        ``groups`` (a hash is cached per group), or None if any misses."""
        key = self.block_key(req, j)
        row = []
        for g in groups:
            b = self.pool.get_cached_block((*key, g))
            if b is None:
                return None
            row.append(b)
        return row

    def _window_hit(self, req: Request, n: int, groups: list[int]) -> list[list[int]]:
        """``SlidingWindowManager.find_longest_cache_hit`` within n blocks:
        from the right, the first run of ``need`` blocks cached in every group
        of ``groups`` ends the hit (blocks before the run are ``NULL``); with
        no such run, the cached run from block 0."""
        rows = [[NULL] * n for _ in groups]
        run = 0
        for i in range(n - 1, -1, -1):
            row = self._cached(req, i, groups)
            if row is None:
                run = 0
                continue
            for out, b in zip(rows, row, strict=True):
                out[i] = b
            run += 1
            if run >= self.need:
                return [out[: i + run] for out in rows]
        return [out[:run] for out in rows]

    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        full_sequence_must_fit: bool,
        watermark: bool,
        hits: list[list[int]] | None = None,
        external: int = 0,
        reserved: int = 0,
        lookahead: int = 0,
    ) -> bool:
        """``allocate_slots``; ``external``: tokens a KV connector loads
        (``num_external_computed_tokens``), whose blocks are not cached until
        the load lands (``delay_cache_blocks``); ``reserved``: free blocks the
        allocation must leave (``reserved_blocks``, not in the gate);
        ``lookahead``: slots past the new tokens (``num_lookahead_tokens``, not
        in the gate)."""
        wm = self.watermark_blocks if watermark else 0
        if not hits and not full_sequence_must_fit and self.single_full:
            return self._allocate_plain(req, num_new_tokens, wm, external, reserved, lookahead)
        hits = hits or [[] for _ in self.kinds]
        nhit = len(hits[0])
        have = len(req.blocks) + nhit
        computed = req.num_computed_tokens + nhit * self.block_size + external
        # Hit blocks sitting in the free queue leave it when touched; a
        # sliding-window group's hits before its window are null
        # (``get_num_blocks_to_allocate``: ``_get_num_evictable_blocks``).
        skip = self._skipped_blocks(computed)
        evictable = sum(
            self.pool.ref_cnt[b] == 0
            for kind, row in zip(self.kinds, hits, strict=True)
            for b in row[skip if kind == "sliding" else 0 :]
            if b != NULL
        )
        if self.defect and nhit and nhit * self.block_size == req.num_tokens:
            # compat blis, the full-hit defect (``AllocateKVBlocks`` claims hits
            # only in its loop over new tokens, which does not run for none):
            # admitted if its free hits fit, holding no block.
            if evictable > self.pool.num_free():
                return False
            req.uncounted = req.num_tokens
            req.num_cached_blocks = nhit
            return True
        free = self.pool.num_free()
        if full_sequence_must_fit:
            full = blocks_for_tokens(req.num_tokens, self.max_model_len, self.block_size)
            # summed over the groups (get_num_blocks_to_allocate with
            # apply_admission_cap=True: a sliding group asks for at most its cap)
            asked = sum(
                max((min(full, self.window_cap) if kind == "sliding" else full) - have, 0)
                if kind != "mamba"
                else 1 - len(table)
                for kind, table in zip(self.kinds, self.tables(req), strict=True)
            )
            if asked + evictable + wm > free:
                return False
        if self.window:  # before the count, even if the allocation then fails
            self.remove_skipped_blocks(req)
            free = self.pool.num_free()
        target = blocks_for_tokens(
            computed + num_new_tokens + lookahead - req.uncounted,
            self.max_model_len,
            self.block_size,
        )
        wanted = [  # new blocks per group (hits are attention-table entries)
            max(0, 1 - len(table)) if kind == "mamba" else max(0, target - have)
            for kind, table in zip(self.kinds, self.tables(req), strict=True)
        ]
        if sum(wanted) + evictable + wm > free - reserved:
            return False
        # ``add_local_computed_blocks``, group by group: the hits past the
        # window take references, the skipped ones stay null.
        for kind, table, row in zip(self.kinds, self.tables(req), hits, strict=True):
            k = skip if kind == "sliding" else 0
            self.pool.touch(row[k:])
            table.extend([NULL] * min(k, len(row)) + row[k:])
        req.num_cached_blocks += nhit
        for table, n in zip(self.tables(req), wanted, strict=True):  # allocate_new_blocks
            table.extend(self.pool.get_new_blocks(n))
        if not external:
            self.cache_blocks(req, computed + num_new_tokens)
        return True

    def _allocate_plain(
        self, req: Request, n: int, wm: int, external: int, reserved: int, lookahead: int
    ) -> bool:
        """``allocate_slots`` for one full-attention group, no hits and no
        admission gate (the running requests' case): the general path with
        nothing evictable, skipped or touched, written out so the engine's
        most frequent call stays cheap."""
        computed = req.num_computed_tokens + external
        target = blocks_for_tokens(
            computed + n + lookahead - req.uncounted, self.max_model_len, self.block_size
        )
        wanted = max(0, target - len(req.blocks))
        if wanted + wm > self.pool.num_free() - reserved:
            return False
        if wanted:
            req.blocks.extend(self.pool.get_new_blocks(wanted))
        if not external:
            self.cache_blocks(req, computed + n)
        return True

    def _skipped_blocks(self, computed: int) -> int:
        """``SlidingWindowManager.get_num_skipped_tokens`` in whole blocks:
        those before the window of the token after ``computed`` (0 without a
        window)."""
        if not self.window:
            return 0
        return max(0, computed - self.window + 1) // self.block_size

    def remove_skipped_blocks(self, req: Request) -> None:
        """``SlidingWindowManager.remove_skipped_blocks`` on the processed
        tokens (num_computed_tokens - num_in_flight_tokens): the whole blocks
        before the next token's window (``get_num_skipped_tokens``: processed
        - window + 1 tokens), walked back from the last one to the first null
        block (``_remove_blocks_in_range``), become null blocks and are freed,
        in each sliding-window group in turn."""
        processed = max(0, req.num_computed_tokens - req.in_flight)
        skipped = self._skipped_blocks(processed)
        for kind, table in zip(self.kinds, self.tables(req), strict=True):
            if kind != "sliding":
                continue
            freed = []
            for i in range(min(skipped, len(table)) - 1, -1, -1):
                if table[i] == NULL:
                    break
                freed.append(table[i])
                table[i] = NULL
            if freed:
                self.window_freed += len(freed)
                self.pool.free_blocks(freed)

    def cache_blocks(self, req: Request, num_tokens: int) -> None:
        """Hash the request's full blocks up to ``num_tokens`` of known tokens
        in every group (``KVCacheCoordinator.cache_blocks``; compat blis:
        prompt blocks only, as ``AllocateKVBlocks`` looks up no other). Null
        blocks are skipped (``BlockPool.cache_full_blocks``), and a
        sliding-window group keeps only the blocks a later hit can reach
        (``reachable_block_mask``, below)."""
        if not self.caching:
            return
        known = req.prompt_len if self.blis else self.hashed_tokens(req)
        num_full = min(num_tokens, known) // self.block_size
        start = req.num_cached_blocks
        if num_full <= start:
            return
        keep = self._reachable(req, start, num_full) if self.window else None
        for g, (kind, table) in enumerate(zip(self.kinds, self.tables(req), strict=True)):
            for j in range(start, num_full):
                if table[j] != NULL and (kind == "full" or keep[j - start]):
                    self.pool.cache_block(table[j], (*self.block_key(req, j), g))
        req.num_cached_blocks = num_full

    def hashed_tokens(self, req: Request) -> int:
        """The request's tokens whose blocks have hashes
        (``SingleTypeKVCacheManager.cache_blocks``: ``num_hashed_tokens``): a
        block is hashed once the ``look`` tokens after it exist."""
        return req.num_tokens - self.look

    def _reachable(self, req: Request, start: int, end: int) -> list[bool]:
        """``SlidingWindowManager.reachable_block_mask`` for blocks start..end-1
        under vLLM's default ``prefix_cache_retention_interval`` 0 (no
        periodic checkpoints): only the ``need`` blocks ending at each
        boundary a later hit can stop at, the replay boundary (the prompt
        less its last token, ``replay_boundaries``) and the junction, both
        rounded down to a block."""
        keep = [False] * (end - start)
        for boundary in (req.prompt_len - 1, req.junction):
            if boundary <= 0:
                continue
            last = boundary // self.block_size
            for j in range(max(start, last - self.need), min(end, last)):
                keep[j - start] = True
        return keep

    def free(self, req: Request) -> None:
        """Free tail first, so the tail is evicted first; null blocks are not
        the request's (``pop_blocks_for_free``: ``trim_null_head``); group by
        group (``KVCacheCoordinator.free``)."""
        for table in self.tables(req):
            self.pool.free_blocks([b for b in reversed(table) if b != NULL])
        self._forget(req)

    def pop_blocks_for_free(self, req: Request) -> list[int]:
        """``KVCacheManager.pop_blocks_for_free``: the request's blocks, group
        after group in allocation order (no null blocks), taken from it but
        not yet returned to the pool (a deferred free)."""
        blocks = [b for table in self.tables(req) for b in table if b != NULL]
        self._forget(req)
        return blocks

    def _forget(self, req: Request) -> None:
        """The request holds no blocks any more."""
        req.blocks = []
        req.more = []
        req.num_cached_blocks = 0
        req.uncounted = 0

    def last_token_slot(self, req: Request) -> None:
        """compat blis, a request that finished at max_tokens, before it is
        freed: ``Simulator.processCompletions`` (``sim/simulator.go``) allocates
        its last token's slot, a new block when its blocks are full (from the
        free queue's front; with none free it only counts a failure)."""
        if not self.blis or req.num_output_tokens < req.max_tokens:
            return
        if (req.num_computed_tokens - req.uncounted) % self.block_size != 0:
            return
        if self.pool.num_free() == 0:
            self.alloc_failures += 1
            return
        req.blocks.extend(self.pool.get_new_blocks(1))


def gap_bin(gap_ns: int) -> int:
    """The ITL histogram bin of a token gap (``planner.kernel.token_gaps``'s rule,
    written independently: 16 linear bins per octave above 16 ns)."""
    if gap_ns < SUB:
        return max(gap_ns, 0)
    e = gap_ns.bit_length() - 1
    return min(SUB * (e - SUB_BITS + 1) + (gap_ns >> (e - SUB_BITS)) - SUB, NBINS - 1)


@dataclass
class StepRecord:
    """What one step did; the same fields as the kernel's trace row."""

    start_ns: int
    end_ns: int
    scheduled: int
    prefill: int
    decode: int
    running: int
    waiting: int
    free: int
    preempted: int
    finished: int
    admitted: int
    per_request: list[tuple[int, int]]
    victims: list[int]  # ids preempted in this step, in order
    admissions: list[tuple[int, int]] = field(default_factory=list)  # (id, computed)
    finishes: list[int] = field(default_factory=list)  # ids this step's output ended
    sched_state: tuple[int, int, int] = (0, 0, 0)  # running, waiting, free after scheduling


class Scheduler:
    """``Scheduler.schedule`` (FCFS or priority) with recompute (or BLIS restart)
    preemption."""

    def __init__(self, cfg: SchedulerConfig) -> None:
        self.cfg = cfg
        self.kv = KVCacheManager(cfg)
        self.itl_hist = [0] * NBINS  # token gaps per bin (``gap_bin``)
        self.running: list[Request] = []
        self.waiting: list[Request] = []
        self.by_priority = cfg.policy == "priority"
        self.cap = cfg.max_num_seqs  # effective max_num_seqs (the adaptive cap moves it)
        self.refunds = 0  # priority preemptions of a request already scheduled this step
        self.restart = PREEMPTION_MODES[cfg.preemption_mode] == 1
        self.swap = cfg.preemption_mode == "swap"
        self.cpu_free = cfg.cpu_swap_blocks
        self.swap_ns = 0  # transfer time this step
        self.stop_len = stop_length(
            cfg.max_model_len,
            cfg.num_gpu_blocks,
            cfg.block_size,
            cfg.null_block,
            STOP_BOUNDS[cfg.stop_bound],
        )
        self.lone_self_preemption: tuple[int, int] | None = None
        # PrefixCacheStats (vLLM 0.33, recorded at admission): [queries, hits]
        # for requests never preempted, and for re-admissions after a preemption.
        self.cache_stats = [0, 0]
        self.cache_stats_preempted = [0, 0]
        self.victims: list[int] = []
        self.cycle_detected = False
        # disaggregated decode side: ``kv_holding_waiting`` (requests holding
        # blocks: loading, or loaded and not yet scheduled), and the loads the
        # step started, (request id, external tokens)
        self.holding: list[Request] = []
        self.set_aside: list[Request] = []  # ``holding`` requests set aside this step
        self.loads_started: list[tuple[int, int]] = []
        # the blocks ``holding``'s requests hold (each counted from its load's
        # start to its admission) and the most they held at once
        self.hold_blocks = 0
        self.hold_peak = 0
        # ``Scheduler.defer_block_free``: a KV consumer with two batches in
        # flight (async scheduling) frees no block the step in flight may
        # still write, and so preempts no request scheduled in that step.
        self.defer_block_free = cfg.kv_transfer is not None and cfg.async_scheduling
        # Blocks of requests that finished while a step in flight still held
        # them (drafts accepted past what the scheduler counted on), returned
        # to the pool when that step's output lands (``_drain_deferred_frees``)
        self.deferred_frees: list[list[int]] = []
        # A prefill instance's finished requests whose blocks wait for the
        # decode side's read (NixlConnector's ``delay_free_blocks``): a heap
        # of (when the read completes, id, request) (``kernel/kv_send.py``)
        self.sending: list[tuple[int, int, Request]] = []
        # a drafter's lookahead KV slots (``num_lookahead_tokens``: EAGLE, MTP)
        self.lookahead = 0 if cfg.speculation is None else cfg.speculation.lookahead_tokens

    thr_now = 0  # long_prefill_token_threshold in force this step

    def _cap(self, n: int) -> int:
        thr = self.thr_now
        return thr if 0 < thr < n else n

    def _preempt(self, req: Request) -> None:
        self.victims.append(req.rid)
        req.inflight = False
        req.spec = 0  # ``_preempt_request`` drops its drafts
        req.stale = req.in_flight  # async: in-flight output arrives stale
        req.placeholders = 0
        n = len(req.blocks)
        if self.swap and 0 < n <= self.cpu_free:
            # Swap preemption: the KV moves to the CPU tier, computed tokens stay.
            req.swapped_blocks = n
            self.cpu_free -= n
            self.swap_ns += n * self.cfg.swap_ns_per_block
            self.kv.free(req)
            req.num_preemptions += 1
            req.status = "waiting"
            if self.by_priority:
                self.add_waiting(req)
            else:
                self.waiting.insert(0, req)
            return
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        if self.restart:
            req.num_output_tokens = 0
        req.status = "waiting"
        if self.by_priority:
            self.add_waiting(req)
        else:
            self.waiting.insert(0, req)

    def add_waiting(self, req: Request) -> None:
        """FCFS appends; priority keeps ``waiting`` sorted (``PriorityRequestQueue``)."""
        if self.by_priority:
            bisect.insort(self.waiting, req, key=Request.sort_key)
        else:
            self.waiting.append(req)

    def schedule(self) -> tuple[list[tuple[Request, int]], int, int]:
        """Returns ([(request, tokens)], preempted, admitted)."""
        self.victims = []
        self.admissions: list[tuple[int, int]] = []
        self.swap_ns = 0
        budget = self.cfg.max_num_batched_tokens
        # compat blis applies the threshold always (``VLLMBatchFormation.FormBatch``).
        self.thr_now = (
            self.cfg.long_prefill_token_threshold
            if len(self.running) + len(self.waiting) + len(self.holding) > 1 or self.kv.blis
            else 0
        )
        out: list[tuple[Request, int]] = []
        preempted = 0
        idx = 0
        while idx < len(self.running) and budget > 0:
            req = self.running[idx]
            if (
                req.placeholders > 0
                and req.num_computed_tokens + 2 - req.placeholders
                >= req.prompt_len + req.max_tokens
            ):
                idx += 1  # async: its last token is already in flight
                continue
            drafts = max(req.spec, 0)  # ``num_tokens_with_spec``
            n = self._cap(req.num_tokens + req.placeholders + drafts - req.num_computed_tokens)
            n = min(n, budget, self.cfg.max_model_len - 1 - req.num_computed_tokens)
            if n <= 0:
                idx += 1
                continue
            ok, blocked = True, False
            while not self.kv.allocate_slots(req, n, False, False, lookahead=self.lookahead):
                victim = self.choose_victim()
                if self.defer_block_free and victim.in_flight > 0:
                    blocked = True  # its blocks could not be freed at once
                    break
                pos = self.running.index(victim)
                self.running.remove(victim)
                if pos < idx:
                    idx -= 1
                    if any(r is victim for r, _ in out):  # scheduled this step: refund
                        budget += dict((id(r), k) for r, k in out)[id(victim)]
                        out = [(r, k) for r, k in out if r is not victim]
                        self.refunds += 1
                self._preempt(victim)
                preempted += 1
                if victim is req:
                    ok = False
                    self._note_self_preemption(req)
                    break
            if blocked:
                break
            if not ok:
                if self.by_priority:
                    continue  # it was the lowest priority; later ones may still fit
                break
            out.append((req, n))
            budget -= n
            idx += 1

        admitted = 0
        # ``pad_spec_decode``'s conditions: a running request was scheduled,
        # none of them mid-prefill
        self.ran = bool(out)
        self.prefill_ran = any(r.spec < 0 for r, _ in out)
        self.loads_started = []
        if preempted == 0:
            budget, admitted = self._schedule_waiting(out, budget)
        return out, preempted, admitted

    def _schedule_waiting(self, out: list[tuple[Request, int]], budget: int) -> tuple[int, int]:
        """The waiting phase: ``kv_holding_waiting`` drained first, then
        ``waiting``; a request skipped this step (its KV still loading, or
        async stale output) goes back to the front of its queue at the end.
        Returns (budget left, requests admitted)."""
        admitted = 0
        skipped: list[Request] = []
        skipped_holding: list[Request] = []
        # ``_inflight_prefills`` holds a request whatever queue it is in: the
        # loads set aside this step still reserve their blocks
        self.set_aside = skipped_holding
        while budget > 0:
            queue = self.holding if self.holding else self.waiting
            if not queue or len(self.running) >= self.cap:
                break
            req = queue[0]
            if req.loading:  # ``_handle_blocked_waiting_request``
                if not req.recv_done:
                    skipped_holding.append(queue.pop(0))
                    continue
                self._update_waiting_for_remote_kv(req)
            if req.stale > 0:  # async: its stale output has not arrived yet
                skipped.append(queue.pop(0))
                continue
            # A preempted or new request first claims its prefix-cache hits.
            hits = self.kv.get_computed_blocks(req) if req.num_computed_tokens == 0 else None
            hit_tokens = len(hits[0]) * self.cfg.block_size if hits else 0
            if req.remote and req.num_computed_tokens == 0:
                if not self._start_load(req, hits):
                    break
                skipped_holding.append(queue.pop(0))
                continue
            n = req.num_tokens - req.num_computed_tokens - hit_tokens
            if n == 1 and self.cfg.speculation is not None:
                n = self._padded(
                    req.num_computed_tokens + hit_tokens, self.ran, self.prefill_ran, budget
                )
                if n < 0:
                    break
            n = min(self._cap(n), budget)
            had = len(req.blocks) if queue is self.holding else 0
            if self.cfg.admission != "vanilla" and (
                sum(self.final_blocks(r) for r in self.running) + self.final_blocks(req)
                > self.kv.pool.num_usable
            ):
                break
            if not self.kv.allocate_slots(
                req,
                n,
                self.cfg.scheduler_reserve_full_isl,
                bool(self.running),
                hits,
                lookahead=self.lookahead,
            ):
                break
            if self.kv.caching and req.num_computed_tokens == 0:
                self._record_cache_stats(req, hit_tokens)
            req.num_computed_tokens += hit_tokens
            queue.pop(0)
            self.hold_blocks -= had
            self.admissions.append((req.rid, req.num_computed_tokens))
            if req.swapped_blocks:  # swap the KV back in
                self.cpu_free += req.swapped_blocks
                self.swap_ns += req.swapped_blocks * self.cfg.swap_ns_per_block
                req.swapped_blocks = 0
            if req.num_computed_tokens + n < req.num_tokens:
                req.inflight = True
            self.running.append(req)
            req.status = "running"
            out.append((req, n))
            budget -= n
            admitted += 1
        if self.by_priority:  # ``PriorityRequestQueue.prepend_requests`` re-sorts
            for r in skipped_holding:
                bisect.insort(self.holding, r, key=Request.sort_key)
        else:
            self.holding[:0] = skipped_holding
        self.waiting[:0] = skipped
        return budget, admitted

    def _record_cache_stats(self, req: Request, hit_tokens: int) -> None:
        """``record_prefix_cache_stats`` at admission (or at a load's start)."""
        stats = self.cache_stats_preempted if req.num_preemptions else self.cache_stats
        stats[0] += req.num_tokens
        stats[1] += hit_tokens

    def _start_load(self, req: Request, hits: list[list[int]] | None) -> bool:
        """A remote request's KV load (``Scheduler.schedule``'s ``load_kv_async``
        path): the connector (``NixlConnectorScheduler.
        get_num_new_matched_tokens``, ``nixl/pull_scheduler.py``) loads every
        prompt token past the local hit; ``allocate_slots`` takes the prompt's
        blocks with none to compute and no drafter lookahead (``limit_lookahead_
        tokens``), leaving the blocks in-flight prefills still need
        (``_inflight_prefill_reserved_blocks``) and one speculative step's
        (``_spec_decode_step_blocks``); the request then waits in
        WAITING_FOR_REMOTE_KVS. False if the blocks do not fit."""
        hit_tokens = len(hits[0]) * self.cfg.block_size if hits else 0
        external = req.prompt_len - hit_tokens
        reserved = sum(
            self._remaining_blocks(r)
            for r in (*self.running, *self.holding, *self.set_aside)
            if r.inflight
        )
        reserved += self._spec_decode_step_blocks()
        if not self.kv.allocate_slots(
            req,
            0,
            self.cfg.scheduler_reserve_full_isl,
            bool(self.running),
            hits,
            external=external,
            reserved=reserved,
        ):
            return False
        if self.kv.caching:
            self._record_cache_stats(req, hit_tokens)
        req.num_computed_tokens = hit_tokens + external
        req.remote = False  # one load per request (``update_state_after_alloc``)
        req.loading = True
        req.inflight = True
        self.loads_started.append((req.rid, external))
        self.hold_blocks += len(req.blocks)
        self.hold_peak = max(self.hold_peak, self.hold_blocks)
        return True

    def _spec_decode_step_blocks(self) -> int:
        """``Scheduler._spec_decode_step_blocks``: the blocks one speculative
        step of 1 + k + lookahead tokens can take (one full-attention group),
        kept free beside a load's blocks; 0 without drafts."""
        spec = self.cfg.speculation
        return 0 if spec is None else cdiv(spec.step_tokens, self.cfg.block_size)

    def _remaining_blocks(self, req: Request) -> int:
        """``_request_remaining_blocks``: blocks an in-flight prefill still
        needs to hold its whole sequence (with drafts, and one speculative
        step of 1 + k + lookahead tokens past it)."""
        full = min(req.num_tokens, self.cfg.max_model_len)
        spec = self.cfg.speculation
        if spec is not None:  # one speculative step past the sequence
            full += spec.step_tokens
        return max(cdiv(full, self.cfg.block_size) - len(req.blocks), 0)

    def _update_waiting_for_remote_kv(self, req: Request) -> None:
        """``_update_waiting_for_remote_kv``: the loaded blocks join the prefix
        cache; a whole-prompt load recomputes its last token, so the next one
        can be sampled."""
        self.kv.cache_blocks(req, req.num_computed_tokens)
        if req.num_computed_tokens == req.num_tokens:
            req.num_computed_tokens = req.num_tokens - 1
        req.loading = False
        req.recv_done = False

    def _padded(self, computed: int, ran: bool, prefill_ran: bool, budget: int) -> int:
        """``pad_spec_decode``: a waiting request with one token left goes
        with k invalid drafts (1 + k tokens) when no running request
        scheduled this step is mid-prefill and one was scheduled or it has
        computed tokens, if they fit max_model_len; -1 when 1 + k exceeds
        the budget (the waiting phase ends)."""
        k = self.cfg.speculation.num_speculative_tokens
        if prefill_ran or not (ran or computed > 0):
            return 1
        if computed + 1 + k + 1 > self.cfg.max_model_len:
            return 1
        return -1 if 1 + k > budget else 1 + k

    def choose_victim(self) -> Request:
        """The running request to preempt (planner.kernel.policies documents the rules)."""
        cands = self.running
        k = self.cfg.anti_starvation
        if k > 0 and any(r.num_preemptions < k for r in cands):
            cands = [r for r in cands if r.num_preemptions < k]
        rule = self.cfg.victim_rule
        age = {id(r): i for i, r in enumerate(self.running)}  # admission order
        if rule == "youngest":
            return cands[-1]
        if rule == "priority":  # ties: the first in running order, as max() gives
            return max(cands, key=lambda r: (r.priority, r.entry_ns))
        if rule == "least_progress":
            return min(cands, key=lambda r: (r.num_computed_tokens, -age[id(r)]))
        return max(cands, key=lambda r: (len(r.blocks), age[id(r)]))

    def final_blocks(self, req: Request) -> int:
        """Blocks at completion, projected as the admission policy says."""
        if self.cfg.admission == "projected_oracle":
            tokens = min(req.prompt_len + req.max_tokens, self.stop_len)
        else:
            tokens = self.stop_len
        return blocks_for_tokens(tokens, self.cfg.max_model_len, self.cfg.block_size)

    def _note_self_preemption(self, req: Request) -> None:
        """A request alone in the scheduler preempted itself twice into the same
        state: the run would repeat forever (the engine also requires that no
        request is still to arrive)."""
        if self.running or len(self.waiting) != 1 or self.holding:
            return
        key = (req.rid, req.num_tokens)
        if self.lone_self_preemption == key and self.no_more_arrivals:
            self.cycle_detected = True
        if self.no_more_arrivals:
            self.lone_self_preemption = key

    no_more_arrivals = False

    def after_schedule(self, scheduled: list[tuple[Request, int]]) -> list[tuple]:
        """``_update_after_schedule``: advance num_computed_tokens. Returns the batch
        with, per request, whether its chunk reached the known end (it samples)
        and, with speculative decoding, (draft positions scheduled, real drafts
        among them) (``_drafts_scheduled``)."""
        batch = []
        for req, n in scheduled:
            known = req.num_tokens + req.placeholders
            req.high_water = max(req.high_water, req.num_computed_tokens + n)
            req.num_computed_tokens += n
            samples = req.num_computed_tokens >= known
            if samples:  # no longer prefilling: out of ``_inflight_prefills``
                req.inflight = False
            req.in_flight += n
            drafts = self._drafts_scheduled(req, known, samples)
            if self.cfg.async_scheduling and samples:
                req.placeholders += 1 + drafts[0]
            batch.append((req, n, samples, drafts))
        return batch

    def _drafts_scheduled(self, req: Request, known: int, samples: bool) -> tuple[int, int]:
        """Speculative decoding: (s, d), the draft positions this chunk
        scheduled past the known tokens (``scheduled_spec_decode_tokens``) and
        the real drafts among them (a padded request's are invalid); then the
        request's drafts for its next step: k if it samples
        (``update_draft_token_ids``; async: ``AsyncScheduler.
        _update_after_schedule``'s placeholders), none after a prefill chunk
        (-1). (0, 0) without speculative decoding."""
        spec = self.cfg.speculation
        if spec is None:
            return (0, 0)
        s = max(0, req.num_computed_tokens - known)
        d = min(max(req.spec, 0), s)
        req.spec = spec.num_speculative_tokens if samples else -1
        return (s, d)

    def release_reads(self, now_ns: int) -> None:
        """``_update_from_kv_xfer_finished``'s ``finished_sending``: free the
        blocks of the requests whose read completed by ``now_ns``, in (time,
        id) order (``_free_blocks``; never deferred, ``kv_send.release_read``)."""
        while self.sending and self.sending[0][0] <= now_ns:
            _, _, req = heapq.heappop(self.sending)
            self.kv.free(req)

    def drain_deferred_frees(self) -> None:
        """``Scheduler._drain_deferred_frees``: the deferred blocks return to
        the pool, each request's tail first."""
        for blocks in self.deferred_frees:
            self.kv.pool.free_blocks(list(reversed(blocks)))
        self.deferred_frees = []

    def update_from_output(self, batch: list[tuple], now_ns: int) -> list[int]:
        """Apply a batch's sampled tokens (with speculative decoding, a leading
        run of the real drafts accepted, ``planner.speculative``, and the
        rejected ones taken back from num_computed_tokens and the
        placeholders), ``check_stop`` after each token, free finished
        requests. Returns the ids that finished."""
        finished = []
        spec = self.cfg.speculation
        thr = None if spec is None else spec.thresholds()
        if any(n > 0 for _, n, _, _ in batch):
            self.drain_deferred_frees()  # the step that held them has landed
        for req, n, samples, (s, d) in batch:
            req.in_flight -= n
            was_stale = req.stale > 0
            if was_stale:
                req.stale -= n
            if req.status == "finished" or not samples:
                continue
            a = 0 if spec is None else accepted_drafts_py(
                spec.seed, req.rid, req.num_output_tokens, d, thr
            )  # fmt: skip
            if s and not was_stale:  # the rejected drafts
                if req.num_computed_tokens > 0:
                    req.num_computed_tokens -= s - a
                    req.high_water = max(req.num_computed_tokens, req.high_water - (s - a))
                if req.placeholders > 0:
                    req.placeholders -= s - a
            had_placeholders = req.placeholders > 0
            if req.first_token_ns < 0:
                req.first_token_ns = now_ns
            if req.last_token_ns >= 0:  # ITL: one gap per step's tokens (a streamed chunk)
                gap = now_ns - req.last_token_ns
                req.max_token_gap_ns = max(req.max_token_gap_ns, gap)
                req.num_token_gaps += 1
                self.itl_hist[gap_bin(gap)] += 1
            req.last_token_ns = now_ns
            stopped = False
            for t in range(a + 1):  # ``_update_request_with_output``
                req.num_output_tokens += 1
                if req.num_output_tokens >= req.max_tokens or req.num_tokens >= self.stop_len:
                    stopped = True
                    if not was_stale:
                        req.num_computed_tokens -= a - t  # the trimmed tokens
                    break
            if not was_stale and req.placeholders > 0:
                req.placeholders -= a + 1
            if not was_stale and req.status == "running" and (had_placeholders or spec):
                # Blocks whose tokens are now all known join the cache.
                self.kv.cache_blocks(req, req.num_computed_tokens - req.in_flight)
            if stopped:
                if req.status == "waiting":  # preempted; its stale token ended it
                    self.waiting.remove(req)
                req.status = "finished"
                req.inflight = False
                req.finish_ns = now_ns
                self.kv.last_token_slot(req)
                if self.cfg.kv_transfer is not None and req.read_end_ns >= 0:
                    # a prefill instance: held until the decode side reads them
                    until = max(now_ns + 1, req.read_end_ns)  # reported after it ended
                    heapq.heappush(self.sending, (until, req.rid, req))
                elif self.defer_block_free and req.in_flight > 0:
                    # ``_free_request_blocks``: the step in flight may still
                    # write them (drafts accepted past what async scheduling
                    # counted on ended the request a step early)
                    self.deferred_frees.append(self.kv.pop_blocks_for_free(req))
                else:
                    self.kv.free(req)
                finished.append(req.rid)
        self.running = [r for r in self.running if r.status != "finished"]
        return finished


class CycleDetector:
    """``planner.kernel.cycle`` on whole states: after every arrival and
    QUIET_STEPS steps with no finish (and, unless restart preemption discards
    outputs, no decode), Brent's schedule of snapshots; a livelock is proven
    when a step's state equals the latest snapshot. States are compared as
    tuples (``Engine.cycle_state``), so no hash is involved."""

    def __init__(self, cfg: SchedulerConfig) -> None:
        self.decodes_count = cfg.preemption_mode != "restart"
        self.marks: tuple[int, int, int] | None = None
        self.quiet = 0
        self.snapshot: tuple | None = None
        self.power = 1
        self.lam = 0

    def proven(self, engine: Engine, nxt: int) -> bool:
        """Call after each step; True when the state repeated."""
        # Requests in ``holding`` (disaggregated decode side) or ``sending``
        # (a prefill instance): loads land and reads end with time, so the
        # state is not a cycle's (``kernel/cycle.py``).
        sched = engine.sched
        if engine.pending or sched.holding or sched.sending or self._progressed(engine, nxt):
            self.quiet = 0
            self.snapshot = None
            return False
        self.quiet += 1
        if self.quiet < QUIET_STEPS:
            return False
        state = engine.cycle_state()
        if self.snapshot is None:
            self.snapshot, self.power, self.lam = state, 1, 0
            return False
        self.lam += 1
        if state == self.snapshot:
            return True
        if self.lam == self.power:
            self.snapshot, self.power, self.lam = state, 2 * self.power, 0
        return False

    def _progressed(self, engine: Engine, nxt: int) -> bool:
        marks = (engine.finished, nxt, engine.decode_total if self.decodes_count else 0)
        if marks == self.marks:
            return False
        self.marks = marks
        return True


class Engine:
    """Drives a ``Scheduler`` in simulated time, as ``planner.kernel.step`` does."""

    def __init__(
        self,
        cfg: SchedulerConfig,
        latency: Latency,
        arrival_ns: list[int],
        prompt: list[int],
        max_tokens: list[int],
        priority: list[int] | None = None,
        prefix_group: list[int] | None = None,
        prefix_len: list[int] | None = None,
        hash_ids: list[list[int]] | None = None,
        hash_block_size: int = 0,
        session: list[int] | None = None,
        remote: list[bool] | None = None,
        read_end_ns: list[int] | None = None,
    ) -> None:
        self.cfg = cfg
        b0, b1, b2, a0, a1, _ = latency.ns()
        self.beta = (b0, b1, b2)
        self.lat_kind = lat_kind(latency)
        self.lat_ints = np.array([b0, b1, b2], dtype=np.int64)
        # the target's roofline floats, then a drafter's (EAGLE, MTP: latency.draft)
        self.lat_floats = np.array(
            [*latency.floats(), *draft_floats_of(cfg, latency)], dtype=np.float64
        )
        # A hybrid's sliding layers, priced on their window (RooflineLatency).
        self.win2 = int(self.lat_floats[SW_WINDOW])
        self.lat_table = pack_tables([latency])[0]
        self.sched = Scheduler(cfg)
        self.blis = cfg.compat == "blis"
        if self.blis:  # BLIS's trace holds whole microseconds
            arrival_ns = [round(a / 1000.0) * 1000 for a in arrival_ns]
        self.alpha = (a0, a1)
        entry = [a + self.queue_delay(p) for a, p in zip(arrival_ns, prompt, strict=True)]
        prio = priority if priority is not None else [0] * len(prompt)
        self.requests = [
            Request(i, p, m, a, e, q)
            for i, (a, p, m, e, q) in enumerate(
                zip(arrival_ns, prompt, max_tokens, entry, prio, strict=True)
            )
        ]
        if prefix_group is not None and prefix_len is not None:
            for req, g, n in zip(self.requests, prefix_group, prefix_len, strict=True):
                req.prefix_group = g
                req.shared_len = min(n, req.prompt_len) if g >= 0 else 0
        if hash_ids is not None:
            for req, ids in zip(self.requests, hash_ids, strict=True):
                req.hash_block = hash_block_size
                full = req.prompt_len // hash_block_size
                req.hash_prefixes = [tuple(ids[: t + 1]) for t in range(full)]
        # Sessions: a turn is sent when the previous turn of its session ends.
        self.next_turn: dict[int, int] = {}
        if session is not None:
            last: dict[int, int] = {}
            for i, sid in enumerate(session):
                if sid in last:
                    self.next_turn[last[sid]] = i
                last[sid] = i
                self.requests[i].session = sid
        if remote is not None:  # disaggregated decode side: KV from a prefill instance
            for req, r in zip(self.requests, remote, strict=True):
                req.remote = bool(r)
        if read_end_ns is not None:  # disaggregated prefill side: blocks held for reads
            for req, t in zip(self.requests, read_end_ns, strict=True):
                req.read_end_ns = int(t)
        self.xfer = cfg.kv_transfer
        self.loads: dict[int, int] = {}  # request -> when its KV load lands (ns)
        self.landed: list[int] = []  # async: loads reported by the step in flight
        self.entry = entry
        # the client has an answer alpha2 x outputs after its finish (compat
        # blis: alpha2 in whole microseconds, ``OutputTokenProcessingTime``)
        self.alpha2 = blis_alpha2_ns(latency.ns()[5]) if self.blis else latency.ns()[5]
        # Closed loop (vLLM bench's semaphore, kernel/arrivals.py): requests
        # wait in send order for a free client; ``pending`` holds the sent
        # ones not yet arrived, sorted by (entry, id).
        stream = sorted(range(len(entry)), key=lambda i: (arrival_ns[i], i))
        n_conc = cfg.max_concurrency if cfg.max_concurrency > 0 else len(entry)
        self.unsent = stream[n_conc:]
        later = set(self.next_turn.values())
        for i in later:  # not sent until the previous turn ends
            self.requests[i].entry_ns = self.entry[i] = 2**63 - 1
        self.pending = sorted(
            (i for i in stream[:n_conc] if i not in later), key=lambda i: (entry[i], i)
        )
        self.steps: list[StepRecord] = []
        self.clock = 0
        self.preemptions = 0
        self.rejected = 0
        self.arrived = 0
        self.livelocked = False
        self.step_limit = False
        self.min_free = self.sched.kv.pool.num_free()
        self.waste_ns = 0.0
        self.invariant_errors = 0
        self.kv_block_ns = 0.0  # blocks in use (after allocation) x step time, summed
        self.in_flight: list[tuple] = []  # async: the batch in flight (``after_schedule``)
        self.finished = 0
        self.decode_total = 0  # decode tokens scheduled (kept in the batch)
        self.window_end = cfg.adaptive_window
        self.window_start_preemptions = 0
        self.cycles = CycleDetector(cfg)

    def cycle_state(self) -> tuple:
        """Everything the next step depends on once every request has arrived
        (``planner.kernel.cycle`` lists it): pool and tier, the effective cap,
        the adaptive window's position, and each request in running, waiting
        and the batch in flight with its scheduling fields."""
        sched = self.sched
        k = self.cfg.anti_starvation

        def fields(r: Request) -> tuple:
            held = len(r.blocks) + r.swapped_blocks
            nulls = sum(b == NULL for b in r.blocks)  # sliding window: blocks freed
            pre = min(r.num_preemptions, k) if k > 0 else 0
            return (r.rid, r.status, r.num_computed_tokens, r.num_output_tokens, held,
                    nulls, r.placeholders, r.in_flight, r.stale, pre, r.spec)  # fmt: skip

        adapt = self.cfg.adaptive_window > 0
        window = (
            (self.window_end - len(self.steps), self.preemptions - self.window_start_preemptions)
            if adapt
            else (0, 0)
        )
        state = (
            sched.kv.pool.num_free(),
            sched.cpu_free,
            sched.cap,
            window,
            tuple(fields(r) for r in sched.running),
            tuple(fields(r) for r in sched.waiting),
            tuple(fields(r) for r in sched.holding),
            tuple(
                (r.rid, n, smp, r.status, r.in_flight, r.stale, sd)
                for r, n, smp, sd in self.in_flight
            ),
        )
        if not self.cfg.enable_prefix_caching:
            return state
        # The pool: running requests' blocks, the free queue's order, and each
        # block's content with its predecessor among the blocks of that content.
        pool = sched.kv.pool
        prev = [-1] * len(pool.block_hash)
        for blocks in pool.cached.values():
            order = list(blocks)
            for a, b in zip(order[:-1], order[1:], strict=True):
                prev[b] = a
        return state + (
            tuple(
                (
                    r.num_cached_blocks if not r.uncounted else (-1 - r.num_cached_blocks),
                    tuple(r.blocks),
                    tuple(map(tuple, r.more)),
                    r.junction,
                )
                for r in sched.running
            ),  # fmt: skip
            tuple(pool.free_queue),
            tuple(zip(pool.block_hash, prev, strict=True)),
        )

    def _priced_window(self) -> int:
        """The window of the main attention sums: every layer sliding, else
        none (a hybrid's sliding layers are summed apart, ``win2``)."""
        return self.cfg.sliding_window if self.cfg.full_attention_groups == 0 else 0

    def _pairs(self, c: int, n: int, w: int | None = None) -> int:
        """(query, key) pairs of a chunk of n tokens after c computed ones
        (``w``: the window, default the priced one)."""
        w = self._priced_window() if w is None else w
        return sum(min(c + i, w) if w else c + i for i in range(1, n + 1))

    def _kv_tokens(self, c: int, n: int, w: int | None = None) -> int:
        """KV tokens the chunk reads or writes: positions from the first
        query's window start to its last token."""
        w = self._priced_window() if w is None else w
        return c + n - (max(0, c - w + 1) if w else 0)

    def queue_delay(self, prompt: int) -> int:
        """The front end's delay (ns): alpha0 + alpha1 x prompt; compat blis:
        truncated to whole microseconds (``BlackboxLatencyModel.QueueingTime``)."""
        a0, a1 = self.alpha
        return blis_queue_ns(a0, a1, prompt) if self.blis else a0 + a1 * prompt

    def _admit_arrivals(self) -> int:
        while self.pending and self.entry[self.pending[0]] <= self.clock:
            req = self.requests[self.pending.pop(0)]
            self.arrived += 1
            if front_end_rejects(req.prompt_len, req.max_tokens, self.cfg.max_model_len):
                req.status = "rejected"
                self.rejected += 1
                self._client_answered(req.entry_ns, req.rid, rejected=True)
            else:
                req.status = "waiting"
                self.sched.add_waiting(req)
        self.sched.no_more_arrivals = not self.pending
        return self.arrived

    def _client_answered(self, t_ns: int, rid: int, rejected: bool = False) -> None:
        """A response ended at t_ns. Closed loop: its client sends the next
        request of the stream after the think time (entry: the later of its
        own and t + think + queueing delay). Sessions: a finished turn's next
        turn is sent after the think time (a rejected turn ends the session)."""
        sent = t_ns + self.alpha2 * self.requests[rid].num_output_tokens + self.cfg.think_time_ns
        if self.cfg.max_concurrency == 0:
            if rejected or rid not in self.next_turn:
                return
            i = self.next_turn[rid]
            self.entry[i] = sent + self.queue_delay(self.requests[i].prompt_len)
        elif not self.unsent:
            return
        else:
            i = self.unsent.pop(0)
            self.entry[i] = max(self.entry[i], sent + self.queue_delay(self.requests[i].prompt_len))
        req = self.requests[i]
        req.entry_ns = self.entry[i]
        req.arrival_ns = self.entry[i] - self.queue_delay(req.prompt_len)
        self.pending.append(i)
        self.pending.sort(key=lambda j: (self.entry[j], j))

    def _next_entry(self) -> list[int]:
        """The next request's entry time, if one is still to come."""
        return [self.entry[self.pending[0]]] if self.pending else []

    def _start_loads(self, start: int) -> None:
        """The KV loads this step started land ``kv_transfer.duration_ns``
        after the step's start (the worker starts them as it runs the step)."""
        for rid, external in self.sched.loads_started:
            self.loads[rid] = start + self.xfer.duration_ns(external)

    def _finish_loads(self) -> bool:
        """The step's output reports the loads landed by its end
        (``finished_recving``, ``_update_from_kv_xfer_finished``). Async: the
        output lands after the next ``schedule()``, so the loads it reports
        become visible one step later (``landed``). Returns whether loads
        reported by the previous step's output became visible now."""
        applied = bool(self.landed)
        for rid in self.landed:
            self.requests[rid].recv_done = True
        self.landed = []
        for rid in [r for r, t in self.loads.items() if t <= self.clock]:
            del self.loads[rid]
            if self.cfg.async_scheduling:
                self.landed.append(rid)
            else:
                self.requests[rid].recv_done = True
        return applied

    def run(self) -> Engine:
        horizon = self.cfg.horizon_s
        horizon_ns = None if horizon == float("inf") else int(round(horizon * 1e9))
        b0, b1, b2 = self.beta
        sched = self.sched
        while True:
            nxt = self._admit_arrivals()
            if not self.cfg.async_scheduling:  # the last step's output (kernel/kv_send.py)
                sched.release_reads(self.clock)
            if not sched.running and not sched.waiting and not sched.holding:
                # Only finished requests can have output in flight; as it
                # lands, the blocks it held return (``_drain_deferred_frees``)
                if any(n > 0 for _, n, _, _ in self.in_flight):
                    sched.drain_deferred_frees()
                self.in_flight = []
                if not self.pending:
                    sched.release_reads(2**63 - 1)  # the engine polls until the reads end
                    break
                self.clock = self.entry[self.pending[0]]
                sched.release_reads(self.clock)  # the engine polls while blocks are held
                continue
            # compat blis: a step may start at the horizon (``ClusterSimulator.Run``)
            if horizon_ns is not None and self.clock >= horizon_ns + self.blis:
                break
            if len(self.steps) >= self.cfg.max_steps:
                self.step_limit = True
                break
            if self.cfg.adaptive_window > 0 and len(self.steps) >= self.window_end:
                in_window = self.preemptions - self.window_start_preemptions
                if in_window > self.cfg.adaptive_threshold:
                    sched.cap = max(1, len(sched.running) - 1)
                else:
                    sched.cap = min(self.cfg.max_num_seqs, sched.cap + self.cfg.adaptive_step)
                self.window_start_preemptions = self.preemptions
                self.window_end = len(self.steps) + self.cfg.adaptive_window

            scheduled, preempted, admitted = sched.schedule()
            prefill = decode = 0
            kinds = []
            for req, n in scheduled:
                c0 = req.num_computed_tokens
                if self.blis:  # ``BlackboxLatencyModel.StepTime``: by the chunk's start
                    is_decode = c0 >= req.prompt_len
                else:
                    # the last token, with the drafts verified after it
                    is_decode = c0 == req.num_tokens + req.placeholders - 1
                kinds.append(is_decode)
                if n == 0:
                    continue  # compat blis: a fully cached prompt, not priced
                if is_decode:
                    decode += 1 if self.blis else n
                else:
                    prefill += n
            # Roofline inputs: a chunk of n tokens after c cached ones attends
            # n*c + n(n+1)/2 (query, key) pairs and touches c + n tokens of KV;
            # under a sliding window W, query c + i attends min(c + i, W) keys
            # and the chunk touches the union of its windows.
            attended = sum(self._pairs(r.num_computed_tokens, n) for r, n in scheduled)
            kv_touched = sum(self._kv_tokens(r.num_computed_tokens, n) for r, n in scheduled)
            # A hybrid's sliding layers: the same sums bounded by their window.
            w2 = self.win2
            attended_w = (
                sum(self._pairs(r.num_computed_tokens, n, w2) for r, n in scheduled) if w2 else 0
            )
            kv_w = (
                sum(self._kv_tokens(r.num_computed_tokens, n, w2) for r, n in scheduled)
                if w2
                else 0
            )
            start = self.clock
            if self.blis:  # whole microseconds, even for a step that priced nothing
                dt = blis_step_ns(self.lat_ints, prefill, decode)
            else:
                dt = step_time_ns(
                    self.lat_kind,
                    self.lat_ints,
                    self.lat_floats,
                    prefill,
                    decode,
                    attended,
                    kv_touched,
                    self.lat_table,
                    attended_w,
                    kv_w,
                    len(scheduled),
                )
            if sched.lookahead:  # the drafter's passes (EAGLE, MTP)
                k = self.cfg.speculation.num_speculative_tokens
                dt += draft_ns(
                    self.lat_floats, k, prefill + decode, len(scheduled), attended, kv_touched
                )
            dt += sched.swap_ns
            self._start_loads(start)
            waited = not scheduled and bool(self.loads or sched.sending)
            if waited:  # no model run: the engine polls until a transfer lands or a read ends
                reads = [sched.sending[0][0]] if sched.sending else []
                dt = max(0, min([*self.loads.values(), *reads, *self._next_entry()]) - start)
            for req, _ in scheduled:
                if req.first_scheduled_ns < 0:
                    req.first_scheduled_ns = start
            self.kv_block_ns += (sched.kv.pool.num_usable - sched.kv.pool.num_free()) * dt

            for (req, n), is_decode in zip(scheduled, kinds, strict=True):
                wasted = min(req.num_computed_tokens + n, req.high_water) - req.num_computed_tokens
                if wasted <= 0:
                    continue
                if self.lat_kind == LINEAR:
                    unit = b2 if is_decode else b1
                    self.waste_ns += (b0 / len(scheduled)) * (wasted / n) + unit * wasted
                else:
                    self.waste_ns += dt * wasted / (prefill + decode)
            self.clock += dt
            applied = self._finish_loads()
            self.preemptions += preempted
            self.min_free = min(self.min_free, sched.kv.pool.num_free())
            queued = len(sched.waiting) + len(sched.holding)
            sched_state = (len(sched.running), queued, sched.kv.pool.num_free())
            batch = sched.after_schedule(scheduled)
            in_flight = 0
            if self.cfg.async_scheduling:
                # step_with_batch_queue: the previous step's output lands now.
                done = sched.update_from_output(self.in_flight, start)
                in_flight = len(self.in_flight)
                if done:
                    self.steps[-1].finishes = done
                self.in_flight = batch
                # the landed output's finished_sending, after this schedule()
                sched.release_reads(start)
                finishes: list[int] = []
            else:
                done = []
                finishes = sched.update_from_output(batch, self.clock)
            pool = sched.kv.pool
            holders = (*sched.running, *sched.holding, *(r for _, _, r in sched.sending))
            # Conservation, recounted from scratch each step (list.count and
            # builtin sum/min run in C: the per-block generator this replaced
            # was 70% of a long golden's reference run).
            refs = sum(len(t) - t.count(NULL) for r in holders for t in sched.kv.tables(r))
            refs += sum(len(blocks) for blocks in sched.deferred_frees)
            cnt = pool.ref_cnt
            in_use = len(cnt) - cnt.count(0)
            unbalanced = in_use + pool.num_free() != pool.num_usable or refs != sum(cnt)
            if unbalanced or min(cnt, default=0) < 0:
                self.invariant_errors += 1
            self.steps.append(
                StepRecord(
                    start,
                    self.clock,
                    prefill + decode,
                    prefill,
                    decode,
                    len(sched.running),
                    len(sched.waiting) + len(sched.holding),
                    sched.kv.pool.num_free(),
                    preempted,
                    len(finishes) + len(done),
                    admitted,
                    [(r.rid, n) for r, n in scheduled],
                    list(sched.victims),
                    list(sched.admissions),
                    finishes,
                    sched_state,
                )
            )
            self.finished += len(finishes) + len(done)
            for rid in finishes:
                self._client_answered(self.clock, rid)
            for rid in done:
                self._client_answered(start, rid)
            self.decode_total += decode
            if (
                not scheduled and preempted == 0 and in_flight == 0 and not waited and not applied
            ) or sched.cycle_detected:
                self.livelocked = True
                break
            if self.cycles.proven(self, nxt):  # a state repeated (kernel/cycle.py)
                self.livelocked = True
                break
        return self
