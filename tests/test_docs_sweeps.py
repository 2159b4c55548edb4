"""The docs' commands that take tens of seconds to minutes, run for real.

The pages whose commands sweep thousands of configurations (sweeps.md,
starvation-map.md) run here, in their own file so that pytest-xdist runs them
beside tests/test_readme.py: every run on their specs' grids shrunk to 6
values per ranged axis (``doc_commands.shrunk``: the same commands, flags and
files, about 1 s instead of about a minute), and as written under
``pytest --run-long``, with the other ``long`` ones (the sizing search, the
speed record: minutes each on 2 cores).
"""

from __future__ import annotations

import pytest

from doc_commands import (
    HEAVY,
    PAGES,
    ROOT,
    is_heavy,
    is_long,
    page_commands,
    redirect,
    run_page,
    runnable,
)
from helpers import run_cli

HEAVY_PAGES = [p for p in PAGES if is_heavy(p)]
LONG_COMMANDS = [(p, a, c) for p in PAGES for a, c in page_commands(p) if a and is_long(a)]


def test_the_heavy_pages_are_the_sweep_pages():
    assert {p.name for p in HEAVY_PAGES} >= {"sweeps.md", "starvation-map.md"}
    assert all(not is_heavy(p) or runnable(p) for p in PAGES)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One folder and one record of commands run for the heavy pages, shrunk
    and as written: both pages show the same sweep, which runs once each way."""
    return {s: (tmp_path_factory.mktemp("heavy"), set()) for s in (True, False)}


@pytest.mark.slow
@pytest.mark.parametrize("page", HEAVY_PAGES, ids=[p.name for p in HEAVY_PAGES])
def test_heavy_pages_run_on_shrunk_grids(capsys, monkeypatch, shared, page):
    monkeypatch.chdir(ROOT)
    folder, done = shared[True]
    run_page(capsys, folder, page, done, shrink=True)
    assert (folder / "shrunk" / HEAVY[0]).is_file(), "the shrunk spec was not the one run"


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("page", HEAVY_PAGES, ids=[p.name for p in HEAVY_PAGES])
def test_heavy_pages_run_as_written(capsys, monkeypatch, shared, page):
    """The 8,192-config sweep (about a minute on 2 cores)."""
    monkeypatch.chdir(ROOT)
    folder, done = shared[False]
    run_page(capsys, folder, page, done)


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize(
    "page, argv, expected", LONG_COMMANDS, ids=[" ".join(a)[:60] for _, a, _ in LONG_COMMANDS]
)
def test_long_commands_run(capsys, tmp_path, monkeypatch, page, argv, expected):
    monkeypatch.chdir(ROOT)
    code, _, err = run_cli(capsys, *redirect(argv, tmp_path))
    assert code == expected, f"{page.name}: plan {' '.join(argv)}: exit {code}\n{err}"
