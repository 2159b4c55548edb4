"""The public surface: ``simulate`` runs C configurations against one workload."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
import pandas as pd

from planner import config as K
from planner import replicas as RP
from planner.bounds import INT64_MAX
from planner.config import ROUTERS, SchedulerConfig, pack_configs, pack_tables
from planner.kernel import state as S
from planner.kernel.arena import Arenas
from planner.kernel.compile_time import estimate_cpu_s
from planner.kernel.fleet import simulate_fleet
from planner.kernel.routers import LLM_D, PREFIX_AFFINITY
from planner.kernel.step import caching_marker, run_steps, scratch_sizes, simulate_one
from planner.kernel.variant import (
    PLAIN,
    VARIANTS,
    Features,
    describe,
    features_of,
    level,
    union,
)
from planner.kernel.warm import compile_ahead, compile_loop, variant_lock
from planner.latency.step_time import Latency, LinearLatency
from planner.slo import SLO
from planner.workload.arrays import MAX_ARRIVAL_S, Workload
from planner.workload.block_hashes import chain_ids, private_singletons
from planner.workload_checks import check_block_sizes


@dataclass(frozen=True)
class FleetRun:
    """The kernel's rows of a run through the replica path: ``layout`` says
    which rows are whose replicas (``replicas.Layout``), ``state`` holds them."""

    layout: RP.Layout
    state: S.State


@dataclass
class SimResult:
    """Kernel inputs and final state, for metrics and traces.

    ``cfg``: (C, NCOLS) int64 packed configs; ``arrival_ns``: (R,) int64, or
    (C, R) when configs were given their own arrivals;
    ``state``: the ``kernel.state.State`` after the run, one row per config
    (a fleet's replicas merged: ``replicas.merge``); ``fleet``: the replicas'
    own rows when any config ran behind a router, else None; ``sent``: (C, R)
    bool, the requests each row was sent, given when the rows are replicas
    (``replica_metrics``: a replica serves what the router sent it, whatever
    its fleet's closed-loop clients), else None (``metrics.sent_mask``
    derives it).
    """

    configs: list[SchedulerConfig]
    latencies: list[Latency]
    workload: Workload
    cfg: np.ndarray
    arrival_ns: np.ndarray
    state: S.State
    fleet: FleetRun | None = None
    sent: np.ndarray | None = None

    def metrics(self, slo: SLO | None = None) -> pd.DataFrame:
        """One row per config: see ``planner.metrics.summarize`` (``slo`` adds
        goodput and the SLO verdict)."""
        from planner.metrics import summarize

        return summarize(self, slo)

    def replica_metrics(self, slo: SLO | None = None) -> pd.DataFrame:
        """One row per replica of every config (``summarize`` on each replica's
        own row, its requests only), with ``config`` (the config's index) and
        ``replica`` columns and ``requests_sent``. A run without the replica
        path has one replica per config: its rows equal ``metrics``."""
        from planner.metrics import summarize

        if self.fleet is None:
            df = summarize(self, slo).copy()
            df.insert(0, "replica", 0)
            df.insert(0, "config", np.arange(len(df)))
            df["requests_sent"] = df["arrived"]
            return df
        lay = self.fleet.layout
        arr = self.arrival_ns if self.arrival_ns.ndim == 1 else self.arrival_ns[lay.rows]
        rows = RP.replica_rows(self.fleet.state, lay)
        sub = SimResult(
            [self.configs[i] for i in lay.rows],
            [self.latencies[i] for i in lay.rows],
            self.workload,
            self.cfg[lay.rows],
            arr,
            rows,
            sent=S.entered(rows.req.entry_ns),  # what the router sent each replica
        )
        df = summarize(sub, slo).drop(columns=["never_sent"]).copy()  # defragmented
        df.insert(0, "replica", np.arange(lay.num_rows) - lay.starts[lay.rows])
        df.insert(0, "config", lay.rows)
        df["requests_sent"] = self.fleet.state.out.counters[:, S.O_ORDER_END]
        return df

    def request_tokens(self, c: int = 0) -> pd.DataFrame:
        """Config c's per-request token timing: first-scheduled time, queueing
        delay, first and last token, max token stall, ITL count and mean
        (``planner.metrics.request_token_metrics``)."""
        from planner.metrics import request_token_metrics

        return request_token_metrics(self, c)

    def trace(self, c: int = 0) -> pd.DataFrame:
        """Per-step trace of config c (needs ``trace_steps`` > 0): one row per step."""
        steps = int(min(self.state.out.counters[c, S.O_STEPS], self.state.out.trace.shape[1]))
        df = pd.DataFrame(self.state.out.trace[c, :steps], columns=list(S.TRACE_COLUMNS))
        df.insert(0, "step", np.arange(steps))
        for col in ("start_s", "end_s"):
            df[col] = df[col] / 1e9
        return df

    def events(self, c: int = 0) -> pd.DataFrame:
        """Config c's event log (needs ``log_entries`` > 0): columns step, request,
        value, kind; ``kernel.state.EV_*`` say what each kind's value means."""
        n = int(min(self.state.out.counters[c, S.O_EVENTS], self.state.out.events.shape[1]))
        rows = self.state.out.events[c, :n]
        return pd.DataFrame(rows, columns=["step", "request", "value", "kind"])

    def stuck_requests(self, c: int = 0) -> np.ndarray:
        """Ids of config c's requests that entered the scheduler and never
        finished: still waiting or running when the run stopped (kernel status
        ``state.WAITING``/``RUNNING``). Ids are 0-based positions in the
        workload (arrival order), as in ``request_log``. Under a livelock these
        are the requests that can never complete; under a horizon, also the
        ones that simply had no time. Sorted, int64."""
        st = self.state.req.status[c]
        return np.flatnonzero((st == S.WAITING) | (st == S.RUNNING)).astype(np.int64)

    def request_log(self, c: int = 0) -> pd.DataFrame:
        """(step, request, tokens) for each request scheduled in each step of config c."""
        ev = self.events(c)
        ev = ev[ev.kind == S.EV_SCHED].drop(columns="kind").rename(columns={"value": "tokens"})
        return ev.reset_index(drop=True)


def kernel_status(
    num_configs: int,
    fleet: bool = False,
    caching: bool = False,
    features: Features = PLAIN,
    clients: bool = False,
) -> str:
    """Whether the kernel ``simulate`` uses is ``'loaded'`` (compiled in this
    process), ``'cached'`` (in Numba's on-disk cache: the next call loads it),
    ``'cold'`` (the next call compiles it) or ``'unknown'``.

    Configs run ``step.run_steps`` (``simulate_one``; several at once in a
    thread pool: ``num_configs`` does not change the kernel); configs with
    replicas (``fleet``) run ``kernel.fleet.simulate_fleet``, compiled with
    the closed loop's code when a fleet has closed-loop clients
    (``clients``). Each is compiled
    once per kernel variant: without and with prefix caching (``caching``; the
    prefix cache argument is None or not: ``step.prefix_cache_of``) and per
    set of feature markers (``features``, ``kernel.variant``; in the
    ``Requests`` argument's type). Reads Numba's cache index
    (``numba/core/caching.py``, ``FunctionCache``); if that internal API
    changes, says ``'unknown'``.
    """
    fn, pos = (simulate_fleet, 9) if fleet else (run_steps, 8)
    marks = numba.typeof(features)

    def variant(sig: tuple) -> bool:  # this caching setting and these markers
        args = getattr(sig, "args", sig)
        rq = args[0].types[2] if fleet else args[2]  # simulate_fleet: kx = (cfg, cfgf, rq, ...)
        has_cache = not isinstance(args[pos], numba.types.NoneType)
        if fleet and isinstance(args[-1], numba.types.NoneType) == clients:
            return False  # the other closed-loop setting
        return has_cache == caching and rq.types[-1] == marks

    if any(variant(sig) for sig in fn.signatures):
        return "loaded"
    try:
        keys = fn._cache._cache_file._load_index()
        cached = any(variant(key[0]) for key in keys)
    except Exception:  # noqa: BLE001 (internal API: never fail a run over it)
        return "unknown"
    return "cached" if cached else "cold"


def kernels_status(
    fleet: bool, caching: Iterable[bool], features: Features = PLAIN, clients: bool = False
) -> str:
    """``kernel_status`` of every kernel variant a run needs (``caching``: the
    values its configs take; ``features``: the run's markers; ``clients``:
    a fleet has closed-loop clients): the least ready of them."""
    states = {kernel_status(1, fleet, c, features, clients) for c in set(caching)}
    for state in ("cold", "unknown", "cached"):
        if state in states:
            return state
    return "loaded"


def compile_note(
    fleet: bool = False,
    caching: Iterable[bool] = (False,),
    features: Features = PLAIN,
    clients: bool = False,
) -> str:
    """A one-line note when a kernel variant ``simulate`` will use is neither
    compiled in this process nor in Numba's on-disk cache
    (``kernels_status`` is ``'cold'``; the next call then compiles it first),
    else ''. Its time is estimated from a compile measured now
    (``kernel.compile_time``; none for the replicas' kernel, which is not
    calibrated); the caller measures the real one and says it after
    (``compiled_note``)."""
    caching = set(caching)
    if kernels_status(fleet, caching, features, clients) != "cold":
        return ""
    which = "replicas' " if fleet else ""
    both = " (each prefix-caching setting compiles its own)" if len(caching) > 1 else ""
    about = ""
    if not fleet:
        est = estimate_cpu_s({(c, level(features)) for c in caching})
        about = f", about {est:.0f} CPU-s (estimated from a probe compile)"
    return (
        f"compiling the {which}simulation kernel ({describe(features, caching == {True})}) "
        f"for this machine{both}"
        f"{about}: once; later runs load it from Numba's cache"
    )


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its waited-for children
    (``os.times``), so a compile-ahead child (``kernel.warm``) counts."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def compiled_note(wall_s: float, cpu_s: float, first: int | None = 0) -> str:
    """The line said after a first (compiling) call: the compile's measured
    wall and CPU seconds (``COMPILES`` from index ``first``, where the caller
    started), or, when none was recorded there or ``first`` is None (a run
    with replicas, whose kernel compiles within its run), ``wall_s`` and
    ``cpu_s``, the whole call's (compile and run together; ``cpu_seconds``
    differences)."""
    done = COMPILES[first:] if first is not None else []
    if done:
        wall, cpu = sum(w for w, _ in done), sum(c for _, c in done)
        return f"compiled the kernel in {wall:.0f} s wall, {cpu:.0f} CPU-s (measured)"
    return (
        f"first run on this machine: {wall_s:.0f} s wall, {cpu_s:.0f} CPU-s "
        "(compile included; measured)"
    )


def compile_note_for(
    configs: Sequence[SchedulerConfig],
    workload: Workload | None = None,
    features: Features | None = None,
    latency: Latency | Sequence[Latency] | None = None,
) -> str:
    """``compile_note`` for the kernels ``simulate(configs, workload, latency,
    features=features)`` will run (None: ``features_for(configs, workload,
    latency)``)."""
    fleet = any(c.replicas > 1 for c in configs)
    clients = any(c.replicas > 1 and c.max_concurrency > 0 for c in configs)
    if features is None:
        features = features_for(configs, workload, latency)
    return compile_note(fleet, {c.enable_prefix_caching for c in configs}, features, clients)


def entry_times_ns(
    arrival_ns: np.ndarray, prompt: np.ndarray, a0_ns: int, a1_ns: int, blis: bool = False
) -> np.ndarray:
    """When each request becomes visible to the scheduler: arrival + alpha0 + alpha1*prompt.

    Shapes (R,) int64 in, (R,) int64 out; BLIS queueing delay (planner.latency.step_time).
    ``blis`` (compat blis): the delay truncated to whole microseconds
    (``latency.blis_queue_ns``, BLIS's ``QueueingTime``).
    """
    if blis:  # latency.blis_queue_ns, elementwise: the same float64 operations
        us = a0_ns / 1000.0 + (a1_ns / 1000.0) * prompt.astype(np.float64)
        return arrival_ns + us.astype(np.int64) * 1000
    return arrival_ns + a0_ns + a1_ns * prompt.astype(np.int64)


def blis_arrivals(cfg: np.ndarray, arrival_ns: np.ndarray) -> np.ndarray:
    """Arrivals as compat blis configs see them: rounded to whole microseconds
    (BLIS's trace stores ``arrival_time_us``; ``tools/record_blis.py`` rounds
    to the nearest). ``cfg`` (C, NCOLS); ``arrival_ns`` (R,) or (C, R) int64;
    returns it unchanged without compat blis configs, else (R,) when all are,
    (C, R) when some are."""
    blis = cfg[:, K.COMPAT] != 0
    if not blis.any():
        return arrival_ns
    us = np.round(arrival_ns / 1000.0).astype(np.int64) * 1000
    if blis.all():
        return us
    full = np.array(np.broadcast_to(arrival_ns, (cfg.shape[0], arrival_ns.shape[-1])))
    full[blis] = us[blis] if us.ndim == 2 else us
    return full


def simulate(
    configs: Sequence[SchedulerConfig],
    workload: Workload,
    latency: Latency | Sequence[Latency] = LinearLatency(),
    trace_steps: int = 0,
    log_entries: int = 0,
    fast_path: bool = True,
    check_invariants: bool = True,
    arrival_s: np.ndarray | None = None,
    replica_path: bool = False,
    on_config: Callable[[int], None] | None = None,
    features: Features | None = None,
    route_s: np.ndarray | None = None,
) -> SimResult:
    """Simulate every config against ``workload`` in one jitted, parallel call.

    Args:
        configs: C scheduler configurations.
        workload: R requests (shared by all configs).
        arrival_s: optional (C, R) float64 seconds, request i's arrival time in
            config c, in place of ``workload.arrival_s`` (the highest-rate
            search, replicas and closed-loop clients give configs different
            arrivals in one call); rows need not be sorted.
        latency: one step-time model for all configs, or one per config.
        trace_steps: record up to this many steps per config (0: none).
        log_entries: record up to this many events per config (``SimResult.events``).
        fast_path: let the kernel jump over runs of identical decode steps
            (disabled automatically while tracing; results are identical).
        check_invariants: count steps where held + free blocks != usable blocks
            (``invariant_errors``; one extra pass over ``running`` per step).
        replica_path: run every config through the router's kernel
            (``kernel/fleet.py``) even when none has replicas > 1 (tests
            compare it with the lone-server kernel); it runs whenever one has.
        on_config: called with 1 as each config's run ends (from the kernel's
            worker threads: it must be thread-safe), for progress.
        features: the compiled kernel's feature markers (``kernel.variant``):
            None, those these configs use; a sweep passes its whole grid's
            (``features_for``) so that its chunks share one kernel.
        route_s: optional (R,) float64 seconds, when the router of every
            config's replicas sends each request, which then enters its
            replica at its arrival (never earlier than the send); None: at
            its arrival. A disaggregated decode pool routed as llm-d routes
            it (``planner.disagg``): picked at the client's arrival, entered
            when the prefill ends. Open loop and the replica path only.
    Returns:
        SimResult. Raises ValueError on inconsistent inputs (including an
        ``arrival_s`` that is not (C, R) or holds times outside
        0..``workload.MAX_ARRIVAL_S``, ``features`` without one these
        configs use, and a ``route_s`` that is not (R,), comes after an
        arrival, or is given without replicas, with ``arrival_s`` or with
        closed-loop clients).
    """
    configs = list(configs)
    lats = _latency_list(latency)
    cfg, cfgf = pack_configs(configs, lats)
    c, r = len(configs), workload.num_requests
    arrival_ns = blis_arrivals(cfg, _arrivals_ns(workload, arrival_s, c))
    prompt = np.ascontiguousarray(workload.prompt_tokens, dtype=np.int32)
    max_tokens = np.ascontiguousarray(workload.output_tokens, dtype=np.int32)
    priority = (
        np.zeros(r, dtype=np.int64)
        if workload.priority is None
        else np.ascontiguousarray(workload.priority, dtype=np.int64)
    )
    next_turn = workload.next_turn()
    _paced_clock_bound(cfg, workload, next_turn)
    lay = RP.layout(cfg)
    fleet = replica_path or lay.num_rows > c
    if fleet:
        _check_replica_path(cfg, workload, trace_steps, log_entries)
    group, shared_len = _prefix_groups(workload, cfg, prompt, max_tokens)
    rcfg, rcfgf = (cfg[lay.rows], cfgf[lay.rows]) if fleet else (cfg, cfgf)
    rarr = arrival_ns[lay.rows] if fleet and arrival_ns.ndim == 2 else arrival_ns
    remote = _remote_flags(workload, cfg)
    read_end_ns = _read_ends(workload, cfg)
    xfer = bool(np.any(rcfg[:, K.XFER] != 0))
    st = S.allocate(rcfg.shape[0], r, trace_steps, log_entries, kv_transfer=xfer)
    if xfer:  # the decode side's requests start remote (remote_kv.py)
        st.remote.pd[rcfg[:, K.XFER] != 0] = remote * S.PD_REMOTE
    _fill_entries(rcfg, rarr, prompt, next_turn, st.req)
    route_ns = _route_ns(route_s, arrival_ns, cfg, fleet, arrival_s is not None)
    if fleet:  # the router sends by arrival; clients are the fleet's (kernel/fleet.py)
        sends = arrival_ns if route_ns.size == 0 else route_ns
        streams = np.argsort(sends, axis=-1, kind="stable").astype(np.int32)
        streams = np.broadcast_to(streams, (c, r))
        st.req.order[lay.starts] = streams
        rcfg = rcfg.copy()
        rcfg[:, K.CONC] = 0
    hashes = hash_arrays(workload, configs)
    kernel_hashes = (hashes[0], private_singletons(hashes[1]), hashes[2])
    requests = S.Requests(
        prompt, max_tokens, priority, group, shared_len, *kernel_hashes, next_turn, remote,
        read_end_ns, pack_tables(lats), _kernel_features(features_of(rcfg, next_turn), features),
    )  # fmt: skip
    if fleet:
        keys = RP.no_keys(r)
        if np.any(np.isin(cfg[:, K.ROUTER], (PREFIX_AFFINITY, LLM_D))):
            keys = RP.affinity_keys(prompt, group, shared_len, *hashes[:2], int(hashes[2][0]))
        keys = (*keys, route_ns)
        fleets = (lay.starts, lay.sizes, cfg[:, K.CONC].copy(), cfg[:, K.THINK_NS].copy())
        kx = (rcfg, rcfgf, requests, st.req, st.queues, st.out, st.remote)
        _run_fleets(kx, fleets, keys, fast_path, check_invariants, on_config)
    else:
        _run_kernel(cfg, cfgf, requests, st, fast_path, check_invariants, on_config)
    per = _per_config(lats, c)
    if fleet:
        merged = RP.merge(st, lay)
        closed = cfg[:, K.CONC] > 0  # the clients' send order (metrics.sent_mask)
        merged.req.order[closed] = streams[closed]
        sent = _sent_ns(cfg, arrival_ns, prompt, next_turn, merged.req)
        return SimResult(configs, per, workload, cfg, sent, merged, FleetRun(lay, st))
    arrival_ns = _sent_ns(cfg, arrival_ns, prompt, next_turn, st.req)
    return SimResult(configs, per, workload, cfg, arrival_ns, st)


def _kernel_features(used: Features, given: Features | None) -> Features:
    """The markers the kernel is compiled with: ``given`` (None: ``used``).
    Raises ValueError when ``given`` is not one of ``kernel.variant.VARIANTS``
    or lacks a feature the configs use."""
    if given is None:
        return used
    if given not in VARIANTS:
        raise ValueError(f"features={given} is not a kernel variant: one of {VARIANTS}")
    if union(used, given) != given:
        raise ValueError(f"features={given} lack what these configs use: a kernel {describe(used)}")
    return given


def features_for(
    configs: Sequence[SchedulerConfig],
    workload: Workload | Sequence[Workload] | None = None,
    latency: Latency | Sequence[Latency] | None = None,
) -> Features:
    """The feature markers ``simulate(configs, workload, latency)`` compiles
    for (``kernel.variant.features_of``), to share one kernel across calls;
    with several workloads, the markers of any of them (None: a workload
    without sessions); ``latency`` as ``simulate`` takes it (None: the
    linear model; a measured table's code is in the extras variant). Packs
    the configs once. Raises ValueError as ``pack_configs`` does."""
    lats = [LinearLatency()] if latency is None else _latency_list(latency)
    cfg, _ = pack_configs(list(configs), lats)
    wls = [workload] if isinstance(workload, Workload) else list(workload or [])
    turns = [np.full(0, -1, dtype=np.int32)] + [wl.next_turn() for wl in wls]
    return features_of(cfg, np.concatenate(turns))


def _latency_list(latency: Latency | Sequence[Latency]) -> list[Latency]:
    """``simulate``'s ``latency`` argument as a list (one model, or one per config)."""
    return [latency] if isinstance(latency, Latency) else list(latency)


def _per_config(lats: list[Latency], c: int) -> list[Latency]:
    """One latency model per config (a single model repeated)."""
    return lats if len(lats) == c else lats * c


def _prefix_groups(
    workload: Workload, cfg: np.ndarray, prompt: np.ndarray, max_tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The ``state.Requests`` prefix fields (group (R,) int32, shared_len (R,)
    int32). A session's turns are prefixes of one token stream: block j of any
    turn holds the same tokens, so the session is its prefix group over the
    whole sequence (prompt and output). Raises ValueError for sessions with
    closed-loop clients."""
    r = workload.num_requests
    if workload.session is not None:
        if np.any(cfg[:, K.CONC] > 0):
            raise ValueError("max_concurrency: closed-loop clients and sessions cannot be combined")
        group = np.ascontiguousarray(workload.session, dtype=np.int32)
        shared_len = (prompt.astype(np.int64) + max_tokens).clip(max=2**31 - 1).astype(np.int32)
        return group, shared_len
    if workload.prefix_group is None:
        return np.full(r, -1, dtype=np.int32), np.zeros(r, dtype=np.int32)
    group = np.ascontiguousarray(workload.prefix_group, dtype=np.int32)
    shared_len = np.where(group >= 0, np.minimum(workload.prefix_len, prompt), 0)
    return group, shared_len.astype(np.int32)


def _route_ns(
    route_s: np.ndarray | None, arrival_ns: np.ndarray, cfg: np.ndarray, fleet: bool, own: bool
) -> np.ndarray:
    """``simulate``'s ``route_s`` as (R,) int64 ns ((0,) for None: each
    request is sent at its arrival). Raises ValueError (one line) for a
    shape other than (R,), times that are not finite or come after their
    request's arrival, and for use without replicas, with per-config
    arrivals (``own``) or with closed-loop clients."""
    if route_s is None:
        return np.zeros(0, dtype=np.int64)
    a = np.asarray(route_s, dtype=np.float64)
    if not fleet or own or np.any(cfg[:, K.CONC] > 0):
        raise ValueError(
            "route_s: send times are for an open-loop fleet's router (replicas, one arrival "
            "per request)"
        )
    if a.shape != arrival_ns.shape or not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"route_s: expected {arrival_ns.shape[0]} finite times >= 0")
    route = np.round(a * 1e9).astype(np.int64)
    if np.any(route > arrival_ns):
        raise ValueError("route_s: a request is sent after its arrival")
    return route


def _remote_flags(workload: Workload, cfg: np.ndarray) -> np.ndarray:
    """(R,) int8: ``workload.remote`` (zeros for None). Raises ValueError (one
    line) for remote requests on a config without ``kv_transfer`` (they would
    be served colocated, silently)."""
    if workload.remote is None or not np.any(workload.remote):
        return np.zeros(workload.num_requests, dtype=np.int8)
    if np.any(cfg[:, K.XFER] == 0):
        raise ValueError(
            f"{workload.name}: remote requests (KV from a prefill instance) need a "
            "config with kv_transfer (a disaggregated decode side)"
        )
    return np.ascontiguousarray(workload.remote, dtype=np.int8)


def _read_ends(workload: Workload, cfg: np.ndarray) -> np.ndarray:
    """(R,) int64: ``workload.read_end_ns`` (-1 for None: no block held past its
    request's finish). Raises ValueError (one line) for held requests on a
    config without ``kv_transfer``: without a KV connector vLLM frees them at
    once, so the holds would be ignored silently."""
    if workload.read_end_ns is None or not np.any(workload.read_end_ns >= 0):
        return np.full(workload.num_requests, -1, dtype=np.int64)
    if np.any(cfg[:, K.XFER] == 0):
        raise ValueError(
            f"{workload.name}: blocks held for a decode side's read (read_end_ns) need a "
            "config with kv_transfer (a prefill instance's KV connector)"
        )
    return np.ascontiguousarray(workload.read_end_ns, dtype=np.int64)


def _check_replica_path(
    cfg: np.ndarray, workload: Workload, trace_steps: int, log_entries: int
) -> None:
    """What the replica path does not model yet (a disaggregated decode side,
    one server per config, is refused by ``_remote_flags``). Raises
    ValueError (one line)."""
    if workload.session is not None:
        raise ValueError(
            "--replicas: sessions are not routed yet; use single requests (--turns 1), "
            "or --replicas 1"
        )
    if trace_steps or log_entries:
        raise ValueError(
            "--replicas: per-step traces and event logs are kept per server; use --replicas 1"
        )


def paced_clock_bound(
    configs: Sequence[SchedulerConfig], workload: Workload, latency: Latency
) -> None:
    """``_paced_clock_bound`` for configs before any work (commands call it
    before the compile note). Raises ValueError (one line)."""
    cfg, _ = pack_configs(list(configs), [latency])
    _paced_clock_bound(cfg, workload, workload.next_turn())


def _paced_clock_bound(cfg: np.ndarray, workload: Workload, next_turn: np.ndarray) -> None:
    """Closed-loop clients and session turns are sent after answers, so their
    send times add up: at most R x (think time + alpha2 x the longest output)
    after the last arrival. Like arrivals (``bounds.clock_bound``), that must
    stay within ``MAX_ARRIVAL_S`` so that the int64 ns clock cannot wrap.
    Raises ValueError (one line) otherwise."""
    paced = (cfg[:, K.CONC] > 0) | bool(np.any(next_turn >= 0))
    if not paced.any():
        return
    r = workload.num_requests
    longest = int(np.max(workload.output_tokens))
    chain = float(workload.arrival_s.max())
    chain += r * float((cfg[paced, K.THINK_NS] + cfg[paced, K.A2] * longest).max()) / 1e9
    if chain > MAX_ARRIVAL_S:
        raise ValueError(
            f"--think-time: {r:,} requests each sent after the previous answer "
            f"(think time + alpha2 x {longest:,} output tokens) could reach {chain:.3g} s, "
            f"beyond {MAX_ARRIVAL_S:g} s of simulated time (int64 ns clock)"
        )


def _fill_entries(
    cfg: np.ndarray,
    arrival_ns: np.ndarray,
    prompt: np.ndarray,
    next_turn: np.ndarray,
    req: S.ReqState,
) -> None:
    """Fill ``req.entry_ns``/``req.order`` (C, R): entry = arrival + queueing
    delay (``entry_times_ns``); open loop: ``order`` by (entry, id), sessions'
    later turns left out (entry INT64_MAX: sent when the previous turn ends);
    closed loop (``max_concurrency`` N > 0): the stream's send order, arrival
    then id, its first N (sent at once) by (entry, id). ``kernel/arrivals.py``
    reads them so."""
    entry, order = req.entry_ns, req.order
    later = np.zeros(len(prompt), dtype=bool)
    later[next_turn[next_turn >= 0]] = True
    cache: dict[tuple[int, int, int], int] = {}
    for i in range(cfg.shape[0]):
        conc = int(cfg[i, K.CONC])
        key = (int(cfg[i, K.A0]), int(cfg[i, K.A1]), conc, bool(cfg[i, K.COMPAT]))
        if key in cache and arrival_ns.ndim == 1:
            j = cache[key]
            entry[i], order[i] = entry[j], order[j]
            continue
        cache[key] = i
        arr = arrival_ns if arrival_ns.ndim == 1 else arrival_ns[i]
        a0, a1, _, blis = key
        entry[i] = np.where(later, INT64_MAX, entry_times_ns(arr, prompt, a0, a1, blis))
        if conc == 0:
            order[i] = np.argsort(entry[i], kind="stable")
            continue
        stream = np.argsort(arr, kind="stable")
        head = stream[:conc]
        stream[: len(head)] = head[np.lexsort((head, entry[i][head]))]
        order[i] = stream


def _sent_ns(
    cfg: np.ndarray,
    arrival_ns: np.ndarray,
    prompt: np.ndarray,
    next_turn: np.ndarray,
    req: S.ReqState,
) -> np.ndarray:
    """Arrival times as the run saw them, (R,) or (C, R) int64: open loop, the
    given ones; closed loop and sessions' later turns, when the client sent
    the request (entry - queueing delay). A request never sent (its client
    still waiting at the end) keeps its given time, a lower bound; ``sent``
    tells them apart."""
    closed = cfg[:, K.CONC] > 0
    if not closed.any() and not np.any(next_turn >= 0):
        return arrival_ns
    out = np.array(np.broadcast_to(arrival_ns, req.entry_ns.shape), dtype=np.int64)
    for i in range(cfg.shape[0]):
        delay = entry_times_ns(
            np.zeros_like(out[i]), prompt, int(cfg[i, K.A0]), int(cfg[i, K.A1]),
            bool(cfg[i, K.COMPAT]),
        )  # fmt: skip
        sent = S.entered(req.entry_ns[i])
        out[i] = np.where(sent, req.entry_ns[i] - delay, out[i])
    return out


def hash_arrays(
    workload: Workload, configs: Sequence[SchedulerConfig]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``state.Requests`` block-hash fields: (hash_off (R + 1,) int64,
    hash_key (H,) int64 prefix-chained ids (``block_hashes.chain_ids``),
    hash_block (1,) int64 tokens per trace block, 0 without hash ids or when
    no config reads them: only prefix caching and the ``prefix_affinity``
    and ``llm_d`` routers do, so a run without them skips the chaining).

    Raises WorkloadError when a config with prefix caching has a block_size
    that does not divide the trace's hash block size (a vLLM block must lie in
    one trace block to take its identity)."""
    prefix_routers = (PREFIX_AFFINITY, LLM_D)
    used = any(c.enable_prefix_caching or ROUTERS[c.router] in prefix_routers for c in configs)
    if workload.hash_ids is None or workload.hash_offsets is None or not used:
        empty = np.zeros(0, dtype=np.int64)
        return np.zeros(workload.num_requests + 1, dtype=np.int64), empty, np.zeros(1, np.int64)
    check_block_sizes(workload, configs)
    off = np.ascontiguousarray(workload.hash_offsets, dtype=np.int64)
    return off, chain_ids(workload), np.array([workload.hash_block_size], dtype=np.int64)


def _arrivals_ns(workload: Workload, arrival_s: np.ndarray | None, c: int) -> np.ndarray:
    """Arrival times in int64 ns: (R,) from the workload, or (C, R) when given per config."""
    if arrival_s is None:
        return np.round(workload.arrival_s * 1e9).astype(np.int64)
    a = np.asarray(arrival_s, dtype=np.float64)
    if a.shape != (c, workload.num_requests):
        raise ValueError(f"arrival_s: expected shape ({c}, {workload.num_requests}), got {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > MAX_ARRIVAL_S):
        raise ValueError(f"arrival_s: times must be finite and in 0..{MAX_ARRIVAL_S:g} s")
    return np.round(a * 1e9).astype(np.int64)


def _run_kernel(
    cfg: np.ndarray,
    cfgf: np.ndarray,
    requests: S.Requests,
    st: S.State,
    fast_path: bool,
    check_invariants: bool,
    on_config: Callable[[int], None] | None = None,
) -> None:
    """Run ``step.simulate_one`` for each config, in a thread pool of Numba's
    thread count when there are several (its step loop is ``nogil``). Not a
    ``prange`` kernel: its parallel wrapper would be one more module holding
    the whole step loop for LLVM to optimize again, about 13 CPU-s of a first
    run's compile on a 2-core machine. Raises
    KeyboardInterrupt within about 0.1 s of Ctrl-C (``_interruptible``)."""
    ctl = np.zeros(1, dtype=np.int64)
    arenas = Arenas(*scratch_sizes(cfg, requests))

    def one(c: int) -> None:
        rows = tuple(S.rows(rec, c) for rec in (st.req, st.queues, st.out, st.remote))
        scratch = arenas.get()
        simulate_one(cfg[c], cfgf[c], requests, *rows, ctl, fast_path, check_invariants, scratch)
        if on_config is not None:
            on_config(1)

    _compile_if_cold(cfg, cfgf, requests, st, check_invariants)

    if cfg.shape[0] == 1:
        _interruptible(one, (0,), ctl)
        return
    _interruptible(_pool, (one, range(cfg.shape[0])), ctl)


# Each cold compile of the lone-server step loop ``_compile_if_cold`` made in
# this process: (wall s, CPU s with children), appended in order
# (``compiled_note`` reads them).
COMPILES: list[tuple[float, float]] = []


def _compile_if_cold(
    cfg: np.ndarray,
    cfgf: np.ndarray,
    requests: S.Requests,
    st: S.State,
    check: bool,
    loop: bool = True,
) -> None:
    """On a cold cache, for each variant the configs need (with and without
    prefix caching; a row of each variant gives the signatures, which its
    rows share): with 2 or more cores, compile ``run_steps``' phases in two
    processes (``kernel.warm``; about 10 s less to wait on 2 cores); with
    ``loop``, then compile the step loop itself before any config runs and
    record the whole compile's wall and CPU time in ``COMPILES``. Replicas
    (``loop`` False) run ``fleet.simulate_fleet``, which compiles within its
    run: nothing is recorded, so the note after it times the whole run."""
    for caching in (False, True):
        rows_of = np.flatnonzero((cfg[:, K.CACHING] != 0) == caching)
        if len(rows_of) == 0 or kernel_status(1, False, caching, requests.features) != "cold":
            continue
        c = int(rows_of[0])
        rows = tuple(S.rows(rec, c) for rec in (st.req, st.queues, st.out, st.remote))
        args = (cfg[c], cfgf[c], requests, *rows, bool(check), caching_marker(cfg[c]))
        # One process at a time compiles a variant; a second one waits, then
        # loads it from the cache (``warm.variant_lock``).
        key = f"{loop} {[str(numba.typeof(a)) for a in args]}"
        with variant_lock(key):
            if kernel_status(1, False, caching, requests.features) != "cold":
                continue  # another process compiled it while this one waited
            t0, c0 = time.perf_counter(), cpu_seconds()
            if (os.cpu_count() or 1) >= 2:
                compile_ahead(args)
            if loop:
                compile_loop(args)
                COMPILES.append((time.perf_counter() - t0, cpu_seconds() - c0))


def _pool(fn: Callable[[int], None], items: Sequence[int]) -> None:
    """``fn`` over ``items`` in a pool of Numba's thread count, items handed
    out one by one in order (configs differ in cost)."""
    with ThreadPoolExecutor(max_workers=max(1, numba.get_num_threads())) as pool:
        list(pool.map(fn, items))


def _run_fleets(
    kx: tuple,
    fleets: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    keys: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    fast_path: bool,
    check_invariants: bool,
    on_config: Callable[[int], None] | None = None,
) -> None:
    """Call the fleet kernel (``kernel/fleet.py``) on every config's replica
    rows: ``kx`` = (cfg, cfgf, requests, req, queues, out) of the rows,
    ``fleets`` = (starts, sizes, max_concurrency, think ns) per config. The
    fleets run in a thread pool of Numba's thread count (``simulate_fleet`` is
    ``nogil``), not in a ``prange`` kernel: a parallel wrapper would be one
    more module holding the whole step loop for LLVM to optimize again
    (about half of the fleet kernel's compile time)."""
    ctl = np.zeros(1, dtype=np.int64)
    starts, sizes, conc, think = fleets
    clients = True if bool((conc > 0).any()) else None  # simulate_fleet compiles the closed loop
    _compile_if_cold(kx[0], kx[1], kx[2], S.State(*kx[3:]), check_invariants, loop=False)

    per = scratch_sizes(kx[0], kx[2])
    most = int(sizes.max())
    arenas = Arenas(*(most * e for e in per))

    def one(f: int) -> None:
        n = int(sizes[f])
        bufs = tuple(b[: n * e].reshape(n, e) for b, e in zip(arenas.get(), per, strict=True))
        simulate_fleet(
            kx, starts[f], sizes[f], conc[f], think[f], keys, ctl, fast_path, check_invariants,
            caching_marker(kx[0][starts[f]]), bufs, clients,
        )  # fmt: skip
        if on_config is not None:
            on_config(1)

    _interruptible(_pool, (one, _by_cost(sizes)), ctl)


def _by_cost(sizes: np.ndarray) -> list[int]:
    """Fleets in the order to hand out: the most replicas first."""
    return [int(f) for f in np.argsort(-sizes, kind="stable")]


def _interruptible(kernel: Callable[..., None], args: tuple, ctl: np.ndarray) -> None:
    """Run ``kernel(*args)`` so that Ctrl-C stops it. Compiled code never
    returns to the interpreter, so a SIGINT would wait for the whole run: in
    the main thread the kernel (``nogil``) runs in a worker thread while this
    thread waits in 0.1 s slices; on KeyboardInterrupt it sets the stop flag
    ``ctl[0]``, which every configuration's step loop reads once per step,
    waits for the kernel to return, and re-raises. Elsewhere (sweep executor
    threads) it just calls the kernel."""
    if threading.current_thread() is not threading.main_thread():
        kernel(*args)
        return
    failure: list[BaseException] = []

    def target() -> None:
        try:
            kernel(*args)
        except BaseException as e:  # noqa: BLE001 (re-raised in the caller's thread)
            failure.append(e)

    worker = threading.Thread(target=target, name="planner-kernel", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except KeyboardInterrupt:
        ctl[0] = 1
        worker.join()
        raise
    if failure:
        raise failure[0]
