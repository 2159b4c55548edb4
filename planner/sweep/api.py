"""The public Python API for sweeps: load a spec, edit it, run it.

For notebooks and scripts; ``plan sweep`` runs the same driver::

    from planner import estimate, load_spec, run_sweep

    spec = load_spec("sweeps/quick.toml").with_axes(
        max_num_seqs=[32, 256], num_gpu_blocks=[2000, 7463], preemption_mode=None
    )
    print(estimate(spec).describe())                # what plan sweep --dry-run estimates
    df = run_sweep(spec)                            # a DataFrame, nothing kept on disk
    df = run_sweep(spec, "results/mine")            # also writes results/mine/data.parquet

A ``Spec`` is immutable; each ``with_*`` method returns a new one, validated
at once exactly as ``plan sweep`` validates a TOML file: the edit is made
on the TOML text with ``tomlkit`` (which keeps the file's comments and key
order, so axes keep their order and config ids) and the result is read again,
so the text and the run cannot differ. Relative paths in the spec (a trace
file) keep resolving against the directory of the file it was loaded from.

Errors are ``ValueError`` subclasses with a one-line message:
``SpecError`` (a bad spec or edit) and ``SweepError`` (a bad run argument or
an output directory that conflicts).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.sweep.driver import Estimate, SweepError
from planner.sweep.spec import SpecError, Sweep, load_spec_text

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Estimate", "Spec", "SpecError", "SweepError", "estimate", "load_spec", "run_sweep"]


@dataclass(frozen=True)
class Spec:
    """A validated, expanded sweep spec.

    Attributes:
        sweep: the expanded ``planner.sweep.spec.Sweep`` (grid, configs, workloads).
        source: where it came from (a path, or ``"<edited from PATH>"``), for messages.
    """

    sweep: Sweep
    source: str

    @property
    def name(self) -> str:
        """The spec's ``name`` (the default output folder is ``results/NAME``)."""
        return self.sweep.name

    @property
    def grid(self) -> pd.DataFrame:
        """One row per configuration: ``config_id`` 0..C-1, then one column per axis."""
        return self.sweep.grid

    @property
    def base_dir(self) -> Path:
        """The directory that relative paths in the spec resolve against."""
        return self.sweep.base_dir

    def to_toml(self) -> str:
        """The spec as TOML text: the file's own text, or the edited spec written back."""
        return self.sweep.text

    def with_axes(self, **axes: Any) -> Spec:
        """Set, replace or (with ``None``) remove axes; other axes are kept, in order.

        A value is a list (``max_num_seqs=[32, 64]``) or a range dict
        (``num_gpu_blocks={"start": 2000, "stop": 60000, "num": 12, "scale": "log"}``),
        as in the ``[axes]`` table. Raises SpecError.
        """
        return self._edit("axes", axes)

    def with_scheduler(self, **settings: Any) -> Spec:
        """Set or (with ``None``) remove fixed ``[scheduler]`` settings. Raises SpecError."""
        return self._edit("scheduler", settings)

    def with_workload(self, **fields: Any) -> Spec:
        """Set or (with ``None``) reset ``[workload]`` fields, e.g. ``max_requests=2000``
        or ``prompt={"kind": "constant", "mean": 300}``. Raises SpecError."""
        return self._edit("workload", fields)

    def with_hardware(self, **fields: Any) -> Spec:
        """Set or (with ``None``) reset ``[hardware]`` fields (model, gpu, ...).
        Raises SpecError."""
        return self._edit("hardware", fields)

    def with_latency(self, **fields: Any) -> Spec:
        """Set or (with ``None``) reset ``[latency]`` fields (kind, alpha, beta, ...).
        Raises SpecError."""
        return self._edit("latency", fields)

    def with_slo(self, **fields: Any) -> Spec:
        """Set or (with ``None``) reset ``[slo]`` fields (``ttft_slo``, ``tpot_slo``,
        ``itl_slo``, ``e2e_slo`` in seconds, ``goodput`` in vLLM's "ttft:MS ..."
        form).
        Raises SpecError."""
        return self._edit("slo", fields)

    def with_search(self, **fields: Any) -> Spec:
        """Set or (with ``None``) reset ``[search]`` fields (``rate_scale_min``,
        ``rate_scale_max``, ``rate_tolerance``); an empty table is kept (the
        search with its defaults). Raises SpecError."""
        return self._edit("search", fields, keep_empty=True)

    def replace(self, **fields: Any) -> Spec:
        """Set or (with ``None``) reset top-level fields: ``name``, ``description``,
        ``horizon_s`` (simulated seconds), ``max_steps``. Raises SpecError."""
        tables = {"axes", "scheduler", "workload", "hardware", "latency", "slo", "search"}
        for key in fields:
            if key in tables:
                raise SpecError(f"replace: use with_{key}() to edit [{key}]")
        return self._edit(None, fields)

    def _edit(
        self, table: str | None, changes: Mapping[str, Any], keep_empty: bool = False
    ) -> Spec:
        import tomlkit

        doc = tomlkit.parse(self.sweep.text)  # comments and key order are kept
        if table is None:
            target: Any = doc
        else:
            if table not in doc:
                doc[table] = tomlkit.table()
            target = doc[table]
        where = f"{table}." if table else ""
        for key, value in changes.items():
            if value is None:
                if key in target:
                    del target[key]
            else:
                target[key] = _toml_value(value, f"{where}{key}")
        if table is not None and not target and table != "axes" and not keep_empty:
            del doc[table]
        if table == "axes":
            _keep_axis_order(doc, list(self.sweep.axes))
        label = self.source if self.source.startswith("<") else f"<edited from {self.source}>"
        return Spec(load_spec_text(tomlkit.dumps(doc), self.base_dir, label), label)


def _keep_axis_order(doc: Any, before: list[str]) -> None:
    """Rewrite ``[axes]`` in order if an edit moved an axis (an axis written as
    an ``[axes.NAME]`` table moves to the end when replaced): the axis order is
    the grid's order, so config ids must not change with the way a spec is written."""
    import tomllib

    import tomlkit

    axes = tomllib.loads(tomlkit.dumps(doc)).get("axes", {})
    kept = [k for k in before if k in axes]
    if list(axes)[: len(kept)] == kept:
        return
    order = kept + [k for k in axes if k not in kept]
    del doc["axes"]
    doc["axes"] = tomlkit.table()
    for key in order:
        doc["axes"][key] = _toml_value(axes[key], f"axes.{key}")


def _toml_value(value: Any, where: str) -> Any:
    """A plain value for a TOML document: numpy scalars and arrays, tuples and
    paths become Python values; dicts become inline tables. Raises SpecError."""
    import numpy as np
    import tomlkit

    if isinstance(value, np.ndarray):
        return [_toml_value(v, where) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        table = tomlkit.inline_table()
        table.update({str(k): _toml_value(v, where) for k, v in value.items()})
        return table
    if isinstance(value, list | tuple):
        return [_toml_value(v, where) for v in value]
    if isinstance(value, bool | int | float | str):
        return value
    raise SpecError(f"{where}: cannot use a {type(value).__name__} value in a spec")


def load_spec(path: str | os.PathLike[str]) -> Spec:
    """Read, validate and expand a sweep spec (TOML, see ``sweeps/*.toml``).

    Raises:
        SpecError: one line naming the file, the key and the bad value.
    """
    from planner.sweep.spec import load_spec as _load

    return Spec(_load(path), str(path))


def run_sweep(
    spec: Spec | str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    memory_limit: str | int = "4GiB",
    chunk_size: int | None = None,
    workers: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    quiet: bool = True,
) -> pd.DataFrame:
    """Simulate every configuration of ``spec``'s grid; the same run as ``plan sweep``.

    Args:
        spec: a ``Spec``, or the path of a spec file.
        out: directory for ``data.parquet`` (and, while running, the chunk files
            that ``resume`` continues from). ``None``: run in a temporary directory
            that is removed afterwards; only the DataFrame is returned.
        memory_limit: bound on the whole process, bytes or text such as ``"4GiB"``
            or ``"512MB"`` (as ``--memory-limit``).
        chunk_size: configs per kernel call (default 1024, capped by memory).
        workers: kernel threads, 1..NUMBA_NUM_THREADS (default: all); restored afterwards.
        resume: continue an interrupted sweep in ``out``.
        overwrite: replace a sweep already in ``out``.
        quiet: no progress (otherwise plain lines on stderr: the start, every ~10%,
            the end; ``planner.sweep.report.Lines``).

    Returns:
        One row per configuration, sorted by ``config_id``: every axis and every
        metric (the columns of ``data.parquet``).

    Raises:
        SpecError: the spec file is bad.
        SweepError: a bad argument, or ``out`` already holds a sweep and neither
            ``resume`` nor ``overwrite`` was given.
    """
    import numba

    from planner.sweep import driver
    from planner.sweep.report import Lines, Silent

    sweep = (spec if isinstance(spec, Spec) else load_spec(spec)).sweep
    limit = _memory_limit(memory_limit)
    if workers is not None and not (1 <= workers <= numba.config.NUMBA_NUM_THREADS):
        raise SweepError(f"workers must be in 1..{numba.config.NUMBA_NUM_THREADS}, got {workers!r}")
    if chunk_size is not None and chunk_size < 1:
        raise SweepError(f"chunk_size must be >= 1, got {chunk_size!r}")
    if resume and overwrite:
        raise SweepError("resume and overwrite exclude each other")
    if out is None and (resume or overwrite):
        raise SweepError("resume and overwrite need an out directory")
    reporter = Silent() if quiet else Lines()
    threads = numba.get_num_threads()
    with contextlib.ExitStack() as stack:
        if out is None:
            dest = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="planner-")))
        else:
            dest = Path(out)
        try:
            df, _ = driver.run_sweep(
                sweep, dest, chunk_size, limit, workers, resume, overwrite, reporter
            )
        finally:
            numba.set_num_threads(threads)
    return df


def estimate(
    spec: Spec | str | os.PathLike[str],
    *,
    memory_limit: str | int = "4GiB",
    chunk_size: int | None = None,
    workers: int | None = None,
) -> Estimate:
    """What ``plan sweep --dry-run`` estimates: the wall time of ``run_sweep`` with
    the same arguments, from the kernel's cost per request-step measured now on a
    sample of the grid (``planner.sweep.driver.Estimate`` says how). Compiles or
    loads the kernel first, so that this time is not counted.

    Returns:
        ``Estimate``: ``.seconds``, ``.rate`` (request-steps/s per thread),
        ``.grid_request_steps``, ``.describe()``.

    Raises:
        SpecError, SweepError: as ``run_sweep``.
    """
    import numba

    from planner.api import simulate
    from planner.sweep import driver

    sweep = (spec if isinstance(spec, Spec) else load_spec(spec)).sweep
    _check_threads(workers)
    if chunk_size is not None and chunk_size < 1:
        raise SweepError(f"chunk_size must be >= 1, got {chunk_size!r}")
    budget = driver.chunk_budget(
        _memory_limit(memory_limit),
        None,
        driver.has_fleets(sweep),
        driver.caching_values(sweep),
        driver.sweep_features(sweep),
    )
    plan = driver.plan_chunks(sweep, chunk_size, budget)
    first = plan.chunks[0]
    simulate(
        [sweep.configs[int(first.config_ids[0])]],
        sweep.workloads[first.workload_key],
        features=driver.sweep_features(sweep),
    )
    return driver.estimate(sweep, plan, workers or numba.get_num_threads())


def _check_threads(workers: int | None) -> None:
    """Raises SweepError unless ``workers`` is None or 1..NUMBA_NUM_THREADS."""
    import numba

    top = numba.config.NUMBA_NUM_THREADS
    if workers is not None and (isinstance(workers, bool) or not 1 <= workers <= top):
        raise SweepError(f"workers must be in 1..{top}, got {workers!r}")


def _memory_limit(value: str | int) -> int:
    """Bytes from an int or a size text ("4GiB"); raises SweepError."""
    from planner.sweep.driver import parse_memory

    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SweepError(f"memory_limit: expected bytes or text such as '4GiB', got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise SweepError(f"memory_limit must be > 0, got {value}")
        return value
    try:
        return parse_memory(value)
    except ValueError as e:
        raise SweepError(str(e).replace("--memory-limit", "memory_limit")) from None
