"""How far each step-time model was from real GPU runs: the error a planner
answer's sensitivity line assumes (``plan size``, ``plan max-rate``).

Source: ``planner/data/step_time_validation.json``, written by
``tools/validate_table.py`` when it replays the shipped real runs
(``planner/data/real-runs-llmservingsim``, vLLM 0.19 on real GPUs) with each
step-time model, the same table ``docs/validate.md`` shows. Per model: the
signed error of the mean TPOT (predicted / measured - 1) on each run it could
replay, and the median of their absolute values, the figure used. TPOT is the
metric closest to the step time itself (TTFT and E2E also carry queueing).
Nothing is fitted to these runs; a model no run exercised (the linear model,
whose only preset is for the H100, where no run was recorded) has no figure.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from planner.latency.step_time import Latency, LinearLatency, MeasuredLatency, RooflineLatency

FILE = Path(__file__).resolve().parents[1] / "data" / "step_time_validation.json"
KINDS: dict[type, str] = {
    LinearLatency: "linear",
    RooflineLatency: "roofline",
    MeasuredLatency: "measured",
}


@dataclass(frozen=True)
class Validated:
    """One step-time model's validated error: ``error`` (a fraction, the
    median absolute TPOT error) over ``runs`` real runs replayed on ``date``."""

    kind: str
    error: float
    runs: int
    date: str

    def text(self) -> str:
        """Where the figure comes from, for the output."""
        return (
            f"the {self.kind} step time's median TPOT error on {self.runs} real "
            f"run{'s' if self.runs != 1 else ''} (tools/validate_table.py, {self.date})"
        )


@functools.cache
def _load() -> dict[str, Validated]:
    d = json.loads(FILE.read_text())
    return {
        kind: Validated(kind, float(v["median_abs_tpot_error"]), len(v["tpot_error"]), d["date"])
        for kind, v in d["kinds"].items()
        if v["tpot_error"]
    }


def for_latency(lat: Latency) -> Validated | None:
    """The validated error of ``lat``'s kind of step time, or None when no
    real run exercised it."""
    return _load().get(KINDS[type(lat)])
