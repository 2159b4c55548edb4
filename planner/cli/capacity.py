"""``plan check`` and ``plan safe-limit``: capacity questions an operator asks
before deploying. Parsing and printing only; the math is in ``capacity`` and
``safelimit``.
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from planner import capacity, metrics, resolve
from planner.cli import options as opt
from planner.cli import server
from planner.cli.inert import given, reject_inert, reject_inert_hardware, spelled
from planner.cli.json_out import print_json
from planner.config import SchedulerConfig, check_vllm_args, clock_bound
from planner.inert import CHECK_RULES, RUN_RULES, InertOption
from planner.metrics import burst_text, front_end_text, pace_text
from planner.models import hardware, kv_cache, vllm_defaults
from planner.slo import FIELDS
from planner.text import count
from planner.workload.arrays import Workload, seed_acts, with_shared_prefixes
from planner.workload.traces import TraceOptions, TraceRead, load_trace, parse_columns
from planner.workload_checks import unused_field_warnings

if TYPE_CHECKING:
    import pandas as pd

    from planner.latency.step_time import Latency
    from planner.models.config_json import ModelSpec
    from planner.slo import SLO

EXIT_SAFE, EXIT_UNSAFE = 0, 1
# plan check's figures that assume every layer is full attention (one block
# table holding every token); left out for sliding-window or chunked models.
FULL_ATTENTION_KEYS = (
    "usable_blocks", "max_servable_tokens", "vllm_0_33_starts", "vllm_0_33_min_blocks",
    "older_vllm_starts", "older_vllm_min_blocks", "min_safe_num_gpu_blocks",
    "max_safe_max_model_len", "min_safe_gpu_memory_utilization", "livelock_gap_tokens",
    "max_concurrency_vllm_log", "max_concurrency_true",
)  # fmt: skip


def warn(message: str) -> None:
    """Print one ``plan: warning: ...`` line on stderr."""
    print(f"plan: warning: {message}", file=sys.stderr)


def read_trace_warned(
    trace_file: Path, fmt: str, options: TraceOptions, trace_columns: str | None
) -> TraceRead:
    """Read a ``--trace-file`` with ``--trace-columns``, warning once on stderr
    about the file's columns that nothing reads."""
    read = load_trace(trace_file, fmt, options, parse_columns(trace_columns))
    if read.warning():
        warn(read.warning())
    return read


def command_workload(
    trace_file: Path | None,
    trace_format: str,
    trace_columns: str | None,
    trace_options: dict,
    synthetic: tuple,
    prefix: tuple[int, int, float],
    seed: int | None,
    turns: int = 1,
) -> Workload:
    """The workload a command's options describe: the ``--trace-file``
    (``read_trace_warned`` with ``TraceOptions(**trace_options)``, built only
    then: it checks them) if given, else the synthetic one
    (``cli_options.synthetic_workload(*synthetic, seed, turns, prefix)``), then
    the ``--prefix-*`` shared prefixes (``workload.with_shared_prefixes``).
    ``seed`` None: not given (0). Raises ValueError for a seed given where
    nothing is drawn."""
    if trace_file is not None:
        if seed is not None and not seed_acts(None, None, None, prefix[0], prefix[2]):
            raise ValueError("--seed has no effect: the trace's prefix groups draw nothing")
        topts = TraceOptions(**trace_options)
        wl = read_trace_warned(trace_file, trace_format, topts, trace_columns).workload
    else:
        wl = opt.synthetic_workload(*synthetic, seed, turns, prefix)
    return with_shared_prefixes(wl, *prefix, seed or 0)


def _pool(
    blocks: int | None,
    model: str | None,
    gpu: str | None,
    util: float,
    bs: int,
    tp: int,
    sizing: dict | None = None,
) -> int:
    if blocks is None and model is None and gpu is None:
        raise ValueError("give --num-gpu-blocks, or --model and --gpu")
    n, _ = resolve.num_gpu_blocks(blocks, model, gpu, util, bs, tp, 0, **(sizing or {}))
    if n <= 1:
        raise ValueError(f"--num-gpu-blocks must be >= 2 (block 0 is the null block), got {n}")
    if bs < 1:
        raise ValueError(f"--block-size must be >= 1, got {bs}")
    return n


def check(
    ctx: typer.Context,
    num_gpu_blocks: opt.NumGpuBlocks = None,
    block_size: opt.BlockSize = None,
    max_model_len: opt.MaxModelLen = None,
    model: opt.Model = None,
    gpu: opt.Gpu = None,
    gpu_memory_utilization: opt.GpuMemoryUtilization = None,
    usage_context: opt.UsageContextOpt = vllm_defaults.SERVE,
    disable_hybrid_kv_cache_manager: opt.DisableHybridKvCacheManager = None,
    tensor_parallel_size: opt.TensorParallelSize = 1,
    quantization: opt.Quantization = None,
    kv_cache_dtype: opt.KvCacheDtype = "auto",
    max_num_batched_tokens: opt.MaxNumBatchedTokens = None,
    async_scheduling: opt.AsyncScheduling = None,
    enable_prefix_caching: opt.EnablePrefixCaching = None,
    gdn_prefill_backend: opt.GdnPrefillBackend = opt.GdnPrefillBackendKind.flashinfer,
    tokens_per_request: Annotated[
        int | None, typer.Option(help="T for the concurrency figure [default: max_model_len].")
    ] = None,
    trace_file: opt.TraceFile = None,
    trace_format: opt.TraceFormatOpt = opt.TraceFormat.auto,
    trace_start: opt.TraceStart = 0.0,
    trace_duration: opt.TraceDuration = math.inf,
    trace_columns: opt.TraceColumns = None,
    trace_hash_block_size: opt.TraceHashBlockSize = None,
    rate_scale: opt.RateScale = 1.0,
    ttft_slo: opt.TtftSlo = None,
    tpot_slo: opt.TpotSlo = None,
    itl_slo: opt.ItlSlo = None,
    e2e_slo: opt.E2eSlo = None,
    goodput: opt.Goodput = None,
    max_num_seqs: opt.MaxNumSeqs = None,
    horizon: opt.Horizon = math.inf,
    latency: opt.LatencyOpt = opt.LatencyKind.linear,
    alpha_coeffs: opt.AlphaCoeffs = None,
    beta_coeffs: opt.BetaCoeffs = None,
    mfu: opt.Mfu = None,
    mbu: opt.Mbu = None,
    step_overhead_us: opt.StepOverheadUs = 0.0,
    measured_scale: opt.MeasuredScale = None,
    as_json: opt.AsJson = False,
) -> None:
    """Would vLLM start on this pool, and can requests livelock in it?

    Prints the fix when unsafe: the smallest --num-gpu-blocks, the largest
    --max-model-len on this pool and, with --model/--gpu, the smallest
    --gpu-memory-utilization. vLLM >= 0.29.0 (0.33 included) counts the null
    block at start-up; 0.28.0 and earlier start one block short.

    With an SLO (--ttft-slo, --tpot-slo, --itl-slo, --e2e-slo or --goodput) and a
    --trace-file, also simulates that traffic at --max-num-seqs (with
    --enable-prefix-caching and --async-scheduling as given): SAFE then
    also needs the SLOs met (unserved requests count as misses) and no overload.

    A linear-attention hybrid (Gated DeltaNet: qwen3_next, qwen3_5) runs with a
    larger block (vLLM aligns it to hold a layer's state; --num-gpu-blocks counts
    those blocks), and its figures depend on --enable-prefix-caching (vLLM's
    default is on, the planner's off) and, with caching on, --gdn-prefill-backend;
    the other caching mode's figure is printed too. Mamba2 hybrids (nemotron_h,
    granitemoehybrid) likewise, without the GDN prefill backend (their layers
    always keep one prefill checkpoint block in align mode).

    Exit code 0: safe; 1: a livelock gap exists, vLLM >= 0.29 refuses the
    pool, or (with an SLO) the traffic is overloaded, misses it or is a burst
    too short to judge whether it keeps up (``metrics.overload_judged``); 2:
    bad input.
    """
    reject_inert(ctx, CHECK_RULES)
    srv = server.resolve_server(
        ctx,
        ctx.params,
        model,
        gpu,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        usage=usage_context,
    )
    v = server.values(srv)
    block_size, max_model_len, max_num_seqs = v["block_size"], v["max_model_len"], v["max_num_seqs"]
    max_num_batched_tokens, gpu_memory_utilization = (
        v["max_num_batched_tokens"],
        v["gpu_memory_utilization"],
    )
    async_scheduling, enable_prefix_caching = v["async_scheduling"], v["enable_prefix_caching"]
    hybrid_options = ("enable_prefix_caching", "gdn_prefill_backend")
    slo = opt.slo_from(ttft_slo, tpot_slo, itl_slo, e2e_slo, goodput)
    if max_model_len < 1:
        raise ValueError(f"--max-model-len must be >= 1, got {max_model_len}")
    tp = tensor_parallel_size
    spec = None
    if model is not None:
        spec = hardware.model(model, quantization, kv_cache_dtype, disable_hybrid_kv_cache_manager)
        spec.check_tensor_parallel(tp)
        windowed = set(spec.layer_types) != {"full"}
        in_flight_kinds = {"sliding", "chunked"} & set(spec.layer_types)
        for name in hybrid_options:
            simulated = name == "enable_prefix_caching" and slo.given()  # the traffic's
            if given(ctx, name) and "linear" not in spec.layer_types and not simulated:
                raise InertOption(
                    f"--{name.replace('_', '-')} has no effect on {spec.name} in plan check: "
                    "only linear-attention layers (Gated DeltaNet, Mamba2) are sized by it, "
                    "and without an SLO no traffic is simulated"
                )
        if given(ctx, "gdn_prefill_backend") and spec.state_kind == "mamba2":
            raise InertOption(
                f"--gdn-prefill-backend has no effect on {spec.name} in plan check: its "
                "Mamba2 layers keep one prefill checkpoint block in align mode either way"
            )
        for name, what in (("tokens_per_request", "--tokens-per-request"),
                           ("trace_file", "--trace-file")):  # fmt: skip
            if windowed and given(ctx, name):
                raise InertOption(
                    f"{what} has no effect on {spec.name}: the per-request figures and the "
                    "livelock analysis it feeds are for full-attention models"
                )
        if given(ctx, "async_scheduling") and not in_flight_kinds and not slo.given():
            raise InertOption(
                f"--async-scheduling has no effect on {spec.name}: only sliding-window and "
                "chunked layers hold blocks for the batches in flight, and without an SLO "
                "no traffic is simulated"
            )
        no_window = not in_flight_kinds
        if given(ctx, "max_num_batched_tokens") and no_window and num_gpu_blocks is not None:
            raise InertOption(
                f"--max-num-batched-tokens has no effect on {spec.name} with --num-gpu-blocks "
                "(it sizes the activation term and sliding-window or chunked capacity)"
            )
    elif named := [
        spelled(ctx, name)
        for name in hybrid_options
        if given(ctx, name) and not (name == "enable_prefix_caching" and slo.given())
    ]:  # without a model: caching acts only in the traffic's simulation
        slo_too = " or, with --trace-file, an SLO (plan check then simulates the traffic)"
        raise InertOption(
            f"{' and '.join(named)} {'needs' if len(named) == 1 else 'need'} --model in plan "
            "check (it sizes a linear-attention hybrid's blocks)"
            + (slo_too if named == ["--enable-prefix-caching"] else "")
        )
    check_vllm_args(max_num_seqs, max_num_batched_tokens)
    sizing = {"quantization": quantization, "kv_cache_dtype": kv_cache_dtype,
              "max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs,
              "full_attention_only": False,
              "disable_hybrid_kv_cache_manager": disable_hybrid_kv_cache_manager}  # fmt: skip
    n = _pool(num_gpu_blocks, model, gpu, gpu_memory_utilization, block_size, tp, sizing)
    t = max_model_len if tokens_per_request is None else tokens_per_request
    if t < 1:
        raise ValueError(f"--tokens-per-request must be >= 1, got {t}")
    need = capacity.min_startup_blocks(max_model_len, block_size)
    starts = capacity.vllm_starts(n, max_model_len, block_size, True)
    starts_old = capacity.vllm_starts(n, max_model_len, block_size, False)
    servable = capacity.max_servable_tokens(n, block_size, True)
    gap = capacity.livelock_gap(n, block_size, max_model_len)
    out: dict = {
        "num_gpu_blocks": n,
        "num_gpu_blocks_sized_at": resolve.sized_at_json(
            max_num_seqs, max_num_batched_tokens, num_gpu_blocks is None
        ),
        "block_size": block_size,
        "max_model_len": max_model_len,
        "usable_blocks": capacity.usable_blocks(n, True),
        "max_servable_tokens": servable,
        "vllm_0_33_starts": starts,
        "vllm_0_33_min_blocks": need,
        "older_vllm_starts": starts_old,
        "older_vllm_min_blocks": need - 1,
        "vllm_counting_null_block": capacity.NULL_BLOCK_COUNTED,
        "older_vllm": capacity.NULL_BLOCK_NOT_COUNTED,
        "startup_check_history": capacity.STARTUP_CHECK_HISTORY,
        **_fixes(n, num_gpu_blocks, model, gpu, block_size, max_model_len, tp, sizing),
        "livelock_gap_tokens": list(gap) if gap else None,
        "tokens_per_request": t,
        "max_concurrency_vllm_log": capacity.max_concurrency(n, block_size, t, True),
        "max_concurrency_true": capacity.max_concurrency(n, block_size, t, False),
    }
    full_only = True
    if spec is not None:
        full_only = set(spec.layer_types) == {"full"}
        available = None
        if gpu is not None and num_gpu_blocks is None:
            g = hardware.gpu(gpu)
            terms = hardware.memory_terms(
                spec, g, gpu_memory_utilization, tp, max_num_batched_tokens, max_num_seqs
            )
            out["memory"] = terms.describe()
            available = int(terms.available)
        out.update(
            model_kv_figures(
                spec,
                n,
                block_size,
                max_model_len,
                max_num_batched_tokens,
                async_scheduling,
                tp,
                "align" if enable_prefix_caching else "none",
                gdn_prefill_backend.value,
                available,
            )  # fmt: skip
        )
        n = out["num_gpu_blocks"] = out.get("kv_num_gpu_blocks", n)
        if "linear" in spec.layer_types:  # one Mamba cache block per decode sequence
            out["mamba_max_num_seqs"] = capacity.mamba_max_num_seqs(n)
            out["mamba_starts"] = max_num_seqs <= out["mamba_max_num_seqs"]
            # the largest that starts: the pool grows as max_num_seqs falls
            out["mamba_largest_max_num_seqs"] = out["mamba_max_num_seqs"]
            if available is not None and not out["mamba_starts"]:
                g = hardware.gpu(gpu)
                mode = "align" if enable_prefix_caching else "none"

                def pool_at(seqs: int) -> int:
                    terms = hardware.memory_terms(
                        spec, g, gpu_memory_utilization, tp, max_num_batched_tokens, seqs
                    )
                    return model_kv_figures(
                        spec, n, block_size, max_model_len, max_num_batched_tokens,
                        async_scheduling, tp, mode, gdn_prefill_backend.value,
                        int(terms.available),
                    ).get("kv_num_gpu_blocks", n)  # fmt: skip

                out["mamba_largest_max_num_seqs"] = capacity.largest_starting_max_num_seqs(
                    pool_at, max_num_seqs
                )
            out["max_num_seqs"] = max_num_seqs
            alt = out["kv_other_mode"]  # the other prefix-caching mode's pool
            alt["mamba_max_num_seqs"] = capacity.mamba_max_num_seqs(alt["num_gpu_blocks"])
            alt["starts"] = alt["starts"] and max_num_seqs <= alt["mamba_max_num_seqs"]
        if not full_only:  # the per-type figures replace the full-attention ones
            starts = out["kv_starts"] and out.get("mamba_starts", True)
            gap = None
            for key in FULL_ATTENTION_KEYS:
                out.pop(key)
    out["full_attention_only"] = full_only
    if trace_file is not None:
        window = TraceOptions(
            trace_start, trace_duration, rate_scale=rate_scale,
            hash_block_size=trace_hash_block_size,
        )  # fmt: skip
        read = read_trace_warned(trace_file, trace_format.value, window, trace_columns)
        wl = read.workload
        caching = enable_prefix_caching and slo.given()  # read by the traffic's simulation
        inert = ("priority",) + (() if caching else ("prefix_group", "prefix_len", "hash_ids"))
        unused = [read.columns[k] for k in inert if k in read.columns]
        if unused:
            what = "and prefix ids (with --enable-prefix-caching and an SLO)" if caching else ""
            warn(
                f"{wl.name}: plan check reads request lengths {what or 'only'}; column(s) "
                f"{', '.join(unused)} have no effect here"
            )
        final = wl.request_tokens(max_model_len)  # admitted requests, capped
        n_gap = int(((final >= gap[0]) & (final <= gap[1])).sum()) if gap else 0
        out["workload"] = wl.name
        out["workload_requests"] = wl.num_requests
        out["workload_in_gap"] = n_gap
        out["workload_in_gap_share"] = n_gap / wl.num_requests
        # The front end's refusals and cuts are no pool matter, but said.
        out["workload_rejected"] = int(wl.rejected(max_model_len).sum())
        out["workload_cut"] = int(wl.cut(max_model_len).sum())
    safe = starts and gap is None
    pool_ok = safe
    if slo.given():
        assert trace_file is not None  # CHECK_RULES
        lat = opt.step_time(
            latency, model, gpu, tensor_parallel_size, alpha_coeffs, beta_coeffs, mfu, mbu,
            step_overhead_us, quantization, kv_cache_dtype, measured_scale,
            latency_given=given(ctx, "latency"),
        )  # fmt: skip
        cfg = SchedulerConfig(
            num_gpu_blocks=n,
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            horizon_s=horizon,
            enable_prefix_caching=enable_prefix_caching,
            async_scheduling=async_scheduling,
        )
        clock_bound(cfg, lat)
        with opt.say_compile([cfg], wl, lat):
            out["traffic"] = traffic_check(cfg, wl, lat, slo)
        keeps_up = out["traffic"]["keeps_up"] is not False  # None: a batch, no rate
        safe = safe and keeps_up and out["traffic"]["meets_slo"]
    out["verdict"] = ("safe" if full_only else "starts") if safe else "unsafe"
    if "traffic" in out and pool_ok and _traffic_verdict(out["traffic"]).startswith("NOT"):
        out["verdict"] = "not_judged"  # only the workload's length is missing
    out["server_settings"] = resolve.server_json(srv)
    if as_json:
        print_json(out)
    else:
        server.print_settings(srv)
        _print_check(out, gap)
    raise typer.Exit(EXIT_SAFE if safe else EXIT_UNSAFE)


def traffic_check(cfg: SchedulerConfig, wl: Workload, lat: Latency, slo: SLO) -> dict:
    """Simulate ``cfg`` on the workload and judge it: ``keeps_up`` (not
    ``metrics.overload``-ed on a window long enough to judge; None for a batch
    sent at once, ``metrics.batches``, which has no rate), ``meets_slo``
    (``metrics.slo_columns``), with the p99s (and whether each is a lower
    bound), the offered, accepted and served rates and the goodput."""
    from planner.api import simulate

    row = simulate([cfg], wl, lat).metrics(slo).iloc[0]
    keys = [f"{m}_p99{b}" for m in FIELDS for b in ("", "_is_lower_bound")]
    keys += [
        "offered_rps",
        "accepted_rps",
        "served_rps",
        "goodput_rps",
        "completed",
        "unserved",
        "outcome",
    ]
    out = {k: _plain(row[k]) for k in keys}
    out["max_num_seqs"] = cfg.max_num_seqs
    out["keeps_up"] = bool(metrics.keeps_up(row.to_frame().T)[0])
    out["sent_at_once"] = metrics.is_batch(row)
    if out["sent_at_once"]:
        out["keeps_up"] = None  # no arrival rate to keep up with
    out["overload_judged"] = bool(row.overload_judged)
    out["meets_slo"] = bool(row.meets_slo)
    # p99s only bounded from below when --horizon cut the run: neither met nor missed
    out["slo_open"] = metrics.slo_open_bounds(row, slo)
    out["slo"] = slo.describe()
    out["verdict_line"] = _traffic_line(row, slo, cfg.max_num_seqs)
    return out


def _plain(v: object) -> object:
    """A numpy scalar as the Python value JSON takes."""
    return v.item() if hasattr(v, "item") else v  # type: ignore[union-attr]


def _traffic_verdict(t: dict) -> str:
    """'UNSAFE - ... the traffic is overloaded and misses the SLOs', or 'NOT
    SHOWN SAFE - ...' when the traffic is a burst too short to judge whether it
    keeps up (``metrics.overload_judged``): no claim either way."""
    burst = t["overload_judged"] is False  # never overloaded (``metrics.bursts``)
    fails = ["is overloaded"] if t["keeps_up"] is False and not burst else []  # None: a batch
    open_ = bool(t.get("slo_open"))  # --horizon cut it: the SLOs are neither met nor missed
    if open_:
        fails += ["was cut by --horizon before its SLOs could be judged (above)"]
    elif not t["meets_slo"]:
        fails += ["misses the SLOs"]
    if burst:
        fails.insert(0, "is a burst too short to judge whether it keeps up (above)")
    unsafe = (t["keeps_up"] is False and not burst) or not (t["meets_slo"] or open_)
    head = "UNSAFE" if unsafe else "NOT SHOWN SAFE" if burst or open_ else "SAFE"
    what = "batch (sent at once, no rate)" if t["sent_at_once"] else "traffic"
    return f"{head} - the pool starts and cannot livelock, but the {what} " + " and ".join(fails)


def _traffic_line(row: pd.Series, slo: SLO, seqs: int) -> str:
    """One line: the traffic verdict at max_num_seqs ``seqs`` with its p99s."""
    from planner.answers.safelimit import latency_text, started_text

    over, met = bool(row.overloaded), bool(row.meets_slo)
    open_ = metrics.slo_open_bounds(row, slo)
    missed = ["is NOT JUDGED against the SLOs"] if open_ else [] if met else ["MISSES the SLOs"]
    fails = (["is OVERLOADED"] if over else []) + missed
    if not over and not bool(row.overload_judged):
        fails.insert(0, "is NOT JUDGED to keep up")
    state = " and ".join(fails) if fails else f"{pace_text(row)} and meets the SLOs"
    rejected = int(row.rejected)
    why = f" ({count(rejected, 'request')} rejected by the front end count as misses)"
    more = opt.more_requests(trace=True)  # check simulates a --trace-file only
    burst = "" if over or bool(row.overload_judged) else f"; {burst_text(row, more)}"
    burst += f"; {metrics.open_bounds_text(open_)}" if open_ else ""
    return (
        f"traffic at max_num_seqs {seqs}: {state} ({slo.describe()}){why * (rejected > 0)}: "
        f"{latency_text(row, slo)}; {started_text(row)}{burst}"
    )


def _fixes(
    n: int,
    explicit_blocks: int | None,
    model: str | None,
    gpu: str | None,
    bs: int,
    mml: int,
    tp: int,
    sizing: dict,
) -> dict:
    """What makes the pool safe (``capacity``): the smallest num_gpu_blocks, the
    largest max_model_len on this pool, and, when the pool is sized from
    --model/--gpu, the smallest gpu_memory_utilization giving enough blocks."""
    need = capacity.min_safe_num_gpu_blocks(mml, bs)
    util = None
    if explicit_blocks is None and model is not None and gpu is not None:
        kw = {k: v for k, v in sizing.items() if k != "full_attention_only"}
        util = capacity.min_gpu_memory_utilization(need, model, gpu, bs, tp, **kw)
    return {
        "min_safe_num_gpu_blocks": need,
        "max_safe_max_model_len": capacity.max_safe_model_len(n, bs),
        "min_safe_gpu_memory_utilization": util,
        "utilization_sized": explicit_blocks is None,
    }


def _print_fix(c: Console, o: dict) -> None:
    n, mml = o["num_gpu_blocks"], o["max_model_len"]
    c.print(
        f"fix: --num-gpu-blocks {o['min_safe_num_gpu_blocks']:,} or more "
        f"(+{o['min_safe_num_gpu_blocks'] - n:,}), or --max-model-len "
        f"{o['max_safe_max_model_len']:,} or less on these {n:,} blocks (now {mml:,})"
    )
    if not o["utilization_sized"]:
        return
    u = o["min_safe_gpu_memory_utilization"]
    if u is None:
        c.print(
            "fix: no --gpu-memory-utilization up to 1.0 gives "
            f"{o['min_safe_num_gpu_blocks']:,} blocks; lower --max-model-len or "
            "raise --tensor-parallel-size"
        )
    else:
        c.print(
            f"fix: --gpu-memory-utilization {u:.3f} or more (sized as above, it gives "
            f"{o['min_safe_num_gpu_blocks']:,} blocks with the same allowances)"
        )


def model_kv_figures(
    m: ModelSpec,
    n: int,
    bs: int,
    mml: int,
    mnbt: int,
    async_scheduling: bool,
    tp: int,
    mamba_cache_mode: str = "none",
    gdn_prefill_backend: str = "flashinfer",
    available_bytes: int | None = None,
) -> dict:
    """vLLM 0.33's per-attention-type figures (``kv_cache.capacity``) for a pool
    of ``n`` blocks (or, for a linear-attention hybrid sized from a GPU, of
    ``available_bytes``): groups, blocks per request, "Maximum concurrency" and
    the start-up check. A hybrid also gets its aligned block size, the pool's
    block count at that size, the tokens vLLM 0.33 logs, and the other
    prefix-caching mode's figures on the same bytes (``kv_other_mode``)."""
    args = (m, bs, mml, mnbt, async_scheduling, tp)
    hybrid = "linear" in m.layer_types
    pool = {"available_bytes": available_bytes} if hybrid and available_bytes else {}
    pool = pool or {"num_gpu_blocks": n}
    cap = kv_cache.capacity(
        *args, **pool, mamba_cache_mode=mamba_cache_mode, gdn_prefill_backend=gdn_prefill_backend
    )
    extra: dict = {}
    if hybrid:
        other = "none" if mamba_cache_mode == "align" else "align"
        alt = kv_cache.capacity(
            *args,
            available_bytes=available_bytes or cap.num_gpu_blocks * cap.bytes_per_block,
            mamba_cache_mode=other,
            gdn_prefill_backend=gdn_prefill_backend,
        )
        extra = {
            "kv_num_gpu_blocks": cap.num_gpu_blocks,
            "kv_block_size": cap.block_size,
            "kv_mamba_cache_mode": mamba_cache_mode,
            "kv_gdn_prefill_backend": gdn_prefill_backend if m.state_kind == "gdn" else None,
            **({"kv_state": "mamba2"} if m.state_kind == "mamba2" else {}),
            "kv_linear_state_bytes": m.linear_state_bytes(tp),
            "kv_log_tokens": cap.log_tokens,
            "kv_per_group_tokens": cap.per_group_tokens,
            "kv_other_mode": {
                "mamba_cache_mode": other,
                "block_size": alt.block_size,
                "num_gpu_blocks": alt.num_gpu_blocks,
                "blocks_per_request": alt.blocks_per_request,
                "max_concurrency": alt.max_concurrency,
                "log_tokens": alt.log_tokens,
                "starts": alt.starts,
            },
        }
    return {
        **extra,
        "model": m.describe(),
        "model_source": m.source + (f"; {m.note}" if m.note else ""),
        "kv_groups": [
            {"kind": g.kind, "span": g.span, "layers": g.layers, "page_bytes": g.page_bytes}
            for g in cap.groups
        ],
        "kv_bytes_per_block": cap.bytes_per_block,
        "kv_blocks_per_request": cap.blocks_per_request,
        "kv_in_flight_tokens": cap.in_flight_tokens,
        "kv_max_concurrency": cap.max_concurrency,
        "kv_needed_bytes": cap.needed_bytes,
        "kv_check_bytes": cap.check_bytes,
        "kv_starts": cap.starts,
    }


def _print_model(c: Console, o: dict) -> None:
    c.print(f"model: {o['model']}", soft_wrap=True)
    c.print(f"source: {o['model_source']}", soft_wrap=True)
    if "memory" in o:
        c.print(o["memory"], soft_wrap=True)
    by_kind: dict[tuple, list[int]] = {}
    for g in o["kv_groups"]:
        by_kind.setdefault((g["kind"], g["span"]), []).append(g["layers"])
    kinds = ", ".join(
        f"{kind}{' ' + format(span, ',') if span else ''}: {len(ls)} group"
        f"{'s' if len(ls) > 1 else ''} ({sum(ls)} layers)"
        for (kind, span), ls in by_kind.items()
    )
    c.print(
        f"KV cache groups (vLLM 0.33 get_kv_cache_groups): {kinds}; a block spans "
        f"{o['kv_bytes_per_block']:,} bytes per GPU",
        soft_wrap=True,
    )
    if "kv_block_size" in o:
        _print_hybrid_block(c, o)
    # Tokens in flight size only a window's blocks (kv_cache module docstring).
    windowed = any(g["span"] for g in o["kv_groups"])
    flight = f", {o['kv_in_flight_tokens']:,} tokens in flight" if windowed else ""
    c.print(
        f"blocks per request at max_model_len {o['max_model_len']:,} (all groups{flight}): "
        f"{o['kv_blocks_per_request']:,}; "
        f"Maximum concurrency (vLLM 0.33 log): {o['kv_max_concurrency']:.2f}x",
        soft_wrap=True,
    )
    if "kv_block_size" in o:
        _print_hybrid_other_mode(c, o)
    c.print(
        f"vLLM 0.33 start-up check: one max_model_len request needs "
        f"{o['kv_needed_bytes'] / 2**30:.3f} GiB of KV, the pool less the null block holds "
        f"{o['kv_check_bytes'] / 2**30:.3f} GiB: "
        + ("passes" if o["kv_starts"] else "REFUSES to start"),
        soft_wrap=True,
    )


CACHING_MODES = {
    "none": "prefix caching off: mamba_cache_mode none",
    "align": "prefix caching on, vLLM's default: mamba_cache_mode align",
}


def _print_hybrid_block(c: Console, o: dict) -> None:
    """A linear-attention hybrid's block size, caching mode and pool in tokens."""
    mode = o["kv_mamba_cache_mode"]
    gdn = o["kv_gdn_prefill_backend"]
    backend = f", {gdn} GDN prefill" if mode == "align" and gdn else ""
    what = "Mamba2" if o.get("kv_state") == "mamba2" else "linear-attention"
    c.print(
        f"{what} state {o['kv_linear_state_bytes']:,} B per request and layer: "
        f"vLLM raises the block to {o['kv_block_size']:,} tokens "
        f"({CACHING_MODES[mode]}{backend}); pool {o['kv_num_gpu_blocks']:,} blocks; vLLM 0.33 "
        f"logs GPU KV cache size {o['kv_log_tokens']:,} tokens (concurrency x max_model_len; "
        f"releases before 0.33 logged num_blocks // groups x block = "
        f"{o['kv_per_group_tokens']:,})",
        soft_wrap=True,
    )


def _print_hybrid_other_mode(c: Console, o: dict) -> None:
    a = o["kv_other_mode"]
    gdn = o["kv_gdn_prefill_backend"]
    backend = f", {gdn} GDN prefill" if a["mamba_cache_mode"] == "align" and gdn else ""
    c.print(
        f"with {CACHING_MODES[a['mamba_cache_mode']]}{backend} on the same bytes: block "
        f"{a['block_size']:,} tokens, {a['num_gpu_blocks']:,} blocks, "
        f"{a['blocks_per_request']:,} blocks per request, Maximum concurrency "
        f"{a['max_concurrency']:.2f}x (" + ("starts" if a["starts"] else "refuses to start") + ")",
        soft_wrap=True,
    )


def _sized(o: dict) -> str:
    """Where a derived pool was sized, in parentheses; empty for a given pool."""
    at = o.get("num_gpu_blocks_sized_at")
    return f" ({resolve.sized_at(**at)})" if at else ""


def _print_check(o: dict, gap: tuple[int, int] | None) -> None:
    c = Console(markup=False, soft_wrap=True)
    n, bs, mml = o["num_gpu_blocks"], o["block_size"], o["max_model_len"]
    if "model" in o:
        _print_model(c, o)
    if not o["full_attention_only"]:
        c.print(f"pool: {n:,} blocks x {o.get('kv_block_size', bs):,} tokens{_sized(o)}")
        if "mamba_max_num_seqs" in o:
            _print_mamba_rule(c, o)
        if o["verdict"] == "starts":
            c.print(
                "verdict: STARTS - vLLM 0.33 starts on this pool; the livelock analysis "
                "covers full-attention models only, so no SAFE verdict is given"
            )
        elif not o.get("mamba_starts", True):
            c.print(
                f"verdict: UNSAFE - vLLM 0.33 refuses to start: max_num_seqs "
                f"({o['max_num_seqs']:,}) exceeds available Mamba cache blocks ({n:,}); fix: "
                f"--max-num-seqs {o['mamba_largest_max_num_seqs']:,} (the largest that "
                "starts) or a larger pool "
                "(--gpu-memory-utilization, fewer weights per GPU)",
                soft_wrap=True,
            )
        else:
            c.print("verdict: UNSAFE - vLLM 0.33 refuses to start on this pool")
        return
    c.print(
        f"pool: {n:,} blocks x {bs} tokens{_sized(o)}; {o['usable_blocks']:,} usable (block 0 "
        f"is the null block) = {o['max_servable_tokens']:,} servable tokens"
    )
    c.print(
        f"{o['vllm_counting_null_block']} start-up check (0.33 included), N >= "
        f"cdiv({mml}, {bs}) + 1 = {o['vllm_0_33_min_blocks']:,}: "
        + ("passes" if o["vllm_0_33_starts"] else "REFUSES to start")
    )
    c.print(
        f"{o['older_vllm']} (no null block), N >= cdiv({mml}, {bs}) = "
        f"{o['older_vllm_min_blocks']:,}: "
        + ("passes" if o["older_vllm_starts"] else "refuses to start")
    )
    if gap:
        c.print(
            f"livelock gap: requests of {gap[0]:,}-{gap[1]:,} tokens (prompt + output) are "
            f"admitted and never finish: they stall holding {o['max_servable_tokens'] + 1:,} "
            f"tokens, one past the pool (KV slots {o['max_servable_tokens'] + 1:,}-{mml:,} "
            "do not exist)"
        )
    else:
        c.print(f"livelock gap: none (every request up to max_model_len {mml:,} fits)")
    if "workload" in o:
        c.print(
            f"workload {o['workload']}: {o['workload_in_gap']:,} of {o['workload_requests']:,} "
            f"requests ({o['workload_in_gap_share']:.2%}) fall in the gap"
        )
        if what := front_end_text(o["workload_rejected"], o["workload_cut"], mml):
            c.print(f"note: of this workload, {what}; raise --max-model-len")
    t = o["tokens_per_request"]
    c.print(
        f"Maximum concurrency for {t:,} tokens per request: vLLM logs "
        f"{o['max_concurrency_vllm_log']:.2f}x (N / cdiv(T, bs)); true "
        f"{o['max_concurrency_true']:.2f}x ((N - 1) / cdiv(T, bs))"
    )
    if "traffic" in o:
        c.print(o["traffic"]["verdict_line"])
    pool_safe = o["vllm_0_33_starts"] and not gap
    if o["verdict"] == "safe" and "traffic" in o:
        c.print(
            "verdict: SAFE - vLLM >= 0.29 starts, no request can livelock, and the trace's "
            + (
                "batch (sent at once, no rate)"
                if o["traffic"]["sent_at_once"]
                else "traffic keeps up and"
            )
            + f" meets the SLOs at max_num_seqs {o['traffic']['max_num_seqs']}"
        )
    elif o["verdict"] == "safe":
        c.print(
            "verdict: SAFE - vLLM >= 0.29 starts and no request can livelock (the pool only: "
            "whether it keeps up with traffic is plan run's or plan safe-limit's question)"
        )
    elif pool_safe:
        c.print(
            f"verdict: {_traffic_verdict(o['traffic'])}: plan safe-limit and plan max-rate say "
            "what would hold"
        )
    elif not o["vllm_0_33_starts"]:
        older = ""
        if o["older_vllm_starts"] and gap:
            older = (
                f"; {o['older_vllm']} would start and livelock requests of "
                f"{gap[0]:,}-{gap[1]:,} tokens"
            )
        c.print(f"verdict: UNSAFE - vLLM >= 0.29 refuses to start on this pool{older}")
    else:
        c.print("verdict: UNSAFE - requests in the gap livelock")
    if not pool_safe:
        _print_fix(c, o)
        c.print(f"note: {o['startup_check_history']}")


def _print_mamba_rule(c: Console, o: dict) -> None:
    """The start-up rule of models with Mamba-style state layers
    (``capacity.mamba_max_num_seqs``)."""
    c.print(
        f"Mamba cache blocks (one per decode sequence under CUDA graphs; vLLM's "
        f"CompilationConfig.resolve_cudagraph_mode_and_sizes): max_num_seqs "
        f"{o['max_num_seqs']:,} against {o['mamba_max_num_seqs']:,} blocks: "
        + ("passes" if o["mamba_starts"] else "REFUSES to start"),
        soft_wrap=True,
    )


def safe_limit(
    ctx: typer.Context,
    num_gpu_blocks: opt.NumGpuBlocks = None,
    block_size: opt.BlockSize = None,
    max_model_len: opt.MaxModelLen = None,
    max_num_batched_tokens: opt.MaxNumBatchedTokens = None,
    model: opt.Model = None,
    gpu: opt.Gpu = None,
    gpu_memory_utilization: opt.GpuMemoryUtilization = None,
    usage_context: opt.UsageContextOpt = vllm_defaults.SERVE,
    tensor_parallel_size: opt.TensorParallelSize = 1,
    quantization: opt.Quantization = None,
    kv_cache_dtype: opt.KvCacheDtype = "auto",
    trace_file: opt.TraceFile = None,
    trace_format: opt.TraceFormatOpt = opt.TraceFormat.auto,
    trace_start: opt.TraceStart = 0.0,
    trace_duration: opt.TraceDuration = math.inf,
    trace_columns: opt.TraceColumns = None,
    trace_hash_block_size: opt.TraceHashBlockSize = None,
    max_requests: opt.MaxRequests = None,
    rate_scale: opt.RateScale = 1.0,
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
    horizon: opt.Horizon = math.inf,
    percentile: Annotated[
        list[float] | None,
        typer.Option(metavar="P", help="Request-length percentiles (repeatable)."),
    ] = None,
    preemption_threshold: Annotated[
        float, typer.Option(help="Preemptions per completed request still called safe.")
    ] = 0.0,
    ttft_slo: opt.TtftSlo = None,
    tpot_slo: opt.TpotSlo = None,
    itl_slo: opt.ItlSlo = None,
    e2e_slo: opt.E2eSlo = None,
    goodput: opt.Goodput = None,
    latency: opt.LatencyOpt = opt.LatencyKind.linear,
    alpha_coeffs: opt.AlphaCoeffs = None,
    beta_coeffs: opt.BetaCoeffs = None,
    mfu: opt.Mfu = None,
    mbu: opt.Mbu = None,
    step_overhead_us: opt.StepOverheadUs = 0.0,
    measured_scale: opt.MeasuredScale = None,
    enable_prefix_caching: opt.EnablePrefixCaching = None,
    async_scheduling: opt.AsyncScheduling = None,
    speculative_config: opt.SpeculativeConfigOpt = None,
    spec_acceptance: opt.SpecAcceptance = None,
    spec_acceptance_log: opt.SpecAcceptanceLog = None,
    spec_seed: opt.SpecSeed = 0,
    prefix_groups: opt.PrefixGroups = 0,
    prefix_len: opt.PrefixLen = 0,
    prefix_share: opt.PrefixShare = 0.0,
    as_json: opt.AsJson = False,
) -> None:
    """The largest KV-safe max_num_seqs for a workload and pool: analytic,
    simulation-verified, throughput- and goodput-optimal."""
    from planner.answers.safelimit import find_safe_limits, recommend, search_upper

    reject_inert(ctx, RUN_RULES)
    srv = server.resolve_server(
        ctx,
        ctx.params,
        model,
        gpu,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        usage=usage_context,
    )
    srv.pop("max_num_seqs")  # searched, not set
    v = server.values(srv)
    block_size, max_model_len = v["block_size"], v["max_model_len"]
    max_num_batched_tokens, gpu_memory_utilization = (
        v["max_num_batched_tokens"],
        v["gpu_memory_utilization"],
    )
    async_scheduling, enable_prefix_caching = v["async_scheduling"], v["enable_prefix_caching"]
    slo = opt.slo_from(ttft_slo, tpot_slo, itl_slo, e2e_slo, goodput)
    if num_gpu_blocks is None and model is None and gpu is None:
        raise ValueError("give --num-gpu-blocks, or --model and --gpu")
    attn: dict = {}
    if model is not None:  # on a given pool too: the model's attention shapes the limit
        m = hardware.model(model, quantization, kv_cache_dtype)
        if "linear" in m.layer_types:  # the searched values would break vLLM's Mamba rule
            resolve.full_attention_model(m)
        attn = resolve.attention(None, model, quantization, kv_cache_dtype)
        block_size = resolve.simulated_block_size(
            block_size, model, tensor_parallel_size, quantization, kv_cache_dtype
        )
    full = attn.get("sliding_window", 0) == 0 and attn.get("full_attention_groups", 1) <= 1
    reject_inert_hardware(ctx, full, num_gpu_blocks is not None)
    if max_model_len < 1:
        raise ValueError(f"--max-model-len must be >= 1, got {max_model_len}")
    spec = opt.speculation_from(speculative_config, spec_acceptance, spec_seed, spec_acceptance_log)
    lat = opt.step_time(
        latency, model, gpu, tensor_parallel_size, alpha_coeffs, beta_coeffs, mfu, mbu,
        step_overhead_us, quantization, kv_cache_dtype, measured_scale,
        latency_given=given(ctx, "latency"), speculation=spec,
    )  # fmt: skip
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
    # A derived pool is sized at the largest max_num_seqs searched: the smallest
    # pool of the search (the sampler's activation grows with it), so each
    # limit holds on the pool vLLM gives any searched value.
    at_seqs = search_upper(wl, max_num_batched_tokens)
    sizing = {"max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": at_seqs,
              "quantization": quantization, "kv_cache_dtype": kv_cache_dtype,
              "speculation": spec, "full_attention_only": False, "simulated": True}  # fmt: skip
    n = _pool(
        num_gpu_blocks, model, gpu, gpu_memory_utilization, block_size, tensor_parallel_size, sizing
    )
    cfg = SchedulerConfig(
        num_gpu_blocks=n,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        horizon_s=horizon,
        enable_prefix_caching=enable_prefix_caching,
        async_scheduling=async_scheduling,
        speculation=spec,
        **attn,
    )
    clock_bound(cfg, lat)  # before any work: the int64 ns clock cannot wrap
    cfg.check_pool_starts()
    for message in unused_field_warnings(wl, [cfg]):
        warn(message)
    pct = tuple(percentile) if percentile else (50.0, 90.0, 99.0, 100.0)
    pool = None
    if num_gpu_blocks is None:  # each max_num_seqs on the pool vLLM's profile gives it

        @functools.cache
        def pool(seqs: int) -> int:
            return _pool(None, model, gpu, gpu_memory_utilization, block_size,
                         tensor_parallel_size, {**sizing, "max_num_seqs": seqs})  # fmt: skip

    with opt.say_compile([cfg], wl, lat):
        s = find_safe_limits(wl, cfg, lat, pct, preemption_threshold, slo, pool=pool)
    rec = recommend(s)
    if as_json:
        out = _limits_json(s, wl.name, n, rec)
        out["num_gpu_blocks_sized_at"] = resolve.sized_at_json(
            at_seqs, max_num_batched_tokens, num_gpu_blocks is None
        )
        out["server_settings"] = resolve.server_json(srv)
        out["speculation"] = None if cfg.speculation is None else cfg.speculation.as_json()
        print_json(out)
        return
    server.print_settings(srv)
    if cfg.speculation is not None:
        print(cfg.speculation.line())
    _print_limits(s, wl.name, n, block_size, rec.text)
    if num_gpu_blocks is None:
        blocks = s.table.num_gpu_blocks
        print(
            f"num_gpu_blocks derived from presets for each max_num_seqs evaluated, at vLLM's "
            f"start-up profile with it and max_num_batched_tokens {max_num_batched_tokens:,}: "
            f"{int(blocks.min()):,} to {int(blocks.max()):,} (column num_gpu_blocks of --json's "
            f"evaluated rows); the analytic limits use {n:,}, the pool at max_num_seqs "
            f"{at_seqs:,} (the largest searched, so the smallest pool)"
        )
    else:
        print(f"num_gpu_blocks {n:,} (given)")


EVALUATED_COLUMNS = (
    "max_num_seqs",
    "num_gpu_blocks",
    "completed",
    "preemptions",
    "throughput_rps",
    "goodput_rps",
    "ttft_s_p99",
    "ttft_s_p99_is_lower_bound",
    "tpot_s_p99",
    "tpot_s_p99_is_lower_bound",
    "itl_s_p99",
    "itl_s_p99_is_lower_bound",
    "e2e_s_p99",
    "e2e_s_p99_is_lower_bound",
    "overloaded",
    "overload_judged",
    "offered_rps",
    "accepted_rps",
    "served_rps",
    "outcome",
)


def _limits_json(s: object, name: str, n: int, rec: object) -> dict:
    from planner.answers.safelimit import Recommendation, SafeLimits, simulated_is_bound

    assert isinstance(s, SafeLimits) and isinstance(rec, Recommendation)
    cols = [c for c in (*EVALUATED_COLUMNS, "meets_slo") if c in s.table]
    return {
        "workload": name,
        "num_gpu_blocks": n,
        "usable_blocks": s.usable_blocks,
        "mean_prompt_tokens": s.mean_prompt,
        "mean_output_tokens": s.mean_output,
        "mean_request_tokens": s.mean_request,
        "analytic": s.analytic,
        "analytic_at": s.analytic_at,
        "request_tokens_at": s.length_at,
        "simulated": s.simulated,
        "simulated_is_lower_bound": simulated_is_bound(s),
        "search_limit": s.search_limit,
        "preemption_threshold": s.preemption_threshold,
        "throughput_optimal": s.throughput_optimal,
        "goodput_optimal": s.goodput_optimal,
        "optimal_at_search_limit": {
            "throughput": s.throughput_optimal >= s.search_limit,
            "goodput": s.goodput_optimal is not None and s.goodput_optimal >= s.search_limit,
        },
        **s.slo.as_dict(),
        "recommended": rec.max_num_seqs,
        "recommended_reason": rec.reason,
        "recommendation": rec.text,
        "load_fraction_served": rec.load_fraction,
        "evaluated": s.table[cols].to_dict("records"),
    }


def _print_limits(s: object, name: str, n: int, bs: int, rec: str) -> None:
    from planner.answers.safelimit import SafeLimits, search_limit_text, simulated_is_bound

    assert isinstance(s, SafeLimits)
    mean_len = s.mean_request
    capped = abs(mean_len - (s.mean_prompt + s.mean_output)) > 0.05
    table = Table(title=f"KV-safe max_num_seqs: {name} on {n:,} blocks", show_header=True)
    table.add_column("limit")
    table.add_column("max_num_seqs", justify="right")
    table.add_column("derivation")
    slack = f" + {s.kv_slack:,} draft" if s.kv_slack else ""
    table.add_row(
        "analytic (mean)",
        str(s.analytic),
        f"floor({s.usable_blocks:,} / cdiv({mean_len:,.1f}{slack}, {bs})): mean request, "
        "prompt + output capped at max_model_len, admitted requests"
        if capped
        else f"floor({s.usable_blocks:,} / cdiv({s.mean_prompt:,.1f} + {s.mean_output:,.1f} = "
        f"{mean_len:,.1f}{slack}, {bs}))",
    )
    for key, v in s.analytic_at.items():
        table.add_row(
            f"analytic ({key})", str(v), f"request length {s.length_at[key]:,.0f}{slack} tokens"
        )
    if s.kv_slack:
        table.add_row(
            "", "", f"draft: {s.kv_slack:,} tokens of drafts and lookahead slots per request "
            "(Speculation.kv_slack_tokens)"
        )  # fmt: skip
    crit = (
        "zero preemptions"
        if s.preemption_threshold == 0
        else f"<= {s.preemption_threshold:g} preemptions per completed request"
    )
    if s.simulated is None:
        verified = "none"
        how = f"max_num_seqs 1 already exceeds {crit}"
    elif simulated_is_bound(s):
        verified = f"≥ {s.simulated:,}"
        how = f"every value up to the {search_limit_text(s)} has {crit}"
    else:
        verified = str(s.simulated)
        how = f"largest value such that it and every smaller one have {crit}"
    table.add_row("simulation-verified", verified, how + _state(s, s.simulated))
    b = s.row(s.throughput_optimal)
    assert b is not None
    table.add_row(
        "throughput-optimal",
        _seqs_text(s, s.throughput_optimal),
        f"smallest within 1% of the best completions/s ({b.throughput_rps:.3f} req/s)"
        + _state(s, s.throughput_optimal),
    )
    if s.goodput_optimal is not None:
        g = s.row(s.goodput_optimal)
        assert g is not None
        table.add_row(
            "goodput-optimal",
            _seqs_text(s, s.goodput_optimal),
            f"smallest within 1% of the most requests per second with "
            f"{s.slo.describe(per_request=True)}: {g.goodput_rps:.3f} req/s"
            + _state(s, s.goodput_optimal),
        )
    c = Console(markup=False, soft_wrap=True)
    c.print(table)
    c.print(f"recommendation: {rec}")


def _seqs_text(s: object, seqs: int) -> str:
    """A max_num_seqs found by the search; at the search limit, a bound: larger
    values were not tried."""
    from planner.answers.safelimit import SafeLimits, search_limit_text

    assert isinstance(s, SafeLimits)
    if seqs >= s.search_limit:
        return f"≥ {seqs:,} ({search_limit_text(s)})"
    return str(seqs)


def _state(s: object, seqs: int | None) -> str:
    """'; overloaded' / '; misses the SLOs' / '' for the evaluated row at ``seqs``:
    the table's limits are facts about the pool, and say when they fail the traffic."""
    from planner.answers.safelimit import SafeLimits

    assert isinstance(s, SafeLimits)
    row = s.row(seqs)
    if row is None:
        return ""
    notes = ["overloaded"] if bool(row.overloaded) else []
    if not bool(row.get("overload_judged", True)):
        notes.append("overload not judged (a burst)")
    if s.slo.given() and not bool(row.meets_slo):
        notes.append("misses the SLOs")
    return f"; {' and '.join(notes)}" if notes else ""


def register(app: typer.Typer) -> None:
    """Add ``check`` and ``safe-limit`` to the ``plan`` app."""
    app.command("check", cls=opt.BoundedCommand)(check)
    app.command("safe-limit", cls=opt.BoundedCommand)(safe_limit)
