"""``plan max-rate``: how much traffic can this configuration (or a short list
of them) take under these SLOs? Parsing and printing only; the search is
``planner.maxrate.search``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import time
from collections.abc import Iterator
from typing import Annotated

import numpy as np
import pandas as pd
import typer
from rich.console import Console

from planner import bounds, resolve
from planner.cli import options as opt
from planner.cli import server
from planner.cli.capacity import command_workload, warn
from planner.cli.inert import given, reject_inert, reject_inert_hardware
from planner.cli.json_out import print_json
from planner.config import SchedulerConfig, clock_bound
from planner.inert import RUN_RULES
from planner.latency.step_time import Latency
from planner.maxrate.search_range import (
    DEFAULT_MAX_SCALE,
    DEFAULT_MIN_SCALE,
    DEFAULT_REL_TOL,
    SearchRange,
)
from planner.metrics import OVERLOAD_MIN_LIFETIMES, front_end_text
from planner.models import vllm_defaults
from planner.slo import FIELDS, NAMES, SLO, seconds_text
from planner.text import count
from planner.workload.arrays import Workload
from planner.workload_checks import unused_field_warnings

# Scheduler settings ``--vary`` may list (integers, SchedulerConfig fields).
VARY_KEYS = (
    "max_num_seqs",
    "num_gpu_blocks",
    "max_num_batched_tokens",
    "max_model_len",
    "block_size",
    "long_prefill_token_threshold",
)
MAX_LISTED_CONFIGS = 64  # a short list; grids belong in a sweep spec's [search]

RateScaleMin = Annotated[
    float, typer.Option(help="Lowest rate scale searched (x the workload's arrival rate).")
]
RateScaleMax = Annotated[
    float, typer.Option(help="Highest rate scale searched (x the workload's arrival rate).")
]
RateTolerance = Annotated[
    float, typer.Option(help="Stop when smallest failing / largest passing scale <= 1 + this.")
]
Vary = Annotated[
    list[str] | None,
    typer.Option(
        metavar="KEY=V1,V2,...",
        help="Search a short list: every combination of these values (repeatable; keys: "
        + ", ".join(VARY_KEYS)
        + f"; at most {MAX_LISTED_CONFIGS} configurations).",
    ),
]


def parse_vary(ctx: typer.Context, items: list[str] | None) -> dict[str, list[int]]:
    """``--vary KEY=V1,V2`` items as key -> values (each checked against
    ``bounds.OPTION_BOUNDS``). Raises ValueError (one line) on an unknown or
    repeated key, a key also given as its own option, a non-integer, or more
    than MAX_LISTED_CONFIGS combinations."""
    out: dict[str, list[int]] = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in VARY_KEYS:
            raise ValueError(f"--vary: expected KEY=V1,V2 with KEY in {', '.join(VARY_KEYS)}")
        if key in out:
            raise ValueError(f"--vary: {key} given twice")
        if given(ctx, key):
            raise ValueError(f"--vary {key}: also given as {bounds.flag(key)}; give one")
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"--vary {key}: expected integers, got {text!r}") from None
        if not values or len(set(values)) != len(values):
            raise ValueError(f"--vary {key}: expected distinct integers, got {text!r}")
        for v in values:
            bounds.check_option(key, v, f"--vary {key}")
        out[key] = values
    if math.prod(len(v) for v in out.values()) > MAX_LISTED_CONFIGS:
        raise ValueError(
            f"--vary: more than {MAX_LISTED_CONFIGS} configurations; use a sweep spec with a "
            "[search] table for grids"
        )
    return out


def max_rate(
    ctx: typer.Context,
    num_gpu_blocks: opt.NumGpuBlocks = None,
    block_size: opt.BlockSize = None,
    max_num_seqs: opt.MaxNumSeqs = None,
    max_num_batched_tokens: opt.MaxNumBatchedTokens = None,
    max_model_len: opt.MaxModelLen = None,
    async_scheduling: opt.AsyncScheduling = None,
    enable_prefix_caching: opt.EnablePrefixCaching = None,
    speculative_config: opt.SpeculativeConfigOpt = None,
    spec_acceptance: opt.SpecAcceptance = None,
    spec_acceptance_log: opt.SpecAcceptanceLog = None,
    spec_seed: opt.SpecSeed = 0,
    sliding_window: opt.SlidingWindow = None,
    full_attention_groups: opt.FullAttentionGroups = None,
    sliding_window_groups: opt.SlidingWindowGroups = None,
    model: opt.Model = None,
    gpu: opt.Gpu = None,
    gpu_memory_utilization: opt.GpuMemoryUtilization = None,
    usage_context: opt.UsageContextOpt = vllm_defaults.SERVE,
    tensor_parallel_size: opt.TensorParallelSize = 1,
    trace_file: opt.TraceFile = None,
    trace_format: opt.TraceFormatOpt = opt.TraceFormat.auto,
    trace_columns: opt.TraceColumns = None,
    trace_hash_block_size: opt.TraceHashBlockSize = None,
    trace_start: opt.TraceStart = 0.0,
    trace_duration: opt.TraceDuration = math.inf,
    rate_scale: opt.RateScale = 1.0,
    max_requests: opt.MaxRequests = None,
    num_requests: opt.NumRequests = 300,
    rate: opt.Rate = 10.0,
    arrival: opt.ArrivalOpt = opt.Arrival.constant,
    gamma_cv: opt.GammaCv = None,
    length_dist: opt.LengthDistOpt = opt.LengthKind.gaussian,
    prompt_tokens: opt.PromptTokens = None,
    prompt_tokens_stdev: opt.Stdev = None,
    prompt_tokens_min: opt.Min = None,
    prompt_tokens_max: opt.Max = None,
    output_tokens: opt.OutputTokens = None,
    output_tokens_stdev: opt.Stdev = None,
    output_tokens_min: opt.Min = None,
    output_tokens_max: opt.Max = None,
    seed: opt.Seed = None,
    prefix_groups: opt.PrefixGroups = 0,
    prefix_len: opt.PrefixLen = 0,
    prefix_share: opt.PrefixShare = 0.0,
    latency: opt.LatencyOpt = opt.LatencyKind.linear,
    alpha_coeffs: opt.AlphaCoeffs = None,
    beta_coeffs: opt.BetaCoeffs = None,
    mfu: opt.Mfu = None,
    mbu: opt.Mbu = None,
    step_overhead_us: opt.StepOverheadUs = 0.0,
    measured_scale: opt.MeasuredScale = None,
    step_time_error: opt.StepTimeError = None,
    ttft_slo: opt.TtftSlo = None,
    tpot_slo: opt.TpotSlo = None,
    itl_slo: opt.ItlSlo = None,
    e2e_slo: opt.E2eSlo = None,
    goodput: opt.Goodput = None,
    rate_scale_min: RateScaleMin = DEFAULT_MIN_SCALE,
    rate_scale_max: RateScaleMax = DEFAULT_MAX_SCALE,
    rate_tolerance: RateTolerance = DEFAULT_REL_TOL,
    vary: Vary = None,
    as_json: opt.AsJson = False,
) -> None:
    """The highest arrival rate each configuration sustains: not overloaded and
    every SLO met, every request offered and run to completion.

    The rate is a scale of the workload's own arrival rate (times divided by
    it), also given in requests and output tokens per second. Exit code 0: the
    search ran; 2: bad input.
    """
    from planner.maxrate.search import (
        AT_MAX,
        BELOW_MIN,
        REJECTS,
        TOO_SHORT,
        SearchRange,
        offered_rates,
        search_max_rate,
    )

    reject_inert(ctx, RUN_RULES)
    srv = server.resolve_server(
        ctx,
        ctx.params,
        model,
        gpu,
        usage=usage_context,
    )
    v = server.values(srv)
    block_size, max_model_len, max_num_seqs = v["block_size"], v["max_model_len"], v["max_num_seqs"]
    max_num_batched_tokens, gpu_memory_utilization = (
        v["max_num_batched_tokens"],
        v["gpu_memory_utilization"],
    )
    async_scheduling, enable_prefix_caching = v["async_scheduling"], v["enable_prefix_caching"]
    slo = opt.slo_from(ttft_slo, tpot_slo, itl_slo, e2e_slo, goodput)
    rng = SearchRange(rate_scale_min, rate_scale_max, rate_tolerance)
    varied = parse_vary(ctx, vary)
    shown = {k: v for k, v in srv.items() if k not in varied}  # a varied one is given per row
    speculation = opt.speculation_from(
        speculative_config, spec_acceptance, spec_seed, spec_acceptance_log
    )
    lat = opt.step_time(
        latency, model, gpu, tensor_parallel_size, alpha_coeffs, beta_coeffs, mfu, mbu,
        step_overhead_us, measured_scale=measured_scale, latency_given=given(ctx, "latency"),
        speculation=speculation,
    )  # fmt: skip
    if "num_gpu_blocks" in varied and given(ctx, "gpu_memory_utilization"):
        raise ValueError(
            "--gpu-memory-utilization: no effect with --vary num_gpu_blocks (the pool sizes "
            "are given)"
        )
    base = SchedulerConfig(
        **resolve.attention(
            sliding_window, model, groups=(full_attention_groups, sliding_window_groups)
        ),
        num_gpu_blocks=7463 if num_gpu_blocks is None else num_gpu_blocks,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        async_scheduling=async_scheduling,
        enable_prefix_caching=enable_prefix_caching,
        speculation=speculation,
    )
    given_pool = num_gpu_blocks is not None or "num_gpu_blocks" in varied
    reject_inert_hardware(ctx, base.one_full_attention_group, given_pool)
    combos = [dict(zip(varied, vals, strict=True)) for vals in itertools.product(*varied.values())]
    configs = [_varied(base, combo) for combo in combos]
    # vLLM raises a linear-attention hybrid's block size (resolve.simulated_block_size)
    configs = [
        dataclasses.replace(
            c, block_size=resolve.simulated_block_size(c.block_size, model, tensor_parallel_size)
        )
        for c in configs
    ]
    derived = num_gpu_blocks is None and "num_gpu_blocks" not in varied
    if derived and (model is not None or gpu is not None):
        util, tp = gpu_memory_utilization, tensor_parallel_size
        configs = [_with_derived_pool(c, model, gpu, util, tp) for c in configs]
    source = "derived from presets" if derived and gpu is not None else "given"
    if derived and gpu is None:
        source = "default"
    for cfg, combo in zip(configs, combos, strict=True):
        with _naming(combo):
            cfg.check_vllm_starts()
            cfg.check_pool_starts()
            clock_bound(cfg, lat)
    # Lengths as asked: each configuration's front end acts at its own
    # max_model_len (``front_end.front_end_rejects``, ``Workload.cut``).
    topts = {"start_s": trace_start, "duration_s": trace_duration, "rate_scale": rate_scale,
             "max_requests": max_requests, "hash_block_size": trace_hash_block_size}  # fmt: skip
    wl = command_workload(
        trace_file, trace_format.value, trace_columns, topts,
        (num_requests, rate, arrival, length_dist,
         (prompt_tokens, prompt_tokens_stdev, prompt_tokens_min, prompt_tokens_max),
         (output_tokens, output_tokens_stdev, output_tokens_min, output_tokens_max),
         gamma_cv),
        (prefix_groups, prefix_len, prefix_share), seed,
    )  # fmt: skip
    for message in unused_field_warnings(wl, configs):
        warn(message)
    rps, tps = offered_rates(wl)
    t0 = time.perf_counter()
    with opt.say_compile(configs, wl, lat):
        found = search_max_rate(configs, wl, lat, slo, rng)
    wall = time.perf_counter() - t0
    table = pd.concat([pd.DataFrame(combos, index=range(len(configs))), found.table], axis=1)
    shifts = _sensitivity(configs, combos, found.table, wl, lat, slo, step_time_error, rng)
    if as_json:
        out = {
            "workload": wl.name,
            "offered_rps": rps,
            "offered_output_tps": tps,
            **slo.as_dict(),
            "rate_scale_min": rng.lo,
            "rate_scale_max": rng.hi,
            "rate_tolerance": rng.rel_tol,
            "rounds": found.rounds,
            "evaluations": found.evaluations,
            "wall_s": wall,
            "configs": [
                {"config": c.columns(), **r, "num_gpu_blocks_sized_at": _at(c, source)}
                for c, r in zip(configs, table.to_dict("records"), strict=True)
            ],
            "server_settings": resolve.server_json(shown),
            "sensitivity": shifts,
        }
        print_json(out)
        return
    server.print_settings(shown)
    c = Console(markup=False, soft_wrap=True)
    c.print(
        f"plan max-rate: {wl.name}, {count(wl.num_requests, 'request')} offered at {rps:.3f} req/s "
        f"({tps:,.0f} output tokens/s) at scale 1; step time: {lat.describe()}",
        soft_wrap=True,
    )
    if configs[0].speculation is not None:
        c.print(configs[0].speculation.line())
    _print_pools(c, configs, source)
    several = sum(x is not None for x in (slo.ttft_s, slo.tpot_s, slo.itl_s, slo.e2e_s)) > 1
    them = "them" if several else "it"
    cond = (
        f"{slo.describe()} (unserved requests miss {them}), " if slo.given() else "no SLO given: "
    )
    c.print(
        f"sustainable = {cond}not overloaded over arrivals spanning at least "
        f"{OVERLOAD_MIN_LIFETIMES:g}x the occupancy-weighted median E2E, every request run to "
        "completion; scales "
        f"{rng.lo:g}..{rng.hi:g}, within {rng.rel_tol:.0%}",
        soft_wrap=True,
    )
    for i, combo in enumerate(combos):
        row = table.iloc[i]
        scale, rps_t, tps_t = _answer(row, rng.lo, AT_MAX, BELOW_MIN, TOO_SHORT)
        name = ", ".join(f"{k} {v}" for k, v in combo.items()) or "this configuration"
        if row.max_rate_limit == REJECTS:
            what = front_end_text(
                int(row.rejected_requests), int(row.cut_requests), configs[i].max_model_len
            )
            c.print(
                f"{name}: none: at every rate {what}, and they fail: raise --max-model-len",
                soft_wrap=True,
            )
            continue
        rates = "" if rps_t == "-" else f" ({rps_t} req/s, {tps_t} output tokens/s)"
        at = f"; at it: {_at_rate(row)}" if rps_t != "-" else "; nothing in the range passes"
        short = ""
        if row.max_rate_limit == TOO_SHORT:
            short = _short_text(row, wl.num_requests, opt.more_requests(trace_file is not None))
        c.print(
            f"{name}: max_rate_scale {scale}{rates}{at}{_monotone_text(row)}{short}",
            soft_wrap=True,
        )
    c.print(_sensitivity_text(shifts), soft_wrap=True)
    c.print(
        f"{found.rounds} rounds (one kernel call each), {found.evaluations} runs, {wall:.1f} s",
        soft_wrap=True,
    )


def _sensitivity(
    configs: list[SchedulerConfig],
    combos: list[dict],
    found: pd.DataFrame,
    wl: Workload,
    lat: Latency,
    slo: SLO,
    given: float | None,
    rng: SearchRange,
) -> dict:
    """The highest rate of the best configuration (the highest max_rps; the
    first on ties) with step times off by the validated or given error
    (``answers.sensitivity``); ``{"error": None}`` when there is none."""
    from planner.answers import sensitivity

    chosen = sensitivity.chosen_error(given, lat)
    rates = found["max_rps"].to_numpy(dtype=float)
    if chosen is None:
        return {"error": None, "why": sensitivity.no_error_text(given)}
    if np.isnan(rates).all():
        return {"error": None, "why": "no configuration sustains a rate in the search range"}
    error, basis = chosen
    best = int(np.nanargmax(rates))
    slower, faster = sensitivity.max_rate(configs[best], wl, lat, slo, error, rng)
    return {
        "error": error,
        "basis": basis,
        "config": best,
        "config_name": ", ".join(f"{k} {v}" for k, v in combos[best].items()) or None,
        "max_rps": float(rates[best]),
        "max_rps_if_slower": slower.value,
        "max_rps_if_faster": faster.value,
    }


def _sensitivity_text(s: dict) -> str:
    if s["error"] is None:
        return f"step-time sensitivity: not computed ({s['why']})"
    e = f"{s['error']:.1%}"

    def rate(x: float) -> str:
        return "none in the search range" if math.isnan(x) else f"{x:.3f} req/s"

    who = f" ({s['config_name']})" if s["config_name"] else ""
    return (
        f"if step times are {e} slower than modelled, the max rate{who} is "
        f"{rate(s['max_rps_if_slower'])}; {e} faster: {rate(s['max_rps_if_faster'])} "
        f"(here {rate(s['max_rps'])}; {e} is {s['basis']})"
    )


def _at(c: SchedulerConfig, source: str) -> dict | None:
    """Where config c's pool was sized (``resolve.sized_at_json``)."""
    derived = source == "derived from presets"
    return resolve.sized_at_json(c.max_num_seqs, c.max_num_batched_tokens, derived)


def _print_pools(c: Console, configs: list[SchedulerConfig], source: str) -> None:
    """The pool line (the range when configurations differ; the values a
    derived pool was sized at) and the attention line."""
    pools = sorted({cfg.num_gpu_blocks for cfg in configs})
    text = f"{pools[0]:,}" if len(pools) == 1 else f"{pools[0]:,} to {pools[-1]:,}"
    where = source
    if source == "derived from presets":
        at = {(cfg.max_num_seqs, cfg.max_num_batched_tokens) for cfg in configs}
        if len(at) == 1:
            where += f"; {resolve.sized_at(*at.pop())}"
        else:
            where += "; each at its own max_num_seqs and max_num_batched_tokens"
    c.print(f"num_gpu_blocks {text} ({where})", soft_wrap=True)
    if line := configs[0].attention_line():
        c.print(line, soft_wrap=True)


@contextlib.contextmanager
def _naming(combo: dict) -> Iterator[None]:
    """Within the block, a ValueError (one line) names the --vary combination
    it is about (with no combination: unchanged)."""
    try:
        yield
    except ValueError as e:
        if not combo:
            raise
        shown = ", ".join(f"{k}={v}" for k, v in combo.items())
        raise ValueError(f"--vary {shown}: {e}") from None


def _varied(base: SchedulerConfig, combo: dict) -> SchedulerConfig:
    """``base`` with one combination of the --vary values. Raises ValueError
    (one line) naming the combination when the config refuses it."""
    with _naming(combo):
        return dataclasses.replace(base, **combo)


def _with_derived_pool(
    c: SchedulerConfig, model: str | None, gpu: str | None, util: float, tp: int
) -> SchedulerConfig:
    """``c`` with its pool sized from the presets at its own block size,
    max_num_seqs and max_num_batched_tokens (``resolve.num_gpu_blocks``)."""
    n, _ = resolve.num_gpu_blocks(
        None, model, gpu, util, c.block_size, tp, 7463, max_num_seqs=c.max_num_seqs,
        max_num_batched_tokens=c.max_num_batched_tokens, full_attention_only=False,
        simulated=True, speculation=c.speculation,
    )  # fmt: skip
    return dataclasses.replace(c, num_gpu_blocks=n)


def _answer(
    row: pd.Series, lo: float, at_max: str, below_min: str, too_short: str
) -> tuple[str, str, str]:
    """The three rate cells of a result row: a bound at the range's ends or
    where the workload is too short to judge a higher rate."""
    if row.max_rate_limit == below_min:
        return f"< {lo:g} (search limit)", "-", "-"
    if np.isnan(row.max_rate_scale):
        return "none judged", "-", "-"
    bound = row.max_rate_limit in (at_max, too_short)
    suffix = " (search limit)" if row.max_rate_limit == at_max else " (workload length limit)"
    mark, suffix = ("≥ ", suffix) if bound else ("", "")
    return (
        f"{mark}{row.max_rate_scale:.4g}{suffix}",
        f"{mark}{row.max_rps:.3f}",
        f"{mark}{row.max_output_tps:,.0f}",
    )


def _short_text(row: pd.Series, requests: int, more: str) -> str:
    """Why the answer is a lower bound set by the workload's length; ``more``
    says how to offer more requests (``options.more_requests``)."""
    return (
        f"; at {row.max_rate_fail_scale:.4g}x the {requests:,} requests arrive within less "
        f"than {OVERLOAD_MIN_LIFETIMES:g}x their occupancy-weighted median E2E, a burst the "
        "running set absorbs, "
        f"which says nothing about a sustained rate: offer {more} to judge higher rates"
    )


def _monotone_text(row: pd.Series) -> str:
    """A note when pass/fail was not monotone in the rate: the answer is then
    the largest scale with every scale tried up to it passing."""
    if bool(row.max_rate_monotone):
        return ""
    return (
        f" (pass/fail is not monotone: {row.max_rate_fail_scale:.4g}x failed below a pass; "
        "every scale tried up to the answer passed)"
    )


def _at_rate(row: pd.Series) -> str:
    """TTFT/TPOT/ITL/E2E p99 of the run at the answer, '-' when nothing passed."""
    parts = [
        f"{NAMES[k]} p99 {seconds_text(float(row[f'{k}_p99_at_max_rate']))}"
        for k in FIELDS
        if not np.isnan(row[f"{k}_p99_at_max_rate"])
    ]
    return ", ".join(parts) if parts else "-"


def register(app: typer.Typer) -> None:
    """Add ``max-rate`` to the ``plan`` app."""
    app.command("max-rate", cls=opt.BoundedCommand)(max_rate)
