"""Run ``plan ... --json`` in this process and return its JSON (for the
scripts in tools/ that print the docs' tables)."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

from planner.cli.commands import main

ROOT = Path(__file__).parents[1]


def plan_json(argv: list[str]) -> dict:
    """``plan *argv --json`` run from the project root; its JSON object.

    Raises:
        RuntimeError: if the command exits non-zero (with its stderr)."""
    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main([*argv, "--json"])
    except SystemExit as e:
        if e.code not in (0, None):
            raise RuntimeError(f"plan {' '.join(argv)}: exit {e.code}: {err.getvalue()}") from None
    finally:
        os.chdir(here)
    return json.loads(out.getvalue())
