"""The kernel reads like the scheduler it models (issue: phases as functions,
state in records): every jitted function fits on a screen and takes few
parameters, and the step loop calls the phases in vLLM's order."""

from __future__ import annotations

import ast
from pathlib import Path

import planner.kernel

KERNEL = Path(planner.kernel.__file__).parent
MAX_LINES = 150
MAX_PARAMS = 12


def _jitted_functions() -> list[tuple[str, ast.FunctionDef]]:
    found = []
    for path in sorted(KERNEL.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                "njit" in ast.unparse(d) for d in node.decorator_list
            ):
                found.append((f"{path.name}::{node.name}", node))
    return found


def test_every_kernel_function_is_short_with_few_parameters() -> None:
    funcs = _jitted_functions()
    assert len(funcs) > 30  # the scan found the kernel
    too_long = {n: f.end_lineno - f.lineno + 1 for n, f in funcs}
    too_long = {n: k for n, k in too_long.items() if k > MAX_LINES}
    too_many = {n: len(f.args.args) for n, f in funcs if len(f.args.args) > MAX_PARAMS}
    assert not too_long, f"functions over {MAX_LINES} lines: {too_long}"
    assert not too_many, f"functions over {MAX_PARAMS} parameters: {too_many}"


def test_the_step_loop_calls_the_phases_in_order() -> None:
    loop = dict(_jitted_functions())["step.py::run_steps"]
    calls = [
        n
        for n in ast.walk(loop)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.startswith("_")
    ]
    called = [n.func.id for n in sorted(calls, key=lambda n: (n.lineno, n.col_offset))]
    order = [
        "_arrivals",
        "_adapt_cap_if",  # variant.gated: a mitigation (policies.py)
        "_decode_fast_path",
        "_begin_step",
        "_schedule_running",
        "_schedule_waiting",
        "_step_time",
        "_update_after_schedule",
        "_update_from_output_async_if",  # variant.gated: compiled only when a config is async
        "_update_from_output",
        "_end_step",
    ]
    positions = [called.index(name) for name in order]
    assert positions == sorted(positions), called
