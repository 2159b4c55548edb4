"""The ``plan`` commands that README.md and docs/*.md show, and how a test runs them.

Every command is read from the pages' shell blocks (``page_commands``). Most run
page by page in tests/test_readme.py; the pages whose commands sweep thousands
of configurations run in tests/test_docs_sweeps.py, so that pytest-xdist runs
them beside it. Three kinds are not run there, each for a stated reason and
each run somewhere: ``ELSEWHERE`` (a test that also checks the figures the page
quotes) and ``LONG`` (minutes each: tests/test_docs_sweeps.py runs them under
``pytest --run-long``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from helpers import run_cli

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

# A command containing the key runs in the named test file, which checks the
# figures the page quotes beside it.
ELSEWHERE = {
    "llama-3.1-70b --gpu H100 --tensor-parallel-size 4 --max-model-len 32768": (
        "tests/test_capacity_commands.py"
    ),
}
# Minutes each on 2 cores (the sizing search about 2.5 min, the speed record
# several): run by tests/test_docs_sweeps.py only under ``pytest --run-long``.
LONG = ("sweeps/azure-conv-size.toml", "bench --record")
# Tens of seconds each: their pages run in tests/test_docs_sweeps.py, on the
# spec with each log/linear axis cut to SHRUNK_NUM values (``shrunk``), and as
# written under ``pytest --run-long``.
HEAVY = ("sweeps/seed-starvation.toml",)
SHRUNK_NUM = 6
# The address a page gives for the user's own Dask scheduler.
SCHEDULER = "tcp://SCHEDULER:8786"


def page_commands(page: Path) -> list[tuple[list[str], int]]:
    """(argv after ``plan``, expected exit code) for each ``plan`` command in ``page``.

    A trailing ``# ... exit N`` comment gives the exit status the page promises."""
    blocks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", page.read_text(), flags=re.S)
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


def _has(argv: list[str], keys: tuple[str, ...] | dict[str, str]) -> bool:
    return any(k in " ".join(argv) for k in keys)


def is_long(argv: list[str]) -> bool:
    return _has(argv, LONG)


def runs_elsewhere(argv: list[str]) -> bool:
    return _has(argv, ELSEWHERE)


def runnable(page: Path) -> list[tuple[list[str], int]]:
    """The page's commands a page test runs, in the page's order (``plan --help``
    lines are run by the parse test; LONG and ELSEWHERE ones are left out)."""
    return [
        (a, c)
        for a, c in page_commands(page)
        if a and not a[0].startswith("-") and not is_long(a) and not runs_elsewhere(a)
    ]


def is_heavy(page: Path) -> bool:
    return any(_has(a, HEAVY) for a, _ in runnable(page))


def _under(tmp: Path, path: str) -> str:
    """``path`` (relative or absolute) at the same place under ``tmp``, its folder made."""
    target = tmp / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    return str(target)


def shrunk(spec: str, tmp: Path) -> str:
    """A copy of the HEAVY sweep spec ``spec`` under ``tmp`` (same file name,
    so the same default results/NAME) whose ranged axes take SHRUNK_NUM values:
    the page's commands, flags and file flow, on a grid about 100x smaller.
    Only for synthetic specs (a relative trace path would not follow the copy)."""
    text = (ROOT / spec).read_text()
    assert "[workload]" in text and 'kind = "synthetic"' in text, spec
    small, n = re.subn(r"\bnum = \d+", f"num = {SHRUNK_NUM}", text)
    assert n, f"{spec}: no ranged axis to shrink"
    copy = _under(tmp / "shrunk", spec)
    Path(copy).write_text(small)
    return copy


# The options whose value is a file or folder the command writes.
WRITERS = ("--out", "--requests-out", "--plot")


def redirect(
    argv: list[str], tmp: Path, scheduler: str | None = None, shrink: bool = False
) -> list[str]:
    """Send everything a command writes under ``tmp``, at the path it names
    (``results/x`` to ``tmp/results/x``), and the user's scheduler address to
    ``scheduler``: sweep and size --out (given, or their default
    results/NAME), any of ``WRITERS``, heatmap's and report's result under results/.
    With ``shrink``, a HEAVY spec is replaced by its ``shrunk`` copy."""
    argv = list(argv)
    if shrink:
        argv = [shrunk(a, tmp) if a in HEAVY else a for a in argv]
    if argv[0] in ("sweep", "size") and "--dry-run" not in argv and "--out" not in argv:
        argv += ["--out", f"results/{Path(argv[1]).stem}"]
    if argv[0] in ("heatmap", "report") and argv[1].startswith("results/"):
        argv[1] = _under(tmp, argv[1])
    for flag in WRITERS:
        if flag in argv:
            i = argv.index(flag) + 1
            argv[i] = _under(tmp, argv[i])
    if SCHEDULER in argv:
        assert scheduler, "a page names a Dask scheduler but the test started none"
        argv[argv.index(SCHEDULER)] = scheduler
    return argv


def uses_scheduler(page: Path) -> bool:
    return any(SCHEDULER in a for a, _ in runnable(page))


def run_page(
    capsys: pytest.CaptureFixture,
    tmp_path: Path,
    page: Path,
    done: set[str] | None = None,
    shrink: bool = False,
) -> None:
    """Run a page's commands in its order (a sweep before its heatmap), writing
    under ``tmp_path``; a page naming the user's Dask scheduler gets a LocalCluster.
    ``done``: commands already run into the same ``tmp_path`` by an earlier page
    (pages sharing it skip a sweep another page ran, whose result is there).
    ``shrink``: HEAVY specs run on their ``shrunk`` copies (``redirect``)."""
    scheduler = None
    cluster = None
    if uses_scheduler(page):
        from dask.distributed import LocalCluster

        scratch = str(tmp_path / "dask")
        cluster = LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            dashboard_address=":0",
            local_directory=scratch,  # workers and nannies
            scheduler_kwargs={"local_directory": scratch},
        )
        scheduler = cluster.scheduler_address
    try:
        for argv, expected in runnable(page):
            if done is not None and (key := " ".join(argv)) in done:
                continue
            code, out, err = run_cli(capsys, *redirect(argv, tmp_path, scheduler, shrink))
            if done is not None:
                done.add(key)
            assert code == expected, f"{page.name}: plan {' '.join(argv)}: exit {code}\n{err}"
    finally:
        if cluster is not None:
            cluster.close()
