"""Replay a real benchmark run on the planner and compare, metric by metric.

Two inputs (``read_run``):

- a folder with ``meta.json`` and ``requests.jsonl`` as LLMServingSim records
  its real vLLM runs (``../shared/data/real-runs-llmservingsim``: the engine
  arguments, the KV pool vLLM logged, the GPU's name, and per request the
  server's own timestamps: TTFT = first_token_ts - queued_ts, TPOT =
  (last_token_ts - first_token_ts) / (output_toks - 1), E2E = last_token_ts -
  queued_ts; the arrival schedule is ``queued_ts`` from the first request);
- a ``vllm bench serve --save-result --save-detailed`` JSON
  (``planner.answers.calibrate.read_bench_result``): client-side TTFT and
  ITLs, E2E = TTFT + the sum of the ITLs; it names no engine settings, so the
  command's options (or vLLM's defaults) describe the server.

``compare`` replays the requests at their arrival times on the configuration
and returns predicted against measured for TTFT, TPOT and E2E (mean, p50,
p90, p99) and throughput (completed requests over the time from the first
arrival to the last finish), with signed relative errors
(predicted / measured - 1).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from planner import bounds
from planner.answers.calibrate import CalibrationError, read_bench_result
from planner.workload.arrays import Workload

STATS = ("mean", "p50", "p90", "p99")
METRICS = ("ttft_s", "tpot_s", "e2e_s")
# GPU names as torch reports them (meta.json's device_name) -> GPU presets
# (``planner.models.hardware.GPUS``); the first key found in the name wins.
DEVICE_NAMES = (
    ("h200", "H200"),
    ("h100", "H100"),
    ("a100-sxm4-40gb", "A100-40GB"),
    ("a100 40gb", "A100-40GB"),
    ("a100", "A100-80GB"),
    ("l40s", "L40S"),
    ("b200", "B200"),
    ("rtx 4090", "RTX-4090"),
    ("rtx pro 6000", "RTX-PRO-6000"),
    ("mi300x", "MI300X"),
)


class RunError(ValueError):
    """A run that cannot be read or replayed; one line naming what is missing."""


@dataclass(frozen=True)
class RealRun:
    """A measured run, requests in arrival order.

    Attributes: ``arrival_s``, ``prompt``, ``output`` (R,) as ``Workload``'s;
    ``ttft_s``, ``tpot_s``, ``e2e_s`` (R,) float64 seconds, NaN where not
    measured (TPOT of one-token outputs); ``engine``: the engine settings the
    run records, by vLLM's names (empty for a bench JSON); ``gpu_name``: the
    device name it records, "" if none; ``source``: the file(s) read.
    """

    name: str
    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    engine: dict[str, Any] = field(default_factory=dict)
    gpu_name: str = ""
    source: str = ""

    def workload(self) -> Workload:
        """The requests, each output as its max_tokens (EOS ignored)."""
        return Workload(self.arrival_s, self.prompt, self.output, name=self.name)


def read_run(path: Path) -> RealRun:
    """A run folder (meta.json + requests.jsonl) or a vllm bench serve JSON.

    Raises:
        RunError: one line: not found, not readable, a field missing or of the
            wrong type, no requests.
    """
    path = Path(path)
    if path.is_dir():
        return _read_folder(path)
    if not path.is_file():
        raise RunError(f"{path}: no such file or folder")
    try:
        b = read_bench_result(path)
    except CalibrationError as e:
        raise RunError(str(e)) from None
    e2e = b.ttft_s + np.where(b.output >= 2, b.tpot_s * (b.output - 1), 0.0)
    return RealRun(path.stem, b.arrival_s, b.prompt, b.output, b.ttft_s, b.tpot_s, e2e,
                   source=str(path))  # fmt: skip


REQUEST_KEYS = ("input_toks", "output_toks", "queued_ts", "first_token_ts", "last_token_ts")
MAX_SECONDS = bounds.MAX_ARRIVAL_S  # a timestamp the int64 ns clock holds

Count = Annotated[StrictInt, Field(ge=1, le=bounds.INT32_MAX)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _Engine(_Strict):
    model: str | None = None
    tensor_parallel_size: Annotated[StrictInt, Field(ge=1, le=bounds.MAX_TP)] | None = None
    data_parallel_size: Count | None = None
    pipeline_parallel_size: Count | None = None
    enable_expert_parallel: StrictBool | None = None
    max_num_seqs: Count | None = None
    max_num_batched_tokens: Count | None = None
    max_model_len: Count | None = None
    kv_cache_dtype: str | None = None


class _KvCache(_Strict):
    num_gpu_blocks: Count | None = None
    block_size: Count | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1, strict=False)] | None = None
    enable_prefix_caching: StrictBool | None = None


class _Scheduler(_Strict):
    async_scheduling: StrictBool | None = None


class _ModelConfig(_Strict):
    max_model_len: Count | None = None


class _Resolved(_Strict):
    scheduler_config: _Scheduler | None = None
    model_cfg: _ModelConfig | None = Field(None, alias="model_config")  # pydantic's own name


class _Hardware(_Strict):
    device_name: str | None = None


class _Meta(_Strict):
    """The fields of LLMServingSim's meta.json this module reads."""

    vllm_version: str | None = None
    engine_kwargs: _Engine | None = None
    kv_cache: _KvCache | None = None
    resolved_config: _Resolved | None = None
    hardware: _Hardware | None = None


def _meta(p: Path) -> _Meta:
    """meta.json checked as data; RunError (one line) naming the field."""
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise RunError(f"{p}: not readable JSON ({type(e).__name__})") from None
    if not isinstance(doc, dict):
        raise RunError(f"{p}: expected a JSON object")
    try:
        return _Meta.model_validate(doc)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].lower().split(" or instance of")[0]
        raise RunError(f"{p}: {where}: {msg}, got {err.get('input')!r}") from None


def _requests(p: Path) -> dict[str, np.ndarray]:
    """requests.jsonl's five columns, (R,) float64, in file order; RunError
    (one line, naming the line and key) for a line that is not a JSON object,
    a value that is not a finite JSON number in range, or token counts that
    are not whole numbers in 1..INT32_MAX."""
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RunError(f"{p}: cannot read it ({type(e).__name__})") from None
    cols: dict[str, list[float]] = {k: [] for k in REQUEST_KEYS}
    seen: dict[object, int] = {}  # request_id -> its line
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise RunError(f"{p}: line {n} is not JSON") from None
        if not isinstance(row, dict):
            raise RunError(f"{p}: line {n} is not a JSON object")
        rid = row.get("request_id")
        if isinstance(rid, (str, int)) and not isinstance(rid, bool):
            if rid in seen:  # a request recorded twice (a file appended to itself)
                raise RunError(f"{p}: line {n}: request_id {rid!r} repeats line {seen[rid]}")
            seen[rid] = n
        for k in REQUEST_KEYS:
            v = row.get(k)
            top = bounds.INT32_MAX if k.endswith("_toks") else MAX_SECONDS
            low = 1 if k.endswith("_toks") else 0
            if type(v) not in (int, float) or not (low <= v <= top):
                raise RunError(
                    f"{p}: line {n}: '{k}' must be a number in {low}..{top:,.0f}, got {v!r} "
                    "(per-request timings)"
                )
            if k.endswith("_toks") and v != int(v):
                raise RunError(f"{p}: line {n}: '{k}' must be a whole number, got {v!r}")
            cols[k].append(float(v))
    if not cols["queued_ts"]:
        raise RunError(f"{p}: holds no requests")
    return {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}


def _read_folder(path: Path) -> RealRun:
    meta_p, req_p = path / "meta.json", path / "requests.jsonl"
    for p in (meta_p, req_p):
        if not p.is_file():
            raise RunError(f"{path}: no {p.name} (a run folder holds meta.json and requests.jsonl)")
    meta = _meta(meta_p)
    cols = _requests(req_p)
    order = np.argsort(cols["queued_ts"], kind="stable")
    c = {k: v[order] for k, v in cols.items()}
    out = c["output_toks"].astype(np.int32)
    ttft = c["first_token_ts"] - c["queued_ts"]
    for a, b in (("queued_ts", "first_token_ts"), ("first_token_ts", "last_token_ts")):
        late = np.flatnonzero(c[b] < c[a])
        if late.size:
            raise RunError(f"{req_p}: a request's {b} is before its {a} (request {order[late[0]]})")
    tpot = np.where(out >= 2, (c["last_token_ts"] - c["first_token_ts"]) / np.maximum(out - 1, 1),
                    np.nan)  # fmt: skip
    e2e = c["last_token_ts"] - c["queued_ts"]
    engine = meta.engine_kwargs.model_dump(exclude_none=True) if meta.engine_kwargs else {}
    engine = {k: v for k, v in engine.items() if k in _Engine.model_fields}
    if meta.kv_cache is not None:
        engine |= {k: v for k, v in meta.kv_cache.model_dump(exclude_none=True).items()
                   if k in _KvCache.model_fields}  # fmt: skip
    rc = meta.resolved_config
    if rc is not None and rc.scheduler_config is not None:
        if rc.scheduler_config.async_scheduling is not None:
            engine["async_scheduling"] = rc.scheduler_config.async_scheduling
    if engine.get("max_model_len") is None and rc is not None and rc.model_cfg is not None:
        if rc.model_cfg.max_model_len is not None:
            engine["max_model_len"] = rc.model_cfg.max_model_len
    mml = engine.get("max_model_len")
    if mml is not None and (too := np.flatnonzero(c["input_toks"] >= mml)).size:
        raise RunError(
            f"{req_p}: a prompt of {int(c['input_toks'][too[0]]):,} tokens is not below the run's "
            f"max_model_len {mml:,}: vLLM would have refused it"
        )
    engine["vllm_version"] = meta.vllm_version
    gpu_name = (meta.hardware.device_name or "") if meta.hardware else ""
    arrival = c["queued_ts"] - c["queued_ts"][0]
    return RealRun(path.name, arrival, c["input_toks"].astype(np.int32), out, ttft, tpot, e2e,
                   engine, gpu_name, f"{meta_p}, {req_p}")  # fmt: skip


def gpu_preset(device_name: str) -> str | None:
    """The GPU preset for a device name as torch reports it, None if unknown."""
    low = device_name.lower()
    return next((preset for key, preset in DEVICE_NAMES if key in low), None)


def _stats(x: np.ndarray) -> dict[str, float]:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return {s: math.nan for s in STATS}
    return {
        "mean": float(x.mean()),
        "p50": float(np.percentile(x, 50)),
        "p90": float(np.percentile(x, 90)),
        "p99": float(np.percentile(x, 99)),
    }


def throughput(arrival_s: np.ndarray, e2e_s: np.ndarray) -> float:
    """Completed requests per second from the first arrival to the last finish."""
    done = np.isfinite(e2e_s)
    if not done.any():
        return 0.0
    span = float(np.max(arrival_s[done] + e2e_s[done]) - np.min(arrival_s))
    return float(done.sum()) / span if span > 0 else math.nan


def compare(run: RealRun, predicted: dict[str, np.ndarray]) -> pd.DataFrame:
    """Rows (metric, stat, measured, predicted, error): ``predicted`` holds
    per-request ``ttft_s``, ``tpot_s`` and ``e2e_s`` (R,) in the run's order,
    NaN for requests the replay did not finish; error = predicted / measured
    - 1 (NaN when measured is 0 or missing)."""
    rows = []
    measured = {"ttft_s": run.ttft_s, "tpot_s": run.tpot_s, "e2e_s": run.e2e_s}
    for m in METRICS:
        got, want = _stats(predicted[m]), _stats(measured[m])
        rows += [(m, s, want[s], got[s]) for s in STATS]
    rows.append(
        (
            "throughput_rps",
            "",
            throughput(run.arrival_s, run.e2e_s),
            throughput(run.arrival_s, predicted["e2e_s"]),
        )
    )
    df = pd.DataFrame(rows, columns=["metric", "stat", "measured", "predicted"])
    with np.errstate(divide="ignore", invalid="ignore"):
        df["error"] = df.predicted / df.measured.where(df.measured > 0) - 1.0
    return df
