"""Issue 38 item 5: one tensor-parallel check for every command. vLLM refuses a
tensor-parallel size that does not split the attention heads
(``ModelConfig.verify_with_parallel_config``); so does every ``plan``
command that names a model, whether the pool is derived or given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import ROOFLINE_H100, SMALL_SYNTHETIC, run_cli

MODEL = ("--model", "llama-3.1-8b", "--gpu", "H100", "--tensor-parallel-size", "3")
POOL = ("--num-gpu-blocks", "5000")
TRAFFIC = ("--num-requests", "20", "--rate", "5")
ROOFLINE = ("--latency", "roofline")

SPEC = (
    'name = "tp3"\n'
    + SMALL_SYNTHETIC
    + ROOFLINE_H100.replace('gpu = "H100"\n', 'gpu = "H100"\ntensor_parallel_size = 3\n')
    + "[axes]\nmax_num_seqs = [64]\n"
)


def _bench(path: Path) -> Path:
    """A four-request vllm bench serve --save-detailed result."""
    n = 4
    doc = {
        "start_times": [1000.0 + i for i in range(n)],
        "input_lens": [200] * n,
        "output_lens": [10] * n,
        "ttfts": [0.05] * n,
        "itls": [[0.01] * 9] * n,
        "errors": [""] * n,
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "args",
    [
        ("run", *MODEL, *ROOFLINE, *TRAFFIC),
        ("run", *MODEL, *ROOFLINE, *POOL, *TRAFFIC),
        ("run", *MODEL, *POOL, "--beta-coeffs", "5000,17,6", *TRAFFIC),
        ("max-rate", *MODEL, *ROOFLINE, *POOL, *TRAFFIC),
        ("safe-limit", *MODEL, *ROOFLINE, *POOL, *TRAFFIC),
        ("check", *MODEL, *POOL),
        ("check", *MODEL),
    ],
    ids=["run", "run-pool", "run-linear", "max-rate", "safe-limit", "check-pool", "check"],
)
def test_tp_that_does_not_split_the_heads_is_refused(capsys, args):
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--tensor-parallel-size 3 does not divide num_attention_heads 32" in err


def test_calibrate_refuses_it(capsys, tmp_path):
    bench = _bench(tmp_path / "r.json")
    code, _, err = run_cli(capsys, "calibrate", str(bench), *MODEL, *ROOFLINE, *POOL)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "does not divide num_attention_heads 32" in err


def test_sweep_and_size_refuse_it(capsys, tmp_path):
    spec = tmp_path / "tp3.toml"
    spec.write_text(SPEC)
    code, _, err = run_cli(capsys, "sweep", str(spec), "--dry-run")
    assert code == 2 and "does not divide num_attention_heads 32" in err, err
    spec.write_text(SPEC.replace("tensor_parallel_size = 3\n", ""))
    code, _, err = run_cli(
        capsys, "size", str(spec), "--gpus", "H100", "--tensor-parallel-sizes", "3", "--dry-run"
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "does not divide num_attention_heads 32" in err


def test_size_refuses_a_listed_size_that_splits_no_heads(capsys, tmp_path):
    """Listed beside a valid size, TP 3 is still refused: it fails on every
    GPU, so it is a bad option, not a skipped candidate (tryout finding)."""
    spec = tmp_path / "tp.toml"
    spec.write_text(SPEC.replace("tensor_parallel_size = 3\n", ""))
    args = ("size", str(spec), "--gpus", "H100", "--tensor-parallel-sizes", "1,3", "--dry-run")
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--tensor-parallel-sizes: 3 does not divide num_attention_heads 32" in err


def test_a_spec_with_a_given_pool_files_the_tp_error_under_hardware(capsys, tmp_path):
    spec = tmp_path / "tp3.toml"
    spec.write_text(SPEC.replace("[axes]\n", "[scheduler]\nnum_gpu_blocks = 5000\n[axes]\n"))
    code, _, err = run_cli(capsys, "sweep", str(spec), "--dry-run")
    assert code == 2 and ": hardware: " in err and "latency:" not in err, err
