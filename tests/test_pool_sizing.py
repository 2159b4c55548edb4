"""One definition of a derived pool: every command and sweep row sizes
num_gpu_blocks at the max_num_seqs and max_num_batched_tokens it runs with, as
vLLM's start-up profile (``GPUModelRunner.profile_run``) does. Before, plan
check sized at the GPU's default max_num_seqs, plan run at its own, and sweep
rows at the GPU's defaults whatever their axes, so the same model and GPU got
three pools (gemma-3-27b on one H100: 14,011, 15,855 and another)."""

from __future__ import annotations

import json

import pytest

from helpers import SMALL_SYNTHETIC, run_cli
from planner.models import hardware, vllm_defaults
from planner.sweep.spec import load_spec_text

SEQS, MNBT = 128, 4096
MODELS = [("llama-3.1-8b", "linear"), ("gemma-3-27b", "roofline")]


def expected(model: str, seqs: int = SEQS, mnbt: int = MNBT, bs: int = 16) -> int:
    m, g = hardware.model(model), hardware.gpu("H100")
    util = vllm_defaults.GPU_MEMORY_UTILIZATION  # vLLM 0.33's default, which each takes
    return hardware.num_gpu_blocks(m, g, util, bs, 1, mnbt, seqs)


def flags(model: str, latency: str | None, seqs: int = SEQS) -> list[str]:
    """The pool options; ``latency`` None for plan check (which judges no traffic here)."""
    step = [] if latency is None else ["--latency", latency]
    return [
        "--model", model, "--gpu", "H100", "--max-num-seqs", str(seqs),
        "--max-num-batched-tokens", str(MNBT), *step,
    ]  # fmt: skip


def test_the_sampler_term_makes_the_pool_depend_on_max_num_seqs():
    """Otherwise the tests below could not tell the definitions apart."""
    for model, _ in MODELS:
        assert expected(model, 1024) < expected(model, SEQS)


@pytest.mark.parametrize("model,latency", MODELS)
def test_check_run_and_max_rate_size_the_same_pool(capsys, model, latency):
    want = expected(model)
    code, out, _ = run_cli(capsys, "check", *flags(model, None), "--json")
    o = json.loads(out)
    assert o["num_gpu_blocks"] == want
    assert o["num_gpu_blocks_sized_at"] == {"max_num_seqs": SEQS, "max_num_batched_tokens": MNBT}
    code, out, _ = run_cli(capsys, "run", *flags(model, latency), "--num-requests", "3", "--json")
    assert code == 0 and json.loads(out)["num_gpu_blocks"] == want
    code, out, _ = run_cli(
        capsys, "max-rate", *flags(model, latency), "--num-requests", "3", "--json",
        "--rate-scale-max", "2",
    )  # fmt: skip
    assert code == 0 and json.loads(out)["configs"][0]["config"]["num_gpu_blocks"] == want


def test_text_says_where_a_derived_pool_was_sized(capsys):
    at = f"start-up profile at max_num_seqs {SEQS}, max_num_batched_tokens {MNBT:,}"
    code, out, _ = run_cli(capsys, "check", *flags("llama-3.1-8b", None))
    assert at in " ".join(out.split())
    code, out, _ = run_cli(capsys, "run", *flags("llama-3.1-8b", "linear"), "--num-requests", "3")
    assert at in " ".join(out.split())
    code, out, _ = run_cli(capsys, "run", "--num-gpu-blocks", "5000", "--num-requests", "3")
    assert "start-up profile" not in out and "num_gpu_blocks 5,000 (given)" in out


def test_max_rate_sizes_each_varied_configuration_and_names_the_window(capsys):
    code, out, _ = run_cli(
        capsys, "max-rate", "--model", "gemma-3-27b", "--gpu", "H100", "--latency", "roofline",
        "--max-num-batched-tokens", str(MNBT), "--num-requests", "3", "--rate-scale-max", "2",
        "--vary", "max_num_seqs=64,1024", "--vary", "block_size=16,32", "--json",
    )  # fmt: skip
    assert code == 0
    for c in json.loads(out)["configs"]:
        cfg = c["config"]
        assert cfg["num_gpu_blocks"] == expected(
            "gemma-3-27b", cfg["max_num_seqs"], MNBT, cfg["block_size"]
        )
    code, out, _ = run_cli(
        capsys, "max-rate", "--model", "gemma-3-27b", "--gpu", "H100", "--latency", "roofline",
        "--num-requests", "3", "--rate-scale-max", "2",
    )  # fmt: skip
    flat = " ".join(out.split())
    assert "attention: sliding window of 1,024 tokens" in flat
    # vLLM 0.33's H100 defaults: 1,024 sequences, 8,192 tokens
    assert f"num_gpu_blocks {expected('gemma-3-27b', 1024, 8192):,} (derived from presets" in flat


SPEC = (
    'name = "pools"\n'
    + SMALL_SYNTHETIC
    + """[hardware]
model = "{model}"
gpu = "H100"
[latency]
kind = "{latency}"
[scheduler]
max_num_batched_tokens = {mnbt}
[axes]
max_num_seqs = [64, {seqs}, 1024]
"""
)


@pytest.mark.parametrize("model,latency", MODELS)
def test_sweep_rows_are_sized_at_their_own_max_num_seqs(tmp_path, model, latency):
    text = SPEC.format(model=model, latency=latency, mnbt=MNBT, seqs=SEQS)
    sweep = load_spec_text(text, tmp_path)
    got = {c.max_num_seqs: c.num_gpu_blocks for c in sweep.configs}
    assert got == {s: expected(model, s) for s in (64, SEQS, 1024)}


def test_safe_limit_sizes_at_the_largest_max_num_seqs_it_searches(capsys):
    code, out, _ = run_cli(
        capsys, "safe-limit", "--model", "llama-3.1-8b", "--gpu", "H100", "--num-requests", "40",
        "--max-num-batched-tokens", str(MNBT), "--json",
    )  # fmt: skip
    o = json.loads(out)
    assert o["num_gpu_blocks_sized_at"] == {"max_num_seqs": 40, "max_num_batched_tokens": MNBT}
    assert o["num_gpu_blocks"] == expected("llama-3.1-8b", 40)
    assert o["search_limit"] == 40


def test_a_model_without_a_gpu_says_what_is_missing(capsys):
    code, _, err = run_cli(capsys, "run", "--model", "gemma-3-27b", "--num-gpu-blocks", "5000")
    assert code == 2 and "needs --gpu too" in err and "--beta-coeffs" in err
    code, _, err = run_cli(capsys, "check", "--model", "llama-3.1-8b")
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, out, _ = run_cli(
        capsys, "run", "--model", "gemma-3-27b", "--num-gpu-blocks", "5000", "--beta-coeffs",
        "6000,20,5", "--num-requests", "3",
    )  # fmt: skip
    assert code == 0 and "sliding window of 1,024 tokens" in out


def test_plan_sweep_says_where_its_pools_were_sized(capsys, tmp_path):
    spec = tmp_path / "pools.toml"
    spec.write_text(SPEC.format(model="llama-3.1-8b", latency="linear", mnbt=MNBT, seqs=SEQS))
    code, out, err = run_cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "out"))
    assert code == 0, err
    lo, hi = expected("llama-3.1-8b", 1024), expected("llama-3.1-8b", 64)
    flat = " ".join(out.split())
    assert f"num_gpu_blocks {lo:,} to {hi:,} (derived from llama-3.1-8b on 1 x H100;" in flat


# Issue 32, item 2: one (model, GPU, TP, utilization, max_num_seqs,
# max_num_batched_tokens), one num_gpu_blocks, whichever command sizes it.
# Sliding-window (mistral-7b-v0.1, every layer) and hybrid KV models (gemma-3:
# sliding + full groups; gpt-oss-20b: the same, MoE) included.
SAME = [
    "llama-3.1-8b",
    "qwen3-8b",
    "mistral-7b-v0.1",
    "google/gemma-3-27b-it",
    "openai/gpt-oss-20b",
]
POOL = ["--gpu", "H100", "--gpu-memory-utilization", "0.85", "--max-num-batched-tokens", "4096",
        "--max-model-len", "8192"]  # fmt: skip
ONE = [*POOL, "--max-num-seqs", "24"]
TRAFFIC = ["--num-requests", "24", "--latency", "roofline"]


def _one_row_spec(tmp_path, model: str, scheduler: str = ""):  # noqa: ANN001, ANN202
    """A one-row sweep spec of ``ONE``'s pool for ``model`` (``scheduler``:
    more [scheduler] lines)."""
    spec = tmp_path / "one.toml"
    spec.write_text(
        'name = "one"\n'
        + SMALL_SYNTHETIC.replace("num_requests = 5", "num_requests = 5\nrate = 1")
        + f'[hardware]\nmodel = "{model}"\ngpu = "H100"\n'
        'gpu_memory_utilization = 0.85\n[latency]\nkind = "roofline"\n[scheduler]\n'
        "max_num_batched_tokens = 4096\nmax_model_len = 8192\n"
        + scheduler
        + "[axes]\nmax_num_seqs = [24]\n"
    )
    return spec


def _size_blocks(capsys, tmp_path, model: str) -> set[int]:
    spec = _one_row_spec(tmp_path, model)
    out = tmp_path / "size"
    code, _, err = run_cli(
        capsys, "size", str(spec), "--out", str(out), "--gpus", "H100", "--max-replicas", "1",
        "--ttft-slo", "100", "--json",
    )  # fmt: skip
    assert code == 0, err
    sweep = load_spec_text(spec.read_text(), tmp_path)
    import pandas as pd

    table = pd.read_parquet(out / "size.parquet")
    return set(table.num_gpu_blocks) | {c.num_gpu_blocks for c in sweep.configs}


# The first model runs in the fast subset; the others (other attention layouts and
# architectures) only in the full suite, to keep the subset under 2 minutes.
@pytest.mark.parametrize(
    "model", [SAME[0]] + [pytest.param(m, marks=pytest.mark.slow) for m in SAME[1:]]
)
def test_every_command_sizes_one_pool_for_one_set_of_inputs(capsys, tmp_path, model):
    got = {}
    code, out, err = run_cli(capsys, "check", "--model", model, *ONE, "--json")
    got["check"] = json.loads(out)["num_gpu_blocks"]
    code, out, err = run_cli(capsys, "run", "--model", model, *ONE, *TRAFFIC, "--json")
    assert code == 0, err
    got["run"] = json.loads(out)["num_gpu_blocks"]
    code, out, err = run_cli(
        capsys, "max-rate", "--model", model, *ONE, *TRAFFIC, "--rate-scale-max", "2", "--json"
    )
    assert code == 0, err
    got["max-rate"] = json.loads(out)["configs"][0]["config"]["num_gpu_blocks"]
    code, out, err = run_cli(capsys, "safe-limit", "--model", model, *POOL, *TRAFFIC, "--json")
    assert code == 0, err
    rows = json.loads(out)["evaluated"]
    got["safe-limit"] = next(r["num_gpu_blocks"] for r in rows if r["max_num_seqs"] == 24)
    (got["size and sweep"],) = _size_blocks(capsys, tmp_path, model)
    assert len(set(got.values())) == 1, got
    assert got["run"] == hardware.num_gpu_blocks(
        hardware.model(model), hardware.gpu("H100"), 0.85, 16, 1, 4096, 24
    )


def test_safe_limit_runs_each_max_num_seqs_on_its_own_pool():
    """``find_safe_limits(pool=...)``: every evaluated row on the pool sized at
    its own max_num_seqs (a pool that moves with it, so a shared one would show)."""
    from planner.answers.safelimit import find_safe_limits
    from planner.config import SchedulerConfig
    from planner.latency.step_time import LinearLatency
    from planner.workload.arrays import S1_OUTPUT, S1_PROMPT, synthetic

    wl = synthetic(60, 10.0, S1_PROMPT, S1_OUTPUT, seed=1)
    cfg = SchedulerConfig(num_gpu_blocks=3000, max_model_len=4096)
    s = find_safe_limits(wl, cfg, LinearLatency(), pool=lambda seqs: 3000 + seqs)
    t = s.table
    assert len(t) > 3 and (t.num_gpu_blocks == 3000 + t.max_num_seqs).all()


@pytest.mark.parametrize("model", ["qwen3.5-27b", "nemotron-h-8b"])
def test_every_simulating_command_sizes_one_pool_for_a_mamba_hybrid(capsys, tmp_path, model):
    """A linear-attention (Mamba) hybrid with prefix caching off (the mode the
    simulator runs them in): check, run, max-rate, size and a one-row sweep
    agree on num_gpu_blocks, counted in vLLM's raised blocks, and every
    simulated row runs at that block size."""
    off = ["--no-enable-prefix-caching"]
    got = {}
    code, out, err = run_cli(capsys, "check", "--model", model, *ONE, *off, "--json")
    assert code == 0, err
    got["check"] = json.loads(out)["num_gpu_blocks"]
    code, out, err = run_cli(capsys, "run", "--model", model, *ONE, *off, *TRAFFIC, "--json")
    assert code == 0, err
    run = json.loads(out)
    got["run"] = run["num_gpu_blocks"]
    code, out, err = run_cli(
        capsys, "max-rate", "--model", model, *ONE, *off, *TRAFFIC, "--rate-scale-max", "2",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    config = json.loads(out)["configs"][0]["config"]
    got["max-rate"] = config["num_gpu_blocks"]
    spec = _one_row_spec(tmp_path, model, "enable_prefix_caching = false\n")
    sweep = load_spec_text(spec.read_text(), tmp_path)
    (row,) = sweep.configs
    got["sweep"] = row.num_gpu_blocks
    code, _, err = run_cli(
        capsys, "size", str(spec), "--out", str(tmp_path / "size"), "--gpus", "H100",
        "--max-replicas", "1", "--ttft-slo", "100", "--json",
    )  # fmt: skip
    assert code == 0, err
    import pandas as pd

    (got["size"],) = set(pd.read_parquet(tmp_path / "size" / "size.parquet").num_gpu_blocks)
    assert len(set(got.values())) == 1, got
    assert run["block_size"] == config["block_size"] == row.block_size > 16
    assert row.mamba_groups == run["mamba_groups"] > 0
