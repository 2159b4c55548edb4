"""``python -m planner.cli``: the ``plan`` command."""

from planner.cli.commands import main

main()
