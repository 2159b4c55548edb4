"""Hostile trace files (issue 35, item 5): one line and exit 2, or a run, never
a traceback.

Each fuzz test starts from a few rows of a shipped trace (the S1 CSV, the Azure
CSV with date-times, the Mooncake JSONL with block hash ids), replaces one cell
or drops one column, and runs ``plan run`` on it in-process with a small pool,
a fixed seed and a bounded number of examples.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import assert_one_line_or_ran, fuzz_settings, plan_quiet

ROOT = Path(__file__).parents[1]
DATA = ROOT / "planner" / "data"
CELLS = st.one_of(
    st.sampled_from(["", "nan", "inf", "-inf", "-1", "0", "1e30", "9" * 30, "1.5", "x", "None",
                     "2023-11-16 18:15:46", "18:15:46", "true", "[]", "\u00e9", ",", '"']),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(1.0, 10_000.0).map(repr),  # a plausible count that is not whole
    st.text(max_size=8),
)  # fmt: skip
SETTINGS = fuzz_settings(60)


def _run(path: Path, *extra: str) -> tuple[int, str]:
    """``plan run --trace-file PATH`` on a small pool: (exit code, stderr)."""
    return plan_quiet(
        "run", "--trace-file", str(path), "--num-gpu-blocks", "4000", "--max-num-seqs", "16",
        "--max-model-len", "8192", "--json", *extra,
    )  # fmt: skip


def _csv_rows(path: Path, n: int = 6) -> list[list[str]]:
    return [line.split(",") for line in path.read_text().splitlines()[: n + 1]]


@pytest.mark.slow
@SETTINGS
@pytest.mark.parametrize("name", ["s1_seed7.csv", "azure-llm-2023/AzureLLMInferenceTrace_conv.csv"])
@given(data=st.data())
def test_a_mutated_csv_trace_is_one_line_or_runs(tmp_path, name, data):
    rows = _csv_rows(DATA / name)
    length_cell = None  # a token count the mutation replaced
    if data.draw(st.booleans(), label="drop a column"):
        col = data.draw(st.integers(0, len(rows[0]) - 1))
        rows = [r[:col] + r[col + 1 :] for r in rows]
    else:
        i = data.draw(st.integers(0, len(rows) - 1), label="row (0: header)")
        j = data.draw(st.integers(0, len(rows[0]) - 1), label="column")
        rows[i][j] = data.draw(CELLS, label="cell")
        length_cell = rows[i][j] if i > 0 and j > 0 and "," not in rows[i][j] else None
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    code, err = _run(path)
    assert_one_line_or_ran(code, err)
    if code == 0 and length_cell is not None:  # a run means the count was one
        assert _whole_count(length_cell), f"ran on token count {length_cell!r}"


def _whole_count(text: str) -> bool:
    """Whether a CSV cell reads as a finite, non-negative whole number."""
    try:
        v = float(text)
    except ValueError:
        return False
    return math.isfinite(v) and v >= 0 and v == int(v)


@pytest.mark.slow
@SETTINGS
@given(data=st.data())
def test_a_mutated_mooncake_trace_is_one_line_or_runs(tmp_path, data):
    lines = (DATA / "mooncake-fast25" / "conversation_trace.jsonl").read_text().splitlines()[:6]
    records = [json.loads(x) for x in lines]
    i = data.draw(st.integers(0, len(records) - 1), label="record")
    key = data.draw(st.sampled_from(sorted(records[i])), label="field")
    how = data.draw(st.sampled_from(["missing", "value", "list item"]), label="how")
    values = st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
        st.text(max_size=6), st.lists(st.integers(), max_size=3),
    )  # fmt: skip
    value = json.loads(json.dumps(data.draw(values, label="value")))
    if how == "missing":
        del records[i][key]
    elif how == "list item" and isinstance(records[i][key], list) and records[i][key]:
        records[i][key][0] = value
    else:
        records[i][key] = value
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert_one_line_or_ran(*_run(path, "--trace-format", "mooncake", "--enable-prefix-caching"))
