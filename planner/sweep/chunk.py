"""One chunk of a sweep: the configs one kernel call runs, and that call.

Shared by the driver (which plans chunks and estimates their cost) and the
executors (which run them), so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
import pandas as pd

from planner.api import features_for, simulate
from planner.kernel.variant import Features
from planner.maxrate.search import search_max_rate
from planner.slo import SLO
from planner.sweep.spec import Sweep


@dataclass(frozen=True)
class Chunk:
    """Configs ``config_ids`` (shape (K,), int64, grid row numbers) that share the
    workload ``workload_key`` and run in one kernel call; ``index`` names the file."""

    index: int
    workload_key: tuple
    config_ids: np.ndarray  # (K,) int64


def thread_order(n: int, threads: int) -> np.ndarray:
    """Positions 0..n-1 of a cost-sorted chunk, reordered for the kernel call.

    Position j goes, in snake order (0, 1, .., T-1, T-1, .., 0, 0, 1, ..), to
    block ``j mod T`` or its mirror of ``threads`` contiguous blocks
    (``np.array_split`` sizes), so every block gets a share of the cheap and of
    the costly configs. Written for a static schedule (Numba's ``prange``);
    ``api.simulate`` now hands configs to a thread pool one by one in this
    order, where any mixed order balances about as well. Shape (n,) int64.
    """
    j = np.arange(n, dtype=np.int64)
    r, q = np.divmod(j, max(threads, 1))
    block = np.where(r % 2 == 0, q, max(threads, 1) - 1 - q)
    return j[np.argsort(block, kind="stable")]


def sweep_features(sweep: Sweep) -> Features:
    """The kernel's feature markers for the whole grid (``api.features_for``
    over its workloads; ``kernel.variant``), computed once per sweep: every
    chunk, the estimate and the dry run compile or load the same kernel."""
    cached = sweep.__dict__.get("_kernel_features")
    if cached is None:
        cached = features_for(sweep.configs, list(sweep.workloads.values()), sweep.latency)
        sweep.__dict__["_kernel_features"] = cached
    return cached


def run_chunk(
    sweep: Sweep, chunk: Chunk, on_config: Callable[[int], None] | None = None
) -> pd.DataFrame:
    """Simulate one chunk; one row per config (in the chunk's order), with
    config_id and workload axes. The kernel sees the configs in ``thread_order``.
    ``on_config`` (thread-safe) hears of each config's end (``api.simulate``);
    a ``[search]`` chunk, which runs each config many times, calls it not."""
    configs = [sweep.configs[i] for i in chunk.config_ids]
    wl = sweep.workloads[chunk.workload_key]
    perm = thread_order(len(configs), numba.get_num_threads())
    tick = on_config if sweep.search is None else None
    marks = sweep_features(sweep)
    res = simulate([configs[k] for k in perm], wl, sweep.latency, on_config=tick, features=marks)
    df = res.metrics(sweep.slo)
    df = df.iloc[np.argsort(perm)].reset_index(drop=True)  # back to the chunk's order
    df.insert(0, "config_id", chunk.config_ids)
    mean_len = {m: wl.mean_request_tokens(m) for m in {c.max_model_len for c in configs}}
    # Gathered, then joined in one concat: a column at a time fragments a wide frame.
    extra: dict[str, object] = {
        "kv_safe_max_num_seqs": [c.kv_safe_max_num_seqs(mean_len[c.max_model_len]) for c in configs]
    }
    extra |= dict(zip(sweep.workload_axes(), chunk.workload_key, strict=True))
    if "gpu_memory_utilization" in sweep.axes:
        extra["gpu_memory_utilization"] = sweep.grid["gpu_memory_utilization"].to_numpy()[
            chunk.config_ids
        ]
    extra |= sweep.hardware_columns
    if sweep.search is not None:  # [search]: the highest sustainable rate of each config
        found = search_max_rate(
            configs, wl, sweep.latency, sweep.slo or SLO(), sweep.search, sweep_features(sweep)
        )
        extra |= {col: found.table[col].to_numpy() for col in found.table.columns}
    extra |= {"workload_fingerprint": wl.fingerprint(), "spec": sweep.name}
    for name in [k for k in extra if k in df.columns]:  # a metrics column: set in place
        df[name] = extra.pop(name)
    return pd.concat([df, pd.DataFrame(extra, index=df.index)], axis=1)
