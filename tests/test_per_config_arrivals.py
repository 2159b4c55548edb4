"""Arrivals per configuration (issue 14, item 4).

``simulate(..., arrival_s=A)`` with A of shape (C, R) gives config c the
arrival times A[c]. Each config must end exactly as the reference engine does
when it alone sees those arrivals, and as a one-config kernel call does.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_crosscheck import (
    _linear_for_compat,
    _open_loop_for_sessions,
    configs,
    latencies,
    workloads,
)

from helpers import compare_final
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.reference import Engine
from planner.workload.arrays import Workload


def _reference(cfg, wl: Workload, lat, arrival_s: np.ndarray) -> Engine:
    return Engine(
        cfg,
        lat,
        np.round(arrival_s * 1e9).astype(np.int64).tolist(),
        wl.prompt_tokens.tolist(),
        wl.output_tokens.tolist(),
        None if wl.priority is None else [int(x) for x in wl.priority],
        None if wl.prefix_group is None else wl.prefix_group.tolist(),
        None if wl.prefix_len is None else wl.prefix_len.tolist(),
        None,
        0,
        None if wl.session is None else wl.session.tolist(),
    ).run()


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    cfgs=st.lists(configs(), min_size=3, max_size=3),
    wl=workloads(),
    lat=latencies,
    data=st.data(),
)
@pytest.mark.slow
def test_each_config_sees_its_own_arrivals(cfgs, wl, lat, data):
    cfgs = _linear_for_compat(_open_loop_for_sessions(cfgs, wl), lat)
    r = wl.num_requests
    rows = [
        data.draw(st.lists(st.floats(0, 0.2), min_size=r, max_size=r), label=f"arrivals {c}")
        for c in range(len(cfgs))
    ]
    arrivals = np.array(rows, dtype=np.float64)  # unsorted rows on purpose
    batch = simulate(cfgs, wl, lat, arrival_s=arrivals)
    for c, cfg in enumerate(cfgs):
        compare_final(batch, c, _reference(cfg, wl, lat, arrivals[c]))
        alone = simulate([cfg], wl, lat, arrival_s=arrivals[c : c + 1])
        for name in ("nout", "npre", "first_ns", "finish_ns", "ncomp"):
            assert (
                getattr(alone.state.req, name)[0].tolist()
                == getattr(batch.state.req, name)[c].tolist()
            )
        assert alone.state.out.counters[0].tolist() == batch.state.out.counters[c].tolist()
    m = batch.metrics()
    assert len(m) == len(cfgs)


def test_shared_arrivals_are_the_default():
    wl = Workload(np.array([0.0, 0.1, 0.2]), np.full(3, 20, np.int32), np.full(3, 5, np.int32))
    cfgs = [SchedulerConfig(num_gpu_blocks=50, max_model_len=64)] * 2
    same = simulate(cfgs, wl, arrival_s=np.tile(wl.arrival_s, (2, 1))).metrics()
    default = simulate(cfgs, wl).metrics()
    assert same.equals(default)


def test_later_arrivals_shift_ttft_origin():
    """A config whose requests arrive 1 s later finishes them 1 s later, same TTFT."""
    wl = Workload(np.array([0.0, 0.0]), np.full(2, 20, np.int32), np.full(2, 5, np.int32))
    cfgs = [SchedulerConfig(num_gpu_blocks=50, max_model_len=64)] * 2
    res = simulate(cfgs, wl, arrival_s=np.array([[0.0, 0.0], [1.0, 1.0]]))
    fin = res.state.req.finish_ns
    assert (fin[1] - fin[0]).tolist() == [1_000_000_000, 1_000_000_000]
    m = res.metrics()
    assert m.ttft_s_p50[0] == pytest.approx(m.ttft_s_p50[1])


@pytest.mark.parametrize(
    "bad",
    [np.zeros((1, 3)), np.zeros((2, 2)), np.full((2, 3), -1.0), np.full((2, 3), np.nan)],
)
def test_bad_arrival_matrix_is_refused(bad):
    wl = Workload(np.zeros(3), np.full(3, 20, np.int32), np.full(3, 5, np.int32))
    with pytest.raises(ValueError, match="arrival_s"):
        simulate([SchedulerConfig(num_gpu_blocks=50, max_model_len=64)] * 2, wl, arrival_s=bad)
