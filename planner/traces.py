"""Request traces -> ``Workload`` arrays (arrival seconds, prompt and output tokens).

Formats:

- ``azure``: the Azure LLM inference traces 2023 (``TIMESTAMP,ContextTokens,
  GeneratedTokens``; CC-BY 4.0, Patel et al., "Splitwise", ISCA 2024). Two ship
  with planner in ``planner/data/azure-llm-2023/``.
- ``csv`` / ``jsonl``: one request per row/line with an arrival column
  (seconds from the start, default ``arrival_time_s``) or a timestamp column
  (datetime text or epoch seconds; times count from the first row), a prompt
  column and an output column; names configurable.

``TraceOptions`` then applies, in order: a time window (``start_s``,
``duration_s``, relative to the first request), a rate scale (arrivals divided
by it: 2 replays twice as fast), a request cap, and vLLM's front-end length
rule: with ``max_model_len`` set, ``max_tokens`` is capped at
``max_model_len - prompt``. Prompts of ``max_model_len`` tokens or more stay in
the workload: the kernel rejects them as the front end would, and counts them.

Every problem in a file is a ``WorkloadError`` naming the file, the row (1-based
line number, header = 1) and the problem.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from planner.workload import MAX_ARRIVAL_S, MAX_TOKENS, Workload, WorkloadError

DATA_DIR = Path(__file__).parent / "data"
AZURE_CONV = DATA_DIR / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = DATA_DIR / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv"
FORMATS = ("auto", "azure", "csv", "jsonl")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True)
class TraceOptions:
    """How to cut and replay a trace. Raises WorkloadError on impossible values."""

    start_s: float = 0.0
    duration_s: float = math.inf
    rate_scale: float = 1.0
    max_requests: int | None = None
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        if not (0 <= self.start_s < math.inf):
            raise WorkloadError(f"--trace-start must be >= 0 seconds, got {self.start_s}")
        if not (self.duration_s > 0):
            raise WorkloadError(f"--trace-duration must be > 0 seconds, got {self.duration_s}")
        if not (0 < self.rate_scale < math.inf):
            raise WorkloadError(f"--rate-scale must be > 0, got {self.rate_scale}")
        if self.max_requests is not None and self.max_requests < 1:
            raise WorkloadError(f"--max-requests must be >= 1, got {self.max_requests}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise WorkloadError(f"--max-model-len must be >= 2, got {self.max_model_len}")


def _load(path: Path, fmt: str) -> pd.DataFrame:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            if fmt == "jsonl":
                return pd.read_json(path, lines=True, dtype=False)
            return pd.read_csv(path, index_col=False, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a directory, not a trace file") from None
    except PermissionError:
        raise WorkloadError(f"{path}: permission denied") from None
    except pd.errors.ParserWarning:
        raise WorkloadError(f"{path}: rows have more fields than the header") from None
    except pd.errors.EmptyDataError:
        raise WorkloadError(f"{path}: the file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise WorkloadError(
            f"{path}: not a readable {fmt} file ({str(e).splitlines()[0]})"
        ) from None


def _numbers(path: Path, df: pd.DataFrame, col: str, integer: bool) -> np.ndarray:
    raw = df[col]
    v = pd.to_numeric(raw.astype(str).str.strip(), errors="coerce").astype(np.float64)
    limit = MAX_TOKENS if integer else MAX_ARRIVAL_S
    bad = v.isna() | ~np.isfinite(v) | (v < (1 if integer else 0)) | (v > limit)
    if integer:
        bad |= v != np.floor(v)
    if bad.any():
        row = int(np.argmax(bad.to_numpy()))
        want = f"an integer in 1..{limit}" if integer else f"seconds in 0..{limit:g}"
        raise WorkloadError(
            f"{path}: row {row + 2}: bad {col} value {str(raw.iloc[row])!r} (want {want})"
        )
    return v.to_numpy()


def _timestamps(path: Path, df: pd.DataFrame, col: str) -> np.ndarray:
    """Datetime text or epoch seconds -> seconds since the first row."""
    raw = df[col].astype(str).str.strip()
    as_num = pd.to_numeric(raw, errors="coerce")
    if as_num.notna().all():
        t = as_num.to_numpy(dtype=np.float64)
    else:
        ts = pd.to_datetime(raw, errors="coerce", format="mixed")
        if ts.isna().any():
            row = int(np.argmax(ts.isna().to_numpy()))
            raise WorkloadError(f"{path}: row {row + 2}: bad {col} value {raw.iloc[row]!r}")
        t = (ts - ts.iloc[0]).dt.total_seconds().to_numpy()
    if not np.all(np.isfinite(t)):
        row = int(np.argmax(~np.isfinite(t)))
        raise WorkloadError(f"{path}: row {row + 2}: bad {col} value {raw.iloc[row]!r}")
    return t - t[0]


def read_trace(
    path: str | Path,
    fmt: str = "auto",
    options: TraceOptions = TraceOptions(),
    arrival_col: str = "arrival_time_s",
    timestamp_col: str = "timestamp",
    prompt_col: str = "prompt_tokens",
    output_col: str = "output_tokens",
) -> Workload:
    """Read a trace file into a ``Workload`` (see the module docstring).

    ``fmt = "auto"`` picks ``azure`` when the Azure columns are present,
    ``jsonl`` for ``.jsonl``/``.json`` files, else ``csv``. Rows must be in
    arrival order. Raises WorkloadError (one line) on any problem.
    """
    path = Path(path)
    if fmt not in FORMATS:
        raise WorkloadError(f"--trace-format must be one of {FORMATS}, got {fmt!r}")
    load_fmt = (
        "jsonl"
        if fmt == "jsonl" or (fmt == "auto" and path.suffix in (".jsonl", ".json"))
        else "csv"
    )
    df = _load(path, load_fmt)
    if fmt == "auto":
        fmt = "azure" if all(c in df.columns for c in AZURE_COLUMNS) else load_fmt
    if fmt == "azure":
        arrival_col, timestamp_col, prompt_col, output_col = ("", *AZURE_COLUMNS)
    time_col = arrival_col if arrival_col in df.columns else timestamp_col
    for col in (time_col, prompt_col, output_col):
        if col not in df.columns:
            raise WorkloadError(f"{path}: missing column {col!r} (has {list(df.columns)})")
    if len(df) == 0:
        raise WorkloadError(f"{path}: no requests")
    if time_col == arrival_col:
        t = _numbers(path, df, arrival_col, integer=False)  # already seconds from the start
    else:
        t = _timestamps(path, df, time_col)
    back = np.flatnonzero(np.diff(t) < 0)
    if len(back):
        raise WorkloadError(f"{path}: row {back[0] + 3}: {time_col} goes backwards")
    prompt = _numbers(path, df, prompt_col, integer=True)
    output = _numbers(path, df, output_col, integer=True)
    return _apply_options(path, t, prompt, output, options)


def _apply_options(
    path: Path, t: np.ndarray, prompt: np.ndarray, output: np.ndarray, o: TraceOptions
) -> Workload:
    keep = (t >= o.start_s) & (t < o.start_s + o.duration_s)
    if not keep.any():
        raise WorkloadError(f"{path}: no request in the window {o.start_s:g}..+{o.duration_s:g} s")
    t, prompt, output = t[keep] - o.start_s, prompt[keep], output[keep]
    if o.max_requests is not None:
        t, prompt, output = t[: o.max_requests], prompt[: o.max_requests], output[: o.max_requests]
    t = t / o.rate_scale
    if o.max_model_len is not None:
        room = o.max_model_len - prompt
        output = np.where(room >= 1, np.minimum(output, room), output)
    return Workload(
        t.astype(np.float64),
        prompt.astype(np.int32),
        output.astype(np.int32),
        name=path.name,
    )
