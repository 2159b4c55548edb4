"""Issue 33, item 5: the validation table maintains itself. The script that
writes docs/validate.md's table and planner/data/step_time_validation.json
(``tools/validate_table.py``) is rerun here on the shipped real runs, and
both committed copies must equal what the current code gives: a change to the
step time, the pool or the scheduler that moves an error fails this test
until the script is rerun and its output committed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _script():
    spec = importlib.util.spec_from_file_location(
        "validate_table", ROOT / "tools" / "validate_table.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_docs_table_and_validated_errors_come_from_the_current_code():
    pytest.importorskip("aiconfigurator_core")  # the measured rows need it (the test extra has it)
    mod = _script()
    lines, tpot = mod.table()
    doc = (ROOT / "docs" / "validate.md").read_text()
    for line in lines:
        assert line in doc, f"docs/validate.md lacks (rerun tools/validate_table.py): {line}"
    committed = json.loads(mod.OUT.read_text())["kinds"]
    assert set(committed) == set(tpot)
    for backend, runs in tpot.items():
        assert committed[backend]["tpot_error"].keys() == runs.keys(), backend
        for name, err in runs.items():
            assert committed[backend]["tpot_error"][name] == pytest.approx(err, abs=1e-9), name
    assert len(tpot["roofline"]) >= 3  # every run the planner can express is replayed


def test_readme_quotes_the_committed_medians():
    """The README's medians are the committed ones (the test above ties those to the code)."""
    kinds = json.loads(_script().OUT.read_text())["kinds"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    for kind, runs in (("roofline", "4 runs"), ("measured", "3 runs")):
        median = kinds[kind]["median_abs_tpot_error"]
        assert len(kinds[kind]["tpot_error"]) == int(runs.split()[0]), kind
        assert (
            f"by a median {median:.1%} ({runs})" in readme or f"by {median:.1%} ({runs}" in readme
        )
