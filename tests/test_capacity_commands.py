"""``plan check`` and ``plan safe-limit`` (scenarios S1, S3, S4)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from helpers import STEP_LATENCY, run_cli, uniform
from planner.answers.safelimit import find_safe_limits, qualifies, recommend, recommendation
from planner.api import simulate
from planner.capacity import (
    analytic_safe_max_num_seqs,
    livelock_gap,
    max_concurrency,
    max_safe_model_len,
    min_gpu_memory_utilization,
    min_safe_num_gpu_blocks,
    vllm_starts,
)
from planner.config import SchedulerConfig
from planner.latency.step_time import LinearLatency
from planner.models import hardware
from planner.slo import SLO, seconds_text
from planner.workload.traces import s1_exact

ROOT = Path(__file__).parents[1]
S1_CSV = str(ROOT / "planner" / "data" / "s1_seed7.csv")


def test_s3_pool_gap_and_startup_rules():
    assert not vllm_starts(64, 1024, 16, count_null=True)
    assert vllm_starts(64, 1024, 16, count_null=False)
    assert livelock_gap(64, 16, 1024) == (1010, 1024)
    assert vllm_starts(65, 1024, 16, True) and livelock_gap(65, 16, 1024) is None
    assert not vllm_starts(57, 900, 16, True) and vllm_starts(58, 900, 16, True)


@pytest.mark.parametrize("bs", [1, 16, 32])
def test_the_fix_is_the_exact_boundary_of_safe(bs):
    """min_safe_num_gpu_blocks and max_safe_model_len are exactly where the pool
    turns safe (vLLM >= 0.29 starts and there is no gap), for every small case."""

    def safe(n: int, mml: int) -> bool:
        return vllm_starts(n, mml, bs, True) and livelock_gap(n, bs, mml) is None

    for mml in range(1, 200):
        need = min_safe_num_gpu_blocks(mml, bs)
        assert safe(need, mml) and not safe(need - 1, mml)
    for n in range(2, 40):
        top = max_safe_model_len(n, bs)
        assert safe(n, top) and not safe(n, top + 1)
    assert min_safe_num_gpu_blocks(1024, 16) == 65 and max_safe_model_len(64, 16) == 1008


def test_utilization_fix_is_the_smallest_that_sizes_enough_blocks():
    m, g = hardware.model("llama-3.1-8b"), hardware.gpu("H100")
    need = min_safe_num_gpu_blocks(131072, 16)
    at = {"max_num_batched_tokens": 8192, "max_num_seqs": 1024}
    u = min_gpu_memory_utilization(need, "llama-3.1-8b", "H100", 16, **at)
    assert hardware.num_gpu_blocks(m, g, u) >= need > hardware.num_gpu_blocks(m, g, u - 0.001)
    assert min_gpu_memory_utilization(10**7, "llama-3.1-8b", "H100", 16, **at) is None


def test_plan_check_states_the_fix_and_the_versions(capsys):
    code, out, _ = run_cli(capsys, "check", "--num-gpu-blocks", "64", "--max-model-len", "1024")
    assert code == 1
    flat = " ".join(out.split())
    assert "--num-gpu-blocks 65 or more" in flat and "--max-model-len 1,008 or less" in flat
    assert "vLLM <= 0.28.0" in flat and "vLLM >= 0.29.0" in flat and "older" not in flat
    code, out, _ = run_cli(
        capsys, "check", "--num-gpu-blocks", "64", "--max-model-len", "1024", "--json"
    )
    o = json.loads(out)
    assert (o["min_safe_num_gpu_blocks"], o["max_safe_max_model_len"]) == (65, 1008)
    assert o["min_safe_gpu_memory_utilization"] is None
    args = ["check", "--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "131072"]
    code, out, _ = run_cli(capsys, *args, "--gpu-memory-utilization", "0.3", "--json")
    o = json.loads(out)
    assert code == 1 and o["min_safe_num_gpu_blocks"] == 8193
    u = o["min_safe_gpu_memory_utilization"]
    # sized at vLLM 0.33's defaults on an H100 (1,024 sequences, 8,192 tokens), which
    # plan check takes when they are not given (planner.models.vllm_defaults)
    at = {"max_num_batched_tokens": 8192, "max_num_seqs": 1024}
    assert u == min_gpu_memory_utilization(8193, "llama-3.1-8b", "H100", 16, **at)
    code, out, _ = run_cli(capsys, *args, "--gpu-memory-utilization", str(u), "--json")
    assert code == 0 and json.loads(out)["verdict"] == "safe"
    code, out, _ = run_cli(capsys, *args, "--gpu-memory-utilization", "0.3")
    assert f"--gpu-memory-utilization {u:.3f} or more" in " ".join(out.split())


@pytest.mark.parametrize("size", [1008, 1009, 1010, 1017, 1024])
def test_gap_agrees_with_the_kernel(size):
    """Sizes inside the gap livelock in simulation; sizes below it complete."""
    cfg = SchedulerConfig(
        num_gpu_blocks=64, block_size=16, max_num_batched_tokens=256, max_model_len=1024
    )
    m = simulate([cfg], uniform(1, 1000, size - 1000), STEP_LATENCY).metrics().iloc[0]
    lo, hi = livelock_gap(64, 16, 1024)
    assert (m.outcome == "livelocked") == (lo <= size <= hi)
    assert (m.completed == 1) == (size < lo)


def test_s4_concurrency_vllm_style_and_true():
    assert max_concurrency(1952, 16, 20000, vllm_style=True) == pytest.approx(1.5616)
    assert max_concurrency(1952, 16, 20000, vllm_style=False) == pytest.approx(1951 / 1250)
    assert round(max_concurrency(1952, 16, 20000, True), 2) == 1.56
    # The S4 report at mml 29,000: 1,478 blocks hold 23,648 tokens < 29,000.
    assert not vllm_starts(1478, 29000, 16, True)


def test_plan_check_exit_codes_and_text(capsys):
    code, out, _ = run_cli(capsys, "check", "--num-gpu-blocks", "64", "--max-model-len", "1024")
    assert code == 1
    assert "REFUSES" in out and "1,010-1,024 tokens" in out and "1,009-1,024" in out
    code, out, _ = run_cli(capsys, "check", "--num-gpu-blocks", "65", "--max-model-len", "1024")
    assert code == 0 and "SAFE" in out and "gap: none" in out
    code, out, _ = run_cli(
        capsys, "check", "--num-gpu-blocks", "1952", "--max-model-len", "20000", "--json"
    )
    o = json.loads(out)
    assert code == 0 and round(o["max_concurrency_vllm_log"], 2) == 1.56
    assert o["max_concurrency_true"] < o["max_concurrency_vllm_log"]


def test_plan_check_workload_share(capsys, tmp_path):
    f = tmp_path / "w.csv"
    f.write_text(
        "arrival_time_s,prompt_tokens,output_tokens\n0,1000,8\n1,1000,24\n2,900,200\n3,100,10\n"
    )
    code, out, _ = run_cli(
        capsys, "check", "--num-gpu-blocks", "64", "--max-model-len", "1024",
        "--trace-file", str(f), "--json",
    )  # fmt: skip
    o = json.loads(out)
    # 1000+24 and 900+200 (capped at 1024) are in the gap; 1008 and 110 are not.
    assert code == 1 and o["workload_in_gap"] == 2 and o["workload_in_gap_share"] == 0.5


@pytest.mark.parametrize(
    "args,needle",
    [
        (["check", "--num-gpu-blocks", "1", "--max-model-len", "1024"], "--num-gpu-blocks"),
        (["check", "--num-gpu-blocks", "0"], "--num-gpu-blocks"),
        (["check", "--num-gpu-blocks", "64", "--max-model-len", "0"], "--max-model-len"),
        (["check", "--num-gpu-blocks", "64", "--trace-file", "/no/such.csv"], "no such file"),
        (["safe-limit", "--num-gpu-blocks", "7463", "--percentile", "101"], "--percentile"),
        (["safe-limit", "--num-gpu-blocks", "7463", "--percentile", "-1"], "--percentile"),
        (["safe-limit", "--num-gpu-blocks", "1"], "--num-gpu-blocks"),
        (["safe-limit", "--num-gpu-blocks", "64", "--trace-file", "/no/such.csv"], "no such"),
        (["check"], "--num-gpu-blocks"),
        (["check", "--num-gpu-blocks", "0", "--max-model-len", "1024"], "--num-gpu-blocks"),
        (["check", "--num-gpu-blocks", "64", "--tokens-per-request", "0"], "--tokens-per-request"),
    ],
)
def test_bad_inputs_exit_2_one_line(capsys, args, needle):
    code, _, err = run_cli(capsys, *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_s1_analytic_limit_from_the_means():
    wl = s1_exact()
    mean = float(wl.prompt_tokens.mean() + wl.output_tokens.mean())
    assert analytic_safe_max_num_seqs(7463, 16, mean) == 7462 // int(np.ceil(mean / 16)) == 32


@pytest.fixture(scope="module")
def s1_limits():
    cfg = SchedulerConfig(num_gpu_blocks=7463, max_model_len=4096, horizon_s=120.0)
    return find_safe_limits(s1_exact(), cfg, LinearLatency(), slo=SLO(ttft_s=60.0, tpot_s=0.05))


def test_s1_exact_safe_limits(s1_limits):
    s = s1_limits
    assert s.analytic == 32
    assert 32 <= s.simulated <= 63
    zero = s.table[s.table.max_num_seqs <= s.simulated]
    assert (zero.preemptions == 0).all()
    above = s.table[s.table.max_num_seqs == s.simulated + 1]
    assert len(above) == 1 and above.preemptions.iloc[0] > 0
    assert 48 <= s.throughput_optimal <= 80
    best = s.row(s.throughput_optimal)
    assert best.completed >= 0.98 * s.table.completed.max()
    assert best.completed > s.row(s.simulated).completed
    assert s.goodput_optimal is not None


def test_recommendation_is_one_answer_that_keeps_up_and_meets_the_slos():
    """Issue 13 item 2 (this replaces the "Safe: ... Fastest: ..." pair, which
    headlined two answers): one max_num_seqs, with its reason and its own p99s,
    and it keeps up and meets the SLOs. S1 at a third of its rate: at its own
    10 req/s its 300 requests arrive within one median E2E, too short to judge
    overload (``metrics.OVERLOAD_MIN_LIFETIMES``)."""
    cfg = SchedulerConfig(num_gpu_blocks=60000, max_model_len=4096, horizon_s=150.0)
    wl = s1_exact()
    wl = dataclasses.replace(wl, arrival_s=wl.arrival_s * 3)
    s = find_safe_limits(wl, cfg, LinearLatency(), slo=SLO(ttft_s=2.0, tpot_s=0.05))
    rec = recommend(s)
    assert rec.max_num_seqs is not None and rec.text.count("Recommended: max_num_seqs") == 1
    assert "Safe:" not in rec.text and "Fastest:" not in rec.text
    row = s.row(rec.max_num_seqs)
    assert not row.overloaded and row.overload_judged and row.meets_slo and row.completed > 0
    assert f"TTFT p99 {seconds_text(row.ttft_s_p99)}" in rec.text
    assert f"TPOT p99 {seconds_text(row.tpot_s_p99)}" in rec.text and "E2E p99" in rec.text
    assert "None" not in rec.text
    # every smaller value that qualifies gives less goodput than 99% of the best
    ok = s.table[qualifies(s)]
    assert row.goodput_rps >= 0.99 * ok.goodput_rps.max()


def test_no_recommendation_when_only_slos_fail():
    cfg = SchedulerConfig(num_gpu_blocks=60000, max_model_len=4096, horizon_s=120.0)
    s = find_safe_limits(s1_exact(), cfg, LinearLatency(), slo=SLO(ttft_s=0.001))
    rec = recommend(s)
    assert rec.max_num_seqs is None and "Recommended" not in rec.text
    assert "Nothing recommended: no max_num_seqs from 1 to 300 keeps up and meets the SLOs" in (
        rec.text
    )
    assert "Closest: max_num_seqs" in rec.text
    # a 1 ms TTFT is below one prefill step: no load is low enough
    assert s.closest is not None and s.closest_rate_limit == "below_search_min"
    assert "less load alone does not help" in rec.text


def test_nothing_qualifies_says_how_far_the_load_must_fall(s1_limits):
    """S1 at 10 req/s on 7,463 blocks: the closest value's highest sustainable
    rate (plan max-rate, run to completion) says by how much the load must fall,
    and that rate holds at 0.9x and fails at 1.1x."""
    s = s1_limits
    r = s.closest_rate_scale
    assert s.closest is not None and 0 < r < 1
    assert f"the load must fall by {(1 - r) * 100:.0f}%" in recommendation(s)
    wl = s1_exact()
    cfg = SchedulerConfig(num_gpu_blocks=7463, max_num_seqs=s.closest)
    for f, ok in ((0.9, True), (1.1, False)):
        m = simulate([cfg], wl, arrival_s=wl.arrival_s[None, :] / (r * f)).metrics(s.slo)
        assert (bool(m.meets_slo[0]) and not m.overloaded[0]) is ok


def test_json_is_standard_and_tiny_pools_say_so(capsys):
    code, out, _ = run_cli(capsys, "run", "--num-requests", "3", "--json")
    assert code == 0 and "Infinity" not in out and json.loads(out)["horizon_s"] is None
    # A pool vLLM refuses to start on has no KV-safe limit to give: refused
    # (before 2026-12-07 it answered "No max_num_seqs completes").
    code, out, err = run_cli(
        capsys, "safe-limit", "--num-gpu-blocks", "2", "--trace-file", S1_CSV,
        "--horizon", "20", "--json",
    )  # fmt: skip
    assert code == 2 and out == "" and "refuses to start on this pool: 2 blocks" in err


def test_safe_limit_json_and_run_warning(capsys):
    code, out, _ = run_cli(
        capsys, "safe-limit", "--num-gpu-blocks", "7463", "--trace-file", S1_CSV,
        "--horizon", "120", "--json",
    )  # fmt: skip
    o = json.loads(out)
    assert code == 0 and o["analytic"] == 32 and 32 <= o["simulated"] <= 63
    code, _, err = run_cli(
        capsys, "run", "--requests-csv", S1_CSV, "--horizon", "5", "--max-num-seqs", "256"
    )
    assert code == 0 and err.count("KV-safe limit 32") == 1
    # A pool that cannot hold one mean request: no limit to exceed (hostile-pass
    # finding: "max_num_seqs 8 exceeds the KV-safe limit 0").
    code, _, err = run_cli(
        capsys, "run", "--requests-csv", S1_CSV, "--horizon", "5", "--max-num-seqs", "8",
        "--num-gpu-blocks", "200",
    )  # fmt: skip
    assert code == 0 and "limit 0" not in err
    assert "no max_num_seqs is KV-safe" in err and "does not fit in 200 blocks even alone" in err


def test_safe_limit_takes_the_latency_options_its_errors_name(capsys):
    """safe-limit used to say "pass --beta-coeffs" without accepting it."""
    base = ["safe-limit", "--model", "llama-3.1-70b", "--gpu", "H100",
            "--tensor-parallel-size", "2", "--num-requests", "20", "--horizon", "30",
            "--max-num-batched-tokens", "2048", "--max-model-len", "8192"]  # fmt: skip
    code, _, err = run_cli(capsys, *base, "--latency", "linear")  # no preset for the pair
    assert code == 2 and "--beta-coeffs" in err
    rps = []
    for beta in ("6000,20,6", "12000,40,12"):
        code, out, _ = run_cli(capsys, *base, "--beta-coeffs", beta, "--json")
        assert code == 0
        rps.append(max(r["throughput_rps"] for r in json.loads(out)["evaluated"]))
    assert rps[0] > rps[1]  # slower steps, fewer completions per second: the option took effect
    code, out, _ = run_cli(capsys, *base, "--latency", "roofline", "--mfu", "0.4", "--json")
    assert code == 0 and json.loads(out)["analytic"] >= 1


@pytest.mark.parametrize(
    "args,flag",
    [
        (["check", "--num-gpu-blocks", "64", "--gpu-memory-utilization", "0.5"], "--gpu-memory"),
        (["check", "--num-gpu-blocks", "64", "--tensor-parallel-size", "2"], "--tensor-parallel"),
        (["safe-limit", "--num-gpu-blocks", "64", "--mfu", "0.4"], "--mfu"),
        (["safe-limit", "--num-gpu-blocks", "64", "--rate-scale", "2"], "--rate-scale"),
        (["safe-limit", "--num-gpu-blocks", "64", "--trace-file", S1_CSV, "--rate", "3"], "--rate"),
    ],
)
def test_capacity_commands_refuse_options_without_effect(capsys, args, flag):
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and flag in err


def test_weights_that_do_not_fit_say_which_tensor_parallel_size_fits(capsys):
    code, _, err = run_cli(capsys, "check", "--model", "llama-3.1-70b", "--gpu", "H100")
    assert code == 2 and "a tensor-parallel size of 2 leaves room" in err
    args = ["check", "--model", "llama-3.1-70b", "--gpu", "H100", "--tensor-parallel-size", "2"]
    assert run_cli(capsys, *args, "--max-model-len", "1024")[0] == 0


@pytest.mark.parametrize("cmd", ["check", "safe-limit", "run"])
def test_help_shows_the_bracketed_defaults(capsys, cmd):
    """Rich reads "[default: ...]" as markup and drops it unless escaped."""
    code, out, _ = run_cli(capsys, cmd, "--help")
    flat = " ".join(out.replace("│", " ").split())
    assert code == 0 and "[default:" in flat
    if cmd != "check":
        assert "[default: preset or S1 seed]" in flat


def test_recommendation_says_when_nothing_keeps_up(s1_limits):
    """S1 offers 10 req/s to 7,463 blocks: every max_num_seqs is overloaded, so
    nothing is recommended (no "Safe" claim), and the text says by how much the
    load must fall (issue 13; this used to recommend the KV-safe value and add
    that it is overloaded)."""
    text = recommendation(s1_limits)
    assert s1_limits.table.overloaded.all()
    assert "Recommended" not in text and "Safe" not in text
    t = s1_limits.table
    frac = t.served_rps.max() / t.offered_rps.iloc[0]
    assert "no max_num_seqs from 1 to 300 keeps up with the offered load" in text
    assert f"load would have to fall by about {(1 - frac) * 100:.0f}%" in text
    assert f"capacity grow about {1 / frac:.2f}x" in text


def test_a_search_limit_is_printed_as_a_bound(capsys):
    """On 100,000 blocks no max_num_seqs up to S1's 300 requests preempts: the
    simulation-verified limit is at least 300, which is where the search stops."""
    args = ["safe-limit", "--num-gpu-blocks", "100000", "--trace-file", S1_CSV, "--horizon", "60"]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    flat = " ".join(out.replace("│", " ").split())
    assert "simulation-verified ≥ 300 every value up to the search limit" in flat
    assert "None" not in out
    code, out, _ = run_cli(capsys, *args, "--json")
    o = json.loads(out)
    assert o["simulated"] == 300 and o["simulated_is_lower_bound"] and o["search_limit"] == 300


@pytest.mark.slow
def test_70b_example_claims_nothing_while_overloaded(capsys):
    """Issue 13's example: it printed "Safe: max_num_seqs 363 (0 preemptions,
    9.883 req/s ...)" with 11.06 req/s offered and no word of overload."""
    code, out, err = run_cli(
        capsys, "safe-limit", "--model", "llama-3.1-70b", "--gpu", "H100",
        "--tensor-parallel-size", "4", "--max-model-len", "32768", "--trace-file",
        "planner/data/azure-llm-2023/AzureLLMInferenceTrace_conv.csv", "--rate-scale", "2",
        "--latency", "roofline",
        # the example's server (the planner's defaults then), not vLLM 0.33's
        "--max-num-batched-tokens", "2048", "--gpu-memory-utilization", "0.9",
        "--no-enable-prefix-caching", "--no-async-scheduling",
    )  # fmt: skip
    assert code == 0, err
    flat = " ".join(out.replace("│", " ").split())
    assert "Safe" not in flat and "Recommended" not in flat
    assert "every one is overloaded" in flat and "capacity grow about" in flat
    assert "overloaded" in flat.split("simulation-verified")[1].split("throughput-optimal")[0]
    # docs/capacity-checks.md quotes this run's figures: the page and the code agree
    page = " ".join((ROOT / "docs" / "capacity-checks.md").read_text().split())
    figures = ("7.844 req/s", "max_num_seqs 354", "about 29%", "1.41x", "0.692x", "31%", "1.45x")
    for figure in figures:
        assert figure in flat and figure in page, figure


def test_plan_check_on_the_issue_hybrid(capsys):
    """Issue 16, item 3: Qwen3.5-27B (16 full + 48 Gated DeltaNet layers) on the
    logged 1,487-block pool at max_model_len 32,768. Prefix caching off: blocks
    of 784 tokens, 42 + 3 blocks per request, 33.04x, and the 290,864 tokens the
    issue's log gives (num_blocks // 4 groups x 784); with it on (vLLM's default)
    and FlashInfer's GDN prefill, the same bytes hold 1,401 blocks of 832 tokens
    and a request holds 40 + 3 x 3 of them: 28.59x."""
    args = ["check", "--model", "qwen3.5-27b", "--max-model-len", "32768"]
    code, out, _ = run_cli(capsys, *args, "--num-gpu-blocks", "1487", "--no-enable-prefix-caching")
    text = " ".join(out.split())
    assert code == 0 and "verdict: STARTS" in text
    assert "vLLM raises the block to 784 tokens (prefix caching off" in text
    assert "blocks per request at max_model_len 32,768" in text and ": 45;" in text
    assert "Maximum concurrency (vLLM 0.33 log): 33.04x" in text
    assert "num_blocks // groups x block = 290,864" in text
    assert (
        "block 832 tokens, 1,401 blocks, 49 blocks per request, Maximum concurrency 28.59x" in text
    )
    code, out, _ = run_cli(
        capsys, *args, "--num-gpu-blocks", "1487", "--enable-prefix-caching",
        "--gdn-prefill-backend", "triton", "--json",
    )  # fmt: skip
    o = json.loads(out)
    assert o["kv_mamba_cache_mode"] == "align" and o["kv_block_size"] == 784
    assert o["kv_blocks_per_request"] == 42 + 3 * 2
    assert o["kv_max_concurrency"] == 1487 / 48
    assert o["kv_other_mode"]["max_concurrency"] == 1487 / 45


def test_plan_check_on_a_mamba2_hybrid(capsys):
    """Nemotron-H-8B (24 Mamba2 + 4 attention + 24 MLP-only layers): blocks of
    1,040 tokens (test_kv_cache's arithmetic); at max_model_len 8,192 a request
    holds 8 attention blocks + 1 per Mamba2 group (6 groups of 4) with prefix
    caching off, + 3 per group with it on: 1,000 blocks give 1,000 / 14 and
    1,000 / 26."""
    args = ["check", "--model", "nemotron-h-8b", "--max-model-len", "8192"]
    code, out, _ = run_cli(capsys, *args, "--num-gpu-blocks", "1000", "--no-enable-prefix-caching")
    text = " ".join(out.split())
    assert code == 0 and "verdict: STARTS" in text
    assert "Mamba2 state 4,255,744 B per request and layer" in text
    assert "vLLM raises the block to 1,040 tokens (prefix caching off" in text
    assert "GDN prefill" not in text
    code, out, _ = run_cli(capsys, *args, "--num-gpu-blocks", "1000", "--enable-prefix-caching",
                           "--json")  # fmt: skip
    o = json.loads(out)
    assert o["kv_mamba_cache_mode"] == "align" and o["kv_block_size"] == 1040
    assert o["kv_blocks_per_request"] == 8 + 6 * 3
    assert o["kv_max_concurrency"] == 1000 / 26
    assert o["kv_other_mode"]["max_concurrency"] == 1000 / 14


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "llama-3.1-8b", "--num-gpu-blocks", "100", "--enable-prefix-caching"],
         "only linear-attention"),
        (["--num-gpu-blocks", "100", "--gdn-prefill-backend", "triton"],
         "--gdn-prefill-backend needs --model"),
        (["--model", "qwen3.5-27b", "--num-gpu-blocks", "100", "--async-scheduling"],
         "no effect"),
        (["--model", "nemotron-h-8b", "--num-gpu-blocks", "100", "--gdn-prefill-backend",
          "flashinfer"], "Mamba2 layers"),
        (["--model", "nemotron-h-8b", "--num-gpu-blocks", "100", "--tensor-parallel-size",
          "16"], "8 Mamba2 groups"),
    ],
)  # fmt: skip
def test_hybrid_options_without_effect_are_refused(capsys, args, needle):
    code, _, err = run_cli(capsys, "check", *args)
    assert code == 2 and needle in err and err.count("\n") == 1


def test_simulator_refuses_linear_attention_hybrids_under_prefix_caching(capsys):
    """vLLM's default for a Mamba hybrid (prefix caching on: mamba_cache_mode
    align) is not simulated: one line with the fix (tests/test_mamba_run.py
    runs the fixed command)."""
    code, _, err = run_cli(
        capsys, "run", "--model", "qwen3.5-27b", "--gpu", "H200", "--num-requests", "2",
        "--latency", "roofline",
    )  # fmt: skip
    assert code == 2 and "--no-enable-prefix-caching" in err and err.count("\n") == 1


def test_simulator_refuses_mamba2_hybrids_elsewhere_without_naming_mlp_layers(capsys):
    code, _, err = run_cli(
        capsys, "max-rate", "--model", "nemotron-h-8b", "--gpu", "H100", "--num-requests", "2",
        "--latency", "roofline", "--max-num-seqs", "64",
    )  # fmt: skip
    assert code == 2 and "Mamba" in err and "mlp" not in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "given_flags,named",
    [
        (["--enable-prefix-caching"], "--enable-prefix-caching needs"),
        (["--no-enable-prefix-caching"], "--no-enable-prefix-caching needs"),
        (
            ["--enable-prefix-caching", "--gdn-prefill-backend", "triton"],
            "--enable-prefix-caching and --gdn-prefill-backend need",
        ),
    ],
)
def test_check_names_only_the_hybrid_options_given(capsys, given_flags, named):
    """Without --model plan check refuses the hybrid-sizing options naming only
    those the user gave, as spelled (tryout finding: it named
    --gdn-prefill-backend for --enable-prefix-caching alone)."""
    code, _, err = run_cli(capsys, "check", "--num-gpu-blocks", "7463", *given_flags)
    assert code == 2
    assert err.startswith(f"plan: error: {named} --model in plan check"), err


def _check_traffic(capsys, *flags: str) -> tuple[int, dict]:
    from planner.workload.traces import MOONCAKE_CONV

    code, out, err = run_cli(
        capsys, "check", "--trace-file", str(MOONCAKE_CONV), "--trace-duration", "120",
        "--max-model-len", "131072", "--num-gpu-blocks", "12000", "--ttft-slo", "2", "--json",
        *flags,
    )  # fmt: skip
    assert code in (0, 1), err
    return code, json.loads(out)["traffic"]


@pytest.mark.slow
def test_check_simulates_traffic_with_caching_and_async_as_given(capsys):
    """With an SLO plan check simulates the trace, so --enable-prefix-caching
    and --async-scheduling take effect there (tryout finding: both were refused
    as having no effect, and a caching server got the plain server's verdict)."""
    _, plain = _check_traffic(capsys)
    _, cached = _check_traffic(capsys, "--enable-prefix-caching")
    _, both = _check_traffic(capsys, "--enable-prefix-caching", "--async-scheduling")
    assert cached["ttft_s_p99"] < plain["ttft_s_p99"]  # Mooncake's shared prefixes hit
    assert both["ttft_s_p99"] != cached["ttft_s_p99"]
    # With --model, too (the hybrid rule refused it on a full-attention model).
    _check_traffic(capsys, "--model", "llama-3.1-8b", "--gpu", "H100", "--enable-prefix-caching")
    # Without an SLO nothing is simulated: still refused, in one line.
    code, _, err = run_cli(
        capsys, "check", "--model", "llama-3.1-8b", "--num-gpu-blocks", "7463",
        "--enable-prefix-caching",
    )  # fmt: skip
    assert code == 2 and "without an SLO" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "check", "--num-gpu-blocks", "7463", "--async-scheduling")
    assert code == 2 and "or an SLO" in err and len(err.strip().splitlines()) == 1


def test_a_hybrid_with_more_seqs_than_mamba_blocks_does_not_start(capsys):
    """Issue 32, item 4: vLLM refuses max_num_seqs above the Mamba cache blocks
    (``CompilationConfig.resolve_cudagraph_mode_and_sizes``; logged as
    "max_num_seqs (1024) exceeds available Mamba cache blocks (939)"): plan
    check exits 1 and names the largest max_num_seqs that starts; at that
    value it starts; on a model without state layers the option stays inert."""
    import json

    args = ("check", "--model", "qwen3.5-27b", "--num-gpu-blocks", "365",
            "--no-enable-prefix-caching")  # fmt: skip
    code, out, err = run_cli(capsys, *args, "--max-num-seqs", "1024")
    assert code == 1, err
    assert "exceeds available Mamba cache blocks (365)" in out and "--max-num-seqs 365" in out
    code, out, _ = run_cli(capsys, *args, "--max-num-seqs", "1024", "--json")
    o = json.loads(out)
    assert (o["mamba_max_num_seqs"], o["mamba_starts"], o["verdict"]) == (365, False, "unsafe")
    assert o["kv_other_mode"]["starts"] is False  # 343 blocks with caching on: also refused
    code, out, _ = run_cli(capsys, *args, "--max-num-seqs", "365", "--json")
    o = json.loads(out)
    assert code == 0 and o["mamba_starts"] and o["verdict"] == "starts"
    assert o["kv_other_mode"]["starts"] is False  # 365 > the 343 blocks of the caching pool
    code, _, err = run_cli(
        capsys, "check", "--model", "llama-3.1-8b", "--num-gpu-blocks", "365",
        "--max-num-seqs", "1024",
    )  # fmt: skip
    assert code == 2 and "--max-num-seqs" in err and err.count("\n") == 1


def test_a_burst_is_never_called_safe(capsys):
    """S1's 300 requests at its own rate arrive within one median E2E: on
    60,000 blocks they meet a loose SLO without a queue, but that says nothing
    about the rate sustained, so check says NOT SHOWN SAFE (exit 1) and
    safe-limit recommends nothing and says why; at 0.4x the same is SAFE."""
    base = ["--trace-file", "planner/data/s1_seed7.csv", "--num-gpu-blocks", "60000"]
    slo = ["--ttft-slo", "2", "--tpot-slo", "0.05"]
    code, out, err = run_cli(capsys, "check", *base, *slo, "--json")
    o = json.loads(out)
    assert code == 1 and o["verdict"] == "not_judged", err
    assert o["traffic"]["meets_slo"] and not o["traffic"]["keeps_up"]
    assert o["traffic"]["overload_judged"] is False
    code, out, err = run_cli(capsys, "check", *base, *slo)
    assert "verdict: NOT SHOWN SAFE" in out and "SAFE -" not in out.replace("SHOWN SAFE -", "")
    code, out, err = run_cli(capsys, "safe-limit", *base, *slo)
    flat = " ".join(out.split())
    assert code == 0, err
    assert "Nothing recommended: whether any max_num_seqs" in flat and "is not judged" in flat
    code, out, err = run_cli(capsys, "check", *base, *slo, "--rate-scale", "0.4", "--json")
    assert code == 0 and json.loads(out)["verdict"] == "safe", err


def test_a_horizon_that_cuts_requests_short_does_not_make_a_burst_judged(capsys):
    """Unfinished requests' lifetimes are unknown, not their wait so far: S1
    cut at 20 s (nothing completed) is still a burst, never SAFE."""
    args = ["check", "--trace-file", "planner/data/s1_seed7.csv", "--num-gpu-blocks", "60000",
            "--ttft-slo", "2", "--horizon", "20", "--json"]  # fmt: skip
    code, out, err = run_cli(capsys, *args)
    o = json.loads(out)
    assert code == 1 and o["verdict"] != "safe" and not o["traffic"]["keeps_up"], err


def test_a_started_rate_near_the_offered_one_is_no_estimate(capsys):
    """355 requests at 2.95 req/s: every max_num_seqs is overloaded (the
    in-system rule), yet nearly every request starts, and safe-limit said
    the load 'would have to fall by about 0%' (found after that rule
    landed). It says the started rate bounds nothing, and gives max-rate's."""
    args = ("safe-limit", "--num-requests", "355", "--rate", "2.95", "--num-gpu-blocks", "7463")
    code, out, err = run_cli(capsys, *args, "--json")
    data = json.loads(out)
    assert "fall by about 0%" not in data["recommendation"]
    assert "the rate started bounds nothing" in data["recommendation"]
    assert 0.8 < data["load_fraction_served"] < 0.95  # max-rate's, not started/offered


def test_run_says_vllm_would_not_start_on_the_pool(capsys):
    """A pool below vLLM 0.33's start-up minimum (cdiv(max_model_len, bs) + 1
    blocks) is simulated, as the livelock scenarios need, but the run says
    vLLM would refuse it; at the minimum it says nothing of the kind."""
    base = ("run", "--num-requests", "3", "--max-model-len", "1024", "--json")
    code, _, err = run_cli(capsys, *base, "--num-gpu-blocks", "64")
    assert code == 0 and "vLLM 0.33 refuses to start on this pool: 64 blocks" in err, err
    assert "needs 65 with the null block" in err
    code, _, err = run_cli(capsys, *base, "--num-gpu-blocks", "65")
    assert code == 0 and "refuses to start" not in err, err
