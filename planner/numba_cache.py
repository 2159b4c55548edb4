"""Numba's environment, set before Numba loads: where it caches the compiled
kernel (a folder keyed by the kernel's sources) and whether its thread count
is usable (``threads_problem``).

Numba's on-disk cache (``@njit(cache=True)``) checks only the time stamp of
the file that defines each jitted function. The step loop compiles the
functions it calls from other modules (``planner/kernel/prefix_cache.py``,
the column indices of ``planner/config.py``, ...) into itself, so an edit to
one of those alone left the cached step loop running the old code (seen on
2026-12-06 in an editable install; an upgrade that changes a callee but not
``step.py`` would do the same). ``planner/__init__.py`` therefore points
Numba at ``<base>/<key>``, where ``key`` hashes every source the kernel can
reach: any change to them starts a new cache.

Each ``import planner`` marks its keyed folder as used; keyed folders no
import has used for ``STALE_DAYS`` are deleted (``prune``).

``base``: ``$PLANNER_NUMBA_CACHE``, else ``$XDG_CACHE_HOME/vllm-capacity-planner/numba``
(``~/.cache`` when unset; the XDG base-directory convention). A
``NUMBA_CACHE_DIR`` the user sets is used as it is (Numba's own setting: the
user then owns its freshness, as the test suite and ``plan bench`` do with
empty temporary folders).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

PKG = Path(__file__).parent
# Stages after the kernel (tests/test_imports.py: a module imports only from
# its own stage and the ones before it), which jitted code never reaches.
AFTER_KERNEL = frozenset({"cli", "plots", "report", "answers", "sweep", "maxrate"})
ENV_BASE = "PLANNER_NUMBA_CACHE"


def kernel_sources(root: Path = PKG) -> list[Path]:
    """The ``.py`` files under ``root`` jitted code can reach (every package
    but ``AFTER_KERNEL``), sorted."""
    return sorted(p for p in root.rglob("*.py") if p.relative_to(root).parts[0] not in AFTER_KERNEL)


def source_key(root: Path = PKG) -> str:
    """16 hex digits of SHA-256 over the kernel's sources (their paths
    relative to ``root`` and their bytes) and the Python version. Raises
    OSError when a source cannot be read."""
    h = hashlib.sha256(sys.version.encode())
    for p in kernel_sources(root):
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def default_base(env: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """The folder the keyed caches live under (module docstring)."""
    if env.get(ENV_BASE):
        return Path(env[ENV_BASE])
    xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "vllm-capacity-planner" / "numba"


THREADS_ENV = "NUMBA_NUM_THREADS"  # Numba's own setting: its kernel threads


def threads_problem(env: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """One line saying why ``$NUMBA_NUM_THREADS`` is unusable, or None (unset,
    or a whole number >= 1). Numba reads it once, when it is imported
    (``numba/core/config.py``): it raises ValueError with a traceback for 0
    or less, and only warns, then uses every core, for text ``int`` cannot
    parse, so the ``plan`` command asks before Numba loads."""
    value = env.get(THREADS_ENV)
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n >= 1:
        return None
    return (
        f"{THREADS_ENV}={value!r}: expected a whole number >= 1 (kernel threads); "
        "unset it to use every core"
    )


def configure(env: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """Set ``NUMBA_CACHE_DIR`` in ``env`` to ``<base>/<source_key()>`` unless the
    user set it; also ``numba.config.CACHE_DIR`` when Numba is already
    imported (it reads the variable once, at import). Returns the folder set,
    or None when the user's ``NUMBA_CACHE_DIR`` stands or the sources cannot
    be read (Numba's default cache then applies)."""
    if env.get("NUMBA_CACHE_DIR"):
        return None
    try:
        folder = str(default_base(env) / source_key())
    except (OSError, RuntimeError):  # unreadable sources, no home folder
        return None
    env["NUMBA_CACHE_DIR"] = folder
    if "numba" in sys.modules and env is os.environ:
        sys.modules["numba"].config.CACHE_DIR = folder
    prune(Path(folder))
    return folder


# A keyed folder no ``import planner`` has pointed Numba at for this long is
# deleted (``prune``): an upgrade or an edit of the kernel's sources starts a
# new key, and each key's kernels took 20-40 MB here (443 MB over 21 keys of
# a developer's checkout, 2026-12-06). 30 days: a version set aside for a
# month compiles again (a minute or two), not more.
STALE_DAYS = 30
_KEY_CHARS = frozenset("0123456789abcdef")


def prune(current: Path, now: float | None = None) -> list[Path]:
    """Mark ``current`` (a keyed folder, ``<base>/<key>``) as used now, and
    delete the other keyed folders under its base whose mark is older than
    ``STALE_DAYS``. Only folders named like a key (16 hex digits) are
    touched; anything else under the base stays. ``now``: seconds since the
    epoch (default: the clock). Returns the folders deleted. Never raises:
    a base that cannot be read or written is left as it is."""
    now = time.time() if now is None else now
    gone: list[Path] = []
    try:
        current.mkdir(parents=True, exist_ok=True)
        os.utime(current, (now, now))
        for other in current.parent.iterdir():
            name = other.name
            is_key = len(name) == 16 and set(name) <= _KEY_CHARS and other.is_dir()
            if not is_key or other == current:
                continue
            if now - other.stat().st_mtime > STALE_DAYS * 86400:
                shutil.rmtree(other, ignore_errors=True)
                gone.append(other)
    except OSError:
        pass
    return gone
