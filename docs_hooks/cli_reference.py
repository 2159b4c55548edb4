"""MkDocs hook: the command-line reference page from the ``plan`` app itself.

``docs/cli.md`` holds the marker ``<!-- plan-cli -->``; this hook replaces it
with the Markdown that Typer's own documentation generator
(``typer.cli.get_docs_for_click``, what ``typer MODULE utils docs`` prints)
writes for ``planner.cli.commands.app``, so the page lists every command and
option with the defaults and help that ``plan COMMAND --help`` shows.
"""

from __future__ import annotations

import typer
import typer.cli

MARKER = "<!-- plan-cli -->"


def on_page_markdown(markdown: str, page: object, **_: object) -> str:
    """Replace ``MARKER`` in a page with the generated reference."""
    if MARKER not in markdown:
        return markdown
    from planner.cli.commands import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command)
    docs = typer.cli.get_docs_for_click(obj=command, ctx=ctx, name="plan", title=" ")
    # Typer starts at a level-1 heading; the page has its own title.
    docs = "\n".join("#" + line if line.startswith("#") else line for line in docs.splitlines())
    return markdown.replace(MARKER, docs)
