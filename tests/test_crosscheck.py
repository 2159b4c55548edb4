"""The jitted kernel against the plain reference engine on random small cases.

Each hypothesis example draws one workload and three configurations; the
kernel must match the reference step for step (traced mode) and in every final
output (fast-path mode), and satisfy the conservation invariants.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import (
    assert_step_for_step,
    compare_final,
    kernel_events,
    kernel_log,
    kernel_trace_rows,
    reference_events,
    reference_log,
    reference_trace_rows,
    run_both,
    run_reference,
    uniform,
)
from planner.config import BLIS_IMPLIED, SchedulerConfig
from planner.kernel import state as S
from planner.kv_transfer import KVTransfer
from planner.latency.step_time import LinearLatency, RooflineLatency
from planner.models.hardware import GPUS, MODELS
from planner.speculative import Speculation
from planner.workload.arrays import Workload

MAX_STEPS = 3000


@st.composite
def configs(draw):
    null_block = draw(st.booleans())
    n = draw(st.integers(2, 60))
    horizon = draw(st.one_of(st.just(float("inf")), st.floats(0.001, 2.0)))
    mode = draw(st.sampled_from(["recompute", "recompute", "restart", "swap", "blis"]))
    blis = mode == "blis"
    caching = mode == "recompute" and draw(st.booleans())
    stop = draw(st.sampled_from(["max_model_len", "max_servable"]))
    # Sliding window (with or without prefix caching; not with swap or the
    # max_servable bound, which it refuses): windows of one token, inside a
    # block, across blocks and longer than most requests.
    plain = mode == "swap" or stop == "max_servable"
    window = 0 if plain else draw(st.sampled_from([0, 0, 1, 3, 8, 17, 40, 100]))
    # KV cache groups: all sliding, or hybrids of full and sliding groups
    full_g, window_g = (
        draw(st.sampled_from([(0, 1), (0, 1), (1, 1), (1, 3), (2, 1)])) if window else (1, 0)
    )
    cfg = (
        SchedulerConfig(
            num_gpu_blocks=n,
            block_size=draw(st.sampled_from([1, 2, 4, 8, 16])),
            max_num_seqs=draw(st.integers(1, 6)),
            max_num_batched_tokens=draw(st.integers(1, 300)),
            max_model_len=draw(st.integers(8, 400)),
            long_prefill_token_threshold=draw(st.sampled_from([0, 0, 1, 7, 32, 100])),
            watermark=draw(st.sampled_from([0.0, 0.0, 0.02, 0.1])),
            scheduler_reserve_full_isl=draw(st.booleans()),
            preemption_mode=mode,
            async_scheduling=mode == "recompute" and draw(st.booleans()),
            enable_prefix_caching=caching,
            sliding_window=window,
            full_attention_groups=full_g,
            sliding_window_groups=window_g,
            cpu_swap_blocks=draw(st.sampled_from([0, 5, 40, 1000])),
            swap_bandwidth_gbps=draw(st.sampled_from([1.0, 25.0])),
            stop_bound=stop,
            null_block=null_block,
            policy=draw(st.sampled_from(["fcfs", "fcfs", "priority"])),
            victim=draw(
                st.sampled_from(
                    [None, None, "youngest", "priority", "least_progress", "most_blocks"]
                )
            ),
            anti_starvation=draw(st.sampled_from([0, 0, 1, 3])),
            admission=draw(
                st.sampled_from(["vanilla", "vanilla", "projected", "projected_oracle"])
            ),
            adaptive_window=draw(st.sampled_from([0, 0, 1, 5, 40])),
            adaptive_threshold=draw(st.sampled_from([0, 2])),
            adaptive_step=draw(st.sampled_from([1, 3])),
            max_concurrency=(conc := draw(st.sampled_from([0, 0, 0, 1, 2, 3]))),
            think_time_s=draw(st.sampled_from([0.0, 0.0005, 0.02])) if conc else 0.0,
            horizon_s=horizon,
            max_steps=MAX_STEPS,
        )
        if not blis
        else None
    )
    if blis:
        cfg = SchedulerConfig(
            **_blis_fields(draw(st.booleans())),
            num_gpu_blocks=n,
            block_size=draw(st.sampled_from([1, 2, 4, 8, 16])),
            max_num_seqs=draw(st.integers(1, 6)),
            max_num_batched_tokens=draw(st.integers(1, 300)),
            max_model_len=draw(st.integers(8, 400)),
            long_prefill_token_threshold=draw(st.sampled_from([0, 0, 1, 7, 32, 100])),
            policy=draw(st.sampled_from(["fcfs", "fcfs", "priority"])),
            max_concurrency=(conc := draw(st.sampled_from([0, 0, 0, 1, 2, 3]))),
            think_time_s=draw(st.sampled_from([0.0, 0.0005, 0.02])) if conc else 0.0,
            horizon_s=horizon,
            max_steps=MAX_STEPS,
        )
    return _with_drafts(draw, cfg)


def _with_drafts(draw, cfg: SchedulerConfig) -> SchedulerConfig:
    """Speculative decoding on half of the configs that can take it
    (recompute, full attention, no adaptive cap or projected admission, a
    budget of at least 1 + k), with async scheduling, mitigations, closed
    loop and horizons."""
    able = cfg.compat == "vllm" and cfg.preemption_mode == "recompute"
    able = able and cfg.one_full_attention_group
    able = able and cfg.admission == "vanilla" and cfg.adaptive_window == 0
    if not able or not draw(st.booleans()):
        return cfg
    k = draw(st.integers(1, 4))
    if cfg.max_num_batched_tokens < 1 + k:
        return cfg
    rate = draw(st.sampled_from([0.0, 0.6, 1.0]))
    return replace(cfg, speculation=Speculation("ngram", k, (rate,), draw(st.integers(0, 3))))


def _blis_fields(defect: bool) -> dict:
    """compat blis, the fields it implies, and the defect switch."""
    return {**BLIS_IMPLIED, "compat": "blis", "blis_full_hit_defect": defect}


def _linear_for_compat(cfgs: list[SchedulerConfig], lat) -> list[SchedulerConfig]:
    """compat blis needs the linear model: with another, its draws run vLLM's rules."""
    if isinstance(lat, LinearLatency):
        return cfgs
    vllm = dict(compat="vllm", blis_full_hit_defect=False, enable_prefix_caching=False)
    return [replace(c, **vllm) if c.compat == "blis" else c for c in cfgs]


@st.composite
def workloads(draw):
    r = draw(st.integers(1, 8))
    gaps = draw(st.lists(st.floats(0, 0.05), min_size=r, max_size=r))
    prompt = draw(st.lists(st.integers(1, 250), min_size=r, max_size=r))
    output = draw(st.lists(st.integers(1, 150), min_size=r, max_size=r))
    prio = draw(st.one_of(st.none(), st.lists(st.integers(0, 2), min_size=r, max_size=r)))
    groups = draw(st.one_of(st.none(), st.lists(st.integers(-1, 2), min_size=r, max_size=r)))
    plen = [draw(st.sampled_from([4, 16, 40, 100, 300])) for _ in range(r)]
    sess = draw(st.one_of(st.none(), st.lists(st.integers(0, 2), min_size=r, max_size=r)))
    if sess is not None:
        groups = None  # sessions share their own history
    return Workload(
        np.cumsum(gaps),
        np.array(prompt, np.int32),
        np.array(output, np.int32),
        name="random",
        priority=None if prio is None else np.array(prio),
        prefix_group=None if groups is None else np.array(groups, np.int32),
        prefix_len=None if groups is None else np.array(plen, np.int32),
        session=None if sess is None else np.array(sess, np.int32),
    )


def _open_loop_for_sessions(cfgs: list[SchedulerConfig], wl: Workload) -> list[SchedulerConfig]:
    """Sessions pace themselves: no closed-loop cap with them (api refuses it)."""
    if wl.session is None:
        return cfgs
    return [replace(c, max_concurrency=0) for c in cfgs]


latencies = st.one_of(
    st.builds(
        LinearLatency,
        alpha=st.tuples(st.integers(0, 2000), st.integers(0, 20), st.integers(0, 5000)),
        beta=st.tuples(st.integers(1, 8000), st.integers(0, 30), st.integers(0, 10)),
    ),
    st.builds(
        RooflineLatency,
        model=st.sampled_from(sorted(MODELS)),
        gpu=st.sampled_from(sorted(GPUS)),
        tp=st.sampled_from([1, 2, 8]),
        mfu=st.floats(0.05, 1.0),
        mbu=st.floats(0.05, 1.0),
        overhead_us=st.sampled_from([0.0, 150.0]),
        alpha=st.tuples(st.integers(0, 500), st.integers(0, 5), st.integers(0, 500)),
    ),
)


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(cfgs=st.lists(configs(), min_size=2, max_size=2), wl=workloads(), lat=latencies)
def test_kernel_matches_reference(cfgs, wl, lat):
    cfgs = _linear_for_compat(_open_loop_for_sessions(cfgs, wl), lat)
    traced, fast, engines = run_both(cfgs, wl, lat)
    for c, eng in enumerate(engines):
        assert_step_for_step(traced, fast, c, eng)
        for res in (traced, fast):
            oi = res.state.out.counters[c]
            # Block conservation at every step (counted inside the kernel).
            assert oi[S.O_INVARIANT_ERRORS] == 0
            # Request conservation.
            assert (
                oi[S.O_FINISHED] + oi[S.O_RUNNING_END] + oi[S.O_WAITING_END] + oi[S.O_REJECTED]
                == oi[S.O_ARRIVED]
            )
            # Termination: the run stopped for a stated reason.
            assert oi[S.O_STEPS] <= MAX_STEPS
        # Blocks in use + free = usable, step by step, from the reference's pool.
        assert all(s.free >= 0 for s in eng.steps)


def _random_case(rng: np.random.Generator, wrng: np.random.Generator):
    r = int(rng.integers(1, 10))
    sessions = rng.random() < 0.3
    prompt = rng.integers(1, 300, r)
    output = rng.integers(1, 200, r)
    sid = np.sort(rng.integers(0, 3, r))
    if sessions:  # a turn's prompt holds its session's history, as workload.sessions builds
        prompt = rng.integers(1, 60, r)
        output = rng.integers(1, 60, r)
        for i in range(1, r):
            if sid[i] == sid[i - 1]:
                prompt[i] += prompt[i - 1] + output[i - 1]
    wl = Workload(
        np.cumsum(rng.uniform(0, 0.02, r)),
        prompt.astype(np.int32),
        output.astype(np.int32),
        name="seeded",
        priority=rng.integers(0, 3, r) if rng.random() < 0.5 else None,
        prefix_group=None if sessions else rng.integers(-1, 3, r).astype(np.int32),
        prefix_len=None if sessions else rng.choice([16, 64, 200], r).astype(np.int32),
        session=sid.astype(np.int32) if sessions else None,
    )
    kinds = ["recompute", "recompute", "restart", "swap", "blis"]
    modes = [str(rng.choice(kinds)) for _ in range(4)]
    cfgs = [
        _blis_case(rng)
        if mode == "blis"
        else SchedulerConfig(
            num_gpu_blocks=int(rng.integers(2, 80)),
            block_size=int(rng.choice([1, 4, 16])),
            max_num_seqs=int(rng.integers(1, 8)),
            max_num_batched_tokens=int(rng.integers(1, 512)),
            max_model_len=int(rng.integers(8, 600)),
            long_prefill_token_threshold=int(rng.choice([0, 0, 16, 64])),
            watermark=float(rng.choice([0.0, 0.0, 0.05])),
            scheduler_reserve_full_isl=bool(rng.random() < 0.7),
            preemption_mode=mode,
            async_scheduling=mode == "recompute" and bool(rng.random() < 0.5),
            enable_prefix_caching=mode == "recompute" and bool(rng.random() < 0.5),
            cpu_swap_blocks=int(rng.choice([0, 8, 500])),
            stop_bound=str(rng.choice(["max_model_len", "max_servable"])),
            null_block=bool(rng.random() < 0.8),
            policy=str(rng.choice(["fcfs", "priority"])),
            victim=[None, "youngest", "priority", "least_progress", "most_blocks"][
                int(rng.integers(0, 5))
            ],
            anti_starvation=int(rng.choice([0, 0, 2])),
            admission=str(rng.choice(["vanilla", "vanilla", "projected_oracle", "projected"])),
            adaptive_window=int(rng.choice([0, 0, 3, 25])),
            adaptive_threshold=int(rng.choice([0, 1])),
            horizon_s=float(rng.choice([np.inf, rng.uniform(0.005, 1.0)])),
            max_steps=MAX_STEPS,
            max_concurrency=(conc := int(rng.choice([0, 0, 0, 1, 2, 4]))),
            think_time_s=float(rng.choice([0.0, 0.001])) if conc else 0.0,
        )
        for mode in modes
    ]
    cfgs = [_with_window(wrng, c) for c in cfgs]
    cfgs = _open_loop_for_sessions(cfgs, wl)
    if rng.random() < 0.3:
        roof = RooflineLatency(
            str(rng.choice(sorted(MODELS))),
            str(rng.choice(sorted(GPUS))),
            tp=int(rng.choice([1, 4])),
            mfu=float(rng.uniform(0.1, 0.9)),
            overhead_us=float(rng.choice([0.0, 500.0])),
        )
        return _linear_for_compat(cfgs, roof), wl, roof
    lat = LinearLatency(
        alpha=(
            float(rng.integers(0, 500)),
            float(rng.integers(0, 5)),
            float(rng.integers(0, 3000)),
        ),
        beta=(
            float(rng.integers(100, 6000)),
            float(rng.integers(0, 20)),
            float(rng.integers(0, 8)),
        ),
    )
    return cfgs, wl, lat


def _with_window(
    rng: np.random.Generator, cfg: SchedulerConfig, always: bool = False
) -> SchedulerConfig:
    """Seven in ten configs that allow one get a sliding window (not with swap,
    which the config refuses, nor with prefix caching, which
    ``test_seeded_window_caching_cases_match_the_reference`` covers, so the
    caching configs keep the decode fast path; the
    max_servable bound, also refused, gives way to max_model_len), half of those a
    pool of at most 24 blocks and half the whole-sequence gate off (a window
    lowers the pressure: this keeps preemptions common). ``rng`` is its own
    stream, so the other draws stay as they were."""
    skip = cfg.enable_prefix_caching or cfg.preemption_mode == "swap"
    if skip or (not always and rng.random() < 0.3):
        return cfg
    window = int(rng.choice([1, 5, 16, 33, 64, 150]))
    full_g, window_g = [(0, 1), (0, 1), (1, 1), (1, 2), (2, 1), (1, 1)][int(rng.integers(0, 6))]
    small = rng.random() < 0.5
    n = min(cfg.num_gpu_blocks, int(rng.integers(2, 25))) if small else cfg.num_gpu_blocks
    gate = cfg.scheduler_reserve_full_isl and rng.random() < 0.5
    return replace(
        cfg,
        sliding_window=window,
        full_attention_groups=full_g,
        sliding_window_groups=window_g,
        num_gpu_blocks=n * (full_g + window_g),
        scheduler_reserve_full_isl=gate,
        stop_bound="max_model_len",
    )


def _blis_case(rng: np.random.Generator) -> SchedulerConfig:
    """A compat blis config (the defect switch half the time) with random other fields."""
    return SchedulerConfig(
        **_blis_fields(bool(rng.random() < 0.5)),
        num_gpu_blocks=int(rng.integers(2, 80)),
        block_size=int(rng.choice([1, 4, 16])),
        max_num_seqs=int(rng.integers(1, 8)),
        max_num_batched_tokens=int(rng.integers(1, 512)),
        max_model_len=int(rng.integers(8, 600)),
        long_prefill_token_threshold=int(rng.choice([0, 0, 16, 64])),
        policy=str(rng.choice(["fcfs", "priority"])),
        horizon_s=float(rng.choice([np.inf, rng.uniform(0.005, 1.0)])),
        max_steps=MAX_STEPS,
        max_concurrency=(conc := int(rng.choice([0, 0, 0, 1, 2, 4]))),
        think_time_s=float(rng.choice([0.0, 0.001])) if conc else 0.0,
    )


@pytest.mark.slow
def test_seeded_random_cases_cover_every_path():
    """320 seeded cases x 4 configs: kernel == reference, and the cases really
    exercise preemption, livelock, the horizon, rejection and the fast path."""
    rng = np.random.default_rng(20261130)
    wrng = np.random.default_rng(20261201)
    seen = dict(
        preempted=0,
        livelocked=0,
        horizon=0,
        rejected=0,
        fast_path=0,
        finished=0,
        priority=0,
        roofline_fast_path=0,
        async_preempted=0,
        async_fast_path=0,
        cache_hits=0,
        closed_loop_waited=0,
        session_turns_sent=0,
        session_hits=0,
        cache_fast_path=0,
        session_cache_fast_path=0,
        compat_preempted=0,
        compat_rehits=0,
        compat_zero_token=0,
        window_freed=0,
        window_preempted=0,
        window_async=0,
        hybrid_preempted=0,
        restart_fast_path=0,
        restart_livelocked=0,
    )
    for _ in range(320):
        cfgs, wl, lat = _random_case(rng, wrng)
        traced, fast, engines = run_both(cfgs, wl, lat)
        for c, eng in enumerate(engines):
            assert_step_for_step(traced, fast, c, eng)
            oi = fast.state.out.counters[c]
            seen["async_preempted"] += cfgs[c].async_scheduling and oi[S.O_PREEMPTIONS] > 0
            seen["async_fast_path"] += cfgs[c].async_scheduling and oi[S.O_MACRO_STEPS] > 0
            seen["cache_fast_path"] += cfgs[c].enable_prefix_caching and oi[S.O_MACRO_STEPS] > 0
            # A decode run hashing shared blocks (a session's output) is
            # replayed in step order (step._cache_run_kind 2).
            seen["session_cache_fast_path"] += (
                cfgs[c].enable_prefix_caching and wl.session is not None and oi[S.O_MACRO_STEPS] > 0
            )
            seen["cache_hits"] += cfgs[c].enable_prefix_caching and any(
                a > 0 for s in eng.steps for _, a in s.admissions
            )
            assert oi[S.O_INVARIANT_ERRORS] == 0
            seen["preempted"] += oi[S.O_PREEMPTIONS] > 0
            seen["livelocked"] += oi[S.O_LIVELOCKED]
            seen["horizon"] += np.isfinite(cfgs[c].horizon_s) and (
                oi[S.O_RUNNING_END] + oi[S.O_WAITING_END] > 0
            )
            seen["rejected"] += oi[S.O_REJECTED] > 0
            seen["fast_path"] += oi[S.O_MACRO_STEPS] > 0
            seen["finished"] += oi[S.O_FINISHED] > 0
            later = wl.next_turn()[wl.next_turn() >= 0]
            seen["session_turns_sent"] += bool(np.any(fast.state.req.first_ns[c, later] >= 0))
            seen["session_hits"] += wl.session is not None and any(
                a > 0 for s in eng.steps for _, a in s.admissions
            )
            seen["closed_loop_waited"] += cfgs[c].max_concurrency > 0 and bool(
                np.any(fast.arrival_ns[c] > np.round(wl.arrival_s * 1e9))
            )
            seen["priority"] += cfgs[c].policy == "priority" and oi[S.O_PREEMPTIONS] > 0
            blis = cfgs[c].compat == "blis"
            seen["compat_preempted"] += blis and oi[S.O_PREEMPTIONS] > 0
            seen["compat_rehits"] += blis and any(a > 0 for s in eng.steps for _, a in s.admissions)
            seen["compat_zero_token"] += blis and any(
                n == 0 for s in eng.steps for _, n in s.per_request
            )
            windowed = cfgs[c].sliding_window > 0
            seen["window_preempted"] += windowed and oi[S.O_PREEMPTIONS] > 0
            seen["window_async"] += windowed and cfgs[c].async_scheduling
            hybrid = cfgs[c].full_attention_groups > 0 and windowed
            seen["hybrid_preempted"] += hybrid and oi[S.O_PREEMPTIONS] > 0
            seen["window_freed"] += windowed and eng.sched.kv.window_freed > 0
            seen["roofline_fast_path"] += (
                isinstance(lat, RooflineLatency) and oi[S.O_MACRO_STEPS] > 0
            )
            # restart preemption takes the fast path while requests can arrive
            restart = cfgs[c].preemption_mode == "restart"
            seen["restart_fast_path"] += restart and oi[S.O_MACRO_STEPS] > 0
            seen["restart_livelocked"] += restart and oi[S.O_LIVELOCKED] > 0
    for path, count in seen.items():
        assert count >= 20, f"random cases rarely reach {path}: {seen}"


@pytest.mark.slow
def test_priority_victim_refund_under_tight_budgets():
    """Priority preemption of a request that already ran this step refunds its
    tokens: tight token budgets and pools make that refund visible."""
    rng = np.random.default_rng(7)
    refunds_seen = 0
    for _ in range(300):
        r = int(rng.integers(3, 9))
        wl = Workload(
            np.cumsum(rng.uniform(0, 0.003, r)),
            rng.integers(1, 60, r).astype(np.int32),
            rng.integers(5, 80, r).astype(np.int32),
            name="tight",
            priority=rng.integers(0, 3, r),
        )
        cfg = SchedulerConfig(
            num_gpu_blocks=int(rng.integers(8, 30)),
            block_size=4,
            max_num_seqs=int(rng.integers(2, 6)),
            max_num_batched_tokens=int(rng.integers(2, 40)),
            max_model_len=400,
            policy="priority",
            scheduler_reserve_full_isl=bool(rng.random() < 0.5),
            max_steps=MAX_STEPS,
        )
        lat = LinearLatency(alpha=(0, 0, 0), beta=(1000, 1, 1))
        traced, fast, (eng,) = run_both([cfg], wl, lat)
        assert kernel_log(traced, 0) == reference_log(eng)
        assert kernel_trace_rows(traced, 0) == reference_trace_rows(eng)
        compare_final(fast, 0, eng)
        refunds_seen += eng.sched.refunds
    assert refunds_seen >= 20


def test_priority_victim_skipped_by_async_is_not_refunded():
    """Async skips a running request whose last token is in flight; if the
    priority rule then evicts it, nothing it scheduled this step is refunded
    (found by hypothesis: the kernel refunded a stale token count)."""
    cfg = SchedulerConfig(
        num_gpu_blocks=2,
        block_size=1,
        max_num_seqs=2,
        max_num_batched_tokens=2,
        max_model_len=8,
        scheduler_reserve_full_isl=False,
        null_block=False,
        victim="priority",
        async_scheduling=True,
        max_steps=MAX_STEPS,
    )
    wl = Workload(np.zeros(2), np.array([1, 1], np.int32), np.array([1, 2], np.int32))
    lat = LinearLatency(alpha=(0, 0, 0), beta=(1, 0, 0))
    traced, fast, (eng,) = run_both([cfg], wl, lat)
    assert kernel_events(traced, 0) == reference_events(eng)
    compare_final(fast, 0, eng)
    assert eng.preemptions > 0 and eng.sched.refunds == 0


@pytest.mark.slow
def test_preempted_requests_rehit_their_own_blocks():
    """With prefix caching and no shared prefixes, a request's blocks are
    private: the kernel enters them into its hash map only when the request
    is preempted (``prefix_cache.publish``), so its re-admission hits them as
    vLLM's would. Seeded tight pools: kernel (fast path on and off) ==
    reference, and the cases really re-hit and take decode runs."""
    rng = np.random.default_rng(20261201)
    rehits = runs = 0
    for _ in range(40):
        r = int(rng.integers(4, 16))
        bs = int(rng.choice([1, 4, 16]))
        wl = Workload(
            arrival_s=np.sort(rng.uniform(0, 0.02, r)),
            prompt_tokens=rng.integers(8, 120, r).astype(np.int32),
            output_tokens=rng.integers(8, 160, r).astype(np.int32),
            name="private",
        )
        longest = int((wl.prompt_tokens + wl.output_tokens).max())
        cfgs = [
            SchedulerConfig(
                num_gpu_blocks=-(-longest // bs) + int(rng.integers(1, 3 * 280 // bs + 2)),
                block_size=bs,
                max_num_seqs=int(rng.integers(2, 9)),
                max_num_batched_tokens=int(rng.choice([64, 512])),
                max_model_len=longest,
                enable_prefix_caching=True,
                max_steps=MAX_STEPS,
            )
            for _ in range(2)
        ]
        traced, fast, engines = run_both(cfgs, wl, LinearLatency())
        for c, eng in enumerate(engines):
            compare_final(traced, c, eng)
            compare_final(fast, c, eng)
            rehits += any(a > 0 for s in eng.steps for _, a in s.admissions)
            runs += fast.state.out.counters[c, S.O_MACRO_STEPS] > 0
    assert rehits >= 20 and runs >= 20, (rehits, runs)


@pytest.mark.parametrize("caching", [False, True])
def test_block_sizes_beyond_the_fast_path_match_the_reference(caching):
    """Above ``FAST_PATH_MAX_BLOCK_SIZE`` the decode fast path (O(block_size) per
    call) is off and the steps are taken one by one: the same result as the
    reference, at a block size just above the cap and at the int32 maximum
    (which made ``plan run --block-size 2147483647`` spin for hours)."""
    rng = np.random.default_rng(7)
    r = 12
    wl = Workload(
        arrival_s=np.sort(rng.uniform(0, 0.02, r)),
        prompt_tokens=rng.integers(8, 120, r).astype(np.int32),
        output_tokens=rng.integers(8, 160, r).astype(np.int32),
        name="big-blocks",
    )
    for bs in (S.FAST_PATH_MAX_BLOCK_SIZE + 1, 2**31 - 1):
        cfgs = [
            SchedulerConfig(
                num_gpu_blocks=n, block_size=bs, max_num_seqs=4, max_num_batched_tokens=256,
                max_model_len=512, enable_prefix_caching=caching, max_steps=MAX_STEPS,
            )
            for n in (3, 6)
        ]  # fmt: skip
        traced, fast, engines = run_both(cfgs, wl, LinearLatency())
        for c, eng in enumerate(engines):
            compare_final(traced, c, eng)
            compare_final(fast, c, eng)
            assert fast.state.out.counters[c, S.O_MACRO_STEPS] == 0  # no fast-path run
            assert fast.state.out.counters[c, S.O_FINISHED] == r


def _decode_side_case(rng: np.random.Generator):
    """A random disaggregated decode side: remote and local requests, loads
    from instant to slower than many steps, pools from tight to ample,
    prefix caching in half, linear or roofline step time."""
    r = int(rng.integers(1, 14))
    wl = Workload(
        np.cumsum(rng.uniform(0, 0.02, r)),
        rng.integers(1, 300, r).astype(np.int32),
        rng.integers(1, 150, r).astype(np.int32),
        name="decode side",
        priority=rng.integers(0, 3, r) if rng.random() < 0.4 else None,
        prefix_group=rng.integers(-1, 3, r).astype(np.int32),
        prefix_len=rng.choice([16, 64, 200], r).astype(np.int32),
        remote=rng.random(r) < 0.75,
    )
    cfgs = [_pd_config(rng) for _ in range(3)]
    if rng.random() < 0.3:
        lat = RooflineLatency("llama-3.1-8b", "H100", mfu=0.5, overhead_us=100.0)
    else:
        lat = LinearLatency(
            alpha=(100.0, 1.0, 0.0), beta=(float(rng.integers(100, 6000)), 10.0, 2.0)
        )
    return cfgs, wl, lat


def _pd_config(rng: np.random.Generator, **kw) -> SchedulerConfig:  # noqa: ANN003
    """A random server of either side of disaggregated prefill/decode: pools
    from tight to ample, sync or async, caching in half, a KV transfer from
    instant to slow (``kw`` overrides; the draws come in a fixed order, which
    the seeded cases depend on)."""
    fields = dict(
        num_gpu_blocks=int(rng.integers(2, 90)),
        block_size=int(rng.choice([1, 4, 16])),
        max_num_seqs=int(rng.integers(1, 8)),
        max_num_batched_tokens=int(rng.integers(1, 512)),
        max_model_len=int(rng.integers(8, 600)),
        long_prefill_token_threshold=int(rng.choice([0, 0, 16, 64])),
        watermark=float(rng.choice([0.0, 0.0, 0.05])),
        scheduler_reserve_full_isl=bool(rng.random() < 0.7),
        async_scheduling=bool(rng.random() < 0.5),
        enable_prefix_caching=bool(rng.random() < 0.5),
        null_block=bool(rng.random() < 0.8),
        policy=str(rng.choice(["fcfs", "priority"])),
        anti_starvation=int(rng.choice([0, 0, 2])),
        horizon_s=float(rng.choice([np.inf, rng.uniform(0.005, 1.0)])),
        max_steps=MAX_STEPS,
        kv_transfer=KVTransfer(
            int(rng.choice([0, 1_000, 200_000])), int(rng.choice([0, 5_000, 2_000_000]))
        ),
    )
    return SchedulerConfig(**(fields | kw))


def _matched_without_errors(cfgs, wl, lat):  # noqa: ANN001, ANN202
    """Run ``cfgs`` on both engines, assert them equal step for step and the
    kernel's blocks conserved; yield (config index, reference engine, the
    kernel's counters) for each config."""
    traced, fast, engines = run_both(cfgs, wl, lat)
    for c, eng in enumerate(engines):
        assert_step_for_step(traced, fast, c, eng)
        oi = fast.state.out.counters[c]
        assert oi[S.O_INVARIANT_ERRORS] == 0
        yield c, eng, oi


@pytest.mark.slow  # 6.5 s; the pd_* goldens run in the fast subset
def test_seeded_decode_side_cases_match_the_reference():
    """150 seeded disaggregated decode sides x 3 configs: kernel == reference
    step for step, blocks conserved, and the cases reach loads that wait for
    blocks, loads that land while nothing runs, preemption after a load,
    prefix hits shortening loads, livelocks and the horizon, with sync and
    async scheduling (``defer_block_free``)."""
    rng = np.random.default_rng(20261206)
    seen = dict(loaded=0, waited=0, preempted=0, cache_hits=0, livelocked=0, horizon=0)
    seen.update(async_preempted=0, async_loaded=0)
    for _ in range(150):
        cfgs, wl, lat = _decode_side_case(rng)
        traced, fast, engines = run_both(cfgs, wl, lat)
        for c, eng in enumerate(engines):
            assert_step_for_step(traced, fast, c, eng)
            oi = fast.state.out.counters[c]
            assert oi[S.O_INVARIANT_ERRORS] == 0
            assert eng.invariant_errors == 0
            # remote requests whose load started (their PD_REMOTE flag cleared)
            loaded = wl.remote & ((fast.state.remote.pd[c] & S.PD_REMOTE) == 0)
            seen["loaded"] += bool(np.any(loaded))
            seen["waited"] += oi[S.O_ZERO_STEPS] > 0 and not oi[S.O_LIVELOCKED]
            seen["preempted"] += bool(np.any(loaded & (fast.state.req.npre[c] > 0)))
            seen["cache_hits"] += cfgs[c].enable_prefix_caching and oi[S.O_PC_HITS] > 0
            seen["livelocked"] += oi[S.O_LIVELOCKED]
            seen["async_loaded"] += cfgs[c].async_scheduling and bool(np.any(loaded))
            seen["async_preempted"] += cfgs[c].async_scheduling and oi[S.O_PREEMPTIONS] > 0
            seen["horizon"] += np.isfinite(cfgs[c].horizon_s) and (
                oi[S.O_RUNNING_END] + oi[S.O_WAITING_END] + oi[S.O_HOLD_LEN] > 0
            )
    for path, count in seen.items():
        assert count >= 10, f"random decode sides rarely reach {path}: {seen}"


@pytest.mark.slow
def test_seeded_window_caching_cases_match_the_reference():
    """Prefix caching on sliding-window and hybrid configs (vLLM's
    ``HybridKVCacheCoordinator`` rules): 600 seeded cases of the random
    generator's recompute configs, each given caching and a window; kernel ==
    reference step for step, and the cases reach hits (sync and async,
    sliding-only and hybrid), preemption and livelock."""
    rng = np.random.default_rng(20261210)
    wrng = np.random.default_rng(20261211)
    seen = dict(hits=0, async_hits=0, hybrid_hits=0, sliding_only_hits=0, preempted=0)
    seen.update(livelocked=0)
    for _ in range(600):
        cfgs, wl, lat = _random_case(rng, wrng)
        cfgs = [
            _with_window(wrng, replace(c, enable_prefix_caching=False), always=True)
            for c in cfgs
            if c.compat == "vllm" and c.preemption_mode == "recompute"
        ]
        cfgs = [replace(c, enable_prefix_caching=True) for c in cfgs]
        if not cfgs:
            continue
        for c, eng, oi in _matched_without_errors(cfgs, wl, lat):
            hit = any(a > 0 for s in eng.steps for _, a in s.admissions)
            seen["hits"] += hit
            seen["async_hits"] += hit and cfgs[c].async_scheduling
            seen["hybrid_hits"] += hit and cfgs[c].full_attention_groups > 0
            seen["sliding_only_hits"] += hit and cfgs[c].full_attention_groups == 0
            seen["preempted"] += oi[S.O_PREEMPTIONS] > 0
            seen["livelocked"] += oi[S.O_LIVELOCKED]
    for path, count in seen.items():
        assert count >= 10, f"window caching cases rarely reach {path}: {seen}"


@pytest.mark.slow
def test_seeded_mamba_cases_match_the_reference():
    """Mamba groups (``mamba_cache_mode`` "none", prefix caching off) beside
    one or two full-attention groups: 300 seeded cases of the random
    generator's recompute configs; kernel == reference step for step, blocks
    conserved, and the cases reach preemption, livelock and async."""
    rng = np.random.default_rng(20261212)
    wrng = np.random.default_rng(20261213)
    seen = dict(preempted=0, livelocked=0, async_=0, two_full=0)
    for _ in range(300):
        cfgs, wl, lat = _random_case(rng, wrng)
        cfgs = [
            replace(
                c,
                enable_prefix_caching=False,
                sliding_window=0,
                sliding_window_groups=0,
                full_attention_groups=(full := int(wrng.choice([1, 1, 2]))),
                mamba_groups=(m := int(wrng.choice([1, 2, 3, 6]))),
                num_gpu_blocks=min(c.num_gpu_blocks, 30) * full + m * int(wrng.integers(0, 6)),
                stop_bound="max_model_len",
            )
            for c in cfgs
            if c.compat == "vllm" and c.preemption_mode == "recompute"
        ]
        cfgs = [c for c in cfgs if c.num_gpu_blocks >= 2]
        if not cfgs:
            continue
        for c, _eng, oi in _matched_without_errors(cfgs, wl, lat):
            seen["preempted"] += oi[S.O_PREEMPTIONS] > 0
            seen["livelocked"] += oi[S.O_LIVELOCKED]
            seen["async_"] += cfgs[c].async_scheduling and oi[S.O_PREEMPTIONS] > 0
            seen["two_full"] += cfgs[c].full_attention_groups == 2
    for path, count in seen.items():
        assert count >= 10, f"Mamba cases rarely reach {path}: {seen}"


def _prefill_side_case(rng: np.random.Generator):
    """A random disaggregated prefill side: most requests end after one token
    and keep their blocks until the decode side's read ends (from before
    they finish to longer than many steps after), some are not read (-1);
    pools from tight to
    ample, prefix caching in half, sync and async."""
    r = int(rng.integers(1, 14))
    arrival = np.cumsum(rng.uniform(0, 0.02, r))
    after = rng.choice([0, 2_000, 50_000, 2_000_000, 30_000_000, 90_000_000], r)
    read = np.round(arrival * 1e9).astype(np.int64) + after
    wl = Workload(
        arrival,
        rng.integers(1, 300, r).astype(np.int32),
        np.where(rng.random(r) < 0.8, 1, rng.integers(1, 40, r)).astype(np.int32),
        name="prefill side",
        priority=rng.integers(0, 3, r) if rng.random() < 0.4 else None,
        prefix_group=rng.integers(-1, 3, r).astype(np.int32),
        prefix_len=rng.choice([16, 64, 200], r).astype(np.int32),
        read_end_ns=np.where(rng.random(r) < 0.85, read, -1),
    )
    cfgs = [_with_ngram(rng, _pd_config(rng)) for _ in range(3)]
    lat = LinearLatency(alpha=(100.0, 1.0, 0.0), beta=(float(rng.integers(100, 6000)), 10.0, 2.0))
    return cfgs, wl, lat


def _with_ngram(rng: np.random.Generator, cfg: SchedulerConfig) -> SchedulerConfig:
    """``cfg`` with n-gram drafts (k of 1-3, acceptance 0.9) in 3 of 10 draws,
    its token budget raised to hold one request's token and its drafts."""
    if rng.random() >= 0.3:
        return cfg
    spec = Speculation("ngram", int(rng.integers(1, 4)), (0.9,), int(rng.integers(0, 4)))
    mnbt = max(cfg.max_num_batched_tokens, 1 + spec.num_speculative_tokens)
    return replace(cfg, speculation=spec, max_num_batched_tokens=mnbt)


@pytest.mark.slow  # 4.3 s; the pd_prefill goldens run in the fast subset
def test_seeded_prefill_side_cases_match_the_reference():
    """150 seeded disaggregated prefill sides x 3 configs: kernel == reference
    step for step with blocks held for the decode side's read
    (``kernel/kv_send.py``), blocks conserved, and the cases reach steps that
    wait for a read, holds under async scheduling, prefix hits on held
    blocks, and livelocks and the horizon."""
    rng = np.random.default_rng(20261207)
    seen = dict(held=0, waited=0, async_held=0, cache_hits=0, livelocked=0, horizon=0)
    for _ in range(150):
        cfgs, wl, lat = _prefill_side_case(rng)
        for c, eng, oi in _matched_without_errors(cfgs, wl, lat):
            assert eng.invariant_errors == 0
            assert oi[S.O_SEND_LEN] == 0 or np.isfinite(cfgs[c].horizon_s)
            seen["held"] += oi[S.O_SEND_PEAK] > 0
            seen["waited"] += oi[S.O_ZERO_STEPS] > 0 and not oi[S.O_LIVELOCKED]
            seen["async_held"] += cfgs[c].async_scheduling and oi[S.O_SEND_PEAK] > 0
            seen["cache_hits"] += cfgs[c].enable_prefix_caching and oi[S.O_PC_HITS] > 0
            seen["livelocked"] += oi[S.O_LIVELOCKED]
            seen["horizon"] += np.isfinite(cfgs[c].horizon_s) and (
                oi[S.O_RUNNING_END] + oi[S.O_WAITING_END] + oi[S.O_SEND_LEN] > 0
            )
    for path, count in seen.items():
        assert count >= 10, f"random prefill sides rarely reach {path}: {seen}"


@pytest.mark.parametrize("fault", ["leak", "double_free", "lost_block"])
def test_the_reference_conservation_check_catches_a_broken_pool(monkeypatch, fault):
    """The reference engine's per-step conservation recount (blocks held by
    requests == sum of ref counts; blocks in use + free == usable; no count
    below 0) flags a pool that leaks a reference, frees one twice or loses a
    free block, and stays at 0 on the same run with the pool intact."""
    from planner import reference as R

    cfg = SchedulerConfig(num_gpu_blocks=40, max_num_seqs=4, max_num_batched_tokens=64)
    wl = uniform(6, 40, 30)
    assert run_reference(cfg, wl, LinearLatency()).invariant_errors == 0
    real_free = R.BlockPool.free_blocks

    def broken(self, ordered):  # noqa: ANN001, ANN202
        if fault == "leak":
            self.ref_cnt[ordered[0]] += 1  # one reference never dropped
        elif fault == "double_free":
            self.ref_cnt[ordered[0]] -= 1
        real_free(self, ordered)
        if fault == "lost_block" and self.free_queue:
            self.free_queue.popitem(last=True)  # a free block vanishes

    monkeypatch.setattr(R.BlockPool, "free_blocks", broken)
    assert run_reference(cfg, wl, LinearLatency()).invariant_errors > 0
