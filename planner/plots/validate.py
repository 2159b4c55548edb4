"""``plan validate --plot``'s picture: predicted against measured, request by
request (E2E and TTFT scatters with the y = x line), and TTFT over the run's
arrival time, measured and predicted, so a queue that builds at a different
moment shows."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from planner.plots.files import save_figure  # noqa: E402


def _scatter(ax: plt.Axes, measured: np.ndarray, predicted: np.ndarray, label: str) -> None:
    ok = np.isfinite(measured) & np.isfinite(predicted)
    ax.scatter(measured[ok], predicted[ok], s=8, alpha=0.6)
    hi = float(max(measured[ok].max(initial=0.0), predicted[ok].max(initial=0.0))) or 1.0
    ax.plot([0, hi], [0, hi], color="black", lw=1, ls="--", label="predicted = measured")
    ax.set_xlabel(f"measured {label} (s)")
    ax.set_ylabel(f"predicted {label} (s)")
    ax.set_title(f"{label} per request ({int(ok.sum()):,} requests)")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)


def validate_png(
    arrival_s: np.ndarray,
    measured: dict[str, np.ndarray],
    predicted: dict[str, np.ndarray],
    title: str,
    path: Path,
) -> Path:
    """Draw the three panels to ``path`` (PNG), atomically. ``measured`` and
    ``predicted`` hold per-request ``ttft_s`` and ``e2e_s`` (R,) float64
    seconds in the order of ``arrival_s`` (R,), NaN where missing. Returns
    ``path``."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), constrained_layout=True)
    _scatter(axes[0], measured["e2e_s"], predicted["e2e_s"], "E2E")
    _scatter(axes[1], measured["ttft_s"], predicted["ttft_s"], "TTFT")
    ax = axes[2]
    ax.plot(arrival_s, measured["ttft_s"], ".", ms=3, label="measured", alpha=0.7)
    ax.plot(arrival_s, predicted["ttft_s"], ".", ms=3, label="predicted", alpha=0.7)
    ax.set_xlabel("arrival (s from the first request)")
    ax.set_ylabel("TTFT (s)")
    ax.set_title("TTFT over the run: where the queue builds")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.suptitle(title)
    return save_figure(fig, path, 110)
