"""Where chunks run: in this process (``local``) or on a Dask cluster (``dask``).

Both write each chunk's Parquet file atomically into the same
``results/NAME/_chunks/`` layout and report finished chunks, with the file's
sha256 and row count (``store.ChunkRecord``), through a callback, so progress,
the manifest, ``--resume`` and the final dataset do not depend on the executor.
The driver holds the output folder's lock; workers only write chunk files.

Dask (``distributed``): one task per chunk, retried once; a chunk that fails
twice stops the sweep with a one-line error naming it, and the chunks already
written stay on disk for ``--resume``. Each worker process compiles (or loads
from Numba's cache) the kernel once, in a warm-up run before the first task,
and keeps the parsed spec between tasks. Workers need planner installed, and
the output directory and any trace file must be at the same paths on them
(a shared filesystem).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from planner.sweep import store
from planner.sweep.memory import resident_bytes
from planner.sweep.spec import Sweep, load_spec_text

# Fault injection for tests: a chunk index whose task raises on the workers.
FAIL_CHUNK_ENV = "PLANNER_TEST_FAIL_CHUNK"


CONNECT_TIMEOUT = "10s"  # how long --address gets to answer before a one-line refusal


class ExecutorError(ValueError):
    """A chunk failed for good, or the cluster cannot be reached; one line."""


Done = Callable[[object, store.ChunkRecord], None]


def run_local(
    sweep: Sweep, out: Path, todo: list, done: Done, tick: Callable[[int], None] | None = None
) -> None:
    """Run the chunks one after the other in this process (the kernel's
    thread pool uses every core); ``done(chunk, record)`` after each is
    written, ``tick(1)`` as each config's run ends (``chunk.run_chunk``)."""
    from planner.sweep.chunk import run_chunk

    for chunk in todo:
        done(chunk, store.write_chunk(run_chunk(sweep, chunk, tick), out, chunk.index))


_SPECS: dict[tuple[str, str], Sweep] = {}


def _chunk_task(text: str, base_dir: str, out: str, chunk: object) -> store.ChunkRecord:
    """One Dask task: simulate a chunk and write its file; returns the file's
    record (sha256 of the bytes written, rows). Runs on a worker."""
    from planner.sweep.chunk import run_chunk

    if os.environ.get(FAIL_CHUNK_ENV) == str(chunk.index):  # type: ignore[attr-defined]
        raise RuntimeError(f"injected failure in chunk {chunk.index}")  # type: ignore[attr-defined]
    key = (text, base_dir)
    if key not in _SPECS:
        _SPECS[key] = load_spec_text(text, Path(base_dir))
    df = run_chunk(_SPECS[key], chunk)  # type: ignore[arg-type]
    return store.write_chunk(df, Path(out), chunk.index)  # type: ignore[attr-defined]


def load_on_worker(text: str, base_dir: str, memory_limit: int | None = None) -> int:
    """Parse the spec on this worker as its tasks will (kept for them) and
    return what the worker then holds (``resident_bytes``, bytes). Raises
    SpecError when the grid's expansion would pass ``memory_limit``."""
    key = (text, base_dir)
    if key not in _SPECS:
        _SPECS[key] = load_spec_text(text, Path(base_dir), memory_limit=memory_limit)
    return resident_bytes()


def _warm_up(threads: int) -> bool:
    """Compile or load the plain kernel once per worker process; pin its threads."""
    import numba

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    return _warm_variants((False,), None)


def _warm_variants(caching: tuple[bool, ...], features: object) -> bool:
    """Compile or load, in a worker, the kernel variants a sweep runs: each
    prefix-caching value in ``caching`` with the sweep's feature markers
    (``features``, ``kernel.variant.Features``; None: plain), so that no
    chunk task waits for a compile."""
    from planner.api import simulate
    from planner.config import SchedulerConfig
    from planner.workload.arrays import LengthDist, synthetic

    d = LengthDist("constant", 8)
    for c in caching:
        cfg = SchedulerConfig(num_gpu_blocks=8, max_model_len=64, enable_prefix_caching=c)
        simulate([cfg] * 2, synthetic(2, 1.0, d, d), features=features)  # the parallel variant
    return True


@contextlib.contextmanager
def dask_client(address: str | None, n_workers: int | None, threads_per_worker: int = 1):  # noqa: ANN201
    """A connected ``distributed.Client`` whose workers have the kernel loaded:
    a new LocalCluster (worker processes, their logs silenced) when ``address``
    is None, with its scratch space in a temporary folder that is removed when
    the cluster closes (Dask's default, ``$TMPDIR/dask-scratch-space``, stays
    behind). Raises ExecutorError when the scheduler cannot be reached."""
    from distributed import Client, LocalCluster

    cluster = None
    scratch = None
    try:
        if address is None:
            scratch = tempfile.TemporaryDirectory(prefix="planner-dask-")
            cluster = LocalCluster(
                n_workers=n_workers or os.cpu_count() or 1,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.CRITICAL,
                local_directory=scratch.name,  # workers and nannies
                scheduler_kwargs={"local_directory": scratch.name},
            )
            client = Client(cluster)
        else:
            client = Client(address, timeout=CONNECT_TIMEOUT)
    except OSError as e:
        if scratch is not None:
            scratch.cleanup()
        raise ExecutorError(f"--address {address}: cannot reach the Dask scheduler ({e})") from None
    try:
        client.run(_warm_up, threads_per_worker)
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
        if scratch is not None:
            scratch.cleanup()


def run_dask(
    sweep: Sweep,
    out: Path,
    todo: list,
    done: Done,
    client: object,
    caching: tuple[bool, ...] = (False,),
    features: object = None,
) -> None:
    """Submit one task per chunk (retried once) and call ``done(chunk, record)``
    as each finishes, after every worker has compiled or loaded the kernel
    variants the chunks run (``caching``, the sweep's prefix-caching values,
    with its ``features``: ``_warm_variants``). Raises ExecutorError naming a
    chunk that failed twice."""
    from distributed import as_completed

    client.run(_warm_variants, caching, features)  # type: ignore[attr-defined]
    futures = {
        client.submit(  # type: ignore[attr-defined]
            _chunk_task, sweep.text, str(sweep.base_dir), str(out.resolve()), chunk,
            retries=1, pure=False, key=f"planner-{sweep.name}-chunk-{chunk.index}",
        ): chunk
        for chunk in todo
    }  # fmt: skip
    for future in as_completed(futures):
        chunk = futures[future]
        if future.status != "finished":
            err = future.exception()
            for f in futures:
                f.cancel()
            raise ExecutorError(
                f"chunk {chunk.index} failed twice ({err}); finished chunks are in {out}; "
                "rerun with --resume"
            )
        done(chunk, future.result())
