"""Session-wide guard: the suite writes temporary files only where pytest cleans up.

For the whole session, TMPDIR and ``tempfile.tempdir`` point at a private
folder under pytest's base temp directory, so that everything that asks the
standard library for a temp location (``tempfile``, Dask's scratch space,
notebook kernels and other child processes, which inherit TMPDIR) lands
there and not in the machine's /tmp. Each test must leave that folder as it
found it: files a test needs belong in ``tmp_path``; anything else must be
removed by the code that made it. A test that leaves something behind fails
at teardown, naming what it left.

Child processes (``python -m planner.cli``, notebook kernels, Dask workers)
import the same ``planner`` as the tests, the checkout's: PYTHONPATH names
it. Without that, a non-editable install (the README's test command) sends
them to the installed copy, whose Numba cache is a second one, and the
suite compiled every kernel variant twice (about a minute on 2 cores).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# The suite's kernels: compiled at LLVM optimisation level 1 (Numba's NUMBA_OPT;
# its default, 3, is what ``plan`` runs), into a cache of their own so that
# ``plan`` never loads them. On a clean machine (CI) the suite compiles every
# kernel variant, and level 1 compiled the lone server's kernel in 11-15% less
# CPU and ran ``plan bench --grid 48`` 3-15% slower (2-core VM, 2026-12-07,
# CHANGELOG.md); results do not depend on the level (no fast-math anywhere).
# Left alone when the user chose a level or a cache folder. Set here, before
# any test module imports planner (planner/__init__.py reads both at import).
if not {"NUMBA_OPT", "NUMBA_CACHE_DIR", "PLANNER_NUMBA_CACHE"} & set(os.environ):
    _xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    os.environ["NUMBA_OPT"] = "1"
    # the same base as planner.numba_cache.default_base's, with its own name
    os.environ["PLANNER_NUMBA_CACHE"] = str(Path(_xdg) / "vllm-capacity-planner" / "numba-tests")

pytest_plugins = ["pytester"]  # tests/test_tmp_guard.py runs this guard on sample tests

# Folders that tools create once per process under TMPDIR and keep by design:
# none today. Add a name here only with the reason it cannot be avoided.
ALLOWED: frozenset[str] = frozenset()
ROOT = Path(__file__).resolve().parents[1]


def _contents(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} - ALLOWED


@pytest.fixture(scope="session", autouse=True)
def session_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point TMPDIR and ``tempfile.tempdir`` at a private, initially empty folder."""
    folder = tmp_path_factory.mktemp("TMPDIR", numbered=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(folder))
        mp.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        )
        mp.setattr(tempfile, "tempdir", str(folder))
        yield folder
    left = sorted(_contents(folder))
    assert not left, f"the test session left files in its TMPDIR {folder}: {left}"


@pytest.fixture(autouse=True)
def no_leftover_temp_files(session_tmpdir: Path) -> Iterator[None]:
    """Fail the test that leaves anything in the session TMPDIR."""
    before = _contents(session_tmpdir)
    yield
    left = sorted(_contents(session_tmpdir) - before)
    assert not left, f"left in TMPDIR (use tmp_path, or clean up): {left}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-long",
        action="store_true",
        help="also run the tests marked long (minutes each: the sizing search, the speed record)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``long`` tests, saying how to run them, unless ``--run-long`` is given."""
    if config.getoption("--run-long"):
        return
    skip = pytest.mark.skip(reason="minutes on 2 cores: run with pytest --run-long")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores this process may use
    (``--maxprocesses`` caps it). A worker waiting on a child process, a
    sleep or another worker's kernel compile (``kernel.warm.variant_lock``)
    leaves its core idle, and a third worker fills it: on a 2-core machine
    the cold suite took 584 s with 3 workers against 693 s with 2 (one run
    each, 2026-12-06)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) + 1
