"""Input files a command reads whole: refused in one line before they are read
when they cannot be a file of that kind (a device such as ``/dev/zero``,
which never ends) or are far larger than one can be (a spec, a model's
config.json, a server log read for its acceptance rates).

Why: ``read_text`` on ``/dev/zero`` grew a ``plan check --model /dev/zero``
process to 21 GB until the kernel killed it (a hostile-input pass,
2026-12-07); an 8 GB sparse file ended in a MemoryError traceback. Traces are
not capped (a long trace is legitimately large) but are refused when they
are a device; a pipe (``<(...)``) stays allowed.
"""

from __future__ import annotations

import stat
from pathlib import Path

# The largest spec, config.json or server log read whole: 64 MiB (the largest
# shipped config.json is under 10 KiB; a server log a day long at vLLM's
# 10 s metrics interval is a few MiB).
MAX_SMALL_FILE_BYTES = 64 * 2**20


def check_readable(path: Path, what: str, limit: int | None = None) -> None:
    """Raise ValueError (one line naming ``what`` and ``path``) when ``path``
    is a character or block device, or, with ``limit`` (bytes), a regular
    file larger than it. A missing or unreadable file is left to the reader
    (its own message)."""
    try:
        st = path.stat()
    except OSError:
        return
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        raise ValueError(f"{what} {path}: a device, not a file")
    if limit is not None and stat.S_ISREG(st.st_mode) and st.st_size > limit:
        raise ValueError(
            f"{what} {path}: {st.st_size:,} bytes, over the {limit // 2**20} MiB "
            "such a file may have"
        )
