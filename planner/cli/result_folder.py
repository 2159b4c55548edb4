"""The ``--out`` folder of ``plan run`` and ``plan validate``: new, empty or
an earlier result of the same command (whose files are replaced)."""

from __future__ import annotations

from pathlib import Path

from planner.cli.errors import InputError, os_error_reason


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


def check_requests_path(path: Path) -> None:
    """Raise InputError (one line) unless ``path`` names a .csv or .parquet
    file (``--requests-out``; before any work, so nothing prints first)."""
    if path.suffix not in (".csv", ".parquet"):
        raise InputError(
            f"--requests-out: expected a .csv or .parquet file name, got {str(path)!r}"
        )


def write_requests_table(path: Path, df: object) -> None:
    """``--requests-out``: one row per request (a DataFrame) to ``path``,
    CSV or Parquet by its suffix, atomically; then one line on stderr.
    Raises InputError (one line) for another suffix or a failed write."""
    import sys

    from planner.sweep.store import atomic_write_bytes, write_table

    check_requests_path(path)
    try:
        if path.suffix == ".parquet":
            write_table(df, path)  # type: ignore[arg-type]
        else:
            atomic_write_bytes(path, lambda tmp: df.to_csv(tmp, index=False))  # type: ignore[attr-defined]
    except OSError as e:
        raise InputError(f"cannot write {path}: {os_error_reason(e)}") from None
    print(f"plan: wrote {len(df):,} requests to {path}", file=sys.stderr)  # type: ignore[arg-type]
