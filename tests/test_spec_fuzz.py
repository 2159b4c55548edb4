"""Hostile sweep specs (issue 35, item 5): one line (``SpecError``) or a spec,
never a traceback.

Each shipped spec has one ``key = value`` line's value replaced by a hostile
TOML literal (wrong type, sign, zero, huge, non-finite, empty, nested), with a
fixed seed and a bounded number of examples; loading it (``load_spec_text``,
what every command that reads a spec calls, pool sizing from ``[hardware]``
included) must give a spec or one line.
"""

from __future__ import annotations

import datetime
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import fuzz_settings
from planner.sweep.spec import SpecError, load_spec_text

SWEEPS = Path(__file__).parents[1] / "sweeps"
SPECS = sorted(SWEEPS.glob("*.toml"))
LITERALS = [
    '"x"', '""', "-1", "0", "1", "0.5", "-0.0", "1e400", "-1e400", "nan", "inf", "true",
    "99999999999999999999", "9223372036854775807", "[]", "[0]", '[1, "a"]', "[[1]]", "{}",
    '{ kind = "x" }', "1979-05-27", '"../nowhere.csv"', '"H100"', '"recompute"', '"2"',
    '"0.5"', "[true, 1, 1]", '["1", 1, 1]',
]  # fmt: skip


def _assignments(text: str) -> list[int]:
    return [
        i for i, line in enumerate(text.splitlines()) if " = " in line and not line.startswith("#")
    ]


@pytest.mark.slow
@fuzz_settings(200)
@given(data=st.data())
def test_a_mutated_spec_loads_or_is_one_line(data):
    path = data.draw(st.sampled_from(SPECS), label="spec")
    lines = path.read_text().splitlines()
    i = data.draw(st.sampled_from(_assignments(path.read_text())), label="line")
    key, was = lines[i].split(" = ", 1)
    literal = data.draw(st.sampled_from(LITERALS), label="value")
    lines[i] = f"{key} = {literal}"
    try:
        load_spec_text("\n".join(lines) + "\n", path.parent, path.name)
    except SpecError as e:
        assert "\n" not in str(e) and str(e).startswith(path.name), str(e)
        return
    # Loaded: a number field never takes a string, a boolean or a table (the
    # second tryout: tensor_parallel_size = "2" and alpha = [true, 1, 1] passed).
    before = _value(was)
    after = tomllib.loads(f"v = {literal}")["v"]
    if isinstance(before, int | float) and not isinstance(before, bool):
        assert not isinstance(after, str | bool | dict | datetime.date), (key, literal)
    numbers = isinstance(before, list) and before and all(_number(x) for x in before)
    if numbers and isinstance(after, list):
        assert all(_number(x) for x in after), (key, literal)


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _value(text: str) -> object:
    """A spec line's TOML value (its comment dropped), or None when unreadable."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        try:
            return tomllib.loads(f"v = {text.split('#', 1)[0]}")["v"]
        except tomllib.TOMLDecodeError:
            return None
