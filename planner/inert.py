"""Options that would have no effect, as data: which options are inert under
which others.

An option the user typed must either change the result or be refused. Each
``Rule`` names options (Python parameter names) that only matter under some
condition of the others (swap settings without ``--preemption-mode swap``,
trace options without a trace, ...). The command line checks them against what
the user actually gave (``planner.cli.inert.reject_inert``); a sweep spec checks
``SCHEDULER_RULES`` against its grid (``planner.sweep.spec``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """``options`` (Python parameter names) have no effect when ``inert(params)``
    is true; ``reason`` completes "--opt <reason>" in the error."""

    options: tuple[str, ...]
    inert: Callable[[Mapping[str, Any]], bool]
    reason: str


class InertOption(ValueError):
    """An option the user gave that would have no effect (one line, exit 2)."""


def option_value(v: object) -> object:
    return getattr(v, "value", v)


SYNTHETIC_ONLY = (
    "num_requests",
    "rate",
    "arrival",
    "gamma_cv",
    "length_dist",
    "prompt_tokens",
    "prompt_tokens_stdev",
    "prompt_tokens_min",
    "prompt_tokens_max",
    "output_tokens",
    "output_tokens_stdev",
    "output_tokens_min",
    "output_tokens_max",
)
TRACE_ONLY = (
    "trace_format",
    "trace_start",
    "trace_duration",
    "rate_scale",
    "max_requests",
    "trace_columns",
    "trace_hash_block_size",
)
# Trace versus synthetic workload: shared by every command that takes
# --trace-file (plan run; plan safe-limit and plan check in cli_capacity).
WORKLOAD_RULES: tuple[Rule, ...] = (
    Rule(TRACE_ONLY, lambda p: p.get("trace_file") is None, "needs --trace-file"),
    Rule(
        SYNTHETIC_ONLY,
        lambda p: p.get("trace_file") is not None,
        "has no effect with --trace-file (arrivals and lengths come from the trace)",
    ),
    Rule(
        ("seed",),
        lambda p: p.get("trace_file") is not None and not p.get("prefix_groups"),
        "has no effect with --trace-file unless --prefix-groups is given",
    ),
)

# The rules of ``plan run`` (and any command with the same option names: a rule
# whose options a command lacks is skipped).
RUN_RULES: tuple[Rule, ...] = (
    *WORKLOAD_RULES,
    Rule(
        ("rate",),
        lambda p: option_value(p.get("arrival")) == "offline",
        "has no effect with --arrival offline (every request arrives at t = 0)",
    ),  # fmt: skip
    Rule(
        ("gamma_cv",),
        lambda p: p.get("trace_file") is None and option_value(p.get("arrival")) != "gamma",
        "needs --arrival gamma (the other arrival processes have no such parameter)",
    ),
    Rule(
        ("spec_acceptance", "spec_acceptance_log", "spec_seed"),
        lambda p: p.get("speculative_config") is None,
        "needs --speculative-config (speculative decoding is off without it)",
    ),
    Rule(
        ("gpu_memory_utilization",),
        lambda p: p.get("num_gpu_blocks") is not None or p.get("model") is None,
        "only sizes the pool from --model and --gpu, without --num-gpu-blocks",
    ),
    Rule(
        ("router",),
        lambda p: (p.get("replicas") or 1) == 1 and not p.get("prefill_replicas"),
        "needs --replicas > 1 or --prefill-replicas (one server has nothing to route between)",
    ),
    Rule(
        ("router",),
        lambda p: (
            option_value(p.get("router")) == "prefix_affinity"
            and not p.get("enable_prefix_caching")
            and option_value(p.get("compat")) != "blis"  # compat blis implies prefix caching
        ),
        "prefix_affinity needs --enable-prefix-caching (without a cache, prefixes are not "
        "reused and it routes as least_outstanding)",
    ),
    Rule(
        ("router_seed",),
        lambda p: (
            not p.get("prefill_replicas")
            and (
                option_value(p.get("router")) not in ("random", "llm_d")
                or (p.get("replicas") or 1) == 1
            )
        ),
        "needs --router random or llm_d and --replicas > 1 (or --prefill-replicas)",
    ),
    Rule(
        ("tensor_parallel_size",),
        lambda p: p.get("model") is None,
        "needs --model (it splits the model's weights and KV heads)",
    ),
    Rule(
        ("preemption_mode",),
        lambda p: option_value(p.get("preemption_mode")) == "swap" and not p.get("cpu_swap_blocks"),
        "swap needs --cpu-swap-blocks > 0 (with no CPU tier every victim is recomputed)",
    ),
    Rule(
        ("cpu_swap_blocks", "swap_bandwidth_gbps", "kv_block_bytes"),
        lambda p: option_value(p.get("preemption_mode")) != "swap",
        "needs --preemption-mode swap",
    ),
    Rule(
        ("adaptive_threshold", "adaptive_step"),
        lambda p: not p.get("adaptive_window"),
        "needs --adaptive-window > 0",
    ),
    Rule(
        ("think_time",),
        lambda p: not p.get("max_concurrency") and (p.get("turns") or 1) <= 1,
        "needs --max-concurrency > 0 or --turns > 1 (clients think between requests)",
    ),
    Rule(
        ("turns",),
        lambda p: p.get("trace_file") is not None,
        "makes synthetic sessions; it has no effect with --trace-file",
    ),
    Rule(
        ("turns",),
        lambda p: bool(p.get("max_concurrency")) or bool(p.get("prefix_groups")),
        "cannot be combined with --max-concurrency or --prefix-groups (a session paces "
        "itself and shares its own history)",
    ),
    Rule(
        ("beta_coeffs",),
        lambda p: option_value(p.get("latency")) == "roofline",
        "has no effect with --latency roofline (use --mfu/--mbu/--step-overhead-us)",
    ),
    Rule(
        ("beta_coeffs",),
        lambda p: option_value(p.get("latency")) == "measured",
        "has no effect with --latency measured (use --step-overhead-us)",
    ),
    Rule(
        ("mfu", "mbu"),
        lambda p: option_value(p.get("latency", "linear")) != "roofline",
        "needs --latency roofline",
    ),
    Rule(
        ("measured_scale",),
        lambda p: option_value(p.get("latency", "linear")) != "measured",
        "needs --latency measured",
    ),
    Rule(
        ("step_overhead_us",),
        lambda p: option_value(p.get("latency", "linear")) not in ("roofline", "measured"),
        "needs --latency roofline or measured",
    ),
)

SLO_OPTIONS = ("ttft_slo", "tpot_slo", "itl_slo", "e2e_slo", "goodput")


def _derives_pool(p: dict) -> bool:
    """Whether the pool is sized from --model and --gpu (``resolve.num_gpu_blocks``)."""
    derived = p.get("num_gpu_blocks") is None
    return derived and p.get("model") is not None and p.get("gpu") is not None


def derives_swap_bytes(p: Mapping[str, Any]) -> bool:
    """Whether swap preemption's block bytes come from --model
    (``resolve.kv_block_bytes``: swap, and no --kv-block-bytes)."""
    return option_value(p.get("preemption_mode")) == "swap" and p.get("kv_block_bytes") is None


def _has_state_layers(p: dict) -> bool:
    """Whether --model names a hybrid with Mamba-style state layers, whose
    max_num_seqs vLLM checks at start-up (``capacity.mamba_max_num_seqs``).
    A model that cannot be read counts as none: the command then reports it."""
    if p.get("model") is None:
        return False
    from planner.models import hardware

    try:
        spec = hardware.model(p["model"], p.get("quantization"), p.get("kv_cache_dtype", "auto"))
    except (ValueError, OSError):
        return False
    return "linear" in spec.layer_types


def _has_slo(p: dict) -> bool:
    return any(p.get(k) for k in SLO_OPTIONS)


# ``plan check``: its scheduler options change the per-attention-type figures
# and the activation term of a model's pool sizing (``cli_capacity.check``
# refuses the rest once the model is read: async scheduling on a full-attention
# model, the batch size on a full-attention model with --num-gpu-blocks), and
# the simulation it runs only to judge SLOs on a trace's traffic.
CHECK_RULES: tuple[Rule, ...] = (
    *RUN_RULES,  # as defined above, without DTYPE_RULE (check reads --quantization itself)
    Rule(
        ("quantization", "kv_cache_dtype"),
        lambda p: p.get("model") is None,
        "needs --model (it sizes that model's KV cache)",
    ),
    Rule(
        ("async_scheduling",),
        lambda p: p.get("model") is None and not _has_slo(p),
        "needs --model (it sizes that model's sliding-window KV cache) or an SLO "
        "(--ttft-slo, --tpot-slo, --itl-slo, --e2e-slo or --goodput: plan check then "
        "simulates the traffic)",
    ),
    Rule(
        ("max_num_batched_tokens",),
        lambda p: p.get("model") is None and not _has_slo(p),
        "needs --model (with --gpu and no --num-gpu-blocks it sizes the pool's activation "
        "term; with a sliding-window model, the window's blocks) or an SLO (--ttft-slo, "
        "--tpot-slo, --itl-slo, --e2e-slo or --goodput: plan check then simulates the "
        "traffic)",
    ),
    Rule(
        SLO_OPTIONS,
        lambda p: p.get("trace_file") is None,
        "needs --trace-file (plan check judges SLOs on that trace's traffic)",
    ),
    Rule(
        ("max_num_seqs",),
        lambda p: not _has_slo(p) and not _derives_pool(p) and not _has_state_layers(p),
        "needs --model and --gpu without --num-gpu-blocks (it sizes the pool's activation "
        "term), a --model with Mamba-style state layers (vLLM checks it against the pool "
        "at start-up) or an SLO (--ttft-slo, --tpot-slo, --itl-slo, --e2e-slo or --goodput: "
        "plan check then simulates the traffic)",
    ),
    Rule(
        (
            "horizon",
            "rate_scale",
            "latency",
            "alpha_coeffs",
            "beta_coeffs",
            "measured_scale",
        ),
        lambda p: not _has_slo(p),
        "needs an SLO (--ttft-slo, --tpot-slo, --itl-slo, --e2e-slo or --goodput): plan check "
        "simulates the traffic only to judge SLOs",
    ),
)

# plan run and plan safe-limit: the model's dtypes size the pool and the
# roofline's bytes; with --num-gpu-blocks and the linear model they do nothing.
DTYPE_RULE = Rule(
    ("quantization", "kv_cache_dtype"),
    lambda p: (
        p.get("model") is None
        or (
            p.get("num_gpu_blocks") is not None
            and option_value(p.get("latency", "linear")) not in ("roofline", "measured")
            and not derives_swap_bytes(p)
        )
    ),
    "only sizes the pool from --model and --gpu (without --num-gpu-blocks), the roofline's "
    "and measured step times' weight and KV dtypes, or swap's block bytes",
)
RUN_RULES = (*RUN_RULES, DTYPE_RULE)

# Rules whose options are SchedulerConfig fields: a sweep spec refuses such a
# setting (fixed or axis) when it has no effect in any configuration of its grid.
SCHEDULER_RULES: tuple[Rule, ...] = tuple(
    r
    for r in RUN_RULES
    if set(r.options)
    <= {
        "preemption_mode",
        "cpu_swap_blocks",
        "swap_bandwidth_gbps",
        "kv_block_bytes",
        "adaptive_threshold",
        "adaptive_step",
    }
)


# ``plan calibrate``: the simulated server's options apply to a request-level
# fit (a vllm bench serve .json, ``cli_calibrate.is_bench_result``) only.
CALIBRATE_SERVER = (
    "num_gpu_blocks",
    "gpu_memory_utilization",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "async_scheduling",
    "usage_context",
)
# Step-time options a steps CSV fit does not take (it fits beta and reads no alpha).
CALIBRATE_REQUEST_LATENCY = ("alpha_coeffs", "beta_coeffs")
CALIBRATE_RULES: tuple[Rule, ...] = (
    Rule(
        CALIBRATE_SERVER,
        lambda p: not str(p.get("measurements", "")).lower().endswith(".json"),
        "describes the server a vllm bench serve result (.json) is replayed on; a steps "
        "CSV needs none",
    ),
    Rule(
        CALIBRATE_REQUEST_LATENCY,
        lambda p: not str(p.get("measurements", "")).lower().endswith(".json"),
        "is a starting point of a request-level fit (a vllm bench serve .json); a steps "
        "CSV fit needs none (it fits beta; step times do not show alpha)",
    ),
    *RUN_RULES,
)


# ``plan bench``: --startup times fresh ``plan run`` processes and --mooncake one
# config on a trace, not the grid.
BENCH_RULES: tuple[Rule, ...] = (
    Rule(
        (
            "grid",
            "reference",
            "async_scheduling",
            "enable_prefix_caching",
            "startup",
            "max_rate",
            "mooncake",
        ),
        lambda p: bool(p.get("record")),
        "has no effect with --record (it measures every figure with its own settings)",
    ),
    Rule(
        ("out", "against", "repeats"),
        lambda p: not p.get("record"),
        "has no effect without --record (only the speed record is written or compared)",
    ),
    Rule(
        ("grid", "reference", "async_scheduling", "enable_prefix_caching", "max_rate", "mooncake"),
        lambda p: bool(p.get("startup")),
        "has no effect with --startup (it times fresh plan run processes)",
    ),
    Rule(
        ("grid", "reference", "enable_prefix_caching", "max_rate"),
        lambda p: bool(p.get("mooncake")),
        "has no effect with --mooncake (it times one config on the trace, caching off and on)",
    ),
    Rule(
        ("reference",),
        lambda p: bool(p.get("max_rate")),
        "has no effect with --max-rate (it times the search against a plain sweep)",
    ),
)
