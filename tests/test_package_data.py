"""Every data file the planner reads ships in its package: a file under
planner/data that no ``[tool.setuptools.package-data]`` glob matches is
missing from a non-editable install (``pip install .``, as CI and the README
install it), where the command reading it fails."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_every_file_under_planner_data_is_package_data():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["planner"]
    pkg = ROOT / "planner"
    files = [p for p in (pkg / "data").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert files
    missing = [
        str(p.relative_to(pkg))
        for p in files
        if not any(
            p.relative_to(pkg).match(g) and len(p.relative_to(pkg).parts) == len(Path(g).parts)
            for g in globs
        )
    ]
    assert missing == [], f"not in package-data: {missing}"
