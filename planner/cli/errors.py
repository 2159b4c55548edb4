"""Errors the command line reports as one line (``planner.cli.commands.main``)."""

from __future__ import annotations

EXIT_BAD_INPUT = 2  # the exit status of every bad input (``planner.cli.commands.main``)


class InputError(Exception):
    """Bad user input, reported as one line."""


def os_error_reason(e: OSError) -> str:
    """Why an OSError happened, in one line: its strerror; otherwise its own
    text (pyarrow raises OSErrors with a message and no errno), or its class name."""
    return e.strerror or " ".join(str(e).split()) or type(e).__name__


def os_error_line(e: OSError) -> str:
    """One line for an OSError: "strerror: filename" when the OS gave both,
    otherwise ``os_error_reason``."""
    return f"{e.strerror}: {e.filename}" if e.strerror and e.filename else os_error_reason(e)
