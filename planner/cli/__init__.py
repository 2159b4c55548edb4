"""Stage 10, the ``plan`` command line (Typer and rich live here and nowhere else).

``commands`` holds the app and the simulation commands; ``options`` defines every
shared option once; one module per command group (``capacity``, ``maxrate``,
``size``, ``calibrate``, ``models``); ``inert`` refuses options that would have
no effect; ``progress`` renders the sweep engine's progress callbacks.

This module imports neither Numba nor the app until ``main`` has checked the
environment Numba reads when it loads (``planner.numba_cache.threads_problem``):
a bad value there is one line and exit 2, not Numba's traceback.
"""

from __future__ import annotations

import sys

from planner import numba_cache
from planner.cli.errors import EXIT_BAD_INPUT


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``plan`` script (``planner.cli.commands.main``, after
    the Numba environment check). Exits 2 with one line when
    ``$NUMBA_NUM_THREADS`` is unusable."""
    problem = numba_cache.threads_problem()
    if problem is not None:
        print(f"plan: error: {problem}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    from planner.cli.commands import main as run

    run(argv)


def __getattr__(name: str) -> object:
    """``planner.cli.app``: the Typer app, imported on first use (PEP 562)."""
    if name == "app":
        from planner.cli.commands import app

        return app
    raise AttributeError(f"module 'planner.cli' has no attribute {name!r}")


__all__ = ["app", "main"]
