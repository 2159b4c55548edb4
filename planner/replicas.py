"""Replicas behind a router, outside the kernel: the rows a fleet occupies,
the router's prefix keys, and the fleet's results merged from its replicas.

A configuration with ``replicas`` = R takes R consecutive rows of the kernel's
state (``kernel/fleet.py`` runs them together). ``merge`` turns those rows
back into one row per configuration, so that ``metrics.summarize`` reports the
fleet as it reports a lone server: every request is read from the replica
that served it; counts, busy time, KV time and token gaps add up; the clock
is the latest replica's; the pool figures (peak KV use, usable blocks) are
per replica, the worst one's peak. ``replica_rows`` keeps each replica's own
row, with the requests it was not sent marked as never sent, for per-replica
metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner import config as K
from planner.bounds import INT64_MAX
from planner.kernel import state as S

# How each counter of a fleet merges from its replicas' (``state.O_*``); the
# rest add up (requests, tokens, steps, preemptions, busy time, cache stats).
_MIN = (S.O_MIN_FREE,)
_MAX = (
    S.O_END_NS,
    S.O_LIVELOCKED,
    S.O_STEP_LIMIT,
    S.O_INTERRUPTED,
    S.O_USABLE,
    S.O_STOP_LEN,
    S.O_SEQS,
    S.O_HOLD_PEAK,
)


@dataclass(frozen=True)
class Layout:
    """Where each configuration's replicas live in the kernel's rows.

    ``rows``: (N,) int64, the configuration of each kernel row (N = sum of
    replicas); ``starts``/``sizes``: (C,) int64, each configuration's first
    row and replica count."""

    rows: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray

    @property
    def num_rows(self) -> int:
        return int(self.rows.shape[0])


def layout(cfg: np.ndarray) -> Layout:
    """The ``Layout`` of packed configs ``cfg`` (C, NCOLS) by their REPLICAS column."""
    sizes = cfg[:, K.REPLICAS].astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    return Layout(np.repeat(np.arange(len(sizes)), sizes), starts, sizes)


def lone(num_configs: int) -> Layout:
    """The ``Layout`` of configs that each run as one server on their own row."""
    rows = np.arange(num_configs, dtype=np.int64)
    return Layout(rows, rows.copy(), np.ones(num_configs, np.int64))


def affinity_keys(
    prompt: np.ndarray,
    group: np.ndarray,
    shared_len: np.ndarray,
    hash_off: np.ndarray,
    hash_key: np.ndarray,
    hash_block: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The prefix keys ``prefix_affinity`` remembers (``kernel/routers.py``).

    With block hashes, request r's keys are the chained ids of its full trace
    blocks (``block_hashes.chain_ids``; key j covers (j + 1) x hash_block
    tokens); else its prefix group, covering its shared tokens; else none.
    Returns (key_off (R + 1,) int64, keys (H,) int64 dense ids, key_tokens
    (H,) int64, n_keys (1,) int64)."""
    r = len(prompt)
    if hash_block > 0:
        full = hash_key >= 0  # partial blocks (-1) come last in each request's run
        counts = np.add.reduceat(full.astype(np.int64), hash_off[:-1]) if len(hash_key) else None
        counts = np.zeros(r, np.int64) if counts is None else counts
        counts = np.where(np.diff(hash_off) > 0, counts, 0)
        key_off = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        keys = hash_key[full].astype(np.int64)
        depth = np.arange(len(keys)) - np.repeat(key_off[:-1], counts)
        tokens = (depth + 1) * hash_block
        n = int(keys.max()) + 1 if len(keys) else 0
        return key_off, keys, tokens.astype(np.int64), np.array([n], np.int64)
    has = (group >= 0) & (shared_len > 0)
    key_off = np.concatenate(([0], np.cumsum(has))).astype(np.int64)
    keys = group[has].astype(np.int64)
    n = int(keys.max()) + 1 if len(keys) else 0
    return key_off, keys, shared_len[has].astype(np.int64), np.array([n], np.int64)


def no_keys(num_requests: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``affinity_keys`` for a call with no ``prefix_affinity`` router: none."""
    empty = np.zeros(0, np.int64)
    return np.zeros(num_requests + 1, np.int64), empty, empty, np.zeros(1, np.int64)


def owners(st: S.State, lay: Layout) -> np.ndarray:
    """(C, R) int64: the kernel row that served each request of each
    configuration (the replica the router sent it to; a request never sent,
    when a run was stopped, reads the configuration's first row)."""
    c, r = len(lay.sizes), st.req.order.shape[1]
    out = np.repeat(lay.starts[:, None], r, axis=1)
    ends = st.out.counters[:, S.O_ORDER_END]
    for row in range(lay.num_rows):
        out[lay.rows[row], st.req.order[row, : ends[row]]] = row
    return out.reshape(c, r)


def merge(st: S.State, lay: Layout) -> S.State:
    """One row per configuration from its replicas' rows (module docstring).

    Per-request arrays come from the serving replica; ``order`` is the stream
    by entry; queues and logs are the first replica's (metrics read neither).
    ``O_LIVELOCK_STEP`` is the earliest livelocked replica's step, else -1."""
    own = owners(st, lay)
    cols = np.arange(own.shape[1])[None, :]
    req = S.ReqState(*(a[own, cols] for a in st.req))
    req = req._replace(order=np.argsort(req.entry_ns, axis=1, kind="stable").astype(np.int32))
    counters = np.add.reduceat(st.out.counters, lay.starts, axis=0)
    for j in _MIN:
        counters[:, j] = np.minimum.reduceat(st.out.counters[:, j], lay.starts)
    for j in _MAX:
        counters[:, j] = np.maximum.reduceat(st.out.counters[:, j], lay.starts)
    k = st.out.counters
    step = np.where(k[:, S.O_LIVELOCKED] != 0, k[:, S.O_LIVELOCK_STEP], INT64_MAX)
    step = np.minimum.reduceat(step, lay.starts)
    counters[:, S.O_LIVELOCK_STEP] = np.where(step == INT64_MAX, -1, step)
    out = S.Out(
        counters=counters,
        floats=np.add.reduceat(st.out.floats, lay.starts, axis=0),
        trace=st.out.trace[lay.starts],
        events=st.out.events[lay.starts],
        itl_hist=np.add.reduceat(st.out.itl_hist, lay.starts, axis=0),
    )
    queues = S.Queues(*(a[lay.starts] for a in st.queues))
    return S.State(req, queues, out, S.Remote(*(a[lay.starts] for a in st.remote)))


def replica_rows(st: S.State, lay: Layout) -> S.State:
    """Each replica's own row, with ``entry_ns`` = INT64_MAX (never sent) for
    the requests the router sent elsewhere (a copy; ``st`` is unchanged)."""
    own = owners(st, lay)
    mine = own[lay.rows] == np.arange(lay.num_rows)[:, None]
    entry = np.where(mine, st.req.entry_ns, INT64_MAX)
    return S.State(st.req._replace(entry_ns=entry), st.queues, st.out, st.remote)


def imbalance(st: S.State, lay: Layout) -> dict[str, np.ndarray]:
    """Per configuration, (C,) float64: the busiest replica against the mean,
    by requests sent (``replica_request_imbalance``) and by busy time
    (``replica_busy_imbalance``); 1.0 is perfectly even, NaN when all are 0."""
    out = {}
    for name, col in (("request", S.O_ORDER_END), ("busy", S.O_BUSY_NS)):
        x = st.out.counters[:, col].astype(float)
        mx = np.maximum.reduceat(x, lay.starts)
        mean = np.add.reduceat(x, lay.starts) / lay.sizes
        with np.errstate(divide="ignore", invalid="ignore"):
            out[f"replica_{name}_imbalance"] = np.where(mean > 0, mx / mean, np.nan)
    return out
