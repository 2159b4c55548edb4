"""``python -m planner.cli``: the ``plan`` command."""

from planner.cli import main

main()
