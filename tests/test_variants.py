"""Kernel variants (issue 34): a run compiles only what its configs use
(``planner.kernel.variant``), and every variant computes the same results.

The variants are ``variant.VARIANTS`` (the gated features off or on) times
prefix caching off or on (the prefix cache argument is None or not). Each is
checked here against the vLLM goldens and the reference engine."""

from __future__ import annotations

import ast
import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conformance import config_of, golden_names, kernel_steps, load, scenario, workload_of
from numba import njit
from test_crosscheck import _random_case

import planner.kernel.step as step_module
from helpers import assert_step_for_step, run_both
from planner.api import features_for, simulate
from planner.config import BLIS_IMPLIED, SchedulerConfig
from planner.kernel import state as S
from planner.kernel.variant import ALL, EXTRAS, PLAIN, VARIANTS, gated
from planner.kv_transfer import KVTransfer
from planner.speculative import Speculation
from planner.workload.arrays import LengthDist, synthetic


def _workload(sessions: bool):
    d = LengthDist("constant", 8)
    wl = synthetic(4, 10.0, d, d, seed=1)
    if sessions:
        wl = replace(wl, session=np.array([0, 0, 1, 1], dtype=np.int32))
    return wl


@pytest.mark.parametrize(
    ("fields", "sessions", "want"),
    [
        ({}, False, PLAIN),
        ({"async_scheduling": True}, False, EXTRAS),
        ({"max_concurrency": 2}, False, EXTRAS),
        ({**BLIS_IMPLIED, "compat": "blis"}, False, EXTRAS),
        ({}, True, EXTRAS),
        ({"enable_prefix_caching": True}, False, PLAIN),
        ({"preemption_mode": "swap"}, False, PLAIN),
        # several KV cache groups: with caching the group-by-group prefix cache
        ({"sliding_window": 64, "enable_prefix_caching": True}, False, ALL),
        ({"full_attention_groups": 2, "enable_prefix_caching": True}, False, ALL),
        ({"sliding_window": 64}, False, PLAIN),
        ({"full_attention_groups": 2}, False, PLAIN),
        # priority scheduling and the mitigations of policies.py
        ({"policy": "priority"}, False, EXTRAS),
        ({"victim": "least_progress"}, False, EXTRAS),
        ({"victim": "youngest"}, False, PLAIN),
        ({"anti_starvation": 2}, False, EXTRAS),
        ({"admission": "projected"}, False, EXTRAS),
        ({"adaptive_window": 50}, False, EXTRAS),
        # the heavy marker: drafts, a KV transfer, Mamba state (it implies extras)
        ({"speculation": Speculation("ngram", 2, (0.7,))}, False, ALL),
        ({"kv_transfer": KVTransfer(1_000, 5_000)}, False, ALL),
        ({"mamba_groups": 1, "full_attention_groups": 1}, False, ALL),
        ({"async_scheduling": True, "speculation": Speculation("ngram", 2, (0.7,))}, False, ALL),
    ],
)
def test_each_gated_feature_turns_the_marker_on(fields, sessions, want):
    cfg = SchedulerConfig(num_gpu_blocks=100, **fields)
    assert features_for([cfg], _workload(sessions)) == want
    # one config using a feature makes the whole call's kernel carry it
    assert features_for([SchedulerConfig(num_gpu_blocks=100), cfg], _workload(sessions)) == want


def test_the_variants_are_every_marker_the_configs_can_ask_for():
    seen = set()
    drafts = (None, Speculation("ngram", 2, (0.7,)))
    flags = (False, True)
    for a, c, b, s, d in itertools.product(flags, (0, 2), flags, flags, drafts):
        if b and (a or d):
            continue  # compat blis schedules in sync, without drafts (config refuses both)
        blis = {**BLIS_IMPLIED, "compat": "blis"} if b else {}
        cfg = SchedulerConfig(
            num_gpu_blocks=100, async_scheduling=a, max_concurrency=c, speculation=d, **blis
        )
        seen.add(features_for([cfg], _workload(s)))
    assert seen == set(VARIANTS)


def test_a_gated_function_is_not_compiled_under_a_none_marker():
    @njit
    def heavy(a):
        return a + 1

    heavy_if = gated(heavy, 0)

    @njit
    def caller(marker, a):
        return heavy_if(marker, a)

    assert caller(None, 5) == 0
    assert heavy.signatures == []  # never typed, never compiled
    assert caller(True, 5) == 6
    assert len(heavy.signatures) == 1


def test_gated_refuses_a_function_numba_must_inline():
    @njit(inline="always")
    def tiny(a):
        return a

    with pytest.raises(TypeError, match="inline"):
        gated(tiny)


def test_the_step_loop_reaches_gated_features_only_through_their_markers():
    tree = ast.parse(Path(step_module.__file__).read_text())
    direct = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    wrapped = {
        node.args[0].id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "gated"
    }
    gated_names = (
        "answered",
        "blis_step_ns",
        "_blis_last_slot",
        "_update_from_output_async",
        "_schedule_waiting_pd",
        "finish_loads",
        "_load_wait",
        "leave_inflight",
        "drain_deferred",
    )
    for name in gated_names:
        assert name not in direct, f"{name} called directly: it would compile into every variant"
        assert name in wrapped, f"{name} is not behind variant.gated"


SHORT = [n for n in golden_names() if not n.startswith(("s1_exact", "swa_s1_time", "hyb_s1_time"))]


def _variant_of(name: str):
    scn = scenario(name)
    wl, _, _ = workload_of(scn)
    return features_for([config_of(scn)], wl)


@pytest.mark.slow  # loads and packs every golden (about 10 s)
def test_the_goldens_cover_every_variant():
    assert {_variant_of(n) for n in SHORT} == set(VARIANTS)
    caching = {scenario(n)["enable_prefix_caching"] for n in SHORT}
    assert caching == {False, True}


@pytest.mark.slow  # about 1 s per golden; test_conformance runs each in its own variant
@pytest.mark.parametrize("name", [n for n in SHORT if _variant_of(n) != ALL])
def test_a_golden_runs_the_same_with_every_feature_compiled_in(name):
    """test_conformance checks each golden under its own variant; the plain
    and extras ones also run under ``ALL``, which must change nothing."""
    scn = load(name)["scenario"]
    assert kernel_steps(scn, ALL) == kernel_steps(scn)


@pytest.mark.slow
def test_every_variant_matches_the_reference_on_seeded_cases():
    """Seeded random cases (tests/test_crosscheck.py's generator): each under
    the variant its configs need and under ``ALL`` too; the kernel must match
    the reference engine step for step in both, and each variant must meet
    preemption, a proven livelock, the fast path and prefix caching."""
    rng = np.random.default_rng(20261204)
    wrng = np.random.default_rng(20261205)
    seen = {v: {"cases": 0, "preempted": 0, "livelocked": 0, "fast_path": 0} for v in VARIANTS}
    with_caching = dict.fromkeys(VARIANTS, 0)  # configs with prefix caching, per variant
    for _ in range(120):
        cfgs, wl, lat = _random_case(rng, wrng)
        if rng.random() < 0.5:  # the generator mixes features in; keep half plain
            plain = dict(async_scheduling=False, max_concurrency=0, think_time_s=0.0)
            # vLLM's FCFS scheduler: no priority, no mitigation (policies.py)
            plain |= dict(policy="fcfs", victim=None, anti_starvation=0, admission="vanilla")
            plain |= dict(adaptive_window=0)
            cfgs = [replace(c, **plain) for c in cfgs if c.compat != "blis"] or [
                SchedulerConfig(num_gpu_blocks=40, max_steps=3000)
            ]
            wl = replace(wl, session=None)
        own = features_for(cfgs, wl)
        for variant in {own, ALL}:
            traced, fast, engines = run_both(cfgs, wl, lat, features=variant)
            for c, eng in enumerate(engines):
                assert_step_for_step(traced, fast, c, eng)
                oi = fast.state.out.counters[c]
                assert oi[S.O_INVARIANT_ERRORS] == 0
                s = seen[variant]
                s["cases"] += 1
                s["preempted"] += oi[S.O_PREEMPTIONS] > 0
                s["livelocked"] += oi[S.O_LIVELOCKED] > 0
                s["fast_path"] += oi[S.O_MACRO_STEPS] > 0
                with_caching[variant] += cfgs[c].enable_prefix_caching
    for variant, counts in seen.items():
        assert min(counts.values()) >= 10, f"variant {variant} rarely exercised: {seen}"
    # each variant also with the prefix cache argument (the other compile-time choice)
    assert min(with_caching.values()) >= 10, with_caching


def test_simulate_refuses_a_variant_without_a_feature_its_configs_use():
    wl = _workload(False)
    with pytest.raises(ValueError, match="lack"):
        simulate([SchedulerConfig(num_gpu_blocks=100, async_scheduling=True)], wl, features=PLAIN)
    with pytest.raises(ValueError, match="lack"):
        spec = Speculation("ngram", 2, (0.7,))
        simulate([SchedulerConfig(num_gpu_blocks=100, speculation=spec)], wl, features=EXTRAS)
    with pytest.raises(ValueError, match="not a kernel variant"):  # heavy without extras
        simulate([SchedulerConfig(num_gpu_blocks=100)], wl, features=type(PLAIN)(None, True))


def test_a_sweep_over_several_workloads_takes_the_markers_of_any():
    plain = SchedulerConfig(num_gpu_blocks=100)
    assert features_for([plain], [_workload(False), _workload(True)]) == EXTRAS
    assert features_for([plain], [_workload(False), _workload(False)]) == PLAIN
    assert features_for([plain], []) == PLAIN


def test_measured_step_times_turn_the_marker_on_where_the_latency_is_given():
    """A measured table's interpolation is compiled only into the extras
    variant (``step._measured_step_ns_if``), so the markers follow the
    latency: a caller that computes them once for several calls (max-rate,
    sensitivity, sweeps) must pass it, or its kernel would lack the table
    code and ``simulate`` refuses it. A max-rate search with measured step
    times runs its rounds on one kernel."""
    from test_measured import synthetic_latency

    from planner.maxrate.search import SearchRange, search_max_rate
    from planner.slo import SLO

    cfg = SchedulerConfig(num_gpu_blocks=100)
    wl = _workload(False)
    lat = synthetic_latency()
    assert features_for([cfg], wl) == PLAIN
    assert features_for([cfg], wl, lat) == EXTRAS
    assert features_for([cfg, cfg], wl, [lat, lat]) == EXTRAS
    with pytest.raises(ValueError, match="lack what these configs use"):
        simulate([cfg], wl, lat, features=PLAIN)
    found = search_max_rate([cfg], wl, lat, SLO(), SearchRange(lo=0.5, hi=2.0))
    assert np.isfinite(found.table["max_rate_scale"].iloc[0])


def test_the_compile_estimate_covers_every_variant():
    """``api.compile_note`` looks the variant up in ``PROBES_PER_KERNEL``: a
    variant without a calibrated ratio would fail the first run that needs it."""
    from planner.kernel.compile_time import PROBES_PER_KERNEL
    from planner.kernel.variant import level

    assert set(PROBES_PER_KERNEL) == {(c, level(v)) for c in (False, True) for v in VARIANTS}
    with pytest.raises(ValueError):
        level(type(PLAIN)(None, True))  # heavy without extras: features_of never returns it
