"""Run ``plan ... --json`` in this interpreter and return its JSON (for the
scripts in tools/ that print the docs' tables)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
PLAN = "from planner.cli import main; main()"  # the plan script, in this interpreter


def plan_json(argv: list[str]) -> dict:
    """``plan *argv --json`` run from the project root; its JSON object.

    Raises:
        subprocess.CalledProcessError: if the command exits non-zero."""
    cmd = [sys.executable, "-c", PLAN, *argv, "--json"]
    return json.loads(subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True).stdout)
