"""``plan heatmap`` and the notebooks (executed headless on small grids)."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.image as mpimg
import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from helpers import run_cli
from planner.cli import main

ROOT = Path(__file__).parents[1]
S1_CSV = ROOT / "planner" / "data" / "s1_seed7.csv"
SPEC = f"""
name = "hm"
horizon_s = 30.0

[workload]
kind = "trace"
path = "{S1_CSV}"

[axes]
max_num_seqs = {{ start = 8, stop = 512, num = 6, scale = "log" }}
num_gpu_blocks = {{ start = 1000, stop = 20000, num = 5, scale = "log" }}
preemption_mode = ["recompute", "restart"]
watermark = [0.0, 0.05]
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("hm")
    spec = d / "hm.toml"
    spec.write_text(SPEC)
    main(["sweep", str(spec), "--out", str(d / "out")])  # returns on success
    return d / "out"


@pytest.mark.parametrize("w,h", [(1200, 600), (640, 480)])
def test_heatmap_png_has_the_asked_size(capsys, results, tmp_path, w, h):
    out = tmp_path / "h.png"
    code, _, err = run_cli(
        capsys, "heatmap", str(results), "--where", "watermark=0.0", "--out", str(out),
        "--width", str(w), "--height", str(h), "--mark", "256,7463", "--z", "throughput",
    )  # fmt: skip
    assert code == 0, err
    img = mpimg.imread(out)
    assert img.shape[:2] == (h, w)
    assert out.stat().st_size > 10_000
    assert np.std(img[..., :3]) > 0.05  # not a blank canvas


def test_heatmap_svg_and_no_facet(capsys, results, tmp_path):
    out = tmp_path / "h.svg"
    code, _, _ = run_cli(
        capsys, "heatmap", str(results), "--where", "watermark=0.05",
        "--where", "preemption_mode=restart", "--facet", "", "--out", str(out),
    )  # fmt: skip
    assert code == 0 and out.read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--z", "no_such_metric"], "--z"),
        (["--x", "bogus"], "--x"),
        ([], "pin watermark"),
        (["--where", "watermark"], "--where"),
        (["--where", "watermark=0.3"], "no rows"),
        (["--where", "watermark=0", "--out", "x.gif"], "--out"),
        (["--where", "watermark=0", "--mark", "1;2"], "--mark"),
        (["--where", "watermark=0", "--mark", "-5,1e30"], "outside the plotted range"),
        (["--where", "watermark=0", "--facet", "nosuchcol"], "--facet"),
        (["--where", "watermark=0", "--facet", "outcome"], "--facet"),
        (["--where", "watermark=0", "--z", "outcome"], "not numeric"),
        (["--where", "watermark=0", "--y", "max_num_seqs"], "different axes"),
        (["--where", "watermark=0", "--y", "preemptions"], "not an axis"),
    ],
)
def test_heatmap_bad_input_one_line(capsys, results, tmp_path, args, needle):
    if "--out" not in args:
        args = [*args, "--out", str(tmp_path / "x.png")]
    code, _, err = run_cli(capsys, "heatmap", str(results), *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_heatmap_missing_results(capsys, tmp_path):
    code, _, err = run_cli(capsys, "heatmap", str(tmp_path / "nothing"))
    assert code == 2 and "no sweep dataset" in err


@pytest.mark.parametrize(
    "name,draws",
    [
        ("starvation_regions.ipynb", True),
        ("azure_capacity.ipynb", True),
        ("mitigations.ipynb", True),
    ],
)
def test_notebooks_execute_on_small_grids(name, draws, monkeypatch, tmp_path):
    monkeypatch.setenv("PLANNER_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' sweeps and pictures
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    # The notebooks use the public API (planner.load_spec, Spec.with_*, planner.run_sweep),
    # not the driver's positional internals or TOML string replacement.
    assert "planner.sweep" not in code and "driver." not in code and "read_text()" not in code
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    before = sorted(p.name for p in (ROOT / "notebooks").iterdir())
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    )
    client.execute()  # a failing cell raises CellExecutionError
    images = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "image/png" in o.get("data", {})
    ]
    assert bool(images) == draws, "heatmap images expected" if draws else "no images expected"
    assert os.environ["PLANNER_NOTEBOOK_SMALL"] == "1"
    assert sorted(p.name for p in (ROOT / "notebooks").iterdir()) == before
    assert list(tmp_path.glob("planner-nb-*/*.png")), "pictures go to the temporary folder"
