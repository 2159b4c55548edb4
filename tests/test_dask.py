"""``plan sweep --executor dask`` on a real LocalCluster: identical datasets,
a failing chunk reported by name, and --resume after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_cli
from planner.cli.commands import main
from planner.sweep.executors import FAIL_CHUNK_ENV

S1_CSV = Path(__file__).parents[1] / "planner" / "data" / "s1_seed7.csv"
SPEC = f"""
name = "dk"
horizon_s = 30.0

[workload]
kind = "trace"
path = "{S1_CSV}"

[axes]
max_num_seqs = {{ start = 8, stop = 512, num = 6, scale = "log" }}
num_gpu_blocks = [1500, 4000, 7463]
preemption_mode = ["recompute", "restart"]
"""


@pytest.fixture(scope="module")
def local_blob(tmp_path_factory):
    d = tmp_path_factory.mktemp("local")
    spec = d / "dk.toml"
    spec.write_text(SPEC)
    main(["sweep", str(spec), "--out", str(d / "out"), "--chunk-size", "5"])
    return spec, (d / "out" / "data.parquet").read_bytes()


@pytest.mark.slow
def test_dask_local_cluster_matches_local_executor(capsys, tmp_path, local_blob):
    spec, blob = local_blob
    out = tmp_path / "dask"
    code, _, err = run_cli(
        capsys, "sweep", str(spec), "--out", str(out), "--chunk-size", "5",
        "--executor", "dask", "--dask-workers", "2",
    )  # fmt: skip
    assert code == 0, err
    assert (out / "data.parquet").read_bytes() == blob


@pytest.mark.slow
def test_failing_chunk_is_named_and_resume_completes(capsys, tmp_path, local_blob, monkeypatch):
    spec, blob = local_blob
    out = tmp_path / "dask"
    monkeypatch.setenv(FAIL_CHUNK_ENV, "3")
    code, _, err = run_cli(
        capsys, "sweep", str(spec), "--out", str(out), "--chunk-size", "5",
        "--executor", "dask", "--dask-workers", "2",
    )  # fmt: skip
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert "chunk 3 failed twice" in line and "--resume" in line
    assert not (out / "data.parquet").exists()
    assert not (out / "_chunks" / "chunk-00003.parquet").exists()
    monkeypatch.delenv(FAIL_CHUNK_ENV)
    code, _, err = run_cli(
        capsys, "sweep", str(spec), "--out", str(out), "--resume",
        "--executor", "dask", "--dask-workers", "2",
    )  # fmt: skip
    assert code == 0, err
    assert (out / "data.parquet").read_bytes() == blob


@pytest.mark.slow
def test_unreachable_scheduler_is_one_line(capsys, tmp_path, local_blob, monkeypatch):
    from planner.sweep import executors

    monkeypatch.setattr(executors, "CONNECT_TIMEOUT", "1s")  # the refusal, not the wait
    spec, _ = local_blob
    code, _, err = run_cli(
        capsys, "sweep", str(spec), "--out", str(tmp_path / "o"),
        "--executor", "dask", "--address", "tcp://127.0.0.1:9",
    )  # fmt: skip
    assert code == 2
    assert "cannot reach the Dask scheduler" in err.strip().splitlines()[-1]
    code, _, err = run_cli(capsys, "sweep", str(spec), "--address", "tcp://127.0.0.1:9")
    assert code == 2 and "--executor dask" in err


def test_the_workers_warm_up_the_variants_the_sweep_runs():
    """A sweep's chunks run its own kernel variants (prefix caching values,
    ``kernel.variant`` markers); the warm-up before the tasks loads exactly
    those, so no task waits for a compile."""
    from planner import api
    from planner.kernel.variant import ALL
    from planner.sweep import executors

    assert executors._warm_variants((False, True), ALL)
    assert api.kernel_status(1, False, False, ALL) == "loaded"
    assert api.kernel_status(1, False, True, ALL) == "loaded"
