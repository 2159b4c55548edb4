"""This process's memory, as the sweep's budgets read it."""

from __future__ import annotations

import os
import resource
import sys

_STATM = "/proc/self/statm"


def process_bytes() -> int:
    """Peak resident memory of this process so far (bytes; ``resource.getrusage``,
    whose ``ru_maxrss`` is KiB on Linux and bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def resident_bytes() -> int:
    """Resident memory of this process now (bytes): what a budget counts as
    held, so memory a finished chunk freed is not counted again for the next.
    Linux: ``/proc/self/statm``'s resident pages times the page size (proc(5));
    elsewhere the peak (``process_bytes``), which is never less."""
    try:
        with open(_STATM) as f:
            pages = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return process_bytes()
    return pages * os.sysconf("SC_PAGE_SIZE")
