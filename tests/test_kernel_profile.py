"""tools/kernel_profile.py's reading of ``perf report`` (the profiling run
itself needs ``perf`` and a cold compile, so it is not run here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "kernel_profile.py"
spec = importlib.util.spec_from_file_location("kernel_profile", TOOL)
kp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kp)

# Symbols as perf printed them (2026-12-08), shortened.
FAST = "_ZN7planner6kernel4step17_decode_fast_pathB2v1B48c8tJTIeFIjxB2IKSgI4CrvSCKg1MMfAww4h"
LOOP = "_ZN7planner6kernel4step9run_stepsB3v92B52c8tJTIeFIjxB2IKSgI4CrvSCKg1MMfAwK4LJISUWsIg"


@pytest.mark.parametrize(
    "text,want",
    [
        (FAST, "planner.kernel.step._decode_fast_path"),
        (LOOP, "planner.kernel.step.run_steps"),
        (
            "_ZN7planner6kernel5cycle15livelock_provenB3v12B4",
            "planner.kernel.cycle.livelock_proven",
        ),
        ("_PyEval_EvalFrameDefault", None),
        ("_ZN4llvm3foo", None),  # another mangled name, not the planner's
    ],
)
def test_demangle_reads_numbas_qualified_names(text, want):
    assert kp.demangle(text) == want


def test_shares_count_only_planner_functions_and_sum_to_one():
    report = "\n".join(
        [
            "# Samples: 53K of event 'cycles'",
            f"    30.00%  [.] {FAST}                 -      -",
            f"    10.00%  [.] {LOOP}                 -      -",
            f"     5.00%  [.] {FAST[:60]}xyz          -      -",  # another overload, same function
            "    40.00%  [.] _PyEval_EvalFrameDefault   -      -",
            "     2.00%  [k] clear_page_erms            -      -",
        ]
    )
    got = dict(kp.shares(report))
    assert set(got) == {"planner.kernel.step._decode_fast_path", "planner.kernel.step.run_steps"}
    assert got["planner.kernel.step._decode_fast_path"] == pytest.approx(35 / 45)
    assert sum(got.values()) == pytest.approx(1.0)
    assert kp.shares("    40.00%  [.] _PyEval_EvalFrameDefault") == []
