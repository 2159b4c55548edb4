"""Findings of a hostile-input pass (2026-12-07), each a test that fails on the
code before its fix: a pool vLLM refuses to start is never recommended;
devices and oversized files are refused before they are read; an option
given twice (or with its alias, or both forms of a flag) is refused; a
damaged sweep dataset, two outputs naming one file, a real run recording a
request twice and a router picking more experts than exist are one line."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from helpers import run_cli, run_cli_as_typed
from planner.config import SchedulerConfig
from planner.inputs import check_readable
from planner.metrics import pool_starts
from planner.plots.heatmap import qualifying

SPEC = """
name = "tiny-pools"
[workload]
kind = "synthetic"
num_requests = 60
rate = 2
[workload.prompt]
kind = "constant"
mean = 100
[workload.output]
kind = "constant"
mean = 20
[slo]
ttft_slo = 5.0
[axes]
max_num_seqs = [4]
num_gpu_blocks = [50, 7463]
"""


def test_a_pool_vllm_refuses_is_simulated_but_never_recommended(tmp_path, capsys):
    spec = tmp_path / "tiny.toml"
    spec.write_text(SPEC)
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "r"))
    assert code == 0, err
    assert "refuses to start on the pool of 1 of 2 configs" in err
    df = pd.read_parquet(tmp_path / "r" / "data.parquet").sort_values("num_gpu_blocks")
    assert df["pool_starts"].tolist() == [False, True]
    assert df["completed"].iloc[0] > 0  # simulated: the tiny pool serves these short requests
    assert qualifying(df).tolist() == [False, True]
    # a dataset written before the column: the same rule from the config columns
    assert pool_starts(df.drop(columns=["pool_starts"])).tolist() == [False, True]
    code, _, _ = run_cli(capsys, "report", str(tmp_path / "r"), "--out", str(tmp_path / "p.html"))
    assert code == 0
    page = (tmp_path / "p.html").read_text()
    assert "Recommended: num_gpu_blocks 7,463 " in page  # before the fix: 50, the smaller


@pytest.mark.parametrize("command", ["safe-limit", "max-rate"])
def test_answers_for_a_pool_vllm_refuses_are_refused(capsys, command):
    args = [command, "--num-gpu-blocks", "50", "--num-requests", "20", "--ttft-slo", "5"]
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and err.count("\n") == 1, err
    assert "refuses to start on this pool: 50 blocks" in err and "--num-gpu-blocks 257" in err


def test_the_start_rule_is_vllms():
    cfg = SchedulerConfig(num_gpu_blocks=257, max_model_len=4096, block_size=16)
    assert cfg.pool_starts  # cdiv(4096, 16) + the null block
    assert not SchedulerConfig(num_gpu_blocks=256, max_model_len=4096, block_size=16).pool_starts
    from planner.config import BLIS_IMPLIED

    blis = SchedulerConfig(num_gpu_blocks=256, max_model_len=4096, block_size=16, compat="blis",
                           **BLIS_IMPLIED)  # fmt: skip
    assert blis.pool_starts  # BLIS has no such start-up check


def test_devices_and_oversized_files_are_refused_before_reading(tmp_path):
    with pytest.raises(ValueError, match="a device, not a file"):
        check_readable(Path(os.devnull), "spec")
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(2**20 + 1)  # sparse: no disk used
    with pytest.raises(ValueError, match="over the 1 MiB"):
        check_readable(big, "--model", 2**20)
    check_readable(big, "trace")  # no limit: a long trace may be large
    check_readable(tmp_path / "missing", "spec", 1)  # left to the reader's own message


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--model", os.devnull, "--gpu", "H100"],
        ["run", "--trace-file", os.devnull, "--trace-format", "jsonl"],
        ["sweep", os.devnull, "--dry-run"],
    ],
)
def test_a_device_as_input_is_one_line(capsys, args):
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and err.count("\n") == 1 and "a device, not a file" in err, err


@pytest.mark.parametrize(
    "args, said",
    [
        (["check", "--num-gpu-blocks", "50", "--num-gpu-blocks-override", "7463"],
         "--num-gpu-blocks then --num-gpu-blocks-override"),
        (["run", "--num-requests", "20", "--num-requests=30"],
         "--num-requests then --num-requests"),
        (["run", "--enable-prefix-caching", "--no-enable-prefix-caching"],
         "--enable-prefix-caching then --no-enable-prefix-caching"),
        (["run", "--max-num-seqs", "8", "--max-num-running-reqs", "64"],
         "--max-num-seqs then --max-num-running-reqs"),
    ],
)  # fmt: skip
def test_an_option_given_twice_is_refused(capsys, args, said):
    code, out, err = run_cli_as_typed(capsys, *args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert said in err


def test_options_that_take_several_values_may_repeat(capsys):
    code, _, err = run_cli_as_typed(capsys, "run", "--num-requests", "5", "--fail-on", "livelocked",
                           "--fail-on", "thrashing")  # fmt: skip
    assert "given 2 times" not in err
    assert code == 0, err


def test_a_damaged_sweep_dataset_is_one_line(tmp_path, capsys):
    spec = tmp_path / "tiny.toml"
    spec.write_text(SPEC)
    out = tmp_path / "r"
    assert run_cli(capsys, "sweep", str(spec), "--out", str(out))[0] == 0
    data = out / "data.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    whole = pq.read_table(data)
    for name, table in [
        ("outcome", whole.drop_columns(["outcome"])),
        ("meets_slo", whole.drop_columns(["meets_slo"])),  # the spec has an [slo] table
        ("twice", pa.concat_tables([whole, whole])),
    ]:
        pq.write_table(table, data)
        for args in (["heatmap", str(out), "--out", str(tmp_path / "h.png"), "--recommend"],
                     ["report", str(out), "--out", str(tmp_path / "p.html")]):  # fmt: skip
            code, _, err = run_cli(capsys, *args)
            assert code == 2 and err.count("\n") == 1, (name, args, err)
            assert "not a whole sweep dataset" in err or "has no SLO columns" in err


def test_two_outputs_of_one_run_may_not_name_one_file(tmp_path, capsys):
    same = str(tmp_path / "same.parquet")
    code, _, err = run_cli(capsys, "run", "--num-requests", "5", "--trace", same,
                           "--requests-out", same)  # fmt: skip
    assert code == 2 and "--trace and --requests-out name the same file" in err, err
    folder = tmp_path / "o"
    code, _, err = run_cli(capsys, "run", "--num-requests", "5", "--out", str(folder),
                           "--requests-out", str(folder / "steps.parquet"))  # fmt: skip
    assert code == 2 and "name the same file" in err and not folder.exists(), err


def test_a_run_folder_with_a_request_twice_is_refused(tmp_path, capsys):
    import shutil

    src = Path(__file__).parents[1] / "planner/data/real-runs-llmservingsim/RTX4090_Llama-3.1-8B"
    run = tmp_path / "run"
    shutil.copytree(src, run)
    lines = (run / "requests.jsonl").read_text().splitlines()
    (run / "requests.jsonl").write_text("\n".join(lines + lines[:2]) + "\n")
    code, _, err = run_cli(capsys, "validate", str(run), "--model", "llama-3.1-8b",
                           "--latency", "roofline")  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert f"line {len(lines) + 1}: request_id 'bench-0' repeats line 1" in err


def test_a_router_picking_more_experts_than_exist_is_refused(tmp_path, capsys):
    import json

    entry = Path(__file__).parents[1] / "planner/data/models/llama-3.1-8b-instruct.json"
    cfg = json.loads(entry.read_text())["config"]
    cfg.update(model_type="mixtral", num_local_experts=8, num_experts_per_tok=16)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, _, err = run_cli(capsys, "check", "--model", str(path), "--gpu", "H100")
    assert code == 2 and err.count("\n") == 1, err
    assert "num_experts_per_tok (16) exceeds the routed experts (8)" in err


def test_plan_size_skips_a_candidate_whose_pool_vllm_refuses(tmp_path):
    """Qwen3-32B at max_model_len 40,960: one H100's pool cannot hold one such
    request, so that candidate is skipped with vLLM's reason; two GPUs start."""
    from planner.answers.sizing import candidates

    spec = tmp_path / "sz.toml"
    spec.write_text(
        SPEC.replace('name = "tiny-pools"', 'name = "sz"').split("[slo]")[0]
        + '[hardware]\nmodel = "qwen3-32b"\ngpu = "H100"\n[latency]\nkind = "roofline"\n'
        + "[axes]\nmax_num_seqs = [8]\nmax_model_len = [40960]\n"
    )
    got = {c.tp: c for c in candidates(spec, ["H100"], [1, 2], 1)}
    assert got[1].spec is None and "vLLM 0.33 refuses to start on this pool" in got[1].skipped
    assert got[2].spec is not None and got[2].skipped == ""


def test_plan_size_refuses_a_device_as_its_spec(capsys):
    code, _, err = run_cli(capsys, "size", os.devnull, "--gpus", "H100")
    assert code == 2 and err.count("\n") == 1 and "a device, not a file" in err, err
