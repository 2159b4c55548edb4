"""Stage 10, the ``plan`` command line (Typer and rich live here and nowhere else).

``main`` holds the app and the simulation commands; ``options`` defines every
shared option once; one module per command group (``capacity``, ``maxrate``,
``size``, ``calibrate``, ``models``); ``inert`` refuses options that would have
no effect; ``progress`` renders the sweep engine's progress callbacks.
"""

from planner.cli.commands import app, main

__all__ = ["app", "main"]
