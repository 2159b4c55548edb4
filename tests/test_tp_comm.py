"""Tensor parallelism in the roofline step time (issue 33, item 2): vLLM's
all-reduces timed from aiconfigurator-core's measurements of vLLM on that GPU
and tensor-parallel size (``planner.latency.allreduce``), 2 x layers + 1 per
step; where nothing was measured, the bandwidth-only ring bound (2 all-reduces
per layer of hidden_size activations, 2 (tp - 1) / tp of the bytes over the
link); none at tp = 1."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from planner.latency import allreduce
from planner.latency.aic_systems import ALLREDUCE_SYSTEMS
from planner.latency.step_time import (
    AR_COUNT,
    ROOFLINE,
    RooflineLatency,
    allreduce_step_s,
    step_time_ns,
)
from planner.models.hardware import GPUS, model

UNMEASURED = sorted(set(GPUS) - set(ALLREDUCE_SYSTEMS))


def _step_ns(lat: RooflineLatency, fp: np.ndarray, prefill: int, decode: int) -> int:
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    att, kv = prefill * (prefill + 1) // 2 + 64_000, 70_000
    return int(step_time_ns(ROOFLINE, ip, fp, prefill, decode, att, kv, np.zeros(4)))


def _csv_rows(gpu: str, tp: int) -> list[dict[str, str]]:
    with allreduce.CSV.open(newline="") as f:
        return [r for r in csv.DictReader(f) if r["gpu"] == gpu and int(r["tp"]) == tp]


@pytest.mark.parametrize("gpu", UNMEASURED)
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_unmeasured_gpus_keep_the_ring_bound(gpu, tp):
    m = model("llama-3.1-8b")
    lat = RooflineLatency("llama-3.1-8b", gpu, tp)
    assert lat.allreduce_table() is None and "bandwidth only" in lat.describe()
    want = 2 * m.num_layers * 2 * (tp - 1) / tp * m.hidden_size * m.dtype_bytes
    assert lat.comm_s_per_token() == pytest.approx(want / GPUS[gpu].link_bytes_per_s)
    fp = np.array(lat.floats())
    no_comm = fp.copy()
    no_comm[6] = 0.0
    got = _step_ns(lat, fp, 512, 64) - _step_ns(lat, no_comm, 512, 64)
    assert got == pytest.approx(576 * lat.comm_s_per_token() * 1e9, abs=2)


def test_every_mapped_gpu_has_all_knots_at_tp_2():
    for gpu in ALLREDUCE_SYSTEMS:
        tab = allreduce.lookup(gpu, 2)
        assert tab is not None and len(tab.graph_s) == len(tab.eager_s) == allreduce.KNOTS
        assert min(tab.graph_s + tab.eager_s) > 0.0
        assert "aiconfigurator-core 0.12.0" in tab.source


def test_measured_all_reduce_interpolates_the_table_by_hand():
    """Qwen3-32B (64 layers, hidden 5,120) on 2 x RTX PRO 6000: a 64-token
    decode step sends 327,680-element messages, between the 262,144 and
    524,288 knots; 129 all-reduces; graph latencies (64 <= 512 tokens)."""
    lat = RooflineLatency("Qwen/Qwen3-32B", "RTX-PRO-6000", 2)
    rows = {int(r["elements"]): float(r["graph_ms"]) / 1e3 for r in _csv_rows("RTX-PRO-6000", 2)}
    lo, hi = rows[262_144], rows[524_288]
    one = lo + (hi - lo) * (327_680 - 262_144) / 262_144
    fp = np.array(lat.floats())
    assert fp[AR_COUNT] == 2 * 64 + 1
    assert allreduce_step_s(fp, 64) == pytest.approx(129 * one, rel=1e-12)
    assert fp[6] == 0.0  # the bandwidth-only term is not added on top
    no_ar = fp.copy()
    no_ar[AR_COUNT] = 0.0
    got = _step_ns(lat, fp, 0, 64) - _step_ns(lat, no_ar, 0, 64)
    assert got == pytest.approx(129 * one * 1e9, abs=2)
    assert "measured" in lat.describe() and "rtx_pro_6000_server" in lat.describe()


def test_graph_latency_up_to_the_capture_ceiling_eager_above():
    lat = RooflineLatency("llama-3.1-8b", "H100", 2)
    fp = np.array(lat.floats())
    rows = _csv_rows("H100", 2)
    elements = {int(r["elements"]): r for r in rows}
    n = 4096 * 512  # 2,097,152 elements: a knot
    assert n in elements
    graph, eager = (float(elements[n][k]) / 1e3 for k in ("graph_ms", "eager_ms"))
    assert allreduce_step_s(fp, 512) == pytest.approx(65 * graph, rel=1e-12)
    # 513 tokens run eager: just above the eager knot value.
    assert allreduce_step_s(fp, 513) == pytest.approx(65 * eager, rel=2e-3)
    assert allreduce.graph_tokens(GPUS["B200"].sm) == 1024 and allreduce.graph_tokens(90) == 512


def test_beyond_the_last_knot_extends_the_last_segment():
    lat = RooflineLatency("llama-3.1-8b", "H100", 2)
    tab = lat.allreduce_table()
    fp = np.array(lat.floats())
    last = allreduce.FIRST_ELEMENTS << (allreduce.KNOTS - 1)
    slope = (tab.eager_s[-1] - tab.eager_s[-2]) / (last / 2)
    tokens = 2 * last // 4096
    assert allreduce_step_s(fp, tokens) == pytest.approx(65 * (tab.eager_s[-1] + slope * last))


def test_no_all_reduce_on_one_gpu():
    lat = RooflineLatency("llama-3.1-8b", "H100", 1)
    assert lat.comm_s_per_token() == 0.0 and lat.allreduce_table() is None
    assert allreduce_step_s(np.array(lat.floats()), 4096) == 0.0
    assert "all-reduce" not in lat.describe()
