"""How the sweep engine tells its caller what it is doing, without printing.

The driver (``planner.sweep.driver``) calls a ``Reporter``: ``line`` for a
message (a compile note, a recomputed chunk, a warning), ``start``/``advance``/
``stop`` for progress over a sweep's configurations. The command line renders
these with rich (``planner.cli.progress``); the Python API
(``planner.sweep.api.run_sweep``) prints plain lines or nothing. No module of
the engine imports rich or Typer.
"""

from __future__ import annotations

import sys
import time
from typing import Protocol, TextIO


class Reporter(Protocol):
    """Receives the sweep engine's messages and progress.

    ``start(name, total, done)``: a sweep of ``total`` configurations begins,
    ``done`` of them already on disk (a resumed sweep). ``advance(n, rate)``: n
    more configurations finished; ``rate`` is configurations per second of wall
    time since ``start``. ``stop()``: the sweep's chunks are all run.
    """

    def line(self, text: str) -> None: ...

    def start(self, name: str, total: int, done: int) -> None: ...

    def advance(self, n: int, rate: float) -> None: ...

    def stop(self) -> None: ...


class Silent:
    """A ``Reporter`` that says nothing (``run_sweep(quiet=True)``)."""

    def line(self, text: str) -> None:
        pass

    def start(self, name: str, total: int, done: int) -> None:
        pass

    def advance(self, n: int, rate: float) -> None:
        pass

    def stop(self) -> None:
        pass


# A plain-line reporter prints at the start, then each time another tenth of
# the grid is done, then at the end: about 12 lines whatever the grid's size.
STEPS = 10


class Lines:
    """A ``Reporter`` that writes plain lines to ``stream`` (default stderr):
    every message, and progress at the start, every ~10% and at the end, as
    ``NAME: 384/1,024 configs (37%), 12 configs/s, 31 s``. For logs and pipes,
    where a redrawn bar would leave fragments."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.name, self.total, self.done, self.next_mark, self.t0 = "", 0, 0, 0, 0.0
        self.rate = 0.0

    def _write(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        print(text, file=stream, flush=True)

    def line(self, text: str) -> None:
        self._write(text)

    def start(self, name: str, total: int, done: int) -> None:
        self.name, self.total, self.done, self.t0 = name, total, done, time.perf_counter()
        self.next_mark = self._mark_after(done)
        self._progress()

    def _mark_after(self, done: int) -> int:
        """The next done-count, above ``done``, at a whole tenth of the grid."""
        step = max(1, -(-self.total // STEPS))
        return (done // step + 1) * step

    def advance(self, n: int, rate: float) -> None:
        self.done += n
        self.rate = rate
        if self.done >= self.next_mark and self.done < self.total:
            self._progress()
            self.next_mark = self._mark_after(self.done)

    def stop(self) -> None:
        self._progress()

    def _progress(self) -> None:
        pct = 100 * self.done / self.total if self.total else 100.0
        shown = f"{self.rate:,.0f}" if self.rate >= 10 else f"{self.rate:.2g}" if self.rate else "-"
        rate = f"{shown} configs/s"
        self._write(
            f"{self.name}: {self.done:,}/{self.total:,} configs ({pct:.0f}%), {rate}, "
            f"{time.perf_counter() - self.t0:.0f} s"
        )
