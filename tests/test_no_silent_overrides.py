"""Issue 18, case 1: a default of one option never silently contradicts another.

Every option the user gives either changes the result or is refused with one
line (exit 2); S1's length bounds apply only when no length option is given.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import run_cli
from planner.sweep.spec import SpecError, load_spec
from planner.workload.arrays import (
    MAX_TOKENS,
    S1_OUTPUT,
    S1_PROMPT,
    LengthDist,
    WorkloadError,
    length_from_options,
)

S1_CSV = str(Path(__file__).parents[1] / "planner" / "data" / "s1_seed7.csv")


def _run_json(capsys, *args: str) -> dict:
    code, out, err = run_cli(capsys, "run", "--num-gpu-blocks", "100000", *args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("dist", ["constant", "gaussian", "lognormal"])
def test_given_means_are_simulated(capsys, dist):
    """The issue's case: 10 requests of 1,024 + 1,024 tokens are 10,240 prefill and
    10,230 decode tokens (the first output token comes from the prefill step)."""
    d = _run_json(
        capsys,
        *("--length-dist", dist, "--prompt-tokens", "1024", "--output-tokens", "1024"),
        *("--num-requests", "10"),
    )
    assert d["prefill_tokens"] == 10 * 1024
    assert d["decode_tokens"] == 10 * 1023


def test_defaults_are_s1(capsys):
    """With no length option, S1's whole shape applies (means inside S1's bounds)."""
    d = _run_json(capsys, "--num-requests", "300")
    mean_prompt = d["prefill_tokens"] / 300
    assert S1_PROMPT.min <= mean_prompt <= S1_PROMPT.max


def test_partial_options_do_not_inherit_s1_bounds():
    p = length_from_options("gaussian", 1024.0, None, None, None, S1_PROMPT, "--prompt-tokens")
    assert (p.mean, p.stdev, p.min, p.max) == (1024.0, 0.0, 1, MAX_TOKENS)
    o = length_from_options("gaussian", None, None, None, 5000, S1_OUTPUT, "--output-tokens")
    assert (o.mean, o.min, o.max) == (S1_OUTPUT.mean, 1, 5000)
    whole = length_from_options("lognormal", None, None, None, None, S1_PROMPT, "--prompt-tokens")
    assert (whole.kind, whole.mean, whole.stdev, whole.min, whole.max) == (
        "lognormal",
        300.0,
        200.0,
        200,
        400,
    )


def test_mean_outside_bounds_is_refused():
    with pytest.raises(WorkloadError, match="outside its bounds"):
        LengthDist("gaussian", 1024, 10, 200, 400, label="--prompt-tokens")
    with pytest.raises(WorkloadError, match="outside its bounds"):
        LengthDist("constant", 5, 0, 10, 20)


def test_clamped_mean_warns(capsys):
    code, out, err = run_cli(
        capsys,
        "run",
        *("--num-requests", "50", "--num-gpu-blocks", "100000"),
        *("--prompt-tokens", "1000", "--prompt-tokens-stdev", "2000"),
        *("--prompt-tokens-max", "1500", "--json"),
    )
    assert code == 0
    assert "--prompt-tokens: the drawn mean is" in err


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--length-dist", "constant", "--prompt-tokens-stdev", "3"], "--prompt-tokens-stdev"),
        (["--length-dist", "constant", "--output-tokens-min", "3"], "--output-tokens-min"),
        (["--prompt-tokens", "1024", "--prompt-tokens-max", "400"], "--prompt-tokens"),
        (["--cpu-swap-blocks", "10"], "--cpu-swap-blocks"),
        (["--swap-bandwidth-gbps", "10"], "--swap-bandwidth-gbps"),
        (["--kv-block-bytes", "1024"], "--kv-block-bytes"),
        (["--rate-scale", "2"], "--rate-scale"),
        (["--trace-start", "2"], "--trace-start"),
        (["--max-requests", "2"], "--max-requests"),
        (["--mfu", "0.3"], "--mfu"),
        (["--step-overhead-us", "3"], "--step-overhead-us"),
        (["--gpu-memory-utilization", "0.8"], "--gpu-memory-utilization"),
        (["--tensor-parallel-size", "2"], "--tensor-parallel-size"),
        (["--arrival", "offline", "--rate", "3"], "--rate"),
        (["--adaptive-step", "2"], "--adaptive-step"),
        (["--adaptive-threshold", "2"], "--adaptive-threshold"),
        (["--trace-file", S1_CSV, "--num-requests", "3"], "--num-requests"),
        (["--trace-file", S1_CSV, "--prompt-tokens", "3"], "--prompt-tokens"),
        (["--trace-file", S1_CSV, "--seed", "3"], "--seed"),
        (
            ["--model", "llama-3.1-8b", "--gpu", "H100", "--num-gpu-blocks", "100"]
            + ["--gpu-memory-utilization", "0.8"],
            "--gpu-memory-utilization",
        ),
        (
            ["--model", "llama-3.1-8b", "--gpu", "H100", "--latency", "roofline"]
            + ["--beta-coeffs", "1,2,3"],
            "--beta-coeffs",
        ),
    ],
)
def test_inert_options_are_refused(capsys, args, flag):
    code, out, err = run_cli(capsys, "run", *args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("plan: error: " + flag), err
    assert out == ""


def test_options_in_effect_are_accepted(capsys):
    """The same options are fine where they act."""
    code, _, err = run_cli(
        capsys,
        "run",
        *("--num-requests", "5", "--preemption-mode", "swap", "--cpu-swap-blocks", "10"),
        *("--adaptive-window", "10", "--adaptive-step", "2", "--json"),
    )
    assert code == 0, err


def _spec(tmp_path: Path, workload: str, latency: str = "") -> Path:
    p = tmp_path / "s.toml"
    p.write_text(
        'name = "t"\n[workload]\n' + workload + "\n" + latency + "\n[axes]\nmax_num_seqs = [4]\n"
    )
    return p


SYN = (
    'kind = "synthetic"\nnum_requests = 4\n'
    'prompt = { kind = "constant", mean = 10 }\noutput = { kind = "constant", mean = 5 }\n'
)


@pytest.mark.parametrize(
    "workload,latency,field",
    [
        (SYN + "rate_scale = 2.0", "", "rate_scale"),
        (SYN + 'arrival = "offline"\nrate = 3.0', "", "rate"),
        (SYN + "gamma_cv = 2.0", "", "gamma_cv"),
        (f'kind = "trace"\npath = "{S1_CSV}"\nnum_requests = 3', "", "num_requests"),
        (f'kind = "trace"\npath = "{S1_CSV}"\nseed = 3', "", "seed"),
        (SYN, '[latency]\nkind = "linear"\nmfu = 0.4', "mfu"),
        (
            SYN.replace("mean = 10 }", "mean = 10, stdev = 2 }"),
            "",
            "stdev",
        ),
    ],
)
def test_inert_spec_fields_are_refused(tmp_path, workload, latency, field):
    with pytest.raises(SpecError, match=field):
        load_spec(_spec(tmp_path, workload, latency))


def test_spec_mean_outside_bounds_is_refused(tmp_path):
    wl = SYN.replace(
        'prompt = { kind = "constant", mean = 10 }',
        'prompt = { kind = "gaussian", mean = 1024, stdev = 10, min = 200, max = 400 }',
    )
    with pytest.raises((SpecError, WorkloadError), match="outside its bounds"):
        load_spec(_spec(tmp_path, wl))


def test_s1_shapes_are_unchanged():
    rng = np.random.default_rng(0)
    x = S1_OUTPUT.sample(rng, 1000)
    assert x.min() >= 3200 and x.max() <= 3596


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["run", "--preemption-mode", "swap"], "--preemption-mode"),
        (["bench", "--startup", "--grid", "4"], "--grid"),
        (["bench", "--startup", "--async-scheduling"], "--async-scheduling"),
    ],
)
def test_more_inert_options_are_refused(capsys, argv, flag):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("plan: error: " + flag), err


@pytest.mark.parametrize(
    "scheduler,field",
    [
        ("cpu_swap_blocks = 1000", "cpu_swap_blocks"),
        ("adaptive_threshold = 3", "adaptive_threshold"),
        ('preemption_mode = "swap"', "preemption_mode"),
    ],
)
def test_spec_scheduler_settings_without_effect_are_refused(tmp_path, scheduler, field):
    p = tmp_path / "s.toml"
    p.write_text(
        f'name = "t"\n[workload]\n{SYN}\n[scheduler]\n{scheduler}\n[axes]\nmax_num_seqs = [4]\n'
    )
    with pytest.raises(SpecError, match=f"scheduler.{field}: .*no effect in any configuration"):
        load_spec(p)


def test_spec_setting_acting_in_some_configs_is_kept(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(
        f'name = "t"\n[workload]\n{SYN}\n[scheduler]\ncpu_swap_blocks = 100\n'
        '[axes]\npreemption_mode = ["recompute", "swap"]\n'
    )
    assert len(load_spec(p).configs) == 2


LINEAR_POOL = ("--num-gpu-blocks", "7463", "--beta-coeffs", "5000,20,7", "--num-requests", "20")


@pytest.mark.parametrize(
    "command,flags,named",
    [
        ("run", ("--gpu", "A100-40GB"), "--gpu has"),
        ("run", ("--model", "llama-3.1-70b", "--gpu", "B200"), "--gpu and --model have"),
        ("run", ("--model", "gemma-3-27b", "--gpu", "H100"), "--gpu has"),  # its window acts
        ("safe-limit", ("--model", "llama-3.1-8b"), "--model has"),
        ("max-rate", ("--gpu", "H100"), "--gpu has"),
    ],
)
def test_hardware_that_nothing_reads_is_refused(capsys, command, flags, named):
    """A given pool and a linear step time from --beta-coeffs leave --gpu (and
    a full-attention --model) nothing to do (tryout finding: the run was
    identical with and without them)."""
    code, out, err = run_cli(capsys, command, *LINEAR_POOL, *flags)
    assert code == 2 and out == ""
    assert err.startswith(f"plan: error: {named} no effect"), err
    assert len(err.strip().splitlines()) == 1


def test_hardware_that_acts_is_taken(capsys):
    """The same options where they act: a sliding-window model's window on a
    given pool, swap's block size from the model, the roofline."""
    win = _run_json(capsys, *LINEAR_POOL[2:], "--model", "gemma-3-27b")
    full = _run_json(capsys, *LINEAR_POOL[2:])
    assert win["sliding_window"] > 0 and full["sliding_window"] == 0
    swap = ("--preemption-mode", "swap", "--cpu-swap-blocks", "100")
    _run_json(capsys, *LINEAR_POOL[2:], *swap, "--model", "llama-3.1-8b")
    _run_json(capsys, "--num-requests", "20", "--latency", "roofline", "--model",
              "llama-3.1-8b", "--gpu", "H100")  # fmt: skip


def test_safe_limit_reads_a_windowed_model_on_a_given_pool(capsys):
    """With --num-gpu-blocks the model still shapes the limit (tryout finding:
    the model was never read): gemma-3-27b's sliding-window and full KV cache
    groups each hold a request's blocks, so its analytic limit on the same
    pool is lower than one full-attention group's; a Mamba hybrid, whose
    searched values would break vLLM's start-up rule, is refused."""
    limits = {}
    for model in ((), ("--model", "gemma-3-27b")):
        code, out, err = run_cli(capsys, "safe-limit", *LINEAR_POOL, *model, "--json")
        assert code == 0, err
        limits[model] = json.loads(out)["analytic"]
    assert 0 < limits[("--model", "gemma-3-27b")] < limits[()], limits
    code, _, err = run_cli(capsys, "safe-limit", *LINEAR_POOL, "--model", "qwen3.5-27b")
    assert code == 2 and "full attention only" in err


SPEC_HW = """name = "hw"
horizon_s = 120.0
[workload]
kind = "trace"
path = "{trace}"
[axes]
num_gpu_blocks = [7463, 8000]
[latency]
beta = [5752.71, 17.25, 6.00]
[hardware]
model = "{model}"
gpu = "H100"
"""


@pytest.mark.parametrize("model,refused", [("llama-3.1-8b", True), ("gemma-3-27b", False)])
def test_spec_hardware_that_nothing_reads_is_refused(tmp_path, model, refused):
    """A spec's [hardware] on given pools with latency.beta: a full-attention
    model and its GPU only labelled the rows (tryout finding); a windowed
    model's window acts."""
    path = tmp_path / "hw.toml"
    path.write_text(SPEC_HW.format(trace=S1_CSV, model=model))
    if refused:
        with pytest.raises(
            SpecError, match=r"hw.toml: hardware: llama-3.1-8b on H100 has no effect"
        ):
            load_spec(path)
        # Swap takes its block bytes from the model: there [hardware] acts.
        swap = '[scheduler]\npreemption_mode = "swap"\ncpu_swap_blocks = 100\n'
        path.write_text(path.read_text() + swap)
        assert {c.preemption_mode for c in load_spec(path).configs} == {"swap"}  # not refused
    else:
        assert all(c.sliding_window > 0 for c in load_spec(path).configs)


CONSTANT = ("--arrival", "constant", "--length-dist", "constant")
CONSTANT += ("--prompt-tokens", "100", "--output-tokens", "100", "--num-requests", "20")


@pytest.mark.parametrize(
    "extra,refused",
    [
        ((), True),
        (("--length-dist", "gaussian"), True),  # a mean and no stdev: nothing drawn
        (("--arrival", "poisson"), False),
        (("--prompt-tokens-stdev", "10", "--length-dist", "gaussian"), False),
        (("--prefix-groups", "1", "--prefix-len", "50", "--prefix-share", "1"), True),
        (
            ("--prefix-groups", "2", "--prefix-len", "64", "--prefix-share", "1")
            + ("--enable-prefix-caching", "--rate", "1000"),
            False,
        ),
    ],
)
def test_seed_where_nothing_is_drawn_is_refused(capsys, extra, refused):
    """--seed on a workload that draws nothing (tryout finding: seeds 0 and 5
    gave the same run); the last option of a kind wins (Click)."""
    code, out, err = run_cli(capsys, "run", *CONSTANT, *extra, "--seed", "5", "--json")
    if refused:
        assert code == 2 and err.startswith("plan: error: --seed has no effect"), err
        assert len(err.strip().splitlines()) == 1
    else:
        assert code == 0, err


@pytest.mark.parametrize("arrival", ["constant", "offline", "poisson", "gamma"])
@pytest.mark.parametrize("kind,stdev", [("constant", 0), ("gaussian", 0), ("gaussian", 30),
                                        ("lognormal", 0), ("lognormal", 30)])  # fmt: skip
@pytest.mark.parametrize("groups,share", [(0, 0.0), (1, 1.0), (1, 0.5), (3, 1.0)])
def test_seed_acts_exactly_when_two_seeds_differ(arrival, kind, stdev, groups, share):
    """``seed_acts`` against the draws themselves: two seeds give different
    workloads exactly when it says the seed acts."""
    from planner.workload.arrays import LengthDist, seed_acts, synthetic, with_shared_prefixes

    p = LengthDist(kind, 200.0, stdev)
    o = LengthDist(kind, 100.0, stdev)
    draws = []
    for seed in (1, 2):
        wl = synthetic(50, 5.0, p, o, arrival, seed)
        wl = with_shared_prefixes(wl, groups, 64 if groups else 0, share, seed)
        g = wl.prefix_group if wl.prefix_group is not None else np.zeros(0)
        draws.append(np.concatenate([wl.arrival_s, wl.prompt_tokens, wl.output_tokens, g]))
    differ = not np.array_equal(*draws)
    assert differ == seed_acts(arrival, p, o, groups, share)


SPEC_SEED = """name = "seed"
[workload]
kind = "synthetic"
num_requests = 20
arrival = "{arrival}"
prompt = {{ kind = "constant", mean = 100 }}
output = {{ kind = "constant", mean = 100 }}
[axes]
seed = [0, 1, 2]
"""


@pytest.mark.parametrize("arrival,refused", [("constant", True), ("poisson", False)])
def test_spec_seed_axis_where_nothing_is_drawn_is_refused(tmp_path, arrival, refused):
    path = tmp_path / "seed.toml"
    path.write_text(SPEC_SEED.format(arrival=arrival))
    if refused:
        with pytest.raises(SpecError, match=r"axes.seed: no effect"):
            load_spec(path)
    else:
        assert len(load_spec(path).configs) == 3


@pytest.mark.parametrize("flag", ["--policy", "--victim"])
def test_priority_without_priorities_is_named_in_a_warning(capsys, flag, tmp_path):
    """Tryout finding: --policy/--victim priority on a workload without
    priorities ran as fcfs, silently. It is a warning, not a refusal: with
    tied arrivals the runs differ (second tryout: offline arrivals). A trace
    with distinct priorities takes it without one."""
    code, out, err = run_cli(capsys, "run", "--num-requests", "20", flag, "priority", "--json")
    assert code == 0, err
    assert "without distinct request priorities orders by arrival" in err
    trace = tmp_path / "p.csv"
    trace.write_text(
        "arrival_time_s,prompt_tokens,output_tokens,priority\n0,100,50,1\n0.1,100,50,0\n"
    )
    code, _, err = run_cli(capsys, "run", "--trace-file", str(trace), flag, "priority")
    assert code == 0 and "priorit" not in err, err


def test_equal_priorities_act_as_fcfs():
    """The ground of the refusal (``workload.priorities_unread``): with no
    priorities, policy priority and victim priority give fcfs's run, step for
    step in every counter, on random pools, budgets, caching and async runs."""
    import dataclasses

    from planner.api import simulate
    from planner.config import SchedulerConfig
    from planner.workload.arrays import LengthDist, synthetic

    rng = np.random.default_rng(7)
    cols = ["preemptions", "completed", "steps", "ttft_s_p99", "e2e_s_p99", "prefill_tokens"]
    preempting = 0
    for _ in range(12):
        n = int(rng.integers(20, 120))
        p = LengthDist("lognormal", float(rng.integers(50, 800)), float(rng.integers(10, 400)))
        o = LengthDist("lognormal", float(rng.integers(20, 600)), float(rng.integers(10, 400)))
        wl = synthetic(n, float(rng.uniform(1, 50)), p, o, "poisson", int(rng.integers(0, 999)))
        base = SchedulerConfig(
            num_gpu_blocks=int(rng.integers(150, 1500)),
            max_num_seqs=int(rng.integers(2, 128)),
            max_num_batched_tokens=512,
            max_model_len=2048,
            horizon_s=600.0,
            enable_prefix_caching=bool(rng.integers(0, 2)),
            async_scheduling=bool(rng.integers(0, 2)),
        )
        cfgs = [base, dataclasses.replace(base, policy="priority")]
        cfgs.append(dataclasses.replace(base, victim="priority"))
        m = simulate(cfgs, wl).metrics()[cols]
        assert (m.iloc[1] == m.iloc[0]).all() and (m.iloc[2] == m.iloc[0]).all(), m
        preempting += int(m.preemptions.iloc[0] > 0)
    assert preempting >= 4  # the victim rule was exercised


def test_spec_priority_without_priorities_warns(tmp_path):
    from planner.sweep.spec import load_spec as load

    path = tmp_path / "p.toml"
    path.write_text(SPEC_SEED.format(arrival="poisson") + 'policy = ["fcfs", "priority"]\n')
    sweep = load(path)
    assert len(sweep.configs) == 6
    assert any("without distinct request priorities" in w for w in sweep.warnings)


def test_swap_block_bytes_follow_the_model_its_dtype_and_the_spec(capsys, tmp_path):
    """Swap moves the model's blocks: --kv-cache-dtype fp8 halves them, and a
    spec's [hardware] derives them as plan run does (second tryout: the spec
    kept the 2 MiB default, and plan run ignored the KV dtype)."""
    from planner import resolve

    swap = ("--preemption-mode", "swap", "--cpu-swap-blocks", "100", "--num-requests", "5")
    swap += ("--model", "llama-3.1-70b", "--tensor-parallel-size", "4", "--beta-coeffs", "1,1,1")
    auto = _run_json(capsys, *swap)
    fp8 = _run_json(capsys, *swap, "--kv-cache-dtype", "fp8")
    assert auto["kv_block_bytes"] == resolve.kv_block_bytes(None, "llama-3.1-70b", 16, 4)
    assert fp8["kv_block_bytes"] * 2 == auto["kv_block_bytes"] != 2 * 2**20
    path = tmp_path / "swap.toml"
    path.write_text(
        f'name = "swap"\nhorizon_s = 60.0\n[workload]\nkind = "trace"\npath = "{S1_CSV}"\n'
        '[axes]\nnum_gpu_blocks = [7463]\npreemption_mode = ["swap"]\ncpu_swap_blocks = [100]\n'
        '[latency]\nkind = "roofline"\n'
        '[hardware]\nmodel = "llama-3.1-70b"\ngpu = "H100"\ntensor_parallel_size = 4\n'
    )
    assert {c.kv_block_bytes for c in load_spec(path).configs} == {auto["kv_block_bytes"]}
