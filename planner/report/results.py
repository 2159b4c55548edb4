"""Read a result folder the planner wrote, for ``plan report``.

Three kinds, told apart by the file that marks each as finished:

- a sweep (``plan sweep``): ``data.parquet``, whose metadata holds the
  planner's version and the spec (``planner.sweep.store``); an interrupted
  one has chunk files and a ``_manifest.json`` that is not complete;
- a sizing (``plan size``): ``answer.json`` beside ``size.parquet``;
- a run (``plan run --out``): ``run.json``, with ``requests.parquet`` and,
  for one server, ``steps.parquet``; or a ``plan run --json`` file alone;
- a validation (``plan validate --out``): ``validate.json`` beside
  ``requests.parquet`` (measured and predicted per request).

A folder of none of these, an interrupted sweep and a result without the
planner's version (written before results recorded it) raise ReportError
(one line).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planner.metrics import OUTCOMES
from planner.sweep.store import DRAWN_COLUMNS, JUDGED_COLUMNS, SLO_COLUMNS, dataset_problem

SWEEP_DATA = "data.parquet"
SWEEP_MANIFEST = "_manifest.json"
SIZE_ANSWER = "answer.json"
SIZE_TABLE = "size.parquet"
SIZE_PARETO = "pareto.png"
RUN_RESULT = "run.json"
RUN_REQUESTS = "requests.parquet"
RUN_STEPS = "steps.parquet"
VALIDATE_RESULT = "validate.json"
VALIDATE_REQUESTS = "requests.parquet"


class ReportError(Exception):
    """A path that is not a finished planner result; one line."""


@dataclass
class Result:
    """One result, as ``page`` needs it.

    ``kind``: "sweep", "size", "run" or "validate". ``folder``: where it was read.
    ``version``: the planner version that wrote it. ``facts``: what the page
    states first (workload, model, GPU, step-time model, ...), label -> text.
    ``record``: the result's JSON (size, run) or spec (sweep) as a dict.
    ``table``: its rows (sweep, size) or requests (run). ``steps``: a run's
    per-step trace, or None. ``missing``: what the page cannot show, and why."""

    kind: str
    folder: Path
    version: str
    facts: dict[str, str]
    record: dict
    table: pd.DataFrame
    steps: pd.DataFrame | None = None
    missing: list[str] = field(default_factory=list)


def load(path: Path) -> Result:
    """The result at ``path`` (a folder). Raises ReportError."""
    if not path.exists():
        raise ReportError(f"{path}: no such file or folder")
    if not path.is_dir():
        if path.suffix == ".json" and "outcome" in _json(path):  # plan run --json > FILE
            return _run(path)
        raise ReportError(
            f"{path}: not a planner result; give a result folder (plan sweep --out, plan size "
            "--out, plan run --out, plan validate --out) or a plan run --json file"
        )
    if (path / RUN_RESULT).exists():
        return _run(path)
    if (path / VALIDATE_RESULT).exists():
        return _validate(path)
    if (path / SIZE_ANSWER).exists() or (path / SIZE_TABLE).exists():
        return _size(path)
    if (path / SWEEP_DATA).exists() or (path / SWEEP_MANIFEST).exists():
        return _sweep(path)
    raise ReportError(
        f"{path}: not a planner result (no {SWEEP_DATA}, {SIZE_ANSWER}, {RUN_RESULT} or "
        f"{VALIDATE_RESULT}); give a folder written by plan sweep, plan size, plan run --out "
        "or plan validate --out"
    )


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ReportError(f"{path}: not readable JSON ({e.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: expected a JSON object")
    return data


def _parquet(path: Path) -> tuple[pd.DataFrame, dict[bytes, bytes]]:
    try:
        return pd.read_parquet(path), pq.read_schema(path).metadata or {}
    except (OSError, ValueError) as e:
        raise ReportError(f"{path}: not a readable Parquet file ({e.__class__.__name__})") from None


def _version(record: dict, path: Path, rerun: str) -> str:
    version = record.get("planner_version")
    if not isinstance(version, str):
        raise ReportError(
            f"{path}: written by a planner that did not record its version (before "
            f"results carried planner_version); {rerun}"
        )
    return version


def _sweep(folder: Path) -> Result:
    data = folder / SWEEP_DATA
    if not data.exists():
        manifest = _json(folder / SWEEP_MANIFEST)
        done = len(manifest.get("chunks", {}))
        raise ReportError(
            f"{folder}: an interrupted sweep ({done} of {manifest.get('num_chunks', '?')} "
            "chunks); finish it with plan sweep SPEC --out "
            f"{folder} --resume, then report"
        )
    df, meta = _parquet(data)
    spec = {}
    if b"planner.spec_toml" in meta:
        try:
            spec = tomllib.loads(meta[b"planner.spec_toml"].decode())
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise ReportError(f"{data}: its sweep spec metadata is damaged ({e})") from None
    need = DRAWN_COLUMNS + JUDGED_COLUMNS + (SLO_COLUMNS if "slo" in spec else ())
    if (problem := dataset_problem(df, need)) is not None:
        raise ReportError(f"{data}: not a whole sweep dataset ({problem}); sweep it again")
    version = meta.get(b"planner.version", b"").decode() or None
    if version is None:
        raise ReportError(f"{data}: no planner.version in its metadata; sweep it again")
    hw = spec.get("hardware", {})
    lat = sorted(df["latency_model"].astype(str).unique()) if "latency_model" in df else []
    facts = {
        "sweep": f"{spec.get('name', folder.name)}: {spec.get('description', '')}".rstrip(": "),
        "configs": f"{len(df):,}",
        "workload": "; ".join(sorted(df["workload"].astype(str).unique()))
        if "workload" in df
        else "-",
        "model": str(hw.get("model", "none (a pool given in blocks)")),
        "GPU": str(hw.get("gpu", "none")),
        "step-time model": "; ".join(lat) or str(spec.get("latency", {}).get("kind", "-")),
    }
    return Result("sweep", folder, version, facts, spec, df)


def _size(folder: Path) -> Result:
    path = folder / SIZE_ANSWER
    if not path.exists():
        raise ReportError(
            f"{folder}: a plan size folder without {SIZE_ANSWER} (written by an older planner, "
            "or interrupted); rerun plan size with --resume or --overwrite"
        )
    answer = _json(path)
    version = _version(answer, path, "rerun plan size")
    table, _ = _parquet(folder / SIZE_TABLE)
    a = answer.get("answer") or {}
    facts = {
        "workload": str(answer.get("workload", "-")),
        "model": str(answer.get("model", "-")),
        "GPU candidates": ", ".join(answer.get("candidates", [])),
        "SLO": str(answer.get("slo", "-")),
        "step-time model": str(a.get("step_time_model", "-")),
    }
    missing = [] if (folder / SIZE_PARETO).exists() else [f"the Pareto picture ({SIZE_PARETO})"]
    return Result("size", folder, version, facts, answer, table, missing=missing)


Count = Field(default=None, ge=0)  # a whole number >= 0, or absent / null
Amount = Field(default=None, ge=0.0)  # a number >= 0 (rates, seconds), or absent / null


class RunRecord(BaseModel):
    """The fields of a ``plan run`` record (``run.json`` or ``--json``) that
    the page shows, with the types ``plan run`` writes (strict: no strings
    for numbers, no numbers for flags); the rest pass unchecked."""

    model_config = ConfigDict(extra="allow", strict=True)

    planner_version: str
    outcome: str | None = None
    overloaded: bool | None = None
    meets_slo: bool | None = None
    completed: int | None = Count
    preemptions: int | None = Count
    num_gpu_blocks: int | None = Field(default=None, ge=1)
    replicas: int | None = Field(default=None, ge=1)
    throughput_rps: float | None = Amount
    output_tps: float | None = Amount
    offered_rps: float | None = Amount
    ttft_s_p99: float | None = Amount
    tpot_s_p99: float | None = Amount
    itl_s_p99: float | None = Amount
    e2e_s_p99: float | None = Amount

    @field_validator("outcome")
    @classmethod
    def _known(cls, v: str | None) -> str | None:
        if v is not None and v not in OUTCOMES:
            raise ValueError(f"expected one of {', '.join(OUTCOMES)}")
        return v


def _checked_run(record: dict, path: Path) -> None:
    """Raise ReportError (one line, naming the field) unless ``record`` is a
    ``RunRecord``."""
    try:
        RunRecord.model_validate(record)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "record"
        msg = err["msg"].removeprefix("Value error, ")  # pydantic's prefix
        raise ReportError(
            f"{path}: {where}: {msg} (got {err.get('input')!r}); not as plan run wrote it"
        ) from None


def _run(where: Path) -> Result:
    """A ``plan run --out`` folder, or a ``plan run --json`` file (its
    distributions and time series then missing, and said so)."""
    path = where / RUN_RESULT if where.is_dir() else where
    record = _json(path)
    version = _version(record, path, "rerun plan run --out")
    _checked_run(record, path)
    if not where.is_dir():
        why = "a plan run --json file alone has none; plan run --out DIR keeps them"
        missing = [f"latency distributions and the run over time ({why})"]
        return Result("run", where, version, _run_facts(record), record, pd.DataFrame(), None,
                      missing)  # fmt: skip
    missing = []
    requests = pd.DataFrame()
    if (where / RUN_REQUESTS).exists():
        requests, _ = _parquet(where / RUN_REQUESTS)
    else:
        missing.append(f"latency distributions ({RUN_REQUESTS} is missing)")
    steps = None
    if (where / RUN_STEPS).exists():
        steps, _ = _parquet(where / RUN_STEPS)
    else:
        missing.append(
            f"running, waiting, KV use and throughput over time ({RUN_STEPS} is missing: "
            "plan run keeps a per-step trace for one server only)"
        )
    return Result("run", where, version, _run_facts(record), record, requests, steps, missing)


def _run_facts(record: dict) -> dict[str, str]:
    gpu = record.get("gpu")
    return {
        "workload": str(record.get("workload", "-")),
        "model": str(record.get("model") or "none (scenario S1's pool and step time)"),
        "GPU": f"{gpu} x {record.get('tensor_parallel_size', 1)}" if gpu else "none",
        "step-time model": str(record.get("latency_model", "-")),
        "num_gpu_blocks": f"{int(record.get('num_gpu_blocks', 0)):,}"
        + (" per replica" if int(record.get("replicas", 1) or 1) > 1 else ""),
        **(
            {"fleet": f"{record['replicas']} replicas behind router {record.get('router', '-')}"}
            if int(record.get("replicas", 1) or 1) > 1
            else {}
        ),
        **_speculation_fact(record),
    }


def _speculation_fact(record: dict) -> dict[str, str]:
    """The run's speculative decoding, as plan run's ``--json`` gives it
    (``speculation``), or nothing when off."""
    s = record.get("speculation")
    if not s:
        return {}
    rates = ", ".join(f"{x:.2f}" for x in s.get("per_position_acceptance", ()))
    return {
        "speculative decoding": f"{s.get('method')}, {s.get('num_speculative_tokens')} draft "
        f"tokens per step; per-position acceptance {rates} (assumed; mean acceptance length "
        f"{float(s.get('mean_acceptance_length', 1.0)):.2f})"
    }


def _validate(folder: Path) -> Result:
    path = folder / VALIDATE_RESULT
    record = _json(path)
    version = _version(record, path, "rerun plan validate --out")
    requests = pd.DataFrame()
    missing = []
    if (folder / VALIDATE_REQUESTS).exists():
        requests, _ = _parquet(folder / VALIDATE_REQUESTS)
    else:
        missing.append(f"predicted against measured per request ({VALIDATE_REQUESTS} is missing)")
    ran = record.get("run_vllm_version")
    facts = {
        "real run": f"{record.get('run_name', '-')} ({record.get('requests', 0):,} requests"
        + (f", vLLM {ran})" if ran else ")"),
        "model": str(record.get("model", "-")),
        "GPU": f"{record.get('gpu') or 'none'} x {record.get('tensor_parallel_size', 1)}",
        "step-time model": str(record.get("latency_model", "-")),
        "num_gpu_blocks": f"{int(record.get('num_gpu_blocks', 0)):,}",
    }
    return Result("validate", folder, version, facts, record, requests, missing=missing)
