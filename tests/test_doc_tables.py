"""The docs' tables are the output of the scripts named beside them (issue 31):
each script in ``tools/`` is rerun on the current code and every line it
prints must be on its page, so a change that moves a figure fails here until
the script is rerun and the page updated."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
# script in tools/ -> the page that quotes its output (and names the script)
TABLES = {
    "prefix_caching_table.py": "prefix-caching.md",
    "step_time_kinds_table.py": "step-time-measured.md",
    "shared_prefix_table.py": "prefix-caching.md",
    "replicas_table.py": "replicas.md",
    "hybrid_vs_full.py": "sliding-window.md",
    "sliding_window_table.py": "sliding-window.md",
    "spec_decode_table.py": "speculative-decoding.md",
    "disagg_table.py": "disaggregated.md",
    "roofline_efficiency_table.py": "validate.md",
}
# scripts that read aiconfigurator-core's data (the test extra installs it)
NEEDS_AIC = {"step_time_kinds_table.py", "roofline_efficiency_table.py"}


def _script(name: str) -> object:
    spec = importlib.util.spec_from_file_location(Path(name).stem, ROOT / "tools" / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.parametrize("script, page", TABLES.items())
def test_the_page_quotes_its_scripts_output(monkeypatch, script, page):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))  # the scripts import tools/plan_json.py
    if script in NEEDS_AIC:
        pytest.importorskip("aiconfigurator_core")
    text = (ROOT / "docs" / page).read_text()
    flat = " ".join(text.split())
    assert f"tools/{script}" in text, f"docs/{page} does not name tools/{script}"
    for line in _script(script).table():
        assert line in text or " ".join(line.split()) in flat, f"docs/{page} lacks: {line}"
