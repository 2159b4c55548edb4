"""GPU prices for sizing: a shipped, editable table (``data/gpu_prices.csv``,
whose header names the public price list and the date of every default) or
the user's own file with the same columns (``gpu``, ``usd_per_gpu_hour``,
``source``; ``#`` lines are comments)."""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

DEFAULT_PRICES = "gpu_prices.csv"
COLUMNS = ("gpu", "usd_per_gpu_hour", "source")
MAX_PRICE = 1e6  # US dollars per GPU-hour: far above any list price, keeps costs finite


class PriceError(ValueError):
    """A price table that cannot be used; the message is one line naming the file."""


@dataclass(frozen=True)
class PriceTable:
    """US dollars per GPU per hour by canonical GPU name (``hardware.GPUS``),
    with each price's source and the file they came from (``label``)."""

    label: str
    usd_per_gpu_hour: dict[str, float]
    sources: dict[str, str]

    def price(self, gpu: str) -> float:
        """The hourly price of one ``gpu`` (a canonical name). Raises PriceError."""
        if gpu not in self.usd_per_gpu_hour:
            raise PriceError(
                f"--prices: {self.label} has no price for {gpu}; add a row "
                f"'{gpu},<US dollars per GPU-hour>,<source>' or leave {gpu} out of --gpus"
            )
        return self.usd_per_gpu_hour[gpu]


def load(path: Path | None = None) -> PriceTable:
    """Read a price table: ``path``, or the shipped default when None.

    Raises PriceError (one line) for an unreadable file, missing columns, an
    unknown GPU, a duplicate row or a price that is not a positive number."""
    import pandas as pd

    from planner.models.hardware import HardwareError, gpu

    if path is None:
        ref = resources.files("planner") / "data" / DEFAULT_PRICES
        label, source = f"planner/data/{DEFAULT_PRICES}", ref
    else:
        label, source = str(path), path
    try:
        with resources.as_file(source) if path is None else contextlib.nullcontext(path) as f:
            text = Path(f).read_text()
        _check_fields(text, label)
        # index_col=False: a row with more fields than the header is an error,
        # not a shift of every field into the next column (pandas' index guess).
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            df = pd.read_csv(
                io.StringIO(text), comment="#", dtype=str, skipinitialspace=True, index_col=False
            )
    except (
        OSError,
        UnicodeDecodeError,
        pd.errors.ParserError,
        pd.errors.EmptyDataError,
        pd.errors.ParserWarning,
    ) as e:
        reason = getattr(e, "strerror", None) or " ".join(str(e).split())
        raise PriceError(f"--prices {label}: cannot read it ({reason})") from None
    missing = [c for c in COLUMNS[:2] if c not in df.columns]
    if missing:
        raise PriceError(f"--prices {label}: missing column(s) {', '.join(missing)}")
    extra = [c for c in df.columns if c not in COLUMNS]
    if extra:
        raise PriceError(
            f"--prices {label}: unknown column(s) {', '.join(map(str, extra))} "
            f"(columns: {', '.join(COLUMNS)})"
        )
    prices: dict[str, float] = {}
    sources: dict[str, str] = {}
    lines = _data_lines(text)
    for row, i in zip(df.itertuples(index=False), lines[1:], strict=False):
        name = str(row.gpu).strip()
        try:
            canon = gpu(name).name
        except HardwareError as e:
            why = str(e).removeprefix("--gpu: ")
            raise PriceError(f"--prices {label}: row {i}: {why}") from None
        value = _number(row.usd_per_gpu_hour)
        if not (math.isfinite(value) and 0 < value <= MAX_PRICE):
            raise PriceError(
                f"--prices {label}: row {i} ({name}): usd_per_gpu_hour must be a number > 0 "
                f"and <= {MAX_PRICE:,.0f}, got {row.usd_per_gpu_hour!r}"
            )
        if canon in prices:
            raise PriceError(f"--prices {label}: {canon} is listed twice")
        prices[canon] = value
        src = getattr(row, "source", "")
        sources[canon] = "" if not isinstance(src, str) else src
    if not prices:
        raise PriceError(f"--prices {label}: no rows")
    return PriceTable(label, prices, sources)


def _check_fields(text: str, label: str) -> None:
    """Every row has as many fields as the header (``csv`` module, comments
    and blank lines skipped as pandas skips them): a longer row would shift
    its fields, a shorter one would leave one silently blank. Raises
    PriceError naming the line."""
    import csv

    lines = text.splitlines()
    numbers = _data_lines(text)
    rows = csv.reader(lines[n - 1].split("#")[0] for n in numbers)
    width = None
    for n, row in zip(numbers, rows, strict=True):
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise PriceError(
                f"--prices {label}: line {n}: {len(row)} fields, the header has {width}"
            )


def _data_lines(text: str) -> list[int]:
    """1-based line numbers of the lines pandas reads (not blank, not a
    ``#`` comment): the header's first, then each row's, so an error names a
    row as a trace error does (the file's line, header = 1)."""
    return [n for n, line in enumerate(text.splitlines(), 1) if line.split("#")[0].strip()]


def _number(text: object) -> float:
    try:
        return float(str(text))
    except ValueError:
        return math.nan
