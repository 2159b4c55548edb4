"""Request traces -> ``Workload`` arrays (arrival seconds, prompt and output tokens).

Formats:

- ``azure``: the Azure LLM inference traces 2023 (``TIMESTAMP,ContextTokens,
  GeneratedTokens``; CC-BY 4.0, Patel et al., "Splitwise", ISCA 2024). Two ship
  with planner in ``planner/data/azure-llm-2023/``.
- ``csv`` / ``jsonl``: one request per row/line (comma-separated CSV with a
  header; JSONL objects). Columns, by key (default name in brackets):

  - ``arrival`` [``arrival_time_s``]: seconds from the start; or
    ``timestamp`` [``timestamp``]: datetime text or epoch seconds, counted
    from the first row. ``arrival`` wins when a file has both default names.
  - ``prompt`` [``prompt_tokens``], ``output`` [``output_tokens``]: integers
    >= 1 (output is ``max_tokens``, EOS ignored).
  - optional ``priority`` [``priority``]: an integer, lower runs first
    (vLLM's ``priority``); it matters under policy ``priority`` or victim
    ``priority`` only.
  - optional ``prefix_group`` [``prefix_group``] and ``prefix_len``
    [``prefix_len``], both or neither: request i shares its first
    ``min(prefix_len, prompt)`` tokens with the other requests of its group
    (prefix caching; see ``Workload``). A blank group or -1 means no group; a
    blank length means 0.

  ``columns`` (``--trace-columns arrival=ts,prompt=prompt_tokens``, or
  ``columns = { arrival = "ts" }`` under a spec's ``[workload]``) maps keys to
  other names. Other columns in the file are ignored and reported
  (``TraceRead.ignored``).

``TraceOptions`` then applies, in order: a time window (``start_s``,
``duration_s``, relative to the first request), a rate scale (arrivals divided
by it: 2 replays twice as fast) and a request cap. Lengths stay as the trace
asks: the kernel applies vLLM's front-end rules at each configuration's
max_model_len (``front_end.front_end_rejects``) and the metrics count the
requests it rejects or cuts short.

Every problem in a file is a ``WorkloadError`` naming the file, the row (1-based
line number, header = 1) and the problem.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from planner import bounds
from planner.inputs import check_readable
from planner.workload.arrays import MAX_ARRIVAL_S, MAX_TOKENS, Workload, WorkloadError

DATA_DIR = Path(__file__).parents[1] / "data"
AZURE_CONV = DATA_DIR / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = DATA_DIR / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv"
MOONCAKE_CONV = DATA_DIR / "mooncake-fast25" / "conversation_trace.jsonl"
FORMATS = ("auto", "azure", "csv", "jsonl", "mooncake")
# The Mooncake FAST'25 traces (planner/data/mooncake-fast25/README.md): JSONL,
# timestamp in ms, one hash id per 512-token prompt block.
MOONCAKE_COLUMNS = ("timestamp", "input_length", "output_length", "hash_ids")
MOONCAKE_HASH_BLOCK = 512
MAX_HASH_ID = 2**62  # |id| bound: ids are int64 in the kernel's keys
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True)
class TraceOptions:
    """How to cut and replay a trace. Raises WorkloadError on values outside
    their bounds (``planner.bounds.OPTION_BOUNDS``, named as the CLI flags)."""

    start_s: float = 0.0
    duration_s: float = math.inf
    rate_scale: float = 1.0
    max_requests: int | None = None
    hash_block_size: int | None = None  # tokens per hash id of a hash_ids column

    def __post_init__(self) -> None:
        checks = (
            ("trace_start", self.start_s),
            ("trace_duration", self.duration_s),
            ("rate_scale", self.rate_scale),
            ("max_requests", self.max_requests),
            ("trace_hash_block_size", self.hash_block_size),
        )
        try:  # planner.bounds: seconds within int64 ns, int32 counts
            for name, v in checks:
                if v is not None:
                    bounds.check_option(name, v)
        except ValueError as e:
            raise WorkloadError(str(e)) from None


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


def _numbers(
    path: Path,
    df: pd.DataFrame,
    col: str,
    lo: float,
    hi: float,
    integer: bool,
    blank: float | None,
    unit: str = "seconds",
) -> np.ndarray:
    """Column ``col`` as float64 numbers in ``lo..hi`` (integers if
    ``integer``; else in ``unit``, as the error message says).

    Blank cells (empty text, JSON null) take ``blank``, or are an error when it
    is None. Raises WorkloadError naming the first bad row (``df.index``: the
    file's row, ``load_trace``).
    """
    raw = df[col]
    text = raw.astype(str).str.strip()
    empty = raw.isna() | text.isin(("", "None", "nan"))
    v = pd.to_numeric(text, errors="coerce").astype(np.float64)
    if blank is not None:
        v = v.mask(empty, blank)
    bad = v.isna() | ~np.isfinite(v) | (v < lo) | (v > hi)
    if integer:
        bad |= v != np.floor(v)
    if bad.any():
        row = int(np.argmax(bad.to_numpy()))
        want = f"an integer in {lo:,.0f}..{hi:,.0f}" if integer else f"{unit} in {lo:g}..{hi:g}"
        raise WorkloadError(
            f"{path}: row {raw.index[row]}: bad {col} value {str(raw.iloc[row])!r} (want {want})"
        )
    return v.to_numpy()


def _arrival_seconds(path: Path, df: pd.DataFrame, col: str) -> np.ndarray:
    """Column ``col`` as seconds from the start (float64, ``_numbers``). A
    column of date-times mapped as ``arrival`` is refused with the mapping
    that reads it: ``timestamp=col``."""
    try:
        return _numbers(path, df, col, 0, MAX_ARRIVAL_S, integer=False, blank=None)
    except WorkloadError as e:
        first = str(df[col].iloc[0]).strip()
        if _is_number(first) or not _is_datetime(first):
            raise
        raise WorkloadError(f"{e}; it holds date-times: map it with timestamp={col}") from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_datetime(text: str) -> bool:
    try:
        pd.Timestamp(text)
    except (ValueError, TypeError):
        return False
    return True


def _require_dates(path: Path, raw: pd.Series, col: str) -> None:
    """Refuse timestamps without a full date (``18:15:50``, ``11-16 18:15``):
    pandas would fill in today's date or year, silently.

    Each distinct shape of text (digits replaced by ``0``) is parsed once with
    two different default dates (dateutil, the parser behind pandas' mixed
    format); if the results differ, the text lacks a day, month or year.
    Raises WorkloadError naming the file, the first such row and the column.
    """
    from datetime import datetime

    from dateutil import parser

    shapes = raw.reset_index(drop=True).str.replace(r"\d", "0", regex=True)
    for row in shapes.drop_duplicates().index:  # positions: the index is 0..n-1
        text = str(raw.iloc[int(row)])
        try:
            a = parser.parse(text, default=datetime(2000, 1, 1))
            b = parser.parse(text, default=datetime(2004, 2, 3))
        except (ValueError, OverflowError):
            continue  # pandas read it (ISO forms dateutil may not); they carry a date
        if a.date() != b.date():
            raise WorkloadError(
                f"{path}: row {raw.index[int(row)]}: {col} value {text!r} has no full date "
                "(day, month and year); give dates, or seconds in an arrival column"
            )


def _timestamps(path: Path, df: pd.DataFrame, col: str) -> np.ndarray:
    """Datetime text or epoch seconds -> seconds since the first row."""
    raw = df[col].astype(str).str.strip()
    as_num = pd.to_numeric(raw, errors="coerce")
    if as_num.notna().all():
        t = as_num.to_numpy(dtype=np.float64)
    else:
        try:
            ts = pd.to_datetime(raw, errors="coerce", format="mixed")
        except ValueError as e:  # e.g. mixed time zones: pandas names neither file nor row
            raise WorkloadError(
                f"{path}: column {col}: timestamps pandas cannot read together ({e}); give "
                "one time zone, or seconds in an arrival column"
            ) from None
        if ts.isna().any():
            row = int(np.argmax(ts.isna().to_numpy()))
            raise WorkloadError(f"{path}: row {raw.index[row]}: bad {col} value {raw.iloc[row]!r}")
        _require_dates(path, raw, col)
        t = (ts - ts.iloc[0]).dt.total_seconds().to_numpy()
    if not np.all(np.isfinite(t)):
        row = int(np.argmax(~np.isfinite(t)))
        raise WorkloadError(f"{path}: row {raw.index[row]}: bad {col} value {raw.iloc[row]!r}")
    return t - t[0]


# Column keys -> default names (module docstring). The Azure format renames
# the time, prompt and output columns (AZURE_COLUMNS).
DEFAULT_COLUMNS: dict[str, str] = {
    "arrival": "arrival_time_s",
    "timestamp": "timestamp",
    "prompt": "prompt_tokens",
    "output": "output_tokens",
    "priority": "priority",
    "prefix_group": "prefix_group",
    "prefix_len": "prefix_len",
    "hash_ids": "hash_ids",
}
_AZURE_NAMES = dict(zip(("timestamp", "prompt", "output"), AZURE_COLUMNS, strict=True))
_MOONCAKE_NAMES = dict(
    zip(("timestamp", "prompt", "output", "hash_ids"), MOONCAKE_COLUMNS, strict=True)
)
_ACCEPTED = (
    "arrival={arrival} or timestamp={timestamp}, prompt={prompt}, output={output}, "
    "optional priority={priority}, prefix_group={prefix_group} with prefix_len={prefix_len}, "
    "hash_ids={hash_ids}"
)  # .format(**names): the column names of the format being read
MAX_PRIORITY = 2**31 - 1  # |priority| bound: exact in float64, far beyond any real use


def check_columns(columns: Mapping[str, str], label: str = "trace columns") -> dict[str, str]:
    """Validate a column map (key -> column name in the file; keys in DEFAULT_COLUMNS).

    Raises WorkloadError, prefixed with ``label`` (the option or spec key), on
    an unknown key, an empty name, a name given to two keys, or both
    ``arrival`` and ``timestamp`` (the time comes from one).
    """
    out: dict[str, str] = {}
    for key, name in columns.items():
        if key not in DEFAULT_COLUMNS:
            raise WorkloadError(
                f"{label}: unknown key {key!r} (keys: {', '.join(DEFAULT_COLUMNS)})"
            )
        if not isinstance(name, str) or not name.strip():
            raise WorkloadError(f"{label}: {key} needs a column name, got {name!r}")
        twice = [k for k, v in out.items() if v == name.strip()]
        if twice:
            raise WorkloadError(
                f"{label}: column {name.strip()!r} is mapped twice ({twice[0]} and {key})"
            )
        out[key] = name.strip()
    if "arrival" in out and "timestamp" in out:
        raise WorkloadError(
            f"{label}: give arrival (seconds from the start) or timestamp, not both"
        )
    return out


def parse_columns(text: str | None) -> dict[str, str]:
    """``--trace-columns`` text ``key=name,key=name`` -> a checked column map.

    None gives {}. Raises WorkloadError on a malformed item, a key given twice,
    or anything ``check_columns`` refuses.
    """
    if text is None:
        return {}
    out: dict[str, str] = {}
    for item in text.split(","):
        key, eq, name = (x.strip() for x in item.partition("="))
        if not eq or not key:
            raise WorkloadError(
                f"--trace-columns: expected key=column[,key=column...], got {item.strip()!r} "
                f"(keys: {', '.join(DEFAULT_COLUMNS)})"
            )
        if key in out:
            raise WorkloadError(f"--trace-columns: key {key!r} is given twice")
        out[key] = name
    return check_columns(out, "--trace-columns")


def _resolve_columns(
    path: Path, found: list[str], fmt: str, columns: dict[str, str]
) -> dict[str, str]:
    """Key -> the file's column to read, for the keys this file provides.

    Required keys (a time key, prompt, output) and any key the user mapped must
    be present; optional keys at their default names are read when present.
    """
    renamed = _AZURE_NAMES if fmt == "azure" else _MOONCAKE_NAMES if fmt == "mooncake" else {}
    names = {**DEFAULT_COLUMNS, **renamed, **columns}
    if "arrival" in columns or "timestamp" in columns:
        time_key = "arrival" if "arrival" in columns else "timestamp"
    else:
        time_key = "arrival" if names["arrival"] in found else "timestamp"
    use = {}
    for key in (time_key, "prompt", "output", "priority", "prefix_group", "prefix_len", "hash_ids"):
        required = key in (time_key, "prompt", "output") or key in columns
        if names[key] in found:
            use[key] = names[key]
        elif required:
            if key == time_key and not columns.keys() & {"arrival", "timestamp"}:
                what = f"missing column {names['arrival']!r} or {names['timestamp']!r}"
                hint = "arrival=NAME or timestamp=NAME"
            else:
                what, hint = f"missing column {names[key]!r}", f"{key}=NAME"
            raise WorkloadError(
                f"{path}: {what} (map yours with {hint}); columns found: "
                f"{', '.join(found) or 'none'}; accepted: {_ACCEPTED.format(**names)}"
            )
    for key, col in use.items():
        other = next((k for k, c in use.items() if c == col and k != key), None)
        if other is not None:
            mapped = key if key in columns else other
            kept = other if mapped == key else key
            raise WorkloadError(
                f"{path}: column {col!r} would be read as both {mapped} (mapped) and {kept} "
                f"(its default name); map {kept}=NAME too"
            )
    if ("prefix_group" in use) != ("prefix_len" in use):
        have, lack = ("prefix_group", "prefix_len")[:: 1 if "prefix_group" in use else -1]
        raise WorkloadError(f"{path}: column {use[have]!r} ({have}) needs a {lack} column too")
    return use


def _check_shape(path: Path, df: pd.DataFrame, load_fmt: str) -> None:
    """Say what is wrong with a file that has no usable columns at all."""
    if len(df.columns) == 0:
        raise WorkloadError(f"{path}: the file is empty (no JSON lines)")
    if load_fmt == "csv" and len(df.columns) == 1:
        head = str(df.columns[0])
        for sep, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "bars")):
            if sep in head:
                raise WorkloadError(
                    f"{path}: the header is one column {head!r}: the file is separated by "
                    f"{name}, planner reads comma-separated CSV"
                )


@dataclass(frozen=True)
class TraceRead:
    """A trace read into a workload, and the columns of the file it did not use.

    ``columns``: key -> the file's column read for it; ``ignored``: the file's
    other columns, in file order.
    """

    workload: Workload
    columns: dict[str, str]
    ignored: tuple[str, ...]

    def warning(self) -> str:
        """One line naming the ignored columns (without the ``plan: warning:``
        prefix), or '' when every column was used."""
        if not self.ignored:
            return ""
        return (
            f"{self.workload.name}: ignored column(s) {', '.join(self.ignored)} "
            f"(read: {', '.join(f'{k}={v}' for k, v in self.columns.items())}; "
            f"keys that map a column: {', '.join(DEFAULT_COLUMNS)})"
        )


def load_trace(
    path: str | Path,
    fmt: str = "auto",
    options: TraceOptions = TraceOptions(),
    columns: Mapping[str, str] | None = None,
) -> TraceRead:
    """Read a trace file into a ``Workload`` (see the module docstring).

    ``fmt = "auto"`` picks ``azure`` when the Azure columns are present,
    ``jsonl`` for ``.jsonl``/``.json`` files, else ``csv``. ``columns`` maps
    keys (DEFAULT_COLUMNS) to the file's names. Rows must be in arrival order.
    Raises WorkloadError (one line) on any problem.
    """
    path = Path(path)
    if fmt not in FORMATS:
        raise WorkloadError(f"--trace-format must be one of {FORMATS}, got {fmt!r}")
    mapping = check_columns(columns or {})
    load_fmt = (
        "jsonl"
        if fmt in ("jsonl", "mooncake") or (fmt == "auto" and path.suffix in (".jsonl", ".json"))
        else "csv"
    )
    try:
        check_readable(path, "trace")
    except ValueError as e:
        raise WorkloadError(str(e)) from None
    df = _load(path, load_fmt)
    df.columns = [str(c) for c in df.columns]
    # Index = the file's row number that errors name: a JSONL line, a CSV row
    # counting the header as row 1.
    df.index = np.arange(len(df)) + (1 if load_fmt == "jsonl" else 2)
    _check_shape(path, df, load_fmt)
    if fmt == "auto":
        fmt = "azure" if all(c in df.columns for c in AZURE_COLUMNS) else load_fmt
        if load_fmt == "jsonl" and all(c in df.columns for c in MOONCAKE_COLUMNS):
            fmt = "mooncake"
    use = _resolve_columns(path, list(df.columns), fmt, mapping)
    if len(df) == 0:
        raise WorkloadError(f"{path}: no requests")
    if "arrival" in use:  # already seconds from the start
        t = _arrival_seconds(path, df, use["arrival"])
    elif fmt == "mooncake" and "timestamp" not in mapping:  # milliseconds from the start
        ms = MAX_ARRIVAL_S * 1e3
        t = _numbers(path, df, use["timestamp"], 0, ms, False, None, "milliseconds") / 1e3
    else:
        t = _timestamps(path, df, use["timestamp"])
    back = np.flatnonzero(np.diff(t) < 0)
    if len(back):
        time_col = use.get("arrival", use.get("timestamp"))
        raise WorkloadError(f"{path}: row {df.index[back[0] + 1]}: {time_col} goes backwards")
    arrays = {
        key: _numbers(path, df, use[key], lo, hi, integer=True, blank=blank)
        for key, lo, hi, blank in (
            ("prompt", 1, MAX_TOKENS, None),
            ("output", 1, MAX_TOKENS, None),
            ("priority", -MAX_PRIORITY, MAX_PRIORITY, None),
            ("prefix_group", -1, MAX_TOKENS, -1),
            ("prefix_len", 0, MAX_TOKENS, 0),
        )
        if key in use
    }
    options = _hash_block_size(path, fmt, "hash_ids" in use, options)
    if "hash_ids" in use:
        arrays["hash_ids"] = _hash_lists(path, df, use["hash_ids"])
    ignored = tuple(c for c in df.columns if c not in use.values())
    wl = _apply_options(path, t, arrays, options)
    return TraceRead(wl, use, ignored)


def _hash_block_size(path: Path, fmt: str, has_ids: bool, o: TraceOptions) -> TraceOptions:
    """The trace's tokens per hash id: 512 for ``mooncake`` (its README), else
    ``--trace-hash-block-size``, which a hash_ids column needs and only it
    uses. Raises WorkloadError naming the option otherwise."""
    given = o.hash_block_size
    if fmt == "mooncake":
        if given is not None and given != MOONCAKE_HASH_BLOCK:
            raise WorkloadError(
                f"--trace-hash-block-size {given}: the mooncake format's hash blocks are "
                f"{MOONCAKE_HASH_BLOCK} tokens"
            )
        return replace(o, hash_block_size=MOONCAKE_HASH_BLOCK) if has_ids else o
    if has_ids and given is None:
        raise WorkloadError(
            f"{path}: the hash_ids column needs --trace-hash-block-size (tokens per hash id; "
            "in a spec, workload.hash_block_size)"
        )
    if given is not None and not has_ids:
        raise WorkloadError(
            f"--trace-hash-block-size has no effect: {path} has no hash_ids column "
            "(map one with hash_ids=NAME)"
        )
    return o


# A hash-id list as text: integers separated by commas, semicolons or spaces
# (no empty items), optionally in one pair of brackets.
_HASH_TEXT = re.compile(
    r"\s*(?P<open>\[)?\s*(?P<ids>-?\d+((\s*[,;]\s*|\s+)-?\d+)*)?\s*(?(open)\])\s*"
)


def _hash_text(v: str) -> list[int] | None:
    """A hash-id list written as text (``_HASH_TEXT``), or None if it is not one."""
    m = _HASH_TEXT.fullmatch(v)
    if m is None:
        return None
    return [int(x) for x in re.split(r"[\s,;]+", m["ids"])] if m["ids"] else []


def _hash_lists(path: Path, df: pd.DataFrame, col: str) -> np.ndarray:
    """Column ``col`` as one list of integer hash ids per row: JSON arrays in
    JSONL, or text (``[1, 2]``, ``1 2`` or ``1;2``: integers separated by
    commas, semicolons or spaces, in at most one pair of brackets). Returns
    an (R,) object array of int64 arrays. Raises WorkloadError naming the
    first bad row."""
    out = np.empty(len(df), dtype=object)
    for i, v in enumerate(df[col].tolist()):
        if isinstance(v, str):
            v = _hash_text(v)
        ok = isinstance(v, list) and all(
            isinstance(x, int) and not isinstance(x, bool) and abs(x) <= MAX_HASH_ID for x in v
        )
        if not ok:
            raise WorkloadError(
                f"{path}: row {df.index[i]}: bad {col} value {str(df[col].iloc[i])[:60]!r} "
                f"(want a list of integers, |id| <= 2**62)"
            )
        out[i] = np.array(v, dtype=np.int64)
    return out


def read_trace(
    path: str | Path,
    fmt: str = "auto",
    options: TraceOptions = TraceOptions(),
    columns: Mapping[str, str] | None = None,
) -> Workload:
    """``load_trace(...).workload``: the workload alone, for callers that do
    not report ignored columns."""
    return load_trace(path, fmt, options, columns).workload


def _apply_options(
    path: Path, t: np.ndarray, arrays: dict[str, np.ndarray], o: TraceOptions
) -> Workload:
    """Window, rate scale and request cap (module docstring) applied to the
    times ``t`` and the per-request ``arrays`` (key -> values, as read)."""
    keep = (t >= o.start_s) & (t < o.start_s + o.duration_s)
    if not keep.any():
        raise WorkloadError(f"{path}: no request in the window {o.start_s:g}..+{o.duration_s:g} s")
    cut = slice(None, o.max_requests)
    t = (t[keep] - o.start_s)[cut] / o.rate_scale
    a = {k: v[keep][cut] for k, v in arrays.items()}
    prompt, output = a["prompt"], a["output"]

    def opt(key: str) -> np.ndarray | None:
        return a[key].astype(np.int32) if key in a else None

    hashes: dict = {}
    if "hash_ids" in a:
        lists = a["hash_ids"]
        sizes = np.array([len(x) for x in lists], dtype=np.int64)
        hashes = dict(
            hash_ids=np.concatenate([*lists, np.zeros(0, np.int64)]).astype(np.int64),
            hash_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            hash_block_size=int(o.hash_block_size or 0),
        )
    return Workload(
        t.astype(np.float64),
        prompt.astype(np.int32),
        output.astype(np.int32),
        name=path.name,
        priority=None if "priority" not in a else a["priority"].astype(np.int64),
        prefix_group=opt("prefix_group"),
        prefix_len=opt("prefix_len"),
        **hashes,
    )


def s1_exact() -> Workload:
    """The fixed S1 draw shipped with the package (``planner/data/s1_seed7.csv``):
    300 requests, scenario S1-exact of ``shared/docs/scenarios.md``."""
    return read_trace(Path(__file__).parents[1] / "data" / "s1_seed7.csv")
