"""The ``plan`` command line: output, traces, and one-line errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from helpers import run_cli
from planner.metrics import OUTCOMES

S1_CSV = str(Path(__file__).parents[1] / "planner" / "data" / "s1_seed7.csv")


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--max-num-running-reqs", "-3"], "--max-num-seqs"),
        (["--num-gpu-blocks", "-5"], "--num-gpu-blocks"),
        (["--block-size", "0"], "--block-size"),
        (["--max-num-batched-tokens", "abc"], "--max-num-batched-tokens"),
        (["--max-model-len", "1.5"], "--max-model-len"),
        (["--horizon", "0"], "--horizon"),
        (["--horizon", "-2"], "--horizon"),
        (["--watermark", "1.5"], "--watermark"),
        (["--preemption-mode", "drop"], "--preemption-mode"),
        (["--stop-bound", "nope"], "--stop-bound"),
        (["--policy", "lifo"], "--policy"),
        (["--bogus-flag", "1"], "--bogus-flag"),
        (["--beta-coeffs", "1,2"], "--beta-coeffs"),
        (["--alpha-coeffs", "a,b,c"], "--alpha-coeffs"),
        (["--rate", "0"], "--rate"),
        (["--num-requests", "0"], "--num-requests"),
        (["--trace", "out.csv", "--num-requests", "2"], "--trace"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, args, flag):
    code, out, err = run_cli(capsys, "run", *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert flag in lines[0]
    assert "Traceback" not in err


def test_bad_csv_names_file_and_row(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_time_s,prompt_tokens,output_tokens\n0.1,10,5\n0.2,x,5\n")
    code, _, err = run_cli(capsys, "run", "--requests-csv", str(bad))
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "bad.csv" in err and "row 3" in err and "prompt_tokens" in err


@pytest.mark.parametrize(
    "body,needle",
    [
        ("0.1,300,10,5\n0.2,300,10,5\n", "more fields than the header"),
        ("0.1,300,4294967297\n", "output_tokens"),
        ("1e300,300,4\n", "arrival_time_s"),
        ("0.1,-300,4\n", "prompt_tokens"),
        ("0.1,300.5,4\n", "prompt_tokens"),
        ("0.2,30,4\n0.1,30,4\n", "backwards"),
        ("", "no requests"),
    ],
)
def test_malformed_csv_rows(capsys, tmp_path, body, needle):
    f = tmp_path / "t.csv"
    f.write_text("arrival_time_s,prompt_tokens,output_tokens\n" + body)
    code, _, err = run_cli(capsys, "run", "--requests-csv", str(f))
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert needle in err and "t.csv" in err


def test_unwritable_trace_names_the_users_path(capsys):
    code, _, err = run_cli(capsys, "run", "--num-requests", "2", "--trace", "/proc/x.parquet")
    assert code == 2
    assert err.strip() == "plan: error: cannot write /proc/x.parquet: No such file or directory"


def test_all_rejected_is_starved(capsys):
    code, out, _ = run_cli(capsys, "run", "--num-requests", "3", "--max-model-len", "1", "--json")
    assert code == 0
    row = json.loads(out)
    assert (row["rejected"], row["completed"], row["outcome"]) == (3, 0, "starved")


def test_run_json_on_s1_exact(capsys):
    code, out, _ = run_cli(
        capsys,
        "run",
        "--requests-csv",
        S1_CSV,
        "--max-num-seqs",
        "32",
        "--horizon",
        "120",
        "--json",
    )
    assert code == 0
    row = json.loads(out)
    assert row["max_num_seqs"] == 32
    assert abs(row["completed"] - 167) <= 2
    assert row["preemptions"] == 0
    assert row["outcome"] == "ok"


def test_run_writes_step_trace(capsys, tmp_path):
    path = tmp_path / "trace.parquet"
    code, out, _ = run_cli(
        capsys,
        "run",
        "--requests-csv",
        S1_CSV,
        "--max-num-seqs",
        "256",
        "--horizon",
        "30",
        "--trace",
        str(path),
        "--json",
    )
    assert code == 0
    steps = json.loads(out)["steps"]
    df = pd.read_parquet(path)
    assert len(df) == steps
    assert (df.step.to_numpy() == range(steps)).all()
    assert (df.end_s >= df.start_s).all() and (df.start_s.diff().dropna() >= 0).all()
    assert (df.free_blocks >= 0).all() and (df.free_blocks <= 7462).all()
    per_req = df.request_tokens.apply(sum)
    assert (per_req == df.scheduled_tokens).all()
    assert not list(tmp_path.glob(".*.tmp"))


def _s3_csv(tmp_path: Path, output_tokens: int) -> str:
    """Scenario S3's request (prompt 1,000) on its own, as a trace file."""
    f = tmp_path / "s3.csv"
    f.write_text(f"arrival_time_s,prompt_tokens,output_tokens\n0,1000,{output_tokens}\n")
    return str(f)


S3_POOL = ("--num-gpu-blocks", "64", "--block-size", "16", "--max-model-len", "1024")


def test_livelock_names_the_stuck_request_and_fail_on_sets_the_exit(capsys, tmp_path):
    args = ("run", *S3_POOL, "--requests-csv", _s3_csv(tmp_path, 24))
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and "livelocked: 1 request entered" in out and "ids, 0-based" in out
    assert "preempted among them: 0" in out
    assert "fix: --num-gpu-blocks 65 or --max-model-len 1,008" in " ".join(out.split())
    code, out, _ = run_cli(capsys, *args, "--json")
    row = json.loads(out)
    assert code == 0 and row["outcome"] == "livelocked"
    assert row["stuck_request_ids"] == [0] and row["stuck_preempted_request_ids"] == [0]
    code, _, _ = run_cli(capsys, *args, "--fail-on", "livelocked,thrashing")
    assert code == 1
    code, _, _ = run_cli(capsys, *args, "--fail-on", "thrashing", "--fail-on", "starved")
    assert code == 0
    # Control (S3): 8 output tokens fit the pool; nothing is stuck.
    ok = ("run", *S3_POOL, "--requests-csv", _s3_csv(tmp_path, 8))
    code, out, _ = run_cli(capsys, *ok, "--fail-on", "livelocked", "--json")
    row = json.loads(out)
    assert code == 0 and row["outcome"] == "ok" and row["stuck_request_ids"] == []


@pytest.mark.parametrize("cls", [o for o in OUTCOMES if o != "ok"])
def test_fail_on_accepts_every_failure_class(capsys, cls):
    code, out, _ = run_cli(capsys, "run", "--num-requests", "2", "--fail-on", cls, "--json")
    assert code == (1 if json.loads(out)["outcome"] == cls else 0)


@pytest.mark.parametrize("value", ["nope", "ok", "", "livelocked,bogus"])
def test_fail_on_rejects_unknown_classes(capsys, value):
    code, _, err = run_cli(capsys, "run", "--num-requests", "2", "--fail-on", value)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--fail-on" in err
