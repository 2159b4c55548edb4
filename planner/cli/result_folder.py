"""The ``--out`` folder of ``plan run`` and ``plan validate``: new, empty or
an earlier result of the same command (whose files are replaced)."""

from __future__ import annotations

from pathlib import Path

from planner.cli.errors import InputError


def check_result_folder(folder: Path, files: tuple[str, ...], what: str) -> None:
    """Refuse ``folder`` unless it is new, empty or holds only ``files`` (an
    earlier ``what``). Called before any work. Raises InputError (one line)."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--out {folder}: not a folder")
    held = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    other = [n for n in held if n not in files]
    if other:
        raise InputError(
            f"--out {folder}: holds {', '.join(other[:3])}, not a {what}; give a new or "
            "empty folder"
        )
