"""Tensor parallelism in the roofline step time (issue 15, item 4): every
token pays 2 all-reduces per layer of hidden_size activations, ring-style
2 (tp - 1) / tp of the bytes over the GPU's link; none at tp = 1."""

from __future__ import annotations

import numpy as np
import pytest

from planner.latency.step_time import ROOFLINE, RooflineLatency, step_time_ns
from planner.models.hardware import GPUS, model


def _step_ns(lat: RooflineLatency, prefill: int, decode: int, attended: int, kv: int) -> int:
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    fp = np.array(lat.floats(), dtype=np.float64)
    return int(step_time_ns(ROOFLINE, ip, fp, prefill, decode, attended, kv, np.zeros(4)))


@pytest.mark.parametrize("gpu", sorted(GPUS))
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_all_reduce_time_follows_the_ring_formula(gpu, tp):
    m = model("llama-3.1-8b")
    lat = RooflineLatency("llama-3.1-8b", gpu, tp)
    want = 2 * m.num_layers * 2 * (tp - 1) / tp * m.hidden_size * m.dtype_bytes
    assert lat.comm_s_per_token() == pytest.approx(want / GPUS[gpu].link_bytes_per_s)
    # The step adds exactly tokens x that time to the roofline's max(compute, memory).
    fp = lat.floats()
    no_comm = fp[:6] + (0.0,) + fp[7:]
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    base = step_time_ns(
        ROOFLINE, ip, np.array(no_comm), 512, 64, 512 * 513 // 2 + 64_000, 70_000, np.zeros(4)
    )
    got = _step_ns(lat, 512, 64, 512 * 513 // 2 + 64_000, 70_000)
    assert got - base == pytest.approx(576 * lat.comm_s_per_token() * 1e9, abs=2)


def test_no_all_reduce_on_one_gpu_and_pcie_costs_more_than_nvlink():
    assert RooflineLatency("llama-3.1-8b", "H100", 1).comm_s_per_token() == 0.0
    nvlink = RooflineLatency("llama-3.1-8b", "H100", 2).comm_s_per_token()
    pcie = RooflineLatency("llama-3.1-8b", "L40S", 2).comm_s_per_token()
    assert pcie / nvlink == pytest.approx(450 / 32)
    assert "all-reduce" in RooflineLatency("llama-3.1-8b", "H100", 2).describe()
    assert "all-reduce" not in RooflineLatency("llama-3.1-8b", "H100", 1).describe()
