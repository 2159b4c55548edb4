"""The distribution name and the import-name clash (issue 18 case 15): this project
installs as ``vllm-capacity-planner``, and ``plan`` refuses, with one line, to run
on a ``planner`` package that is not ours (the unrelated PyPI ``planner``)."""

from __future__ import annotations

import importlib.metadata
import sys
import types

import planner
from helpers import run_cli

DIST = "vllm-capacity-planner"
CHECK = ["check", "--num-gpu-blocks", "64", "--block-size", "16", "--max-model-len", "1024"]


def test_installed_under_its_own_distribution_name():
    assert importlib.metadata.version(DIST) == planner.__version__
    assert DIST in importlib.metadata.packages_distributions()["planner"]
    assert planner.__distribution__ == DIST


def test_our_package_passes_the_check(capsys):
    code, out, err = run_cli(capsys, *CHECK)
    assert code == 1 and "REFUSES" in out, err  # S3: the command itself ran


def test_a_foreign_planner_package_is_refused_in_one_line(capsys, monkeypatch):
    foreign = types.ModuleType("planner")
    foreign.__file__ = "/elsewhere/site-packages/planner/__init__.py"
    foreign.__version__ = "0.5.1"
    monkeypatch.setitem(sys.modules, "planner", foreign)
    monkeypatch.setattr(
        importlib.metadata, "packages_distributions", lambda: {"planner": ["planner", DIST]}
    )
    code, out, err = run_cli(capsys, *CHECK)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("plan: error:")
    assert "/elsewhere/site-packages/planner/__init__.py" in line
    assert "distribution planner," in line and f"not {DIST}" in line
    assert "virtual environment of its own" in line


def test_a_planner_without_init_is_refused_in_one_line(capsys, monkeypatch):
    leftover = types.ModuleType("planner")  # a namespace package: __file__ is None
    leftover.__file__ = None
    monkeypatch.setitem(sys.modules, "planner", leftover)
    code, out, err = run_cli(capsys, *CHECK)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "no __init__.py" in line and DIST in line
