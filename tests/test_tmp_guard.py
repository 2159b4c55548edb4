"""The temp-file guard of tests/conftest.py fails a test that leaves files in TMPDIR
(issue 18 case 14) and passes tests that use tmp_path or clean up."""

from __future__ import annotations

from pathlib import Path

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()

SAMPLES = """
import os
import subprocess
import sys
import tempfile


def test_uses_tmp_path(tmp_path):
    (tmp_path / "a.txt").write_text("x")


def test_cleans_up():
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "a"), "w").close()


def test_leaks_mkdtemp():
    tempfile.mkdtemp(prefix="leaky-")


def test_child_process_leaks():
    code = "import tempfile; tempfile.mkstemp(prefix='child-')"
    subprocess.run([sys.executable, "-c", code], check=True)
"""


def test_guard_names_the_tests_that_leave_files(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_samples=SAMPLES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, errors=2)  # the session check joins the last teardown
    out = result.stdout.str()
    assert "ERROR at teardown of test_leaks_mkdtemp" in out and "leaky-" in out
    assert "ERROR at teardown of test_child_process_leaks" in out and "child-" in out
    assert "the test session left files in its TMPDIR" in out
    assert "test_uses_tmp_path" not in out.split("short test summary")[-1]
