"""``plan sweep``: specs, determinism, resume after a kill, agreement with ``plan run``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pytest

from helpers import run_cli
from planner.capacity import analytic_safe_max_num_seqs
from planner.sweep.spec import SpecError, int_range, load_spec

ROOT = Path(__file__).parents[1]
S1_CSV = ROOT / "planner" / "data" / "s1_seed7.csv"

SPEC = f"""
name = "t"
horizon_s = 40.0

[workload]
kind = "trace"
path = "{S1_CSV}"

[scheduler]
max_model_len = 4096

[axes]
max_num_seqs = {{ start = 8, stop = 300, num = 5, scale = "log" }}
num_gpu_blocks = [1500, 4000, 7463]
preemption_mode = ["recompute", "restart"]
"""

SYNTH = """
name = "s"
horizon_s = 20.0

[workload]
kind = "synthetic"
num_requests = 60
arrival = "poisson"
prompt = { kind = "lognormal", mean = 400, stdev = 300, min = 10, max = 3000 }
output = { kind = "lognormal", mean = 300, stdev = 300, min = 5, max = 3000 }

[axes]
max_num_seqs = [4, 64]
num_gpu_blocks = [300, 3000]
rate = [2.0, 6.0]
seed = [1, 2]
"""


def write(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_int_range_gives_distinct_log_spaced_integers():
    v = int_range(8, 1024, 64, "log")
    assert len(v) == 64 and len(set(v)) == 64
    assert v[0] == 8 and v[-1] == 1024 and v == sorted(v)
    with pytest.raises(SpecError):
        int_range(1, 5, 10, "linear")


@pytest.mark.slow
def test_shipped_specs_validate():
    for spec in sorted((ROOT / "sweeps").glob("*.toml")):
        sw = load_spec(spec)
        assert len(sw.grid) == len(sw.configs) > 0
    assert len(load_spec(ROOT / "sweeps" / "seed-starvation.toml").grid) == 2 * 64 * 64


def test_sweep_rows_equal_plan_run(capsys, tmp_path):
    spec = write(tmp_path, SPEC)
    out = tmp_path / "out"
    code, _, _ = run_cli(capsys, "sweep", str(spec), "--out", str(out))
    assert code == 0
    df = pd.read_parquet(out)
    assert len(df) == 30 and (df.config_id.to_numpy() == range(30)).all()
    wl = load_spec(spec).workloads[()]
    mean = wl.prompt_tokens.mean() + wl.output_tokens.mean()
    expect = [analytic_safe_max_num_seqs(n, 16, mean) for n in df.num_gpu_blocks]
    assert df.kv_safe_max_num_seqs.tolist() == expect
    for _, row in df.sample(6, random_state=1).iterrows():
        code, text, _ = run_cli(
            capsys,
            "run",
            "--requests-csv",
            str(S1_CSV),
            "--horizon",
            "40",
            "--max-num-seqs",
            str(row.max_num_seqs),
            "--num-gpu-blocks",
            str(row.num_gpu_blocks),
            "--preemption-mode",
            row.preemption_mode,
            "--json",
        )
        assert code == 0
        single = json.loads(text)
        for key, value in single.items():
            if key in ("workload", "num_gpu_blocks_derived", "wall_s", "sim_tokens_per_s"):
                continue
            if key in ("stuck_request_ids", "stuck_preempted_request_ids"):
                continue  # per-request lists of plan run, not sweep columns
            if key in ("num_gpu_blocks_sized_at", "server_settings"):
                continue  # where plan run sized a derived pool; whose each setting is
            if key in ("planner_version", "vllm_version_mirrored", "model", "gpu"):
                continue  # who made the result (a sweep's Parquet metadata); the options given
            if key in ("tensor_parallel_size", "speculation"):
                continue  # options of plan run, not columns of a pool-given sweep
            got = row[key]
            if value is None:  # JSON has no NaN or inf: both print as null
                assert pd.isna(got) or got == float("inf"), key
            elif isinstance(value, float):
                assert got == pytest.approx(value, rel=1e-12), key
            else:
                assert got == value, key


def test_dataset_is_identical_across_chunkings_and_threads(capsys, tmp_path):
    spec = write(tmp_path, SYNTH)
    blobs = []
    for i, extra in enumerate(
        (["--chunk-size", "3", "--workers", "1"], ["--chunk-size", "64", "--workers", "2"], [])
    ):
        out = tmp_path / f"o{i}"
        code, _, _ = run_cli(capsys, "sweep", str(spec), "--out", str(out), *extra)
        assert code == 0
        blobs.append((out / "data.parquet").read_bytes())
    assert blobs[0] == blobs[1] == blobs[2]
    df = pd.read_parquet(tmp_path / "o0")
    assert len(df) == 16
    assert df.groupby(["rate", "seed"]).workload_fingerprint.nunique().eq(1).all()
    assert df.workload_fingerprint.nunique() == 4


def test_pandas_polars_duckdb_read_the_dataset(capsys, tmp_path):
    spec = write(tmp_path, SYNTH)
    out = tmp_path / "o"
    assert run_cli(capsys, "sweep", str(spec), "--out", str(out))[0] == 0
    a = pd.read_parquet(out)
    b = pl.read_parquet(out / "*.parquet")
    c = duckdb.sql(f"select * from read_parquet('{out}/*.parquet') order by config_id").df()
    assert len(a) == b.height == len(c) == 16
    assert list(a.completed) == b["completed"].to_list() == list(c.completed)


@pytest.mark.slow
def test_killed_sweep_resumes_to_the_same_dataset(capsys, tmp_path):
    spec = write(tmp_path, SPEC)
    ref = tmp_path / "ref"
    assert run_cli(capsys, "sweep", str(spec), "--out", str(ref), "--chunk-size", "2")[0] == 0
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "planner.cli", "sweep", str(spec), "--out", str(out)]
    proc = subprocess.Popen(
        [*cmd, "--chunk-size", "2", "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    chunks = out / "_chunks"
    while time.time() < deadline and proc.poll() is None:
        if chunks.exists() and len(list(chunks.glob("chunk-*.parquet"))) >= 2:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = list(chunks.glob("chunk-*.parquet"))
    assert 2 <= len(done) < 15
    assert not (out / "data.parquet").exists()
    assert not list(chunks.glob(".*.tmp"))
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(out))
    assert code == 2 and "--resume" in err
    assert run_cli(capsys, "sweep", str(spec), "--out", str(out), "--resume")[0] == 0
    assert (out / "data.parquet").read_bytes() == (ref / "data.parquet").read_bytes()


BAD_SPECS = [
    (SPEC.replace('name = "t"', 'name = "t"\ncolour = "red"'), "colour"),
    (SPEC.replace("num_gpu_blocks = [1500, 4000, 7463]", "num_gpu_blocks = []"), "num_gpu_blocks"),
    (SPEC.replace("[1500, 4000, 7463]", "[1500, -4, 7463]"), "num_gpu_blocks"),
    (SPEC.replace("max_model_len = 4096", "max_model_len = -1"), "max_model_len"),
    (SPEC.replace(str(S1_CSV), "/nonexistent/trace.csv"), "no such file"),
    (SPEC.replace('["recompute", "restart"]', '["recompute", "drop"]'), "preemption_mode"),
    (SPEC.replace("horizon_s = 40.0", "horizon_s = -1"), "horizon_s"),
    (
        SPEC.replace(
            'preemption_mode = ["recompute", "restart"]',
            "max_num_batched_tokens = { start = 1, stop = 100000, num = 100000 }\n"
            "long_prefill_token_threshold = { start = 1, stop = 100, num = 50 }",
        ),
        "over the limit",
    ),
    (SPEC.replace("[axes]", "[axes]\nbogus_axis = [1, 2]"), "bogus_axis"),
    ("name = [", "not valid TOML"),
    (SPEC.replace("[1500, 4000, 7463]", "{ start = 8, stop = inf, num = 4 }"), "num_gpu_blocks"),
    (SPEC.replace("[1500, 4000, 7463]", "[9223372036854775807]"), "num_gpu_blocks"),
    (SPEC.replace("horizon_s = 40.0", "horizon_s = 1e12"), "horizon"),
    (SPEC.replace("max_model_len = 4096", 'null_block = "no"'), "null_block"),
    (SPEC.replace("max_model_len = 4096", 'watermark = "high"'), "watermark"),
    (SPEC.replace('name = "t"', 'name = ".."'), "name"),
    (SYNTH.replace("seed = [1, 2]", "seed = [1.5]"), "seed"),
    (SYNTH.replace('arrival = "poisson"', 'arrival = "poisson"\nrate = 3.0'), "workload.rate"),
    (SPEC.replace("[1500, 4000, 7463]", "{ start = 10, stop = 10, num = 3 }"), "distinct"),
    (
        SPEC.replace(
            'preemption_mode = ["recompute", "restart"]',
            "watermark = { start = 0.1, stop = 0.1, num = 3 }",
        ),
        "repeated",
    ),
]


@pytest.mark.parametrize("text,needle", BAD_SPECS)
def test_bad_specs_are_one_line_and_write_nothing(capsys, tmp_path, text, needle):
    spec = write(tmp_path, text)
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, "sweep", str(spec), "--out", str(out))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert not out.exists()


def test_missing_spec_and_bad_options(capsys, tmp_path):
    code, _, err = run_cli(capsys, "sweep", str(tmp_path / "nope.toml"))
    assert code == 2 and "no such spec file" in err
    spec = write(tmp_path, SPEC)
    for args, needle in (
        (["--memory-limit", "lots"], "--memory-limit"),
        (["--chunk-size", "0"], "--chunk-size"),
        (["--workers", "99"], "--workers"),
        (["--memory-limit", "10KB"], "--memory-limit"),
    ):
        code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "o"), *args)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_dry_run_prints_plan_and_writes_nothing(capsys, tmp_path):
    spec = write(tmp_path, SPEC)
    code, out, err = run_cli(capsys, "sweep", str(spec), "--dry-run", "--out", str(tmp_path / "o"))
    assert code == 0
    # The report is the command's result: stdout, so it can be piped.
    assert "30 configs" in out and "chunks:" in out and "estimated run time" in out
    assert not (tmp_path / "o").exists()


def test_resume_keeps_the_original_chunk_plan(tmp_path):
    """A resume must not re-chunk: a different plan would mismatch the chunk files."""
    from planner.sweep import driver, store

    sw = load_spec(write(tmp_path, SPEC))
    plan = driver.plan_chunks(sw, 4, 10**9)
    need = plan.bytes_per_config[()]
    with pytest.raises(driver.SweepError, match="too small to resume"):
        driver.plan_chunks(sw, None, 2 * need, fixed_sizes=plan.sizes)
    again = driver.plan_chunks(sw, 999, 10**9, fixed_sizes=plan.sizes)
    assert [c.config_ids.tolist() for c in again.chunks] == [
        c.config_ids.tolist() for c in plan.chunks
    ]
    out = tmp_path / "o"
    manifest = driver._manifest(sw, plan)
    manifest.chunks[0] = store.write_chunk(driver.run_chunk(sw, plan.chunks[1]), out, 0)
    with pytest.raises(driver.SweepError, match="does not match the chunk plan"):
        driver._verify_chunks(out, plan, manifest, None)


def test_prefix_caching_and_async_axes(capsys, tmp_path):
    body = SYNTH.replace(
        'arrival = "poisson"',
        'arrival = "poisson"\nprefix_groups = 2\nprefix_len = 256\nprefix_share = 0.9',
    ).replace(
        "seed = [1, 2]", "enable_prefix_caching = [false, true]\nasync_scheduling = [false, true]"
    )
    out = tmp_path / "o"
    assert run_cli(capsys, "sweep", str(write(tmp_path, body)), "--out", str(out))[0] == 0
    df = pd.read_parquet(out)
    assert len(df) == 32
    keys = ["max_num_seqs", "num_gpu_blocks", "rate", "async_scheduling"]
    pivot = df.pivot_table(index=keys, columns="enable_prefix_caching", values="prefill_tokens")
    assert (pivot[True] < pivot[False]).all()  # shared prefixes are computed once
    assert (df.invariant_errors == 0).all()
    bad = body.replace("prefix_share = 0.9", "prefix_share = 1.9")
    code, _, err = run_cli(capsys, "sweep", str(write(tmp_path, bad)), "--out", str(tmp_path / "b"))
    assert code == 2 and "prefix_share" in err


TRACE_SPEC = """
name = "tr"

[workload]
kind = "trace"
path = "log.csv"
columns = { arrival = "ts", output = "completion_tokens" }

[scheduler]
num_gpu_blocks = 200

[axes]
max_num_seqs = [1, 4]
rate_scale = [1.0, 2.0]
"""
LOG = "ts,prompt_tokens,completion_tokens,priority,session\n0,64,400,5,a\n0,64,8,0,b\n0,64,8,0,c\n"


def test_trace_spec_columns_priority_and_ignored_columns(capsys, tmp_path):
    write(tmp_path, LOG, "log.csv")
    sw = load_spec(write(tmp_path, TRACE_SPEC))
    wl = sw.workloads[(1.0,)]
    assert wl.output_tokens.tolist() == [400, 8, 8] and wl.priority.tolist() == [5, 0, 0]
    # read twice (two rate_scale values), reported once each
    assert len(sw.warnings) == 2, sw.warnings
    assert "ignored column(s) session" in sw.warnings[0]
    assert "priorities have no effect" in sw.warnings[1]
    code, _, err = run_cli(capsys, "sweep", str(tmp_path / "spec.toml"), "--dry-run")
    assert code == 0 and err.count("plan: warning:") == 2
    with_policy = TRACE_SPEC.replace("[axes]", '[axes]\npolicy = ["fcfs", "priority"]')
    sw = load_spec(write(tmp_path, with_policy))
    assert not [w for w in sw.warnings if "no effect" in w]
    out = tmp_path / "o"
    assert run_cli(capsys, "sweep", str(tmp_path / "spec.toml"), "--out", str(out))[0] == 0
    df = pd.read_parquet(out).query("max_num_seqs == 1 and rate_scale == 1.0")
    ttft = df.set_index("policy")["ttft_s_mean"]
    assert ttft["priority"] < ttft["fcfs"] / 2  # the priority column takes effect


@pytest.mark.parametrize(
    "old,new,needle",
    [
        ('arrival = "ts"', 'colour = "ts"', "workload.columns: unknown key 'colour'"),
        ('output = "completion_tokens"', 'output = "ts"', "column 'ts' is mapped twice"),
        ('output = "completion_tokens"', 'output = "done"', "missing column 'done'"),
        ('arrival = "ts", ', "", "missing column 'arrival_time_s' or 'timestamp'"),
    ],
)
def test_bad_trace_spec_columns_are_one_line(capsys, tmp_path, old, new, needle):
    write(tmp_path, LOG, "log.csv")
    spec = write(tmp_path, TRACE_SPEC.replace(old, new))
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "o"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert needle in err and not (tmp_path / "o").exists()


def test_synthetic_spec_refuses_columns(tmp_path):
    spec = write(
        tmp_path, SYNTH.replace('arrival = "poisson"', 'arrival = "poisson"\ncolumns = {}')
    )
    with pytest.raises(SpecError, match="columns: no effect in a synthetic workload"):
        load_spec(spec)


def test_progress_of_a_one_chunk_sweep_moves_in_tenths(capsys, tmp_path):
    """Issue 31: a sweep of one chunk reports as its configs finish (api.simulate's
    on_config), not only at 0% and 100%; the count ends at the grid's size."""
    from planner.sweep.api import run_sweep

    run_sweep(write(tmp_path, SPEC), tmp_path / "out", quiet=False)
    marks = [ln for ln in capsys.readouterr().err.splitlines() if "configs (" in ln]
    assert len(marks) >= 8, marks  # start, most tenths, end
    assert marks[-1].split(": ")[1].startswith("30/30 configs (100%)"), marks[-1]
    done = [int(m.split(": ")[1].split("/")[0]) for m in marks]
    assert done == sorted(done)
