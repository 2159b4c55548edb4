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
from typing import Any

import numpy as np
import pandas as pd

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


def _read_folder(path: Path) -> RealRun:
    meta_p, req_p = path / "meta.json", path / "requests.jsonl"
    for p in (meta_p, req_p):
        if not p.is_file():
            raise RunError(f"{path}: no {p.name} (a run folder holds meta.json and requests.jsonl)")
    try:
        meta = json.loads(meta_p.read_text(encoding="utf-8"))
        rows = [json.loads(line) for line in req_p.read_text(encoding="utf-8").splitlines() if line]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(meta, dict) or not all(isinstance(r, dict) for r in rows):
        raise RunError(f"{path}: meta.json and each line of requests.jsonl must be JSON objects")
    if not rows:
        raise RunError(f"{req_p}: holds no requests")
    cols = {}
    for k in REQUEST_KEYS:
        vals = [r.get(k) for r in rows]
        bad = next((i for i, v in enumerate(vals) if type(v) not in (int, float)), None)
        if bad is not None:
            raise RunError(f"{req_p}: request {bad} has no number '{k}' (per-request timings)")
        cols[k] = np.asarray(vals, dtype=np.float64)
    if (cols["input_toks"] < 1).any() or (cols["output_toks"] < 1).any():
        raise RunError(f"{req_p}: token counts must be >= 1")
    order = np.argsort(cols["queued_ts"], kind="stable")
    c = {k: v[order] for k, v in cols.items()}
    out = c["output_toks"].astype(np.int32)
    ttft = c["first_token_ts"] - c["queued_ts"]
    tpot = np.where(out >= 2, (c["last_token_ts"] - c["first_token_ts"]) / np.maximum(out - 1, 1),
                    np.nan)  # fmt: skip
    e2e = c["last_token_ts"] - c["queued_ts"]
    if (ttft < 0).any() or (e2e < ttft).any():
        raise RunError(f"{req_p}: timestamps out of order (first token before queueing)")
    engine = dict(meta.get("engine_kwargs") or {})
    kv = meta.get("kv_cache") or {}
    for k in ("num_gpu_blocks", "block_size", "gpu_memory_utilization", "enable_prefix_caching"):
        if kv.get(k) is not None:
            engine[k] = kv[k]
    sched = ((meta.get("resolved_config") or {}).get("scheduler_config")) or {}
    if sched.get("async_scheduling") is not None:
        engine["async_scheduling"] = sched["async_scheduling"]
    model_cfg = ((meta.get("resolved_config") or {}).get("model_config")) or {}
    if engine.get("max_model_len") is None and model_cfg.get("max_model_len"):
        engine["max_model_len"] = model_cfg["max_model_len"]
    engine["vllm_version"] = meta.get("vllm_version")
    gpu_name = str((meta.get("hardware") or {}).get("device_name") or "")
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
