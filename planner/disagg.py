"""Disaggregated prefill/decode: P prefill replicas, a KV transfer, D decode replicas.

The deployment vLLM's disaggregated serving runs (``--kv-transfer-config``
with NixlConnector, behind a proxy), simulated stage by stage:

1. **Router.** ``PDRouter``: llm-d's P/D endpoint picker by default
   (llm-d-inference-scheduler ``deploy/config/pd-epp-config.yaml``, the
   ``disagg-profile-handler``): at a request's arrival it runs the decode
   profile, asks ``prefix-based-pd-decider`` whether to prefill remotely
   (a prompt under ``nonCachedTokens`` 16 tokens is prefilled by the
   decode replica itself), then runs the prefill profile; each profile is
   the ``llm_d`` router (``kernel/routers.py``) over its pool's live state
   at that arrival. The prefill pool runs as a colocated fleet of P
   replicas behind it, each request with ``max_tokens`` 1
   (``do_remote_decode``), ending with its one output token; the decode
   pool runs as a fleet of D replicas behind it, each request routed at its
   arrival and entering its replica when its prefill ends (``api.simulate``'s
   ``route_s``). The alternative, ``round_robin``, is vLLM's reference proxy
   (``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``, which
   ``examples/online_serving/disaggregated_serving`` runs): prefill round
   robin in arrival order, decode round robin in the order prefills end.
2. **Decode arrival.** A request reaches its decode replica when its
   prefill ends (the sidecar's or proxy's hop and the response's transit
   are not modelled: a named difference, zero).
3. **Decode side.** Each decode replica runs vLLM's scheduler with the KV
   connector's rules (``planner.kv_transfer``, kernel and reference engine,
   checked against vLLM 0.33's goldens): the request waits in
   ``WAITING_FOR_REMOTE_KVS`` with its prompt's blocks while its KV loads
   (``KVTransfer.duration_ns`` from the load's start), then decodes; its first
   token there is its first token to the client (the prefill's token is not
   streamed: the proxy streams the decode replica's answer).
4. **Blocks held for the read.** Each prefill replica has the KV connector
   too, and keeps a finished prefill's blocks until the decode side has read
   them (NixlConnector's ``delay_free_blocks``; ``kernel/kv_send.py``): from
   the prefill's end until its load on the decode replica landed, which may
   start late when that replica has no free blocks. The two pools decide
   each other (holds delay prefills, whose ends are the decode arrivals), so
   they are run in turn until a prefill run ends every prefill when the one
   before it did (``_until_reads_agree``, at most ``MAX_READ_PASSES`` prefill
   runs; the first frees each prefill's blocks at its end). A decode
   pool that falls behind thus fills the prefill pool's KV cache, as in a
   real deployment.

With no prefill pool (P = 0) the decode replicas serve colocated behind
the router: the fleet the planner simulates for ``--replicas D --router
llm_d`` (or ``round_robin``; a test holds them equal bit for bit).

Differences from a real deployment, named: a held prefill's blocks free at
the prefill replica's first ``schedule()`` after its read completed (vLLM
frees them in the output of the step during which the decode worker's
notification came, usually the same step boundary); when the passes do not
agree, the last one is reported with how far its prefill ends still moved
(``ReadHolds``); llm-d's router reads each replica's waiting queue as of
its latest step (it scrapes ``vllm:num_requests_waiting`` every 50 ms),
never evicts its prefix index, and its decider prefills remotely any prompt
of 16 tokens or more (llm-d also decodes locally a request whose decode
replica holds all but fewer than 16 of its tokens in the router's index);
transfers do not contend for the link (each has the whole bandwidth).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from planner import config as K
from planner import replicas as RP
from planner.api import SimResult, simulate
from planner.config import SchedulerConfig
from planner.kernel import state as S
from planner.kernel.routers import LLM_D_NON_CACHED_TOKENS
from planner.kv_transfer import KVTransfer
from planner.latency.step_time import Latency
from planner.metrics import (
    CHURNING,
    LIVELOCKED,
    OK,
    STARVED,
    STEP_LIMIT,
    THRASHING,
    front_end_text,
    kv_loads,
    latency_stats,
)
from planner.slo import SLO
from planner.workload.arrays import Workload

# Prefill runs at most in ``simulate_disaggregated``'s search for block holds
# that agree with the decode side's reads (``_until_reads_agree``).
MAX_READ_PASSES = 64


@dataclass(frozen=True)
class ReadHolds:
    """How the prefill pool's block holds were found (``_until_reads_agree``).

    Attributes:
        passes: prefill runs made (0: no prefill pool).
        converged: the last prefill run ended every prefill when the run
            before it did, so its holds are the decode run's reads.
        moved_s: when not converged, the largest change of a prefill's end
            between the last two runs, seconds (inf: one ended a prefill
            the other did not).
    """

    passes: int
    converged: bool
    moved_s: float


# The routers a disaggregated deployment can run, as answers name them
# (``PDRouter``; module docstring, steps 1 and 2).
PD_ROUTERS = {
    "llm_d": (
        "llm-d's P/D endpoint picker (llm-d-inference-scheduler deploy/config/"
        "pd-epp-config.yaml): at each arrival the decode profile, then the prefill profile, "
        "each prefix-cache-scorer x 2 + queue-scorer x 1 with max-score-picker; "
        f"prompts under {LLM_D_NON_CACHED_TOKENS} tokens decode without a prefill "
        "(prefix-based-pd-decider)"
    ),
    "round_robin": (
        "vLLM's disaggregated proxy (tests/v1/kv_connector/nixl_integration/"
        "toy_proxy_server.py): round robin, prefill in arrival order, decode in the order "
        "prefills end"
    ),
}


@dataclass(frozen=True)
class PDRouter:
    """The router of a disaggregated deployment: ``name`` one of
    ``PD_ROUTERS`` (default ``llm_d``, llm-d's P/D default), ``seed`` its
    ties' stream (``kernel/routers.llm_d_choice``).

    Raises:
        ValueError: an unknown name or a negative seed (one line).
    """

    name: str = "llm_d"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.name not in PD_ROUTERS:
            raise ValueError(
                f"--router: a disaggregated deployment routes with {' or '.join(PD_ROUTERS)}, "
                f"got {self.name!r}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"--router-seed must be an integer >= 0, got {self.seed!r}")

    def describe(self) -> str:
        """The rule, its source, and the seed where it decides ties."""
        seed = f"; ties by --router-seed {self.seed}" if self.name == "llm_d" else ""
        return PD_ROUTERS[self.name] + seed

    def prefills(self, prompt: np.ndarray) -> np.ndarray:
        """(R,) bool: the requests that go through a prefill replica. llm-d's
        ``prefix-based-pd-decider`` (``nonCachedTokens: 16`` in the sample
        configuration) sends a prompt under that many tokens to the decode
        replica alone; the proxy sends every request to both."""
        if self.name == "llm_d":
            return np.asarray(prompt) >= LLM_D_NON_CACHED_TOKENS
        return np.ones(len(prompt), dtype=bool)


@dataclass(frozen=True)
class Pool:
    """One role's replicas: how many, each one's scheduler config (its pool
    size from its own GPU and tensor parallelism) and step-time model.

    Raises:
        ValueError: replicas < 1, or a config that already has replicas or a
            KV transfer of its own (one line).
    """

    replicas: int
    config: SchedulerConfig
    latency: Latency

    def __post_init__(self) -> None:
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int):
            raise ValueError(f"replicas must be an integer, got {self.replicas!r}")
        if self.replicas < 1:
            raise ValueError(f"a pool needs at least 1 replica, got {self.replicas}")
        if self.config.replicas != 1 or self.config.kv_transfer is not None:
            raise ValueError("a Pool's config is one replica's: replicas 1, no kv_transfer")


@dataclass
class DisaggResult:
    """What ``simulate_disaggregated`` found.

    Attributes:
        requests: one row per request (arrival order): ``arrival_s``,
            ``prompt_tokens``, ``max_tokens``, ``prefill_replica`` (-1 with no
            prefill pool), ``prefill_end_s`` (NaN: none, or never ended),
            ``decode_replica`` (-1: never reached one), ``decode_arrival_s``,
            ``kv_load_start_s``, ``kv_landed_s``, ``transfer_s`` (the load's
            duration), ``first_token_s``, ``finish_s``, ``output_tokens``,
            ``ttft_s``, ``tpot_s``, ``e2e_s`` (client view: from its arrival;
            NaN where not reached), ``done`` (bool), ``preemptions`` (on the
            decode replica), ``rejected`` and ``cut`` (bool: the front end
            refused it, or clamped its max_tokens, at the decode replicas'
            max_model_len: ``Workload.rejected``, ``Workload.cut``).
        prefill: the prefill pool's run (None with no prefill pool).
        decode: each decode replica's run, replica order (None for a replica
            sent nothing).
        max_model_len: the decode replicas' max_model_len (tokens), which
            the front end's rules (``rejected``, ``cut``) use.
        reads: how the prefill pool's block holds (until the decode side
            read them) were found (``ReadHolds``).
    """

    requests: pd.DataFrame
    prefill: SimResult | None
    decode: list[SimResult | None]
    max_model_len: int = 0  # the decode replicas' (the front end's rules)
    reads: ReadHolds = ReadHolds(0, True, 0.0)  # how the prefill holds were found


def simulate_disaggregated(
    workload: Workload,
    decode: Pool,
    prefill: Pool | None = None,
    kv_transfer: KVTransfer | None = None,
    router: PDRouter = PDRouter(),
) -> DisaggResult:
    """Simulate P prefill replicas (``prefill``; None: none, colocated decode
    replicas), the KV transfer (``kv_transfer``, required with a prefill pool)
    and D decode replicas (``decode``) on ``workload`` behind ``router``
    (module docstring).

    Raises:
        ValueError: a prefill pool without ``kv_transfer``, or the pools'
            configs refuse it (one line).
    """
    if prefill is not None and kv_transfer is None:
        raise ValueError("a prefill pool needs a kv_transfer (the link to the decode replicas)")
    arrival_ns = np.round(workload.arrival_s * 1e9).astype(np.int64)
    if prefill is None:
        ready_ns = arrival_ns.copy()
        pre, pre_rep, pre_end = None, np.full(workload.num_requests, -1), None
        dec_rep, runs = _decode_pool(workload, ready_ns, None, decode, decode.config, router)
        reads = ReadHolds(0, True, 0.0)
    else:
        pre, pre_rep, ready_ns, dec_rep, runs, reads = _until_reads_agree(
            workload, prefill, decode, kv_transfer, router
        )
        pre_end = np.where(pre_rep >= 0, ready_ns, -1)
    df = _requests_frame(workload, arrival_ns, pre_rep, pre_end, ready_ns, dec_rep, runs)
    mml = decode.config.max_model_len
    df["rejected"], df["cut"] = workload.rejected(mml), workload.cut(mml)
    return DisaggResult(df, pre, [r for r, _ in runs], mml, reads)


def _until_reads_agree(
    workload: Workload, prefill: Pool, decode: Pool, kv_transfer: KVTransfer, router: PDRouter
) -> tuple:
    """Run the prefill pool and the decode pool in turn until the prefill
    pool's block holds agree with the reads the decode pool makes (module
    docstring, step 4): a prefill run holds each request's blocks until its
    read ends (``read_end_ns``, from the decode run before it), and a decode
    run's arrivals are the prefill run's ends. The first prefill run frees
    each request's blocks at its end (the earliest its read can end, so no
    prefill can end earlier than there); a later read end delays
    prefills and a later prefill end delays its read (as a rule: a scheduler
    can reorder), so the prefill ends grow from pass to pass towards the
    first that agree; the loop stops on agreement, not on that rule. At most
    ``MAX_READ_PASSES`` prefill runs. Requests the router sends to no
    prefill replica (``PDRouter.prefills``) reach the decode side at their
    arrival and are prefilled there. Returns (prefill run, prefill replica
    per request (-1: none), when each reached the decode side (ns; -1
    never), decode replica per request, decode runs, ``ReadHolds``)."""
    dcfg = dataclasses.replace(decode.config, kv_transfer=kv_transfer)
    remote = router.prefills(workload.prompt_tokens)
    pidx = np.flatnonzero(remote)
    arrival_ns = np.round(workload.arrival_s * 1e9).astype(np.int64)
    read_end_ns = np.zeros(pidx.size, dtype=np.int64)
    last, moved = None, 0.0
    for passes in range(1, MAX_READ_PASSES + 1):
        pre, pre_rep, ready_ns = _prefill_pool(
            workload, pidx, prefill, kv_transfer, read_end_ns, router
        )
        ready_ns = np.where(remote, ready_ns, arrival_ns)
        if last is not None and np.array_equal(ready_ns, last[0]):
            return pre, pre_rep, ready_ns, *last[1:], ReadHolds(passes, True, 0.0)
        dec_rep, runs = _decode_pool(workload, ready_ns, remote, decode, dcfg, router)
        moved = 0.0 if last is None else _moved_s(ready_ns, last[0])
        last = (ready_ns, dec_rep, runs)
        read_end_ns = _read_ends(workload.num_requests, ready_ns, runs, kv_transfer)[pidx]
    return pre, pre_rep, *last, ReadHolds(MAX_READ_PASSES, False, moved)


def _moved_s(a: np.ndarray, b: np.ndarray) -> float:
    """The largest change between two passes' prefill ends (ns arrays, -1 for
    none), seconds; inf where one pass ended a prefill the other did not."""
    if np.any((a < 0) != (b < 0)):
        return float("inf")
    return float(np.abs(a - b).max(initial=0)) / 1e9


def _read_ends(n: int, ready_ns: np.ndarray, runs: list, kv_transfer: KVTransfer) -> np.ndarray:
    """(n,) int64 ns: when the decode runs ended each request's read of the
    prefill pool's blocks: its KV load's landing (started later than the
    prefill's end when the decode replica had no blocks); its arrival + the
    link's latency for a request the decode replica's front end refused
    (vLLM's decode side then tells the prefill side at once,
    ``request_finished``'s ``do_remote_prefill`` path); the end of its
    decode replica's run for one it never loaded (a lower bound: its
    heartbeats keep the lease while it waits). -1: no decode replica got it."""
    read = np.full(n, -1, dtype=np.int64)
    for res, idx in runs:
        if res is None:
            continue
        started, _ = (a[0] for a in kv_loads(res))
        end = int(res.state.out.counters[0, S.O_END_NS])
        refused = res.state.req.status[0] == S.REJECTED
        until = np.where(started, res.state.remote.xfer_ns[0], end)
        read[idx] = np.where(refused, ready_ns[idx] + kv_transfer.latency_ns, until)
    return read


def _prefill_pool(
    workload: Workload,
    pidx: np.ndarray,
    pool: Pool,
    kv_transfer: KVTransfer,
    read_end_ns: np.ndarray,
    router: PDRouter,
) -> tuple[SimResult | None, np.ndarray, np.ndarray]:
    """The prefill pool's run of the requests ``pidx`` (each with one output
    token, as the proxy asks, its blocks held from its end until
    ``read_end_ns`` (one per ``pidx``): each replica has the KV connector,
    ``kernel/kv_send.py``) behind ``router`` (llm-d's prefill profile is the
    ``llm_d`` router: its decode pick does not change its scores), the
    replica each request went to (-1: not sent to the pool), and when each
    prefill ended (ns; -1 never: not sent, rejected, or the run stopped
    first). None for the run when no request goes to the pool."""
    n = workload.num_requests
    rep, end = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    if pidx.size == 0:
        return None, rep, end
    wl = _subset(workload, pidx, np.round(workload.arrival_s[pidx] * 1e9), None)
    wl = dataclasses.replace(
        wl, output_tokens=np.ones(pidx.size, dtype=np.int32), read_end_ns=read_end_ns
    )
    cfg = dataclasses.replace(
        pool.config,
        replicas=pool.replicas,
        router=router.name,
        router_seed=router.seed,
        kv_transfer=kv_transfer,
    )
    res = simulate([cfg], wl, pool.latency)
    rep[pidx] = 0
    if res.fleet is not None:  # the replica the router sent each to
        lay = res.fleet.layout
        rep[pidx] = RP.owners(res.fleet.state, lay)[0] - lay.starts[0]
    end[pidx] = res.state.req.finish_ns[0]
    return res, rep, end


def _decode_pool(
    workload: Workload,
    ready_ns: np.ndarray,
    remote: np.ndarray | None,
    pool: Pool,
    cfg: SchedulerConfig,
    router: PDRouter,
) -> tuple[np.ndarray, list[tuple[SimResult | None, np.ndarray]]]:
    """Route the requests that reached the decode side (``ready_ns`` >= 0;
    ``remote`` (R,) bool: those whose KV comes from a prefill replica, None
    for none) to ``pool``'s replicas, each with config ``cfg``: round robin
    in the order they got there (ties by index; each replica then runs on
    its share alone), or llm-d's decode profile at each client's arrival
    (the ``llm_d`` router over the replicas' live state, each request
    entering its replica when it gets there: ``api.simulate``'s
    ``route_s``). Returns the replica of each request (-1: none) and, per
    replica, (its run or None, the request indices it served, in its
    workload's order)."""
    reached = np.flatnonzero(ready_ns >= 0)
    rep = np.full(workload.num_requests, -1)
    order = reached[np.argsort(ready_ns[reached], kind="stable")]
    if router.name == "llm_d" and pool.replicas > 1 and reached.size:
        wl = _subset(workload, order, ready_ns[order], _pick(remote, order))
        fleet = dataclasses.replace(
            cfg, replicas=pool.replicas, router="llm_d", router_seed=router.seed
        )
        res = simulate([fleet], wl, pool.latency, route_s=workload.arrival_s[order])
        return _replica_runs(res, workload, order, ready_ns, remote, cfg, rep)
    rep[order] = np.arange(order.size) % pool.replicas
    runs: list[tuple[SimResult | None, np.ndarray]] = []
    for j in range(pool.replicas):
        idx = order[rep[order] == j]
        if idx.size == 0:
            runs.append((None, idx))
            continue
        wl = _subset(workload, idx, ready_ns[idx], _pick(remote, idx))
        runs.append((simulate([cfg], wl, pool.latency), idx))
    return rep, runs


def _pick(remote: np.ndarray | None, idx: np.ndarray) -> np.ndarray | None:
    """``remote`` of the requests ``idx`` (None stays None)."""
    return None if remote is None else remote[idx]


def _replica_runs(
    res: SimResult,
    workload: Workload,
    reached: np.ndarray,
    ready_ns: np.ndarray,
    remote: np.ndarray | None,
    cfg: SchedulerConfig,
    rep: np.ndarray,
) -> tuple[np.ndarray, list[tuple[SimResult | None, np.ndarray]]]:
    """A decode fleet's run (``res``, on the requests ``reached``, in the
    order they reached the decode side) as each replica's own run, as the
    round-robin path gives them: replica j's requests (its row's sent ones,
    in that order), its row of every state array on their columns, its
    counters; ``rep`` (R,) filled with each request's replica. A replica's
    run is the lone server's on its share (the router only decides the
    share; a test compares them)."""
    assert res.fleet is not None
    lay, st = res.fleet.layout, res.fleet.state
    runs: list[tuple[SimResult | None, np.ndarray]] = []
    for j in range(int(lay.sizes[0])):
        row = int(lay.starts[0]) + j
        sub = np.sort(st.req.order[row, : st.out.counters[row, S.O_ORDER_END]])
        idx = reached[sub]
        rep[idx] = j
        if idx.size == 0:
            runs.append((None, idx))
            continue

        n = st.req.entry_ns.shape[1]
        req = S.ReqState(*(_columns(a, row, sub, n) for a in st.req))
        req = req._replace(order=np.argsort(req.entry_ns, axis=1, kind="stable").astype(np.int32))
        state = S.State(
            req,
            S.Queues(*(_columns(a, row, sub, n) for a in st.queues)),
            S.Out(*(a[row : row + 1] for a in st.out)),
            S.Remote(*(_columns(a, row, sub, n) for a in st.remote)),
        )
        packed = res.cfg[:1].copy()
        packed[:, K.REPLICAS], packed[:, K.ROUTER] = 1, K.ROUTERS[cfg.router]
        arrival = res.arrival_ns[..., sub] if res.arrival_ns.ndim == 1 else res.arrival_ns[:1, sub]
        wl = _subset(workload, idx, ready_ns[idx], _pick(remote, idx))
        runs.append((SimResult([cfg], res.latencies[:1], wl, packed, arrival, state), idx))
    return rep, runs


def _columns(a: np.ndarray, row: int, sub: np.ndarray, n: int) -> np.ndarray:
    """Row ``row`` of a state array as a (1, len(sub)) array of the columns
    ``sub`` when it has one column per request (``n``), else the whole row
    as (1, ...) (a decode side's arrays are (C, 1) without remote requests:
    ``state.allocate``)."""
    return a[row : row + 1, sub] if a.shape[1] == n else a[row : row + 1]


def _subset(
    workload: Workload, idx: np.ndarray, ready_ns: np.ndarray, remote: np.ndarray | None
) -> Workload:
    """The requests ``idx`` arriving at ``ready_ns`` (ns), with the fields a
    replica reads: priorities and prefix groups (sessions and hash ids are
    refused with a prefill pool by the caller), and ``remote`` (one bool per
    request: its KV comes from a prefill replica; None: none does)."""

    def pick(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[idx]

    return Workload(
        ready_ns / 1e9,
        workload.prompt_tokens[idx],
        workload.output_tokens[idx],
        name=workload.name,
        priority=pick(workload.priority),
        prefix_group=pick(workload.prefix_group),
        prefix_len=pick(workload.prefix_len),
        remote=None if remote is None else np.asarray(remote, dtype=bool),
    )


def _requests_frame(
    workload: Workload,
    arrival_ns: np.ndarray,
    pre_rep: np.ndarray,
    pre_end: np.ndarray | None,
    ready_ns: np.ndarray,
    dec_rep: np.ndarray,
    runs: list[tuple[SimResult | None, np.ndarray]],
) -> pd.DataFrame:
    """``DisaggResult.requests`` (its docstring lists the columns)."""
    n = workload.num_requests
    first = np.full(n, -1, dtype=np.int64)
    finish = np.full(n, -1, dtype=np.int64)
    nout = np.zeros(n, dtype=np.int64)
    npre = np.zeros(n, dtype=np.int64)
    landed = np.full(n, -1, dtype=np.int64)
    xfer = np.full(n, np.nan)
    load_start = np.full(n, -1, dtype=np.int64)
    a2 = np.zeros(n)
    for res, idx in runs:
        if res is None:
            continue
        st = res.state.req
        first[idx], finish[idx] = st.first_ns[0], st.finish_ns[0]
        nout[idx], npre[idx] = st.nout[0], st.npre[0]
        if res.configs[0].kv_transfer is not None:
            started, took = (a[0] for a in kv_loads(res))
            landed[idx] = np.where(started, res.state.remote.xfer_ns[0], -1)
            xfer[idx] = np.where(started, took / 1e9, np.nan)
            load_start[idx] = np.where(started, landed[idx] - took, -1)
        a2[idx] = res.cfg[0, K.A2] / 1e9

    def s(ns: np.ndarray) -> np.ndarray:
        return np.where(ns >= 0, ns / 1e9, np.nan)

    arr = arrival_ns / 1e9
    done = finish >= 0
    ttft = np.where(first >= 0, s(first) - arr + a2, np.nan)
    tpot = np.where(
        done & (nout >= 2), (s(finish) - s(first)) / np.maximum(nout - 1, 1) + a2, np.nan
    )
    return pd.DataFrame(
        {
            "request": np.arange(n),
            "arrival_s": arr,
            "prompt_tokens": workload.prompt_tokens,
            "max_tokens": workload.output_tokens,
            "prefill_replica": pre_rep,
            "prefill_end_s": np.full(n, np.nan) if pre_end is None else s(pre_end),
            "decode_replica": dec_rep,
            "decode_arrival_s": s(ready_ns),
            "kv_landed_s": s(landed),
            "transfer_s": xfer,
            "kv_load_start_s": s(load_start),
            "first_token_s": s(first),
            "finish_s": s(finish),
            "output_tokens": nout,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": np.where(done, s(finish) - arr + a2 * nout, np.nan),
            "done": done,
            "preemptions": npre,
        }
    )


def summarize_disaggregated(res: DisaggResult, slo: SLO | None = None) -> dict:
    """The whole deployment's figures, client view (one dict of scalars).

    ``requests``, ``completed``, ``unfinished`` (never finished: at the end
    of the last pool's run they count as lower bounds in the statistics);
    ``throughput_rps`` and ``output_tps`` over the span from the first
    arrival to the last finish; ``ttft_s_*``, ``tpot_s_*``, ``e2e_s_*`` (mean,
    p50, p90, p99, each with ``_is_lower_bound``; ``metrics.latency_stats``);
    ``transfer_s_mean``/``_p99`` (KV load duration) and ``kv_wait_s_p99``
    (decode arrival to the load's start: queueing for blocks);
    ``prefill_overloaded`` and ``decode_overloaded`` (``metrics.overload`` on
    each pool's own input: the prefill fleet against the arrivals, each
    decode replica against its prefilled requests), ``overloaded`` (either),
    ``prefill_overload_judged``/``decode_overload_judged``/``overload_judged``
    (False: a run too short to judge, ``metrics.bursts``),
    ``decode_kv_hold_peak_blocks`` (``_is_bound``), ``decode_blocks``,
    ``decode_kv_hold_share`` (KV held while loads wait),
    ``prefill_read_hold_peak_blocks`` (``_is_bound``: with prefix caching, at
    most), ``prefill_blocks``, ``prefill_read_hold_share``, ``read_passes``,
    ``reads_converged``,
    ``reads_moved_s`` (``_read_holds``), ``prefill_held_back_by``
    (``_held_back``: "decode", "link" or None),
    ``rejected`` and ``cut`` (the front end's failures at max_model_len,
    ``metrics.front_end_text``: misses of any SLO; rejected requests are in
    no statistic and not in ``unfinished``), ``decode_requests`` (sent to a
    decode replica), ``decode_landed`` (of those, whose KV landed within
    their replica's run), ``decode_preemptions``, ``stuck_request_ids`` (ids,
    0-based in arrival order, of the unfinished requests in a livelocked
    pool), ``livelocked`` (any replica;
    requests stuck in a livelocked pool count as lower bounds up to the last
    arrival at least), ``not_arrived``
    (requests due after the run ended: in ``unfinished``, in no statistic),
    ``prefill_outcome``/``decode_outcome``/``outcome`` (``metrics.outcome``
    classes, the worst replica's and the worst pool's) and ``cut_by``
    (``--max-steps``/``--horizon`` when one ended the run early, else None),
    and with an SLO
    ``goodput_rps`` (finished requests within every given objective, per
    second of span), ``meets_slo`` (every given p99 objective holds, no
    statistic is a lower bound, every pool judged and keeping up, nothing
    livelocked, the prefill pool's block holds settled) and ``slo_misses``
    (why not, one phrase each)."""
    df = res.requests
    n = len(df)
    runs = [r for r in res.decode if r is not None]
    pre = None if res.prefill is None else res.prefill.metrics().iloc[0]
    rows = [None if r is None else r.metrics().iloc[0] for r in res.decode]
    dec = [d for d in rows if d is not None]
    end_s = _request_ends(res)
    arr = df["arrival_s"].to_numpy()
    done = df["done"].to_numpy()
    rejected = df["rejected"].to_numpy()
    out: dict = {
        "requests": n,
        "completed": int(done.sum()),
        "unfinished": int((~done & ~rejected).sum()),
        "rejected": int(rejected.sum()),
        "cut": int(df["cut"].sum()),
    }
    # A request stuck in a pool proven livelocked never finishes: it counts
    # in every statistic whenever it arrived, as a lower bound that runs to
    # the last arrival at least (any finite wait is one).
    locked = [d is not None and bool(d["livelocked"]) for d in [*rows, pre]]
    stuck = ~done & ~rejected & _last_pool(res, locked)
    out["stuck_request_ids"] = [int(i) for i in df["request"].to_numpy()[stuck]]
    # Requests due after the run ended (a --horizon before the last arrival)
    # were never offered: they count in ``unfinished`` but in no statistic;
    # rejected ones (HTTP 400) have no latency.
    seen = ((arr <= end_s) | stuck) & ~rejected
    end_s = np.where(stuck, np.maximum(end_s, arr.max(initial=0.0)), end_s)
    out["not_arrived"] = int((~seen & ~rejected).sum())
    # From the first arrival to the last finish, or to the end of the run
    # when requests were left unfinished (a cut or stuck run).
    last = df["finish_s"].max() if done.all() else max(df["finish_s"].max(), _run_end(res))
    span = (last - arr.min()) if done.any() else np.nan
    out["throughput_rps"] = done.sum() / span if done.any() else 0.0
    out["output_tps"] = df["output_tokens"][done].sum() / span if done.any() else 0.0
    out |= _latency(df[seen], end_s[seen])
    xfer = df["transfer_s"].to_numpy()
    # to whole ns: both ends are ns clocks
    wait = np.round((df["kv_load_start_s"] - df["decode_arrival_s"]).to_numpy() * 1e9) / 1e9
    out["transfer_s_mean"] = float(np.nanmean(xfer)) if np.isfinite(xfer).any() else np.nan
    out["transfer_s_p99"] = float(np.nanpercentile(xfer, 99)) if np.isfinite(xfer).any() else np.nan
    out["kv_wait_s_p99"] = float(np.nanpercentile(wait, 99)) if np.isfinite(wait).any() else np.nan
    out["prefill_overloaded"] = bool(pre is not None and pre["overloaded"])
    out["decode_overloaded"] = any(bool(d["overloaded"]) for d in dec)
    out["overloaded"] = out["prefill_overloaded"] or out["decode_overloaded"]
    # A run too short (a burst) to judge overload: no verdict either way.
    out["prefill_overload_judged"] = bool(pre is None or pre["overload_judged"])
    out["decode_overload_judged"] = all(bool(d["overload_judged"]) for d in dec)
    # An overload found is a verdict however short another pool's run was.
    out["overload_judged"] = out["overloaded"] or (
        out["prefill_overload_judged"] and out["decode_overload_judged"]
    )
    out["decode_requests"] = int((df["decode_replica"].to_numpy() >= 0).sum())
    # KV that landed within its decode replica's run (a slow link and a cut
    # can leave none: the decode pool then had nothing to serve yet).
    out["decode_landed"] = int((df["kv_landed_s"].to_numpy() <= end_s).sum())
    out["decode_preemptions"] = int(sum(int(d["preemptions"]) for d in dec))
    out["livelocked"] = any(bool(d["livelocked"]) for d in dec) or bool(
        pre is not None and pre["livelocked"]
    )
    every = [*runs, *([] if res.prefill is None else [res.prefill])]
    out |= _outcomes(pre, dec, every, out["unfinished"] > 0)
    out |= _read_holds(res)
    out["prefill_held_back_by"] = _held_back(out)
    if slo is not None and slo.given():
        out |= _slo_verdict(df, out, slo, span, res.max_model_len)
        if not res.reads.converged:  # the verdict would be on pools that disagree
            out["meets_slo"] = False
            out["slo_misses"] = [*out["slo_misses"], HOLDS_UNSETTLED]
    return out


HOLDS_UNSETTLED = (
    "the prefill pool's block holds did not settle (ReadHolds: prefill ends still moved)"
)
# An overloaded prefill pool whose KV cache was at least this share held for
# reads is held back by them (``_held_back``), by what.
HELD_BACK_SHARE = 0.5
HELD_BACK_BY = {
    "decode": "held back by the decode pool, whose loads wait for its blocks",
    "link": "held back by the KV transfers' time",
}


def _read_holds(res: DisaggResult) -> dict:
    """``decode_kv_hold_peak_blocks`` (the most blocks one decode replica's
    requests held at once while their KV loaded or waited to be scheduled,
    ``kv_holding_waiting``, ``state.O_HOLD_PEAK``; ``_is_bound``: with prefix
    caching, at most), ``decode_blocks`` (a decode replica's num_gpu_blocks),
    ``decode_kv_hold_share``; ``prefill_read_hold_peak_blocks`` (the most
    blocks one prefill replica held at once for the decode side's reads,
    ``kernel/kv_send.py``; 0 without a prefill pool), ``prefill_blocks`` (a
    prefill replica's num_gpu_blocks), ``prefill_read_hold_share`` (the first
    over the second), and ``read_passes``, ``reads_converged``,
    ``reads_moved_s`` (``ReadHolds``)."""
    peak, blocks, bound = 0, 0, False
    if res.prefill is not None:
        run = res.prefill.fleet.state if res.prefill.fleet is not None else res.prefill.state
        peak = int(run.out.counters[:, S.O_SEND_PEAK].max())
        blocks = int(res.prefill.configs[0].num_gpu_blocks)
        bound = bool(res.prefill.configs[0].enable_prefix_caching)
    r = res.reads
    dec = [d for d in res.decode if d is not None]
    dpeak = max((int(d.state.out.counters[0, S.O_HOLD_PEAK]) for d in dec), default=0)
    dblocks = int(dec[0].configs[0].num_gpu_blocks) if dec else 0
    return {
        "decode_kv_hold_peak_blocks": dpeak,
        "decode_kv_hold_peak_is_bound": bool(dec and dec[0].configs[0].enable_prefix_caching),
        "decode_blocks": dblocks,
        "decode_kv_hold_share": dpeak / max(dblocks, 1),
        "prefill_read_hold_peak_blocks": peak,
        "prefill_read_hold_peak_is_bound": bound,
        "prefill_blocks": blocks,
        "prefill_read_hold_share": peak / max(blocks, 1),
        "read_passes": r.passes,
        "reads_converged": r.converged,
        "reads_moved_s": r.moved_s,
    }


def _held_back(out: dict) -> str | None:
    """What holds an overloaded prefill pool back when its KV cache was at
    least ``HELD_BACK_SHARE`` held for the decode side's reads: "decode"
    when requests waited longer on the decode side for blocks than the
    transfers took (p99s: the decode pool sets the pace), else "link" (the
    transfers themselves); None otherwise (the prefill pool's own work)."""
    if not out["prefill_overloaded"] or out["prefill_read_hold_share"] < HELD_BACK_SHARE:
        return None
    wait, took = out["kv_wait_s_p99"], out["transfer_s_p99"]
    return "decode" if np.isfinite(wait) and wait > took else "link"


def _last_pool(res: DisaggResult, per_run: list) -> np.ndarray:
    """(R,) array: each request's value of ``per_run`` (one value per decode
    replica, in replica order, then the prefill pool's) for the run it was
    last in: its decode replica's, else the prefill pool's."""
    rep = res.requests["decode_replica"].to_numpy()
    return np.asarray(per_run)[np.where(rep >= 0, rep, len(res.decode))]


def _end(r: SimResult | None) -> float:
    """The end of a pool's run, seconds (0 for none): its last step's end,
    at most its horizon, as ``metrics.per_request`` ends a run (a decode
    replica's clock may jump to a KV landing past the horizon, which the
    run does not cover)."""
    if r is None:
        return 0.0
    return float(min(r.state.out.counters[0, S.O_END_NS], r.cfg[0, K.HORIZON_NS])) / 1e9


def _run_end(res: DisaggResult) -> float:
    """The end of the last pool's run, seconds."""
    return max(_end(r) for r in [*res.decode, res.prefill])


def _request_ends(res: DisaggResult) -> np.ndarray:
    """(R,) float64 seconds: the time up to which each request's fate is
    simulated: the end of the run it was last in (its decode replica's,
    else the prefill pool's; 0 if neither ran), or the time it reached the
    decode side if later (a decode run cut before it got there)."""
    own = _last_pool(res, [_end(r) for r in [*res.decode, res.prefill]])
    reached = res.requests["decode_arrival_s"].to_numpy()
    return np.where(np.isnan(reached), own, np.maximum(own, reached))


def _latency(df: pd.DataFrame, end_s: np.ndarray) -> dict:
    """TTFT, TPOT and E2E statistics (``metrics.latency_stats``) of the
    requests ``df`` (each simulated up to ``end_s``, (R,) seconds,
    ``_request_ends``). A request unfinished at its end counts at a lower
    bound: its wait so far (TTFT, E2E) or, once it has its first token,
    (end - first token) / (max_tokens - 1), since it cannot finish before
    the end (TPOT)."""
    waited = np.maximum(end_s - df["arrival_s"].to_numpy(), 0.0)
    done = df["done"].to_numpy()
    no_first = df["first_token_s"].isna().to_numpy()
    gaps = np.maximum(df["max_tokens"].to_numpy() - 1, 0)
    open_tpot = ~done & ~no_first & (gaps >= 1)
    so_far = (end_s - df["first_token_s"].to_numpy()) / np.maximum(gaps, 1)
    stats = {
        "ttft_s": (np.where(no_first, waited, df["ttft_s"]), no_first),
        "tpot_s": (np.where(open_tpot, so_far, df["tpot_s"]), open_tpot),
        "e2e_s": (np.where(~done, waited, df["e2e_s"]), ~done),
    }
    out = {}
    for prefix, (x, cens) in stats.items():
        if len(x) == 0:  # nothing offered (all rejected, or due after the end)
            x, cens = np.full(1, np.nan), np.zeros(1, dtype=bool)
        for k, v in latency_stats(prefix, x[None, :], cens[None, :]).items():
            out[k] = v[0].item()
    return out


# The outcome classes (``metrics.outcome``) from the least to the most severe,
# in that function's order of precedence: a deployment's is its worst pool's.
SEVERITY = (OK, CHURNING, THRASHING, STARVED, STEP_LIMIT, LIVELOCKED)


def _worst(classes: list[str]) -> str:
    """The most severe of ``classes`` (``SEVERITY``); ``ok`` for none."""
    return max(classes, key=SEVERITY.index, default=OK)


def _outcomes(
    pre: pd.Series | None, dec: list[pd.Series], runs: list[SimResult], unfinished: bool
) -> dict:
    """``prefill_outcome`` (None without a prefill pool), ``decode_outcome``
    (the worst decode replica's; None when none was sent a request),
    ``outcome`` (the worst), and ``cut_by``:
    ``--max-steps`` when a pool's run stopped at max_steps, ``--horizon`` when
    requests were unfinished at a horizon (``runs``: every pool's runs), else None."""
    out = {
        "prefill_outcome": None if pre is None else str(pre["outcome"]),
        "decode_outcome": _worst([str(d["outcome"]) for d in dec]) if dec else None,
    }
    out["outcome"] = _worst([x for x in (out["prefill_outcome"], out["decode_outcome"]) if x])
    steps_cut = STEP_LIMIT in (out["prefill_outcome"], *(str(d["outcome"]) for d in dec))
    horizon = any(r.cfg[0, K.HORIZON_NS] != K.NO_HORIZON_NS for r in runs)
    out["cut_by"] = "--max-steps" if steps_cut else "--horizon" if horizon and unfinished else None
    return out


def _slo_verdict(df: pd.DataFrame, out: dict, slo: SLO, span: float, mml: int) -> dict:
    """``goodput_rps`` and ``meets_slo`` (``summarize_disaggregated``)."""
    if slo.itl_s is not None:
        raise ValueError("--itl-slo is not judged for a disaggregated deployment yet")
    ok = df["done"].to_numpy() & ~df["cut"].to_numpy()  # a cut request is a miss
    misses = [
        f"the {p} pool is overloaded" for p in ("prefill", "decode") if out[f"{p}_overloaded"]
    ]
    if out["prefill_held_back_by"]:  # its KV cache waited for reads (``_held_back``)
        why = HELD_BACK_BY[out["prefill_held_back_by"]]
        misses = [f"{m} ({why})" if m.startswith("the prefill") else m for m in misses]
    misses += [
        f"the {p} pool's run is too short to judge overload"
        for p in ("prefill", "decode")
        if not out[f"{p}_overload_judged"]
    ]
    misses += ["a replica livelocked"] if out["livelocked"] else []
    if out["rejected"] or out["cut"]:
        front = front_end_text(out["rejected"], out["cut"], mml)
        misses.append(f"{front}, each a miss")
    misses += [f"the run was cut by {out['cut_by']}"] if out["cut_by"] else []
    for name, limit in (("ttft_s", slo.ttft_s), ("tpot_s", slo.tpot_s), ("e2e_s", slo.e2e_s)):
        if limit is None:
            continue
        x = df[name].to_numpy()
        ok &= np.isnan(x) | (x <= limit) if name == "tpot_s" else (x <= limit)
        p99, what = out[f"{name}_p99"], name.removesuffix("_s").upper()
        if name == "tpot_s" and np.isnan(p99):
            continue  # no request had two tokens: no TPOT to miss
        if out[f"{name}_p99_is_lower_bound"]:
            misses.append(f"{what} p99 is only a lower bound (requests unfinished)")
        elif not p99 <= limit:
            misses.append(f"{what} p99 {p99:.4g} s > {limit:g} s")
    good = ok.sum() / span if np.isfinite(span) and span > 0 else 0.0
    return {"goodput_rps": float(good), "meets_slo": not misses, "slo_misses": misses}
