"""Parquet output of a sweep: atomic chunk files, a manifest, the final dataset.

Layout under ``results/NAME/``::

    data.parquet       the dataset: one row per config, sorted by config_id
    _manifest.json     spec fingerprint and chunk plan, for --resume
    _chunks/           chunk-00000.parquet ... while the sweep runs

Readers open the file, ``results/NAME/data.parquet``: pandas, polars and duckdb
all read it whatever sits beside it. The folder itself is not a portable
dataset path: pyarrow and pandas skip the ``_``- and ``.``-prefixed entries,
but polars refuses a folder holding ``_manifest.json``, and duckdb reads
``_chunks/`` too (duplicate rows while a sweep runs). Nothing else belongs in
the folder; ``plan heatmap`` writes its picture beside it
(planner.plots.default_out).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

DATA = "data.parquet"
MANIFEST = "_manifest.json"
CHUNKS = "_chunks"


def atomic_write_bytes(path: Path, write: object) -> None:
    """Call ``write(tmp_path)``, then rename the temp file onto ``path``.

    The file gets the usual umask permissions (mkstemp alone would give 0600).
    Raises OSError on failure; the temp file is removed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)  # type: ignore[operator]
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_table(df: pd.DataFrame, path: Path, metadata: dict[str, str] | None = None) -> None:
    """Write ``df`` (no index) to ``path`` atomically, with key-value metadata."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    if metadata:
        merged = dict(table.schema.metadata or {})
        merged.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(merged)
    atomic_write_bytes(path, lambda tmp: pq.write_table(table, tmp))


def chunk_path(out: Path, index: int) -> Path:
    return out / CHUNKS / f"chunk-{index:05d}.parquet"


def read_manifest(out: Path) -> dict | None:
    p = out / MANIFEST
    if not p.exists():
        return None
    return json.loads(p.read_text())


def write_manifest(out: Path, manifest: dict) -> None:
    text = json.dumps(manifest, indent=1, sort_keys=True)
    atomic_write_bytes(out / MANIFEST, lambda tmp: Path(tmp).write_text(text))


def consolidate(out: Path, n_chunks: int, metadata: dict[str, str]) -> pd.DataFrame:
    """Merge the chunk files into ``data.parquet`` (rows sorted by config_id),
    then remove them."""
    parts = [pd.read_parquet(chunk_path(out, i)) for i in range(n_chunks)]
    df = pd.concat(parts, ignore_index=True).sort_values("config_id", kind="stable")
    df = df.reset_index(drop=True)
    write_table(df, out / DATA, metadata)
    for i in range(n_chunks):
        chunk_path(out, i).unlink()
    (out / CHUNKS).rmdir()
    return df
