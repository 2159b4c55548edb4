"""The sweep engine's progress on the terminal (``planner.sweep.report.Reporter``).

On a terminal: a rich progress bar. Elsewhere (a log file, a pipe, CI): plain
lines at the start, every ~10% and at the end (``planner.sweep.report.Lines``),
since a bar redrawn into a file leaves cut fragments such as
"64/... configs 0:... ETA".
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from planner.sweep.report import Lines, Reporter


class Bar:
    """A ``Reporter`` drawing a rich progress bar on ``console`` (a terminal)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.task = None

    def line(self, text: str) -> None:
        self.console.print(text, soft_wrap=True, markup=False, highlight=False)

    def start(self, name: str, total: int, done: int) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("configs"),
            TextColumn("{task.fields[rate]:>8} configs/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.progress.start()
        self.task = self.progress.add_task(name, total=total, completed=done, rate="-")

    def advance(self, n: int, rate: float) -> None:
        if self.progress is not None:
            self.progress.update(self.task, advance=n, rate=f"{rate:,.0f}")

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def stderr_reporter() -> Reporter:
    """A bar when stderr is a terminal, plain lines otherwise."""
    console = Console(stderr=True, markup=False)
    return Bar(console) if console.is_terminal else Lines()
