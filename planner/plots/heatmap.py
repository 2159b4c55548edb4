"""Heatmaps of a sweep's dataset (matplotlib): a metric over two axes, outcome
regions hatched, the analytic KV-safe max_num_seqs as a curve.

Reads the Parquet dataset ``plan sweep`` writes; draws one panel per value of
the facet axis. Every other axis that varies must be pinned with ``where``.
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from matplotlib.collections import LineCollection, PatchCollection  # noqa: E402
from matplotlib.colors import Colormap, LogNorm, Normalize  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from planner.metrics import (  # noqa: E402
    CHURNING,
    LIVELOCKED,
    STARVED,
    STEP_LIMIT,
    THRASHING,
    batches,
    bursts,
    keeps_up,
    pool_starts,
)
from planner.plots.files import save_figure  # noqa: E402
from planner.slo import NAMES  # noqa: E402
from planner.sweep.spec import HARDWARE_AXES, SCHEDULER_AXES, WORKLOAD_AXES  # noqa: E402
from planner.sweep.store import (  # noqa: E402
    DATA,
    DRAWN_COLUMNS,
    JUDGED_COLUMNS,
    SLO_COLUMNS,
    dataset_problem,
)

ALIASES = {
    "throughput": "throughput_rps",
    "goodput": "goodput_rps",
    "ttft_p99": "ttft_s_p99",
    "ttft_p50": "ttft_s_p50",
    "tpot_p99": "tpot_s_p99",
    "e2e_p99": "e2e_s_p99",
}
# The recommended cell's marker, drawn the same on the plot and in the legend: a hollow
# red diamond, so the cell's colour shows through.
RECOMMENDED = dict(marker="D", markerfacecolor="none", markeredgecolor="red",
                   markeredgewidth=2.5, markersize=11)  # fmt: skip
# Outcome overlays: hatch pattern and edge colour per class (ok and churning unhatched
# except churning's light dots, so the eye goes to the failure regions).
OVERLAYS = (
    (CHURNING, "..", "0.55"),
    (THRASHING, "///", "red"),
    (STARVED, "xx", "black"),
    (LIVELOCKED, "OO", "magenta"),
    (STEP_LIMIT, "--", "darkorange"),  # truncated at max_steps: no verdict
)
# Overload is a verdict beside the outcome (column ``overloaded``): its own
# hatch, drawn over whatever class the cell has.
OVERLOAD_HATCH = ("\\\\", "deepskyblue")
# A burst too short to judge overload (``overload_judged`` False): it cannot
# qualify, and says so with its own hatch.
UNJUDGED_HATCH = ("++", "0.6")
UNJUDGED = "overload not judged (burst)"
# Colour map of the metric, and the colour of a cell with no value (NaN, ±inf, or no
# configuration there): a light grey, which viridis never produces.
CMAP = "viridis"
NO_DATA = "0.85"
# A constant metric is drawn at the middle of a ±10% scale around its value (±0.1 around
# 0), the expansion matplotlib's colorbar applies to a singular range on its own
# (matplotlib.transforms.nonsingular, expander=0.1).
CONSTANT_EXPANDER = 0.1
LOG_UNDER = "white"  # log colour scale: cells at or below 0
BOUND_MARKER = r"$\geq$"  # a cell whose value is only a lower bound (``_lower_bounds``)
# The SLO contour (boundary of the cells that meet the sweep's [slo] and keep up)
# and the recommended configuration's marker.
CONTOUR_COLOUR = "red"
RECOMMEND_TOLERANCE = 0.01  # as safelimit.KNEE_TOLERANCE: within 1% of the best


class PlotError(ValueError):
    """Bad heatmap request (unknown column, unpinned axis, empty selection)."""


def load(results: str | Path) -> tuple[pd.DataFrame, dict]:
    """The dataset and its sweep spec (from the Parquet metadata, {} if absent)."""
    path = Path(results)
    data = path / DATA if path.is_dir() else path
    if not data.exists():
        raise PlotError(f"{results}: no sweep dataset (expected {data})")
    try:
        df = pd.read_parquet(data)
        meta = pq.read_schema(data).metadata or {}
    except (OSError, ValueError) as e:
        raise PlotError(
            f"{data}: not a readable Parquet dataset ({e.__class__.__name__})"
        ) from None
    spec = {}
    if b"planner.spec_toml" in meta:
        try:
            spec = tomllib.loads(meta[b"planner.spec_toml"].decode())
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise PlotError(f"{data}: its sweep spec metadata is damaged ({e})") from None
    if (problem := dataset_problem(df, DRAWN_COLUMNS)) is not None:
        raise PlotError(f"{data}: not a whole sweep dataset ({problem}); sweep it again")
    return df, spec


def column(df: pd.DataFrame, name: str, flag: str) -> str:
    """The column ``name`` names: itself, an ``ALIASES`` short name, or a
    latency statistic without its unit (``itl_p99`` for ``itl_s_p99``,
    ``queue_delay_p50``, ``ttft_mean``). Raises PlotError naming the closest
    numeric columns (``difflib``)."""
    name = ALIASES.get(name, name)
    base, _, stat = name.rpartition("_")
    if name not in df.columns and f"{base}_s_{stat}" in df.columns:
        name = f"{base}_s_{stat}"
    if name not in df.columns:
        numeric = _numeric(df)
        near = _similar(name, numeric)
        hint = f"closest: {', '.join(near)}" if near else f"none like it; try {', '.join(ALIASES)}"
        raise PlotError(f"{flag}: no column {name!r} ({hint}; {len(numeric)} numeric columns)")
    return name


def _similar(name: str, columns: list[str], n: int = 6) -> list[str]:
    """Up to ``n`` of ``columns`` like ``name``, most alike first: difflib's
    ratio of at least 0.6, or a shared ``_``-separated word (``ttft`` finds
    ``ttft_s_p99``); none when nothing is alike (never simply the first ones)."""
    words = set(name.lower().split("_")) - {"s", ""}

    score = {
        c: difflib.SequenceMatcher(None, name, c).ratio() + 0.5 * bool(words & set(c.split("_")))
        for c in columns
    }
    return [c for c in sorted(columns, key=score.__getitem__, reverse=True) if score[c] >= 0.6][:n]


def _numeric(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c]) and c != "config_id"]


def select(df: pd.DataFrame, x: str, y: str, facet: str | None, where: list[str]) -> pd.DataFrame:
    """Apply ``axis=value`` filters; refuse if another axis still varies."""
    for cond in where:
        key, sep, value = cond.partition("=")
        if not sep or key not in df.columns:
            raise PlotError(f"--where: expected axis=value with a known axis, got {cond!r}")
        if key in (x, y, facet):
            role = "--x" if key == x else "--y" if key == y else "--facet"
            raise PlotError(f"--where {cond}: {key} is the {role} axis; pin another axis")
        col = df[key]
        target: object = value
        if pd.api.types.is_bool_dtype(col):
            truth = dict.fromkeys(("1", "true", "yes", "on"), True)
            truth |= dict.fromkeys(("0", "false", "no", "off"), False)
            if value.lower() not in truth:
                raise PlotError(f"--where {key}: not true or false: {value!r}")
            target = truth[value.lower()]
        elif pd.api.types.is_numeric_dtype(col):
            try:
                target = float(value)
            except ValueError:
                raise PlotError(f"--where {key}: not a number: {value!r}") from None
        df = df[np.isclose(col, target) if isinstance(target, float) else col == target]
        if df.empty:
            raise PlotError(f"--where {cond}: no rows match")
    # An axis is free when it still varies inside one (x, y, facet) cell; an axis
    # that follows from the plotted ones (gpu_memory_utilization -> num_gpu_blocks) is not.
    keys = [c for c in (x, y, facet) if c is not None]
    axes = [a for a in (*SCHEDULER_AXES, *WORKLOAD_AXES, *HARDWARE_AXES) if a in df.columns]
    free = _free_axes(df, keys, axes)
    if free:
        pins = _fewest_pins(df, keys, free)
        follow = [a for a in free if a not in pins]
        also = f" (that also fixes {', '.join(follow)})" if follow else ""
        raise PlotError(
            f"more axes vary than x, y and facet: pin {', '.join(pins)} with --where "
            f"axis=value{also}"
        )
    return df


IMPLYING_AXES = ("compat",)  # settings that fix others (config.compat_settings)


def _free_axes(df: pd.DataFrame, keys: list[str], axes: list[str]) -> list[str]:
    """Axes that still vary inside one cell of ``keys``."""
    cells = df.groupby(keys)
    return [a for a in axes if a not in keys and cells[a].nunique().max() > 1]


def _fewest_pins(df: pd.DataFrame, keys: list[str], free: list[str]) -> list[str]:
    """Axes to pin, greedily: each time the one that leaves the fewest others
    varying (an axis implied by another, e.g. null_block by compat, needs no pin)."""
    pins: list[str] = []
    # On a tie, an axis that implies others (compat) before the ones it implies.
    left = sorted(free, key=lambda a: a not in IMPLYING_AXES)
    while left:
        best = min(left, key=lambda a: len(_free_axes(df, keys + pins + [a], left)))
        pins.append(best)
        left = _free_axes(df, keys + pins, left)
    return pins


def _edges(values: np.ndarray, log: bool) -> np.ndarray:
    """Cell edges around sorted centre values (geometric midpoints on log axes).

    On a linear axis of non-negative values (block counts, fractions) the first cell
    stops at 0, so the axis never shows impossible negative values.
    """
    v = np.log(values) if log else values.astype(float)
    if len(v) == 1:
        mid = np.array([v[0] - 0.5, v[0] + 0.5]) if not log else np.array([v[0] - 0.1, v[0] + 0.1])
    else:
        inner = (v[1:] + v[:-1]) / 2
        mid = np.concatenate([[2 * v[0] - inner[0]], inner, [2 * v[-1] - inner[-1]]])
    if log:
        return np.exp(mid)
    if values.min() >= 0:
        mid[0] = max(mid[0], 0.0)
    return mid


def _log_scale(values: np.ndarray) -> bool:
    return bool(values.min() > 0 and values.max() / values.min() >= 10)


def _title(df: pd.DataFrame, spec: dict, z: str) -> str:
    name = spec.get("name") or (df["spec"].iloc[0] if "spec" in df else "sweep")
    wl = spec.get("workload", {})
    workload = Path(wl["path"]).name if wl.get("path") else wl.get("kind", "")
    if "workload" in df.columns:
        workload = str(df["workload"].iloc[0])
    hw = ""
    if "model" in df.columns and str(df["model"].iloc[0]):
        hw = f", {df['model'].iloc[0]} on {df['gpu'].iloc[0]}"
    elif "latency_model" in df.columns:
        hw = f", step time {df['latency_model'].iloc[0].split(' ')[0]}"
    return f"{name}: {z} — workload {workload}{hw}"


def default_out(results: str | Path) -> Path:
    """Where ``plan heatmap`` writes when ``--out`` is not given: beside the dataset,
    never inside it.

    ``results/NAME`` or ``results/NAME/data.parquet`` -> ``results/NAME.heatmap.png``;
    any other Parquet file ``F.parquet`` -> ``F.heatmap.png``. A non-Parquet file in
    the sweep folder would break ``pandas.read_parquet("results/NAME")``, which reads
    every file there not starting with ``_`` or ``.``.
    """
    path = Path(results)
    if path.name == DATA or not path.is_dir():
        if path.name != DATA:
            return path.with_suffix(".heatmap.png")
        path = path.parent
    if path.name in ("", ".", ".."):
        path = Path(os.path.abspath(path))
    if not path.name:
        raise PlotError(f"{results}: no folder name to name the picture after; pass --out")
    return path.with_name(f"{path.name}.heatmap.png")


def _dataset_folder(results: str | Path) -> Path | None:
    """The sweep folder holding the dataset (None when ``results`` is a lone file)."""
    path = Path(results)
    if path.is_dir():
        return path
    return path.parent if path.name == DATA else None


def _check_out(out: Path, results: str | Path) -> None:
    """Refuse an output file that is not PNG/SVG or that lies inside the sweep folder."""
    if out.suffix.lower() not in (".png", ".svg"):
        raise PlotError(f"--out: expected a .png or .svg file, got {str(out)!r}")
    folder = _dataset_folder(results)
    if folder is not None and out.resolve().is_relative_to(folder.resolve()):
        raise PlotError(
            f"--out {out}: inside the sweep folder {folder}, where Parquet readers would "
            f"trip over it; write it beside the folder, e.g. {default_out(results)}"
        )


def log_colour_scale(values: np.ndarray) -> LogNorm:
    """A log colour scale over the positive finite ``values`` (TTFT spans 0.1 s
    to hundreds of seconds); cells at or below 0 take the colour map's "under"
    colour (``LOG_UNDER``), shown in the legend. Raises PlotError when no value
    is positive."""
    pos = values[np.isfinite(values) & (values > 0)]
    if pos.size == 0:
        raise PlotError("--color-scale log: no plotted cell has a positive value")
    lo, hi = float(pos.min()), float(pos.max())
    if lo == hi:
        lo, hi = lo / (1 + CONSTANT_EXPANDER), hi * (1 + CONSTANT_EXPANDER)
    return LogNorm(vmin=lo, vmax=hi)


def colour_scale(values: np.ndarray) -> tuple[Normalize, float | None]:
    """The one colour scale every panel and the colourbar share.

    ``values`` are the metric over all plotted cells, in the metric's own unit; non-
    finite ones (NaN, ±inf) are left out and drawn as "no data". Returns the norm
    and, when every finite value is the same, that value (the scale is then
    value ± 10%, see CONSTANT_EXPANDER). Raises PlotError when no value is finite.
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        raise PlotError("--z: no plotted cell has a value (all NaN or infinite)")
    lo, hi = float(finite.min()), float(finite.max())
    constant = lo if lo == hi else None
    if constant is not None:
        pad = CONSTANT_EXPANDER * (abs(constant) or 1.0)
        lo, hi = constant - pad, constant + pad
    return Normalize(vmin=lo, vmax=hi), constant


def _colormap() -> Colormap:
    return plt.get_cmap(CMAP).with_extremes(bad=NO_DATA, under=LOG_UNDER)


def qualifying(part: pd.DataFrame) -> pd.Series:
    """Rows that meet the sweep's SLOs (``meets_slo``, from its ``[slo]`` table),
    keep up (``metrics.keeps_up``: not ``overloaded``, judged on a window long
    enough), complete something and neither livelock nor stop at the step
    limit, on a pool vLLM starts on (``metrics.pool_starts``): the rule of
    ``safelimit.qualifies``."""
    ok = part["meets_slo"].astype(bool) & keeps_up(part) & pool_starts(part)
    ok &= (part["completed"] > 0) & ~part["livelocked"].astype(bool)
    return ok & ~part["step_limit_hit"].astype(bool)


def recommended(part: pd.DataFrame, x: str, y: str) -> pd.Series | None:
    """The recommended row of one panel: among ``qualifying`` rows, those within
    RECOMMEND_TOLERANCE of the best ``goodput_rps``, then the one with the
    smallest ``y`` and then ``x`` (the fewest resources on the plotted axes).
    None when no row qualifies."""
    ok = part[qualifying(part)]
    if ok.empty:
        return None
    best = ok["goodput_rps"].max()
    near = ok[ok["goodput_rps"] >= (1 - RECOMMEND_TOLERANCE) * best]
    return near.sort_values([y, x]).iloc[0]


def heatmap(
    results: str | Path,
    out: str | Path,
    x: str = "max_num_seqs",
    y: str = "num_gpu_blocks",
    z: str = "completed",
    facet: str | None = "preemption_mode",
    where: list[str] | None = None,
    mark: tuple[float, float] | None = None,
    width: int = 1400,
    height: int = 700,
    color_scale: str = "linear",
    slo_contour: bool = False,
    recommend: bool = False,
) -> Path:
    """Draw the heatmap and save it (PNG or SVG, by the suffix of ``out``).

    The figure is ``width`` x ``height`` pixels (100 dpi). ``color_scale``:
    ``linear`` or ``log`` (``log_colour_scale``). ``slo_contour`` outlines the
    cells that meet the sweep's SLOs and keep up (``qualifying``);
    ``recommend`` marks the ``recommended`` cell of each panel; both need a
    sweep with an ``[slo]`` table. Raises PlotError.
    """
    if color_scale not in ("linear", "log"):
        raise PlotError(f"--color-scale: expected linear or log, got {color_scale!r}")
    df, spec = load(results)
    if (slo_contour or recommend) and "meets_slo" not in df.columns:
        flag = "--slo-contour" if slo_contour else "--recommend"
        raise PlotError(
            f"{flag}: {results} has no SLO columns; add an [slo] table to the sweep spec "
            "(e.g. ttft_slo = 2.0) and sweep again"
        )
    if recommend and (problem := dataset_problem(df, JUDGED_COLUMNS + SLO_COLUMNS)) is not None:
        raise PlotError(f"{results}: not a whole sweep dataset ({problem}); sweep it again")
    x, y, z = column(df, x, "--x"), column(df, y, "--y"), column(df, z, "--z")
    axes = [a for a in (*SCHEDULER_AXES, *WORKLOAD_AXES, *HARDWARE_AXES) if a in df.columns]
    for flag, name in (("--x", x), ("--y", y), ("--facet", facet)):
        if name is not None and name not in axes:
            raise PlotError(
                f"{flag}: {name!r} is not an axis of this sweep (axes: {', '.join(axes)})"
            )
    if len({x, y, facet} - {None}) != len([c for c in (x, y, facet) if c is not None]):
        raise PlotError("--x, --y and --facet must be different axes")
    if not pd.api.types.is_numeric_dtype(df[z]):
        raise PlotError(f"--z: {z!r} is not numeric (try: {', '.join(_numeric(df)[:12])}, ...)")
    for flag, name in (("--x", x), ("--y", y)):
        if not pd.api.types.is_numeric_dtype(df[name]):
            raise PlotError(
                f"{flag}: {name!r} is not numeric; use it as --facet or pin it with --where"
            )
    if facet is not None and df[facet].nunique() <= 1:
        facet = None
    df = select(df, x, y, facet, where or [])
    out = Path(out)
    _check_out(out, results)
    if not (100 <= width <= 10000 and 100 <= height <= 10000):
        raise PlotError(f"--width/--height must be in 100..10000 pixels, got {width}x{height}")
    panels = sorted(df[facet].unique()) if facet else [None]
    if mark is not None and not (
        df[x].min() <= mark[0] <= df[x].max() and df[y].min() <= mark[1] <= df[y].max()
    ):
        raise PlotError(
            f"--mark {mark[0]:g},{mark[1]:g} lies outside the plotted range "
            f"({x} {df[x].min():g}..{df[x].max():g}, {y} {df[y].min():g}..{df[y].max():g})"
        )
    fig, axs = plt.subplots(
        1, len(panels), figsize=(width / 100, height / 100), dpi=100, squeeze=False,
        layout="constrained",
    )  # fmt: skip
    xs, ys = np.sort(df[x].unique()), np.sort(df[y].unique())
    xlog, ylog = _log_scale(xs), _log_scale(ys)
    xe, ye = _edges(xs, xlog), _edges(ys, ylog)
    grids = [_grid(df if v is None else df[df[facet] == v], x, y, z, xs, ys) for v in panels]
    every = np.concatenate([g.ravel() for g in grids])
    norm, constant = colour_scale(every)
    if color_scale == "log":
        norm, constant = log_colour_scale(every), None
    cmap = _colormap()
    notes = []
    for ax, value, grid in zip(axs[0], panels, grids, strict=True):
        part = df if value is None else df[df[facet] == value]
        ax.pcolormesh(xe, ye, np.ma.masked_invalid(grid), cmap=cmap, norm=norm)
        _overlay(ax, part, x, y, xs, ys, xe, ye)
        _lower_bounds(ax, part, x, y, z)
        _safe_curve(ax, part, x, y)
        if slo_contour:
            _contour(ax, part, x, y, xs, ys, xe, ye)
        if recommend:
            best = recommended(part, x, y)
            if best is None:
                notes.append(f"{'' if value is None else f'{facet} = {value}: '}no cell meets "
                             "the SLOs and keeps up: nothing recommended")  # fmt: skip
            else:
                ax.plot(best[x], best[y], ls="", **RECOMMENDED)
                ax.annotate("recommended", (best[x], best[y]), xytext=(6, -14),
                            textcoords="offset points", color="white")  # fmt: skip
        if mark is not None:
            ax.plot(*mark, marker="*", color="white", markeredgecolor="black", markersize=16)
            ax.annotate("current", mark, xytext=(6, 6), textcoords="offset points", color="white")
        ax.set_xscale("log" if xlog else "linear")
        ax.set_yscale("log" if ylog else "linear")
        ax.set_xlim(xe[0], xe[-1])
        ax.set_ylim(ye[0], ye[-1])
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        if value is not None:
            ax.set_title(f"{facet} = {value}")
    bar = fig.colorbar(
        plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=axs[0].tolist(), label=z, shrink=0.9
    )
    if constant is not None:
        bar.set_ticks([constant])
    present = set(df["outcome"])
    handles = [
        Patch(facecolor="none", edgecolor=c, hatch=h, label=n)
        for n, h, c in OVERLAYS
        if n in present
    ]
    if "overloaded" in df.columns and df["overloaded"].astype(bool).any():
        h, c = OVERLOAD_HATCH
        handles.append(Patch(facecolor="none", edgecolor=c, hatch=h, label="overloaded"))
    if bursts(df).any():
        h, c = UNJUDGED_HATCH
        handles.append(Patch(facecolor="none", edgecolor=c, hatch=h, label=UNJUDGED))
    if any(not np.isfinite(g).all() for g in grids):
        handles.append(Patch(facecolor=NO_DATA, edgecolor="0.5", label="no data"))
    if color_scale == "log" and bool((every <= 0).any()):
        handles.append(Patch(facecolor=LOG_UNDER, edgecolor="0.5", label="<= 0 (log scale)"))
    if _bounded(df, z).any():  # as _lower_bounds
        handles.append(
            plt.Line2D([], [], markerfacecolor="white", markeredgecolor="black",
                       markeredgewidth=0.6, marker=BOUND_MARKER, ls="", markersize=10,
                       label=f"{z} only a lower bound (unserved)")
        )  # fmt: skip
    if "kv_safe_max_num_seqs" in df.columns and "max_num_seqs" in (x, y):  # as _safe_curve
        handles.append(
            plt.Line2D([], [], color="orange", lw=2, label="analytic KV-safe max_num_seqs")
        )
    if slo_contour:
        handles.append(
            plt.Line2D([], [], color=CONTOUR_COLOUR, lw=2, ls="--", label=f"inside: {_slo(df)}")
        )
    if recommend and len(notes) < len(panels):
        handles.append(plt.Line2D([], [], ls="", label="recommended", **RECOMMENDED))
    # One row up to 4 entries; more wrap into two rows, so the figure keeps them all.
    ncols = len(handles) if len(handles) <= 4 else math.ceil(len(handles) / 2)
    fig.legend(handles=handles, loc="outside lower center", ncols=max(ncols, 1), frameon=False)
    title = _title(df, spec, z)
    if constant is not None:
        title += f"\n{z} is constant: {constant:,.6g} in every cell with data"
    for note in notes:
        title += f"\n{note}"
    fig.suptitle(title)
    return save_figure(fig, out, 100)


def _grid(part: pd.DataFrame, x: str, y: str, z: str, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """The metric on the (ys, xs) grid of one panel; NaN where no configuration is."""
    grid = part.pivot_table(index=y, columns=x, values=z, aggfunc="mean", dropna=False)
    return grid.reindex(index=ys, columns=xs).to_numpy(float)


def _slo(df: pd.DataFrame) -> str:
    """The sweep's SLOs as text, from the columns ttft_slo_s, tpot_slo_s,
    itl_slo_s, e2e_slo_s."""
    names = {f"{k[:-2]}_slo_s": n for k, n in NAMES.items()}
    parts = [
        f"{n} p99 <= {df[c].iloc[0]:g} s"
        for c, n in names.items()
        if c in df.columns and np.isfinite(df[c].iloc[0])
    ]
    pace = "keeps up (judged not overloaded)"
    if batches(df).all():
        pace = "serves its batch (sent at once: no rate)"
    return ", ".join(parts) + (" and " if parts else "") + pace


def _contour(ax, part, x, y, xs, ys, xe, ye) -> None:  # noqa: ANN001
    """Outline the cells that qualify (``qualifying``) along cell edges: every
    edge between a qualifying cell and one that does not. Edges on the plot's
    frame are not drawn (the frame already bounds the region there)."""
    flag = part.assign(_ok=qualifying(part).astype(float))
    ok = np.nan_to_num(_grid(flag, x, y, "_ok", xs, ys)) > 0.5  # (len(ys), len(xs))
    padded = np.pad(ok, 1, constant_values=True)  # the frame closes a region: no line along it
    segs = []
    for j, i in zip(*np.nonzero(ok), strict=True):
        if not padded[j, i + 1]:  # below
            segs.append([(xe[i], ye[j]), (xe[i + 1], ye[j])])
        if not padded[j + 1, i + 2]:  # right
            segs.append([(xe[i + 1], ye[j]), (xe[i + 1], ye[j + 1])])
        if not padded[j + 2, i + 1]:  # above
            segs.append([(xe[i], ye[j + 1]), (xe[i + 1], ye[j + 1])])
        if not padded[j + 1, i]:  # left
            segs.append([(xe[i], ye[j]), (xe[i], ye[j + 1])])
    if segs:
        ax.add_collection(
            LineCollection(segs, colors=CONTOUR_COLOUR, linewidths=2.5, linestyles="--")
        )


def _overlay(ax, part, x, y, xs, ys, xe, ye) -> None:  # noqa: ANN001
    """Hatch every cell whose outcome is a failure class, and every overloaded cell."""
    xi = {v: i for i, v in enumerate(xs)}
    yi = {v: i for i, v in enumerate(ys)}
    layers = [(part[part["outcome"] == n], h, c) for n, h, c in OVERLAYS]
    if "overloaded" in part.columns:
        layers.append((part[part["overloaded"].astype(bool)], *OVERLOAD_HATCH))
        layers.append((part[bursts(part)], *UNJUDGED_HATCH))
    for cells, hatch, color in layers:
        rects = [
            Rectangle((xe[xi[a]], ye[yi[b]]), xe[xi[a] + 1] - xe[xi[a]], ye[yi[b] + 1] - ye[yi[b]])
            for a, b in zip(cells[x], cells[y], strict=True)
        ]
        if rects:
            ax.add_collection(
                PatchCollection(rects, facecolor="none", edgecolor=color, hatch=hatch, lw=0)
            )


def _bounded(part: pd.DataFrame, z: str) -> pd.Series:
    """(rows,) bool: cells whose ``z`` is only a lower bound (its
    ``{z}_is_lower_bound`` column, ``metrics._stats``: requests unserved by
    the end of the run); all False for a metric without one."""
    col = f"{z}_is_lower_bound"
    if col not in part.columns:
        return pd.Series(False, index=part.index)
    return part[col].fillna(False).astype(bool)


def _lower_bounds(ax, part, x, y, z) -> None:  # noqa: ANN001
    """A '≥' on every cell whose value is only a lower bound (cells are
    centred on their axis values, ``_edges``)."""
    cells = part[_bounded(part, z)]
    if not cells.empty:
        ax.plot(cells[x], cells[y], ls="", marker=BOUND_MARKER, markerfacecolor="white",
                markeredgecolor="black", markeredgewidth=0.6, markersize=10)  # fmt: skip


def _safe_curve(ax, part, x, y) -> None:  # noqa: ANN001
    """The analytic KV-safe max_num_seqs against the pool axis, when one of the
    plotted axes is max_num_seqs and the other changes the pool."""
    if "kv_safe_max_num_seqs" not in part.columns or "max_num_seqs" not in (x, y):
        return
    other = y if x == "max_num_seqs" else x
    curve = part.groupby(other)["kv_safe_max_num_seqs"].first().sort_index()
    pts = (curve.to_numpy(), curve.index.to_numpy())
    if x != "max_num_seqs":
        pts = pts[::-1]
    ax.plot(*pts, color="orange", lw=2.5)
