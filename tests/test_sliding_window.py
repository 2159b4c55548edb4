"""Sliding-window attention (issue 16, item 3): blocks outside the window are
freed step by step (vLLM 0.33's ``SlidingWindowManager``), the whole-sequence
gate is capped, and the CLI runs all-sliding models. The goldens recorded from
vLLM itself are in tests/test_conformance.py; these are hand-worked cases."""

from __future__ import annotations

import json

import pytest

from helpers import (
    STEP_LATENCY,
    kernel_trace_rows,
    reference_trace_rows,
    run_both,
    run_cli,
    uniform,
)
from planner.api import simulate
from planner.capacity import analytic_safe_max_num_seqs, cdiv
from planner.config import BLIS_IMPLIED, SchedulerConfig
from planner.kernel import state as S


def _cfg(**kw: object) -> SchedulerConfig:
    base = dict(num_gpu_blocks=40, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048)
    return SchedulerConfig(**{**base, **kw, "max_model_len": 256, "max_steps": 10_000})


def test_one_request_holds_the_window_plus_a_partial_block():
    """One request, prompt 20, window 8, blocks of 4. Decode step k (k >= 1)
    schedules token 20 + k - 1 with 20 + k - 1 tokens computed: vLLM frees the
    blocks wholly before token (computed - window + 1) = 12 + k, i.e.
    (12 + k) // 4 of them, and the table covers cdiv(20 + k, 4) blocks, so the
    pool holds cdiv(20 + k, 4) - (12 + k) // 4 blocks (2 or 3) instead of
    cdiv(20 + k, 4). Both engines' per-step free count agrees with that."""
    wl = uniform(1, 20, 12)
    cfgs = [_cfg(sliding_window=8), _cfg()]
    traced, _, engines = run_both(cfgs, wl, STEP_LATENCY)
    usable = 39
    for c, window in enumerate((8, 0)):
        rows = kernel_trace_rows(traced, c)
        assert rows == reference_trace_rows(engines[c])
        free = [r[S.T_FREE] for r in rows]
        assert free[0] == usable - cdiv(20, 4)  # the prompt: nothing is computed yet
        for k in range(1, 11):  # it finishes (and frees) at step 11
            table = cdiv(20 + k, 4)
            skipped = (20 + k - 1 - window + 1) // 4 if window else 0
            assert free[k] == usable - (table - skipped), (window, k)


def test_window_frees_the_pool_for_more_requests_than_full_attention():
    """8 requests of 40 + 200 tokens on 60 blocks of 16: full attention needs
    cdiv(240, 16) = 15 blocks each at the end (3 fit without preemption);
    a 32-token window holds at most 3 blocks each, so all 8 run with none
    preempted."""
    wl = uniform(8, 40, 200)
    full = SchedulerConfig(num_gpu_blocks=60, max_model_len=512, max_num_seqs=8)
    windowed = SchedulerConfig(
        num_gpu_blocks=60, max_model_len=512, max_num_seqs=8, sliding_window=32
    )
    res = simulate([full, windowed], wl, STEP_LATENCY)
    out = res.state.out.counters
    assert out[0, S.O_PREEMPTIONS] > 0
    assert out[1, S.O_PREEMPTIONS] == 0
    assert out[1, S.O_FINISHED] == 8
    # The analytic limit reads the same bound: 59 // min(15, cap) vs 59 // 15.
    cap = windowed.sliding_window_cap
    assert cap == cdiv(min(32 - 1 + 2048, 512), 16) + 1  # the gate's cap (max_model_len binds)
    assert analytic_safe_max_num_seqs(60, 16, 240, True, cap) == 59 // 15
    small = SchedulerConfig(num_gpu_blocks=60, max_model_len=512, max_num_batched_tokens=64,
                            sliding_window=32)  # fmt: skip
    assert small.sliding_window_cap == cdiv(32 - 1 + 64, 16) + 1
    assert analytic_safe_max_num_seqs(60, 16, 240, True, small.sliding_window_cap) == 59 // 7


def test_gate_cap_follows_max_in_flight_tokens():
    """``SlidingWindowSpec.max_admission_blocks_per_request``: window - 1 plus
    one batch in flight (two with async scheduling), capped at max_model_len."""
    sync = SchedulerConfig(max_num_batched_tokens=128, sliding_window=64, block_size=16)
    asyn = SchedulerConfig(
        max_num_batched_tokens=128, sliding_window=64, block_size=16, async_scheduling=True
    )
    assert sync.sliding_window_cap == cdiv(63 + 128, 16) + 1 == 13
    assert asyn.sliding_window_cap == cdiv(63 + 256, 16) + 1 == 21
    assert SchedulerConfig().sliding_window_cap == 0


def test_gate_admits_a_long_prompt_that_full_attention_refuses():
    """A 600-token prompt on 20 usable blocks of 16: full attention's gate asks
    for cdiv(600, 16) = 38 blocks and refuses it forever (a livelock); a
    64-token window with 64-token chunks asks for at most
    cdiv(63 + 64, 16) + 1 = 9, and the request finishes."""
    wl = uniform(1, 600, 5)
    kw = dict(num_gpu_blocks=21, max_model_len=1024, max_num_batched_tokens=64, max_num_seqs=1)
    res = simulate(
        [SchedulerConfig(**kw), SchedulerConfig(**kw, sliding_window=64)], wl, STEP_LATENCY
    )
    out = res.state.out.counters
    assert out[0, S.O_LIVELOCKED] == 1 and out[0, S.O_FINISHED] == 0
    assert out[1, S.O_LIVELOCKED] == 0 and out[1, S.O_FINISHED] == 1


@pytest.mark.parametrize(
    ("extra", "what"),
    [
        ({"preemption_mode": "swap"}, "--preemption-mode swap"),
        ({"stop_bound": "max_servable"}, "--stop-bound max_servable"),
    ],
)
def test_config_refuses_what_is_not_simulated(extra, what):
    with pytest.raises(ValueError, match=f"not simulated with {what}$"):
        SchedulerConfig(sliding_window=64, **extra)


def test_run_simulates_an_all_sliding_model(capsys):
    args = ["run", "--model", "starcoder2-3b", "--gpu", "H100", "--latency", "roofline"]
    code, out, _ = run_cli(capsys, *args, "--num-requests", "20", "--json")
    assert code == 0
    o = json.loads(out)
    assert o["sliding_window"] == 4096 and o["outcome"] == "ok"  # config.json's window
    code, out, _ = run_cli(capsys, *args, "--num-requests", "2")
    assert code == 0 and "sliding window of 4,096 tokens" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "starcoder2-3b", "--sliding-window", "100"], "contradicts --model"),
        (
            [
                "--model",
                "llama-4-scout",
                "--tensor-parallel-size",
                "8",
                "--no-disable-hybrid-kv-cache-manager",
            ],
            "the simulator runs full-attention, sliding-window and",
        ),  # fmt: skip
        (["--sliding-window", "64", "--compat", "blis"], "not simulated with --compat blis"),
        (
            ["--sliding-window", "64", "--preemption-mode", "swap", "--cpu-swap-blocks", "99"],
            "not simulated with",
        ),
    ],
)
def test_run_refuses_in_one_line(capsys, args, message):
    hw = ["--gpu", "H100", "--latency", "roofline"] if "--model" in args else []
    code, _, err = run_cli(capsys, "run", "--num-requests", "2", *args, *hw)
    assert code == 2 and message in err and err.count("\n") == 1


def test_safe_limit_counts_a_sliding_window(capsys):
    """safe-limit on a sliding-window model: a request longer than the window
    holds at most the window's blocks (vLLM's admission cap), so on the same
    pool its analytic limit is above full attention's (the same command
    without the model)."""
    base = ("safe-limit", "--num-gpu-blocks", "20000", "--beta-coeffs", "5000,20,7",
            "--num-requests", "4", "--length-dist", "constant", "--prompt-tokens", "2000",
            "--output-tokens", "8000", "--max-model-len", "16384", "--json")  # fmt: skip
    limits = {}
    for model in ((), ("--model", "starcoder2-3b")):
        code, out, err = run_cli(capsys, *base, *model)
        assert code == 0, err
        limits[model] = json.loads(out)["analytic"]
    assert limits[()] == 19999 // 625  # 10,000 tokens in one full-attention table
    assert limits[("--model", "starcoder2-3b")] > limits[()], limits


SWEEP = """
name = "w"
horizon_s = 5.0

[workload]
kind = "synthetic"
num_requests = 20
prompt = { kind = "constant", mean = 300 }
output = { kind = "constant", mean = 100 }

[scheduler]
max_model_len = 1024
num_gpu_blocks = 200

[axes]
max_num_seqs = [4, 16]
"""


def test_sweep_takes_the_window_from_the_model_or_an_axis(tmp_path):
    from planner.sweep.spec import SpecError, load_spec

    def spec(text: str):
        path = tmp_path / "s.toml"
        path.write_text(text)
        return load_spec(path)

    hw = '\n[hardware]\nmodel = "starcoder2-3b"\ngpu = "H100"\n\n[latency]\nkind = "roofline"\n'
    assert {c.sliding_window for c in spec(SWEEP + hw).configs} == {4096}
    axis = SWEEP + "sliding_window = [0, 64]\n"
    assert sorted({c.sliding_window for c in spec(axis).configs}) == [0, 64]
    with pytest.raises(SpecError, match="contradicts hardware.model starcoder2-3b"):
        spec(axis + hw).configs  # noqa: B018
    gemma = {
        (c.sliding_window, c.full_attention_groups, c.sliding_window_groups)
        for c in spec(SWEEP + hw.replace("starcoder2-3b", "gemma-3-27b")).configs
    }
    assert gemma == {(1024, 1, 6)}  # plan check's "6 groups (52 layers), full: 1 group"
    # Llama 4's chunked layers: vLLM 0.33's default (hybrid KV cache manager off)
    # stores them as full attention, so the rows run full attention
    chunked = hw.replace("starcoder2-3b", "llama-4-scout").replace(
        'gpu = "H100"', 'gpu = "H100"\ntensor_parallel_size = 8'
    )
    rows = {(c.sliding_window, c.kv_groups) for c in spec(SWEEP + chunked).configs}
    assert rows == {(0, 1)}


def test_hybrid_holds_full_tables_and_windowed_ones_in_one_pool():
    """The one-request case of the first test with 1 full-attention and 2
    sliding-window KV cache groups: each group has its own table of
    cdiv(20 + k, 4) entries; the sliding ones hold (12 + k) // 4 null blocks
    each, so the pool holds 3 x table - 2 x skipped blocks."""
    wl = uniform(1, 20, 12)
    kw = dict(sliding_window=8, full_attention_groups=1, sliding_window_groups=2)
    cfg = _cfg(**kw, num_gpu_blocks=80)
    traced, _, engines = run_both([cfg], wl, STEP_LATENCY)
    rows = kernel_trace_rows(traced, 0)
    assert rows == reference_trace_rows(engines[0])
    free = [r[S.T_FREE] for r in rows]
    assert free[0] == 79 - 3 * cdiv(20, 4)
    for k in range(1, 11):
        assert free[k] == 79 - (3 * cdiv(20 + k, 4) - 2 * ((12 + k) // 4)), k


def test_hybrid_gate_sums_the_groups():
    """A 600-token prompt with 64-token chunks, 1 full + 1 sliding group
    (window 64): the gate asks cdiv(600, 16) = 38 blocks for the full group
    and the cap cdiv(63 + 64, 16) + 1 = 9 for the sliding one, 47 in all:
    refused (a livelock) on 46 usable blocks, admitted on 47."""
    wl = uniform(1, 600, 5)
    kw = dict(
        max_model_len=1024, max_num_batched_tokens=64, max_num_seqs=1, sliding_window=64,
        full_attention_groups=1, sliding_window_groups=1,
    )  # fmt: skip
    cfgs = [SchedulerConfig(num_gpu_blocks=n, **kw) for n in (47, 48)]
    out = simulate(cfgs, wl, STEP_LATENCY).state.out.counters
    assert out[0, S.O_LIVELOCKED] == 1 and out[0, S.O_FINISHED] == 0
    assert out[1, S.O_LIVELOCKED] == 0 and out[1, S.O_FINISHED] == 1


def test_group_counts_are_checked():
    assert SchedulerConfig().kv_groups == 1
    assert SchedulerConfig(sliding_window=64).kv_groups == 1
    assert (
        SchedulerConfig(
            sliding_window=64, full_attention_groups=1, sliding_window_groups=5
        ).kv_groups
        == 6
    )
    with pytest.raises(ValueError, match="needs a --sliding-window"):
        SchedulerConfig(sliding_window_groups=2)
    with pytest.raises(ValueError, match="needs --sliding-window 0"):
        SchedulerConfig(sliding_window=64, sliding_window_groups=0)
    # prefix caching runs with several groups (goldens ``*_caching_*``); BLIS
    # compatibility does not
    assert SchedulerConfig(full_attention_groups=2, enable_prefix_caching=True).kv_groups == 2
    with pytest.raises(ValueError, match="not simulated with --compat blis"):
        SchedulerConfig(**BLIS_IMPLIED, compat="blis", full_attention_groups=2)


def test_run_simulates_a_hybrid_model(capsys):
    args = ["run", "--model", "gemma-3-27b", "--gpu", "H100", "--latency", "roofline"]
    args += ["--tensor-parallel-size", "2", "--max-model-len", "8192"]
    code, out, _ = run_cli(capsys, *args, "--num-requests", "20", "--json")
    assert code == 0
    o = json.loads(out)
    assert (o["sliding_window"], o["full_attention_groups"], o["sliding_window_groups"]) == (
        1024, 1, 6,
    )  # fmt: skip
    code, out, _ = run_cli(capsys, *args, "--num-requests", "2")
    assert code == 0 and "in 6 of 7 KV cache groups" in " ".join(out.split())


def test_run_takes_group_counts_without_a_model(capsys):
    """--full-attention-groups / --sliding-window-groups model a hybrid on any
    pool; with --model they must agree with its groups."""
    base = ["run", "--num-requests", "5", "--num-gpu-blocks", "500", "--json"]
    code, out, _ = run_cli(
        capsys, *base, "--sliding-window", "64", "--full-attention-groups", "1",
        "--sliding-window-groups", "3",
    )  # fmt: skip
    o = json.loads(out)
    assert code == 0 and (o["full_attention_groups"], o["sliding_window_groups"]) == (1, 3)
    code, _, err = run_cli(capsys, *base, "--sliding-window-groups", "2")
    assert code == 2 and "needs a --sliding-window" in err and err.count("\n") == 1
    code, _, err = run_cli(
        capsys, "run", "--num-requests", "2", "--model", "gemma-3-27b", "--gpu", "H100",
        "--tensor-parallel-size", "2", "--latency", "roofline", "--sliding-window-groups", "2",
    )  # fmt: skip
    assert code == 2 and "contradicts --model gemma-3-27b (it has 6)" in err


@pytest.mark.slow
def test_several_full_groups_without_a_window_keep_the_pool_balanced():
    """Two full-attention groups and no window (found by a new-user tryout):
    the decode fast path counted one table's blocks and leaked the rest, so
    the kernel drifted from the reference engine. It now steps such configs
    one by one, and both end with the whole pool free."""
    from helpers import compare_final, run_reference
    from planner.latency.step_time import LinearLatency
    from planner.workload.arrays import LengthDist, synthetic

    wl = synthetic(40, 2.0, LengthDist("constant", 500), LengthDist("constant", 100))
    lat = LinearLatency()
    for groups in (1, 2, 3):
        cfg = SchedulerConfig(num_gpu_blocks=3000, full_attention_groups=groups)
        res = simulate([cfg], wl, lat)
        k = res.state.out.counters[0]
        assert k[S.O_INVARIANT_ERRORS] == 0, groups
        assert k[S.O_FINISHED] == wl.num_requests
        compare_final(res, 0, run_reference(cfg, wl, lat))
    one = simulate([SchedulerConfig(num_gpu_blocks=3000)], wl, lat).metrics()
    two = simulate([SchedulerConfig(num_gpu_blocks=3000, full_attention_groups=2)], wl, lat)
    assert two.metrics().peak_kv_blocks.iloc[0] <= 2 * one.peak_kv_blocks.iloc[0] + 2


def test_gpt_oss_runs_with_prefix_caching_as_vllm_serve(capsys, tmp_path):
    """gpt-oss-20b keeps vLLM's default prefix caching (it was turned off as
    not simulated); its KV layout is the one the ``hyb_caching_gptoss``
    goldens check step for step (one full and one 128-token sliding group of
    16-token blocks), and shared prefixes hit."""
    from conformance import load

    csv = tmp_path / "shared.csv"
    rows = [f"{i * 0.05},{1500 + i % 7},{100},{i % 2},1024" for i in range(60)]
    csv.write_text("arrival_time_s,prompt_tokens,output_tokens,prefix_group,prefix_len\n")
    csv.write_text(csv.read_text() + "\n".join(rows) + "\n")
    args = ["run", "--model", "gpt-oss-20b", "--gpu", "H100", "--latency", "roofline"]
    code, out, _ = run_cli(capsys, *args, "--trace-file", str(csv), "--json")
    assert code == 0
    o = json.loads(out)
    setting = o["server_settings"]["enable_prefix_caching"]
    assert setting["value"] is True and setting["source"] == "vLLM default"
    gold = load("hyb_caching_gptoss")["scenario"]
    layout = ("sliding_window", "full_attention_groups", "sliding_window_groups", "block_size")
    assert tuple(o[k] for k in layout) == tuple(gold[k] for k in layout)
    assert o["prefix_cache_hits"] > 0
    code, out, _ = run_cli(
        capsys, *args, "--trace-file", str(csv), "--json", "--no-enable-prefix-caching"
    )
    assert code == 0 and json.loads(out)["prefix_cache_hits"] == 0
