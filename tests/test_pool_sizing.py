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
