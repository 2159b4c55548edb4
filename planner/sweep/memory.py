"""This process's memory, as the sweep's budgets read it."""

from __future__ import annotations

import resource
import sys


def process_bytes() -> int:
    """Peak resident memory of this process so far (bytes; ``resource.getrusage``,
    whose ``ru_maxrss`` is KiB on Linux and bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)
