"""``plan run --prefill-replicas P``: a disaggregated prefill/decode deployment.

The options of ``plan run`` describe the decode replicas (``--replicas`` of
them, on ``--gpu`` at ``--tensor-parallel-size``); ``--prefill-replicas``,
``--prefill-gpu``, ``--prefill-tensor-parallel-size``,
``--prefill-max-num-seqs`` and ``--prefill-max-num-batched-tokens`` the
prefill pool, which otherwise has the same settings (vLLM starts each
instance with its own flags); ``--kv-transfer-bandwidth`` and
``--kv-transfer-latency`` the link (``planner.kv_transfer``). The simulation
is ``planner.disagg.simulate_disaggregated``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any

import pandas as pd
import typer

from planner import resolve
from planner.cli import options as opt
from planner.cli import server
from planner.cli.inert import given
from planner.cli.json_out import print_json
from planner.cli.result_folder import check_requests_path, write_requests_table
from planner.cli.run_report import ids_text, said_of, startup_warning
from planner.config import SchedulerConfig, check_vllm_args
from planner.disagg import (
    PDRouter,
    Pool,
    simulate_disaggregated,
    summarize_disaggregated,
)
from planner.kv_transfer import KVTransfer
from planner.latency.step_time import Latency
from planner.metrics import OVERLOADED, front_end_text
from planner.models import hardware, vllm_defaults
from planner.slo import SLO, seconds_text
from planner.speculative import Speculation
from planner.text import count
from planner.workload.arrays import Workload

EXIT_FAILURE_VERDICT = 1  # --fail-on: the outcome is one of the given classes (plan run's)
# vLLM's KV connector for disaggregated serving (NixlConnector, both roles
# ``kv_both`` as vLLM's disaggregated_serving example starts them).
KV_TRANSFER_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
ONLY_WITH_PREFILL = (
    "prefill_gpu",
    "prefill_tensor_parallel_size",
    "prefill_max_num_seqs",
    "prefill_max_num_batched_tokens",
    "kv_transfer_bandwidth",
    "kv_transfer_latency",
)
# Options a disaggregated run does not take yet, each with why.
NOT_WITH_PREFILL = {
    "trace": "the per-step trace is one engine's",
    "out": "the result folder is one engine's",
    "max_concurrency": "closed-loop clients are not routed through two pools",
    "think_time": "closed-loop clients are not routed through two pools",
    "turns": "multi-turn sessions are not routed through two pools",
}


def check_options(ctx: typer.Context, o: dict[str, Any]) -> None:
    """Refuse options that would not act (one line, ``ValueError``): the
    prefill pool's and the link's without --prefill-replicas, and with it the
    outputs and client models the disaggregated run does not have yet."""
    if o["prefill_replicas"] < 0:
        raise ValueError(f"--prefill-replicas must be >= 0, got {o['prefill_replicas']}")
    if o["prefill_replicas"] == 0:
        for name in ONLY_WITH_PREFILL:
            if given(ctx, name):
                raise ValueError(f"--{name.replace('_', '-')} needs --prefill-replicas > 0")
        return
    for name, why in NOT_WITH_PREFILL.items():
        if given(ctx, name):
            raise ValueError(
                f"--{name.replace('_', '-')} is not supported with --prefill-replicas yet ({why})"
            )


def run(
    ctx: typer.Context,
    o: dict[str, Any],
    decode: tuple[SchedulerConfig, Latency],
    wl: Workload,
    slo: SLO,
    fail_classes: frozenset[str],
    settings: tuple[dict, str],
    warnings: list[str] = (),  # type: ignore[assignment]
) -> None:
    """Simulate the deployment and print it (text, or --json; ``settings``:
    the resolved server and what it assumes, ``server.print_settings``;
    ``warnings``: lines for stderr, said once nothing is refused, so a
    refusal stays one line).
    Raises ValueError (one line) for a prefill pool that cannot start or a
    bad link; ``typer.Exit(1)`` when the deployment's outcome (its worst
    pool's, ``summarize_disaggregated``) or overload is one of
    ``fail_classes``."""
    if wl.session is not None or wl.hash_ids is not None:
        raise ValueError(
            "--prefill-replicas: multi-turn sessions and block-hash traces are not routed "
            "through a disaggregated deployment yet"
        )
    # Refused before anything prints: the prefill pool, the link, the decode
    # side's own limits, the horizon, the file.
    prefill = _prefill_pool(ctx, o, decode)
    kv = _link(o, decode[0])
    _check_pools(decode[0], prefill[0], kv, wl)
    router = pd_router(ctx, o)
    if o["requests_out"] is not None:
        check_requests_path(o["requests_out"])
    for line in [*warnings, *said_of(startup_warning(prefill[0]), "prefill replicas")]:
        print(line, file=sys.stderr)
    if not o["as_json"]:
        server.print_settings(settings[0], also=settings[1])
        lines = prefill_setting_lines(ctx, o, decode[0])
        if lines:
            print("prefill replicas' own settings not given (source):")
            for line in lines:
                print(f"  {line}")
    summary = _simulate(o, decode, prefill, kv, wl, slo, router)
    if summary["outcome"] in fail_classes or (OVERLOADED in fail_classes and summary["overloaded"]):
        raise typer.Exit(EXIT_FAILURE_VERDICT)


def _check_pools(
    decode_cfg: SchedulerConfig, prefill_cfg: SchedulerConfig, kv: KVTransfer, wl: Workload
) -> None:
    """What ``simulate_disaggregated`` would refuse, before any output: the
    decode side's config with the link (``SchedulerConfig``'s kv_transfer
    checks), the horizon and block sizes against the workload
    (``workload_checks``). Raises ValueError or WorkloadError (one line)."""
    from planner.workload_checks import check_block_sizes, check_horizon

    remote = dataclasses.replace(decode_cfg, replicas=1, kv_transfer=kv)
    check_block_sizes(wl, [remote, prefill_cfg])
    check_horizon(wl, [remote, prefill_cfg], "--horizon")


def pd_router(ctx: typer.Context, o: dict[str, Any]) -> PDRouter:
    """The deployment's router: --router (``llm_d`` or ``round_robin``; the
    option's own default, round_robin, is a colocated fleet's: a
    disaggregated run takes llm-d's unless --router is given) and
    --router-seed. Raises ValueError (one line) for another router, or a
    seed given to the unseeded one."""
    name = o["router"].value if given(ctx, "router") else PDRouter().name
    if name != "llm_d" and given(ctx, "router_seed"):
        raise ValueError("--router-seed needs --router llm_d (the only seeded P/D router)")
    return PDRouter(name, o["router_seed"])


def _simulate(
    o: dict[str, Any],
    decode: tuple[SchedulerConfig, Latency],
    prefill_pool: tuple[SchedulerConfig, Latency],
    kv: KVTransfer,
    wl: Workload,
    slo: SLO,
    router: PDRouter,
) -> dict:
    """Simulate the deployment (``decode`` and ``prefill_pool``: one replica's
    config and step time each; ``kv`` the link; ``router`` the two pools')
    and print it. Returns the summary (``summarize_disaggregated``)."""
    decode_cfg, decode_lat = decode
    prefill_cfg, prefill_lat = prefill_pool
    decode = Pool(decode_cfg.replicas, dataclasses.replace(decode_cfg, replicas=1), decode_lat)
    prefill = Pool(o["prefill_replicas"], prefill_cfg, prefill_lat)
    # say_compile refuses a horizon before arrivals
    with opt.say_compile([decode.config, prefill_cfg], wl, [decode_lat, prefill_lat]):
        res = simulate_disaggregated(wl, decode, prefill, kv, router)
    summary = summarize_disaggregated(res, slo)
    if o["requests_out"] is not None:
        write_requests_table(o["requests_out"], res.requests)
    facts = _facts(o, prefill, decode, kv, router)
    if o["as_json"]:
        print_json({"disaggregated": facts, "summary": summary})
    else:
        _print(facts, summary, slo, decode.config.speculation)
    return summary


def _prefill_pool(
    ctx: typer.Context, o: dict[str, Any], decode: tuple[SchedulerConfig, Latency]
) -> tuple[SchedulerConfig, Latency]:
    """One prefill replica's config and step time: the decode replicas'
    settings on --prefill-gpu at --prefill-tensor-parallel-size, with
    --prefill-max-num-seqs and --prefill-max-num-batched-tokens where given,
    its pool sized for them (``resolve.num_gpu_blocks``; --num-gpu-blocks,
    when given, sizes both pools). On the decode replicas' GPU and TP, their
    step-time model itself (built once: its notes print once)."""
    decode_cfg, decode_lat = decode
    gpu, tp = _prefill_gpu(o), _prefill_tp(o)
    if o["prefill_gpu"] is not None:
        if o["gpu"] is None:
            raise ValueError("--prefill-gpu needs --gpu (the decode replicas' GPU)")
        hardware.gpu(o["prefill_gpu"], flag="--prefill-gpu")  # HardwareError: one line
    if o["prefill_tensor_parallel_size"] is not None and o["model"] is None:
        raise ValueError("--prefill-tensor-parallel-size needs --model (it sizes the pool)")
    same_gpu = o["prefill_gpu"] is None or (
        hardware.gpu(o["prefill_gpu"]).name == hardware.gpu(o["gpu"]).name  # aliases, case
    )
    same = same_gpu and tp == o["tensor_parallel_size"]
    try:
        lat = decode_lat if same else None
        return _prefill_pool_at(ctx, o, decode_cfg, gpu, tp, lat, quiet=same_gpu)
    except ValueError as e:
        msg = str(e).replace("a tensor-parallel size of", "--prefill-tensor-parallel-size")
        for name, (flag, own) in PREFILL_OWN.items():  # a value the prefill's own flag gave
            if o[f"prefill_{name}"] is not None:
                msg = msg.replace(flag, own)
        raise ValueError(f"the prefill replicas: {msg}") from None


def _prefill_gpu(o: dict[str, Any]) -> str | None:
    """The prefill replicas' GPU: --prefill-gpu, else --gpu."""
    return o["gpu"] if o["prefill_gpu"] is None else o["prefill_gpu"]


def _prefill_tp(o: dict[str, Any]) -> int:
    """The prefill replicas' tensor parallelism: --prefill-tensor-parallel-size,
    else --tensor-parallel-size."""
    return o["prefill_tensor_parallel_size"] or o["tensor_parallel_size"]


def _prefill_pool_at(
    ctx: typer.Context,
    o: dict[str, Any],
    decode_cfg: SchedulerConfig,
    gpu: str | None,
    tp: int,
    lat: Latency | None = None,
    quiet: bool = False,
) -> tuple[SchedulerConfig, Latency]:
    """``_prefill_pool`` on ``gpu`` at ``tp``, with step time ``lat`` (None:
    built from the latency options for that GPU and TP; ``quiet``: on the
    decode replicas' GPU, whose measured-data line was printed already)."""
    model, quant, kv_dtype = o["model"], o["quantization"], o["kv_cache_dtype"]
    own = _prefill_own(ctx, o, decode_cfg)
    if lat is None:
        lat = opt.step_time(
            o["latency"], model, gpu, tp, o["alpha_coeffs"], o["beta_coeffs"], o["mfu"],
            o["mbu"], o["step_overhead_us"], quant, kv_dtype, o["measured_scale"],
            latency_given=given(ctx, "latency"), quiet=quiet,
        )  # fmt: skip
    blocks, _ = resolve.num_gpu_blocks(
        o["num_gpu_blocks"], model, gpu, o["gpu_memory_utilization"], decode_cfg.block_size, tp,
        decode_cfg.num_gpu_blocks, quantization=quant, kv_cache_dtype=kv_dtype,
        max_num_batched_tokens=own.get("max_num_batched_tokens", decode_cfg.max_num_batched_tokens),
        max_num_seqs=own.get("max_num_seqs", decode_cfg.max_num_seqs), full_attention_only=False,
        simulated=True,
        disable_hybrid_kv_cache_manager=o["disable_hybrid_kv_cache_manager_given"],
        speculation=decode_cfg.speculation,
    )  # fmt: skip
    cfg = dataclasses.replace(decode_cfg, num_gpu_blocks=blocks, replicas=1, **own)
    return cfg, lat


# The prefill replicas' own settings: --prefill-<name> (else the decode
# replicas' --<name>); vLLM starts each instance with its own flags.
PREFILL_OWN = {
    "tensor_parallel_size": ("--tensor-parallel-size", "--prefill-tensor-parallel-size"),
    "max_num_seqs": ("--max-num-seqs", "--prefill-max-num-seqs"),
    "max_num_batched_tokens": ("--max-num-batched-tokens", "--prefill-max-num-batched-tokens"),
}
SCHEDULER_OWN = ("max_num_seqs", "max_num_batched_tokens")  # of PREFILL_OWN


def prefill_settings(cfg: SchedulerConfig, own: dict[str, int]) -> dict[str, int]:
    """A prefill replica's max_num_seqs and max_num_batched_tokens: its own
    (``own``, the --prefill-* values) over ``cfg``'s."""
    return {n: own.get(n, getattr(cfg, n)) for n in SCHEDULER_OWN}


def _prefill_own(
    ctx: typer.Context, o: dict[str, Any], decode_cfg: SchedulerConfig
) -> dict[str, int]:
    """The scheduler settings the prefill replicas take for themselves, where
    they differ from the decode replicas': --prefill-max-num-seqs and
    --prefill-max-num-batched-tokens where given, else --max-num-seqs and
    --max-num-batched-tokens where given (both pools), else vLLM 0.33's
    defaults for the prefill instance's own GPU (``_prefill_defaults``: on
    a GPU with less memory than the decode GPU, vLLM starts with smaller
    batch sizes), checked as vLLM checks them at start-up
    (``config.check_vllm_args``). Raises ValueError (one line)."""
    own = {n: o[f"prefill_{n}"] for n in SCHEDULER_OWN if o[f"prefill_{n}"] is not None}
    own |= {name: s.value for name, s in _prefill_defaults(ctx, o, decode_cfg).items()}
    merged = prefill_settings(decode_cfg, own)
    check_vllm_args(merged["max_num_seqs"], merged["max_num_batched_tokens"])
    return own


def _prefill_defaults(
    ctx: typer.Context, o: dict[str, Any], decode_cfg: SchedulerConfig
) -> dict[str, vllm_defaults.Setting]:
    """The prefill instance's max_num_seqs and max_num_batched_tokens as
    ``vllm serve`` resolves them on its GPU (``resolve.server``:
    ``EngineArgs.get_batch_defaults`` by the GPU's memory and the usage
    context, max_num_seqs at most the token budget), from what was given for
    it (--prefill-*, else the shared flag) and the decode replicas' other
    settings. Without --model and --gpu: the decode replicas' values, as
    given. Only the defaults that differ from the decode replicas' values."""
    shared = {n: (getattr(decode_cfg, n) if given(ctx, n) else None) for n in SCHEDULER_OWN}
    asked = {n: o[f"prefill_{n}"] if o[f"prefill_{n}"] is not None else shared[n]
             for n in SCHEDULER_OWN}  # fmt: skip
    if o["model"] is None and o["gpu"] is None:
        return {}
    values = {**asked, "max_model_len": decode_cfg.max_model_len}
    out = resolve.server(
        values, o["model"], _prefill_gpu(o), quantization=o["quantization"],
        kv_cache_dtype=o["kv_cache_dtype"], usage=o["usage_context"],
    )  # fmt: skip
    return {
        n: out[n]
        for n in SCHEDULER_OWN
        if out[n].source != vllm_defaults.GIVEN and out[n].value != getattr(decode_cfg, n)
    }


def prefill_setting_lines(
    ctx: typer.Context, o: dict[str, Any], decode_cfg: SchedulerConfig
) -> list[str]:
    """The prefill replicas' settings that were not given and differ from the
    decode replicas', one line each with its source (empty when none)."""
    gpu = hardware.gpu(_prefill_gpu(o)).name if _prefill_gpu(o) else None
    return [
        f"{name} {s.value:,} (vLLM default on the prefill GPU {gpu}: {s.why})"
        for name, s in _prefill_defaults(ctx, o, decode_cfg).items()
    ]


def _link(o: dict[str, Any], decode_cfg: SchedulerConfig) -> KVTransfer:
    """The link each decode GPU pulls its share of a request's KV over: the
    model's KV bytes per token per GPU, a drafter's KV layer included
    (``SchedulerConfig.kv_block_bytes`` over block_size: the decode replica's
    tensor-parallel shard)."""
    per_token = decode_cfg.kv_block_bytes / decode_cfg.block_size
    return KVTransfer.from_link(per_token, o["kv_transfer_bandwidth"], o["kv_transfer_latency"])


def _gpu_name(gpu: str | None) -> str | None:
    """The GPU preset's own name for ``gpu`` as typed (``h100`` -> ``H100``)."""
    return None if gpu is None else hardware.gpu(gpu).name


def _facts(
    o: dict[str, Any], prefill: Pool, decode: Pool, kv: KVTransfer, router: PDRouter
) -> dict:
    """What was simulated, for the output."""

    def pool(p: Pool, gpu: str | None, tp: int) -> dict:
        return {
            "replicas": p.replicas,
            "gpu": gpu,
            "tensor_parallel_size": tp,
            "num_gpu_blocks": p.config.num_gpu_blocks,
            "max_num_seqs": p.config.max_num_seqs,
            "max_num_batched_tokens": p.config.max_num_batched_tokens,
            "step_time": p.latency.describe(),
        }

    ptp = _prefill_tp(o)
    out = {
        "prefill": pool(prefill, _gpu_name(_prefill_gpu(o)), ptp),
        "decode": pool(decode, _gpu_name(o["gpu"]), o["tensor_parallel_size"]),
        "kv_transfer": {
            "bandwidth_gbps_per_gpu": o["kv_transfer_bandwidth"],
            "latency_us": o["kv_transfer_latency"],
            "ms_per_1000_tokens": kv.duration_ns(1000) / 1e6,
        },
        "router": router.describe(),
        "router_name": router.name,
        "max_model_len": decode.config.max_model_len,
        # both roles run it (``role_serve_command``); None without
        "speculation": None if decode.config.speculation is None
        else decode.config.speculation.as_json(),
    }  # fmt: skip
    if o["model"] is not None:
        out["vllm_serve"] = {
            "prefill": role_serve_command(
                o["model"], o["gpu_memory_utilization"], prefill.config, ptp, o["num_gpu_blocks"]
            ),
            "decode": role_serve_command(
                o["model"],
                o["gpu_memory_utilization"],
                decode.config,
                o["tensor_parallel_size"],
                o["num_gpu_blocks"],
            ),
        }
    return out


def role_serve_command(
    model: str, gmu: float, cfg: SchedulerConfig, tp: int, blocks_override: int | None = None
) -> str:
    """``vllm serve`` for one replica of a disaggregated role (``cfg`` at
    tensor parallelism ``tp``, ``--gpu-memory-utilization`` ``gmu``), with the
    KV connector (``KV_TRANSFER_CONFIG``) and, when the pool was given in
    blocks (``blocks_override``, --num-gpu-blocks), vLLM's
    ``--num-gpu-blocks-override``."""
    from planner.answers.sizing import serve_command

    row = pd.Series(
        {**cfg.columns(), "tensor_parallel_size": tp, "gpu_memory_utilization": gmu}
    )  # fmt: skip
    extra: dict = {"kv_transfer_config": f"'{KV_TRANSFER_CONFIG}'"}
    if blocks_override is not None:
        extra["num_gpu_blocks_override"] = int(blocks_override)
    return serve_command(row, model, extra)


def _print(facts: dict, s: dict, slo: SLO, spec: Speculation | None = None) -> None:
    """The text output (``spec``: the speculative decoding both pools run)."""
    for role in ("prefill", "decode"):
        p = facts[role]
        where = f"{p['gpu']}, TP {p['tensor_parallel_size']}, " if p["gpu"] else ""
        sched = f"max_num_seqs {p['max_num_seqs']:,}, max_num_batched_tokens "
        sched += f"{p['max_num_batched_tokens']:,}, "
        print(
            f"{role}: {count(p['replicas'], 'replica')} ({where}{sched}"
            f"{p['num_gpu_blocks']:,} blocks; {p['step_time']})"
        )
    x = facts["kv_transfer"]
    print(
        f"KV transfer: {_num(x['bandwidth_gbps_per_gpu'])} GB/s per GPU, "
        f"{_num(x['latency_us'])} us per load ({_fmt_s(x['ms_per_1000_tokens'] / 1e3)} per "
        "1,000 prompt tokens)"
    )
    print(f"router: {facts['router']}")
    if spec is not None:
        print(spec.line() + " (both pools)")
    front = f", rejected {s['rejected']:,}" if s["rejected"] else ""
    front += f", cut short {s['cut']:,}" if s["cut"] else ""
    print(
        f"requests {s['requests']:,}: completed {s['completed']:,}, unfinished "
        f"{s['unfinished']:,}{front}; {s['throughput_rps']:.2f} req/s, "
        f"{s['output_tps']:,.0f} output tok/s"
    )
    if s["rejected"] or s["cut"]:
        print(front_end_text(s["rejected"], s["cut"], facts["max_model_len"]) + ": misses")
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        parts = [
            f"p{q} {_fmt_s(s[f'{name}_p{q}'])}{'+' if s[f'{name}_p{q}_is_lower_bound'] else ''}"
            for q in (50, 90, 99)
        ]
        print(f"{name[:-2].upper():5s} " + ", ".join(parts))
    print(
        f"KV load: mean {_fmt_s(s['transfer_s_mean'])}, p99 {_fmt_s(s['transfer_s_p99'])}; "
        f"from decode arrival to the load's start (loads started) p99 "
        f"{_fmt_s(s['kv_wait_s_p99'])}"
    )
    if s["decode_requests"]:
        print(_decode_holds_line(s))
    if s["read_passes"]:
        print(_holds_line(s))
    window = " over the simulated window" if s["cut_by"] else ""
    for role in ("prefill", "decode"):
        if role == "decode" and s["decode_requests"] == 0:
            print("decode pool: no request reached it")
            continue
        if role == "decode" and s["decode_landed"] == 0 and s["cut_by"]:
            print(
                f"decode pool: not judged: no request's KV landed before {s['cut_by']} ended "
                f"the run (each load took {_fmt_s(s['transfer_s_mean'])} on average), so it "
                f"had nothing to serve yet; outcome {s['decode_outcome']} says nothing about it"
            )
            continue
        verdict = (
            f"OVERLOADED (falls behind its traffic{window})" if s[f"{role}_overloaded"]
            # a pool that can never finish a request is not said to keep up
            else "LIVELOCKED (a request it can never finish; overload not judged)"
            if s[f"{role}_outcome"] == "livelocked"
            else "not judged (its arrivals are a burst too short to judge overload)"
            if not s[f"{role}_overload_judged"]
            else f"keeps up{window}"
        )  # fmt: skip
        if role == "prefill":
            verdict += _backpressure_note(s)
        elif s["prefill_held_back_by"] == "decode" and verdict.startswith("keeps up"):
            verdict = (
                "the bottleneck: it keeps up only with the prefills that reach it, which its "
                "loads, waiting for its blocks, hold back"
            )
        print(f"{role} pool: {verdict}; outcome {s[f'{role}_outcome']}")
    if s["livelocked"]:
        stuck = s["stuck_request_ids"]
        print(
            "a replica LIVELOCKED (a request it can never finish); stuck there (request ids, "
            f"0-based in arrival order): {ids_text(stuck) if stuck else 'none unfinished'}"
        )
    if s["cut_by"]:
        late = f"; {s['not_arrived']:,} requests due after it are in no statistic"
        print(
            f"the run was cut by {s['cut_by']} before every request finished: its figures are a "
            f"truncated run's{late if s['not_arrived'] else ''}"
        )
    if "meets_slo" in s:
        why = "" if s["meets_slo"] else " (" + "; ".join(s["slo_misses"]) + ")"
        print(
            f"SLO {slo.describe()}: {'met' if s['meets_slo'] else 'NOT met'}{why}; "
            f"goodput {s['goodput_rps']:.2f} req/s"
        )
    for role, cmd in facts.get("vllm_serve", {}).items():
        print(f"vllm serve ({role}): {cmd}")
    if any(s[k] for k in s if k.endswith("_is_lower_bound")):
        print("(+ = a lower bound: requests unfinished when the run ended)")


def _backpressure_note(s: dict) -> str:
    """For an overloaded prefill pool held back by the decode side's reads
    (``disagg._held_back``): what holds it back and what would help. Else ''."""
    share, by = s["prefill_read_hold_share"], s["prefill_held_back_by"]
    if by == "decode":
        return (
            f" (up to {share:.0%} of its KV cache waited for the decode side's reads, whose loads "
            f"waited up to {_fmt_s(s['kv_wait_s_p99'])} (p99) for decode blocks: the decode pool "
            "sets its pace; add decode replicas)"
        )
    if by == "link":
        return (
            f" (up to {share:.0%} of its KV cache waited for the transfers, KV load p99 "
            f"{_fmt_s(s['transfer_s_p99'])}: a faster link, or more prefill replicas to hold more "
            "transfers, would help)"
        )
    return ""


def _decode_holds_line(s: dict) -> str:
    """The decode replicas' blocks held by requests waiting for their KV
    (``decode_kv_hold_peak_blocks``), one line."""
    bound = "at most " if s["decode_kv_hold_peak_is_bound"] else ""
    return (
        f"decode KV held by requests while their KV loads or waits to be scheduled: peak "
        f"{bound}{s['decode_kv_hold_peak_blocks']:,} of {s['decode_blocks']:,} blocks per "
        f"replica ({s['decode_kv_hold_share']:.0%})"
    )


def _holds_line(s: dict) -> str:
    """The prefill pool's blocks held for the decode side's reads
    (``disagg.summarize_disaggregated``'s ``prefill_read_hold_peak_blocks``
    and ``reads_*``), one line."""
    peak, blocks = s["prefill_read_hold_peak_blocks"], s["prefill_blocks"]
    runs = count(s["read_passes"], "prefill run")
    bound = "at most " if s["prefill_read_hold_peak_is_bound"] else ""
    head = (
        f"prefill KV held until the decode side read it: peak {bound}{peak:,} of {blocks:,} "
        f"blocks per replica ({s['prefill_read_hold_share']:.0%}); "
    )
    if s["reads_converged"]:
        return head + f"holds agree with the decode pool's reads ({runs})"
    return head + (
        f"holds did NOT settle in {runs}: the last moved prefill ends by up to "
        f"{_fmt_s(s['reads_moved_s'])}; figures are the last run's, likely optimistic"
    )


def _fmt_s(x: float) -> str:
    """A duration for the text output (``slo.seconds_text``); n/a for NaN or inf."""
    return seconds_text(x) if math.isfinite(x) else "n/a"


def _num(x: float) -> str:
    """A number for the text output: thousands separated, no exponent."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:g}"
