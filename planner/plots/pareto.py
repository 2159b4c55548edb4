"""``plan size``'s picture: fleet cost against tail latency, one panel for
TTFT p99 and one for TPOT p99, every simulated deployment a point (colour:
GPU; marker: tensor parallelism; hollow: overloaded, a burst too short to judge
(``metrics.overload_judged``), livelocked or stopped, so its
latency is not a service level), the Pareto front of the served ones as a
line, the SLO as a dashed line, and the answer circled."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from planner.metrics import keeps_up  # noqa: E402
from planner.plots.files import save_figure  # noqa: E402
from planner.slo import SLO  # noqa: E402

MARKERS = ("o", "s", "^", "D", "v", "P")  # one per tensor-parallel size
PANELS = (
    ("ttft_s_p99", "pareto_ttft", "TTFT p99 (s)", "ttft_s"),
    ("tpot_s_p99", "pareto_tpot", "TPOT p99 (s)", "tpot_s"),
)


def pareto_png(df: pd.DataFrame, best: int | None, slo: SLO, path: Path) -> Path:
    """Draw ``sizing.Sizing.table`` (its ``usd_per_hour``, latency, Pareto and
    candidate columns) to ``path`` (PNG), atomically. Returns ``path``."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), constrained_layout=True)
    served = keeps_up(df) & ~df["livelocked"] & ~df["step_limit_hit"]
    gpus = list(dict.fromkeys(df["gpu"]))
    tps = sorted(set(int(t) for t in df["tensor_parallel_size"]))
    colours = plt.get_cmap("tab10")
    limits = dict(slo.items())
    for ax, (col, front, label, key) in zip(axes, PANELS, strict=True):
        for i, g in enumerate(gpus):
            for j, tp in enumerate(tps):
                sel = (df["gpu"] == g) & (df["tensor_parallel_size"] == tp)
                if not sel.any():
                    continue
                c, m = colours(i % 10), MARKERS[j % len(MARKERS)]
                ok, bad = df[sel & served], df[sel & ~served]
                ax.scatter(
                    ok["usd_per_hour"], ok[col], s=18, color=c, marker=m, label=f"{g} TP{tp}"
                )
                ax.scatter(
                    bad["usd_per_hour"], bad[col], s=18, marker=m, facecolors="none", edgecolors=c
                )
        line = df[df[front]].sort_values("usd_per_hour")
        ax.step(line["usd_per_hour"], line[col], where="post", color="black", lw=1.2)
        if key in limits:
            ax.axhline(limits[key], color="black", ls=":", lw=1.2, label=f"SLO {limits[key]:g} s")
        if best is not None:
            b = df.loc[best]
            ax.scatter([b["usd_per_hour"]], [b[col]], s=160, facecolors="none",
                       edgecolors="magenta", linewidths=2, label="answer")  # fmt: skip
        if (df[col] > 0).all() and np.nanmax(df[col]) / max(np.nanmin(df[col]), 1e-12) > 20:
            ax.set_yscale("log")
        ax.set_xlabel("fleet cost (US$ per hour)")
        ax.set_ylabel(label)
        ax.set_title(f"cost against {label}: Pareto front of served fleets (line)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper right", ncols=2)
    fig.suptitle(
        "plan size: every simulated deployment (hollow: overloaded, not judged or stopped)"
    )
    return save_figure(fig, path, 110)
