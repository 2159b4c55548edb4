"""Sweep specs: TOML files (``sweeps/*.toml``) validated before anything runs.

A spec names a workload, a step-time model, fixed scheduler settings and a
set of **axes**; the grid is the Cartesian product of the axes. Axes are lists
or ranges ``{start, stop, num, scale = "log" | "linear"}``. Integer ranges are
rounded to distinct integers (see ``int_range``).

Validation uses pydantic; every error is one line naming the key and the bad
value (``SpecError``). Nothing is written before the whole spec is valid.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import re
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pandas as pd
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from planner import bounds, resolve
from planner.config import (
    FIELD_FLAGS,
    PREEMPTION_MODES,
    STOP_BOUNDS,
    SchedulerConfig,
    clock_bound,
    compat_settings,
)
from planner.inert import SCHEDULER_RULES
from planner.inputs import MAX_SMALL_FILE_BYTES, check_readable
from planner.latency.step_time import Latency
from planner.maxrate.search_range import (
    DEFAULT_MAX_SCALE,
    DEFAULT_MIN_SCALE,
    DEFAULT_REL_TOL,
    SearchRange,
)
from planner.models import vllm_defaults
from planner.models.hardware import HardwareError
from planner.slo import SLO, from_options
from planner.speculative import (
    Speculation,
    parse_acceptance,
    parse_speculative_config,
    speculation_from,
)
from planner.sweep.memory import resident_bytes
from planner.workload.arrays import (
    MAX_TURNS,
    LengthDist,
    Workload,
    WorkloadError,
    seed_acts,
    sessions,
    with_shared_prefixes,
)
from planner.workload.traces import TraceOptions, check_columns, load_trace
from planner.workload_checks import check_block_sizes, check_horizon, unused_field_warnings

# A grid larger than this is refused: at ~1 ms per config it would take hours
# on one machine; split it into several specs (or use the Dask executor).
MAX_GRID_CONFIGS = 2_000_000
# Memory that building one config of a grid takes (its SchedulerConfig, grid
# row and server record): 2.9 KB measured (RSS growth loading a 100,000-config
# spec, /tmp/exp.toml in the issue 38 session), rounded up.
SPEC_BYTES_PER_CONFIG = 4096
EXPANSION_CHECKED = 64 * 2**20  # grids that take less are left to the chunk budget


def check_expansion(configs: int, memory_limit: int | None, what: str = "the grid") -> None:
    """Refuse, before building them, ``configs`` configs whose expansion
    (``SPEC_BYTES_PER_CONFIG`` each) on top of what this process holds would
    pass ``memory_limit`` (bytes; None: no limit). Raises SpecError (one line)."""
    need = configs * SPEC_BYTES_PER_CONFIG
    if memory_limit is None or need < EXPANSION_CHECKED:
        return  # a small grid: the driver's chunk budget, which counts everything, decides
    held = resident_bytes()
    if held + need > memory_limit:
        raise SpecError(
            f"axes: building {what}'s {configs:,} configs takes about {need / 2**20:,.0f} MiB "
            f"beside the {held / 2**20:,.0f} MiB this process holds, over the --memory-limit "
            f"of {memory_limit / 2**20:,.0f} MiB: split the spec or raise --memory-limit"
        )


SCHEDULER_AXES = (
    "max_num_seqs",
    "num_gpu_blocks",
    "max_num_batched_tokens",
    "block_size",
    "max_model_len",
    "long_prefill_token_threshold",
    "watermark",
    "scheduler_reserve_full_isl",
    "preemption_mode",
    "stop_bound",
    "null_block",
    "async_scheduling",
    "enable_prefix_caching",
    "policy",
    "victim",
    "anti_starvation",
    "admission",
    "adaptive_window",
    "adaptive_threshold",
    "adaptive_step",
    "cpu_swap_blocks",
    "swap_bandwidth_gbps",
    "kv_block_bytes",
    "max_concurrency",
    "think_time_s",
    "replicas",
    "router",
    "router_seed",
    "compat",
    "blis_full_hit_defect",
    "sliding_window",
    "full_attention_groups",
    "sliding_window_groups",
    # speculative decoding (``planner.speculative``): vLLM's JSON ("" = off),
    # the acceptance as --spec-acceptance spells it, the draws' seed
    "speculative_config",
    "spec_acceptance",
    "spec_seed",
)
SPEC_AXES = ("speculative_config", "spec_acceptance", "spec_seed")
WORKLOAD_AXES = ("rate", "seed", "rate_scale")
# Axes that change the traffic, not the server: a search for the cheapest or
# fastest server (plan size, a [search]) must not choose among them, or its
# answer would be the lightest traffic (issue 38).
TRAFFIC_AXES = ("rate", "rate_scale", "seed", "think_time_s", "max_concurrency")


def traffic_axis(axes: dict, what: str) -> None:
    """Raise SpecError (one line) for the first axis of ``axes`` in
    ``TRAFFIC_AXES`` with more than one value; ``what`` names the search."""
    for key in TRAFFIC_AXES:
        if len(axes.get(key, ())) > 1:
            raise SpecError(
                f"axes.{key}: the traffic is an input, not a setting to choose: {what} would "
                "pick the lightest; run one search per traffic level"
            )


HARDWARE_AXES = ("gpu_memory_utilization",)
BOOL_AXES = {
    "scheduler_reserve_full_isl",
    "null_block",
    "async_scheduling",
    "enable_prefix_caching",
    "blis_full_hit_defect",
}
STR_AXES = {
    "preemption_mode",
    "stop_bound",
    "policy",
    "victim",
    "admission",
    "router",
    "compat",
    "speculative_config",
    "spec_acceptance",
}
INT_AXES = {
    "max_num_seqs",
    "num_gpu_blocks",
    "max_num_batched_tokens",
    "block_size",
    "max_model_len",
    "long_prefill_token_threshold",
    "seed",
    "anti_starvation",
    "adaptive_window",
    "adaptive_threshold",
    "adaptive_step",
    "cpu_swap_blocks",
    "kv_block_bytes",
    "max_concurrency",
    "replicas",
    "router_seed",
    "sliding_window",
    "full_attention_groups",
    "sliding_window_groups",
    "spec_seed",
}


FLAG_FIELDS = {flag: field for field, flag in FIELD_FLAGS.items()}  # --think-time -> think_time_s

# Spec fields checked against planner.bounds.OPTION_BOUNDS (field -> bound name);
# axes and [scheduler] keys use their own names.
FIELD_BOUNDS = {
    "horizon_s": "horizon_s",
    "arrivals_until_s": "horizon_s",
    "max_steps": "max_steps",
    "workload.num_requests": "num_requests",
    "workload.rate": "rate",
    "workload.gamma_cv": "gamma_cv",
    "workload.seed": "seed",
    "workload.prompt.mean": "prompt_tokens",
    "workload.prompt.stdev": "prompt_tokens_stdev",
    "workload.prompt.min": "prompt_tokens_min",
    "workload.prompt.max": "prompt_tokens_max",
    "workload.output.mean": "output_tokens",
    "workload.output.stdev": "output_tokens_stdev",
    "workload.output.min": "output_tokens_min",
    "workload.output.max": "output_tokens_max",
    "workload.start_s": "trace_start",
    "workload.duration_s": "trace_duration",
    "workload.rate_scale": "rate_scale",
    "workload.max_requests": "max_requests",
    "workload.prefix_groups": "prefix_groups",
    "workload.prefix_len": "prefix_len",
    "workload.prefix_share": "prefix_share",
    "hardware.tensor_parallel_size": "tensor_parallel_size",
    "hardware.gpu_memory_utilization": "gpu_memory_utilization",
    "latency.mfu": "mfu",
    "latency.mbu": "mbu",
    "latency.overhead_us": "step_overhead_us",
}


def check_field_bounds(spec: SweepSpec) -> None:
    """Every numeric spec field against its bound (``FIELD_BOUNDS``), and the
    step-time coefficients (``bounds.coeff``). Raises SpecError naming the field."""
    try:
        for path, name in FIELD_BOUNDS.items():
            obj: Any = spec
            for part in path.split("."):
                obj = getattr(obj, part, None)
            if obj is not None:
                bounds.check_option(name, obj, path)
        for name in ("alpha", "beta"):
            for v in getattr(spec.latency, name) or ():
                bounds.coeff(f"latency.{name}", v)
    except ValueError as e:
        raise SpecError(str(e)) from None


def _check_axis_value(key: str, v: object, label: str) -> None:
    """One axis or [scheduler] value against ``bounds.OPTION_BOUNDS[key]``, if it has one."""
    if key in bounds.OPTION_BOUNDS:
        try:
            bounds.check_option(key, v, label)
        except ValueError as e:
            raise SpecError(str(e)) from None


def _default(field: str) -> Any:
    """``SchedulerConfig``'s default for ``field`` (a field every row has)."""
    return next(f.default for f in dataclasses.fields(SchedulerConfig) if f.name == field)


class SpecError(ValueError):
    """A spec that cannot run; the message is one line."""


def _admits(annotation: object, kind: type) -> bool:
    """Whether a field's type takes ``kind`` (it itself, or a union or
    ``Annotated`` holding it)."""
    if annotation is kind:
        return True
    return any(_admits(a, kind) for a in typing.get_args(annotation))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_numbers(cls, v: object, info: ValidationInfo) -> object:
        """TOML's true/false and "2" are no numbers: pydantic's lax mode reads
        them as 1/0 and 2 for a float or int field, so ``horizon_s = true``
        would mean 1 s and ``tensor_parallel_size = "2"`` would pass. Refused
        for every number field (and every element of an array of numbers,
        ``alpha = ["1", 1, 1]``) whose type takes no boolean or string."""
        kind = cls.model_fields[info.field_name].annotation  # type: ignore[index]
        if not (_admits(kind, int) or _admits(kind, float)):
            return v
        what = "numbers" if isinstance(v, list | tuple) else "a number"
        for x in v if isinstance(v, list | tuple) else (v,):
            if isinstance(x, bool) and not _admits(kind, bool):
                raise ValueError(f"expected {what}, not a boolean")
            if isinstance(x, str) and not _admits(kind, str):
                raise ValueError(f"expected {what}, not a string")
        return v


class LengthSpec(_Strict):
    kind: Literal["gaussian", "lognormal", "constant"] = "gaussian"
    mean: Annotated[float, Field(ge=1)]
    stdev: Annotated[float, Field(ge=0)] = 0.0
    min: Annotated[int, Field(ge=1)] = 1
    max: Annotated[int, Field(ge=1)] = 2**31 - 1

    @model_validator(mode="after")
    def _no_inert(self) -> LengthSpec:
        if self.kind == "constant" and (inert := sorted({"stdev"} & self.model_fields_set)):
            raise ValueError(f"{', '.join(inert)}: no effect with kind 'constant'")
        return self


class WorkloadSpec(_Strict):
    kind: Literal["synthetic", "trace"]
    # synthetic
    num_requests: Annotated[int, Field(ge=1, le=10_000_000)] = 300
    arrival: Literal["constant", "poisson", "gamma", "offline"] = "constant"
    rate: Annotated[float, Field(gt=0)] = 10.0
    gamma_cv: Annotated[float, Field(gt=0)] = 1.0
    seed: Annotated[int, Field(ge=0)] = 0
    prompt: LengthSpec | None = None
    output: LengthSpec | None = None
    # trace (path relative to the spec file); see planner.workload.traces
    path: str | None = None
    format: Literal["auto", "azure", "csv", "jsonl", "mooncake"] = "auto"
    # tokens per hash id of a hash_ids column (planner.workload.traces; 512 for mooncake)
    hash_block_size: Annotated[int, Field(ge=1, le=2**31 - 1, strict=True)] | None = None
    start_s: Annotated[float, Field(ge=0)] = 0.0
    duration_s: Annotated[float, Field(gt=0)] = math.inf
    rate_scale: Annotated[float, Field(gt=0)] = 1.0
    max_requests: Annotated[int, Field(ge=1)] | None = None
    # key -> the file's column name (planner.workload.traces.DEFAULT_COLUMNS), e.g.
    # columns = { arrival = "ts", output = "completion_tokens" }
    columns: dict[str, str] = {}
    # shared prompt prefixes (planner.workload.arrays.with_shared_prefixes)
    # (strict: true is not 1 group, "0.5" is not a share)
    prefix_groups: Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)] = 0
    prefix_len: Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)] = 0
    prefix_share: Annotated[float, Field(ge=0, le=1, strict=True)] = 0.0
    # multi-turn sessions (planner.workload.arrays.sessions): num_requests sessions of
    # this many turns; prompt is each turn's new message
    turns: Annotated[int, Field(ge=1, le=MAX_TURNS, strict=True)] = 1

    @model_validator(mode="after")
    def _complete(self) -> WorkloadSpec:
        other = _TRACE_FIELDS if self.kind == "synthetic" else _SYNTHETIC_FIELDS
        if inert := sorted(other & self.model_fields_set):
            raise ValueError(f"{', '.join(inert)}: no effect in a {self.kind} workload")
        fields = self.model_fields_set
        if self.kind == "synthetic" and "gamma_cv" in fields and self.arrival != "gamma":
            raise ValueError(f"gamma_cv: no effect with arrival {self.arrival!r}")
        if self.kind == "synthetic" and "rate" in fields and self.arrival == "offline":
            raise ValueError("rate: no effect with arrival 'offline' (all arrive at t = 0)")
        if self.kind == "trace" and "seed" in fields and not self.prefix_groups:
            raise ValueError("seed: no effect in a trace workload without prefix_groups")
        if self.kind == "synthetic" and (self.prompt is None or self.output is None):
            raise ValueError("a synthetic workload needs [workload.prompt] and [workload.output]")
        if self.kind == "trace" and not self.path:
            raise ValueError("a trace workload needs path")
        if self.turns > 1 and self.prefix_groups:
            raise ValueError("turns: sessions share their own history; give no prefix_groups")
        return self


_SYNTHETIC_FIELDS = frozenset(
    {"num_requests", "arrival", "rate", "gamma_cv", "prompt", "output", "turns"}
)
_TRACE_FIELDS = frozenset(
    {
        "path",
        "format",
        "start_s",
        "duration_s",
        "rate_scale",
        "max_requests",
        "columns",
        "hash_block_size",
    }
)


class HardwareSpec(_Strict):
    model: str
    gpu: str
    tensor_parallel_size: Annotated[int, Field(ge=1)] = 1
    # None: vLLM 0.33's default (planner.models.vllm_defaults)
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    usage_context: Literal["serve", "llm"] = "serve"


class LatencySpec(_Strict):
    """``[latency]``: the step-time model, as ``plan run``'s ``--latency``
    (``measured`` needs ``[hardware]`` and the optional extra ``aic``)."""

    kind: Literal["linear", "roofline", "measured"] = "linear"
    alpha: tuple[float, float, float] | None = None
    beta: tuple[float, float, float] | None = None
    mfu: Annotated[float, Field(gt=0, le=1)] | None = None
    mbu: Annotated[float, Field(gt=0, le=1)] | None = None
    overhead_us: Annotated[float, Field(ge=0)] = 0.0

    @model_validator(mode="after")
    def _no_inert(self) -> LatencySpec:
        other = {
            "linear": {"mfu", "mbu", "overhead_us"},
            "roofline": {"beta"},
            "measured": {"beta", "mfu", "mbu"},
        }[self.kind]
        if inert := sorted(other & self.model_fields_set):
            raise ValueError(f"{', '.join(inert)}: no effect with latency kind {self.kind!r}")
        return self


class RangeSpec(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    start: float
    stop: float
    num: Annotated[int, Field(ge=1, le=100_000)]
    scale: Literal["linear", "log"] = "linear"


class SloSpec(_Strict):
    """``[slo]``: the SLOs of ``planner.slo`` (fields named as the options of
    ``plan run``): seconds, or ``goodput = "ttft:MS tpot:MS e2el:MS"`` (vLLM
    bench's form, milliseconds; ``itl:MS`` is this planner's extension). Each
    row then has ``goodput_rps``, ``meets_slo`` and ``slo_margin``
    (``metrics.summarize``); a ``[search]`` section searches at these SLOs."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    ttft_slo: float | None = None
    tpot_slo: float | None = None
    itl_slo: float | None = None
    e2e_slo: float | None = None
    goodput: str | None = None

    def slo(self) -> SLO:
        """The SLO; raises SpecError (one line, naming the field) when it is bad."""
        try:
            out = from_options(
                self.ttft_slo,
                self.tpot_slo,
                self.e2e_slo,
                self.goodput,
                {k: f"slo.{k}" for k in ("ttft_slo", "tpot_slo", "itl_slo", "e2e_slo", "goodput")},
                self.itl_slo,
            )
        except ValueError as e:
            raise SpecError(str(e)) from None
        if not out.given():
            raise SpecError("slo: give ttft_slo, tpot_slo, itl_slo, e2e_slo or goodput")
        return out


class SearchSpec(_Strict):
    """``[search]``: the highest sustainable rate of every configuration
    (``planner.maxrate.search``) at the spec's ``[slo]`` (none: overload only), adding
    the columns ``max_rate_scale``, ``max_rps``, ``max_output_tps``,
    ``max_rate_limit``, ``max_rate_fail_scale``. Fields as ``plan max-rate``'s
    options. Every search candidate runs to completion: ``horizon_s`` applies
    to the other columns only."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    rate_scale_min: float = DEFAULT_MIN_SCALE
    rate_scale_max: float = DEFAULT_MAX_SCALE
    rate_tolerance: float = DEFAULT_REL_TOL

    def range(self) -> SearchRange:
        """The search range; raises SpecError (one line, naming the field)."""
        names = ("search.rate_scale_min", "search.rate_scale_max", "search.rate_tolerance")
        try:
            return SearchRange(self.rate_scale_min, self.rate_scale_max, self.rate_tolerance, names)
        except ValueError as e:
            raise SpecError(str(e)) from None


AxisValue = int | float | str | bool


class SweepSpec(_Strict):
    name: Annotated[
        str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    ]
    description: str = ""
    horizon_s: Annotated[float, Field(gt=0)] = math.inf
    # Keep only the requests due by then (seconds, after rate_scale), each
    # served to completion (``Workload.due_by``): a window of traffic, where
    # horizon_s stops the clock with requests in flight. plan size reads a
    # horizon_s this way.
    arrivals_until_s: Annotated[float, Field(gt=0)] = math.inf
    max_steps: Annotated[int, Field(ge=1)] = 10_000_000
    workload: WorkloadSpec
    hardware: HardwareSpec | None = None
    latency: LatencySpec = LatencySpec()
    scheduler: dict[str, AxisValue] = {}
    axes: dict[str, list[AxisValue] | RangeSpec]
    slo: SloSpec | None = None
    search: SearchSpec | None = None

    @field_validator("scheduler", mode="before")
    @classmethod
    def _one_value_each(cls, v: object) -> object:
        """A [scheduler] setting is one value: a list there is a sweep,
        which belongs under [axes] (else pydantic names a union branch:
        "scheduler.x.int: Input should be a valid integer")."""
        for key, value in v.items() if isinstance(v, dict) else ():
            if isinstance(value, list | dict):
                raise ValueError(
                    f"{key} takes one value, not {type(value).__name__} "
                    f"{value!r}; to sweep it, give its values under [axes]"
                )
        return v


def int_range(start: float, stop: float, num: int, scale: str) -> list[int]:
    """``num`` distinct integers from ``start`` to ``stop``, linear or log spaced.

    Rounding geometric values collides at the low end (8, 8.6, 9.3 -> 8, 9, 9),
    so each value is pushed to at least its predecessor + 1 and pulled back
    under ``stop`` from the top. Raises SpecError when the span is too narrow.
    """
    lo, hi = int(round(start)), int(round(stop))
    if num == 1:
        return [lo]
    if hi - lo + 1 < num:
        raise SpecError(f"cannot fit {num} distinct integers in {lo}..{hi}")
    raw = np.geomspace(lo, hi, num) if scale == "log" else np.linspace(lo, hi, num)
    v = [int(round(x)) for x in raw]
    for i in range(1, num):
        v[i] = max(v[i], v[i - 1] + 1)
    v[-1] = hi
    for i in range(num - 2, -1, -1):
        v[i] = min(v[i], v[i + 1] - 1)
    return v


def _axis_values(key: str, axis: list[AxisValue] | RangeSpec) -> list[AxisValue]:
    if isinstance(axis, RangeSpec):
        if key in BOOL_AXES or key in STR_AXES:
            raise SpecError(f"axes.{key}: give a list of values, not a range")
        if axis.scale == "log" and (axis.start <= 0 or axis.stop <= 0):
            raise SpecError(f"axes.{key}: a log range needs start and stop > 0")
        if axis.stop < axis.start:
            raise SpecError(f"axes.{key}: stop {axis.stop:g} is below start {axis.start:g}")
        for end, x in (("start", axis.start), ("stop", axis.stop)):
            v = int(round(x)) if key in INT_AXES else x
            shown = f" ({x:g} rounds to {v})" if v != x else ""
            _check_axis_value(key, v, f"axes.{key}.{end}{shown}")
        if key in INT_AXES:
            try:
                return int_range(axis.start, axis.stop, axis.num, axis.scale)
            except SpecError as e:
                raise SpecError(f"axes.{key}: {e}") from None
        raw = (
            np.geomspace(axis.start, axis.stop, axis.num)
            if axis.scale == "log"
            else np.linspace(axis.start, axis.stop, axis.num)
        )
        values: list[AxisValue] = [float(x) for x in raw]
    else:
        values = list(axis)
        for v in values:
            _check_axis_value(key, v, f"axes.{key}")
    if len(values) == 0:
        raise SpecError(f"axes.{key}: the axis is empty")
    if len(set(map(repr, values))) != len(values):
        raise SpecError(f"axes.{key}: repeated values {values!r}")
    return values


class Sweep:
    """A validated spec, expanded: the grid and the workload of each group.

    Attributes:
        spec: the parsed ``SweepSpec``; ``text``: the TOML source.
        grid: DataFrame, one row per config (``config_id`` 0..C-1, then axes).
        axes: axis name -> its values, in spec order.
        warnings: one-line warnings (ignored trace columns, workload fields no
            config uses), each once, for the command to print.
    """

    def __init__(
        self, spec: SweepSpec, text: str, base_dir: Path, memory_limit: int | None = None
    ) -> None:
        self.spec = spec
        self.text = text
        self.base_dir = base_dir
        self.axes: dict[str, list[AxisValue]] = {}
        check_field_bounds(spec)
        self.slo = spec.slo.slo() if spec.slo is not None else None
        self.search = spec.search.range() if spec.search is not None else None
        for key, v in spec.scheduler.items():
            _check_axis_value(key, v, f"scheduler.{key}")
        known = SCHEDULER_AXES + WORKLOAD_AXES + HARDWARE_AXES
        for key, axis in spec.axes.items():
            if key not in known:
                raise SpecError(f"axes.{key}: unknown axis (known: {', '.join(known)})")
            trace_axis = key == "rate_scale"
            if key in WORKLOAD_AXES and (spec.workload.kind == "trace") != trace_axis:
                kind = "trace" if trace_axis else "synthetic"
                raise SpecError(f"axes.{key}: only a {kind} workload has a {key}")
            if key in HARDWARE_AXES and spec.hardware is None:
                raise SpecError(f"axes.{key}: needs a [hardware] model and gpu")
            self.axes[key] = _axis_values(key, axis)
        if "gpu_memory_utilization" in self.axes and (
            "num_gpu_blocks" in self.axes or "num_gpu_blocks" in spec.scheduler
        ):
            raise SpecError("axes.gpu_memory_utilization: give it or num_gpu_blocks, not both")
        blocks_given = "num_gpu_blocks" in self.axes or "num_gpu_blocks" in spec.scheduler
        hw_fields = spec.hardware.model_fields_set if spec.hardware is not None else set()
        if blocks_given and "gpu_memory_utilization" in hw_fields:
            raise SpecError(
                "hardware.gpu_memory_utilization: no effect when num_gpu_blocks is given"
            )
        for key in spec.scheduler:
            if key not in SCHEDULER_AXES:
                raise SpecError(f"scheduler.{key}: unknown setting")
            if key in self.axes:
                raise SpecError(f"scheduler.{key}: also given as an axis")
        size = math.prod(len(v) for v in self.axes.values())
        if size > MAX_GRID_CONFIGS:
            raise SpecError(
                f"axes: the grid has {size:,} configs, over the limit {MAX_GRID_CONFIGS:,}"
            )
        check_expansion(size, memory_limit)
        rows = list(itertools.product(*self.axes.values()))
        self.grid = pd.DataFrame(rows, columns=list(self.axes))
        self.grid.insert(0, "config_id", np.arange(len(self.grid), dtype=np.int64))
        # Build every config and workload now, so that bad values fail before any run.
        self._servers: dict[tuple, dict] = {}
        self.server_notes: list[str] = []  # the settings vLLM's defaults gave (first row)
        self.configs = [self._config(row) for row in self._axis_rows()]
        self._reject_inert_speculation()
        self._same_speculation_twice()
        self._reject_inert_settings()
        self._reject_inert_hardware()
        if self.spec.workload.turns > 1 and any(c.max_concurrency > 0 for c in self.configs):
            raise SpecError(
                "max_concurrency: sessions (workload.turns > 1) pace themselves; "
                "closed-loop clients cannot be combined with them"
            )
        think = [c.think_time_s > 0 for c in self.configs]
        paced = [c.max_concurrency > 0 or self.spec.workload.turns > 1 for c in self.configs]
        if any(think) and not any(p for t, p in zip(think, paced, strict=True) if t):
            raise SpecError(
                f"{_where('think_time_s', self)}: no effect without max_concurrency > 0 "
                "or workload.turns > 1"
            )
        self._check_fleets()
        if self.search is not None:
            traffic_axis(self.axes, "the highest-rate search")
        if self.search is not None and any(c.max_concurrency > 0 for c in self.configs):
            raise SpecError(
                "search: the highest-rate search is for open-loop load; "
                "max_concurrency must be 0 (closed loop sets its own rate)"
            )
        self.warnings: list[str] = []  # one-line notes for the user, each once
        self._warn_speculation_repeats()
        self.workloads: dict[tuple, Workload] = {}
        for key in self.workload_keys():
            self.workloads[key] = self._workload(dict(zip(self.workload_axes(), key, strict=True)))
            for message in unused_field_warnings(self.workloads[key], self.configs):
                self._warn(message)
            try:  # block_size must divide a block-hash trace's hash block size
                check_block_sizes(self.workloads[key], self.configs)
            except WorkloadError as e:
                raise SpecError(f"block_size: {str(e).removeprefix('--block-size ')}") from None
            try:  # a horizon must leave some traffic to judge
                check_horizon(self.workloads[key], self.configs, "horizon_s")
            except WorkloadError as e:
                raise SpecError(str(e)) from None
        self.latency = self._latency()
        if self.spec.latency.kind != "linear" and any(c.compat == "blis" for c in self.configs):
            raise SpecError(
                f'{_where("compat", self)}: compat blis needs latency.kind = "linear" '
                f"(BLIS's blackbox step time), not {self.spec.latency.kind!r}"
            )
        for i, cfg in enumerate(self.configs):  # the int64 ns clock cannot wrap
            try:
                cfg.check_vllm_starts()
            except ValueError as e:  # in the spec's field names
                text = str(e).replace("--max-num-batched-tokens", "max_num_batched_tokens")
                text = text.replace("--max-num-seqs", "max_num_seqs")
                raise SpecError(f"config {i}: {text}") from None
            try:
                clock_bound(cfg, self.latency, f"config {i}", spec=True)
            except ValueError as e:
                raise SpecError(str(e)) from None
        self.hardware_columns = self._hardware_columns()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def gpu_memory_utilization(self) -> float | None:
        """[hardware]'s gpu_memory_utilization, else vLLM 0.33's default
        (``vllm_defaults.GPU_MEMORY_UTILIZATION``); None without [hardware]."""
        hw = self.spec.hardware
        if hw is None:
            return None
        given = hw.gpu_memory_utilization
        return vllm_defaults.GPU_MEMORY_UTILIZATION if given is None else given

    def _warn(self, message: str) -> None:
        """Record a warning once (a trace is read once per workload key)."""
        if message and message not in self.warnings:
            self.warnings.append(message)

    def _reject_inert_settings(self) -> None:
        """Refuse a scheduler setting that has no effect in any configuration
        (the rules of ``plan run``, ``planner.inert.SCHEDULER_RULES``)."""
        given = set(self.spec.scheduler) | set(self.axes)
        params = [dataclasses.asdict(c) for c in self.configs]
        for rule in SCHEDULER_RULES:
            for name in rule.options:
                if name in given and all(rule.inert(p) for p in params):
                    what = "swap without CPU blocks" if name == "preemption_mode" else name
                    raise SpecError(
                        f"{_where(name, self)}: {what} has no effect in any configuration of "
                        "this grid (swap settings need preemption_mode swap with "
                        "cpu_swap_blocks > 0; adaptive settings need adaptive_window > 0)"
                    )

    def _reject_inert_hardware(self) -> None:
        """Refuse a ``[hardware]`` section that nothing reads: every pool
        given, a linear step time from ``latency.beta``, and in every config
        plain full attention with no swap block size to derive (``plan run``'s
        ``planner.cli.inert.reject_inert_hardware``). Raises SpecError."""
        hw, lat = self.spec.hardware, self.spec.latency
        if hw is None or lat.kind != "linear" or lat.beta is None:
            return
        if not _given("num_gpu_blocks", self):
            return
        swap = any(c.preemption_mode == "swap" for c in self.configs)
        derives_bytes = swap and not _given("kv_block_bytes", self)  # from the model (_config)
        if all(c.one_full_attention_group for c in self.configs) and not derives_bytes:
            raise SpecError(
                f"hardware: {hw.model} on {hw.gpu} has no effect: num_gpu_blocks is given and "
                "latency.beta sets the linear step time (remove [hardware], use latency kind "
                '"roofline" or "measured", or size the pool from it without num_gpu_blocks)'
            )

    def _axis_rows(self) -> list[dict[str, Any]]:
        return self.grid.drop(columns="config_id").to_dict("records")

    def workload_axes(self) -> list[str]:
        return [k for k in self.axes if k in WORKLOAD_AXES]

    def _check_fleets(self) -> None:
        """Replicas behind a router: what the fleet kernel does not route yet,
        and router settings that nothing would read. Raises SpecError."""
        fleets = [c for c in self.configs if c.replicas > 1]
        if fleets and self.spec.workload.turns > 1:
            raise SpecError(
                f"{_where('replicas', self)}: sessions (workload.turns > 1) are not routed "
                "yet; use single requests, or replicas = 1"
            )
        for key in ("router", "router_seed"):
            if _given(key, self) and not fleets:
                raise SpecError(f"{_where(key, self)}: no effect without replicas > 1")
        if any(c.router == "prefix_affinity" and not c.enable_prefix_caching for c in fleets):
            raise SpecError(
                f"{_where('router', self)}: prefix_affinity needs enable_prefix_caching = true "
                "(without a cache it routes as least_outstanding)"
            )
        if _given("router_seed", self) and not any(c.router == "random" for c in fleets):
            raise SpecError(f"{_where('router_seed', self)}: no effect without router random")

    def workload_keys(self) -> list[tuple]:
        cols = self.workload_axes()
        if not cols:
            return [()]
        return list(dict.fromkeys(map(tuple, self.grid[cols].itertuples(index=False))))

    def ids_by_workload(self) -> dict[tuple, np.ndarray]:
        """Config ids (int64, ascending) of each workload key, in key order."""
        cols = self.workload_axes()
        if not cols:
            return {(): self.grid["config_id"].to_numpy()}
        keys = list(map(tuple, self.grid[cols].itertuples(index=False)))
        out: dict[tuple, list[int]] = {}
        for i, k in enumerate(keys):
            out.setdefault(k, []).append(i)
        return {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}

    def _server(self, values: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
        """The row's server settings not in ``values`` (the spec's): vLLM 0.33's
        defaults for [hardware]'s model and GPU, with the planner's differences
        (``resolve.server``); the first row's are kept in ``server_notes``."""
        hw = self.spec.hardware
        assert hw is not None
        given = {k: values.get(k) for k in vllm_defaults.FIELDS}
        given["gpu_memory_utilization"] = row.get(
            "gpu_memory_utilization", hw.gpu_memory_utilization
        )
        key = (tuple(given.items()), values.get("preemption_mode"), values.get("compat"))
        if key not in self._servers:
            try:
                self._servers[key] = resolve.server(
                    given, hw.model, hw.gpu, usage=hw.usage_context,
                    preemption_mode=str(values.get("preemption_mode", "recompute")),
                    compat=str(values.get("compat", "vllm")),
                )  # fmt: skip
            except (HardwareError, ValueError) as e:
                raise SpecError(spec_names(f"hardware: {e}")) from None
        srv = self._servers[key]
        if not self.server_notes:
            self.server_notes = resolve.server_lines(srv)
        # The hybrid KV cache manager follows vLLM's default inside the model's
        # sizing (hardware.hybrid_kv_cache_manager_off); a spec does not set it.
        return {k: s.value for k, s in srv.items() if k != vllm_defaults.HYBRID}

    def utilization(self) -> float:
        """gpu_memory_utilization of the spec's servers: [hardware]'s, else
        vLLM 0.33's default for its GPU (``resolve.server``). Raises
        SpecError (one line)."""
        if self.spec.hardware is None:
            raise SpecError("hardware: a pool size needs [hardware] model and gpu")
        return float(self._server(dict(self.spec.scheduler), {})["gpu_memory_utilization"])

    def pool_blocks(
        self,
        util: float | None,
        block_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        speculation: Speculation | None = None,
    ) -> int:
        """num_gpu_blocks of one server of the spec's [hardware] at
        gpu_memory_utilization ``util`` (None: vLLM's default), profiled at
        these scheduler settings as vLLM profiles (``resolve.num_gpu_blocks``).
        Raises SpecError (one line)."""
        hw = self.spec.hardware
        if hw is None:
            raise SpecError("hardware: a pool size needs [hardware] model and gpu")
        try:
            blocks, _ = resolve.num_gpu_blocks(
                None, hw.model, hw.gpu, util, block_size, hw.tensor_parallel_size, 0,
                max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                full_attention_only=False, simulated=True, speculation=speculation,
            )  # fmt: skip
        except (HardwareError, ValueError) as e:
            raise SpecError(spec_names(f"hardware: {e}")) from None
        return blocks

    def _config(self, row: dict[str, Any]) -> SchedulerConfig:
        values = {**self.spec.scheduler, **{k: v for k, v in row.items() if k in SCHEDULER_AXES}}
        hw = self.spec.hardware
        util = None
        if hw is not None:
            srv = self._server(values, row)
            util = srv.pop("gpu_memory_utilization")
            values = {**srv, **values}
            # vLLM raises a linear-attention hybrid's block size; the row runs and
            # records the raised one (resolve.simulated_block_size)
            given_bs = int(values.get("block_size", _default("block_size")))
            values["block_size"] = resolve.simulated_block_size(
                given_bs, hw.model, hw.tensor_parallel_size
            )
        values["speculation"] = self._speculation(values)  # it sizes the pool (a drafter)
        if hw is not None and "num_gpu_blocks" not in values:
            values["num_gpu_blocks"] = self.pool_blocks(
                util,
                int(values.get("block_size", _default("block_size"))),
                int(values.get("max_num_seqs", _default("max_num_seqs"))),
                int(values.get("max_num_batched_tokens", _default("max_num_batched_tokens"))),
                values["speculation"],
            )
        if hw is not None:  # the model's window and KV cache groups
            try:
                attn = resolve.attention(values.get("sliding_window"), hw.model)
            except (HardwareError, ValueError) as e:
                where = _where("sliding_window", self) if "sliding_window" in values else "hardware"
                raise SpecError(spec_names(f"{where}: {e}")) from None
            for k, v in attn.items():
                if k != "sliding_window" and values.get(k, v) != v:
                    raise SpecError(f"{_where(k, self)}: {hw.model} has {v} (hardware.model)")
            values |= attn
            if values.get("preemption_mode") == "swap" and "kv_block_bytes" not in values:
                values["kv_block_bytes"] = resolve.kv_block_bytes(  # as plan run derives it
                    None,
                    hw.model,
                    int(values.get("block_size", _default("block_size"))),
                    hw.tensor_parallel_size,
                )
        for k, v in values.items():
            if k in INT_AXES and not (isinstance(v, int) and not isinstance(v, bool)):
                raise SpecError(f"{_where(k, self)}: expected an integer, got {v!r}")
            if k == "preemption_mode" and v not in PREEMPTION_MODES:
                raise SpecError(f"{_where(k, self)}: unknown preemption mode {v!r}")
            if k == "stop_bound" and v not in STOP_BOUNDS:
                raise SpecError(f"{_where(k, self)}: unknown stop bound {v!r}")
        try:
            # compat blis implies some fields; one the spec sets against it is refused.
            values |= compat_settings(str(values.get("compat", "vllm")), values)
            return SchedulerConfig(
                **values, horizon_s=self.spec.horizon_s, max_steps=self.spec.max_steps
            )
        except (ValueError, TypeError) as e:
            # SchedulerConfig names the CLI flag first: "--max-num-seqs must be ..."
            flag, _, rest = str(e).partition(" ")
            key = FLAG_FIELDS.get(flag, flag.lstrip("-").replace("-", "_"))
            if "--compat blis" in rest and "compat" in self.axes:
                leave = (
                    f"leave {key} out of it (blis rows take what compat implies) or "
                    if "contradicts" in rest
                    else ""
                )
                rest += f"; a grid crossing compat with {key} has such rows: {leave}sweep "
                rest += "blis in a spec of its own"
            rest = _spec_spelling(rest)
            if rest.startswith("is "):  # "--speculative-config is not simulated with ..."
                rest = f"{key} {rest}"
            raise SpecError(f"{_where(key, self)}: {rest}") from None

    def _speculation(self, values: dict[str, Any]) -> Speculation | None:
        """The row's speculative decoding from ``speculative_config``,
        ``spec_acceptance`` (a number or --spec-acceptance's text) and
        ``spec_seed``, popped from ``values`` (``speculative.speculation_from``);
        None in a row without a config (its acceptance then acts in other rows
        or is refused, ``_reject_inert_speculation``). Raises SpecError (one
        line, naming the key)."""
        config, acc, seed = (values.pop(k, None) for k in SPEC_AXES)
        if config is None or config == "":
            return None
        if isinstance(acc, bool) or not isinstance(acc, str | int | float | None):
            raise SpecError(f"{_where('spec_acceptance', self)}: expected a rate or rates text")
        try:
            return speculation_from(config, acc, 0 if seed is None else seed)
        except ValueError as e:
            flag = str(e).split(" ", 1)[0]
            key = {"--spec-acceptance": "spec_acceptance", "--spec-seed": "spec_seed"}.get(
                flag, "speculative_config"
            )
            msg = str(e)
            for name in SPEC_AXES:
                msg = msg.replace("--" + name.replace("_", "-"), name)
            raise SpecError(f"{_where(key, self)}: {msg}") from None

    def _same_speculation_twice(self) -> None:
        """Refuse speculative axis values that differ as text but mean the same
        (reordered JSON keys, 0.7 and "0.70"): their rows would repeat."""
        for key in SPEC_AXES[:2]:
            if key not in self.axes:
                continue
            seen: dict[object, object] = {}
            for v in self.axes[key]:
                meaning = _spec_meaning(key, v)
                if meaning in seen:
                    raise SpecError(
                        f"axes.{key}: {seen[meaning]!r} and {v!r} mean the same; give each once"
                    )
                seen[meaning] = v

    def _warn_speculation_repeats(self) -> None:
        """Warn when a ``spec_acceptance``/``spec_seed`` axis meets rows
        without drafts, which then repeat (the key acts in the other rows)."""
        plain = sum(c.speculation is None for c in self.configs)
        crossed = [k for k in SPEC_AXES[1:] if len(self.axes.get(k, ())) > 1]
        if plain and crossed:
            self._warn(
                f"axes.{crossed[0]}: no effect in the {plain:,} rows without speculative_config, "
                "which repeat once per value"
            )

    def _reject_inert_speculation(self) -> None:
        """``spec_acceptance`` or ``spec_seed`` given while no row has a
        ``speculative_config``: refused (one line)."""
        if any(c.speculation is not None for c in self.configs):
            return
        for key in SPEC_AXES[1:]:
            if key in self.axes or key in self.spec.scheduler:
                raise SpecError(
                    f"{_where(key, self)}: no effect without speculative_config (speculative "
                    "decoding is off in every configuration)"
                )

    def _workload(self, axis_values: dict[str, Any]) -> Workload:
        w = self.spec.workload
        for k, v in axis_values.items():
            if k in w.model_fields_set:
                raise SpecError(f"workload.{k}: also given as an axis")
            if k == "seed" and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise SpecError(f"axes.seed: expected an integer >= 0, got {v!r}")
            if k in ("rate", "rate_scale") and (
                isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf
            ):
                raise SpecError(f"axes.{k}: expected a number > 0, got {v!r}")
        try:
            if w.kind == "trace":
                path = (self.base_dir / str(w.path)).resolve()
                scale = float(axis_values.get("rate_scale", w.rate_scale))
                opts = TraceOptions(
                    w.start_s, w.duration_s, scale, w.max_requests,
                    hash_block_size=w.hash_block_size,
                )  # fmt: skip
                columns = check_columns(w.columns, "workload.columns")
                read = load_trace(path, w.format, opts, columns)
                self._warn(read.warning())
                if "seed" in w.model_fields_set and not seed_acts(
                    None, None, None, w.prefix_groups, w.prefix_share
                ):
                    raise SpecError("workload.seed: no effect: the prefix groups draw nothing")
                return with_shared_prefixes(
                    read.workload, w.prefix_groups, w.prefix_len, w.prefix_share, w.seed
                ).due_by(self.spec.arrivals_until_s)
            assert w.prompt is not None and w.output is not None
            p = LengthDist(**w.prompt.model_dump(), label="workload.prompt")
            o = LengthDist(**w.output.model_dump(), label="workload.output")
            seed = int(axis_values.get("seed", w.seed))
            where = "axes.seed" if "seed" in axis_values else "workload.seed"
            seeded = "seed" in axis_values or "seed" in w.model_fields_set
            if seeded and not seed_acts(w.arrival, p, o, w.prefix_groups, w.prefix_share):
                raise SpecError(
                    f"{where}: no effect: {w.arrival} arrivals and lengths that draw nothing "
                    "(constant, or no stdev) and no random prefix groups"
                )
            wl = sessions(
                w.num_requests,
                w.turns,
                float(axis_values.get("rate", w.rate)),
                p,
                o,
                arrival=w.arrival,
                seed=seed,
                gamma_cv=w.gamma_cv,
            )
            wl = with_shared_prefixes(wl, w.prefix_groups, w.prefix_len, w.prefix_share, seed)
            return wl.due_by(self.spec.arrivals_until_s)
        except WorkloadError as e:
            raise SpecError(spec_names(f"workload: {e}")) from None

    def _latency(self) -> Latency:
        """The step-time model of ``[latency]``; with no ``kind`` given, a
        ``[hardware]`` pair without a linear preset and no BLIS compat, the best
        available (``resolve.best_available_latency``), noted in ``warnings``."""
        lat, hw = self.spec.latency, self.spec.hardware
        if hw is not None:  # a hardware error is the [hardware] table's, pool given or not
            try:
                resolve.check_tensor_parallel(hw.model, hw.tensor_parallel_size)
            except ValueError as e:
                raise SpecError(spec_names(f"hardware: {e}")) from None
        chose = {"kind", "alpha", "beta"} & lat.model_fields_set
        if hw is not None and not chose and not any(c.compat == "blis" for c in self.configs):
            try:
                unchosen = resolve.unchosen_latency(
                    hw.model, hw.gpu, hw.tensor_parallel_size, overhead_us=lat.overhead_us
                )
            except ValueError as e:
                raise SpecError(spec_names(f"latency: {e}")) from None
            if unchosen is not None:
                self._warn(spec_names(unchosen[1]))
                return unchosen[0]
        try:
            return resolve.latency(
                lat.kind,
                hw.model if hw else None,
                hw.gpu if hw else None,
                hw.tensor_parallel_size if hw else 1,
                lat.alpha,
                lat.beta,
                lat.mfu,
                lat.mbu,
                lat.overhead_us,
            )
        except ValueError as e:
            raise SpecError(spec_names(f"latency: {e}")) from None

    def _hardware_columns(self) -> dict[str, Any]:
        """Constant columns describing the hardware and step-time model."""
        hw = self.spec.hardware
        return {
            "model": hw.model if hw else "",
            "gpu": hw.gpu if hw else "",
            "tensor_parallel_size": hw.tensor_parallel_size if hw else 1,
            "latency_model": self.latency.describe(),
        }

    def fingerprint(self) -> str:
        """sha256 (16 hex digits) of the spec text and the workloads' fingerprints."""
        h = hashlib.sha256(self.text.encode())
        for wl in self.workloads.values():
            h.update(wl.fingerprint().encode())
        return h.hexdigest()[:16]

    def metadata(self, version: str) -> dict[str, str]:
        """Key-value metadata stored in the Parquet file."""
        return {
            "planner.version": version,
            "planner.spec_toml": self.text,
            "planner.spec_fingerprint": self.fingerprint(),
            "planner.workloads": json.dumps(
                {
                    json.dumps(dict(zip(self.workload_axes(), k, strict=True))): wl.fingerprint()
                    for k, wl in self.workloads.items()
                }
            ),
        }


# CLI flags a shared validator may name -> the spec's own field names.
SPEC_FIELD_NAMES = {
    "--alpha-coeffs": "latency.alpha",
    "--beta-coeffs": "latency.beta",
    "--mfu": "latency.mfu",
    "--mbu": "latency.mbu",
    "--step-overhead-us": "latency.overhead_us",
    "--latency": "latency.kind",
    "--tensor-parallel-size": "hardware.tensor_parallel_size",
    "--gpu-memory-utilization": "hardware.gpu_memory_utilization",
    "--model": "hardware.model",
    "--gpu": "hardware.gpu",
    "--sliding-window": "sliding_window",
    "--trace-hash-block-size": "workload.hash_block_size",
    "--trace-format": "workload.format",
    "--trace-start": "workload.start_s",
    "--trace-duration": "workload.duration_s",
    "--rate-scale": "workload.rate_scale",
    "--prefix-groups": "workload.prefix_groups",
    "--prefix-len": "workload.prefix_len",
    "--prefix-share": "workload.prefix_share",
}


def spec_names(message: str) -> str:
    """``message`` with the CLI flags of ``SPEC_FIELD_NAMES`` spelled as spec fields."""
    pattern = "|".join(re.escape(f) for f in sorted(SPEC_FIELD_NAMES, key=len, reverse=True))
    return re.sub(rf"({pattern})(?![\w-])", lambda m: SPEC_FIELD_NAMES[m.group(1)], message)


def _given(key: str, sweep: Sweep) -> bool:
    """Whether the spec sets ``key`` as an axis or a [scheduler] value."""
    return key in sweep.axes or key in sweep.spec.scheduler


def _spec_meaning(key: str, v: object) -> object:
    """What a speculative axis value means, for spotting repeats: the parsed
    JSON (keys sorted) of a ``speculative_config``, the rates of a
    ``spec_acceptance``; the value itself when it does not parse (the config
    build refuses it)."""
    try:
        if key == "speculative_config":
            return json.dumps(parse_speculative_config(v), sort_keys=True) if v else ""
        if isinstance(v, int | float) and not isinstance(v, bool):
            return (float(v),)
        return parse_acceptance(str(v))
    except (ValueError, TypeError):
        return repr(v)


_SETTING = re.compile(r"--(compat|preemption-mode|admission) (\w+)")


def _spec_spelling(text: str) -> str:
    """``text`` with ``--compat blis``, ``--preemption-mode swap`` and
    ``--admission projected`` spelled as a spec sets them (``compat "blis"``)."""
    return _SETTING.sub(lambda m: f'{m.group(1).replace("-", "_")} "{m.group(2)}"', text)


def _where(key: str, sweep: Sweep) -> str:
    return f"axes.{key}" if key in sweep.axes else f"scheduler.{key}"


def load_spec_text(
    text: str, base_dir: Path, label: str = "spec", memory_limit: int | None = None
) -> Sweep:
    """Validate and expand spec text; relative paths resolve against ``base_dir``;
    a grid whose expansion would pass ``memory_limit`` (bytes) is refused
    before it is built (``check_expansion``).

    Raises SpecError (one line, prefixed with ``label``)."""
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark is not part of the TOML
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{label}: not valid TOML ({e})") from None
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as e:
        # With unions (an axis is a list or a range) report the branch that got furthest.
        err = max(e.errors(), key=lambda x: len(x["loc"]))
        loc = ".".join(
            str(x)
            for x in err["loc"]
            if not str(x).startswith(("function-after", "list[", "RangeSpec"))
        )
        bad = err.get("input")
        shown = "" if isinstance(bad, dict) else f" (got {bad!r})"
        msg = str(err["msg"]).removeprefix("Value error, ")  # our validators' own words
        raise SpecError(f"{label}: {loc}: {msg}{shown}") from None
    try:
        return Sweep(spec, text, base_dir, memory_limit)
    except SpecError as e:
        raise SpecError(f"{label}: {e}") from None


def load_spec(path: str | Path, memory_limit: int | None = None) -> Sweep:
    """Read, validate and expand a sweep spec (``load_spec_text``).

    Raises:
        SpecError: one line naming the file, the key and the bad value.
    """
    path = Path(path)
    try:
        check_readable(path, "spec", MAX_SMALL_FILE_BYTES)
    except ValueError as e:
        raise SpecError(str(e)) from None
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM (Windows editors) is not TOML
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file") from None
    except (IsADirectoryError, UnicodeDecodeError, PermissionError) as e:
        raise SpecError(f"{path}: cannot read the spec ({e.__class__.__name__})") from None
    return load_spec_text(text, path.parent, str(path), memory_limit)
