"""``plan report RESULT``: one self-contained HTML page of a result folder
(``planner.report``), to look at and to share."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from planner.cli import options as opt
from planner.cli.errors import InputError, os_error_reason

PAGE = "report.html"  # written into the result folder unless --out


def report(
    result: Annotated[
        Path,
        typer.Argument(
            help="A result folder (plan sweep, plan size, plan run or plan validate --out), "
            "or a plan run --json file."
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            help=f"The HTML file to write [default: RESULT/{PAGE}; for a file, the same "
            "name ending in html]."
        ),
    ] = None,
) -> None:
    """Write one HTML page of a sweep, a sizing or a run: its pictures, its
    answer or verdict and its table, with the workload, model, GPU, step-time
    model and versions. The page is self-contained (styles, script and
    pictures inline; nothing is fetched when it is viewed)."""
    from planner.report.page import render
    from planner.report.results import ReportError, load
    from planner.sweep.store import atomic_write_bytes

    try:
        page = render(load(result))
    except ReportError as e:
        raise InputError(str(e)) from None
    dest = (
        out
        if out is not None
        else result / PAGE
        if result.is_dir()
        else result.with_suffix(".html")
    )
    if not dest.parent.is_dir():
        raise InputError(f"--out {dest}: no folder {dest.parent}; make it first")
    if dest.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"--out: expected a .html file name, got {str(dest)!r}")
    try:
        atomic_write_bytes(dest, lambda tmp: Path(tmp).write_text(page, encoding="utf-8"))
    except OSError as e:
        raise InputError(f"cannot write {dest}: {os_error_reason(e)}") from None
    print(f"wrote {dest} ({len(page.encode()) / 1024:,.0f} KiB)", file=sys.stderr)


def register(app: typer.Typer) -> None:
    """Add ``report`` to the ``plan`` app."""
    app.command("report", cls=opt.BoundedCommand)(report)
