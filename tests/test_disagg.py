"""Disaggregated prefill/decode deployments (``planner.disagg``) and
``plan run --prefill-replicas``."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from helpers import run_cli
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.disagg import PDRouter, Pool, simulate_disaggregated, summarize_disaggregated
from planner.kernel import state as S
from planner.kv_transfer import KVTransfer
from planner.latency.step_time import LinearLatency
from planner.slo import SLO
from planner.workload.arrays import Workload

LAT = LinearLatency(alpha=(0, 0, 0), beta=(5000.0, 20.0, 6.0))
CFG = SchedulerConfig(num_gpu_blocks=3000, async_scheduling=False, enable_prefix_caching=False)


def _workload(n: int = 200, rate: float = 10.0, seed: int = 1) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(
        np.sort(rng.uniform(0, n / rate, n)),
        rng.integers(100, 2000, n).astype(np.int32),
        rng.integers(5, 300, n).astype(np.int32),
        name="mixed",
    )


def test_a_slow_link_is_delay_not_overload(capsys):
    """A long --kv-transfer-latency delays every request by the same time; it
    is no lack of capacity, so the decode pool is judged on its requests as
    they land (``metrics.kv_loads``; hostile-pass finding: a 50-request burst
    over a 5 s link was called OVERLOADED), and ``kv_loads`` gives each started
    load's duration as the requests table reports it."""
    args = ("run", "--num-requests", "50", *L8_H100, "--prefill-replicas", "1", "--json")
    for us in ("5", "5000000"):
        code, out, err = run_cli(capsys, *args, "--kv-transfer-latency", us)
        assert code == 0, err
        summary = json.loads(out)["summary"]
        assert summary["decode_overloaded"] is False, (us, summary["decode_outcome"])
    wl = Workload(np.linspace(0, 1, 30), np.full(30, 900), np.full(30, 40), name="w")
    cfg = SchedulerConfig(num_gpu_blocks=4000, max_num_seqs=8)
    kv = KVTransfer(latency_ns=2_000_000_000, ps_per_token=1_000_000)
    res = simulate_disaggregated(wl, Pool(1, cfg, LAT), Pool(1, cfg, LAT), kv)
    from planner.metrics import kv_loads

    run = res.decode[0]
    got = kv_loads(run)[1][0] / 1e9
    frame = res.requests.set_index("request").loc[np.arange(30)]
    started = frame["transfer_s"].notna().to_numpy()
    assert started.all() and np.allclose(got, frame["transfer_s"].to_numpy())
    assert np.allclose(got, kv.duration_ns(900) / 1e9)  # the whole prompt: no local hit
    assert (got >= 2.0).all() and run.metrics()["overloaded"].iloc[0] == False  # noqa: E712


@pytest.mark.slow
def test_a_cut_run_over_a_slow_link_is_judged_on_what_landed(capsys):
    """--horizon/--max-steps cut the decode pool's judged window at the
    landings, not the arrivals (hostile-pass finding: a pool that keeps up was
    OVERLOADED under --horizon 60 over a 20 s link); with nothing landed by the
    cut there is nothing to judge."""
    run = ("run", *L8_H100, "--latency", "roofline", "--prompt-tokens", "500",
           "--output-tokens", "2000", "--prefill-replicas", "1", "--rate", "5",
           "--num-requests", "1000", "--kv-transfer-latency", "2e7", "--json")  # fmt: skip
    for cut in ((), ("--horizon", "60"), ("--horizon", "15"), ("--max-steps", "50")):
        code, out, err = run_cli(capsys, *run, *cut)
        assert code == 0, err
        summary = json.loads(out)["summary"]
        assert summary["decode_overloaded"] is False, (cut, summary["decode_outcome"])
        if cut == ("--horizon", "15"):  # each load takes 20 s: none landed
            assert summary["decode_overload_judged"] is False


def test_a_cut_before_any_kv_landed_says_so_and_bounds_stay_in_the_window(capsys):
    """A --horizon shorter than one KV load: the decode pool had nothing to
    serve, and the output says that rather than a bare 'burst too short'
    with 'outcome starved'; the TTFT/E2E lower bounds run to the end of the
    window, not to a landing past it (hostile-pass findings: a p99 TTFT
    bound of 4.98 s in a 3 s window)."""
    args = ("run", "--num-requests", "50", *L8_H100, "--prefill-replicas", "1",
            "--kv-transfer-latency", "5000000", "--horizon", "3")  # fmt: skip
    code, out, err = run_cli(capsys, *args, "--json")
    assert code == 0, err
    s = json.loads(out)["summary"]
    assert s["decode_requests"] > 0 and s["decode_landed"] == 0
    for name in ("ttft_s", "e2e_s"):
        assert s[f"{name}_p99_is_lower_bound"] and s[f"{name}_p99"] <= 3.0, (name, s)
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and "no request's KV landed before --horizon ended the run" in out, out
    assert "burst too short" not in out
    code, out, err = run_cli(capsys, *args[:-1], "20", "--json")  # a window they land in
    s = json.loads(out)["summary"]
    assert code == 0 and s["decode_landed"] == s["decode_requests"] > 0, s


def test_the_prefill_replicas_take_their_own_scheduler_flags(capsys):
    """--prefill-max-num-seqs and --prefill-max-num-batched-tokens act on the
    prefill pool only (vLLM starts each instance with its own flags): its
    vllm serve command and pool size follow them (the pool is sized for its
    own token budget, ``resolve.num_gpu_blocks``), the decode pool keeps the
    server's, and a smaller prefill budget chunks long prompts into more
    steps, so TTFT grows by their fixed costs."""
    from planner import resolve

    args = (*BASE, *L8_H100, "--prompt-tokens", "6000", "--output-tokens", "20",
            "--prefill-replicas", "1", "--json")  # fmt: skip
    ttft = {}
    for mnbt in (1024, 16384):
        code, out, err = run_cli(
            capsys, *args, "--prefill-max-num-seqs", "32", "--prefill-max-num-batched-tokens",
            str(mnbt),
        )  # fmt: skip
        assert code == 0, err
        d = json.loads(out)
        pre, dec = d["disaggregated"]["prefill"], d["disaggregated"]["decode"]
        assert (pre["max_num_seqs"], pre["max_num_batched_tokens"]) == (32, mnbt)
        assert (dec["max_num_seqs"], dec["max_num_batched_tokens"]) == (1024, 8192)
        serve = d["disaggregated"]["vllm_serve"]
        assert f"--max-num-seqs 32 --max-num-batched-tokens {mnbt} " in serve["prefill"]
        assert "--max-num-seqs 1024 --max-num-batched-tokens 8192 " in serve["decode"]
        blocks, _ = resolve.num_gpu_blocks(
            None, "llama-3.1-8b", "H100", 0.92, 16, 1, 0, max_num_seqs=32,
            max_num_batched_tokens=mnbt,
        )  # fmt: skip
        assert pre["num_gpu_blocks"] == blocks
        ttft[mnbt] = d["summary"]["ttft_s_p50"]
    # 6 chunks of <= 1,024 tokens against one: 5 more steps, each with the
    # linear preset's fixed 5.75 ms, on an otherwise light load.
    assert ttft[1024] - ttft[16384] > 5 * 0.005, ttft


def test_pd_output_matches_what_was_simulated(capsys):
    """Hostile-pass findings: a P/D run with drafts names them (text line and
    --json ``speculation``); --num-gpu-blocks, simulated on both pools, is in
    both vllm serve commands; a prefill budget given alone takes vLLM's
    default rule for max_num_seqs (at most the budget) instead of being
    refused over a value the user never gave."""
    spec = '{"method":"ngram","num_speculative_tokens":3}'
    args = (*BASE, *L8_H100, "--latency", "roofline", "--prefill-replicas", "1",
            "--speculative-config", spec, "--spec-acceptance", "0.7",
            "--num-gpu-blocks", "5000")  # fmt: skip
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "speculative decoding: ngram, 3 draft tokens per step" in out
    code, out, err = run_cli(capsys, *args, "--json")
    d = json.loads(out)["disaggregated"]
    assert d["speculation"]["num_speculative_tokens"] == 3
    assert d["speculation"]["per_position_acceptance"][0] == pytest.approx(0.7)
    for cmd in d["vllm_serve"].values():
        assert "--num-gpu-blocks-override 5000" in cmd and "--speculative-config" in cmd
    code, out, err = run_cli(
        capsys, *BASE, *L8_H100, "--prefill-replicas", "1", "--json",
        "--prefill-max-num-batched-tokens", "512",
    )  # fmt: skip
    assert code == 0, err
    pre = json.loads(out)["disaggregated"]["prefill"]
    assert (pre["max_num_seqs"], pre["max_num_batched_tokens"]) == (512, 512)


def test_a_prefill_gpu_takes_vllms_defaults_for_itself(capsys):
    """A prefill instance on a GPU with less memory starts with vLLM's batch
    defaults for that GPU (``EngineArgs.get_batch_defaults``: 256 and 2,048
    on an L40S, not the H100's 1,024 and 8,192), said in the settings block;
    a shared flag given acts on both pools; a --prefill-* flag on the
    prefill pool only."""
    args = (*BASE, *L8_H100, "--latency", "roofline", "--prefill-replicas", "1",
            "--prefill-gpu", "L40S")  # fmt: skip

    def pools(*more: str) -> tuple[tuple, tuple]:
        code, out, err = run_cli(capsys, *args, *more, "--json")
        assert code == 0, err
        d = json.loads(out)["disaggregated"]
        return tuple((d[p]["max_num_seqs"], d[p]["max_num_batched_tokens"])
                     for p in ("prefill", "decode"))  # fmt: skip

    assert pools() == ((256, 2048), (1024, 8192))
    assert pools("--max-num-seqs", "512") == ((512, 2048), (512, 8192))
    assert pools("--prefill-max-num-batched-tokens", "4096") == ((256, 4096), (1024, 8192))
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "prefill replicas' own settings not given (source):" in out
    assert "max_num_seqs 256 (vLLM default on the prefill GPU L40S: EngineArgs." in out


def test_prefill_options_are_named_and_gpu_aliases_share_a_step_time(capsys):
    """The prefill TP's error names --prefill-tensor-parallel-size; a
    --prefill-gpu spelled another way for the same GPU reuses the decode
    pool's step-time model."""
    code, _, err = run_cli(
        capsys, "run", *L8_H100, "--latency", "roofline", "--num-requests", "5",
        "--prefill-replicas", "1", "--prefill-tensor-parallel-size", "3",
    )  # fmt: skip
    assert code == 2 and "--prefill-tensor-parallel-size 3 does not divide" in err, err
    assert "--tensor-parallel-size 3" not in err
    code, _, err = run_cli(
        capsys, "run", *L8_H100, "--num-requests", "40", "--num-gpu-blocks", "2000",
        "--prefill-replicas", "1", "--max-steps", "5",
    )  # fmt: skip
    assert code == 0 and "plan: warning: decode replicas: max_num_seqs 1024 exceeds" in err, err


def test_measured_step_times_are_named_once_per_gpu(capsys):
    """The prefill pool on the decode pool's GPU and TP shares its step-time
    model, so its source prints once; at another TP on that GPU the data is
    the same and prints once too; on another GPU, once each (hostile-pass
    findings: the same line twice)."""
    pytest.importorskip("aiconfigurator_core")
    run = (*BASE, "--model", "llama-3.1-8b", "--gpu", "H100", "--latency", "measured",
           "--prefill-replicas", "1")  # fmt: skip
    code, _, err = run_cli(capsys, *run)
    assert code == 0 and err.count("measured step times:") == 1, err
    code, out, err = run_cli(capsys, *run, "--prefill-gpu", "h100")  # the same GPU
    assert code == 0 and err.count("measured step times:") == 1, err
    assert "prefill: 1 replica (H100, TP 1," in out  # the preset's name, not as typed
    code, out, err = run_cli(capsys, *run, "--prefill-tensor-parallel-size", "2")  # same data
    assert code == 0 and err.count("measured step times:") == 1, err
    assert "measured llama-3.1-8b on 2 x H100" in out  # the pool's own line names its TP
    code, _, err = run_cli(capsys, *run, "--prefill-gpu", "A100-80GB")
    assert code == 0 and err.count("measured step times:") == 2, err
    assert "h100" in err and "a100" in err


@pytest.mark.parametrize("router", ["round_robin", "llm_d"])
@pytest.mark.parametrize("replicas,caching", [(1, False), (3, False), (4, True)])
def test_no_prefill_pool_is_the_colocated_fleet_bit_for_bit(replicas, caching, router):
    """D decode replicas and no prefill pool: every request's first token and
    finish (ns), outputs and preemptions equal the fleet of D colocated
    replicas behind the same router (``kernel/fleet.py``)."""
    wl = _workload()
    cfg = dataclasses.replace(CFG, enable_prefix_caching=caching, num_gpu_blocks=900)
    res = simulate_disaggregated(wl, Pool(replicas, cfg, LAT), router=PDRouter(router, 3))
    colocated = dataclasses.replace(cfg, replicas=replicas, router=router, router_seed=3)
    fleet = simulate([colocated], wl, LAT)
    st = fleet.state.req
    got = res.requests
    for col, ns in (("first_token_s", st.first_ns[0]), ("finish_s", st.finish_ns[0])):
        want = np.where(ns >= 0, ns / 1e9, np.nan)
        assert np.array_equal(got[col].to_numpy(), want, equal_nan=True), col
    assert np.array_equal(got["output_tokens"].to_numpy(), st.nout[0])
    assert np.array_equal(got["preemptions"].to_numpy(), st.npre[0])
    assert fleet.state.out.counters[0, 5] == sum(  # O_PREEMPTIONS
        int(r.state.out.counters[0, 5]) for r in res.decode if r is not None
    )


def test_disaggregated_requests_go_prefill_transfer_decode_in_order():
    wl = _workload()
    kv = KVTransfer.from_link(131_072, 50.0, 20.0)
    res = simulate_disaggregated(
        wl, Pool(2, CFG, LAT), Pool(1, CFG, LAT), kv, PDRouter("round_robin")
    )
    df = res.requests
    assert df["done"].all()
    # each stage after the one before it
    assert (df["prefill_end_s"] > df["arrival_s"]).all()
    assert (df["decode_arrival_s"] == df["prefill_end_s"]).all()
    assert (df["kv_load_start_s"] >= df["decode_arrival_s"] - 1e-12).all()
    assert np.allclose(df["kv_landed_s"] - df["kv_load_start_s"], df["transfer_s"])
    assert (df["first_token_s"] > df["kv_landed_s"]).all()
    # the load carries the whole prompt (no local prefix cache here)
    want = [kv.duration_ns(int(p)) / 1e9 for p in df["prompt_tokens"]]
    assert np.allclose(df["transfer_s"], want)
    # round robin over 2 decode replicas in the order prefills end
    order = np.argsort(df["prefill_end_s"].to_numpy(), kind="stable")
    assert df["decode_replica"].to_numpy()[order].tolist() == [i % 2 for i in range(len(df))]
    s = summarize_disaggregated(res, SLO(ttft_s=2.0, tpot_s=0.05))
    assert s["completed"] == len(df) and not s["overloaded"] and s["meets_slo"]


def test_a_slow_link_shows_in_ttft_not_in_tpot():
    wl = _workload(100, 4.0)
    fast = KVTransfer.from_link(131_072, 50.0, 20.0)
    slow = KVTransfer.from_link(131_072, 0.5, 20.0)  # 100x slower
    a = summarize_disaggregated(
        simulate_disaggregated(wl, Pool(1, CFG, LAT), Pool(1, CFG, LAT), fast)
    )
    b = summarize_disaggregated(
        simulate_disaggregated(wl, Pool(1, CFG, LAT), Pool(1, CFG, LAT), slow)
    )
    assert b["transfer_s_mean"] > 50 * a["transfer_s_mean"]
    assert b["ttft_s_p50"] > a["ttft_s_p50"] + 0.1
    assert b["tpot_s_p50"] == pytest.approx(a["tpot_s_p50"], rel=0.2)


def test_an_undersized_prefill_pool_is_called_overloaded():
    wl = _workload(300, 40.0)
    kv = KVTransfer.from_link(131_072, 50.0, 20.0)
    slow = LinearLatency(alpha=(0, 0, 0), beta=(5000.0, 200.0, 6.0))  # 10x slower prefill
    res = simulate_disaggregated(wl, Pool(4, CFG, LAT), Pool(1, CFG, slow), kv)
    s = summarize_disaggregated(res, SLO(ttft_s=2.0))
    assert s["prefill_overloaded"] and s["overloaded"] and not s["meets_slo"]


def test_pool_and_pipeline_inputs_are_checked():
    with pytest.raises(ValueError, match="at least 1 replica"):
        Pool(0, CFG, LAT)
    with pytest.raises(ValueError, match="kv_transfer"):
        simulate_disaggregated(_workload(10), Pool(1, CFG, LAT), Pool(1, CFG, LAT))


def test_async_scheduling_runs_on_both_pools():
    """vLLM's default, async scheduling, on both pools: every request ends,
    and the decode side's steps are no fewer than with sync (async schedules
    the next step before the previous one's output lands)."""
    wl = _workload(200)
    kv = KVTransfer.from_link(131_072, 50.0, 20.0)
    asyn = dataclasses.replace(CFG, async_scheduling=True)
    res = simulate_disaggregated(wl, Pool(2, asyn, LAT), Pool(1, asyn, LAT), kv)
    sync = simulate_disaggregated(wl, Pool(2, CFG, LAT), Pool(1, CFG, LAT), kv)
    for r in (res, sync):
        s = summarize_disaggregated(r, SLO())
        assert s["completed"] == 200, s
    steps = [sum(int(d.state.out.counters[0, S.O_STEPS]) for d in r.decode) for r in (res, sync)]
    assert steps[0] >= steps[1] > 0


BASE = ("run", "--num-requests", "60", "--rate", "5", "--no-async-scheduling")
L8_H100 = ("--model", "llama-3.1-8b", "--gpu", "H100")


def test_plan_run_prefill_replicas_prints_both_pools(capsys):
    code, out, err = run_cli(
        capsys, *BASE, "--num-requests", "400", "--model", "llama-3.1-8b", "--gpu", "H100",
        "--prefill-replicas", "1", "--replicas", "2", "--ttft-slo", "2", "--tpot-slo", "0.05",
    )  # fmt: skip
    assert code == 0, err
    assert "prefill: 1 replica" in out and "decode: 2 replica" in out
    assert "vllm serve (decode)" in out and "NixlConnector" in out
    assert "SLO TTFT p99 <= 2 s, TPOT p99 <= 50 ms: met" in out
    assert "prefill pool: keeps up" in out and "decode pool: keeps up" in out
    assert "prefill KV held until the decode side read it: peak " in out
    assert "holds agree with the decode pool's reads (2 prefill runs)" in out
    code, out, err = run_cli(
        capsys, *BASE, "--model", "llama-3.1-8b", "--gpu", "H100", "--prefill-replicas", "1",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert d["disaggregated"]["prefill"]["replicas"] == 1
    assert d["summary"]["completed"] == 60


@pytest.mark.parametrize(
    "args,msg",
    [
        (("--prefill-replicas", "1", "--kv-transfer-bandwidth", "0"), "--kv-transfer-bandwidth"),
        (("--prefill-replicas", "1", "--kv-transfer-bandwidth", "-5"), "--kv-transfer-bandwidth"),
        (("--prefill-replicas", "1", "--kv-transfer-latency", "-1"), "--kv-transfer-latency"),
        (
            (
                "--prefill-replicas",
                "-1",
            ),
            "--prefill-replicas",
        ),
        (("--kv-transfer-bandwidth", "10"), "needs --prefill-replicas"),
        (("--prefill-replicas", "1", "--trace", "x.parquet"), "--trace"),
        (("--prefill-replicas", "1", "--router", "random"), "routes with llm_d or round_robin"),
        (("--prefill-replicas", "1", "--requests-out", "r.txt"), ".csv or .parquet"),
        (("--prefill-replicas", "1", "--kv-transfer-bandwidth", "0.0001"), "too slow"),
        (("--prefill-replicas", "1", "--prefill-tensor-parallel-size", "2"), "needs --model"),
        ((*L8_H100, "--prefill-replicas", "1", "--prefill-gpu", ""), "--prefill-gpu: unknown"),
        ((*L8_H100, "--prefill-replicas", "1", "--prefill-gpu", "X9"), "--prefill-gpu: unknown"),
        (
            (
                "--model",
                "llama-3.1-70b",
                "--gpu",
                "H100",
                "--tensor-parallel-size",
                "4",
                "--prefill-replicas",
                "1",
                "--prefill-gpu",
                "L4",
                "--prefill-tensor-parallel-size",
                "1",
            ),
            "the prefill replicas: llama-3.1-70b on 1 x L4",
        ),
        ((*L8_H100, "--prefill-replicas", "1", "--prefill-max-num-batched-tokens", "32",
          "--max-num-seqs", "1024"),
         "the prefill replicas: --prefill-max-num-batched-tokens 32 is below --max-num-seqs"),
        ((*L8_H100, "--prefill-replicas", "1", "--horizon", "0.05"), "--horizon 0.05 s ends"),
        ((*L8_H100, "--prefill-replicas", "1", "--preemption-mode", "restart"),
         "not simulated with --preemption-mode restart"),
        ((*L8_H100, "--prefill-replicas", "1", "--adaptive-window", "10"), "an adaptive cap"),
        ((*L8_H100, "--prefill-replicas", "1", "--prefill-max-num-seqs", "900",
          "--prefill-max-num-batched-tokens", "512"),
         "--prefill-max-num-batched-tokens 512 is below --prefill-max-num-seqs 900"),
        ((*L8_H100, "--prefill-replicas", "1", "--prefill-max-num-seqs", "0"),
         "--prefill-max-num-seqs must be"),
        (("--prefill-max-num-seqs", "8"), "--prefill-max-num-seqs needs --prefill-replicas"),
        (("--prefill-max-num-batched-tokens", "8"), "needs --prefill-replicas"),
    ],
)  # fmt: skip
def test_plan_run_prefill_bad_input_is_one_line(capsys, args, msg):
    code, out, err = run_cli(capsys, *BASE, *args)
    assert code == 2 and out == "", (out, err)
    assert msg in err, err
    lines = [x for x in err.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("plan: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    assert "Traceback" not in err
    assert msg in errors[0]


SIZE_SPEC = """
name = "size-disagg"
[workload]
kind = "synthetic"
num_requests = 200
rate = {rate}
[workload.prompt]
kind = "constant"
mean = 2000
[workload.output]
kind = "constant"
mean = 200
[hardware]
model = "llama-3.1-8b"
gpu = "H100"
[latency]
kind = "roofline"
[scheduler]
async_scheduling = false
max_model_len = 8192
[axes]
max_num_seqs = [256]
"""


def test_plan_size_disaggregated_answers_beside_the_aggregated_one(capsys, tmp_path):
    """Both answers, each meeting the target by its own simulation; the
    disaggregated one is the first P + D that does (none smaller was found),
    and --disaggregated without an SLO is refused in one line."""
    spec = tmp_path / "s.toml"
    spec.write_text(SIZE_SPEC.format(rate=8))
    argv = ("size", str(spec), "--gpus", "H100", "--max-replicas", "4", "--disaggregated")
    slo = ("--ttft-slo", "1", "--tpot-slo", "0.02")
    code, out, err = run_cli(capsys, *argv, *slo, "--out", str(tmp_path / "a"), "--json")
    assert code == 0, err
    rep = json.loads(out)
    d = rep["disaggregated"]
    b = d["answer"]
    assert b is not None and b["meets_slo"] and b["ttft_s_p99"] <= 1 and b["tpot_s_p99"] <= 0.02
    assert b["gpus"] == b["prefill_replicas"] + b["decode_replicas"]
    smaller = [t for t in d["tried"] if t["gpus"] < b["gpus"]]
    assert all(not t["meets_slo"] for t in smaller)
    assert d["max_num_seqs"] == rep["answer"]["max_num_seqs"]
    assert "re-sizes the aggregated answer only" in d["sensitivity_text"]
    assert (tmp_path / "a" / "disaggregated.png").stat().st_size > 10_000  # the picture
    code, out, err = run_cli(capsys, *argv, "--out", str(tmp_path / "b"))
    assert code == 2 and "needs an SLO" in err and "Traceback" not in err


@pytest.mark.slow
def test_plan_size_disaggregated_mixes_gpus_across_pools(capsys, tmp_path):
    """With two candidate GPUs each pool may take either: mixed fleets are
    tried, fleets are tried cheapest first and none cheaper than the answer
    meets the target, and the answer gives both roles' vllm serve commands
    (KV connector) and the router."""
    spec = tmp_path / "s.toml"
    spec.write_text(SIZE_SPEC.format(rate=8))
    code, out, err = run_cli(
        capsys, "size", str(spec), "--gpus", "H100,L40S", "--max-replicas", "4",
        "--disaggregated", "--ttft-slo", "1", "--tpot-slo", "0.02", "--out", str(tmp_path / "a"),
        "--json",
    )  # fmt: skip
    assert code == 0, err
    d = json.loads(out)["disaggregated"]
    tried, b = d["tried"], d["answer"]
    assert any(t["prefill_gpu"] != t["gpu"] for t in tried)
    costs = [t["usd_per_hour"] for t in tried]
    assert costs == sorted(costs)
    assert b is not None and b["meets_slo"]
    assert all(not t["meets_slo"] for t in tried if t["usd_per_hour"] < b["usd_per_hour"])
    assert (
        b["gpus"]
        == b["prefill_replicas"] * b["prefill_tensor_parallel_size"]
        + b["decode_replicas"] * b["tensor_parallel_size"]
    )
    assert set(b["vllm_serve"]) == {"prefill", "decode"}
    assert all("--kv-transfer-config" in c for c in b["vllm_serve"].values())
    assert "llm-d's P/D endpoint picker" in b["router"]


def test_fleets_are_ordered_by_cost():
    """``disagg_sizing._fleets``: every P, D >= 1 with P + D <= N for every
    pair of options, cheapest first; with one option that is N = P + D order."""
    from planner.answers.disagg_sizing import Option, _fleets

    one = Option("H100", 1, 3.0, CFG, LAT, 131_072.0)
    two = Option("L40S", 1, 1.0, CFG, LAT, 131_072.0)
    f = _fleets([one], 5)
    assert len(f) == 10 and [x[0] for x in f] == sorted(x[0] for x in f)
    assert [x[3] + x[5] for x in f] == sorted(x[3] + x[5] for x in f)
    g = _fleets([one, two], 4)
    assert len(g) == 4 * 6 and g[0][2:] == (1, 1, 1, 1)  # 1 + 1 of the cheaper GPU first


def test_plan_size_refuses_before_any_work(capsys, tmp_path):
    """The link options without --disaggregated, and a link with no
    bandwidth: one line, exit 2, no output folder made."""
    spec = tmp_path / "s.toml"
    spec.write_text(SIZE_SPEC.format(rate=8))
    base = ("size", str(spec), "--gpus", "H100", "--max-replicas", "2", "--ttft-slo", "1")
    out = tmp_path / "never"
    code, _, err = run_cli(capsys, *base, "--kv-transfer-bandwidth", "10", "--out", str(out))
    assert code == 2 and "--kv-transfer-bandwidth needs --disaggregated" in err
    code, _, err = run_cli(
        capsys, *base, "--disaggregated", "--kv-transfer-bandwidth", "0", "--out", str(out)
    )
    assert code == 2 and "--kv-transfer-bandwidth" in err and "Traceback" not in err
    code, _, err = run_cli(
        capsys, *base, "--disaggregated", "--max-replicas", "1", "--out", str(out)
    )
    assert code == 2 and "--max-replicas >= 2" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, *base, "--prefill-max-num-seqs", "8", "--out", str(out))
    assert code == 2 and "--prefill-max-num-seqs needs --disaggregated" in err, err
    code, _, err = run_cli(
        capsys, *base, "--disaggregated", "--prefill-max-num-batched-tokens", "100",
        "--out", str(out),
    )  # fmt: skip
    assert code == 2 and "--prefill-max-num-batched-tokens 100 is below --max-num-seqs 256" in err
    code, _, err = run_cli(
        capsys, *base, "--disaggregated", "--prefill-max-num-batched-tokens", "600000",
        "--out", str(out),
    )  # fmt: skip
    assert code == 2 and "the prefill replicas on H100 TP 1" in err and "no room" in err, err
    assert "Traceback" not in err
    assert not out.exists()


@pytest.mark.slow
def test_plan_size_disaggregated_prefill_takes_its_own_flags(capsys, tmp_path):
    """--prefill-max-num-seqs/--prefill-max-num-batched-tokens act on every
    prefill pool tried and on the answer's prefill command; the decode pool
    keeps the aggregated answer's settings; the bound says so."""
    spec = tmp_path / "s.toml"
    spec.write_text(SIZE_SPEC.format(rate=8))
    code, out, err = run_cli(
        capsys, "size", str(spec), "--gpus", "H100", "--max-replicas", "3", "--disaggregated",
        "--ttft-slo", "1", "--tpot-slo", "0.02", "--prefill-max-num-seqs", "16",
        "--prefill-max-num-batched-tokens", "4096", "--out", str(tmp_path / "a"), "--json",
    )  # fmt: skip
    assert code == 0, err
    d = json.loads(out)["disaggregated"]
    assert d["prefill_settings"] == {"max_num_seqs": 16, "max_num_batched_tokens": 4096}
    assert "the prefill pool at max_num_seqs 16, max_num_batched_tokens 4,096" in d["bound"]
    b = d["answer"]
    assert b is not None
    assert "--max-num-seqs 16 --max-num-batched-tokens 4096 " in b["vllm_serve"]["prefill"]
    assert "--max-num-seqs 256 " in b["vllm_serve"]["decode"]


def test_a_short_run_gets_no_pool_verdict():
    """A burst too short to judge overload: the pool is not called keeping up
    (nor overloaded), and the SLO is not called met."""
    wl = _workload(12, 50.0)
    kv = KVTransfer.from_link(131_072, 50.0, 20.0)
    s = summarize_disaggregated(
        simulate_disaggregated(wl, Pool(1, CFG, LAT), Pool(1, CFG, LAT), kv), SLO(ttft_s=100.0)
    )
    if s["overload_judged"]:
        pytest.skip("this burst was judged; the rule is exercised elsewhere")
    assert not s["meets_slo"] and any("too short" in m for m in s["slo_misses"])


def test_a_cut_run_says_so_and_fails_on_it(capsys):
    """--max-steps or --horizon ending the run early: the output says so, the
    pool verdicts are the simulated window's, --fail-on takes the outcome
    classes (step_limit here), the SLO is not called met, and requests due
    after the end are in no statistic (no "0 ms" lower bounds)."""
    args = (*BASE, "--num-requests", "200", "--rate", "20", "--prefill-replicas", "1")
    code, out, err = run_cli(capsys, *args, "--max-steps", "300", "--fail-on", "step_limit")
    assert code == 1, err
    assert "cut by --max-steps" in out and "outcome step_limit" in out
    assert "over the simulated window" in out
    code, out, err = run_cli(capsys, *args, "--horizon", "3", "--ttft-slo", "100", "--json")
    assert code == 0, err
    s = json.loads(out)["summary"]
    assert s["cut_by"] == "--horizon" and s["not_arrived"] > 0 and not s["meets_slo"]
    assert "the run was cut by --horizon" in s["slo_misses"]
    assert s["ttft_s_p50"] > 0 and s["tpot_s_p99"] is not None
    code, out, err = run_cli(capsys, *BASE, "--prefill-replicas", "1", "--json")
    s = json.loads(out)["summary"]
    assert code == 0 and s["cut_by"] is None and s["outcome"] in ("ok", "churning"), err


def test_the_front_end_and_one_token_outputs_as_colocated(capsys):
    """Requests cut short or rejected at max_model_len count as SLO misses and
    are reported, as a colocated run counts them; with one-token outputs there
    is no TPOT to miss, so a TPOT objective does not fail on NaN."""
    args = (*BASE, "--num-requests", "20", "--prompt-tokens", "500", "--output-tokens", "100")
    code, out, err = run_cli(
        capsys, *args, "--prefill-replicas", "1", "--max-model-len", "550", "--e2e-slo", "5",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    s = json.loads(out)["summary"]
    assert s["cut"] == 20 and s["rejected"] == 0 and not s["meets_slo"]
    assert s["goodput_rps"] == 0 and any("cuts 20 requests short" in m for m in s["slo_misses"])
    code, out, err = run_cli(
        capsys, *BASE, "--num-requests", "20", "--prompt-tokens", "100", "--output-tokens", "1",
        "--prefill-replicas", "1", "--ttft-slo", "5", "--tpot-slo", "0.01", "--json",
    )  # fmt: skip
    s = json.loads(out)["summary"]
    assert code == 0 and s["meets_slo"] and s["slo_misses"] == [], (err, s["slo_misses"])


def test_a_livelocked_prefill_pool_starves_the_decode_pool(capsys):
    """A prefill pool too small for a prompt livelocks: no request reaches the
    decode pool (it gets no verdict), and the waits are lower bounds that run
    at least to the last arrival (never "0 ms")."""
    code, out, err = run_cli(
        capsys, *BASE, "--num-requests", "20", "--prompt-tokens", "500", "--output-tokens", "50",
        "--prefill-replicas", "1", "--num-gpu-blocks", "20", "--json",
    )  # fmt: skip
    assert code == 0, err
    s = json.loads(out)["summary"]
    assert s["livelocked"] and s["decode_requests"] == 0 and s["decode_outcome"] is None
    assert s["prefill_outcome"] == "livelocked" and s["not_arrived"] == 0
    assert s["ttft_s_p50"] > 0 and s["ttft_s_p50_is_lower_bound"]
    assert s["stuck_request_ids"] == list(range(20))  # every request, none finished
    code, out, err = run_cli(
        capsys, *BASE, "--num-requests", "20", "--prompt-tokens", "500", "--output-tokens", "50",
        "--prefill-replicas", "1", "--num-gpu-blocks", "20",
    )  # fmt: skip
    assert "decode pool: no request reached it" in out and " 0 ms" not in out
    assert "keeps up" not in out
    code, out, err = run_cli(  # one block short, and too few requests to overload it
        capsys, *BASE, *L8_H100, "--num-requests", "5", "--num-gpu-blocks", "1000",
        "--max-model-len", "16000", "--prompt-tokens", "15990", "--output-tokens", "5",
        "--prefill-replicas", "1",
    )  # fmt: skip
    assert code == 0 and "prefill pool: LIVELOCKED (a request it can never finish" in out, out
    assert "keeps up" not in out
    # the stuck requests are named, as a colocated run names them
    assert "LIVELOCKED (a request it can never finish); stuck there (request ids" in out
    assert "): 0, 1, 2," in out


@pytest.mark.slow
def test_plan_size_disaggregated_with_drafts_and_answers_alone(capsys, tmp_path):
    """When no aggregated fleet meets the target but a split does, the split
    is the answer (exit 0); with speculative decoding (n-gram) the split's
    decode side runs the drafts (``pd_spec_*`` goldens) and both roles'
    vllm serve commands carry --speculative-config."""
    spec = tmp_path / "s.toml"
    text = SIZE_SPEC.format(rate=10).replace("mean = 2000", "mean = 1500")
    text = text.replace("mean = 200", "mean = 100")
    text += "[slo]\nttft_slo = 1.0\ntpot_slo = 0.007\n"
    spec.write_text(text.replace("max_num_seqs = [256]", "max_num_seqs = [256]\n"))
    argv = ("size", str(spec), "--gpus", "H100", "--max-replicas", "3", "--disaggregated")
    code, out, err = run_cli(capsys, *argv, "--out", str(tmp_path / "a"), "--json")
    rep = json.loads(out)
    assert code == 0, err
    assert rep["answer"] is None and rep["disaggregated"]["answer"] is not None
    code, out, err = run_cli(capsys, *argv, "--out", str(tmp_path / "c"))
    assert code == 0 and "aggregated answer: none" in out, err
    assert "cheaper at this traffic: disaggregated" in out
    drafts = spec.read_text().replace(
        "[scheduler]",
        "[scheduler]\nenable_prefix_caching = false\nspec_acceptance = 0.8\n"
        'speculative_config = \'{"method": "ngram", "num_speculative_tokens": 3}\'',
    )
    spec.write_text(drafts)
    code, out, err = run_cli(capsys, *argv, "--out", str(tmp_path / "b"), "--json")
    assert code == 0, err
    b = json.loads(out)["disaggregated"]["answer"]
    assert b is not None and b["meets_slo"], b
    assert all("--speculative-config" in c for c in b["vllm_serve"].values())


SWEPT_SPEC = """
name = "swept"
[workload]
kind = "synthetic"
num_requests = 60
rate = 5
prompt = { mean = 1500 }
output = { mean = 50 }
[hardware]
model = "llama-3.1-8b"
gpu = "H100"
[latency]
kind = "roofline"
[scheduler]
async_scheduling = false
enable_prefix_caching = false
max_model_len = 8192
[slo]
ttft_slo = 0.1
tpot_slo = 0.05
[axes]
max_num_seqs = [64]
max_num_batched_tokens = [64, 8192]
"""


def test_plan_size_disaggregated_pools_take_the_answers_swept_settings(capsys, tmp_path):
    """A swept setting other than max_num_seqs: a 64-token budget misses the
    100 ms TTFT, so the aggregated answer runs 8,192, and both pools of the
    split run it too (the first config at max_num_seqs 64 has 64)."""
    spec = tmp_path / "s.toml"
    spec.write_text(SWEPT_SPEC)
    argv = ("size", str(spec), "--gpus", "H100", "--max-replicas", "3", "--disaggregated")
    code, out, err = run_cli(capsys, *argv, "--out", str(tmp_path / "o"), "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["answer"]["max_num_batched_tokens"] == 8192
    for cmd in rep["disaggregated"]["answer"]["vllm_serve"].values():
        assert "--max-num-batched-tokens 8192 " in cmd, cmd


def test_edge_runs_do_not_crash_or_overclaim(capsys, tmp_path):
    """Every request rejected: one report, no traceback; a horizon before the
    first arrival: refused in one line, as colocated; a cut run's throughput
    is over its simulated span (never above the offered rate); a horizon that
    cuts before any request reaches the decode pool is still reported."""
    args = (*BASE, "--rate", "10", "--prompt-tokens", "1000", "--output-tokens", "100")
    code, out, err = run_cli(capsys, *args, "--max-model-len", "500", "--prefill-replicas", "1")
    assert code == 0 and "Traceback" not in err, err
    assert "rejected 60" in out and "the front end rejects 60 requests" in out
    code, out, err = run_cli(capsys, *args, "--prefill-replicas", "1", "--horizon", "0.01")
    assert code == 2 and "ends before the first request arrives" in err, err
    code, out, err = run_cli(
        capsys, *BASE, "--rate", "10", "--prompt-tokens", "1000", "--output-tokens", "1",
        "--prefill-replicas", "1", "--max-steps", "5", "--json",
    )  # fmt: skip
    s = json.loads(out)["summary"]
    assert code == 0 and s["cut_by"] == "--max-steps" and s["throughput_rps"] <= 10, err
    code, out, err = run_cli(
        capsys, *BASE, "--rate", "25", "--prompt-tokens", "3000", "--output-tokens", "200",
        "--prefill-replicas", "1", "--horizon", "0.06", "--json",
    )  # fmt: skip
    s = json.loads(out)["summary"]
    assert code == 0 and s["cut_by"] == "--horizon" and s["decode_requests"] == 0, err


def test_size_without_max_num_seqs_swept_keeps_each_gpus_default(capsys, tmp_path):
    """A spec sweeping only max_num_batched_tokens on two GPUs whose vLLM
    defaults differ: each pool keeps its GPU's own max_num_seqs (no crash),
    and the header names the swept setting; a link option given without
    --disaggregated is named alone."""
    spec = tmp_path / "s.toml"
    spec.write_text(
        SWEPT_SPEC.replace("max_num_seqs = [64]\n", "").replace("[64, 8192]", "[512, 8192]")
    )
    argv = ("size", str(spec), "--gpus", "H100,A100-80GB", "--max-replicas", "3")
    code, out, err = run_cli(capsys, *argv, "--disaggregated", "--out", str(tmp_path / "o"))
    assert code in (0, 1) and "Traceback" not in err, err
    assert "disaggregated (max_num_batched_tokens " in out, out
    code, out, err = run_cli(
        capsys, *argv, "--kv-transfer-bandwidth", "10", "--out", str(tmp_path / "p")
    )
    assert code == 2 and "--kv-transfer-bandwidth needs --disaggregated" in err, err


def test_a_drafters_kv_layer_is_transferred_too():
    """NixlConnector registers every KV cache tensor, an EAGLE drafter's layer
    among them (``GPUModelRunner.initialize_kv_cache``), so a request's KV
    transfer carries 33 layers for Llama-3.1-8B's 32 with EAGLE; n-gram loads
    no drafter."""
    from planner import resolve
    from planner.speculative import EXAMPLE_HEADS, Speculation

    plain = resolve.kv_block_bytes(None, "llama-3.1-8b", 16, 1)
    head = EXAMPLE_HEADS["eagle"]
    eagle = resolve.kv_block_bytes(
        None, "llama-3.1-8b", 16, 1, speculation=Speculation("eagle", 3, (0.7,), draft_model=head)
    )
    ngram = resolve.kv_block_bytes(
        None, "llama-3.1-8b", 16, 1, speculation=Speculation("ngram", 3, (0.7,))
    )
    assert plain == 16 * 2 * 32 * 8 * 128 * 2
    assert eagle == plain * 33 // 32 and ngram == plain


def _held(wl: Workload, after_ns: int) -> Workload:
    """``wl`` with every request's blocks held ``after_ns`` past its arrival
    (a read end, ``Workload.read_end_ns``; before its finish for small ones)."""
    ends = np.round(wl.arrival_s * 1e9).astype(np.int64) + after_ns
    return dataclasses.replace(wl, output_tokens=np.ones_like(wl.output_tokens), read_end_ns=ends)


@pytest.mark.parametrize("caching", [False, True])
def test_a_prefill_fleet_holding_blocks_is_its_replicas_run_alone(caching):
    """A prefill pool of 3 replicas holding blocks for reads (round robin in
    arrival order) equals each replica run alone on its share, request for
    request: the holds live per replica (``kernel/kv_send.py``)."""
    kv = KVTransfer.from_link(131_072, 50.0, 20.0)
    cfg = dataclasses.replace(
        CFG, num_gpu_blocks=300, enable_prefix_caching=caching, kv_transfer=kv
    )
    wl = _held(_workload(120, 30.0), 2_000_000_000)
    fleet = simulate([dataclasses.replace(cfg, replicas=3)], wl, LAT)
    assert fleet.fleet.state.out.counters[:, S.O_SEND_PEAK].min() > 0
    for j in range(3):
        idx = np.arange(j, wl.num_requests, 3)
        part = dataclasses.replace(
            wl,
            arrival_s=wl.arrival_s[idx],
            prompt_tokens=wl.prompt_tokens[idx],
            output_tokens=wl.output_tokens[idx],
            read_end_ns=wl.read_end_ns[idx],
        )
        alone = simulate([cfg], part, LAT).state.req
        assert np.array_equal(fleet.state.req.finish_ns[0, idx], alone.finish_ns[0])
        assert np.array_equal(fleet.state.req.first_ns[0, idx], alone.first_ns[0])


def test_held_blocks_and_remote_requests_need_a_connector():
    wl = _held(_workload(20), 1_000)
    with pytest.raises(ValueError, match="need a config with kv_transfer") as e:
        simulate([CFG], wl, LAT)
    assert "\n" not in str(e.value)
    remote = dataclasses.replace(_workload(20), remote=np.ones(20, dtype=bool))
    with pytest.raises(ValueError, match="need a config with kv_transfer") as e:
        simulate([dataclasses.replace(CFG, replicas=2)], remote, LAT)
    assert "\n" not in str(e.value)


def _backpressure(passes: int | None = None):  # noqa: ANN202
    """A decode pool too small for its traffic behind a prefill pool with
    few blocks: loads wait for decode blocks, so prefills hold theirs."""
    kv = KVTransfer.from_link(131_072, 50.0, 20.0)
    wl = _workload(300, 12.0)
    pre = Pool(1, dataclasses.replace(CFG, num_gpu_blocks=400), LAT)
    dec = Pool(1, dataclasses.replace(CFG, num_gpu_blocks=400), LAT)
    return simulate_disaggregated(wl, dec, pre, kv)


def test_a_slow_decode_pool_fills_the_prefill_pools_kv_cache():
    """Backpressure (module docstring of ``planner.disagg``, step 4): the
    decode pool's loads wait for blocks, the prefill pool holds each
    prefill's blocks until its read ends, and the passes settle where the
    prefill run's holds are exactly the decode run's read ends."""
    from planner import disagg

    res = _backpressure()
    assert res.reads.converged and res.reads.passes > 2
    df = res.requests
    ready = np.round(df["decode_arrival_s"].to_numpy() * 1e9).astype(np.int64)
    kv = KVTransfer.from_link(131_072, 50.0, 20.0)
    order = np.argsort(ready, kind="stable")  # one decode replica: all, as prefills end
    runs = list(zip(res.decode, [order], strict=True))
    want = disagg._read_ends(len(df), ready, runs, kv)
    assert np.array_equal(res.prefill.workload.read_end_ns, want)  # the fixed point
    held = (df["kv_landed_s"] - df["decode_arrival_s"]).to_numpy()
    assert held.max() > 1.0  # reads ended seconds after their prefills
    s = summarize_disaggregated(res)
    assert s["prefill_read_hold_peak_blocks"] > 300
    # Freed at each prefill's end (the first pass alone), the prefills end earlier.
    pre = dataclasses.replace(res.prefill.workload, read_end_ns=None)
    free_at_end = simulate(
        [dataclasses.replace(res.prefill.configs[0], kv_transfer=None)], pre, LAT
    )
    early = free_at_end.state.req.finish_ns[0]
    assert np.all(early <= ready) and np.any(early < ready)


def test_unsettled_holds_are_said_and_fail_the_slo(capsys, monkeypatch):
    from planner import disagg

    monkeypatch.setattr(disagg, "MAX_READ_PASSES", 2)
    res = _backpressure()
    assert not res.reads.converged and res.reads.passes == 2 and res.reads.moved_s > 0
    s = summarize_disaggregated(res, SLO(ttft_s=1e6))
    assert not s["meets_slo"] and disagg.HOLDS_UNSETTLED in s["slo_misses"]


def test_plan_run_names_a_decode_pool_that_holds_the_prefill_pool_back(capsys):
    code, out, err = run_cli(
        capsys, *BASE, *L8_H100, "--prefill-replicas", "1", "--replicas", "1", "--rate", "8",
        "--num-requests", "400", "--num-gpu-blocks", "1200", "--max-model-len", "4096",
    )  # fmt: skip
    assert code == 0, err
    assert "the decode pool sets its pace; add decode replicas" in out, out
    assert "prefill KV held until the decode side read it: peak at most 1,199 of 1,200" in out


def test_plan_run_names_a_slow_link_that_holds_the_prefill_pool_back(capsys):
    """Holds that last because the transfers are slow, not because the decode
    pool has no blocks: the advice is the link or more prefill replicas."""
    code, out, err = run_cli(
        capsys, *BASE, *L8_H100, "--prefill-replicas", "1", "--replicas", "4", "--rate", "10",
        "--num-requests", "300", "--prompt-tokens", "2000", "--output-tokens", "100",
        "--kv-transfer-bandwidth", "0.1", "--num-gpu-blocks", "1500", "--ttft-slo", "5",
    )  # fmt: skip
    assert code == 0, err
    assert "waited for the transfers, KV load p99" in out, out
    assert "the prefill pool is overloaded (held back by the KV transfers' time)" in out
    assert "the decode pool sets its pace" not in out


def test_held_blocks_are_counted_once_when_prompts_share_them():
    """With prefix caching a block shared by held requests is one block: the
    peak stays within the pool (and is marked a bound)."""
    kv = KVTransfer.from_link(131_072, 0.05, 20.0)  # slow: long holds
    n = 120
    wl = Workload(
        np.linspace(0, 10, n),
        np.full(n, 2000, dtype=np.int32),
        np.full(n, 50, dtype=np.int32),
        name="shared",
        prefix_group=np.zeros(n, dtype=np.int32),
        prefix_len=np.full(n, 1900, dtype=np.int32),
    )
    cfg = dataclasses.replace(CFG, num_gpu_blocks=600, enable_prefix_caching=True)
    res = simulate_disaggregated(wl, Pool(1, cfg, LAT), Pool(1, cfg, LAT), kv)
    s = summarize_disaggregated(res)
    refs = int(res.prefill.state.out.counters[0, S.O_SEND_BLOCKS])  # 0 at the end
    assert refs == 0
    assert 0 < s["prefill_read_hold_peak_blocks"] <= s["prefill_blocks"]
    assert s["prefill_read_hold_peak_is_bound"]


PD_SIZE_SPEC = """
name = "pd-held-back"
[workload]
kind = "synthetic"
num_requests = 200
arrival = "constant"
rate = 12.0
prompt = { kind = "constant", mean = 2000 }
output = { kind = "constant", mean = 200 }
[hardware]
model = "llama-3.1-8b"
gpu = "H100"
gpu_memory_utilization = 0.3
[latency]
kind = "roofline"
[scheduler]
block_size = 16
max_model_len = 8192
[slo]
ttft_slo = 5.0
tpot_slo = 0.012
[axes]
max_num_seqs = [64, 256]
"""


def test_plan_size_keeps_splits_whose_prefill_pool_reads_held_back(capsys, tmp_path):
    """A prefill pool that fell behind only because its blocks waited for
    slow transfers does not rule out its replica count with more decode
    replicas: 2 prefill + 1 decode falls behind, 2 + 2 meets the SLOs."""
    spec = tmp_path / "pd.toml"
    spec.write_text(PD_SIZE_SPEC)
    code, out, err = run_cli(
        capsys, "size", str(spec), "--gpus", "H100", "--max-replicas", "5", "--disaggregated",
        "--kv-transfer-bandwidth", "0.1", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, err
    assert "2 prefill x H100 at TP 1 + 2 decode x H100 at TP 1" in out, out


def test_plan_size_dry_run_counts_the_split_search(capsys, tmp_path):
    spec = tmp_path / "pd.toml"
    spec.write_text(PD_SIZE_SPEC)
    args = ("size", str(spec), "--gpus", "H100", "--max-replicas", "5", "--dry-run")
    code, out, err = run_cli(capsys, *args, "--disaggregated")
    assert code == 0, err
    # P + D <= 5 on one candidate: 4 + 3 + 2 + 1 splits (answers.disagg_sizing._fleets)
    assert "then --disaggregated: at most 10 P:D fleets (P + D <= 5" in out, out
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and "--disaggregated" not in out


def _decode_share(res, j: int, wl: Workload, kv: KVTransfer, cfg: SchedulerConfig):
    """Replica j's requests of a disaggregated run, run alone: a lone decode
    server fed them at their decode arrivals."""
    df = res.requests
    idx = np.flatnonzero(df["decode_replica"].to_numpy() == j)
    idx = idx[np.argsort(df["decode_arrival_s"].to_numpy()[idx], kind="stable")]
    remote = df["prefill_replica"].to_numpy()[idx] >= 0
    sub = Workload(
        df["decode_arrival_s"].to_numpy()[idx],
        wl.prompt_tokens[idx],
        wl.output_tokens[idx],
        remote=remote,
    )
    lone = simulate([dataclasses.replace(cfg, kv_transfer=kv)], sub, LAT)
    return idx, lone


@pytest.mark.parametrize("seed", [0, 5])
def test_llm_d_decode_replicas_are_lone_servers_on_their_share(seed):
    """llm-d picks the decode replica at each arrival and the request enters
    it when its prefill ends (``api.simulate``'s ``route_s``): whatever the
    router chose, each decode replica serves its share exactly as a lone
    decode server fed those requests at those times, step for step, and
    the per-replica runs split from the fleet say so request by request."""
    wl = _workload(300, rate=40.0, seed=seed)
    cfg = dataclasses.replace(CFG, num_gpu_blocks=700, max_num_seqs=24)
    kv = KVTransfer.from_link(131_072, 50.0, 20.0)
    res = simulate_disaggregated(wl, Pool(3, cfg, LAT), Pool(2, cfg, LAT), kv, PDRouter(seed=seed))
    reps = res.requests["decode_replica"].to_numpy()
    assert set(reps.tolist()) == {0, 1, 2}
    for j in range(3):
        idx, lone = _decode_share(res, j, wl, kv, cfg)
        run = res.decode[j]
        for name in ("first_ns", "finish_ns", "nout", "npre"):
            assert np.array_equal(getattr(run.state.req, name)[0], getattr(lone.state.req, name)[0])
        assert np.array_equal(run.state.remote.xfer_ns[0], lone.state.remote.xfer_ns[0])
        assert run.metrics()["completed"].iloc[0] == lone.metrics()["completed"].iloc[0]


def test_the_router_sends_in_the_order_of_its_send_times():
    """Round robin over 2 replicas hands out replicas in send order. Entries
    at 0, 1 and 2 s; request 2 is sent at 0.5 s, before request 1 (1 s):
    sent in the order 0, 2, 1 they go to replicas 0, 1, 0, where sending at
    the entries gives 0, 1, 0 to requests 0, 1, 2. A state-reading router
    reads the replicas as of each send (the fleet advances them to it)."""
    wl = Workload(
        np.array([0.0, 1.0, 2.0]), np.array([500, 100, 100], np.int32), np.full(3, 5, np.int32)
    )
    fleet = dataclasses.replace(CFG, replicas=2)
    from planner.replicas import owners

    for route, want in ((np.array([0.0, 1.0, 0.5]), [0, 0, 1]), (None, [0, 1, 0])):
        res = simulate([fleet], wl, LAT, route_s=route)
        assert res.fleet is not None
        lay = res.fleet.layout
        assert (owners(res.fleet.state, lay)[0] - lay.starts[0]).tolist() == want
        assert (res.state.req.finish_ns[0] > np.round(wl.arrival_s * 1e9)).all()


def test_short_prompts_skip_the_prefill_pool_under_llm_d():
    """llm-d's prefix-based-pd-decider (nonCachedTokens 16): a prompt under 16
    tokens goes to the decode replica alone, which prefills it; vLLM's proxy
    sends every request through a prefill replica."""
    n = 40
    prompt = np.where(np.arange(n) % 2 == 0, 8, 400).astype(np.int32)
    wl = Workload(np.linspace(0, 4, n), prompt, np.full(n, 20, np.int32), name="short")
    kv = KVTransfer.from_link(131_072, 50.0, 20.0)
    pools = (Pool(2, CFG, LAT), Pool(2, CFG, LAT), kv)
    df = simulate_disaggregated(wl, *pools).requests
    short = prompt < 16
    assert df["done"].all()
    assert (df["prefill_replica"].to_numpy()[short] == -1).all()
    assert df["prefill_end_s"][short].isna().all() and df["transfer_s"][short].isna().all()
    assert np.allclose(df["decode_arrival_s"][short].to_numpy(), wl.arrival_s[short], atol=1e-9)
    assert (df["prefill_replica"].to_numpy()[~short] >= 0).all()
    assert df["transfer_s"][~short].notna().all()
    rr = simulate_disaggregated(wl, *pools, PDRouter("round_robin")).requests
    assert (rr["prefill_replica"] >= 0).all()


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"name": "random"}, "--router"),
        ({"name": "prefix_affinity"}, "--router"),
        ({"seed": -1}, "--router-seed"),
    ],
)
def test_bad_pd_routers_are_refused(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        PDRouter(**kwargs)


def test_route_times_are_checked():
    wl = _workload(20)
    fleet = dataclasses.replace(CFG, replicas=2, router="llm_d")
    for route, where in (
        (wl.arrival_s + 1.0, "after its arrival"),
        (wl.arrival_s[:5], "expected 20"),
        (np.full(20, np.nan), "expected 20"),
    ):
        with pytest.raises(ValueError, match=where):
            simulate([fleet], wl, LAT, route_s=route)
    with pytest.raises(ValueError, match="open-loop fleet"):
        simulate([CFG], wl, LAT, route_s=wl.arrival_s)


def test_route_times_at_the_arrivals_change_nothing():
    wl = _workload(200, rate=30.0)
    fleet = dataclasses.replace(CFG, num_gpu_blocks=600, replicas=3, router="llm_d")
    a = simulate([fleet], wl, LAT)
    b = simulate([fleet], wl, LAT, route_s=wl.arrival_s)
    for name in ("first_ns", "finish_ns", "nout", "npre"):
        assert np.array_equal(getattr(a.state.req, name), getattr(b.state.req, name))


def test_the_cli_routes_pd_with_llm_d_unless_told(capsys):
    # One replica per pool: the option's plumbing, not the routing (tested above),
    # so no replicas' kernel with vLLM's defaults compiles for it.
    args = ("run", "--num-requests", "30", *L8_H100, "--prefill-replicas", "1")
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "router: llm-d's P/D endpoint picker" in out and "ties by --router-seed 0" in out
    code, out, err = run_cli(capsys, *args, "--router", "round_robin")
    assert code == 0, err
    assert "router: vLLM's disaggregated proxy" in out
    code, out, err = run_cli(capsys, *args, "--router", "least_kv")
    assert code == 2 and "--router" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(capsys, *args, "--router", "round_robin", "--router-seed", "4")
    assert code == 2 and "--router-seed needs --router llm_d" in err


def test_decode_kv_held_while_loads_wait_is_reported(capsys):
    """Three 900-token prompts reach one decode replica over a 2 s link: the
    three loads are in flight together, each holding its prompt's 57 blocks
    (16-token blocks) from the load's start to its admission, so the peak is
    171 blocks; `plan run` prints the line."""
    wl = Workload(np.array([0.0, 0.001, 0.002]), np.full(3, 900), np.full(3, 10), name="w")
    cfg = SchedulerConfig(num_gpu_blocks=4000, max_num_seqs=8)
    kv = KVTransfer(latency_ns=2_000_000_000, ps_per_token=1_000)
    res = simulate_disaggregated(wl, Pool(1, cfg, LAT), Pool(3, cfg, LAT), kv)
    s = summarize_disaggregated(res)
    assert s["decode_kv_hold_peak_blocks"] == 3 * 57
    assert s["decode_blocks"] == 4000 and not s["decode_kv_hold_peak_is_bound"]
    args = ("run", "--num-requests", "20", *L8_H100, "--prefill-replicas", "1")
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "decode KV held by requests while their KV loads or waits to be scheduled" in out
    code, out, err = run_cli(capsys, *args, "--json")
    summary = json.loads(out)["summary"]
    assert 0 < summary["decode_kv_hold_peak_blocks"] <= summary["decode_blocks"]
