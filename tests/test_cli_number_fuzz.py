"""Issue 35 item 5, CLI numbers: random values (in and out of each option's
bound, extremes, denormals, text that is almost a number) given to the
numeric options of ``plan check`` and ``plan run``. A value outside the
option's bound (``planner.bounds``) is one line naming the option and exit 2;
a value inside it runs (exit 0 or 1, standard JSON on stdout) or is refused
in one line for a stated reason (another option it contradicts)."""

from __future__ import annotations

import json
import math

import pytest
import typer
from hypothesis import assume, given
from hypothesis import strategies as st

from helpers import fuzz_settings, run_cli
from planner import bounds
from planner.cli import options as cli_options
from planner.cli.commands import app

COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]
BASE = {
    "check": ["check", "--model", "llama-3.1-8b", "--gpu", "H100", "--json"],
    "run": ["run", "--num-requests", "12", "--json"],
}
# In-bound values of these scale the work of one run (requests, tokens,
# replicas, clients): the fuzz keeps them small so an example takes seconds.
WORK = {
    "num_requests": 200,
    "max_requests": 200,
    "prompt_tokens": 4096,
    "prompt_tokens_min": 4096,
    "prompt_tokens_max": 8192,
    "prompt_tokens_stdev": 4096,
    "output_tokens": 2048,
    "output_tokens_min": 2048,
    "output_tokens_max": 4096,
    "output_tokens_stdev": 2048,
    "turns": 8,
    "max_concurrency": 64,
    "replicas": 8,
    "prefix_len": 4096,
    "prefix_groups": 64,
    "tokens_per_request": 2**20,
}
TEXTS = ("1e-320", "5e-324", "1e400", "-0", "0x10", "1_000", " 7", "7 ", "", "1,5", "١٢", "+3")


def _numbers(bound: bounds.Bound) -> st.SearchStrategy[str]:
    """Text of numbers around and far beyond ``bound``, and near-numbers."""
    ends = [bound.lo, bound.hi] if math.isfinite(bound.hi) else [bound.lo]
    near = st.sampled_from(ends).map(lambda v: v * (1 + 1e-12) if v else 5e-324)
    wide = st.one_of(
        st.integers(-(2**66), 2**66),
        st.integers(int(bound.lo), int(min(bound.hi, 2**40))),
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(min_value=float(bound.lo), max_value=float(min(bound.hi, 1e300))),
        st.sampled_from(ends),
        near,
    )
    as_text = wide.map(lambda v: str(int(v)) if bound.integer and _whole(v) else repr(v))
    return st.one_of(as_text, st.sampled_from(TEXTS))


def _whole(v: float) -> bool:
    return isinstance(v, int) or (math.isfinite(v) and float(v).is_integer())


def _parsed(text: str, integer: bool) -> float | None:
    """The value Click reads from ``text`` (``int()``/``float()``, which take
    spaces, underscores and other scripts' digits), or None when it is no number."""
    try:
        return int(text) if integer else float(text)
    except ValueError:
        return None


def _refuse(name: str) -> None:
    raise AssertionError(f"--json wrote {name}")


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(BASE))
@fuzz_settings(int(__import__("os").environ.get("FUZZ_N", 60)))
@given(data=st.data())
def test_a_random_number_is_one_line_or_a_result(capsys, tmp_path, monkeypatch, command, data):
    monkeypatch.chdir(tmp_path)
    params = cli_options.numeric_params(COMMANDS[command])
    p = data.draw(st.sampled_from(params), label="option")
    bound = bounds.OPTION_BOUNDS[p.name]
    text = data.draw(_numbers(bound), label="value")
    value = _parsed(text, bool(bound.integer))
    inside = value is not None and bound.holds(value)
    if inside and p.name in WORK:
        assume(value <= WORK[p.name])
    code, out, err = run_cli(capsys, *BASE[command], f"{p.opts[0]}={text}")
    assert "Traceback" not in err, err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("plan: error: "), err
        assert out == ""
        if not inside and value is not None:  # out of bound: the line names the option
            assert any(o in lines[0] for o in p.opts), lines[0]
        return
    assert inside, (p.opts[0], text, code, err)  # ran: the value was in its bound
    assert code in (0, 1), err
    json.loads(out, parse_constant=_refuse)
