"""Replicas behind a router (issue 15, item 1): the replica path with one
replica reproduces the lone server bit for bit (the golden scenarios and
randomized cases); a fleet conserves its requests; a state-blind router's
replicas equal lone servers fed the same requests; each router does what
its docstring says."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conformance import config_of, golden_names, load, scenario, workload_of
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_crosscheck import _linear_for_compat, configs, latencies, workloads

from planner.api import simulate
from planner.config import ROUTERS, SchedulerConfig
from planner.kernel import state as S
from planner.metrics import sent_mask
from planner.workload.arrays import LengthDist, Workload, synthetic

# Kernel-only counters: the fast path's step count (decode runs stop at every
# send on the replica path), the router's bookkeeping, and the length of
# ``order`` (a lone closed-loop server holds its whole stream there, a
# replica what it was sent).
DIAGNOSTIC = {
    *S.FAST_PATH_COUNTERS,
    S.O_ROUTE_UNTIL,
    S.O_FIN_BEFORE_STEP,
    S.O_ROUTE_MORE,
    S.O_ORDER_END,
}
RESULT_COUNTERS = [j for j in range(S.NOUT_I) if j not in DIAGNOSTIC]


def assert_same_results(a, b, skip: tuple[str, ...] = ()) -> None:
    """Two SimResults hold the same final state, diagnostics aside."""
    ka, kb = a.state.out.counters, b.state.out.counters
    assert ka[:, RESULT_COUNTERS].tolist() == kb[:, RESULT_COUNTERS].tolist()
    for name in S.ReqState._fields:
        if name in skip:
            continue
        x, y = getattr(a.state.req, name), getattr(b.state.req, name)
        assert np.array_equal(x, y), name
    assert np.array_equal(a.state.out.floats, b.state.out.floats)
    assert np.array_equal(a.state.out.itl_hist, b.state.out.itl_hist)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in golden_names() if not scenario(n).get("kv_transfer")])
def test_golden_scenarios_through_the_replica_path(name):
    gold = load(name)
    scn = gold["scenario"]
    wl, lat, perm = workload_of(scn)
    cfg = config_of(scn)
    lone = simulate([cfg], wl, lat)
    # A state-blind router and one that reads the replicas' state (each router
    # meets the lone server on the randomized cases below and the fleet tests).
    for router in ("round_robin", "least_outstanding"):
        fleet = simulate([replace(cfg, router=router)], wl, lat, replica_path=True)
        assert fleet.fleet is not None
        assert_same_results(lone, fleet)
    if gold["outcome"] == "drained" or scn["mode"] == "time":
        inv = np.argsort(perm)
        got = fleet.state.req.nout[0][inv].tolist()
        assert got == [r["num_output_tokens"] for r in gold["requests"]]


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    cfgs=st.lists(configs(), min_size=2, max_size=2), wl=workloads(), lat=latencies, data=st.data()
)
@pytest.mark.slow
def test_one_replica_equals_the_lone_server(cfgs, wl, lat, data):
    routers = data.draw(st.lists(st.sampled_from(sorted(ROUTERS)), min_size=2, max_size=2))
    cfgs = [
        replace(c, max_concurrency=0, think_time_s=0.0, router=r)
        for c, r in zip(cfgs, routers, strict=True)
    ]
    cfgs = _linear_for_compat(cfgs, lat)
    if wl.session is not None:
        wl = replace(wl, session=None)
    for fast in (True, False):
        lone = simulate(cfgs, wl, lat, fast_path=fast)
        fleet = simulate(cfgs, wl, lat, fast_path=fast, replica_path=True)
        assert_same_results(lone, fleet)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(cfgs=st.lists(configs(), min_size=2, max_size=2), wl=workloads(), lat=latencies)
def test_one_replica_serves_closed_loop_clients_as_the_lone_server(cfgs, wl, lat):
    """Closed loop through the router (lockstep) equals the lone server's
    clients when answers are processed in time order: alpha2 = 0 and no
    front-end rejection (a lone server hands freed slots out in the order it
    processes answers, and sees a rejection only at its next step start; the
    router hands them out in answer-time order, as vLLM bench's FIFO
    semaphore does).

    Prefix caching off except under compat blis (which implies it): the
    closed loop's code (``fleet._send_time``, ``_finalize``) never reads the
    cache, which the open-loop tests above run through the replica path
    under every kernel variant, and each variant is a whole compile of the
    replicas' kernel (the caching variant with speculative decoding, KV
    transfer and cache groups is the largest).
    ``test_closed_loop_clients_go_through_the_router`` runs a closed loop
    with the cache on."""
    cfgs = [
        replace(
            c,
            max_concurrency=max(c.max_concurrency, 1),
            enable_prefix_caching=c.compat == "blis",  # compat blis implies the cache
        )
        for c in cfgs
    ]
    cfgs = _linear_for_compat(cfgs, lat)
    assume(not any(wl.rejected(c.max_model_len).any() for c in cfgs))  # front_end_rejects
    if wl.session is not None:
        wl = replace(wl, session=None)
    if lat.ns()[5] != 0:
        lat = replace(lat, alpha=(lat.alpha[0], lat.alpha[1], 0.0))
    lone = simulate(cfgs, wl, lat)
    fleet = simulate(cfgs, wl, lat, replica_path=True)
    # ``order`` is the lone server's working list (sent requests re-placed by
    # entry); what it means, the set of requests sent, is compared instead.
    assert_same_results(lone, fleet, skip=("order",))
    assert np.array_equal(sent_mask(lone), sent_mask(fleet))
    assert np.array_equal(lone.arrival_ns, fleet.arrival_ns)


@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_closed_loop_clients_go_through_the_router(router):
    """N clients over 3 replicas: never more than N requests in the fleet,
    every request answered once, Little's law N = throughput x mean E2E.
    The router that reads prefixes runs with prefix caching on (it needs
    it): the closed loop through the cache's kernel variant."""
    wl = synthetic(
        300, 1.0, LengthDist("constant", 300), LengthDist("constant", 100), arrival="offline"
    )
    n = 24
    cfg = SchedulerConfig(num_gpu_blocks=2000, max_num_seqs=16, replicas=3, router=router,
                          max_concurrency=n,
                          enable_prefix_caching=router == "prefix_affinity")  # fmt: skip
    res = simulate([cfg], wl)
    m = res.metrics().iloc[0]
    assert m["completed"] == 300 and m["never_sent"] == 0
    per = res.replica_metrics()
    assert per["requests_sent"].sum() == 300 and (per["requests_sent"] > 0).all()
    sent = res.arrival_ns[0] if res.arrival_ns.ndim == 2 else res.arrival_ns
    fin = res.state.req.finish_ns[0]
    # At any send, at most N - 1 others are in flight (sent, not yet answered).
    for t in np.unique(sent):
        inflight = ((sent <= t) & (fin > t)).sum()
        assert inflight <= n
    assert m["e2e_s_mean"] * m["throughput_rps"] == pytest.approx(n, rel=0.05)


def _traffic(n: int = 600, rate: float = 30.0, seed: int = 1) -> Workload:
    return synthetic(
        n,
        rate,
        LengthDist("lognormal", 500, 400, 8, 3000, label="--prompt-tokens"),
        LengthDist("lognormal", 200, 150, 1, 1500, label="--output-tokens"),
        arrival="poisson",
        seed=seed,
    )


@pytest.mark.parametrize("router", sorted(ROUTERS))
@pytest.mark.parametrize("replicas", [2, 3])
def test_a_fleet_serves_each_request_once(router, replicas):
    wl = _traffic()
    cfg = SchedulerConfig(num_gpu_blocks=600, max_num_seqs=32, replicas=replicas, router=router)
    res = simulate([cfg], wl)
    per = res.replica_metrics()
    assert len(per) == replicas
    assert per["requests_sent"].sum() == wl.num_requests
    assert (per["requests_sent"] > 0).all()
    fleet = res.metrics().iloc[0]
    assert fleet["completed"] == per["completed"].sum() == wl.num_requests
    assert fleet["preemptions"] == per["preemptions"].sum()
    assert fleet["invariant_errors"] == 0
    assert res.fleet is not None
    # Each request was served by exactly one replica: it finished there only.
    fin = res.fleet.state.req.finish_ns >= 0
    assert (fin.sum(axis=0) == 1).all()
    assert fleet["replica_request_imbalance"] >= 1.0


def test_round_robin_replicas_are_lone_servers_on_their_share():
    """A router that reads no state makes replicas independent: replica i of
    round_robin serves stream positions i, i + R, ... exactly as a lone server
    fed only those requests at the same times."""
    wl = _traffic(seed=4)
    R = 3
    base = SchedulerConfig(num_gpu_blocks=900, max_num_seqs=24)
    res = simulate([replace(base, replicas=R)], wl)
    order = np.argsort(wl.arrival_s, kind="stable")
    for i in range(R):
        mine = np.sort(order[i::R])
        sub = Workload(wl.arrival_s[mine], wl.prompt_tokens[mine], wl.output_tokens[mine])
        alone = simulate([base], sub)
        for name in ("nout", "npre", "first_ns", "finish_ns"):
            got = getattr(res.state.req, name)[0][mine]
            assert got.tolist() == getattr(alone.state.req, name)[0].tolist(), (i, name)


def test_random_router_follows_its_seed():
    wl = _traffic(n=300)
    cfg = SchedulerConfig(num_gpu_blocks=600, replicas=4, router="random")
    sent = [
        simulate([replace(cfg, router_seed=s)], wl).replica_metrics()["requests_sent"].tolist()
        for s in (0, 0, 1)
    ]
    assert sent[0] == sent[1]
    assert sent[0] != sent[2]


@pytest.mark.parametrize("router", ["least_outstanding", "least_kv"])
def test_state_readers_spread_a_burst_evenly(router):
    """All requests at t = 0: each send sees the previous ones outstanding
    (and their KV unallocated until a step runs), so the counts differ by <= 1."""
    wl = synthetic(
        40, 1.0, LengthDist("constant", 100), LengthDist("constant", 50), arrival="offline"
    )
    res = simulate([SchedulerConfig(num_gpu_blocks=400, replicas=4, router=router)], wl)
    sent = res.replica_metrics()["requests_sent"]
    assert sent.max() - sent.min() <= 1


def test_state_readers_avoid_the_replica_with_the_long_work():
    """Long and short requests alternate: round robin sends every long one to
    replica 0, which falls behind while replica 1 idles; the routers that read
    the replicas' state balance the work, so their tail TTFT is far lower and
    neither overloads."""
    r = 400
    i = np.arange(r)
    wl = Workload(
        i * 0.05,
        np.where(i % 2 == 0, 2000, 100).astype(np.int32),
        np.where(i % 2 == 0, 400, 10).astype(np.int32),
    )
    base = SchedulerConfig(num_gpu_blocks=2000, max_num_seqs=32, replicas=2)
    rr = simulate([base], wl).metrics().iloc[0]
    assert rr["overloaded"]
    for router in ("least_outstanding", "least_kv"):
        m = simulate([replace(base, router=router)], wl).metrics().iloc[0]
        assert not m["overloaded"], router
        assert m["ttft_s_p99"] < rr["ttft_s_p99"] / 5, router
        assert m["replica_busy_imbalance"] < rr["replica_busy_imbalance"], router


@pytest.mark.parametrize("router", ["prefix_affinity", "llm_d"])
def test_prefix_routers_keep_groups_together_and_hit_more(router):
    """SGLang's cache-aware policy, and llm-d's picker (its prefix score,
    weight 2, beats the queue score, at most 1, while queues stay short)."""
    rng = np.random.default_rng(0)
    r = 400
    arrival = np.sort(rng.uniform(0, 20, r))
    group = rng.integers(0, 8, r).astype(np.int32)
    wl = Workload(
        arrival,
        np.full(r, 1200, np.int32),
        np.full(r, 20, np.int32),
        prefix_group=group,
        prefix_len=np.full(r, 1024, np.int32),
    )
    base = SchedulerConfig(
        num_gpu_blocks=700, max_num_seqs=16, replicas=4, enable_prefix_caching=True
    )
    aff = simulate([replace(base, router=router)], wl)
    rr = simulate([base], wl)
    a, b = aff.metrics().iloc[0], rr.metrics().iloc[0]
    assert a["prefix_cache_hit_rate"] > b["prefix_cache_hit_rate"]
    # With balanced load each group went to one replica.
    assert aff.fleet is not None
    lay, st = aff.fleet.layout, aff.fleet.state
    owner = np.full(r, -1)
    for row in range(lay.num_rows):
        owner[st.req.order[row, : st.out.counters[row, S.O_ORDER_END]]] = row
    spread = [len(set(owner[group == g])) for g in range(8)]
    assert max(spread) == 1


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"replicas": 0}, "--replicas"),
        ({"replicas": 2000}, "--replicas"),
        ({"router": "fastest"}, "--router"),
        ({"router_seed": -1}, "--router-seed"),
    ],
)
def test_bad_fleet_options_name_their_flag(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        SchedulerConfig(**kwargs)


def test_session_fleets_are_refused_in_one_line():
    from planner.workload.arrays import sessions

    wl = sessions(5, 3, 1.0, LengthDist("constant", 50), LengthDist("constant", 20))
    with pytest.raises(ValueError, match="--replicas") as e:
        simulate([SchedulerConfig(replicas=2)], wl)
    assert "\n" not in str(e.value)


AZURE_CONV = "planner/data/azure-llm-2023/AzureLLMInferenceTrace_conv.csv"
FLEET_RUN = [
    "run", "--trace-file", AZURE_CONV, "--rate-scale", "8", "--model", "llama-3.1-8b",
    "--gpu", "h100", "--latency", "roofline", "--max-model-len", "16384",
    "--ttft-slo", "2", "--tpot-slo", "0.05", "--json",
    # sweeps/azure-conv-size.toml's stated server, not vLLM 0.33's H100 defaults (at
    # those, 1,024 sequences and 8,192 tokens, four replicas miss TPOT p99 <= 50 ms)
    "--max-num-seqs", "256", "--max-num-batched-tokens", "2048", "--gpu-memory-utilization",
    "0.9", "--no-enable-prefix-caching", "--no-async-scheduling",
]  # fmt: skip


def _fleet_verdict(capsys, replicas: int, router: str = "round_robin") -> dict:
    import json
    from pathlib import Path

    from helpers import run_cli

    root = Path(__file__).resolve().parents[1]
    args = [a if a != AZURE_CONV else str(root / AZURE_CONV) for a in FLEET_RUN]
    if replicas > 1:
        args += ["--replicas", str(replicas), "--router", router]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow
def test_azure_conversation_at_8x_needs_four_h100_replicas(capsys):
    """Llama-3.1-8B on H100 (roofline, the sizing example's flags), the Azure
    conversation trace at 8x, TTFT p99 <= 2 s and TPOT p99 <= 50 ms: four
    replicas meet both and are not overloaded; three do not. At four,
    least_outstanding's tail TTFT is no worse than round robin's."""
    four = _fleet_verdict(capsys, 4)
    assert four["meets_slo"] and not four["overloaded"]
    three = _fleet_verdict(capsys, 3)
    assert not (three["meets_slo"] and not three["overloaded"])
    least = _fleet_verdict(capsys, 4, "least_outstanding")
    assert least["meets_slo"] and not least["overloaded"]
    assert least["ttft_s_p99"] <= four["ttft_s_p99"]


QUICK_SPEC = Path(__file__).parents[1] / "sweeps" / "quick.toml"


def test_replicas_and_router_are_sweep_axes():
    from planner import load_spec, run_sweep

    spec = (
        load_spec(QUICK_SPEC)
        .with_axes(
            max_num_seqs=[64],
            num_gpu_blocks=[3000],
            preemption_mode=None,
            replicas=[1, 2],
            router=["round_robin", "least_outstanding"],
        )
        .replace(horizon_s=None)
    )
    df = run_sweep(spec).set_index("config_id")
    assert len(df) == 4
    sweep = spec.sweep
    (wl,) = sweep.workloads.values()
    for i, cfg in enumerate(sweep.configs):
        direct = simulate([cfg], wl, sweep.latency).metrics().iloc[0]
        for col in ("replicas", "router", "completed", "ttft_s_p99", "preemptions"):
            assert df.loc[i, col] == direct[col], (i, col)
    assert set(df["replicas"]) == {1, 2}


@pytest.mark.parametrize(
    "axes, needle",
    [
        ({"router": ["least_kv"]}, "axes.router: no effect without replicas > 1"),
        ({"replicas": [2], "router_seed": [1]}, "no effect without router random"),
    ],
)
def test_bad_fleet_specs_name_the_field(axes, needle):
    from planner import load_spec
    from planner.sweep.spec import SpecError

    with pytest.raises(SpecError, match=needle) as e:
        load_spec(QUICK_SPEC).with_axes(preemption_mode=None, **axes)
    assert "\n" not in str(e.value)


def test_rejected_requests_qualify_the_slo_verdict(capsys):
    from helpers import run_cli

    args = [
        "run", "--num-requests", "40", "--prompt-tokens", "900", "--prompt-tokens-stdev", "400",
        "--output-tokens", "20", "--max-model-len", "1024", "--ttft-slo", "5",
    ]  # fmt: skip
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    # A rejected request fails (vLLM answers it with an error): a miss.
    assert "verdict: MISSES SLO (TTFT p99 <= 5 s): " in out and "count as misses" in out
    assert "MEETS" not in out and "note: " in out and "the front end rejects" in out


def test_prefix_affinity_without_a_cache_is_refused(capsys):
    from helpers import run_cli

    code, _, err = run_cli(
        capsys, "run", "--num-requests", "5", "--replicas", "2", "--router", "prefix_affinity"
    )
    assert code == 2 and "--enable-prefix-caching" in err and err.count("\n") == 1, err


def test_the_fleet_kernel_is_compiled_per_closed_loop_setting():
    """``simulate_fleet`` compiles the closed loop's code only for runs with
    closed-loop clients (its ``clients`` argument), and ``kernel_status``
    tells the two apart: a closed-loop fleet run leaves that kernel loaded,
    and mixing open and closed fleets in one run serves both right."""
    from planner import api
    from planner.kernel.fleet import simulate_fleet

    wl = synthetic(
        40, 2.0, LengthDist("constant", 64), LengthDist("constant", 16), arrival="offline"
    )
    base = SchedulerConfig(num_gpu_blocks=400, max_num_seqs=8, replicas=2)
    closed = replace(base, max_concurrency=4)
    simulate([closed], wl)
    assert api.kernel_status(1, True, False, clients=True) == "loaded"
    assert "bool" in {str(sig[-1]) for sig in simulate_fleet.signatures}  # with the closed loop
    both = simulate([base, closed], wl).metrics()
    alone = [simulate([c], wl).metrics().iloc[0] for c in (base, closed)]
    for got, want in zip(both.itertuples(), alone, strict=True):
        assert (got.completed, got.e2e_s_mean) == (want["completed"], want["e2e_s_mean"])


def test_each_replica_of_closed_loop_clients_counts_its_own_requests():
    """Per-replica latency counts the requests the router sent that replica,
    closed loop as open: each replica's mean TTFT equals the mean of the
    whole fleet's per-request TTFT over its own requests (before, a
    closed-loop fleet's first replica counted requests it never got as
    unserved: TTFT p99 8.5 s against 0.013 s for its requests)."""
    from planner import replicas as RP
    from planner.metrics import per_request

    wl = synthetic(
        40, 2.0, LengthDist("constant", 200), LengthDist("constant", 50), arrival="constant"
    )
    for conc in (0, 8):
        cfg = SchedulerConfig(num_gpu_blocks=4000, max_num_seqs=16, replicas=2,
                              max_concurrency=conc)  # fmt: skip
        res = simulate([cfg], wl)
        per = res.replica_metrics()
        rows = RP.replica_rows(res.fleet.state, res.fleet.layout)
        ttft = per_request(res)["ttft"][0]  # the merged fleet's, per request
        for i in range(2):
            mine = rows.req.entry_ns[i] < np.iinfo(np.int64).max
            assert mine.sum() == per["requests_sent"][i] == per["completed"][i]
            assert per["ttft_s_mean"][i] == pytest.approx(ttft[mine].mean(), rel=1e-9)
