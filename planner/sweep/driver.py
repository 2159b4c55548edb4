"""Runs a ``Sweep``: chunk plan, kernel calls, progress, resume, consolidation.

Work is split per workload (one kernel call never mixes workloads) into chunks
whose kernel state fits ``memory_limit``. Inside a workload, configs are
ordered by an estimate of their cost, so each chunk holds configs of similar
cost. Each kernel call deals the chunk's configs in a snake order
(``thread_order``, written for a static schedule; the kernel's thread pool
hands them out one by one in that order). The final
dataset is sorted by ``config_id``, so it does not depend on the chunking or on
the number of threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
import pandas as pd

from planner import api
from planner.api import compile_note_for, compiled_note, cpu_seconds, simulate
from planner.capacity import usable_blocks
from planner.config import SchedulerConfig
from planner.install_check import VERSION
from planner.kernel import warm
from planner.kernel.state import O_DECODE_TOKENS, bytes_per_config, kernel_scratch_bytes
from planner.kernel.variant import PLAIN, Features
from planner.sweep import executors, store
from planner.sweep.chunk import (  # noqa: F401 (driver API)
    Chunk,
    run_chunk,
    sweep_features,
    thread_order,
)
from planner.sweep.memory import resident_bytes
from planner.sweep.report import Reporter
from planner.sweep.spec import Sweep
from planner.text import count

DEFAULT_CHUNK_SIZE = 1024
# The per-request temporaries of metrics.summarize (C x R float64 arrays), per
# config and request, beside the kernel state. tracemalloc's peak over
# ``SimResult.metrics()``, 64 configs x 20,000 requests: 79 bytes, then 103
# with the unserved requests' lower bounds, then 114 on 2026-12-01 (per-token
# metrics, compat and sliding-window columns); allowance 114 + ~5%.
METRICS_BYTES_PER_REQUEST = 120
# api.simulate's copies of the workload for one kernel call, per request:
# arrival_ns int64 (and its float64 rounding temporary), prompt and max_tokens
# int32, priority int64, prefix group and shared length int32.
CALL_BYTES_PER_REQUEST = 8 + 8 + 4 + 4 + 8 + 4 + 4
# What the kernel's machine code adds to the process, beyond the state it runs
# on, per compiled variant (lone server or replicas' router, each without and
# with prefix caching: ``api.kernel_status``). Measured 2026-12-04 with
# ``python tools/memory_check.py --jit`` (Linux x86-64, Python 3.11, Numba 0.6x,
# 2 cores): resident memory after a 1-config and a 2-config ``simulate`` of
# each variant in turn, in two orders, once Numba's runtime was up
# (``chunk_budget`` starts it before it measures; about 38 MiB). From Numba's
# cache: 4 to 16 MiB per variant. Compiled cold: a first lone-server variant
# 95 MiB with kernel.warm's child, 135 MiB in one process (which a tight
# budget forces), a further lone variant 81 MiB; a first variant that
# is a router one 386 MiB (it compiles the lone server's step functions too,
# after which those cost nothing), a further router variant 133 to 181 MiB.
# Allowances: each figure plus 10-30%; a first variant's once per process.
JIT_LOAD_BYTES = 20 * 2**20  # each variant, from the cache
JIT_COMPILE_BYTES = 152 * 2**20  # first lone-server variant, cold
JIT_COMPILE_EACH_BYTES = 96 * 2**20  # each further lone-server variant, cold
JIT_COMPILE_FLEET_BYTES = 432 * 2**20  # first variant a router one, cold
JIT_COMPILE_FLEET_EACH_BYTES = 240 * 2**20  # each further router variant, cold
# The final merge (store.consolidate: the chunk files, their concatenation, the
# sorted copy, the Arrow table it writes), per config of the grid, once the
# chunks' state is gone. Measured: 1,985 bytes per row above the resident
# memory before the merge (ru_maxrss) for 384,000 rows of quick.toml's 70
# columns in 50 chunk files (about 670 bytes per row in pandas); plus ~30%.
DATASET_BYTES_PER_CONFIG = 2560


class SweepError(ValueError):
    """A sweep that cannot start or continue; the message is one line."""


@dataclass(frozen=True)
class ChunkPlan:
    chunks: list[Chunk]
    chunk_size: int
    bytes_per_config: dict[tuple, int]  # state + metrics, per config, per workload key
    sizes: dict[tuple, int]  # configs per chunk, per workload key
    scratch_bytes: dict[tuple, int]  # largest in-kernel scratch of one config, per key
    budget: MemoryBudget

    @property
    def num_configs(self) -> int:
        return sum(len(c.config_ids) for c in self.chunks)

    @property
    def largest_chunk_bytes(self) -> int:
        """The costliest chunk's ``MemoryBudget.chunk_bytes``."""
        return max(
            self.budget.chunk_bytes(
                len(c.config_ids),
                self.bytes_per_config[c.workload_key],
                self.scratch_bytes[c.workload_key],
            )
            for c in self.chunks
        )

    @property
    def peak_bytes(self) -> int:
        """Estimated peak resident bytes of the run: the budget's fixed part plus
        the larger of the costliest chunk and the final merge (they never overlap)."""
        return self.budget.fixed + max(self.largest_chunk_bytes, self.budget.dataset)


@dataclass(frozen=True)
class MemoryBudget:
    """What a sweep's process holds besides its chunks, all in bytes.

    ``process``: resident memory now (``resident_bytes``): the interpreter,
    the libraries, the kernels already loaded, the parsed spec and its
    workloads (memory a finished chunk or a trace's parse freed is not held).
    ``holder``: whose it is (this process, or a Dask worker). ``jit``: the kernel's machine
    code still to come (``jit_bytes``). ``calls``: one kernel call's copies of
    the workload (``CALL_BYTES_PER_REQUEST`` per request of the largest
    workload). ``threads``: kernel threads, so configs running at once.
    ``dataset``: the final merge (``DATASET_BYTES_PER_CONFIG`` per config),
    which runs after the last chunk, so it needs room beside the fixed part
    but not beside a chunk."""

    limit: int
    process: int
    jit: int
    jit_kind: str  # "loaded", or "cached"/"cold" and how many variants: the JIT allowance
    threads: int
    calls: int = 0
    dataset: int = 0
    holder: str = "planner and workloads"

    @property
    def fixed(self) -> int:
        """Bytes held whatever the chunk size."""
        return self.process + self.jit + self.calls

    @property
    def available(self) -> int:
        """Bytes left for one chunk (may be negative)."""
        return self.limit - self.fixed

    def chunk_bytes(self, k: int, per_config: int, scratch: int) -> int:
        """Peak bytes of a chunk of k configs: each config's state and metrics
        for the whole call, plus the in-kernel scratch of the configs that run
        at once (one per thread)."""
        return k * per_config + min(k, self.threads) * scratch

    def fit(self, per_config: int, scratch: int) -> int:
        """Largest k with ``chunk_bytes(k, ..) <= available`` (0 if none)."""
        avail = self.available
        k = max(avail, 0) // (per_config + scratch)
        if k < self.threads:
            return int(k)
        return int((avail - self.threads * scratch) // per_config)

    def describe(self) -> str:
        """The fixed part, term by term, in MiB."""
        return (
            f"{self.holder} {_mib(self.process)}, JIT {_mib(self.jit)} "
            f"({self.jit_kind}), kernel inputs {_mib(self.calls)}"
        )


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def config_bytes(num_requests: int) -> int:
    """Peak bytes one config needs while its chunk runs (state + metrics)."""
    return bytes_per_config(num_requests) + METRICS_BYTES_PER_REQUEST * num_requests


def scratch_bytes(sweep: Sweep, ids: np.ndarray, key: tuple) -> int:
    """The largest ``kernel_scratch_bytes`` of configs ``ids`` on workload ``key``
    (bytes one running config allocates inside the kernel)."""
    wl = sweep.workloads[key]
    tokens = np.asarray(wl.prompt_tokens, dtype=np.int64) + np.asarray(wl.output_tokens)
    longest = int(tokens.max()) if len(tokens) else 0
    seen: dict[tuple, int] = {}
    for i in ids:
        c = sweep.configs[int(i)]
        args = (
            wl.num_requests,
            c.num_gpu_blocks,
            c.block_size,
            c.max_num_seqs,
            min(longest, c.max_model_len),
            bool(c.enable_prefix_caching),
            bool(c.async_scheduling),
            c.kv_groups,
        )
        if args not in seen:
            seen[args] = kernel_scratch_bytes(*args)
    return max(seen.values(), default=0)


def cost_estimate(sweep: Sweep, ids: np.ndarray, key: tuple) -> np.ndarray:
    """A cost proxy per config: its likely concurrency, min(max_num_seqs, pool
    tokens / mean request tokens). Only used to order work."""
    mean_len = sweep.workloads[key].mean_request_tokens()
    out = np.empty(len(ids))
    for j, i in enumerate(ids):
        c = sweep.configs[i]
        pool = usable_blocks(c.num_gpu_blocks, c.null_block) * c.block_size
        out[j] = min(c.max_num_seqs, pool / mean_len)
    return out


def _variant_bytes(fleet: bool, state: str, first: bool) -> int:
    """JIT allowance of one kernel variant not yet in this process: ``state``
    ``'cached'`` loads it, anything else (``'cold'``, ``'unknown'``) compiles it;
    ``first``: no variant is in the process yet."""
    if state == "cached":
        return JIT_LOAD_BYTES
    if fleet:
        return JIT_COMPILE_FLEET_BYTES if first else JIT_COMPILE_FLEET_EACH_BYTES
    return JIT_COMPILE_BYTES if first else JIT_COMPILE_EACH_BYTES


def jit_bytes(
    fleet: bool = False, caching: Iterable[bool] = (False,), features: Features = PLAIN
) -> tuple[int, str]:
    """The JIT allowance still to come (bytes) and how it was chosen: the sum,
    over the kernel variants the sweep needs that are not compiled in this
    process, of each one's allowance (``_variant_bytes``: loaded from Numba's
    cache or compiled cold), the costliest charged as the first variant when no
    variant is in the process yet. The variants: the lone-server kernel
    without and with prefix caching (``caching``: the values the configs
    take), and with replicas (``fleet``) the router's kernel too, each with
    the run's feature markers (``features``, ``kernel.variant``)."""
    every = [(f, c) for f in (False, True) for c in (False, True)]
    states = {v: api.kernel_status(1, *v, features) for v in every}
    needed = [(f, c) for f in sorted({False, fleet}) for c in sorted(set(caching))]
    missing = [v for v in needed if states[v] != "loaded"]
    if not missing:
        return 0, "loaded"
    started = "loaded" in states.values()
    each = [_variant_bytes(f, states[(f, c)], False) for f, c in missing]
    first = [_variant_bytes(f, states[(f, c)], True) for f, c in missing]
    total = sum(each) + (0 if started else max(a - b for a, b in zip(first, each, strict=True)))
    cold = any(states[v] != "cached" for v in missing)
    return total, f"{'cold' if cold else 'cached'}, {count(len(missing), 'variant')}"


def kernel_variants(sweep: Sweep) -> list[SchedulerConfig]:
    """One config of each compiled kernel variant the sweep runs: with and
    without replicas, with and without prefix caching (``api.kernel_status``)."""
    seen: dict[tuple[bool, bool], SchedulerConfig] = {}
    for c in sweep.configs:
        seen.setdefault((c.replicas > 1, c.enable_prefix_caching), c)
    return list(seen.values())


def caching_values(sweep: Sweep) -> set[bool]:
    """Whether configs run with prefix caching: the kernel variants a sweep needs."""
    return {c.enable_prefix_caching for c in sweep.configs}


def has_fleets(sweep: Sweep) -> bool:
    """Whether any config runs replicas behind a router (``kernel/fleet.py``)."""
    return any(c.replicas > 1 for c in sweep.configs)


def _start_libraries() -> None:
    """Start what every run starts on first use, so that a budget measured
    after it counts it as held: Numba's runtime (a first jitted call: 38 MiB
    on 2026-12-04) and Arrow's Parquet writer and reader (a first round trip
    in memory: 15 MiB; chunk files are written and read back)."""
    usable_blocks(2, True)
    pd.read_parquet(io.BytesIO(pd.DataFrame({"x": [0.0]}).to_parquet()))


def chunk_budget(
    memory_limit: int,
    threads: int | None = None,
    fleet: bool = False,
    caching: Iterable[bool] = (False,),
    features: Features = PLAIN,
) -> MemoryBudget:
    """The fixed part of a sweep's memory for a process limit ``memory_limit``
    (bytes): what the process holds now (``resident_bytes``, so call it once
    the spec and its workloads are loaded) and the JIT allowance (``jit_bytes``
    of the variants ``fleet``, ``caching`` and ``features`` name).
    ``threads`` defaults to Numba's. ``plan_chunks`` adds the kernel inputs and
    refuses when nothing fits."""
    _start_libraries()
    jit, kind = jit_bytes(fleet, caching, features)
    return MemoryBudget(
        memory_limit,
        resident_bytes(),
        jit,
        kind,
        threads if threads is not None else numba.get_num_threads(),
    )


def plan_chunks(
    sweep: Sweep,
    chunk_size: int | None,
    memory_limit: MemoryBudget | int,
    fixed_sizes: dict[tuple, int] | None = None,
) -> ChunkPlan:
    """Deterministic chunk plan within ``memory_limit``: a ``MemoryBudget``
    (``chunk_budget``; the plan adds the kernel inputs and the final merge), or
    bytes for the chunks alone on one thread (tests). ``fixed_sizes`` (from a
    manifest) reproduces an earlier plan exactly.

    Raises SweepError, saying how much memory is needed, if the fixed part and
    one config of the costliest workload, or the final merge, exceed the limit,
    or a fixed chunk does."""
    by_key = sweep.ids_by_workload()
    if isinstance(memory_limit, MemoryBudget):
        rmax = max(sweep.workloads[key].num_requests for key in by_key)
        budget = dataclasses.replace(
            memory_limit,
            calls=CALL_BYTES_PER_REQUEST * rmax,
            dataset=DATASET_BYTES_PER_CONFIG * len(sweep.configs),
        )
    else:
        budget = MemoryBudget(int(memory_limit), 0, 0, "not counted", 1)
    # A config with R replicas holds R rows of state and scratch at once, and
    # its fleet's merged row (``replicas.merge``) beside them.
    reps = {key: max(sweep.configs[int(i)].replicas for i in ids) for key, ids in by_key.items()}
    per_cfg = {
        key: config_bytes(sweep.workloads[key].num_requests) * (r + (r > 1))
        for key, r in reps.items()
    }
    scratch = {key: scratch_bytes(sweep, ids, key) * reps[key] for key, ids in by_key.items()}
    one = max(per_cfg[key] + scratch[key] for key in by_key)
    if budget.available < max(one, budget.dataset):
        raise SweepError(
            f"--memory-limit {_mib(budget.limit)} is too small: this sweep needs at least "
            f"{_mib(budget.fixed + max(one, budget.dataset))} ({budget.describe()}, "
            f"one config {_mib(one)}, final merge {_mib(budget.dataset)})"
        )
    chunks: list[Chunk] = []
    sizes: dict[tuple, int] = {}
    for key, ids in by_key.items():
        fit = budget.fit(per_cfg[key], scratch[key])
        if fixed_sizes is not None:
            k = fixed_sizes[key]
            if k > fit:
                need = budget.fixed + budget.chunk_bytes(k, per_cfg[key], scratch[key])
                raise SweepError(
                    f"--memory-limit is too small to resume: this sweep's chunks of {k} configs "
                    f"need {_mib(need)} in all; raise the limit or use --overwrite"
                )
        else:
            k = int(min(chunk_size or DEFAULT_CHUNK_SIZE, fit))
        sizes[key] = k
        cost = cost_estimate(sweep, ids, key)
        ids = ids[np.lexsort((ids, cost))]
        for start in range(0, len(ids), k):
            chunks.append(Chunk(len(chunks), key, ids[start : start + k].astype(np.int64)))
    return ChunkPlan(chunks, max(sizes.values()), per_cfg, sizes, scratch, budget)


def _manifest(sweep: Sweep, plan: ChunkPlan) -> store.Manifest:
    return store.Manifest(
        spec_fingerprint=sweep.fingerprint(),
        planner_version=VERSION,
        chunk_size=plan.chunk_size,
        chunk_sizes=[(list(k), v) for k, v in plan.sizes.items()],
        num_chunks=len(plan.chunks),
        num_configs=plan.num_configs,
    )


def prepare_output(out: Path, sweep: Sweep, resume: bool, overwrite: bool) -> store.Manifest | None:
    """Check the output directory before anything runs (call it holding the
    folder's lock). Returns the manifest to resume from, or None for a fresh
    start. Raises SweepError (one line) when the folder holds another sweep, a
    sweep of another spec or planner version, or an unreadable manifest."""
    if out.exists() and not out.is_dir():
        raise SweepError(f"--out {out}: exists and is not a directory")
    try:
        manifest = store.read_manifest(out)
    except OSError as e:
        raise SweepError(f"{out / store.MANIFEST}: unreadable ({e.strerror or e})") from None
    except ValueError:
        raise SweepError(
            f"{out / store.MANIFEST}: not a planner manifest; use --overwrite"
        ) from None
    if (out / store.SIZE_SEARCH).exists():  # --overwrite removes only a sweep's files
        raise SweepError(
            f"{out}: holds a plan size search ({store.SIZE_SEARCH}); choose another --out"
        )
    has_data = (out / store.DATA).exists() or (out / store.CHUNKS).exists()
    if resume:
        if manifest is None:
            if has_data:
                raise SweepError(f"{out}: no {store.MANIFEST}; cannot resume this directory")
            return None
        if manifest.spec_fingerprint != sweep.fingerprint():
            raise SweepError(
                f"{out}: the spec or its workload changed since this sweep started; "
                "use --overwrite to start again"
            )
        if manifest.planner_version != VERSION:
            raise SweepError(
                f"{out}: this sweep was started by planner {manifest.planner_version}, this is "
                f"{VERSION}; resume it with that version or use --overwrite"
            )
        return manifest
    if (manifest is not None or has_data) and not overwrite:
        raise SweepError(
            f"{out} already holds a sweep; pass --resume to continue it or --overwrite to redo it"
        )
    return None


def clear_output(out: Path) -> None:
    """Remove a previous sweep's files (only the ones a sweep writes), the
    manifest last, so that a kill midway leaves a folder ``--overwrite`` clears."""
    if (out / store.CHUNKS).exists():
        for f in (out / store.CHUNKS).iterdir():
            f.unlink()
        (out / store.CHUNKS).rmdir()
    store.remove_stale_temps(out)
    for p in (out / store.DATA, out / store.MANIFEST):
        p.unlink(missing_ok=True)


def run_sweep(
    sweep: Sweep,
    out: Path,
    chunk_size: int | None,
    memory_limit: int,
    workers: int | None,
    resume: bool,
    overwrite: bool,
    reporter: Reporter,
    executor: str = "local",
    address: str | None = None,
    dask_workers: int | None = None,
) -> tuple[pd.DataFrame, bool]:
    """Run every chunk not yet on disk (and verified), then write ``out/data.parquet``.

    Holds ``out``'s lock throughout (``store.folder_lock``; with Dask too: the
    workers only write chunk files). Raises SweepError before any work when
    another sweep holds the folder or the folder conflicts. KeyboardInterrupt
    leaves finished chunks on disk for ``--resume``.
    Returns (dataset, whether anything ran).
    """
    if out.exists() and not out.is_dir():
        raise SweepError(f"--out {out}: exists and is not a directory")
    if not (out / store.HOLDER).exists():  # in use: folder_lock says by whom
        prepare_output(out, sweep, resume, overwrite)  # refuse before the lock file is made
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(store.folder_lock(out))
        except store.FolderBusy as e:
            raise SweepError(str(e)) from None
        manifest = prepare_output(out, sweep, resume, overwrite)
        store.remove_stale_temps(out)
        if manifest is not None and manifest.complete:
            return _complete(out, manifest), False
        client = None
        if executor == "dask":  # connect before anything is written
            client = stack.enter_context(executors.dask_client(address, dask_workers, workers or 1))
        return _run(
            sweep, out, chunk_size, memory_limit, workers, overwrite, reporter, manifest, client
        )


def _complete(out: Path, manifest: store.Manifest) -> pd.DataFrame:
    """A finished sweep's dataset, checked against the manifest's sha256; removes
    chunk files left by a kill after the sweep was marked complete."""
    store.remove_chunks(out)
    path = out / store.DATA
    try:
        if manifest.data_sha256 is None:  # written before checksums were kept
            return pd.read_parquet(path)
        return store.read_verified(path, manifest.data_sha256)
    except FileNotFoundError:
        raise SweepError(f"{path}: missing; rerun with --overwrite") from None
    except store.DamagedFile:
        raise SweepError(
            f"{path}: does not match the checksum in {store.MANIFEST} (damaged?); "
            "rerun with --overwrite"
        ) from None


def _run(
    sweep: Sweep,
    out: Path,
    chunk_size: int | None,
    memory_limit: int,
    workers: int | None,
    overwrite: bool,
    reporter: Reporter,
    manifest: store.Manifest | None,
    client: object | None,
) -> tuple[pd.DataFrame, bool]:
    fixed = manifest.fixed_sizes() if manifest is not None else None
    if client is not None:  # the chunks run on the workers: sized to fit each
        check_merge(sweep, memory_limit)
        budget = worker_budget(sweep, memory_limit, client, workers or 1)
    else:
        budget = chunk_budget(
            memory_limit, workers, has_fleets(sweep), caching_values(sweep), sweep_features(sweep)
        )
    plan = plan_chunks(sweep, chunk_size, budget, fixed)
    if manifest is not None:
        todo = _verify_chunks(out, plan, manifest, reporter)
    else:
        if overwrite:
            clear_output(out)
        manifest = _manifest(sweep, plan)
        store.write_manifest(out, manifest)
        todo = list(plan.chunks)
    if workers is not None and client is None:
        numba.set_num_threads(workers)
    # A cold compile runs half its work in a child process (kernel.warm) only
    # when the planned peak leaves room for it under the limit.
    with warm.allowed(plan.peak_bytes + warm.CHILD_BYTES <= memory_limit):
        _run_chunks(sweep, out, plan, todo, manifest, reporter, client)
    df = _merge(sweep, out, plan, manifest, reporter, client)
    if len(df) != plan.num_configs or df.config_id.duplicated().any():
        raise SweepError(f"{out}: chunk files do not add up to the grid; rerun with --overwrite")
    return df, True


def worker_budget(sweep: Sweep, memory_limit: int, client: object, threads: int) -> MemoryBudget:
    """The fixed part of a Dask worker's memory, each worker a process of its
    own under the same ``memory_limit`` (bytes): every worker parses the spec
    as its tasks will (``executors.load_on_worker``, which refuses a grid
    whose expansion would pass the limit) and reports what it then holds,
    kernel loaded; the most any holds is the fixed part, with no JIT to come
    and ``threads`` kernel threads. ``plan_chunks`` sizes the chunks to fit it."""
    held = client.run(  # type: ignore[attr-defined]
        executors.load_on_worker, sweep.text, str(sweep.base_dir), memory_limit
    )
    return MemoryBudget(
        memory_limit, max(held.values()), 0, "loaded", threads, holder="a Dask worker's planner"
    )


def check_merge(sweep: Sweep, memory_limit: int) -> None:
    """Refuse a Dask run whose final merge, here in the driver, would pass
    ``memory_limit`` beside what the driver holds (``DATASET_BYTES_PER_CONFIG``
    per config). Raises SweepError (one line)."""
    held, merge = resident_bytes(), DATASET_BYTES_PER_CONFIG * len(sweep.configs)
    if held + merge > memory_limit:
        raise SweepError(
            f"--memory-limit {_mib(memory_limit)} is too small: merging the chunks needs about "
            f"{_mib(held + merge)} in this process ({_mib(held)} held, {_mib(merge)} for "
            f"{count(len(sweep.configs), 'config')}); raise --memory-limit or split the spec"
        )


def _run_chunks(
    sweep: Sweep,
    out: Path,
    plan: ChunkPlan,
    todo: list[Chunk],
    manifest: store.Manifest,
    reporter: Reporter,
    client: object | None,
) -> int:
    """Run ``todo``, reporting progress to ``reporter``; record each written chunk's checksum
    and row count in the manifest (rewritten atomically after each chunk).
    Returns the number of configs run."""
    done_configs = plan.num_configs - sum(len(c.config_ids) for c in todo)
    note = compile_note_for(sweep.configs, features=sweep_features(sweep)) if client is None else ""
    if todo and note:
        reporter.line(f"plan: {note}")
    n0 = None if has_fleets(sweep) else len(api.COMPILES)  # replicas compile within their run
    t0, c0 = time.perf_counter(), cpu_seconds()
    ran = ticked = 0  # configs run; of them, reported by tick in the running chunk
    lock = threading.Lock()  # ticks come from the kernel's worker threads
    reporter.start(sweep.name, plan.num_configs, done_configs)

    def advance(n: int) -> None:
        nonlocal ran
        ran += n
        reporter.advance(n, ran / max(time.perf_counter() - t0, 1e-9))

    def tick(n: int) -> None:  # a config's run ended (local chunks run one at a time)
        nonlocal ticked
        with lock:
            ticked += n
            advance(n)

    def done(chunk: Chunk, record: store.ChunkRecord) -> None:
        nonlocal ticked
        manifest.chunks[chunk.index] = record
        store.write_manifest(out, manifest)
        with lock:
            rest, ticked = len(chunk.config_ids) - ticked, 0
            if rest:
                advance(rest)

    try:
        if client is not None:
            caching = tuple(sorted(caching_values(sweep)))
            executors.run_dask(sweep, out, todo, done, client, caching, sweep_features(sweep))
        else:
            executors.run_local(sweep, out, todo, done, tick)
    finally:
        reporter.stop()
    if todo and note:
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        reporter.line(f"plan: {compiled_note(wall, cpu, n0)}")
    return ran


def _merge(
    sweep: Sweep,
    out: Path,
    plan: ChunkPlan,
    manifest: store.Manifest,
    reporter: Reporter,
    client: object | None,
) -> pd.DataFrame:
    """Verify and merge the chunk files into ``data.parquet``, recomputing (once)
    any chunk that fails verification; then mark the manifest complete, with the
    dataset's sha256, and remove the chunk files."""
    for attempt in range(2):
        records = {c.index: manifest.chunks.get(c.index) for c in plan.chunks}
        try:
            df, sha = store.consolidate(out, records, sweep.metadata(VERSION))
            break
        except store.DamagedChunks as e:
            if attempt == 1:
                raise SweepError(
                    f"{out}: chunk files fail verification again right after being rewritten "
                    f"({_describe(e.problems)}); check the disk"
                ) from None
            bad = [c for c in plan.chunks if c.index in e.problems]
            _discard(out, bad, manifest, e.problems, reporter)
            _run_chunks(sweep, out, plan, bad, manifest, reporter, client)
    manifest.complete = True
    manifest.data_sha256 = sha
    store.write_manifest(out, manifest)
    if not store.remove_chunks(out):
        reporter.line(
            f"plan: warning: left {out / store.CHUNKS}: it holds files a sweep does not write"
        )
    return df


def _verify_chunks(
    out: Path, plan: ChunkPlan, manifest: store.Manifest, reporter: Reporter
) -> list[Chunk]:
    """On resume: the chunks still to run. A chunk file that fails verification
    against the manifest (checksum, row count) is removed and rerun, and said so
    in one line. Raises SweepError when the chunk plan changed or a verified
    chunk file holds other configs than the plan's chunk."""
    if len(plan.chunks) != manifest.num_chunks:
        raise SweepError(f"{out}: the chunk plan changed since this sweep started; use --overwrite")
    todo, problems = [], {}
    for chunk in plan.chunks:
        path = store.chunk_path(out, chunk.index)
        if not path.exists():
            manifest.chunks.pop(chunk.index, None)
            todo.append(chunk)
            continue
        problem = store.chunk_problem(path, manifest.chunks.get(chunk.index), len(chunk.config_ids))
        if problem is not None:
            problems[chunk.index] = problem
            todo.append(chunk)
            continue
        ids = pd.read_parquet(path, columns=["config_id"]).config_id.to_numpy()
        if not np.array_equal(np.sort(ids), np.sort(chunk.config_ids)):
            raise SweepError(f"{path}: does not match the chunk plan; use --overwrite")
    if problems:
        bad = [c for c in plan.chunks if c.index in problems]
        _discard(out, bad, manifest, problems, reporter)
    return todo


def _discard(
    out: Path,
    chunks: list[Chunk],
    manifest: store.Manifest,
    problems: dict[int, str],
    reporter: Reporter,
) -> None:
    """Remove chunk files that failed verification (and their records), saying
    so in one line on the reporter."""
    for chunk in chunks:
        store.chunk_path(out, chunk.index).unlink(missing_ok=True)
        manifest.chunks.pop(chunk.index, None)
    store.write_manifest(out, manifest)
    reporter.line(
        f"plan: recomputing {len(chunks)} chunk(s) whose files in {out / store.CHUNKS} fail "
        f"verification: {_describe(problems)}"
    )


def _describe(problems: dict[int, str], limit: int = 5) -> str:
    """'chunk 3 (checksum mismatch), chunk 7 (missing)', the first ``limit``."""
    items = [f"chunk {i} ({why})" for i, why in sorted(problems.items())]
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


# Configs the dry-run estimate simulates (spread over the grid's cost order).
CALIBRATION_CONFIGS = 64


@dataclass(frozen=True)
class Estimate:
    """The dry-run run-time estimate and what it is computed from.

    ``request_steps`` counts one request in one scheduler step: the decode
    tokens the kernel schedules (``O_DECODE_TOKENS``, as ``plan bench`` counts
    its "simulated output tokens"). The kernel's cost per request-step
    (``rate``, request-steps per second on one thread, kernel and metrics) is
    measured on this machine by simulating ``sample`` configs spread over the
    grid's cost order on one thread; the grid's request-steps are extrapolated
    from the same sample. The threads' speed-up is measured too: the same sample
    run again on all ``threads`` (``parallel_seconds``), so that cores shared
    with other work, hyperthreads and uneven configs count (a perfect split was
    assumed before and made the estimate ~2x short on a 2-core machine).
    ``seconds = grid_request_steps / (rate * speedup)``.
    """

    sample: int  # configs simulated
    sample_request_steps: float
    sample_seconds: float  # wall time of the sample, one thread
    grid_configs: int
    threads: int
    load: float = 0.0  # 1-minute load average when measured (os.getloadavg)
    parallel_seconds: float | None = None  # the sample again on ``threads`` threads

    @property
    def speedup(self) -> float:
        """Measured speed-up of ``threads`` threads over one, within 1..threads
        (``threads`` when not measured)."""
        if self.parallel_seconds is None or self.parallel_seconds <= 0:
            return float(self.threads)
        return min(max(self.sample_seconds / self.parallel_seconds, 1.0), float(self.threads))

    @property
    def rate(self) -> float:
        """Request-steps per second on one thread."""
        return self.sample_request_steps / max(self.sample_seconds, 1e-9)

    @property
    def grid_request_steps(self) -> float:
        """The sample's mean request-steps per config, times the grid's configs."""
        return self.sample_request_steps / self.sample * self.grid_configs

    @property
    def seconds(self) -> float:
        """Estimated wall time of the sweep's kernel calls and metrics (s), compile
        excluded.

        When the sample schedules no decode token at all, the sample's time per
        config is extrapolated instead (the same figure when there are some)."""
        if self.sample_request_steps == 0:
            return self.sample_seconds / self.sample * self.grid_configs / self.speedup
        return self.grid_request_steps / (self.rate * self.speedup)

    def describe(self) -> str:
        """One line: the estimate and the figures it comes from."""
        return (
            f"~{_human(self.seconds)} on {self.threads} thread(s): "
            f"{self.grid_request_steps / 1e6:,.1f} M request-steps at "
            f"{self.rate / 1e6:,.1f} M request-steps/s per thread, both measured just now "
            f"on {self.sample} of the {self.grid_configs:,} configs run on one thread, and "
            f"{self.threads} thread(s) {self.speedup:.2f}x as fast on the same sample "
            f"(load average {self.load:.1f} on {os.cpu_count()} cores)"
        )


def sample_positions(total: int, n: int, seed: int = 0) -> np.ndarray:
    """n positions in 0..total-1, one drawn at random (fixed ``seed``) from each
    of n equal strata of the cost order. Shape (n,) int64, ascending.

    Random within its stratum, not the middle one: a fixed stride lines up with
    the grid's period (every other config is one preemption mode, say) and
    measured only one kind of config; the ends of the order overweight the tails."""
    u = np.random.default_rng(seed).random(n)
    return np.minimum(((np.arange(n) + u) * total / n).astype(np.int64), total - 1)


def estimate(
    sweep: Sweep, plan: ChunkPlan, threads: int, sample: int = CALIBRATION_CONFIGS
) -> Estimate:
    """Measure the kernel's cost per request-step on ``sample`` configs, one from
    each of ``sample`` equal strata of the plan's cost order (``sample_positions``;
    one kernel call per workload and planned chunk, one thread), and extrapolate to the grid (see
    ``Estimate``). The kernel must be compiled or loaded already, or its compile
    time counts."""
    pairs = [(c.workload_key, int(i)) for c in plan.chunks for i in c.config_ids]
    n = min(len(pairs), sample)
    by_key: dict[tuple, list[int]] = {}
    for j in sample_positions(len(pairs), n):
        by_key.setdefault(pairs[j][0], []).append(pairs[j][1])
    pieces = [  # at most one planned chunk per call, so the sample fits the memory limit
        (k, ids[i : i + plan.sizes[k]])
        for k, ids in by_key.items()
        for i in range(0, len(ids), plan.sizes[k])
    ]
    before = numba.get_num_threads()
    marks = sweep_features(sweep)
    steps = 0.0
    seconds = 0.0
    parallel = None
    try:
        numba.set_num_threads(1)
        for k, ids in pieces:
            t = time.perf_counter()
            res = simulate(
                [sweep.configs[i] for i in ids], sweep.workloads[k], sweep.latency, features=marks
            )
            res.metrics()  # a chunk's work includes its metrics
            seconds += time.perf_counter() - t
            steps += float(res.state.out.counters[:, O_DECODE_TOKENS].sum())
        if threads > 1:
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            t = time.perf_counter()
            for k, ids in pieces:
                simulate(
                    [sweep.configs[i] for i in ids], sweep.workloads[k], sweep.latency,
                    features=marks,
                ).metrics()  # fmt: skip
            parallel = time.perf_counter() - t
    finally:
        numba.set_num_threads(before)
    return Estimate(n, steps, seconds, plan.num_configs, threads, os.getloadavg()[0], parallel)


def dry_run(
    sweep: Sweep, chunk_size: int | None, memory_limit: int, workers: int | None, reporter: Reporter
) -> dict:
    """Report the grid, the chunk plan and an estimated wall time (``estimate``;
    compile time reported separately), a line each to ``reporter``. Returns the
    figures."""
    threads = workers if workers is not None else numba.get_num_threads()
    budget = chunk_budget(
        memory_limit, threads, has_fleets(sweep), caching_values(sweep), sweep_features(sweep)
    )
    plan = plan_chunks(sweep, chunk_size, budget)
    budget = plan.budget
    key = plan.chunks[0].workload_key
    wl = sweep.workloads[key]
    t = time.perf_counter()
    for cfg in kernel_variants(sweep):  # compiled (or loaded) here, not in the estimate
        simulate([cfg], wl, sweep.latency, features=sweep_features(sweep))
    compile_s = time.perf_counter() - t
    est = estimate(sweep, plan, threads)
    peak = plan.largest_chunk_bytes
    fig = {
        "configs": plan.num_configs,
        "workloads": len(sweep.workloads),
        "chunks": len(plan.chunks),
        "chunk_size": plan.chunk_size,
        "peak_chunk_bytes": peak,
        "peak_bytes": plan.peak_bytes,
        "fixed_bytes": budget.fixed,
        "compile_s": compile_s,
        "estimated_s": est.seconds,
        "request_steps": est.grid_request_steps,
        "request_steps_per_s_per_thread": est.rate,
        "threads": threads,
    }
    axes = ", ".join(f"{k} ({len(v)})" for k, v in sweep.axes.items())
    reporter.line(f"spec {sweep.name}: {count(plan.num_configs, 'config')} over {axes}")
    reporter.line(f"workloads: {len(sweep.workloads)}, {_requests_each(sweep)}")
    reporter.line(f"chunks: {len(plan.chunks)} of up to {plan.chunk_size} configs")
    reporter.line(
        f"memory: peak about {_mib(plan.peak_bytes)} of the {_mib(memory_limit)} limit: "
        f"{budget.describe()}, then the larger of the biggest chunk {_mib(peak)} (state, "
        f"metrics, the scratch of {threads} running configs) and the final merge "
        f"{_mib(budget.dataset)}"
    )
    reporter.line(f"JIT compile / cache load: {compile_s:.1f} s")
    reporter.line(f"estimated run time: {est.describe()}")
    if sweep.search is not None:
        reporter.line(
            "[search]: not in the estimate; each chunk then runs the highest-rate search, "
            "about 10 more kernel calls over its configs, each run to completion "
            "(planner.maxrate.search)"
        )
    return fig


def _requests_each(sweep: Sweep) -> str:
    """``requests each: N``, or the range when the workloads differ (a
    ``rate_scale`` axis over a trace window, say)."""
    counts = sorted({w.num_requests for w in sweep.workloads.values()})
    if len(counts) == 1:
        return f"requests each: {counts[0]:,}"
    return f"requests each: {counts[0]:,} to {counts[-1]:,}"


def _human(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def default_out(sweep: Sweep) -> Path:
    return Path("results") / sweep.name


# A byte count as --memory-limit takes it: ASCII digits, an optional decimal
# exponent (1e9), then an optional unit, and nothing else (pydantic's ByteSize
# alone reads "2e-5GiB" as 2 EB and "4GiB-junk" as 4 GiB).
_MEMORY = re.compile(
    r"\s*([0-9]+(?:\.[0-9]+)?(?:[eE]\+?[0-9]+)?)\s*(b|kb|mb|gb|tb|kib|mib|gib|tib)?\s*",
    re.IGNORECASE,
)


def parse_memory(text: str) -> int:
    """'4GiB', '512MB', '1e9' (bytes) -> bytes: a number of ASCII digits and
    an optional unit B, KB, MB, GB, TB (powers of 1,000) or KiB, MiB, GiB, TiB
    (powers of 1,024), case-insensitive; the units as pydantic's ByteSize
    converts them. Raises ValueError (one line) on anything else or on 0."""
    from pydantic import ByteSize, TypeAdapter

    m = _MEMORY.fullmatch(text)
    if m is None:
        raise ValueError(f"--memory-limit: cannot read {text!r} (try 4GiB or 512MB)")
    number, unit = m.group(1), m.group(2) or "b"
    n = int(TypeAdapter(ByteSize).validate_python(f"{float(number)!r}{unit}"))
    if n <= 0 or not math.isfinite(n):
        raise ValueError(f"--memory-limit must be > 0, got {text!r}")
    return n
