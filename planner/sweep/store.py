"""Parquet output of a sweep: the folder's lock, atomic chunk files with
checksums, a manifest, the final dataset.

Layout under ``results/NAME/``::

    data.parquet        the dataset: one row per config, sorted by config_id
    _manifest.json      spec fingerprint, chunk plan, each written chunk's sha256
                        and row count, the dataset's sha256 once complete
    _chunks/            chunk-00000.parquet ... while the sweep runs
    _sweep.lock         the folder's lock (``filelock``), held while a sweep runs
    _sweep.holder.json  who holds it (pid, host, start time), while it is held

Readers open the file, ``results/NAME/data.parquet``: pandas, polars and duckdb
all read it whatever sits beside it. The folder itself is not a portable
dataset path: pyarrow and pandas skip the ``_``- and ``.``-prefixed entries,
but polars refuses a folder holding ``_manifest.json``, and duckdb reads
``_chunks/`` too (duplicate rows while a sweep runs). Nothing else belongs in
the folder; ``plan heatmap`` writes its picture beside it
(planner.plots.heatmap.default_out).

Every file is written to a ``.NAME.<random>.tmp`` beside it and renamed into
place, so a killed write leaves at most such a temp file (removed by the next
sweep that holds the lock), never a partial file under the real name.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field

DATA = "data.parquet"
MANIFEST = "_manifest.json"
CHUNKS = "_chunks"
LOCK = "_sweep.lock"
HOLDER = "_sweep.holder.json"
SIZE_SEARCH = "search.json"  # a plan size folder's record of its search (cli.size)

# Fault injection for tests: seconds to sleep between writing a temp file and
# renaming it into place, so that a kill can land inside a write.
WRITE_DELAY_ENV = "PLANNER_TEST_WRITE_DELAY"
SHA256_HEX = r"^[0-9a-f]{64}$"


class FolderBusy(ValueError):
    """Another sweep holds the output folder's lock; the message is one line."""


class DamagedFile(ValueError):
    """A file that does not match its manifest record; the message says how."""


class DamagedChunks(ValueError):
    """Chunk files that failed verification at the merge: ``problems`` maps each
    chunk index to what is wrong with it."""

    def __init__(self, problems: dict[int, str]) -> None:
        super().__init__(f"{len(problems)} chunk file(s) failed verification")
        self.problems = problems


class ChunkRecord(BaseModel):
    """What the manifest keeps of one written chunk file."""

    sha256: str = Field(pattern=SHA256_HEX)  # of the file's bytes
    rows: int = Field(ge=0)


class Manifest(BaseModel):
    """``_manifest.json``: what ``--resume`` needs to continue a sweep and to
    verify what is on disk."""

    model_config = ConfigDict(extra="ignore")

    spec_fingerprint: str  # Sweep.fingerprint(): spec text + workload fingerprints
    planner_version: str
    chunk_size: int = Field(ge=1)
    chunk_sizes: list[tuple[list[Any], int]]  # [workload key, configs per chunk]
    num_chunks: int = Field(ge=1)
    num_configs: int = Field(ge=1)
    complete: bool = False
    chunks: dict[int, ChunkRecord] = Field(default_factory=dict)  # chunk index -> record
    data_sha256: str | None = Field(default=None, pattern=SHA256_HEX)

    def fixed_sizes(self) -> dict[tuple, int]:
        """Configs per chunk, per workload key (for ``plan_chunks(fixed_sizes=)``)."""
        return {tuple(k): int(v) for k, v in self.chunk_sizes}


def sha256_file(path: Path | str) -> str:
    """sha256 (hex) of a file's bytes, read in blocks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def atomic_write_bytes(path: Path, write: Callable[[str], object]) -> str:
    """Call ``write(tmp_path)``, then rename the temp file onto ``path``.

    Returns the sha256 (hex) of the bytes that were renamed into place. The file
    gets the usual umask permissions (mkstemp alone would give 0600). Raises
    OSError on failure; the temp file is removed (a kill leaves it behind:
    ``remove_stale_temps``).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        digest = sha256_file(tmp)
        if delay := os.environ.get(WRITE_DELAY_ENV):
            time.sleep(float(delay))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return digest


def write_table(df: pd.DataFrame, path: Path, metadata: dict[str, str] | None = None) -> str:
    """Write ``df`` (no index) to ``path`` atomically, with key-value metadata.
    Returns the file's sha256 (hex)."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    if metadata:
        merged = dict(table.schema.metadata or {})
        merged.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(merged)
    return atomic_write_bytes(path, lambda tmp: pq.write_table(table, tmp))


def chunk_path(out: Path, index: int) -> Path:
    """Where chunk ``index`` of the sweep in ``out`` is written."""
    return out / CHUNKS / f"chunk-{index:05d}.parquet"


def write_chunk(df: pd.DataFrame, out: Path, index: int) -> ChunkRecord:
    """Write one chunk's rows atomically; returns its manifest record."""
    return ChunkRecord(sha256=write_table(df, chunk_path(out, index)), rows=len(df))


def read_verified(path: Path, sha256: str, rows: int | None = None) -> pd.DataFrame:
    """Read a Parquet file whose bytes must have sha256 ``sha256`` (and ``rows``
    rows). The bytes are hashed and parsed from one read, so what is parsed is
    what was checked. Raises DamagedFile."""
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise DamagedFile("checksum mismatch")
    df = pd.read_parquet(io.BytesIO(data))
    if rows is not None and len(df) != rows:
        raise DamagedFile(f"{len(df)} rows, the manifest says {rows}")
    return df


def chunk_problem(path: Path, record: ChunkRecord | None, rows: int) -> str | None:
    """Why the chunk file at ``path`` cannot be trusted (its manifest record is
    ``record``, the plan gives it ``rows`` configs), or None if it verifies."""
    if record is None:
        return "no checksum in the manifest"
    if record.rows != rows:
        return f"the manifest records {record.rows} rows, the plan {rows}"
    if sha256_file(path) != record.sha256:
        return "checksum mismatch"
    return None


def consolidate(
    out: Path, records: dict[int, ChunkRecord | None], metadata: dict[str, str]
) -> tuple[pd.DataFrame, str]:
    """Verify every chunk file against its record (index -> record, None if the
    manifest has none) and merge them into ``data.parquet``, rows sorted by
    config_id. Returns (dataset, sha256 of data.parquet). The chunk files stay
    (``remove_chunks``, once the manifest says the sweep is complete).

    Raises DamagedChunks naming every chunk that is missing or fails
    verification; nothing is written then."""
    parts, problems = [], {}
    for index in sorted(records):
        record = records[index]
        path = chunk_path(out, index)
        try:
            if record is None:
                raise DamagedFile("no checksum in the manifest")
            parts.append(read_verified(path, record.sha256, record.rows))
        except FileNotFoundError:
            problems[index] = "missing"
        except DamagedFile as e:
            problems[index] = str(e)
    if problems:
        raise DamagedChunks(problems)
    df = pd.concat(parts, ignore_index=True).sort_values("config_id", kind="stable")
    df = df.reset_index(drop=True)
    return df, write_table(df, out / DATA, metadata)


# Columns of a sweep dataset (``metrics.summarize``'s): those every picture
# reads, those a verdict reads (a recommendation, the report), and those a
# sweep with an ``[slo]`` table adds.
DRAWN_COLUMNS = ("config_id", "outcome", "completed")
JUDGED_COLUMNS = ("livelocked", "step_limit_hit", "overloaded")
SLO_COLUMNS = ("meets_slo", "goodput_rps")


def dataset_problem(df: pd.DataFrame, need: tuple[str, ...]) -> str | None:
    """Why ``df`` (a ``data.parquet`` as read) is not a sweep dataset the
    pictures and answers can trust, in a few words, or None: a column of
    ``need`` missing, no rows, or a config_id twice (a dataset edited by
    hand, or damaged)."""
    if missing := [c for c in need if c not in df.columns]:
        return f"no column {', '.join(missing)}"
    if df.empty:
        return "no rows"
    twice = df["config_id"][df["config_id"].duplicated()]
    if len(twice):
        return f"config_id {int(twice.iloc[0])} twice"
    return None


def read_manifest(out: Path) -> Manifest | None:
    """The manifest in ``out``, or None if there is none. Raises OSError, or
    ValueError (pydantic's ValidationError) for a file that is not a manifest."""
    p = out / MANIFEST
    if not p.exists():
        return None
    return Manifest.model_validate_json(p.read_bytes())


def finished_chunks(out: Path) -> int:
    """Chunks the manifest in ``out`` records as written (0 with no folder, no
    manifest or one that cannot be read): what ``--resume`` would keep."""
    try:
        manifest = read_manifest(out)
    except (OSError, ValueError):
        return 0
    return 0 if manifest is None else len(manifest.chunks)


def write_manifest(out: Path, manifest: Manifest) -> None:
    """Replace ``out/_manifest.json`` atomically."""
    text = manifest.model_dump_json(indent=1)
    atomic_write_bytes(out / MANIFEST, lambda tmp: Path(tmp).write_text(text))


def remove_stale_temps(out: Path) -> None:
    """Remove the temp files of writes that were killed (``.NAME.<random>.tmp``
    of the files above, in ``out`` and ``out/_chunks``). Call it only while
    holding the folder's lock."""
    ours = [f".{name}." for name in (DATA, MANIFEST, HOLDER)]
    for p in out.glob(".*.tmp"):
        if any(p.name.startswith(prefix) for prefix in ours):
            p.unlink(missing_ok=True)
    if (out / CHUNKS).is_dir():
        for p in (out / CHUNKS).glob(".chunk-*.parquet.*.tmp"):
            p.unlink(missing_ok=True)


def remove_chunks(out: Path) -> bool:
    """Remove ``out/_chunks`` with the chunk and temp files in it. Returns False
    (and leaves the folder) if it also holds files a sweep does not write."""
    folder = out / CHUNKS
    if not folder.is_dir():
        return True
    for p in folder.glob("chunk-*.parquet"):
        p.unlink(missing_ok=True)
    remove_stale_temps(out)
    try:
        folder.rmdir()
    except OSError:
        return False
    return True


def _holder_record() -> dict[str, object]:
    now = datetime.datetime.now(datetime.UTC)
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": now.isoformat()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder(out: Path, wait_s: float = 2.0) -> str:
    """Who holds ``out``'s lock, from ``_sweep.holder.json``: "pid N on host H
    since T". The holder writes that file just after taking the lock, so it is
    re-read for up to ``wait_s`` seconds while it is missing or names a dead
    process on this host (left by a holder that was killed)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            rec = json.loads((out / HOLDER).read_text())
            pid, host, since = int(rec["pid"]), str(rec["host"]), str(rec["since"])
        except (OSError, ValueError, KeyError, TypeError):
            pid = None
        if pid is not None and (host != socket.gethostname() or _alive(pid)):
            return f"pid {pid} on host {host} since {since[:19].replace('T', ' ')} UTC"
        if time.monotonic() > deadline:
            return f"holder unknown: {out / HOLDER} is missing or stale"
        time.sleep(0.05)


def _new_dirs(out: Path) -> list[Path]:
    """``out`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    p = out.absolute()
    while not p.exists():
        missing.append(p)
        p = p.parent
    return missing


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold ``out``'s lock (``filelock.FileLock`` on ``out/_sweep.lock``, an
    OS-level lock the kernel drops when the process dies, even by SIGKILL) for
    the block, with ``_sweep.holder.json`` naming this process.

    Creates ``out`` if needed; if it created it and the block left nothing in
    it but the lock, removes it again. Raises FolderBusy at once, naming the
    holder, when another process holds the lock. The lock file itself stays
    (removing it while others may open it would let two processes lock two
    different files).
    """
    created = _new_dirs(out)
    out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(out / LOCK, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise FolderBusy(
            f"{out} is in use by another sweep ({holder(out)}); wait for it to finish "
            "or choose another --out"
        ) from None
    try:
        record = json.dumps(_holder_record())
        atomic_write_bytes(out / HOLDER, lambda tmp: Path(tmp).write_text(record))
        yield
    finally:
        (out / HOLDER).unlink(missing_ok=True)
        if created and {p.name for p in out.iterdir()} == {LOCK}:
            (out / LOCK).unlink()
            for d in created:
                with contextlib.suppress(OSError):
                    d.rmdir()
        lock.release()
