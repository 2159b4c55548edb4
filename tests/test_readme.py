"""The README and the documentation site say what the code does (issues 18 and 31).

Every ``plan`` command in a shell block of README.md or docs/*.md must parse
against the real command (every option exists, every value converts) and runs
for real, page by page in the order shown, in a temporary folder where it
would write (tests/doc_commands.py says how, and which commands run elsewhere:
the sweeps of thousands of configurations in tests/test_docs_sweeps.py, the
minutes-long ones there under ``--run-long``); a trailing ``# ... exit N``
comment gives the exit status the page promises. The README's shape (length, the two
fresh-machine commands and the question table in its first 30 lines), its
links, and the figures it and the docs quote (catalog size, GPU presets, the
compile note, the quick sweep's time) are checked against the code.
"""

from __future__ import annotations

import re

import pytest
import typer
import yaml

from doc_commands import (
    DOCS,
    ELSEWHERE,
    PAGES,
    README,
    ROOT,
    is_heavy,
    is_long,
    page_commands,
    run_page,
    runnable,
    runs_elsewhere,
)
from helpers import run_cli
from planner.cli.commands import app

COMMANDS = [(page.name, argv, code) for page in PAGES for argv, code in page_commands(page)]


def test_the_pages_show_every_command():
    names = {argv[0] for _, argv, _ in COMMANDS if argv}
    group = typer.main.get_command(app)
    assert names >= set(group.commands) - {"bench"}, set(group.commands) - names


@pytest.mark.parametrize(
    "argv", [a for _, a, _ in COMMANDS], ids=[f"{p}: {' '.join(a)[:50]}" for p, a, _ in COMMANDS]
)
@pytest.mark.slow
def test_every_shown_command_parses(capsys, argv):
    group = typer.main.get_command(app)
    if not argv or argv[0].startswith("-"):  # plan --help
        assert run_cli(capsys, *argv)[0] == 0
        return
    cmd = group.commands[argv[0]]
    cmd.make_context(argv[0], list(argv[1:]))  # raises on an unknown option or a bad value


def test_every_command_not_run_here_runs_somewhere():
    """A command the page tests leave out is long (run under --run-long by
    tests/test_docs_sweeps.py) or run, with its figures, by the test file named."""
    for key, test_file in ELSEWHERE.items():
        text = " ".join((ROOT / test_file).read_text().split()).replace('", "', " ")
        assert any(key in " ".join(a) for _, a, _ in COMMANDS), f"no page shows {key}"
        assert key in text, f"{test_file} does not run {key}"
    left_out = [a for _, a, _ in COMMANDS if a and (is_long(a) or runs_elsewhere(a))]
    assert len(left_out) <= 5, left_out  # a new long command needs a reason, not a pass


LIGHT_PAGES = [p for p in PAGES if runnable(p) and not is_heavy(p)]


@pytest.mark.slow
@pytest.mark.parametrize("page", LIGHT_PAGES, ids=[p.name for p in LIGHT_PAGES])
def test_shown_commands_run(capsys, tmp_path, monkeypatch, page):
    monkeypatch.chdir(ROOT)
    run_page(capsys, tmp_path, page)


# --- The README's shape and links -------------------------------------------------


def test_the_readme_fits_on_two_screens():
    lines = README.read_text().splitlines()
    assert len(lines) <= 160
    head = "\n".join(lines[:30])
    assert "pip install ." in head and "plan sweep sweeps/quick.toml" in head  # the main job
    assert "pip install '.[test]'" in head and "-m pytest" in head  # the tests
    assert "| your question | the command |" in head
    fence = head.split("```bash", 1)[1].split("```", 1)[0]
    assert max(len(x) for x in fence.splitlines()) < 100


def _nav_pages() -> set[str]:
    text = (ROOT / "mkdocs.yml").read_text()
    config = yaml.load(text, Loader=yaml.BaseLoader)  # BaseLoader: skips mkdocs' !tags

    def walk(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [p for v in node.values() for p in walk(v)]
        return [p for v in node for p in walk(v)]

    return set(walk(config["nav"]))


def test_every_question_links_a_page_the_site_builds():
    text = README.read_text()
    table = [x for x in text.splitlines() if x.startswith("| ") and "](docs/" in x]
    assert len(table) >= 8
    nav = _nav_pages()
    for row in table:
        for target in re.findall(r"\]\(docs/([^)#]+)", row):
            assert (DOCS / target).is_file(), row
            assert target in nav, f"{target} is not in mkdocs.yml's nav"


def test_every_docs_page_is_in_the_nav():
    assert {p.name for p in DOCS.glob("*.md")} == _nav_pages()


# --- Quoted figures come from the code ----------------------------------------------


def _docs_text() -> str:
    return "\n".join(p.read_text() for p in PAGES)


def test_the_quoted_catalog_and_gpu_counts_are_the_catalogs():
    from planner.models.catalog import entries
    from planner.models.hardware import GPUS

    text = _docs_text()
    quoted = [int(n) for n in re.findall(r"catalog of (\d+)", text)]
    assert quoted and set(quoted) == {len(entries())}
    gpus = [int(n) for n in re.findall(r"(\d+)\s+GPU presets", text)]
    assert gpus and set(gpus) == {len(GPUS)}


def test_no_page_quotes_a_compile_time_the_code_does_not_measure():
    """Compile and sweep times are printed by the code that measured them
    (``api.compiled_note``, the sweep's ``--dry-run`` estimate); the pages and
    the quick spec name those, they do not type in a figure."""
    quick = (ROOT / "sweeps" / "quick.toml").read_text()
    comments = "\n".join(x for x in quick.splitlines() if x.lstrip().startswith("#"))
    assert not re.search(r"\d+\s*s\b|minute", comments), comments
    assert "--dry-run" in comments
    assert not re.search(r"about \d+ s on 2 cores", _docs_text())


def test_the_quick_sweep_prints_its_measured_estimate(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, _ = run_cli(capsys, "sweep", "sweeps/quick.toml", "--dry-run")
    assert code == 0
    m = re.search(r"estimated run time: ~([\d.]+) s .*measured just now", out)
    assert m and float(m.group(1)) > 0, out


def test_the_cli_reference_is_what_help_prints():
    """docs/cli.md's reference (docs_hooks/cli_reference.py) shows each command's
    --help as the terminal does: its help panels and its options' ranges."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "cli_reference", ROOT / "docs_hooks" / "cli_reference.py"
    )
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = hook.on_page_markdown((DOCS / "cli.md").read_text(), None)
    group = typer.main.get_command(app)
    for name in group.commands:
        assert f"## plan {name}\n" in page
    assert "Workload: a trace" in page and "[range: 0.001 to 1" in page  # run's panel, --mfu
