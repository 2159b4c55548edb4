"""Issue 18, case 7: every ``plan`` command the README shows is one that works.

Each command in the README's shell blocks must parse against the real command
(every option exists, every value converts). Commands that take seconds run
for real, in a temporary folder where they would write; a trailing
``# ... exit N`` comment gives the exit status the README promises.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from helpers import run_cli
from planner.cli import app

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
# Commands that take minutes, need a cluster or stand for the user's own file:
# parsed, not run.
SLOW = (
    "sweeps/seed-starvation.toml",
    "sweeps/azure-conv.toml",
    "sweeps/azure-conv-size.toml",
    "--address",
    "results/seed-",
    "log.csv",
    "--latency measured",  # needs the optional extra aic (tests/test_measured.py runs it)
)


def readme_commands() -> list[tuple[list[str], int]]:
    """(argv after ``plan``, expected exit code) for each README ``plan`` command."""
    blocks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", README.read_text(), flags=re.S)
    found = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            code, _, comment = line.partition("#")
            m = re.search(r"exit (\d)", comment)
            for part in code.split("&&"):
                first = part.split()[:1]
                if first and Path(first[0]).name == "plan":
                    found.append((shlex.split(part)[1:], int(m.group(1)) if m else 0))
    return found


COMMANDS = readme_commands()


def test_readme_has_commands():
    names = {argv[0] for argv, _ in COMMANDS}
    assert {"run", "sweep", "heatmap", "check", "safe-limit"} <= names


@pytest.mark.parametrize("argv,_code", COMMANDS, ids=[" ".join(a)[:60] for a, _ in COMMANDS])
def test_readme_command_parses(argv, _code):
    group = typer.main.get_command(app)
    cmd = group.commands[argv[0]]
    cmd.make_context(argv[0], list(argv[1:]))  # raises on an unknown option or a bad value


def _redirect(argv: list[str], tmp: Path) -> list[str]:
    """Send outputs to ``tmp``: sweep and size --out, heatmap's dataset and --out."""
    argv = list(argv)
    if argv[0] in ("sweep", "size") and "--dry-run" not in argv and "--out" not in argv:
        argv += ["--out", str(tmp / Path(argv[1]).stem)]
    if argv[0] == "heatmap":
        argv[1] = str(tmp / Path(argv[1]).name)
        if "--out" in argv:
            i = argv.index("--out") + 1
            argv[i] = str(tmp / Path(argv[i]).name)
    return argv


RUNNABLE = [(a, c) for a, c in COMMANDS if not any(s in " ".join(a) for s in SLOW)]


def test_readme_commands_run(capsys, tmp_path, monkeypatch):
    """Run the fast commands in README order (the sweep before its heatmap)."""
    monkeypatch.chdir(ROOT)
    assert RUNNABLE, "no runnable README command found"
    for argv, expected in RUNNABLE:
        code, out, err = run_cli(capsys, *_redirect(argv, tmp_path))
        assert code == expected, f"plan {' '.join(argv)}: exit {code}\n{err}"
