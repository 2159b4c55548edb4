"""plan run on linear-attention (Mamba) hybrids: vLLM's mamba_cache_mode
"none" (prefix caching off) at vLLM's raised block size, the pool plan check
prints, vLLM's start-up rule, and one-line refusals for what is not simulated."""

from __future__ import annotations

import json

import pytest

from helpers import run_cli
from planner.models import hardware, kv_cache

POOL = ["--gpu", "H100", "--gpu-memory-utilization", "0.9", "--max-num-batched-tokens", "4096",
        "--max-model-len", "8192", "--no-enable-prefix-caching"]  # fmt: skip
TRAFFIC = ["--num-requests", "12", "--rate", "1", "--latency", "roofline"]


@pytest.mark.parametrize(("model", "groups"), [("qwen3.5-27b", 3), ("nemotron-h-8b", 6)])
def test_run_and_check_size_one_pool_at_the_raised_block_size(capsys, model, groups):
    one = [*POOL, "--max-num-seqs", "32"]
    code, out, err = run_cli(capsys, "check", "--model", model, *one, "--json")
    assert code == 0, err
    check = json.loads(out)
    code, out, err = run_cli(capsys, "run", "--model", model, *one, *TRAFFIC, "--json")
    assert code == 0, err
    run = json.loads(out)
    assert run["num_gpu_blocks"] == check["num_gpu_blocks"]
    m = hardware.model(model)
    bs = kv_cache.aligned_block_size(m, 16, 1, "none")
    assert bs > 16 and run["block_size"] == bs
    assert run["mamba_groups"] == groups and run["full_attention_groups"] == 1
    assert run["completed"] == 12


def test_vllm_default_prefix_caching_is_refused_with_the_fix(capsys):
    args = ["run", "--model", "qwen3.5-27b", "--gpu", "H100", *TRAFFIC]
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and err.count("\n") == 1
    assert "mamba_cache_mode align" in err and "add --no-enable-prefix-caching" in err


def test_run_and_check_name_the_largest_max_num_seqs_that_starts(capsys):
    """vLLM's default max_num_seqs 1,024 exceeds Qwen3.5-27B's Mamba cache
    blocks on one H100. The pool is profiled at max_num_seqs (a smaller one
    leaves more memory), so the fix is the largest n whose own pool holds n
    blocks, not the pool at 1,024: run and check name the same n, n starts
    and n + 1 does not."""
    code, out, _ = run_cli(capsys, "check", "--model", "qwen3.5-27b", *POOL, "--json")
    o = json.loads(out)
    pool, largest = o["num_gpu_blocks"], o["mamba_largest_max_num_seqs"]
    assert code == 1 and largest > pool, o
    code, _, err = run_cli(capsys, "run", "--model", "qwen3.5-27b", *POOL, *TRAFFIC)
    assert code == 2 and err.count("\n") == 1
    assert f"exceeds available Mamba cache blocks ({pool:,})" in err
    assert f"--max-num-seqs {largest:,} (the largest that starts)" in err
    for n, starts in ((largest, True), (largest + 1, False)):
        code, out, _ = run_cli(
            capsys, "check", "--model", "qwen3.5-27b", *POOL, "--max-num-seqs", str(n), "--json"
        )  # fmt: skip
        assert json.loads(out)["mamba_starts"] is starts, (n, out)


def test_safe_limit_refuses_a_mamba_hybrid_in_one_line(capsys):
    """safe-limit's analytic limit holds for full attention only."""
    code, _, err = run_cli(capsys, "safe-limit", "--model", "qwen3.5-27b", *POOL, *TRAFFIC)
    assert code == 2 and "full attention only" in err and err.count("\n") == 1


def test_max_rate_refuses_vllm_default_caching_on_a_mamba_hybrid(capsys):
    code, _, err = run_cli(
        capsys, "max-rate", "--model", "qwen3.5-27b", "--gpu", "H100", "--max-num-seqs", "32",
        *TRAFFIC,
    )  # fmt: skip
    assert code == 2 and "add --no-enable-prefix-caching" in err and err.count("\n") == 1
