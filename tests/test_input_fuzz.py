"""Hostile price tables, calibration CSVs and bench JSONs (issue 35, item 5):
one line and exit 2, or a result, never a traceback.

Each test mutates a shipped example (``planner/data/gpu_prices.csv``,
``docs/calibrate_example.csv``, ``docs/calibrate_bench_example.json``): one
cell or value replaced, or a column or key dropped, with a fixed seed and a
bounded number of examples.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import assert_one_line_or_ran, fuzz_settings, plan_quiet

ROOT = Path(__file__).parents[1]
PRICES = ROOT / "planner" / "data" / "gpu_prices.csv"
STEPS = ROOT / "docs" / "calibrate_example.csv"
BENCH = ROOT / "docs" / "calibrate_bench_example.json"
SIZE_SPEC = ROOT / "tests" / "data" / "size_small.toml"
CELLS = st.one_of(
    st.sampled_from(["", "nan", "inf", "-inf", "-1", "0", "1e308", "9" * 30, "x", "H100",
                     "RTX-4090", "\u00e9", '"', "1e-320"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=6),
)  # fmt: skip
VALUES = st.one_of(
    st.none(), st.booleans(), st.text(max_size=4), st.lists(st.integers(), max_size=2),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.dictionaries(st.text(max_size=2),
                                                                    st.integers(), max_size=1),
)  # fmt: skip
SETTINGS = fuzz_settings(40)


def _mutate_rows(rows: list[list[str]], data: st.DataObject) -> list[list[str]]:
    if data.draw(st.booleans(), label="drop a column"):
        col = data.draw(st.integers(0, len(rows[0]) - 1))
        return [r[:col] + r[col + 1 :] for r in rows]
    i = data.draw(st.integers(0, len(rows) - 1), label="row (0: header)")
    j = data.draw(st.integers(0, len(rows[i]) - 1), label="column")
    rows[i][j] = data.draw(CELLS, label="cell")
    return rows


def _rows(path: Path, keep: int) -> list[list[str]]:
    lines = [x for x in path.read_text().splitlines() if x and not x.startswith("#")]
    return [x.split(",", 2) for x in lines[: keep + 1]]


def _valid_price(text: str) -> bool:
    from planner.models.prices import MAX_PRICE

    try:
        v = float(text.strip())
    except ValueError:
        return False
    return 0 < v <= MAX_PRICE


@pytest.mark.slow
@SETTINGS
@given(data=st.data())
def test_a_mutated_price_table_is_one_line_or_priced(tmp_path, data):
    """A price cell replaced: refused exactly when it is not a number in
    (0, MAX_PRICE] (a correct result otherwise); a dropped required column:
    refused."""
    rows = _rows(PRICES, 3)
    if data.draw(st.booleans(), label="drop a column"):
        col = data.draw(st.integers(0, len(rows[0]) - 1))
        rows = [r[:col] + r[col + 1 :] for r in rows]
        bad = col < 2  # gpu or usd_per_gpu_hour
    else:
        i = data.draw(st.integers(1, len(rows) - 1), label="row")
        cell = data.draw(CELLS.filter(lambda c: "," not in c and "\n" not in c), label="price")
        rows[i][1] = cell
        bad = not _valid_price(cell)
    path = tmp_path / "prices.csv"
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    code, err = plan_quiet(
        "size", str(SIZE_SPEC), "--prices", str(path), "--max-replicas", "1", "--dry-run",
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert_one_line_or_ran(code, err)
    assert (code == 2) == bad, (rows, err)


def test_a_price_row_with_an_extra_field_is_refused_not_shifted(tmp_path):
    """Issue 38 item 7: pandas' index guess read "L40S,1.33,x,3.3" shifted
    (unknown GPU '3.3'); a bad row is named by its line, header = 1."""
    path = tmp_path / "prices.csv"
    path.write_text("gpu,usd_per_gpu_hour,source\n# note\nH100,3.35,x\nL40S,1.33,x,3.3\n")
    args = ("size", str(SIZE_SPEC), "--prices", str(path), "--gpus", "H100", "--dry-run")
    code, err = plan_quiet(*args)
    assert code == 2 and "line 4: 4 fields, the header has 3" in err, err
    path.write_text("gpu,usd_per_gpu_hour,source\nH100,3.35\n")  # short: no silent blank
    code, err = plan_quiet(*args)
    assert code == 2 and "line 2: 2 fields, the header has 3" in err, err
    path.write_text("gpu,usd_per_gpu_hour,source\n# note\nH100,3.35,x\n\nNOPE,1.0,y\n")
    code, err = plan_quiet(*args)
    assert code == 2 and "row 5: unknown GPU 'NOPE'" in err, err


def _valid_step_cell(column: str, text: str) -> bool:
    from planner.latency.fit import MAX_STEP_MS, MAX_TOKENS, MIN_STEP_MS

    try:
        v = float(text.strip())
    except ValueError:
        return False
    if column == "step_ms":
        return MIN_STEP_MS <= v <= MAX_STEP_MS
    return 0 <= v <= MAX_TOKENS and v == round(v)


@pytest.mark.slow
@SETTINGS
@given(data=st.data())
def test_a_mutated_step_csv_is_one_line_or_fitted(tmp_path, data):
    """A cell replaced by one that is not a count (a number of ms for step_ms)
    in range, or a dropped column: refused; a valid file fits or is refused in
    one line (too few distinct steps)."""
    rows = [r.split(",") for r in STEPS.read_text().splitlines()[:20]]
    if data.draw(st.booleans(), label="drop a column"):
        col = data.draw(st.integers(0, len(rows[0]) - 1))
        rows = [r[:col] + r[col + 1 :] for r in rows]
        bad = True
    else:
        i = data.draw(st.integers(1, len(rows) - 1), label="row")
        j = data.draw(st.integers(0, len(rows[0]) - 1), label="column")
        cell = data.draw(CELLS.filter(lambda c: "," not in c and "\n" not in c and "\r" not in c))
        rows[i][j] = cell
        bad = not _valid_step_cell(rows[0][j], cell)
    path = tmp_path / "steps.csv"
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    code, err = plan_quiet("calibrate", str(path))
    assert_one_line_or_ran(code, err)
    assert code == 2 or not bad, (rows, err)  # a valid file may still be unfittable


@pytest.mark.slow
@fuzz_settings(25)
@given(data=st.data())
def test_a_mutated_bench_json_is_one_line_or_fitted(tmp_path, data):
    doc = json.loads(BENCH.read_text())
    keys = ["start_times", "input_lens", "output_lens", "ttfts", "itls", "errors"]
    key = data.draw(st.sampled_from(keys), label="key")
    if data.draw(st.booleans(), label="drop the key"):
        doc.pop(key)
    else:
        i = data.draw(st.integers(0, len(doc[key]) - 1), label="request")
        doc[key][i] = data.draw(VALUES, label="value")
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    code, err = plan_quiet(
        "calibrate", str(path), "--num-gpu-blocks", "4000", "--max-num-seqs", "64",
        "--max-num-batched-tokens", "2048",
    )  # fmt: skip
    assert_one_line_or_ran(code, err)
