"""Fit a step-time model to measured step times (``plan calibrate``).

Input: a CSV with one row per engine step and the columns of ``COLUMNS``:
prefill tokens, decode requests, the decode requests' summed KV tokens (their
new token included) and the step's wall time in ms (for vLLM, e.g. from
``--collect-detailed-traces`` or forward-pass metrics). Each row is read as one
fresh prefill chunk (no computed tokens before it) plus the decodes, so the
roofline's (query, key) pairs are P (P + 1) / 2 + KV and its KV tokens P + KV
(``latency.RooflineLatency``), the measured table's inputs alike.

Fits, all least squares on the step time:

- linear: beta0 + beta1 P + beta2 D, coefficients >= 0 (every subset of
  coefficients solved with ``numpy.linalg.lstsq``, the best non-negative kept:
  exact non-negative least squares for three unknowns);
- roofline: MFU and MBU on a 0.01 grid over (0, 1], the overhead
  (>= 0) closed-form for each pair;
- measured: one factor on the aiconfigurator table (``--measured-scale``),
  closed form sum(y t) / sum(t^2).

Request-level calibration (TTFT/TPOT per request of a benchmark) is
``planner.answers.calibrate``.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.latency.step_time import (
    MEASURED,
    ROOFLINE,
    SW_KV,
    SW_PAIR,
    LinearLatency,
    MeasuredLatency,
    RooflineLatency,
    allreduce_step_s,
    hardware_options,
    step_time_ns,
)
from planner.text import count

COLUMNS = ("prefill_tokens", "decode_requests", "kv_tokens", "step_ms")
GRID_STEP = 0.01  # roofline efficiency grid


class CalibrationError(ValueError):
    """A CSV the fit cannot use; one line."""


@dataclass(frozen=True)
class Fit:
    """Fitted coefficients as command-line options, and the fit error over
    ``n`` steps: RMS (ms), mean and max |relative error|."""

    options: str
    n: int
    rms_ms: float
    mean_rel: float
    max_rel: float

    def describe(self) -> str:
        return (
            f"fit error over {self.n:,} steps: RMS {self.rms_ms:.3g} ms, "
            f"mean |relative| {self.mean_rel:.1%}, max |relative| {self.max_rel:.1%}"
        )


# Bounds on a step row: token counts are int32 in the kernel; a step is at
# least 1 ns (the clock's unit) and at most an hour.
MAX_TOKENS = 2**31 - 1
MAX_STEP_MS = 3.6e6
MIN_STEP_MS = 1e-6
MIN_ROWS = 4  # more rows than coefficients, so the fit error means something


def read_steps(path: Path) -> dict[str, np.ndarray]:
    """The CSV's ``COLUMNS`` as float64 arrays of shape (N,). Raises
    CalibrationError (one line) for a missing file or column, a non-numeric,
    negative or non-finite value, no rows, or a step time of 0."""
    import pandas as pd

    try:
        # index_col=False: a row with more fields than the header is an error,
        # not a silent shift of every column (pandas' default index guess).
        with warnings.catch_warnings():  # a row longer than the header: an error
            warnings.simplefilter("error", pd.errors.ParserWarning)
            df = pd.read_csv(path, index_col=False)
    except FileNotFoundError:
        raise CalibrationError(f"{path}: no such file") from None
    except (
        pd.errors.EmptyDataError,
        pd.errors.ParserError,
        UnicodeDecodeError,
        IsADirectoryError,
        ValueError,
        pd.errors.ParserWarning,
    ) as e:
        raise CalibrationError(
            f"{path}: not a CSV with columns {', '.join(COLUMNS)} ({str(e).strip()})"
        ) from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        hint = ""
        if str(df.columns[0]).lstrip().startswith("{"):
            hint = "; it looks like JSON: name a vllm bench serve result *.json"
        raise CalibrationError(
            f"{path}: missing column {', '.join(missing)} (needs {', '.join(COLUMNS)}){hint}"
        )
    if len(df) == 0:
        raise CalibrationError(f"{path}: no rows")
    out = {}
    for c in COLUMNS:
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64)
        top = MAX_STEP_MS if c == "step_ms" else MAX_TOKENS
        integral = c != "step_ms"
        bad = np.flatnonzero(
            ~np.isfinite(v) | (v < 0) | (v > top) | (integral & (v != np.round(v)))
        )
        if bad.size:
            what = "an integer" if integral else "a number of ms"
            cell = df[c].iloc[bad[0]]  # row: the file's, the header being row 1 (as traces)
            shown = "a blank cell" if pd.isna(cell) else repr(str(cell))
            raise CalibrationError(
                f"{path}: column {c}, row {int(bad[0]) + 2}: {shown} is not {what} in 0..{top:,.0f}"
            )
        out[c] = v
    if np.any(out["step_ms"] < MIN_STEP_MS):
        raise CalibrationError(
            f"{path}: column step_ms: every step takes at least {MIN_STEP_MS:g} ms (1 ns)"
        )
    if np.any(out["step_ms"] <= 0):
        raise CalibrationError(f"{path}: column step_ms: every step takes time (> 0 ms)")
    if np.any(out["prefill_tokens"] + out["decode_requests"] <= 0):
        raise CalibrationError(f"{path}: a row with no prefill tokens and no decode requests")
    if len(df) < MIN_ROWS:
        raise CalibrationError(
            f"{path}: {count(len(df), 'row')}; a fit of up to 3 coefficients needs at least "
            f"{MIN_ROWS}"
        )
    return out


def _error(pred_ms: np.ndarray, y_ms: np.ndarray) -> tuple[float, float, float]:
    rel = np.abs(pred_ms / y_ms - 1.0)
    return float(np.sqrt(np.mean((pred_ms - y_ms) ** 2))), float(rel.mean()), float(rel.max())


def fit_linear(steps: dict[str, np.ndarray]) -> tuple[Fit, LinearLatency]:
    """beta0 + beta1 P + beta2 D (us) by non-negative least squares."""
    x = np.column_stack(
        [np.ones_like(steps["step_ms"]), steps["prefill_tokens"], steps["decode_requests"]]
    )
    y = steps["step_ms"] * 1000.0  # us
    best, best_res = None, np.inf
    for k in range(1, 4):
        for cols in itertools.combinations(range(3), k):
            sol = np.linalg.lstsq(x[:, cols], y, rcond=None)[0]
            if np.any(sol < 0):
                continue
            beta = np.zeros(3)
            beta[list(cols)] = sol
            res = float(np.sum((x @ beta - y) ** 2))
            if res < best_res:
                best, best_res = beta, res
    if best is None or best[0] + best[1] <= 0 or best[0] + best[2] <= 0:
        raise CalibrationError("the linear fit gives a step that takes no time; more varied steps")
    b = tuple(round(float(v), 4) for v in best)
    lat = LinearLatency((0.0, 0.0, 0.0), b)  # type: ignore[arg-type]
    rms, mean, mx = _error((x @ np.array(b)) / 1000.0, steps["step_ms"])
    opts = f"--latency linear --beta-coeffs {b[0]:g},{b[1]:g},{b[2]:g}"
    return Fit(opts, len(y), rms, mean, mx), lat


def _inputs(steps: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    p = steps["prefill_tokens"].astype(np.int64)
    d = steps["decode_requests"].astype(np.int64)
    kv = steps["kv_tokens"].astype(np.int64)
    return p, d, p * (p + 1) // 2 + kv, p + kv


def fit_roofline(
    steps: dict[str, np.ndarray], base: RooflineLatency
) -> tuple[Fit, RooflineLatency]:
    """MFU, MBU (grid) and overhead (closed form) of ``base``'s model, GPU,
    tensor parallelism, quantization and KV cache dtype."""
    unit = dataclasses.replace(base, mfu=1.0, mbu=1.0)
    fp = np.array(unit.floats(), dtype=np.float64)
    f0, f1, w, kvb, peak, bw, comm, experts, idle = fp[:9]
    # A steps file gives whole-context sums only: a hybrid's sliding layers are
    # priced on them too (an upper bound), as ``_ms`` prices them.
    f1, kvb = f1 + fp[SW_PAIR], kvb + fp[SW_KV]
    p, d, att, kv = (a.astype(np.float64) for a in _inputs(steps))
    t_c = (f0 * (p + d) + f1 * att) / peak * 1e6  # us at MFU 1
    touched = 1.0 - np.exp(idle * (p + d))  # routed experts a step reads (RooflineLatency)
    t_m = (w + experts * touched + kvb * kv) / bw * 1e6  # us at MBU 1
    measured_ar = np.array([allreduce_step_s(fp, int(n)) for n in p + d])
    t_ar = (comm * (p + d) + measured_ar) * 1e6  # all-reduce us, outside the max
    y = steps["step_ms"] * 1000.0
    _check_physical(y / (np.maximum(t_c, t_m) + t_ar), "the roofline at MFU 1 and MBU 1")
    grid = np.arange(1, int(round(1 / GRID_STEP)) + 1) * GRID_STEP
    best = (np.inf, 1.0, 1.0, 0.0)
    for mfu in grid:
        c = t_c / mfu
        for mbu in grid:
            t = np.maximum(c, t_m / mbu) + t_ar
            oh = max(float(np.mean(y - t)), 0.0)
            res = float(np.sum((t + oh - y) ** 2))
            if res < best[0]:
                best = (res, float(mfu), float(mbu), oh)
    _, mfu, mbu, oh = best
    oh = round(oh, 1)
    lat = dataclasses.replace(base, mfu=mfu, mbu=mbu, overhead_us=oh)
    pred = np.array([_ms(lat, *row) for row in zip(*_inputs(steps), strict=True)])
    rms, mean, mx = _error(pred, steps["step_ms"])
    opts = f"--latency roofline --mfu {mfu:.2f} --mbu {mbu:.2f} --step-overhead-us {oh:g} "
    opts += hardware_options(lat)
    return Fit(opts, len(y), rms, mean, mx), lat


# Steps measured faster than this share of the fastest the hardware allows are
# no measurement of it: at most 2x faster than the peak-rate roofline (whose
# FLOP and byte counts are approximate), however good the kernels.
MIN_PHYSICAL = 0.5


def _check_physical(ratio: np.ndarray, fastest: str) -> None:
    """Refuse steps whose median measured / fastest-possible time ``ratio``
    is below MIN_PHYSICAL: the implied MFU or MBU (or table speed-up) is
    beyond the hardware, most often step_ms given in seconds. Raises
    CalibrationError (one line)."""
    med = float(np.median(ratio))
    if med >= MIN_PHYSICAL:
        return
    hint = (
        "; step_ms looks like seconds: multiply it by 1,000"
        if med * 1000 >= MIN_PHYSICAL
        else "; check step_ms is in ms and the model, GPU and tensor parallelism"
    )
    raise CalibrationError(
        f"column step_ms: the median step takes {med:.2g}x the time of {fastest}, faster "
        f"than the hardware allows{hint}"
    )


def _ms(lat: RooflineLatency | MeasuredLatency, p: int, d: int, att: int, kv: int) -> float:
    kind = MEASURED if isinstance(lat, MeasuredLatency) else ROOFLINE
    tab = lat.table if isinstance(lat, MeasuredLatency) else np.zeros(4)
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    fp = np.array(lat.floats(), dtype=np.float64)
    return step_time_ns(kind, ip, fp, p, d, att, kv, tab, att, kv) / 1e6


def fit_measured(
    steps: dict[str, np.ndarray], base: MeasuredLatency
) -> tuple[Fit, MeasuredLatency]:
    """The factor on ``base``'s table (its overhead kept) that best fits the steps."""

    unit = dataclasses.replace(base, scale=1.0)
    rows = list(zip(*_inputs(steps), strict=True))
    oh = base.overhead_us / 1000.0
    t = np.array([_ms(unit, *r) for r in rows]) - oh
    y = steps["step_ms"] - oh
    scale = round(float(np.sum(y * t) / np.sum(t * t)), 4)
    _check_physical(np.array([scale]), "the aiconfigurator table's kernels")
    lat = dataclasses.replace(base, scale=scale)
    pred = np.array([_ms(lat, *r) for r in rows])
    rms, mean, mx = _error(pred, steps["step_ms"])
    opts = f"--latency measured --measured-scale {scale:g} {hardware_options(lat)}"
    return Fit(opts, len(y), rms, mean, mx), lat
