"""``--help`` of every ``plan`` command, with stdout not a terminal (issue 18 case 13):
every option name printed in full at any width, and every help string printed
whole (no bracketed text swallowed as markup, no stray space before a full stop)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import click
import pytest
import typer

from helpers import run_cli
from planner.cli.commands import app, main

ROOT = typer.main.get_command(app)
COMMANDS = [[]] + [[name] for name in ROOT.commands]  # type: ignore[attr-defined]


def _command(path: list[str]) -> click.Command:
    return ROOT.commands[path[0]] if path else ROOT  # type: ignore[attr-defined]


def _squash(text: str) -> str:
    """Text without any whitespace, so that wrapping does not matter."""
    return "".join(text.split())


def _help(capsys, path: list[str]) -> str:
    try:
        main([*path, "--help"])
    except SystemExit as e:
        assert e.code in (0, None)
    out = capsys.readouterr().out
    assert out.strip()
    return out


def _check(out: str, command: click.Command) -> None:
    assert "…" not in out
    assert "\\[" not in out, "a Rich markup escape printed literally"
    stray = [line for line in out.splitlines() if re.search(r"\s\.(?!\.)", line)]
    assert not stray, f"space before a full stop: {stray}"
    squashed = _squash(out)
    words = set(re.split(r"[\s,/]+", out))
    for param in command.params:
        for name in [*param.opts, *param.secondary_opts]:
            if name.startswith("-"):
                assert name in words, f"{name} not printed in full"
        text = getattr(param, "help", None)
        if text:
            assert _squash(text) in squashed, f"help of {param.name} not printed whole: {text!r}"
    for name, sub in getattr(command, "commands", {}).items():
        summary = sub.get_short_help_str(limit=sys.maxsize)
        assert _squash(summary) in squashed, f"summary of {name} cut: {summary!r}"


@pytest.mark.slow
@pytest.mark.parametrize("columns", [None, "40", "80"])
@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "plan")
def test_help_prints_every_option_and_help_in_full(capsys, monkeypatch, path, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    _check(_help(capsys, path), _command(path))


@pytest.mark.slow
def test_help_through_a_pipe_in_a_fresh_process():
    """The installed entry point, stdout a pipe, COLUMNS unset."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    proc = subprocess.run(
        [sys.executable, "-c", "from planner.cli.commands import main; main()", "run", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    _check(proc.stdout, _command(["run"]))


def test_an_option_shared_by_commands_is_one_definition():
    """Issue 31: an option several commands take has one definition (the
    same help everywhere); ``--out`` names a different thing per command."""
    import typer

    from planner.cli.commands import app

    helps: dict[str, set[str]] = {}
    for cmd in typer.main.get_command(app).commands.values():
        for p in cmd.params:
            helps.setdefault(p.name, set()).add(getattr(p, "help", "") or "")
    assert {n for n, h in helps.items() if len(h) > 1} <= {"out"}


def test_plan_run_is_a_few_calls_and_its_help_has_panels(capsys):
    """Issue 31: ``plan run``'s body stays short (its options are a table in
    help panels), and every option of the table reaches the command."""
    import inspect

    from planner.cli import run as run_cli_module

    assert len(inspect.getsource(run_cli_module.run).splitlines()) <= 60
    code, out, _ = run_cli(capsys, "run", "--help")
    assert code == 0
    panels = ("Server (vLLM flags):", "Model and hardware:", "Workload: a trace:", "Step time:",
              "SLOs:", "Output:")  # fmt: skip
    positions = [out.index(p) for p in panels]
    assert positions == sorted(positions)
    names = [p.name for p in run_cli_module.RUN_OPTIONS]
    for name in names:
        assert f"--{name.replace('_', '-')}" in out or name in ("as_json",), name
