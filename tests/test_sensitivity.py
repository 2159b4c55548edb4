"""Issue 33, item 6: answers say how they move when the step time is off by
its model's validated error (``planner.answers.sensitivity``,
``planner.latency.validated``, ``Latency.slower``)."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import numpy as np
import pytest
from test_measured import synthetic_latency

from helpers import run_cli
from planner.answers import sensitivity
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.latency import validated
from planner.latency.step_time import (
    LINEAR,
    MEASURED,
    ROOFLINE,
    LinearLatency,
    MeasuredLatency,
    RooflineLatency,
    step_time_ns,
)
from planner.maxrate.search import passes
from planner.maxrate.search_range import SearchRange
from planner.slo import SLO
from planner.workload.arrays import LengthDist, synthetic

KIND = {LinearLatency: LINEAR, RooflineLatency: ROOFLINE, MeasuredLatency: MEASURED}
STEPS = [(0, 1), (0, 64), (2048, 0), (300, 17), (8192, 256)]


def _ns(lat, p: int, d: int) -> int:
    tab = lat.table if isinstance(lat, MeasuredLatency) else np.zeros(4)
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    fp = np.array(lat.floats(), dtype=np.float64)
    att, kv = p * (p + 1) // 2 + d * 900, p + d * 900
    return int(step_time_ns(KIND[type(lat)], ip, fp, p, d, att, kv, tab))


@pytest.mark.parametrize(
    "lat",
    [
        LinearLatency(),
        RooflineLatency("llama-3.1-8b", "H100", 1, overhead_us=250.0),
        RooflineLatency("llama-3.1-70b", "H100", 4),  # measured all-reduce
        RooflineLatency("llama-3.1-8b", "RTX-4090", 2),  # bandwidth-only all-reduce
        RooflineLatency("Qwen/Qwen3-30B-A3B", "H200", 2),  # experts
        synthetic_latency(scale=1.3, overhead_us=40.0),
    ],
    ids=lambda lat: lat.describe()[:40],
)
@pytest.mark.parametrize("factor", [0.785, 1.215, 2.0])
def test_slower_multiplies_every_step(lat, factor):
    slow = lat.slower(factor)
    for p, d in STEPS:
        # Exact but for rounding to whole ns (the linear model rounds each beta).
        assert _ns(slow, p, d) == pytest.approx(factor * _ns(lat, p, d), rel=1e-4, abs=4)
    assert lat.slower(1.0).describe() == lat.describe()


def test_slower_refuses_a_factor_that_is_not_positive():
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            LinearLatency().slower(bad)


def test_the_validated_error_is_the_median_of_the_recorded_runs():
    doc = json.loads(validated.FILE.read_text())
    roof = doc["kinds"]["roofline"]["tpot_error"]
    assert len(roof) >= 3
    v = validated.for_latency(RooflineLatency("llama-3.1-8b", "H100"))
    assert v is not None and v.runs == len(roof)
    assert v.error == pytest.approx(statistics.median(abs(e) for e in roof.values()))
    assert validated.for_latency(LinearLatency()) is None  # no real run exercises it


def test_chosen_error_follows_the_option():
    roof = RooflineLatency("llama-3.1-8b", "H100")
    assert sensitivity.chosen_error(0.0, roof) is None
    assert sensitivity.chosen_error(0.1, LinearLatency()) == (0.1, "--step-time-error")
    err, basis = sensitivity.chosen_error(None, roof)
    assert err == validated.for_latency(roof).error and "real run" in basis
    for bad in (1.0, -0.1, math.nan):
        with pytest.raises(ValueError):
            sensitivity.chosen_error(bad, roof)


def _busy_workload():
    """Constant arrivals that two S1 servers keep up with and one does not,
    spanning enough request lifetimes to judge it (``metrics.overload``)."""
    return synthetic(
        600, rate=80.0, prompt=LengthDist("constant", 400.0), output=LengthDist("constant", 150.0)
    )


def test_replicas_are_the_fewest_that_pass_at_each_factor():
    wl, lat, slo = _busy_workload(), LinearLatency(), SLO()
    cfg = SchedulerConfig(num_gpu_blocks=4000, max_num_seqs=64)
    slower, faster = sensitivity.replicas(cfg, wl, lat, slo, 0.4, 6)
    assert slower.factor == pytest.approx(1.4) and faster.factor == pytest.approx(0.6)
    assert slower.value is not None and faster.value is not None
    base, _ = sensitivity.replicas(cfg, wl, lat, slo, 0.0, 6)
    assert slower.value > base.value > faster.value  # real differences: the checks can fail

    def ok(k: int, f: float) -> bool:
        run = dataclasses.replace(cfg, replicas=k, horizon_s=math.inf)
        return bool(passes(simulate([run], wl, lat.slower(f)).metrics(slo), slo)[0])

    for shift in (slower, faster):
        assert ok(shift.value, shift.factor)
        assert shift.value == 1 or not ok(shift.value - 1, shift.factor)


def test_max_rate_moves_against_the_step_time():
    wl, lat = _busy_workload(), LinearLatency()
    cfg = SchedulerConfig(num_gpu_blocks=4000, max_num_seqs=64)
    rng = SearchRange()
    slower, faster = sensitivity.max_rate(cfg, wl, lat, SLO(), 0.25, rng)
    base, _ = sensitivity.max_rate(cfg, wl, lat, SLO(), 0.0, rng)
    assert base.factor == 1.0
    assert slower.value < base.value < faster.value
    # Throughput-bound: the rate scales about as 1 / factor (search tolerance 2%).
    assert slower.value * 1.25 == pytest.approx(base.value, rel=0.06)
    assert faster.value * 0.75 == pytest.approx(base.value, rel=0.06)


def test_cli_prints_the_sensitivity_and_refuses_a_bad_error(capsys):
    args = ("max-rate", "--num-requests", "120", "--rate", "6", "--prompt-tokens", "400",
            "--output-tokens", "150")  # fmt: skip
    code, out, _ = run_cli(capsys, *args, "--step-time-error", "0.2", "--json")
    assert code == 0
    s = json.loads(out)["sensitivity"]
    assert s["error"] == 0.2 and s["max_rps_if_slower"] < s["max_rps"] < s["max_rps_if_faster"]
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and "no real run validated this step-time model" in out
    code, out, err = run_cli(capsys, *args, "--step-time-error", "1")
    assert code == 2 and "--step-time-error" in err and len(err.strip().splitlines()) == 1
