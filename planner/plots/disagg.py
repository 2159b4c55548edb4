"""``plan size --disaggregated``'s picture, two panels:

- TTFT p99 against TPOT p99 of every aggregated fleet (circles) and every
  P:D split (triangles) searched, coloured by cost (US$ per hour, one colour
  scale for both, so fleets of equal cost compare at a glance); hollow: not
  served (overloaded, livelocked or stopped); the SLOs as dotted lines; each
  answer ringed.
- The prefill share P / (P + D) of every split against its cost: filled
  where it meets the SLOs without overload, hollow where not, labelled P:D;
  the aggregated answer's cost as a dashed line.
"""

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


def disagg_png(
    table: pd.DataFrame, best: int | None, splits: list[dict], split_best: dict | None,
    slo: SLO, path: Path,
) -> Path:  # fmt: skip
    """Draw the aggregated sizing table (``sizing.Sizing.table``, its answer
    row ``best``) and the disaggregated splits (``disagg_sizing.Split.as_dict``
    rows, the answer ``split_best``) to ``path`` (PNG), atomically. Returns
    ``path``."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2), constrained_layout=True)
    sp = pd.DataFrame(splits)
    costs = np.concatenate([table["usd_per_hour"].to_numpy(float), sp["usd_per_hour"]])
    norm = plt.Normalize(vmin=float(costs.min()), vmax=float(costs.max()))
    cmap = plt.get_cmap("viridis")
    served = keeps_up(table) & ~table["livelocked"] & ~table["step_limit_hit"]
    sp_served = ~(sp["prefill_overloaded"] | sp["decode_overloaded"])
    for df, ok, marker, name in (
        (table, served, "o", "aggregated"),
        (sp, sp_served, "^", "disaggregated (P prefill + D decode)"),
    ):
        x, y = 1e3 * df["tpot_s_p99"].to_numpy(float), df["ttft_s_p99"].to_numpy(float)
        c = cmap(norm(df["usd_per_hour"].to_numpy(float)))
        ok = ok.to_numpy(bool)
        ax1.scatter(x[ok], y[ok], s=36, c=c[ok], marker=marker)
        ax1.scatter([], [], s=36, color="tab:gray", marker=marker, label=name)  # legend key
        ax1.scatter(x[~ok], y[~ok], s=36, marker=marker, facecolors="none", edgecolors=c[~ok])
    rings = [(table.loc[best], "aggregated answer")] if best is not None else []
    rings += [(pd.Series(split_best), "disaggregated answer")] if split_best else []
    for (row, label), colour in zip(rings, ("magenta", "red"), strict=False):
        ax1.scatter([1e3 * row["tpot_s_p99"]], [row["ttft_s_p99"]], s=220, facecolors="none",
                    edgecolors=colour, linewidths=2, label=label)  # fmt: skip
    limits = dict(slo.items())
    if "ttft_s" in limits:
        ax1.axhline(limits["ttft_s"], color="black", ls=":", lw=1.2, label="SLO")
    if "tpot_s" in limits:
        ax1.axvline(1e3 * limits["tpot_s"], color="black", ls=":", lw=1.2)
    ax1.set_yscale("log")
    ax1.set_xlabel("TPOT p99 (ms)")
    ax1.set_ylabel("TTFT p99 (s)")
    ax1.set_title("TTFT against TPOT, colour: cost (hollow: not served)")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8, loc="upper right")
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax1, label="US$ per hour")
    share = sp["prefill_replicas"] / (sp["prefill_replicas"] + sp["decode_replicas"])
    meets = sp["meets_slo"].fillna(False).to_numpy(bool) & sp_served.to_numpy(bool)
    ax2.scatter(sp["usd_per_hour"][meets], share[meets], s=60, color="tab:green",
                marker="^", label="meets the SLOs, keeps up")  # fmt: skip
    ax2.scatter(sp["usd_per_hour"][~meets], share[~meets], s=60, facecolors="none",
                edgecolors="tab:gray", marker="^", label="misses or falls behind")  # fmt: skip
    for cost, frac, p, d in zip(
        sp["usd_per_hour"], share, sp["prefill_replicas"], sp["decode_replicas"], strict=True
    ):
        ax2.annotate(f"{p}:{d}", (cost, frac), textcoords="offset points", xytext=(6, -3),
                     fontsize=8)  # fmt: skip
    if best is not None:
        ax2.axvline(table.loc[best, "usd_per_hour"], color="magenta", ls="--", lw=1.2,
                    label="aggregated answer's cost")  # fmt: skip
    ax2.set_ylim(0, 1)
    ax2.set_xlabel("fleet cost (US$ per hour)")
    ax2.set_ylabel("prefill share P / (P + D)")
    ax2.set_title("P:D split against cost")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8, loc="upper left")
    fig.suptitle("plan size --disaggregated: aggregated fleets and P:D splits searched")
    return save_figure(fig, path, 110)
