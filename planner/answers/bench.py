"""``plan bench``: kernel speed on scenario S1, printed, never asserted.

Figures: JIT compile (or cache load) time, then one call over a
max_num_seqs x num_gpu_blocks grid (8..1024 x 2,000..60,000, linear steps),
reporting configs/s and simulated output tokens per CPU-second. "Simulated
output tokens" counts decode tokens scheduled (each samples one output token);
first tokens sampled at the end of a prefill are not counted, so the figure is
a slight underestimate. CPU time is the process's (all threads).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from planner.api import simulate
from planner.config import SchedulerConfig
from planner.kernel import state as S
from planner.latency.step_time import LinearLatency
from planner.workload.arrays import S1_OUTPUT, S1_PROMPT, Workload, synthetic


def s1_workload(seed: int = 0):  # noqa: ANN201
    """Scenario S1's synthetic workload (shared/docs/scenarios.md)."""
    return synthetic(
        300,
        10.0,
        S1_PROMPT,
        S1_OUTPUT,
        seed=seed,
    )


def s1_grid(side: int, **options: bool) -> list[SchedulerConfig]:
    """side x side configs: max_num_seqs 8..1024 x num_gpu_blocks 2,000..60,000.

    ``options``: extra ``SchedulerConfig`` switches (async_scheduling,
    enable_prefix_caching) applied to every config."""
    seqs = np.unique(np.linspace(8, 1024, side).round().astype(int))
    blocks = np.unique(np.linspace(2000, 60000, side).round().astype(int))
    return [
        SchedulerConfig(
            num_gpu_blocks=int(n),
            max_num_seqs=int(s),
            max_model_len=4096,
            max_num_batched_tokens=2048,
            horizon_s=120.0,
            **options,
        )
        for s in seqs
        for n in blocks
    ]


def run_bench(side: int, with_reference: bool, **options: bool) -> dict[str, float]:
    """Run the benchmark, print a report, return the figures. ``options`` as in
    ``s1_grid``. With enable_prefix_caching it also times the same grid
    without caching and prints the cost ratio (plain / caching output tokens
    per CPU-second, issue 17's measure)."""
    wl = s1_workload()
    lat = LinearLatency()
    t0 = time.perf_counter()
    warm_variants(wl, lat, **options)
    compile_s = time.perf_counter() - t0

    cfgs = s1_grid(side, **options)
    wall, cpu, tokens, steps = time_grid(cfgs, wl, lat)
    fig = {
        "configs": len(cfgs),
        "compile_or_cache_load_s": compile_s,
        "wall_s": wall,
        "cpu_s": cpu,
        "configs_per_s": len(cfgs) / wall,
        "sim_output_tokens": tokens,
        "sim_steps": steps,
        "tokens_per_cpu_s": tokens / cpu,
        "tokens_per_wall_s": tokens / wall,
    }
    print(f"JIT compile / cache load:      {compile_s:8.2f} s")
    print(f"S1 grid:                       {len(cfgs)} configs, 300 requests, horizon 120 s")
    print(f"options:                       {_options_text(options)}")
    print(f"wall / CPU time:               {wall:8.2f} s / {cpu:.2f} s")
    print(f"configs per second (wall):     {fig['configs_per_s']:10.1f}")
    print(f"simulated steps:               {steps:14,.0f}")
    print(f"simulated output tokens:       {tokens:14,.0f}")
    print(f"output tokens per CPU-second:  {fig['tokens_per_cpu_s'] / 1e6:10.1f} M")
    print(f"output tokens per wall-second: {fig['tokens_per_wall_s'] / 1e6:10.1f} M")
    if options.get("enable_prefix_caching"):
        plain = s1_grid(side, **{**options, "enable_prefix_caching": False})
        _, p_cpu, p_tokens, _ = time_grid(plain, wl, lat)
        fig["plain_tokens_per_cpu_s"] = p_tokens / p_cpu
        fig["caching_cost_ratio"] = fig["plain_tokens_per_cpu_s"] / fig["tokens_per_cpu_s"]
        print(f"same, without caching:         {fig['plain_tokens_per_cpu_s'] / 1e6:10.1f} M")
        print(f"caching / plain CPU per token: {fig['caching_cost_ratio']:10.2f}x")
    if with_reference:
        from planner.reference import Engine

        cfg = SchedulerConfig(max_num_seqs=32, max_model_len=4096, horizon_s=120.0)
        arr = np.round(wl.arrival_s * 1e9).astype(np.int64).tolist()
        r0 = time.process_time()
        eng = Engine(cfg, lat, arr, wl.prompt_tokens.tolist(), wl.output_tokens.tolist()).run()
        ref_cpu = time.process_time() - r0
        ref_tok = sum(s.decode for s in eng.steps)
        k0 = time.process_time()
        one = simulate([cfg], wl, lat)
        k_cpu = time.process_time() - k0
        k_tok = float(one.state.out.counters[0, S.O_DECODE_TOKENS])
        fig["reference_tokens_per_cpu_s"] = ref_tok / ref_cpu
        print(
            "reference engine (Python), S1 seqs 32, no options: "
            f"{ref_tok / ref_cpu / 1e6:8.3f} M tokens/CPU-s; "
            f"kernel on the same config: {k_tok / max(k_cpu, 1e-9) / 1e6:8.1f} M tokens/CPU-s"
        )
    return fig


def warm_variants(wl: Workload, lat: LinearLatency, **options: bool) -> None:
    """Compile or load every kernel variant the timed runs use (with caching
    also the plain one ``run_bench`` compares with), so no timing includes it."""
    small = SchedulerConfig(num_gpu_blocks=100, max_model_len=256, horizon_s=1.0)
    simulate([small], wl, lat)
    if any(options.values()):
        simulate([dataclasses.replace(small, **options)], wl, lat)


def _options_text(options: dict[str, bool]) -> str:
    on = [k for k, v in options.items() if v]
    return ", ".join(on) or "none (vLLM sync, no caching)"


def time_grid(
    cfgs: list[SchedulerConfig], wl: Workload, lat: LinearLatency
) -> tuple[float, float, float, float]:
    """One timed ``simulate`` of ``cfgs``: (wall s, CPU s, output tokens, steps)."""
    w0, c0 = time.perf_counter(), time.process_time()
    res = simulate(cfgs, wl, lat, check_invariants=False)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    k = res.state.out.counters
    return wall, cpu, float(k[:, S.O_DECODE_TOKENS].sum()), float(k[:, S.O_STEPS].sum())


# The SLOs of ``plan bench --max-rate`` (seconds).
BENCH_SLO = {"ttft_s": 2.0, "tpot_s": 0.05}


def run_max_rate_bench(side: int, **options: bool) -> dict[str, float]:
    """Time the highest-rate search (``planner.maxrate.search``, TTFT p99 <= 2 s, TPOT
    p99 <= 50 ms) over the S1 grid of ``s1_grid(side)`` against one plain sweep
    of the same configs (one kernel call, horizon 120 s, as ``run_bench``), and
    against one call at scale 1 run to completion (what each search round
    runs). Prints and returns the wall times and their ratios."""
    import math

    from planner.maxrate.search import search_max_rate
    from planner.slo import SLO

    wl, lat = s1_workload(), LinearLatency()
    warm_variants(wl, lat, **options)
    cfgs = s1_grid(side, **options)
    t0 = time.perf_counter()
    simulate(cfgs, wl, lat, check_invariants=False).metrics()
    plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    full = [dataclasses.replace(c, horizon_s=math.inf) for c in cfgs]
    simulate(full, wl, lat, check_invariants=False).metrics()
    complete = time.perf_counter() - t0
    t0 = time.perf_counter()
    found = search_max_rate(cfgs, wl, lat, SLO(**BENCH_SLO))
    search = time.perf_counter() - t0
    fig = {
        "configs": len(cfgs),
        "plain_sweep_s": plain,
        "plain_to_completion_s": complete,
        "search_s": search,
        "rounds": found.rounds,
        "evaluations": found.evaluations,
        "ratio": search / plain,
        "ratio_to_completion": search / complete,
    }
    print(f"S1 grid:                       {len(cfgs)} configs, 300 requests")
    print(f"options:                       {_options_text(options)}")
    print("search:                        TTFT p99 <= 2 s, TPOT p99 <= 50 ms, not overloaded")
    print(f"plain sweep (horizon 120 s):   {plain:8.2f} s")
    print(f"plain, run to completion:      {complete:8.2f} s")
    print(
        f"max-rate search:               {search:8.2f} s ({found.rounds} kernel calls, "
        f"{found.evaluations:,} config runs)"
    )
    print(f"search / plain sweep:          {fig['ratio']:8.1f}x")
    print(f"search / plain to completion:  {fig['ratio_to_completion']:8.1f}x")
    return fig


# ``plan bench --mooncake``: the shipped Mooncake trace's first 1,200 s on
# Llama-3.1-8B/H100 (the README's Mooncake table), one config per run.
MOONCAKE_SECONDS, MOONCAKE_MODEL, MOONCAKE_GPU = 1200.0, "llama-3.1-8b", "H100"
MOONCAKE_MNBT = (2048, 8192)


def run_mooncake_bench(repeats: int = 3, **options: bool) -> dict[str, float]:
    """Time one config on the Mooncake trace's first 1,200 s with prefix caching
    off and on, at each max_num_batched_tokens of ``MOONCAKE_MNBT``, and print
    the CPU seconds of a whole ``simulate`` call as ``plan run`` makes it
    (best of ``repeats`` warm runs; hash chaining, kernel, invariant checks
    and bookkeeping) and their ratio, issue 17's
    measure on a trace with real sharing. The pool is what the H100 preset
    derives for Llama-3.1-8B at gpu_memory_utilization 0.9, max_num_seqs 256
    and 2,048 batched tokens (``resolve.num_gpu_blocks``: 28,173 blocks), held
    for both token budgets; max_model_len 131,072, linear step times of the
    preset. ``options``: async_scheduling. Returns {"plain_<mnbt>_s",
    "caching_<mnbt>_s", "ratio_<mnbt>"}."""
    from planner import resolve
    from planner.workload.traces import MOONCAKE_CONV, TraceOptions, read_trace

    wl = read_trace(MOONCAKE_CONV, "mooncake", TraceOptions(duration_s=MOONCAKE_SECONDS))
    model, gpu = MOONCAKE_MODEL, MOONCAKE_GPU
    lat = resolve.latency("linear", model, gpu)
    blocks, _ = resolve.num_gpu_blocks(
        None, model, gpu, 0.9, 16, 1, 0, max_num_seqs=256, max_num_batched_tokens=2048
    )
    print(f"Mooncake trace:                first {MOONCAKE_SECONDS:,.0f} s, "
          f"{wl.num_requests:,} requests, {model} on {gpu}, {blocks:,} blocks")  # fmt: skip
    sched = "async scheduling" if options.get("async_scheduling") else "sync scheduling"
    print(f"options:                       {sched}; prefix caching off, then on")
    fig: dict[str, float] = {}
    for mnbt in MOONCAKE_MNBT:
        cpu = {}
        for caching in (False, True):
            cfg = SchedulerConfig(
                num_gpu_blocks=blocks,
                max_num_seqs=256,
                max_num_batched_tokens=mnbt,
                max_model_len=131072,
                enable_prefix_caching=caching,
                **options,
            )
            simulate([cfg], wl, lat)  # compile or load, and warm
            cpu[caching] = min(_cpu_of(cfg, wl, lat) for _ in range(repeats))
        fig[f"plain_{mnbt}_s"], fig[f"caching_{mnbt}_s"] = cpu[False], cpu[True]
        fig[f"ratio_{mnbt}"] = cpu[True] / cpu[False]
        print(
            f"max_num_batched_tokens {mnbt:>5}:  {cpu[False]:.3f} s without caching, "
            f"{cpu[True]:.3f} s with it: {fig[f'ratio_{mnbt}']:.1f}x"
        )
    return fig


def _cpu_of(cfg: SchedulerConfig, wl: Workload, lat: object) -> float:
    """CPU seconds of one ``simulate`` call of ``cfg``."""
    c0 = time.process_time()
    simulate([cfg], wl, lat)
    return time.process_time() - c0


STARTUP_ARGS = ("run", "--num-requests", "20", "--json")


def child_run(
    env: dict[str, str], extra: tuple[str, ...] = (), base: tuple[str, ...] = STARTUP_ARGS
) -> tuple[float, float]:
    """(wall s, CPU s of the child and its own children: the compile-ahead
    process) for one ``plan`` command (``base`` + ``extra``, by default a
    ``plan run`` of ``STARTUP_ARGS``) in a fresh interpreter."""
    import resource
    import subprocess
    import sys

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "planner.cli", *base, *extra],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def run_startup_bench() -> dict[str, float]:
    """Time ``plan run --num-requests 20`` in fresh processes: first with an
    empty Numba cache (``NUMBA_CACHE_DIR`` set to a new temporary folder, so
    the kernel compiles), then again with that cache warm; and a first run
    with ``--enable-prefix-caching`` on another empty cache (the step loop's
    caching variant, ``step.prefix_cache_of``). Prints and returns wall and
    CPU seconds (user + system of the run and its compile-ahead process)."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix="planner-bench-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        cold = child_run(env)
        warm = child_run(env)
    with tempfile.TemporaryDirectory(prefix="planner-bench-") as cache:
        caching = child_run(dict(os.environ, NUMBA_CACHE_DIR=cache), ("--enable-prefix-caching",))
    fig = {"cold_wall_s": cold[0], "cold_cpu_s": cold[1], "warm_wall_s": warm[0]}
    fig |= {"warm_cpu_s": warm[1], "caching_cold_wall_s": caching[0]}
    fig["caching_cold_cpu_s"] = caching[1]
    print(f"plan {' '.join(STARTUP_ARGS)}, fresh processes:")
    print(f"first run (empty Numba cache): {cold[0]:6.2f} s wall, {cold[1]:6.2f} s CPU")
    print(f"next run (cache warm):         {warm[0]:6.2f} s wall, {warm[1]:6.2f} s CPU")
    print(f"first run with prefix caching: {caching[0]:6.2f} s wall, {caching[1]:6.2f} s CPU")
    return fig
