"""The pictures of a report, drawn with matplotlib and inlined as PNG data URIs.

Each function returns ``(title, data URI)`` pairs, or raises nothing for a
picture it cannot draw: it returns a note instead (``Skipped``), which the
page shows in the picture's place.
"""

from __future__ import annotations

import base64
import io
import tempfile
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from planner.plots import heatmap as hm  # noqa: E402
from planner.plots.validate import validate_png  # noqa: E402

DPI = 100
# The sweep metrics a report draws as heatmaps, in order: what completes, how
# fast, the tail a user sees, and the churn behind it.
SWEEP_METRICS = ("throughput_rps", "ttft_s_p99", "tpot_s_p99", "preemptions")


@dataclass(frozen=True)
class Picture:
    """A drawn picture: its title and ``data:image/png;base64,...`` URI."""

    title: str
    uri: str


@dataclass(frozen=True)
class Skipped:
    """A picture the result cannot give, and why."""

    title: str
    why: str


def png_uri(data: bytes) -> str:
    """``data`` (PNG bytes) as a data URI."""
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _figure_uri(fig: plt.Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return png_uri(buf.getvalue())


def heatmap_axes(df: pd.DataFrame) -> tuple[str, str, str | None] | None:
    """(x, y, facet) for a sweep's heatmaps: two numeric axes that vary
    (max_num_seqs and num_gpu_blocks first), and a non-numeric one that
    varies as facet; None with fewer than two numeric axes."""
    axes = [a for a in (*hm.SCHEDULER_AXES, *hm.WORKLOAD_AXES, *hm.HARDWARE_AXES) if a in df]
    varied = [a for a in axes if df[a].nunique() > 1]
    numeric = [a for a in varied if pd.api.types.is_numeric_dtype(df[a])]
    numeric.sort(key=lambda a: (a not in ("max_num_seqs", "num_gpu_blocks"), axes.index(a)))
    if len(numeric) < 2:
        return None
    others = [a for a in varied if a not in numeric]
    return numeric[0], numeric[1], (others[0] if others else None)


def pinned(df: pd.DataFrame, shown: tuple[str | None, ...]) -> dict[str, object]:
    """The sweep's other varied axes, each at its first value: a heatmap
    shows two axes and a facet, so the rest are held fixed (and said so)."""
    axes = [a for a in (*hm.SCHEDULER_AXES, *hm.WORKLOAD_AXES, *hm.HARDWARE_AXES) if a in df]
    return {a: df[a].iloc[0] for a in axes if a not in shown and df[a].nunique() > 1}


def sweep_heatmaps(folder: Path, df: pd.DataFrame) -> list[Picture | Skipped]:
    """The heatmaps of ``SWEEP_METRICS`` with the outcome overlays, the
    KV-safe curve and, when the sweep has SLOs, the SLO region and the
    recommended configuration (``planner.plots.heatmap``)."""
    axes = heatmap_axes(df)
    if axes is None:
        why = "the sweep varies fewer than two numeric axes: see the table"
        return [Skipped("heatmaps", why)]
    x, y, facet = axes
    slo = "meets_slo" in df.columns
    pins = pinned(df, (x, y, facet))
    where = [f"{a}={v}" for a, v in pins.items()]
    out: list[Picture | Skipped] = []
    with tempfile.TemporaryDirectory() as tmp:
        for z in SWEEP_METRICS:
            if z not in df.columns:
                continue
            png = Path(tmp) / f"{z}.png"
            try:
                hm.heatmap(
                    folder, png, x=x, y=y, z=z, facet=facet, where=where, width=1200,
                    height=560, slo_contour=slo, recommend=slo,
                )  # fmt: skip
            except hm.PlotError as e:
                out.append(Skipped(z, str(e)))
                continue
            at = f" at {', '.join(where)}" if where else ""
            out.append(Picture(f"{z} over {x} x {y}{at}", png_uri(png.read_bytes())))
    return out


def latency_cdfs(requests: pd.DataFrame, itl: dict | None) -> Picture | Skipped:
    """CDFs of TTFT, TPOT and E2E over the requests served (a request still
    unserved at the run's end has only a lower bound: left out, and counted),
    and of ITL over every gap between two tokens (``itl``: the run's
    ``metrics.itl_distribution``, None when it has none)."""
    cols = [c for c in ("ttft_s", "tpot_s", "e2e_s") if c in requests]
    if not cols or requests.empty:
        return Skipped("latency distributions", "no per-request rows")
    panels = len(cols) + (1 if itl and itl.get("count") else 0)
    fig, axs = plt.subplots(1, panels, figsize=(14, 3.6), layout="constrained", squeeze=False)
    if panels > len(cols):
        ax = axs[0][-1]
        counts = np.asarray(itl["count"], dtype=float)
        ax.step(itl["itl_s"], np.cumsum(counts) / counts.sum(), where="post")
        ax.set_title(f"ITL (s), {int(counts.sum()):,} gaps", fontsize=10)
        ax.set_xlabel("seconds")
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
    for ax, c in zip(axs[0], cols, strict=False):
        v = requests[c].to_numpy(dtype=float)
        ok = np.isfinite(v) & ~requests.get(c.replace("_s", "_censored"), False)
        x = np.sort(v[ok])
        if len(x):
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post")
        left = int((~ok & np.isfinite(v)).sum())
        note = f" ({left:,} unserved left out)" if left else ""
        ax.set_title(f"{c[:-2].upper()} (s){note}", fontsize=10)
        ax.set_xlabel("seconds")
        ax.set_ylabel("share of requests")
        ax.grid(alpha=0.3)
    return Picture("latency distributions (CDF)", _figure_uri(fig))


def _bins(t_end: float) -> np.ndarray:
    """About 200 equal time bins over [0, t_end] seconds."""
    return np.linspace(0.0, max(t_end, 1e-9), 201)


def time_series(steps: pd.DataFrame, requests: pd.DataFrame, usable: int) -> Picture | Skipped:
    """Over the run: running and waiting requests; KV blocks in use (share
    of ``usable``); output tokens per second; requests offered (arrivals) and
    served (finishes) per second, where overload shows as a gap."""
    if steps is None or steps.empty:
        return Skipped("over time", "no per-step trace")
    t = steps["end_s"].to_numpy(dtype=float)
    edges = _bins(float(t.max()))
    width = edges[1] - edges[0]
    fig, axs = plt.subplots(3, 1, figsize=(12, 8), layout="constrained", sharex=True)
    axs[0].step(t, steps["running"], where="post", label="running")
    axs[0].step(t, steps["waiting"], where="post", label="waiting")
    axs[0].set_ylabel("requests")
    axs[0].legend(loc="upper right")
    used = (usable - steps["free_blocks"].to_numpy(dtype=float)) / max(usable, 1)
    axs[1].step(t, 100.0 * used, where="post", color="tab:purple")
    axs[1].set_ylabel("KV blocks in use (%)")
    axs[1].set_ylim(0, 105)
    tokens, _ = np.histogram(t, edges, weights=steps["decode_tokens"].to_numpy(dtype=float))
    mid = (edges[:-1] + edges[1:]) / 2
    axs[2].plot(mid, tokens / width, color="tab:green", label="output tokens/s")
    axs[2].set_ylabel("output tokens/s")
    rate = axs[2].twinx()
    for col, label, style in (
        ("arrival_s", "offered req/s", "--"),
        ("finish_s", "served req/s", "-"),
    ):
        if col in requests:
            v = requests[col].to_numpy(dtype=float)
            n, _ = np.histogram(v[np.isfinite(v)], edges)
            rate.plot(mid, n / width, ls=style, label=label)
    rate.set_ylabel("requests/s")
    if rate.get_legend_handles_labels()[0]:
        rate.legend(loc="upper right")
    axs[2].legend(loc="upper left")
    axs[2].set_xlabel("simulated seconds")
    for ax in axs:
        ax.grid(alpha=0.3)
    return Picture("over time", _figure_uri(fig))


def predicted_vs_measured(requests: pd.DataFrame, title: str) -> Picture | Skipped:
    """``plan validate --plot``'s picture (``planner.plots.validate``): E2E and
    TTFT per request, predicted against measured, and TTFT over the run."""
    need = ("arrival_s", "measured_ttft_s", "predicted_ttft_s", "measured_e2e_s", "predicted_e2e_s")
    if requests.empty or any(c not in requests for c in need):
        return Skipped("predicted against measured", "no per-request rows")
    measured = {m: requests[f"measured_{m}"].to_numpy(dtype=float) for m in ("ttft_s", "e2e_s")}
    predicted = {m: requests[f"predicted_{m}"].to_numpy(dtype=float) for m in ("ttft_s", "e2e_s")}
    with tempfile.TemporaryDirectory() as tmp:
        png = validate_png(
            requests["arrival_s"].to_numpy(dtype=float), measured, predicted, title,
            Path(tmp) / "validate.png",
        )  # fmt: skip
        return Picture("predicted against measured, per request", png_uri(png.read_bytes()))
