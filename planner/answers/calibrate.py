"""Fit a step-time model to request-level benchmark results (``plan calibrate RESULT.json``).

Input: the JSON that ``vllm bench serve --save-result --save-detailed`` writes
(``vllm/benchmarks/serve.py``, ``benchmark``'s result dict). Per request it
holds ``start_times`` (the client's send time, ``time.perf_counter()`` seconds),
``input_lens`` and ``output_lens`` (tokens), ``ttfts`` (seconds) and ``itls``
(the gaps between streamed chunks, seconds), and ``errors`` ("" when the request
succeeded). A request's TPOT is sum(itls) / (output_len - 1), which is vLLM
bench's (latency - ttft) / (output_len - 1).

The requests are replayed open loop at their send times (relative to the first
send): that is what the server saw, whatever paced the client (a rate or
``--max-concurrency``). Failed requests (an error, or no output) are left out
and counted. Every request's output is its ``output_len`` (``ignore_eos``).

The fit sets the chosen step-time model's parameters and simulates every
candidate in one kernel call per pass (``api.simulate`` with a latency per
configuration):

- linear: beta0, beta1 and beta2 (``--beta-coeffs``), each as a factor on the
  base (``--beta-coeffs`` or the preset); alpha (the entry delay and the
  per-token post-processing time, ``planner.latency.step_time``) is kept as given;
- roofline: MFU and MBU (``--step-overhead-us`` and alpha kept);
- measured: the factor ``--measured-scale`` on aiconfigurator's table.

Each parameter starts on a log-spaced grid (``POINTS`` per parameter; factors
``SCALE_RANGE``, efficiencies ``EFFICIENCY_RANGE``) and is refined ``PASSES - 1``
times around the best point, each pass spanning one step of the previous grid
either side. The error minimised is the mean over requests of
|ln(simulated / measured)| of TTFT plus that of TPOT, over the requests both
the run and the simulation served (a log error weighs a 10% miss on a fast
request and on a slow one alike).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner import bounds
from planner.config import SchedulerConfig
from planner.latency.fit import CalibrationError
from planner.latency.step_time import (
    Latency,
    LinearLatency,
    MeasuredLatency,
    RooflineLatency,
    hardware_options,
)
from planner.workload.arrays import Workload

BENCH_KEYS = ("start_times", "input_lens", "output_lens", "ttfts", "itls")
POINTS = {1: 33, 2: 17, 3: 9}  # grid points per parameter, by parameters fitted
PASSES = 3  # the first grid, then two refinements
SCALE_RANGE = (0.25, 4.0)  # linear and measured factors, first pass
EFFICIENCY_RANGE = (0.02, 1.0)  # roofline MFU and MBU, first pass
STATE_BYTES = 256 * 2**20  # kernel state per replay call (candidates are chunked to fit)
MAX_SHIFTS = 4  # same-width grids around a best point on an end of the first one
SEARCH_LIMIT = 4.0 * 4.0**MAX_SHIFTS  # the farthest factor the shifts reach
MIN_REQUESTS = 4


@dataclass(frozen=True)
class BenchRun:
    """A benchmark's successful requests, in send order.

    Attributes: ``arrival_s`` (R,) float64 seconds after the first send;
    ``prompt``/``output`` (R,) int32 tokens; ``ttft_s`` (R,) float64 seconds;
    ``tpot_s`` (R,) float64 seconds, NaN for one-token outputs; ``failed``: the
    requests left out (an error or no output).
    """

    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    failed: int

    def workload(self, name: str) -> Workload:
        """The requests as a workload (each output is its max_tokens)."""
        return Workload(self.arrival_s, self.prompt, self.output, name=name)


MAX_SECONDS = bounds.MAX_ARRIVAL_S  # a send time, TTFT or ITL sum the int64 ns clock holds
MAX_TOKENS = bounds.INT32_MAX  # token counts: int32 in the kernel


def _column(doc: dict, key: str, path: Path, n: int | None) -> list:
    if key not in doc:
        raise CalibrationError(
            f"{path}: no '{key}' list; write the result with vllm bench serve "
            "--save-result --save-detailed"
        )
    col = doc[key]
    if not isinstance(col, list) or (n is not None and len(col) != n):
        want = "a list" if n is None else f"a list of {n:,} (one per request)"
        raise CalibrationError(f"{path}: '{key}' is not {want}")
    return col


def _is_number(v: object) -> bool:
    return type(v) in (int, float)  # not bool, not a string holding a number


def _numbers(col: list, key: str, path: Path, top: float) -> np.ndarray:
    """(n,) float64 of a list of JSON numbers in [0, top]; one line otherwise."""
    bad = next((i for i, v in enumerate(col) if not _is_number(v)), None)
    if bad is not None:
        raise CalibrationError(f"{path}: '{key}'[{bad}] is {col[bad]!r}, not a number")
    x = np.array(col, dtype=np.float64)
    if not np.all(np.isfinite(x)) or np.any(x < 0) or np.any(x > top):
        raise CalibrationError(f"{path}: '{key}' needs finite numbers in 0..{top:,.0f}")
    return x


def _errors_of(doc: dict, path: Path, n: int) -> np.ndarray:
    """(n,) bool: the requests vLLM bench marked failed (``errors``: a string
    per request, empty when it succeeded; absent = none failed)."""
    if "errors" not in doc:
        return np.zeros(n, dtype=bool)
    errors = doc["errors"]
    if not isinstance(errors, list) or len(errors) != n:
        raise CalibrationError(f"{path}: 'errors' is not a list of {n:,} (one per request)")
    bad = next((i for i, e in enumerate(errors) if not (e is None or isinstance(e, str))), None)
    if bad is not None:
        raise CalibrationError(f"{path}: 'errors'[{bad}] is {errors[bad]!r}, not a string")
    return np.array([bool(e) for e in errors])


def _gap_sums(itls: list, out: np.ndarray, path: Path) -> np.ndarray:
    """(n,) float64: each request's summed inter-token gaps (seconds); a
    request streams at most output - 1 gaps."""
    sums = np.zeros(len(itls))
    for i, g in enumerate(itls):
        if not isinstance(g, list):
            raise CalibrationError(f"{path}: 'itls'[{i}] is {g!r}, not a list of gaps")
        if len(g) > max(out[i] - 1, 0):
            raise CalibrationError(
                f"{path}: 'itls'[{i}] holds {len(g):,} gaps for a {int(out[i]):,}-token output"
            )
        sums[i] = _numbers(g, f"itls[{i}]", path, MAX_SECONDS).sum()
    if np.any(sums > MAX_SECONDS):
        raise CalibrationError(f"{path}: a request's ITLs sum past {MAX_SECONDS:g} s")
    return sums


def _check_times(
    path: Path, ok: np.ndarray, out: np.ndarray, ttft: np.ndarray, gaps: np.ndarray
) -> None:
    """A served request has a first token after some time, and one of 2+
    tokens streamed gaps between them (TPOT needs them)."""
    zero = np.flatnonzero(ok & (ttft <= 0))
    if zero.size:
        raise CalibrationError(f"{path}: request {zero[0]} has TTFT 0; a served request takes time")
    flat = np.flatnonzero(ok & (out >= 2) & (gaps <= 0))
    if flat.size:
        i = flat[0]
        raise CalibrationError(
            f"{path}: request {i} has no inter-token gaps (itls) for its {int(out[i]):,}-token "
            "output; TPOT needs a streaming run"
        )
    if not np.any(ok & (out >= 2)):
        raise CalibrationError(
            f"{path}: no successful request has 2 or more output tokens; the decode side "
            "(TPOT) cannot be fitted"
        )


def read_bench_result(path: Path) -> BenchRun:
    """Read a ``vllm bench serve --save-detailed`` result (module docstring).

    Raises:
        CalibrationError: one line, for a file that is not such JSON, a missing
            or ragged list, a value that is not a JSON number (or, in
            ``errors``, a string), a negative, fractional or too large one, a
            request with more gaps than tokens, a served request with TTFT 0
            or with 2+ tokens and no gaps, no request of 2+ tokens, or fewer
            than ``MIN_REQUESTS`` successful requests.
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CalibrationError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(doc, dict):
        raise CalibrationError(f"{path}: not a vllm bench serve result (a JSON object)")
    n = len(_column(doc, "start_times", path, None))
    if n == 0:
        raise CalibrationError(f"{path}: holds no requests")
    cols = {k: _column(doc, k, path, n) for k in BENCH_KEYS}
    start, ttft = (_numbers(cols[k], k, path, MAX_SECONDS) for k in ("start_times", "ttfts"))
    inp, out = (_numbers(cols[k], k, path, MAX_TOKENS) for k in ("input_lens", "output_lens"))
    for key, x in (("input_lens", inp), ("output_lens", out)):
        if np.any(x != np.round(x)):
            raise CalibrationError(f"{path}: '{key}' needs whole token counts")
    gaps = _gap_sums(cols["itls"], out, path)
    ok = ~_errors_of(doc, path, n) & (out >= 1) & (inp >= 1)
    if ok.sum() < MIN_REQUESTS:
        raise CalibrationError(
            f"{path}: {int(ok.sum())} successful requests; the fit needs {MIN_REQUESTS} or more"
        )
    _check_times(path, ok, out, ttft, gaps)
    order = np.argsort(start[ok], kind="stable")
    sent = start[ok][order]
    o = out[ok][order].astype(np.int32)
    tpot = np.where(o >= 2, gaps[ok][order] / np.maximum(o - 1, 1), np.nan)
    return BenchRun(
        sent - sent[0], inp[ok][order].astype(np.int32), o, ttft[ok][order], tpot, int((~ok).sum())
    )


def _grid(lo: float, hi: float, n: int) -> np.ndarray:
    return np.exp(np.linspace(math.log(lo), math.log(hi), n))


def _dims(base: Latency) -> int:
    if isinstance(base, LinearLatency):
        return 3
    return 2 if isinstance(base, RooflineLatency) else 1


def scaled(base: Latency, x: tuple[float, ...]) -> Latency:
    """``base`` with its fitted parameters ``x`` set (module docstring): linear,
    beta_i x x_i; roofline, MFU = x0 and MBU = x1; measured, scale = x0."""
    if isinstance(base, LinearLatency):
        return LinearLatency(base.alpha, tuple(b * f for b, f in zip(base.beta, x, strict=True)))  # type: ignore[arg-type]
    if isinstance(base, RooflineLatency):
        return dataclasses.replace(base, mfu=x[0], mbu=x[1])
    if isinstance(base, MeasuredLatency):
        return dataclasses.replace(base, scale=x[0])
    raise TypeError(f"no request-level fit for {type(base).__name__}")


def _axes(base: Latency, around: tuple[float, ...] | None, half: float) -> list[np.ndarray]:
    """Per parameter, a pass's grid of ``POINTS`` values: the first pass's
    range, or ``half`` (a ratio) either side of ``around``; efficiencies stop
    at 1."""
    n = POINTS[_dims(base)]
    eff = isinstance(base, RooflineLatency)
    if around is None:
        lo, hi = EFFICIENCY_RANGE if eff else SCALE_RANGE
        return [_grid(lo, hi, n)] * _dims(base)
    axes = [_grid(a / half, a * half, n) for a in around]
    return [np.unique(np.minimum(g, 1.0)) if eff else g for g in axes]


def _on_edge(base: Latency, axes: list[np.ndarray], x: tuple[float, ...]) -> list[int]:
    """Parameters whose best value is an end of its grid (an efficiency at 1
    is a limit, not an end: nothing lies beyond it)."""
    eff = isinstance(base, RooflineLatency)
    return [
        d
        for d, g in enumerate(axes)
        if len(g) > 1 and (x[d] == g[0] or (x[d] == g[-1] and not (eff and x[d] >= 1.0)))
    ]


def _rounded(lat: Latency) -> Latency:
    """``lat`` with its fitted parameters at the 4 significant digits printed,
    so that the printed options replay what the fit reports."""

    def r(v: float) -> float:
        return float(f"{v:.4g}")

    if isinstance(lat, LinearLatency):
        return LinearLatency(lat.alpha, tuple(r(b) for b in lat.beta))  # type: ignore[arg-type]
    if isinstance(lat, RooflineLatency):
        return dataclasses.replace(lat, mfu=r(lat.mfu), mbu=r(lat.mbu))
    return dataclasses.replace(lat, scale=r(lat.scale))  # type: ignore[type-var]


PARAM_NAMES = {3: ("beta0", "beta1", "beta2"), 2: ("MFU", "MBU"), 1: ("the measured scale",)}


@dataclass(frozen=True)
class RequestFit:
    """The fitted step-time model as command-line options, and how far its
    replay lands from the benchmark: per-request median |relative error| of
    TTFT and TPOT, and measured against simulated p50/p99 (seconds)."""

    options: str
    latency: Latency
    requests: int
    failed: int
    ttft_err: float
    tpot_err: float
    table: dict[str, tuple[float, float]]
    unserved: int = 0  # requests of the run the fitted replay gave no first token
    at_edge: tuple[str, ...] = ()  # parameters the search ended on an end of its range
    at_limit: tuple[str, ...] = ()  # efficiencies fitted at 1 (the hardware's peak)

    def describe(self) -> str:
        lines = [
            f"fit over {self.requests:,} requests ({self.failed:,} failed, left out): "
            f"median |relative error| TTFT {self.ttft_err:.1%}, TPOT {self.tpot_err:.1%}",
        ]
        if self.unserved:
            lines.append(
                f"note: the simulated server gave no first token to {self.unserved:,} of the "
                "run's requests (a request the pool cannot hold blocks every later one, or "
                "the pool is too small); they are not in the fit"
            )
        if self.at_edge:
            lines.append(
                f"note: {', '.join(self.at_edge)} ended on an end of the search (for "
                f"linear and measured, a factor 1/{SEARCH_LIMIT:g}..{SEARCH_LIMIT:g} of the "
                "base): the best fit may lie beyond it; check the server options, or start "
                "from a base nearer it"
            )
        if self.at_limit:
            lines.append(
                f"note: {', '.join(self.at_limit)} fitted at 1, the hardware's peak: the run "
                "was faster than this roofline allows"
            )
        lines.append("metric         measured   simulated")
        for name, (m, s) in self.table.items():
            lines.append(f"{name:<12} {m * 1e3:9.1f} ms {s * 1e3:9.1f} ms")
        return "\n".join(lines)


def _errors(ttft: np.ndarray, tpot: np.ndarray, run: BenchRun) -> np.ndarray:
    """(C,) the objective (module docstring) per candidate; inf when a
    candidate serves no request in common with the run."""
    e_ttft = np.abs(np.log(np.maximum(ttft, 1e-9) / np.maximum(run.ttft_s, 1e-9)))
    e_tpot = np.abs(np.log(np.maximum(tpot, 1e-9) / np.maximum(run.tpot_s, 1e-9)))
    with np.errstate(invalid="ignore"):
        a = np.nanmean(np.where(np.isfinite(e_ttft), e_ttft, np.nan), axis=1)
        b = np.nanmean(np.where(np.isfinite(e_tpot), e_tpot, np.nan), axis=1)
    b = np.where(np.isnan(b), 0.0, b)
    return np.where(np.isnan(a), np.inf, a + b)


def _replay(
    run: BenchRun, cfg: SchedulerConfig, lats: list[Latency], name: str
) -> tuple[np.ndarray, np.ndarray]:
    """Simulated (C, R) TTFT and TPOT (seconds; NaN where not served) of the
    run's requests under each latency, in chunks of candidates whose kernel
    state fits ``STATE_BYTES``."""
    from planner.api import simulate
    from planner.kernel.state import bytes_per_config
    from planner.metrics import per_request

    wl = run.workload(name)
    chunk = max(1, STATE_BYTES // bytes_per_config(wl.num_requests))
    parts = []
    for i in range(0, len(lats), chunk):
        part = lats[i : i + chunk]
        q = per_request(simulate([cfg] * len(part), wl, part, check_invariants=False))
        parts.append(
            (
                np.where(q["ttft_censored"], np.nan, q["ttft"]),
                np.where(q["tpot_censored"], np.nan, q["tpot"]),
            )
        )
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _options(lat: Latency) -> str:
    """The command-line options that replay ``lat`` (the fitted parameters, the
    ones the fit kept: alpha, the step overhead, and what it prices:
    ``latency.hardware_options``)."""
    a = ",".join(f"{v:.10g}" for v in lat.alpha)
    if isinstance(lat, LinearLatency):
        b = lat.beta
        return f"--latency linear --alpha-coeffs {a} --beta-coeffs {b[0]:.4g},{b[1]:.4g},{b[2]:.4g}"
    kept = f"--step-overhead-us {lat.overhead_us:.10g} --alpha-coeffs {a}"  # type: ignore[union-attr]
    kept += f" {hardware_options(lat)}"  # type: ignore[arg-type]
    if isinstance(lat, RooflineLatency):
        return f"--latency roofline --mfu {lat.mfu:.4g} --mbu {lat.mbu:.4g} {kept}"
    return f"--latency measured --measured-scale {lat.scale:.4g} {kept}"  # type: ignore[union-attr]


def fit_requests(run: BenchRun, cfg: SchedulerConfig, base: Latency, name: str) -> RequestFit:
    """Fit ``base``'s parameters (module docstring) so that replaying ``run``
    on ``cfg`` gives its per-request TTFT and TPOT: ``PASSES`` grids of
    candidates, each replayed in one kernel call (or a few, ``_replay``).

    Raises:
        CalibrationError: when a request of the run is longer than
            ``cfg.max_model_len`` (the server served it, so its limit is larger),
            or no candidate serves any request of the run (a pool too small)."""
    _check_lengths(run, cfg)
    best, edge = _search(run, cfg, base, name)
    lat = _rounded(scaled(base, best))
    ttft, tpot = (x[0] for x in _replay(run, cfg, [lat], name))
    both = np.isfinite(ttft)
    if both.sum() < MIN_REQUESTS:
        raise CalibrationError(
            f"the simulated server gives a first token to {int(both.sum())} of the run's "
            f"{len(both):,} requests (the fit needs {MIN_REQUESTS}): check --num-gpu-blocks "
            "and --max-model-len; under FCFS a request the pool cannot hold blocks every later one"
        )
    multi = both & np.isfinite(tpot) & np.isfinite(run.tpot_s)
    table = {}
    pairs = (("TTFT", ttft, run.ttft_s, both), ("TPOT", tpot, run.tpot_s, multi))
    for metric, sim, meas, mask in pairs:
        for p in (50, 99):
            if mask.any():
                table[f"{metric} p{p}"] = (
                    float(np.percentile(meas[mask], p)),
                    float(np.percentile(sim[mask], p)),
                )
    names = PARAM_NAMES[_dims(base)]
    limit = [d for d in range(len(best)) if isinstance(base, RooflineLatency) and best[d] >= 1.0]
    return RequestFit(
        _options(lat),
        lat,
        int(both.sum()),
        run.failed,
        _median_rel(ttft, run.ttft_s, both),
        _median_rel(tpot, run.tpot_s, multi),
        table,
        int((~both).sum()),
        tuple(names[d] for d in edge),
        tuple(names[d] for d in limit),
    )


def _check_lengths(run: BenchRun, cfg: SchedulerConfig) -> None:
    longest = int((run.prompt.astype(np.int64) + run.output).max())
    if longest > MAX_TOKENS:
        raise CalibrationError(
            f"a request of the run holds {longest:,} tokens (prompt + output), more than the "
            f"planner simulates ({MAX_TOKENS:,})"
        )
    if longest > cfg.max_model_len:
        raise CalibrationError(
            f"a request of the run holds {longest:,} tokens (prompt + output), more than "
            f"--max-model-len {cfg.max_model_len:,}: give the server's --max-model-len "
            f"(at least {longest:,}, since it served that request)"
        )


def _evaluate(
    run: BenchRun, cfg: SchedulerConfig, base: Latency, name: str, axes: list[np.ndarray]
) -> tuple[tuple[float, ...], float]:
    """The best grid point of ``axes`` and its error (one replay of them all)."""
    cands = list(itertools.product(*(map(float, g) for g in axes)))
    ttft, tpot = _replay(run, cfg, [scaled(base, x) for x in cands], name)
    e = _errors(ttft, tpot, run)
    i = int(np.argmin(e))
    if not np.isfinite(e[i]):
        raise CalibrationError(
            "no candidate serves any request of the run: check --num-gpu-blocks "
            "and --max-model-len against its requests"
        )
    return cands[i], float(e[i])


def _search(
    run: BenchRun, cfg: SchedulerConfig, base: Latency, name: str
) -> tuple[tuple[float, ...], list[int]]:
    """The first grid; while its best point is on an end, the same-width grid
    around it (``MAX_SHIFTS`` times at most, so within ``SEARCH_LIMIT``); then
    ``PASSES - 1`` refinements, each one grid step either side. Returns the
    best point and the parameters still on an end before the refinements."""
    axes = _axes(base, None, 1.0)
    best, err = _evaluate(run, cfg, base, name, axes)
    lo, hi = axes[0][0], axes[0][-1]
    for _ in range(MAX_SHIFTS):
        if not _on_edge(base, axes, best):
            break
        axes = _axes(base, best, math.sqrt(hi / lo))
        x, e = _evaluate(run, cfg, base, name, axes)
        if e <= err:
            best, err = x, e
    edge = _on_edge(base, axes, best)
    step = max(float(g[1] / g[0]) for g in axes if len(g) > 1)
    for _ in range(PASSES - 1):
        fine = _axes(base, best, step)
        x, e = _evaluate(run, cfg, base, name, fine)
        if e <= err:
            best, err = x, e
        step = max(float(g[1] / g[0]) for g in fine if len(g) > 1)
    return best, edge


def _median_rel(sim: np.ndarray, meas: np.ndarray, mask: np.ndarray) -> float:
    """Median |sim / meas - 1| over ``mask`` (NaN when it is empty)."""
    return float(np.median(np.abs(sim[mask] / meas[mask] - 1.0))) if mask.any() else math.nan
