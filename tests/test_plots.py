"""``plan heatmap`` and the notebooks (executed headless on small grids)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import matplotlib.image as mpimg
import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from helpers import run_cli
from planner.cli.commands import main

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


@pytest.mark.slow
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
@pytest.mark.slow
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


# --- One colour scale: equal values get equal colours in every panel (issue 18, case 4) ---


def _dataset(tmp_path: Path, z: list[float], **axes: list) -> Path:
    """A hand-made sweep folder: the Cartesian product of ``axes`` (x fastest last),
    metric ``completed`` = ``z`` in that order, every cell ``ok``."""
    import pandas as pd

    from planner.sweep.store import DATA, write_table

    grid = pd.MultiIndex.from_product(list(axes.values()), names=list(axes)).to_frame(index=False)
    grid["completed"] = np.asarray(z, float)
    grid["outcome"] = "ok"
    grid.insert(0, "config_id", np.arange(len(grid)))
    folder = tmp_path / "ds"
    write_table(grid, folder / DATA)
    return folder


def _draw(folder: Path, tmp_path: Path, **kw):
    """Draw with planner.plots.heatmap.heatmap and return the figure's panels' meshes and title,
    by keeping the figure open (plt.close is patched out)."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import QuadMesh

    from planner.plots import heatmap as plots

    closed = []
    orig = plt.close
    plt.close = closed.append
    try:
        plots.heatmap(folder, tmp_path / "h.png", **kw)
    finally:
        plt.close = orig
    fig = closed[0]
    panels = [ax for ax in fig.axes if getattr(ax, "_colorbar", None) is None]
    meshes = [m for ax in panels for m in ax.collections if isinstance(m, QuadMesh)]
    assert len(meshes) == len(panels)
    title = fig._suptitle.get_text()
    colours = [m.get_facecolors() for m in meshes]
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    orig(fig)
    return meshes, colours, title, legend


SEQS, BLOCKS = [8, 64, 256], [1000, 4000]


@pytest.mark.parametrize(
    "axes,kw",
    [
        ({"rate_scale": [1.0, 2.0]}, {"facet": "rate_scale"}),
        ({"watermark": [0.0, 0.05]}, {"facet": None, "where": ["watermark=0.05"]}),
        ({"watermark": [0.0, 0.05], "rate_scale": [1.0, 2.0, 4.0]},
         {"facet": "rate_scale", "where": ["watermark=0"]}),
        ({}, {"facet": None}),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_constant_metric_one_colour_everywhere_and_said_in_the_title(tmp_path, axes, kw):
    n = int(np.prod([len(v) for v in axes.values()])) * len(SEQS) * len(BLOCKS)
    z = [2000.0] * n
    if "where" in kw:  # the rows --where drops differ, so only the selection is constant
        half, varying = n // 2, [5.0 + i for i in range(n // 2)]
        pinned_first = kw["where"] == ["watermark=0"]
        z = [2000.0] * half + varying if pinned_first else varying + [2000.0] * half
    folder = _dataset(tmp_path, z, **axes, num_gpu_blocks=BLOCKS, max_num_seqs=SEQS)
    meshes, colours, title, _ = _draw(folder, tmp_path, z="completed", **kw)
    assert len({(m.norm.vmin, m.norm.vmax) for m in meshes}) == 1
    every = np.concatenate(colours)
    assert len(np.unique(every, axis=0)) == 1, "one value drawn in several colours"
    assert "constant" in title and "2,000" in title


def test_equal_values_equal_colours_across_panels(tmp_path):
    # Panel 1 spans 0..5, panel 2 spans 5..100: the value 5 must look the same in both.
    z = [0, 1, 2, 3, 4, 5] + [5, 20, 40, 60, 80, 100]
    folder = _dataset(tmp_path, z, rate_scale=[1.0, 2.0], num_gpu_blocks=BLOCKS, max_num_seqs=SEQS)
    meshes, colours, title, _ = _draw(folder, tmp_path, z="completed", facet="rate_scale")
    assert meshes[0].norm is meshes[1].norm or (
        (meshes[0].norm.vmin, meshes[0].norm.vmax) == (meshes[1].norm.vmin, meshes[1].norm.vmax)
    )
    # pcolormesh cells run x fastest: cell 5 of panel 1 and cell 0 of panel 2 hold 5.
    np.testing.assert_array_equal(colours[0][5], colours[1][0])
    assert "constant" not in title


def test_nan_and_infinite_cells_are_drawn_as_no_data(tmp_path):
    from matplotlib.colors import to_rgba

    from planner.plots import heatmap as plots

    z = [np.nan, 1, 2, np.inf, 4, 5] + [5, 20, -np.inf, 60, 80, 100]
    folder = _dataset(tmp_path, z, rate_scale=[1.0, 2.0], num_gpu_blocks=BLOCKS, max_num_seqs=SEQS)
    meshes, colours, _, legend = _draw(folder, tmp_path, z="completed", facet="rate_scale")
    grey = to_rgba(plots.NO_DATA)
    for panel, cell in ((0, 0), (0, 3), (1, 2)):
        np.testing.assert_allclose(colours[panel][cell], grey)
    viridis = plots._colormap()(np.linspace(0, 1, 256))
    assert not np.isclose(viridis, grey).all(axis=1).any(), "no-data grey is on the scale"
    assert (meshes[0].norm.vmin, meshes[0].norm.vmax) == (1, 100)  # finite values only
    assert "no data" in legend


def test_missing_configurations_are_drawn_as_no_data(tmp_path):
    import pandas as pd
    from matplotlib.colors import to_rgba

    from planner.plots import heatmap as plots
    from planner.sweep.store import DATA, write_table

    folder = _dataset(tmp_path, list(range(12)), rate_scale=[1.0, 2.0], num_gpu_blocks=BLOCKS,
                      max_num_seqs=SEQS)  # fmt: skip
    df = pd.read_parquet(folder / DATA)
    write_table(df[df.config_id != 7], folder / DATA)  # panel 2 lacks (64, 1000)
    _, colours, _, legend = _draw(folder, tmp_path, z="completed", facet="rate_scale")
    np.testing.assert_allclose(colours[1][1], to_rgba(plots.NO_DATA))
    assert "no data" in legend


def test_all_nan_metric_is_refused_in_one_line(capsys, tmp_path):
    folder = _dataset(tmp_path, [np.nan] * 6, num_gpu_blocks=BLOCKS, max_num_seqs=SEQS)
    code, _, err = run_cli(capsys, "heatmap", str(folder), "--facet", "")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "no plotted cell has a value" in err


def test_axis_with_zero_stays_linear(tmp_path):
    # A decade-spanning axis that holds 0 cannot be drawn on a log scale: it stays linear.
    folder = _dataset(tmp_path, list(range(6)), num_gpu_blocks=BLOCKS,
                      long_prefill_token_threshold=[0, 100, 1000])  # fmt: skip
    meshes, _, _, _ = _draw(folder, tmp_path, x="long_prefill_token_threshold", facet=None)
    assert meshes[0].axes.get_xscale() == "linear"
    assert meshes[0].axes.get_yscale() == "linear"
    # and no axis of non-negative values reaches below 0 (no pool of -500 blocks)
    assert meshes[0].axes.get_xlim()[0] == 0 and meshes[0].axes.get_ylim()[0] == 0


# --- The dataset stays readable: pictures go beside it, readers open the file the README names ---


def _read_all_three(data: Path) -> list[int]:
    """Row counts of ``data`` as pandas, polars and duckdb read it."""
    import duckdb
    import pandas as pd
    import polars as pl

    return [
        len(pd.read_parquet(data)),
        pl.read_parquet(data).height,
        duckdb.sql(f"select count(*) from '{data}'").fetchall()[0][0],  # the README's form
    ]


def test_default_heatmap_lands_beside_the_dataset_and_readers_still_work(capsys, results, tmp_path):
    import pandas as pd

    from planner.sweep.store import CHUNKS, DATA, LOCK, MANIFEST

    folder = tmp_path / "quick"
    shutil.copytree(results, folder)
    assert (folder / MANIFEST).exists()  # a finished sweep keeps its manifest
    code, _, err = run_cli(capsys, "heatmap", str(folder), "--where", "watermark=0.0")
    assert code == 0, err
    rows = len(pd.read_parquet(folder / DATA))
    assert len(pd.read_parquet(folder)) == rows  # the folder too, for pandas/pyarrow
    picture = tmp_path / "quick.heatmap.png"
    assert picture.exists() and f"wrote {picture}" in err
    assert sorted(p.name for p in folder.iterdir()) == sorted([DATA, LOCK, MANIFEST])
    # The path the README names, read by all three, also while a sweep's chunks and
    # temp files sit beside it (they hold a copy of the rows: a folder read would count them).
    (folder / CHUNKS).mkdir()
    shutil.copy(folder / DATA, folder / CHUNKS / "chunk-00000.parquet")
    shutil.copy(folder / DATA, folder / f".{DATA}.abc.tmp")
    assert _read_all_three(folder / DATA) == [rows] * 3


def test_readme_names_the_default_picture_and_the_readable_path():
    from planner.plots.heatmap import default_out

    readme = (ROOT / "README.md").read_text()
    main_job = readme.split("```bash", 1)[1].split("```", 1)[0]
    assert str(default_out(Path("results/quick"))) in main_job
    assert "results/quick/data.parquet" in main_job
    sweeps = (ROOT / "docs" / "sweeps.md").read_text()  # the page the README links for sweeps
    assert "docs/sweeps.md" in readme
    output = sweeps[sweeps.index("Output (`results/NAME/`)") :].split("\n\n", 1)[0]
    for reader in ('pd.read_parquet("results/NAME/data.parquet")',
                   'pl.read_parquet("results/NAME/data.parquet")',
                   "duckdb.sql(\"select * from 'results/NAME/data.parquet'\")"):  # fmt: skip
        assert reader in output


def test_heatmap_out_inside_the_sweep_folder_is_refused(capsys, results):
    for out in (results / "h.png", results / "sub" / "h.png"):
        code, _, err = run_cli(
            capsys, "heatmap", str(results), "--where", "watermark=0", "--out", str(out)
        )
        assert code == 2 and len(err.strip().splitlines()) == 1
        assert "inside the sweep folder" in err and not out.exists()


def test_default_out_is_beside_the_dataset(tmp_path, monkeypatch):
    from planner.plots.heatmap import default_out
    from planner.sweep.store import DATA

    (tmp_path / "results" / "quick").mkdir(parents=True)
    (tmp_path / "results" / "quick" / DATA).touch()
    (tmp_path / "lone.parquet").touch()
    monkeypatch.chdir(tmp_path)
    assert default_out("results/quick") == Path("results/quick.heatmap.png")
    assert default_out("results/quick/") == Path("results/quick.heatmap.png")
    assert default_out(f"results/quick/{DATA}") == Path("results/quick.heatmap.png")
    assert default_out("lone.parquet") == Path("lone.heatmap.png")
    monkeypatch.chdir(tmp_path / "results" / "quick")
    assert default_out(".") == tmp_path / "results" / "quick.heatmap.png"


def test_heatmap_help_states_the_default_out(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    code, out, err = run_cli(capsys, "heatmap", "--help")
    assert code == 0
    assert "[default: RESULTS.heatmap.png beside it" in out + err


@pytest.mark.parametrize("pin", ["max_num_seqs=8", "num_gpu_blocks=1000", "rate_scale=1.0"])
def test_where_cannot_pin_a_drawn_axis(tmp_path, capsys, pin):
    folder = _dataset(
        tmp_path, [1.0] * 12, rate_scale=[1.0, 2.0], num_gpu_blocks=[1000, 4000], max_num_seqs=SEQS
    )
    code, _, err = run_cli(
        capsys, "heatmap", str(folder), "--facet", "rate_scale", "--where", pin,
        "--out", str(tmp_path / "h.png"),
    )  # fmt: skip
    assert code == 2 and "pin another axis" in err


@pytest.mark.parametrize("value", ["banana", "2", ""])
def test_where_refuses_a_boolean_that_is_neither(tmp_path, capsys, value):
    """--where overloaded=banana pinned every row to False, silently."""
    z = [1.0] * 2 * len(SEQS)
    folder = _dataset(
        tmp_path, z, overloaded=[False], num_gpu_blocks=[1000, 4000], max_num_seqs=SEQS
    )
    args = ["heatmap", str(folder), "--facet", "", "--out", str(tmp_path / "h.png"), "--where"]
    code, _, err = run_cli(capsys, *args, f"overloaded={value}")
    assert code == 2 and "not true or false" in err, err
    code, _, err = run_cli(capsys, *args, "overloaded=false")
    assert code == 0, err


def test_overloaded_cells_get_their_own_hatch(tmp_path):
    """Overload is drawn beside the outcome: its hatch on exactly the overloaded
    cells, and a legend entry only when some cell is overloaded."""
    import pandas as pd
    from matplotlib.collections import PatchCollection

    from planner.plots.heatmap import OVERLOAD_HATCH
    from planner.sweep.store import DATA, write_table

    folder = _dataset(tmp_path, [1.0] * 6, num_gpu_blocks=[1000, 4000], max_num_seqs=SEQS)
    df = pd.read_parquet(folder / DATA)
    df["overloaded"] = df.max_num_seqs >= 64  # 4 of 6 cells
    write_table(df, folder / DATA)
    import matplotlib.pyplot as plt

    from planner.plots import heatmap as plots

    kept, orig = [], plt.close
    plt.close = kept.append
    try:
        plots.heatmap(folder, tmp_path / "h.png", facet=None)
    finally:
        plt.close = orig
    fig = kept[0]
    hatched = [
        c for c in fig.axes[0].collections
        if isinstance(c, PatchCollection) and c.get_hatch() == OVERLOAD_HATCH[0]
    ]  # fmt: skip
    assert len(hatched) == 1 and len(hatched[0].get_paths()) == 4
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "overloaded" in legend
    orig(fig)


# Issue 13, item 6: log colour scale, SLO contour, recommended configuration.
SLO_SPEC = f"""
name = "hm-slo"
horizon_s = 120.0

[workload]
kind = "trace"
path = "{S1_CSV}"
rate_scale = 0.4

[axes]
max_num_seqs = [32, 128, 256, 512]
num_gpu_blocks = [7463, 30000, 60000]

[slo]
ttft_slo = 2.0
tpot_slo = 0.05
"""


@pytest.fixture(scope="module")
def slo_results(tmp_path_factory):
    d = tmp_path_factory.mktemp("hmslo")
    spec = d / "hm.toml"
    spec.write_text(SLO_SPEC)
    main(["sweep", str(spec), "--out", str(d / "out")])
    return d / "out"


def test_recommended_cell_by_hand():
    import pandas as pd

    from planner.plots.heatmap import qualifying, recommended

    df = pd.DataFrame(
        {
            "x": [1, 2, 1, 2, 3],
            "y": [10, 10, 20, 20, 20],
            "meets_slo": [True, False, True, True, True],
            "overloaded": [False, False, False, False, True],
            "completed": [5, 5, 5, 5, 5],
            "livelocked": [False] * 5,
            "step_limit_hit": [False] * 5,
            "goodput_rps": [1.995, 9.0, 2.0, 1.5, 3.0],
        }
    )
    assert qualifying(df).tolist() == [True, False, True, True, False]
    # best qualifying goodput 2.0 (row 2); row 0 is within 1% and has the smaller y
    assert recommended(df, "x", "y").name == 0
    assert recommended(df.assign(meets_slo=False), "x", "y") is None


def test_log_colour_scale_spans_the_positive_values():
    from planner.plots.heatmap import PlotError, log_colour_scale

    norm = log_colour_scale(np.array([0.0, 0.12, 340.0, np.nan, np.inf]))
    assert norm.vmin == 0.12 and norm.vmax == 340.0
    with pytest.raises(PlotError, match="no plotted cell has a positive value"):
        log_colour_scale(np.array([0.0, -1.0, np.nan]))


def test_heatmap_draws_slo_contour_recommendation_and_log_scale(capsys, slo_results, tmp_path):
    import pandas as pd

    from planner.plots.heatmap import recommended

    out = tmp_path / "slo.png"
    code, _, err = run_cli(
        capsys, "heatmap", str(slo_results), "--z", "ttft_p99", "--color-scale", "log",
        "--slo-contour", "--recommend", "--out", str(out), "--facet", "",
    )  # fmt: skip
    assert code == 0, err
    assert out.stat().st_size > 10_000
    df = pd.read_parquet(slo_results / "data.parquet")
    best = recommended(df, "max_num_seqs", "num_gpu_blocks")
    assert best is not None and best.meets_slo and not best.overloaded


def test_slo_drawings_need_slo_columns(capsys, results, tmp_path):
    for flag in ("--slo-contour", "--recommend"):
        code, _, err = run_cli(
            capsys, "heatmap", str(results), "--where", "watermark=0.0", flag,
            "--out", str(tmp_path / "x.png"),
        )  # fmt: skip
        assert code == 2 and err.count("\n") == 1 and "no SLO columns" in err and flag in err
    code, _, err = run_cli(capsys, "heatmap", str(results), "--color-scale", "cubic")
    assert code == 2 and err.count("\n") == 1


def test_an_axis_implied_by_another_needs_no_pin():
    """compat blis implies null_block off and restart preemption: pinning compat
    is enough, and the message says so."""
    import pandas as pd

    from planner.plots.heatmap import PlotError, select

    rows = [
        {"max_num_seqs": s, "num_gpu_blocks": b, "compat": c, "null_block": c == "vllm",
         "preemption_mode": "recompute" if c == "vllm" else "restart", "completed": 1}
        for s in (8, 16) for b in (100, 200) for c in ("vllm", "blis")
    ]  # fmt: skip
    df = pd.DataFrame(rows)
    with pytest.raises(PlotError, match=r"pin compat with --where axis=value \(that also fixes"):
        select(df, "max_num_seqs", "num_gpu_blocks", None, [])
    assert len(select(df, "max_num_seqs", "num_gpu_blocks", None, ["compat=blis"])) == 4


def test_legend_stays_inside_the_figure(slo_results, tmp_path, monkeypatch):
    """Many legend entries wrap into rows instead of running off both edges
    (tryout finding: --slo-contour --recommend clipped 'churning' and
    'recommended' at 1,400 px; drawn at 1,000 here, where one row overflows)."""
    import matplotlib.pyplot as plt

    from planner.plots import heatmap as plots

    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    plots.heatmap(slo_results, tmp_path / "l.png", z="goodput_rps", slo_contour=True,
                  recommend=True, width=1000)  # fmt: skip
    fig = figures[-1]
    fig.canvas.draw()
    (legend,) = fig.legends
    assert len(legend.legend_handles) >= 5
    box = legend.get_window_extent()
    width, height = fig.canvas.get_width_height()
    assert box.x0 >= 0 and box.x1 <= width and box.y0 >= 0, (box, width)
    plt.close(fig)


def test_lower_bound_cells_carry_a_mark(slo_results, tmp_path, monkeypatch):
    """A p99 that is only a lower bound (requests unserved by the end) gets a
    '≥' on its cell and a legend entry (tryout finding: nothing told such a
    cell from a measured one); a metric without bounds gets none."""
    import pandas as pd

    from planner.plots import heatmap as plots

    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    df = pd.read_parquet(slo_results / "data.parquet")
    bounded = int(df["ttft_s_p99_is_lower_bound"].sum())
    assert 0 < bounded < len(df)  # the fixture has both kinds
    for z, expected in (("ttft_p99", bounded), ("completed", 0)):
        plots.heatmap(slo_results, tmp_path / f"{z}.png", z=z, facet=None)
        fig = figures.pop()
        marks = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == plots.BOUND_MARKER]
        assert sum(len(ln.get_xdata()) for ln in marks) == expected, z
        legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
        assert any("only a lower bound" in t for t in legend) is (expected > 0)


def test_latency_statistics_without_their_unit_and_short_errors():
    """--z itl_p99 / queue_delay_p99 / ttft_mean name the *_s_* columns as
    ttft_p99 does; a wrong name lists the closest columns, not all ~100
    (second tryout finding)."""
    import pandas as pd

    from planner.plots.heatmap import PlotError, column

    df = pd.DataFrame({"itl_s_p99": [1.0], "queue_delay_s_p99": [1.0], "ttft_s_mean": [1.0]})
    df = df.assign(**{f"m{i}": [0.0] for i in range(60)})
    assert column(df, "itl_p99", "--z") == "itl_s_p99"
    assert column(df, "queue_delay_p99", "--z") == "queue_delay_s_p99"
    assert column(df, "ttft_mean", "--z") == "ttft_s_mean"
    with pytest.raises(PlotError, match=r"closest: itl_s_p99") as e:
        column(df, "itl_s_p9", "--z")
    assert len(str(e.value)) < 200


def test_recommended_looks_the_same_on_the_plot_and_in_the_legend(
    slo_results, tmp_path, monkeypatch
):
    """Issue 31: the legend drew 'recommended' filled while the plot drew it
    hollow; both now come from one style."""
    from planner.plots import heatmap as plots

    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    plots.heatmap(slo_results, tmp_path / "r.png", z="goodput_rps", recommend=True, facet=None)
    fig = figures[-1]
    (legend,) = fig.legends
    (entry,) = [h for h in legend.legend_handles if h.get_label() == "recommended"]
    drawn = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_marker() == "D"]
    assert drawn
    for line in [entry, *drawn]:
        assert line.get_markerfacecolor() == "none" and line.get_markeredgecolor() == "red"


def test_the_slo_contour_does_not_run_along_the_frame():
    """Issue 31: a qualifying region that touches the frame is closed by the
    frame, not by a dashed line drawn over it; interior edges are drawn."""
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from planner.plots.heatmap import _contour

    xs, ys = [1, 2, 3], [10, 20, 30]
    ok = {(1, 10), (2, 10), (1, 20)}  # the lower-left corner: touches two sides
    df = pd.DataFrame(
        [{"x": a, "y": b, "meets_slo": (a, b) in ok, "overloaded": False} for a in xs for b in ys]
    ).assign(completed=1, livelocked=False, step_limit_hit=False)
    xe, ye = np.array([0.5, 1.5, 2.5, 3.5]), np.array([5, 15, 25, 35])
    fig, ax = plt.subplots()
    _contour(ax, df, "x", "y", xs, ys, xe, ye)
    (lines,) = ax.collections
    segs = [np.asarray(s) for s in lines.get_segments()]
    plt.close(fig)
    on_frame = [s for s in segs if (s[:, 0] == xe[0]).all() or (s[:, 1] == ye[0]).all()]
    assert not on_frame
    assert len(segs) == 4  # right of (2,10), above (2,10), right of (1,20), above (1,20)


def test_a_column_like_nothing_names_the_shorthands_not_the_first_columns():
    import pandas as pd

    from planner.plots.heatmap import ALIASES, PlotError, column

    df = pd.DataFrame({c: [1.0] for c in ("completed", "max_num_seqs", "ttft_s_p99", "a0", "a1")})
    with pytest.raises(PlotError) as e:
        column(df, "nosuch", "--z")
    assert "closest" not in str(e.value) and all(k in str(e.value) for k in ALIASES)
    with pytest.raises(PlotError, match=r"closest: ttft_s_p99\b"):
        column(df, "ttft", "--z")
