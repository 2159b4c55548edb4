"""The kernel's per-thread scratch arena (``planner/kernel/arena.py``).

A thread reuses one buffer for every configuration it runs, so what a
configuration computes must not depend on what the buffer held before, and
the arrays carved from it must fit it without overlapping."""

from __future__ import annotations

import numpy as np
import pytest

import planner.api as api
from helpers import STEP_LATENCY
from planner.config import SchedulerConfig
from planner.kernel import step as ST
from planner.kernel.arena import Arenas
from planner.workload.arrays import LengthDist, synthetic, with_shared_prefixes


def _workload(seed: int):
    prompt = LengthDist("gaussian", 300, 200, 8, 900)
    output = LengthDist("gaussian", 120, 90, 1, 400)
    wl = synthetic(60, 1e6, prompt, output, arrival="poisson", seed=seed)
    return with_shared_prefixes(wl, groups=3, prefix_len=128, share=0.6, seed=seed)


def _configs() -> list[SchedulerConfig]:
    """Pools from tight (preemptions, evictions) to roomy, with and without
    prefix caching and async scheduling, so later configs of a thread reuse a
    buffer an unlike config wrote."""
    out = []
    for blocks in (90, 400, 60, 2000):
        for caching in (False, True):
            for async_ in (False, True):
                out.append(
                    SchedulerConfig(
                        num_gpu_blocks=blocks,
                        max_num_seqs=16,
                        max_model_len=2048,
                        enable_prefix_caching=caching,
                        async_scheduling=async_,
                    )
                )
    return out


def _outcome(res) -> tuple:
    m = res.metrics()
    cols = ["completed", "preemptions", "steps", "prefill_tokens", "prefix_cache_hits"]
    return (
        m[[c for c in cols if c in m.columns]].to_numpy().tolist(),
        res.state.req.finish_ns.tolist(),
    )


class _Dirty(Arenas):
    """Arenas whose buffers start full of noise instead of whatever malloc gave."""

    def get(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        bufs = super().get()
        if not getattr(self._local, "dirtied", False):
            rng = np.random.default_rng(7)
            for b in bufs:
                b.view(np.uint8)[:] = rng.integers(0, 256, b.nbytes, dtype=np.uint8)
            self._local.dirtied = True
        return bufs


@pytest.mark.parametrize("seed", [1, 2])
def test_results_do_not_depend_on_the_arena_contents(monkeypatch, seed):
    wl = _workload(seed)
    cfgs = _configs()
    alone = [_outcome(api.simulate([c], wl, STEP_LATENCY)) for c in cfgs]
    assert any(o[0][0][1] > 0 for o in alone), "no config preempted: the case is too easy"
    monkeypatch.setattr(api, "Arenas", _Dirty)
    batch = api.simulate(cfgs, wl, STEP_LATENCY)
    got = _outcome(batch)
    for i in range(len(cfgs)):
        assert got[0][i] == alone[i][0][0], cfgs[i]
        assert got[1][i] == alone[i][1][0], cfgs[i]


def test_cache_arrays_fill_the_arenas_without_overlap(monkeypatch):
    seen = []
    real = api.simulate_one

    def spy(cfg, cfgf, rq, st, q, o, x, ctl, use_macro, check, scratch=None):
        snap, a32, a64 = Arenas(*ST.scratch_sizes(cfg[None, :], rq)).get()
        sc = ST._init(cfg, rq, o.counters.copy(), snap)
        p = ST.prefix_cache_of(cfg, rq, a32, a64)
        assert sc.cycle.snap.shape[0] == snap.shape[0]  # the snapshot takes the whole buffer
        seen.append((a32, a64, [] if p is None else list(p), ST.caching_marker(cfg)))
        real(cfg, cfgf, rq, st, q, o, x, ctl, use_macro, check, scratch)

    monkeypatch.setattr(api, "simulate_one", spy)
    api.simulate(_configs(), _workload(3), STEP_LATENCY)
    assert {m for *_, m in seen} == {None, True}
    base_of = lambda a: a.__array_interface__["data"][0]  # noqa: E731
    for a32, a64, views, marker in seen:
        if marker is None:
            continue
        for arena, n_arrays in ((a32, 11), (a64, 2)):
            lo, hi = base_of(arena), base_of(arena) + arena.nbytes
            spans = sorted(
                (base_of(v), base_of(v) + v.nbytes)
                for v in views
                if v.size and lo <= base_of(v) < hi  # sliced ones (small arrays are allocated)
            )
            assert len(spans) == n_arrays
            # back to back from the arena's start to its end: cache_entries is exact
            assert spans[0][0] == lo and spans[-1][1] == hi
            assert all(b1 == a2 for (_, b1), (a2, _) in zip(spans, spans[1:], strict=False))
