"""Service-level objectives (SLOs): one definition for ``plan run``, ``plan check``,
``plan safe-limit``, ``plan max-rate`` and sweep specs.

An SLO is given either as ``--ttft-slo``/``--tpot-slo``/``--itl-slo``/``--e2e-slo``
in seconds, or in vLLM bench's goodput form ``--goodput "ttft:MS tpot:MS e2el:MS"``
in milliseconds (``vllm/benchmarks/serve.py``: ``parse_goodput`` splits each
``KEY:VALUE`` pair, ``check_goodput_args`` accepts the keys ``ttft``, ``tpot`` and
``e2el``). The goodput key ``itl`` (an ITL SLO) is **this planner's extension**:
vLLM bench's ``check_goodput_args`` rejects it, so a ``--goodput`` string with
``itl:`` cannot be passed to ``vllm bench serve`` as is. Every given value must
be > 0 (vLLM accepts 0; an SLO of 0 s can never hold, so it is refused here); a
metric given in both forms is refused.

Two uses, both in ``planner.metrics``:

- per request, vLLM's goodput rule (``calculate_metrics``: a completed request
  is good when each given metric is at or below its SLO; a single-token request
  has TPOT 0 there, so it always meets a TPOT SLO);
- per run, ``SLO_PERCENTILE`` (p99): the SLO holds when the p99 of each given
  metric, over every request that arrived (requests not served by the end of
  the run counted as misses, i.e. +inf), is at or below its SLO.

ITL (inter-token latency, the gap between two consecutive output tokens of a
request + alpha2; ``planner.metrics``):

- per run, the SLO is on the ITL p99 over **every token gap** of the run (the
  kernel's histogram, ``planner.kernel.token_gaps``), as vLLM bench reports ITL p99
  over all ITL samples. A request that arrived and had not finished by the end
  of the run still owes gaps: with ``m`` its most outputs (max_tokens, capped
  by max_model_len) and ``n`` its outputs so far, ``m - max(n, 1)`` gaps were
  never produced (``m`` outputs have ``m - 1`` gaps; ``n >= 1`` outputs closed
  ``n - 1`` of them), and each counts as an infinitely late gap (a miss). So
  the p99 is finite only while at most 1 % of all gaps are missing; beyond
  that it is +inf, reported as a lower bound (``>= X``, X the p99 with the
  missing gaps at their known lower bounds) that misses every ITL SLO;
- per request (goodput), a finished request meets an ITL SLO when its
  **largest** gap (its max token stall) + alpha2 is at or below the SLO; a
  request with one output has no gap and meets it (as TPOT). vLLM's goodput
  has no ITL; the largest gap is chosen because it is what a user streaming
  the tokens sees as a stall, while the request's mean gap is its TPOT, which
  ``--tpot-slo`` already bounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.bounds import MAX_SLO_S, MIN_SLO_S

SLO_PERCENTILE = 99  # the run-level SLO is on this percentile of each metric
# goodput key -> field; ``itl`` is this planner's extension (vLLM bench's
# check_goodput_args accepts ttft, tpot and e2el only).
GOODPUT_KEYS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_s", "e2el": "e2e_s"}
FIELDS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")  # the SLO's metrics, in printing order
FLAGS = {"ttft_s": "--ttft-slo", "tpot_s": "--tpot-slo", "itl_s": "--itl-slo", "e2e_s": "--e2e-slo"}
NAMES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL", "e2e_s": "E2E"}  # for people
MS = 1e3


class SLOError(ValueError):
    """A bad SLO; the message is one line naming the option."""


@dataclass(frozen=True)
class SLO:
    """Latency objectives in seconds, each optional (None: not given).

    ``ttft_s``: time to first token; ``tpot_s``: time per output token after
    the first; ``itl_s``: inter-token latency (run level: p99 over every token
    gap; per request: its largest gap; module docstring); ``e2e_s``: end-to-end
    latency (vLLM's ``e2el``). Definitions of the metrics: ``planner.metrics``."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    itl_s: float | None = None

    def __post_init__(self) -> None:
        for name, v in self.items():
            check_value(FLAGS[name], v)

    def items(self) -> list[tuple[str, float]]:
        """(field, seconds) of the given objectives, in the order TTFT, TPOT, ITL, E2E."""
        pairs = ((k, getattr(self, k)) for k in FIELDS)
        return [(k, float(v)) for k, v in pairs if v is not None]

    def given(self) -> bool:
        """True when at least one objective is set."""
        return bool(self.items())

    def describe(self, per_request: bool = False) -> str:
        """E.g. ``TTFT p99 <= 2 s, TPOT p99 <= 50 ms`` (the run-level SLO), or with
        ``per_request`` ``TTFT <= 2 s, TPOT <= 50 ms`` (the goodput rule); ''
        when none is given. Per request the ITL objective is on the largest
        gap: ``max ITL <= 20 ms``."""

        def name(k: str) -> str:
            if not per_request:
                return f"{NAMES[k]} p{SLO_PERCENTILE}"
            return "max ITL" if k == "itl_s" else NAMES[k]

        return ", ".join(f"{name(k)} <= {seconds_text(v)}" for k, v in self.items())

    def as_dict(self) -> dict[str, float | None]:
        """Columns ``ttft_slo_s``, ``tpot_slo_s``, ``itl_slo_s``, ``e2e_slo_s``
        (None: not given)."""
        return {f"{k[:-2]}_slo_s": getattr(self, k) for k in FIELDS}


def seconds_text(v: float) -> str:
    """A duration for people, 3 significant digits and no exponent: ``80 us``
    below a millisecond (``< 0.001 us`` below a picosecond; ``0 ms`` for 0),
    ``50 ms`` below a second, ``2 s`` below 1,000 s, else ``1,234 s``."""
    if 0 < v < 1e-3:
        return f"{v * 1e6:.3g} us" if v >= 1e-9 else "< 0.001 us"
    if v < 1:
        return f"{v * MS:.3g} ms"
    return f"{v:.3g} s" if v < 1000 else f"{v:,.0f} s"


def check_value(flag: str, v: float) -> None:
    """Raise SLOError unless ``v`` is a finite number of seconds in
    [MIN_SLO_S, MAX_SLO_S] (one nanosecond, the clock's unit, to about 31 years)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise SLOError(f"{flag} must be a finite number of seconds > 0, got {v!r}")
    if not MIN_SLO_S <= v <= MAX_SLO_S:
        raise SLOError(
            f"{flag} must be at least {MIN_SLO_S:g} (one nanosecond) and at most "
            f"{MAX_SLO_S:g} seconds, got {v:g}"
        )


def parse_goodput(items: Sequence[str], flag: str = "--goodput") -> dict[str, float]:
    """vLLM bench's goodput SLOs, ``KEY:MS`` pairs (``ttft``, ``tpot``, ``e2el``,
    and this planner's ``itl``; milliseconds), separated by spaces or commas, in
    one or several strings.

    Returns field -> seconds (``ttft_s``, ``tpot_s``, ``itl_s``, ``e2e_s``). Raises SLOError
    (one line) on a malformed pair, an unknown or repeated key, or a value <= 0."""
    out: dict[str, float] = {}
    pairs = [p for text in items for p in text.replace(",", " ").split()]
    if not pairs:
        raise SLOError(f'{flag}: expected KEY:MS pairs, e.g. "ttft:2000 tpot:50"')
    for pair in pairs:
        key, sep, value = pair.partition(":")
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not sep or not math.isfinite(ms):
            raise SLOError(f"{flag}: expected KEY:MS (milliseconds), got {pair!r}")
        if key not in GOODPUT_KEYS:
            raise SLOError(f"{flag}: unknown metric {key!r} (known: {', '.join(GOODPUT_KEYS)})")
        field = GOODPUT_KEYS[key]
        if field in out:
            raise SLOError(f"{flag}: {key} given twice")
        if not ms > 0:
            raise SLOError(f"{flag}: {key} must be > 0 ms, got {ms:g}")
        out[field] = ms / MS
        check_value(f"{flag} {key}", out[field])
    return out


def from_options(
    ttft_slo: float | None = None,
    tpot_slo: float | None = None,
    e2e_slo: float | None = None,
    goodput: Sequence[str] | str | None = None,
    names: dict[str, str] | None = None,
    itl_slo: float | None = None,
) -> SLO:
    """The SLO of the options (seconds) and/or the goodput form (milliseconds).

    ``names`` maps ``ttft_slo``, ``tpot_slo``, ``itl_slo``, ``e2e_slo`` and
    ``goodput`` to the spellings used in errors (default: the command line's
    ``--ttft-slo`` ...; sweep specs pass their field names). Raises SLOError
    (one line) on a value <= 0 or a metric given twice."""
    spell = {"ttft_slo": "--ttft-slo", "tpot_slo": "--tpot-slo", "itl_slo": "--itl-slo",
             "e2e_slo": "--e2e-slo", "goodput": "--goodput", **(names or {})}  # fmt: skip
    given = {"ttft_s": ttft_slo, "tpot_s": tpot_slo, "itl_s": itl_slo, "e2e_s": e2e_slo}
    flags = {field: spell[f"{field[:-2]}_slo"] for field in given}
    for field, v in given.items():
        if v is not None:
            check_value(flags[field], v)
    if goodput is not None:
        parsed = parse_goodput([goodput] if isinstance(goodput, str) else goodput, spell["goodput"])
        for field, v in parsed.items():
            if given[field] is not None:
                raise SLOError(
                    f"{flags[field]} and {spell['goodput']} both set {field[:-2]}: give one"
                )
            given[field] = v
    return SLO(**given)
