"""Writing a figure: one atomic write shared by every picture."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def save_figure(fig: plt.Figure, path: Path, dpi: int) -> Path:
    """Save ``fig`` to ``path`` (the format its suffix names: .png, .svg, ...)
    via a temporary file in the same folder
    and a rename, so a reader never sees half a picture; close the figure.
    Returns ``path``. Raises OSError when the folder cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    try:
        fig.savefig(tmp, dpi=dpi)
        tmp.replace(path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path
