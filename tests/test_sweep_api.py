"""The public sweep API (``planner.load_spec``, ``Spec.with_*``, ``planner.run_sweep``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pandas as pd
import pytest

from helpers import run_cli

ROOT = Path(__file__).parents[1]
QUICK = ROOT / "sweeps" / "quick.toml"
S1_CSV = ROOT / "planner" / "data" / "s1_seed7.csv"

# sweeps/quick.toml with the axes the API test sets, written out by hand.
EQUIVALENT = f"""
name = "quick"
horizon_s = 30.0

[workload]
kind = "trace"
path = "{S1_CSV}"

[latency]
kind = "linear"
alpha = [232.46, 1.75, 3357.44]
beta = [5752.71, 17.25, 6.00]

[scheduler]
block_size = 16
max_num_batched_tokens = 2048
max_model_len = 4096

[axes]
max_num_seqs = [16, 256]
num_gpu_blocks = {{ start = 1500, stop = 7463, num = 3, scale = "log" }}
watermark = [0.0, 0.05]
"""


def test_import_planner_stays_light():
    """``import planner`` must not pull numba or pandas in (the API is exported lazily)."""
    code = "import sys, planner; print('numba' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_edited_spec_runs_like_plan_sweep_on_the_same_toml(capsys, tmp_path):
    from planner import load_spec, run_sweep

    spec = (
        load_spec(QUICK)
        .replace(horizon_s=30.0)
        .with_axes(
            max_num_seqs=np.array([16, 256]),  # numpy values are accepted
            num_gpu_blocks={"start": 1500, "stop": 7463, "num": 3, "scale": "log"},
            preemption_mode=None,  # removed
            watermark=[0.0, 0.05],  # added
        )
    )
    assert list(spec.grid.columns) == ["config_id", "max_num_seqs", "num_gpu_blocks", "watermark"]
    df = run_sweep(spec)  # out=None: a temporary directory
    toml = tmp_path / "quick.toml"
    toml.write_text(EQUIVALENT)
    code, _, err = run_cli(capsys, "sweep", str(toml), "--out", str(tmp_path / "cli"))
    assert code == 0, err
    expected = pd.read_parquet(tmp_path / "cli")
    assert len(df) == 12
    pd.testing.assert_frame_equal(df, expected)


def test_run_sweep_writes_and_resumes_in_out(tmp_path):
    from planner import load_spec, run_sweep
    from planner.sweep.api import SweepError

    spec = (
        load_spec(QUICK)
        .replace(horizon_s=10.0)
        .with_axes(max_num_seqs=[8, 64], num_gpu_blocks=[2000], preemption_mode=["recompute"])
    )
    out = tmp_path / "r"
    df = run_sweep(spec, out, workers=1)
    assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS  # restored
    pd.testing.assert_frame_equal(df, pd.read_parquet(out))
    with pytest.raises(SweepError, match="already holds a sweep"):
        run_sweep(spec, out)
    pd.testing.assert_frame_equal(run_sweep(spec, out, resume=True), df)
    pd.testing.assert_frame_equal(run_sweep(spec, out, overwrite=True), df)


def test_edits_keep_relative_paths_and_the_unedited_text(tmp_path):
    from planner import load_spec

    spec = load_spec(QUICK)
    assert spec.to_toml() == QUICK.read_text()  # unedited: the file's own text
    edited = spec.with_workload(max_requests=50)
    assert edited.base_dir == QUICK.parent  # ../planner/data/... still resolves
    assert edited.sweep.workloads[()].num_requests == 50
    assert "max_requests = 50" in edited.to_toml()
    assert "max_requests" not in edited.with_workload(max_requests=None).to_toml()
    assert spec.sweep.workloads[()].num_requests > 50  # the original is unchanged


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda s: s.with_axes(bogus=[1, 2]), "axes.bogus: unknown axis"),
        (lambda s: s.with_axes(max_num_seqs=[0]), "max_num_seqs"),
        (lambda s: s.with_workload(max_requests=0), "workload.max_requests"),
        (lambda s: s.with_scheduler(block_size=16.5), "scheduler.block_size"),
        (lambda s: s.with_scheduler(max_num_seqs=4), "also given as an axis"),
        (lambda s: s.replace(axes={}), "with_axes"),
        (lambda s: s.replace(horizon_s=-1), "horizon_s"),
        (lambda s: s.with_axes(max_num_seqs=[object()]), "cannot use a object"),
    ],
)
def test_bad_edits_raise_one_line(edit, needle):
    from planner import load_spec
    from planner.sweep.api import SpecError

    with pytest.raises(SpecError) as e:
        edit(load_spec(QUICK))
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"memory_limit": "lots"}, "memory_limit"),
        ({"memory_limit": 0}, "memory_limit"),
        ({"workers": 0}, "workers"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"resume": True}, "need an out"),
        ({"resume": True, "overwrite": True}, "exclude"),
    ],
)
def test_bad_run_arguments_raise_one_line(kwargs, needle):
    from planner import load_spec, run_sweep
    from planner.sweep.api import SweepError

    with pytest.raises(SweepError) as e:
        run_sweep(load_spec(QUICK), **kwargs)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_run_arguments_are_keyword_only():
    from planner import run_sweep

    with pytest.raises(TypeError):
        run_sweep(QUICK, None, "4GiB")  # type: ignore[misc]


def test_replacing_an_axis_table_keeps_the_axis_order(tmp_path):
    """The axis order is the grid order: replacing ``[axes.max_num_seqs]`` (a table
    written before ``[axes]``) must not move that axis to the end."""
    from planner import load_spec

    path = tmp_path / "sub.toml"
    path.write_text(
        'name = "sub"\n[workload]\nkind = "synthetic"\nprompt = { mean = 100 }\n'
        "output = { mean = 50 }\n[axes.max_num_seqs]\nstart = 4\nstop = 64\nnum = 3\n"
        "[axes]\nnum_gpu_blocks = [500, 1000]\n"
    )
    spec = load_spec(path)
    assert list(spec.grid.columns) == ["config_id", "max_num_seqs", "num_gpu_blocks"]
    edited = spec.with_axes(max_num_seqs=[8, 16], rate=[1.0, 2.0])
    assert list(edited.grid.columns) == ["config_id", "max_num_seqs", "num_gpu_blocks", "rate"]
