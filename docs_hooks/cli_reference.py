"""MkDocs hook: the command-line reference page from the ``plan`` app itself.

``docs/cli.md`` holds the marker ``<!-- plan-cli -->``; this hook replaces it
with one section per command: its name and, in a code block, exactly what
``plan COMMAND --help`` prints (Click's formatter on the command, 100 columns:
the help panels, each option's default and each numeric option's range), so
the page and the terminal never differ.
"""

from __future__ import annotations

import click
import typer

MARKER = "<!-- plan-cli -->"
WIDTH = 100


def _help(command: click.Command, name: str) -> str:
    ctx = click.Context(command, info_name=name, terminal_width=WIDTH, max_content_width=WIDTH)
    return command.get_help(ctx)


def on_page_markdown(markdown: str, page: object, **_: object) -> str:
    """Replace ``MARKER`` in a page with the generated reference."""
    if MARKER not in markdown:
        return markdown
    from planner.cli.commands import app

    group = typer.main.get_command(app)
    parts = ["## plan", "", "```text", _help(group, "plan"), "```", ""]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        parts += [f"## plan {name}", "", "```text", _help(command, f"plan {name}"), "```", ""]
    return markdown.replace(MARKER, "\n".join(parts))
