"""Bounds of every numeric input, derived from what the kernel can represent.

One module, used by the command line (``planner.cli.commands``: every numeric option of
every command is checked against ``OPTION_BOUNDS`` before any work), by
``SchedulerConfig`` (``planner.config``), by sweep specs (``planner.sweep.spec``:
fields and axes), by the step-time models (``planner.latency.step_time``) and by trace
reading (``planner.workload.traces``). Each error is one line naming the option (or
spec field / axis) and the bound.

Why these bounds:

- Token and block counts live in int32 arrays in the kernel
  (``planner.kernel.state``), so they are at most ``INT32_MAX``.
- Simulated time is int64 nanoseconds (``INT64_MAX`` ns is about 292 years).
  Arrivals are at most ``MAX_ARRIVAL_S`` (1e9 s, about 31 years) and the
  horizon at most ``MAX_HORIZON_S``; ``clock_bound`` then requires that the
  queueing delay plus ``max_steps`` steps of the longest possible step fit in
  what is left, so the clock can never wrap, whatever the workload does.
- Floats are finite unless the bound says otherwise (``inf`` is the "no
  limit" value of ``--horizon`` and ``--trace-duration``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

INT32_MAX = 2**31 - 1  # token and block counts: int32 arrays in the kernel
INT64_MAX = 2**63 - 1  # the clock: int64 nanoseconds (~292 years)
MAX_ARRIVAL_S = 1e9  # ~31 years of arrivals: 1e18 ns, leaving 8.2e18 ns for the run
MAX_HORIZON_S = 1e9  # the horizon, same reasoning as arrivals
MAX_COEFF_US = 1e9  # one step-time coefficient: 1,000 s (clock_bound checks the product)
MAX_KV_BLOCK_BYTES = 2**40  # 1 TiB per block: far beyond any model, keeps ns per block exact
MIN_SWAP_GBPS = 1e-6  # 1 kB/s: below this a swap link is not a link
MAX_SWAP_GBPS = 1e6  # 1 PB/s: no link is faster
MAX_REQUESTS = 10_000_000  # synthetic workloads: state is O(configs x requests)
MAX_RATE_RPS = 1e9  # one request per ns: arrivals are integer ns
MIN_RATE_RPS = 1e-6  # with MAX_REQUESTS requests, arrivals stay under MAX_ARRIVAL_S
MAX_RATE_SCALE = 1e9  # replay speed: beyond this every arrival rounds to the same ns
MIN_RATE_SCALE = 1e-6  # slower replays stretch a day-long trace past MAX_ARRIVAL_S
MAX_THINK_S = 86_400.0  # a client's think time: a day (the kernel saturates the clock)
MAX_TP = 1024  # GPUs per replica: beyond any NVLink domain
MAX_SEED = 2**63 - 1  # numpy's default_rng takes any int >= 0; int64 in Parquet
MAX_PIXELS = 2**15  # heatmap side: matplotlib's Agg backend refuses 2**16 and more
MIN_PIXELS = 100  # a heatmap smaller than this has no room for its axes
MAX_SLO_S = MAX_HORIZON_S  # an SLO longer than the longest run means nothing
MIN_SLO_S = 1e-9  # one nanosecond, the clock's unit: no latency is shorter


@dataclass(frozen=True)
class Bound:
    """An allowed range: integers (``integer``) or floats in lo..hi.

    ``lo_open``/``hi_open`` exclude the end; ``inf_ok`` admits +inf (a "no
    limit" value) beyond ``hi``. ``why`` is the reason, shown in errors.
    """

    lo: float
    hi: float
    integer: bool = False
    lo_open: bool = False
    hi_open: bool = False
    inf_ok: bool = False
    why: str = ""

    def describe(self) -> str:
        """The range as text, e.g. ``an integer in 1..2,147,483,647``."""
        if self.integer:
            text = f"an integer in {int(self.lo):,}..{int(self.hi):,}"
        else:
            left = "(" if self.lo_open else "["
            right = ")" if self.hi_open else "]"
            text = f"a number in {left}{self.lo:g}, {self.hi:g}{right}"
            if self.inf_ok:
                text += " or inf"
        return f"{text} ({self.why})" if self.why else text

    def help_text(self) -> str:
        """The range for ``--help``, e.g. ``1 to 2,147,483,647 (int32 counts in
        the kernel)``: words a narrow terminal can wrap between."""
        if self.integer:
            text = f"{int(self.lo):,} to {int(self.hi):,}"
        else:
            lo = f"above {self.lo:g}" if self.lo_open else f"{self.lo:g}"
            hi = f"below {self.hi:g}" if self.hi_open else f"{self.hi:g}"
            text = f"{lo} to {hi}" + (", or inf" if self.inf_ok else "")
        return f"{text} ({self.why})" if self.why else text

    def holds(self, v: object) -> bool:
        """True when ``v`` (an int, float or numpy scalar; never a bool) is in range."""
        if isinstance(v, bool) or not isinstance(v, int | float) and not hasattr(v, "dtype"):
            return False
        if self.integer:
            if isinstance(v, float) or getattr(getattr(v, "dtype", None), "kind", "i") == "f":
                return False
            v = int(v)  # type: ignore[call-overload]
            return self.lo <= v <= self.hi
        x = float(v)  # type: ignore[arg-type]
        if math.isnan(x):
            return False
        if x == math.inf:
            return self.inf_ok
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return above and below


def check(name: str, v: object, bound: Bound) -> None:
    """Raise ValueError ``"NAME must be <bound>, got V"`` (one line) unless ``v`` holds."""
    if not bound.holds(v):
        raise ValueError(f"{name} must be {bound.describe()}, got {v!r}")


COUNT = "int32 counts in the kernel"
MAX_REPLICAS = 1024  # replicas of one fleet: each is a full state row of the kernel
COUNTS = Bound(1, INT32_MAX, integer=True, why=COUNT)
COUNTS0 = Bound(0, INT32_MAX, integer=True, why=COUNT)
SHARE = Bound(0.0, 1.0)
# An efficiency (--mfu, --mbu) divides a roofline time: below 0.1% of the GPU's peak
# a step of a large model takes hours and its int64-ns step time can overflow
# (issue 35: --mfu 1e-320 made it infinite). Measured MFU/MBU are 0.2-0.9.
MIN_EFFICIENCY = 1e-3
EFFICIENCY = Bound(
    MIN_EFFICIENCY, 1.0, why="share of the GPU's peak; below 0.001 a step takes hours"
)

# Bounds by parameter name: CLI options (Python names; the flag is the same with
# dashes), SchedulerConfig fields and sweep axes share names and so share bounds.
SLO_SECONDS = Bound(MIN_SLO_S, MAX_SLO_S, why="seconds; the clock counts whole ns")
THINK = Bound(0.0, MAX_THINK_S, why="seconds between an answer and the next request")
OPTION_BOUNDS: dict[str, Bound] = {
    # pool and scheduler (SchedulerConfig)
    "num_gpu_blocks": COUNTS,
    "block_size": COUNTS,
    "max_num_seqs": COUNTS,
    "max_num_batched_tokens": COUNTS,
    "max_model_len": COUNTS,
    "trace_hash_block_size": COUNTS,
    "long_prefill_token_threshold": COUNTS0,
    "sliding_window": COUNTS0,
    "full_attention_groups": Bound(0, 1024, integer=True, why="KV cache groups"),
    "sliding_window_groups": Bound(0, 1024, integer=True, why="KV cache groups"),
    "watermark": Bound(0.0, 1.0, hi_open=True, why="share of the pool kept free"),
    "horizon": Bound(0.0, MAX_HORIZON_S, lo_open=True, inf_ok=True, why="seconds; int64 ns"),
    "horizon_s": Bound(0.0, MAX_HORIZON_S, lo_open=True, inf_ok=True, why="seconds; int64 ns"),
    "max_steps": COUNTS,
    "anti_starvation": COUNTS0,
    "adaptive_window": COUNTS0,
    "adaptive_threshold": COUNTS0,
    "adaptive_step": COUNTS,
    "cpu_swap_blocks": COUNTS0,
    "swap_bandwidth_gbps": Bound(MIN_SWAP_GBPS, MAX_SWAP_GBPS, why="GB/s"),
    "kv_block_bytes": Bound(1, MAX_KV_BLOCK_BYTES, integer=True, why="bytes, up to 1 TiB"),
    # closed-loop load (SchedulerConfig: a per-configuration kernel input)
    "max_concurrency": COUNTS0,
    "think_time_s": THINK,
    "think_time": THINK,
    "turns": Bound(1, 10_000, integer=True, why="turns per session"),
    # replicas behind a router (SchedulerConfig; kernel/fleet.py)
    "replicas": Bound(1, MAX_REPLICAS, integer=True, why="vLLM servers behind the router"),
    "data_parallel_size": Bound(1, MAX_REPLICAS, integer=True, why="ranks, one replica each"),
    "max_replicas": Bound(1, MAX_REPLICAS, integer=True, why="vLLM servers behind the router"),
    "router_seed": Bound(0, MAX_SEED, integer=True, why="int64"),
    # hardware
    "gpu_memory_utilization": Bound(
        MIN_EFFICIENCY,
        1.0,
        why="share of the GPU's memory vLLM may use; vLLM takes (0, 1], below 0.001 no model fits",
    ),
    "tensor_parallel_size": Bound(1, MAX_TP, integer=True, why="GPUs per replica"),
    # disaggregated prefill/decode (planner.kv_transfer, planner.disagg)
    "prefill_replicas": Bound(0, MAX_REPLICAS, integer=True, why="prefill servers"),
    "prefill_tensor_parallel_size": Bound(1, MAX_TP, integer=True, why="GPUs per prefill replica"),
    "prefill_max_num_seqs": COUNTS,
    "prefill_max_num_batched_tokens": COUNTS,
    "kv_transfer_bandwidth": Bound(0.0, 1e6, lo_open=True, why="GB/s per GPU"),
    "kv_transfer_latency": Bound(0.0, 1e9, why="microseconds"),
    # traces
    "trace_start": Bound(0.0, MAX_ARRIVAL_S, why="seconds; int64 ns"),
    "trace_duration": Bound(0.0, MAX_ARRIVAL_S, lo_open=True, inf_ok=True, why="seconds"),
    "rate_scale": Bound(MIN_RATE_SCALE, MAX_RATE_SCALE, why="replay speed"),
    "max_requests": Bound(1, MAX_REQUESTS, integer=True, why="requests"),
    # synthetic workloads
    "num_requests": Bound(1, MAX_REQUESTS, integer=True, why="requests"),
    "rate": Bound(MIN_RATE_RPS, MAX_RATE_RPS, why="requests per second"),
    "gamma_cv": Bound(1e-6, 1e6, why="coefficient of variation of gaps"),
    "prompt_tokens": Bound(1, INT32_MAX, why="tokens"),
    "output_tokens": Bound(1, INT32_MAX, why="tokens"),
    "prompt_tokens_stdev": Bound(0, INT32_MAX, why="tokens"),
    "output_tokens_stdev": Bound(0, INT32_MAX, why="tokens"),
    "prompt_tokens_min": COUNTS,
    "prompt_tokens_max": COUNTS,
    "output_tokens_min": COUNTS,
    "output_tokens_max": COUNTS,
    "seed": Bound(0, MAX_SEED, integer=True, why="int64"),
    "spec_seed": Bound(0, MAX_SEED, integer=True, why="int64"),
    "prefix_groups": COUNTS0,
    "prefix_len": COUNTS0,
    "prefix_share": SHARE,
    # step time
    "mfu": EFFICIENCY,
    "mbu": EFFICIENCY,
    "step_overhead_us": Bound(0.0, MAX_COEFF_US, why="microseconds"),
    "measured_scale": Bound(0.0, 1000.0, lo_open=True, why="a factor on the measured table"),
    "step_time_error": Bound(0.0, 1.0, hi_open=True, why="a fraction of the step time"),
    # plan check / safe-limit
    "tokens_per_request": COUNTS,
    "percentile": Bound(0.0, 100.0),
    "preemption_threshold": Bound(0.0, float(INT32_MAX), why="preemptions per request"),
    "ttft_slo": SLO_SECONDS,
    "tpot_slo": SLO_SECONDS,
    "itl_slo": SLO_SECONDS,
    "e2e_slo": SLO_SECONDS,
    "rate_scale_min": Bound(MIN_RATE_SCALE, MAX_RATE_SCALE, why="replay speed"),
    "rate_scale_max": Bound(MIN_RATE_SCALE, MAX_RATE_SCALE, why="replay speed"),
    "rate_tolerance": Bound(1e-4, 1.0, why="relative width of the answer"),
    # plan sweep / heatmap / bench
    "chunk_size": COUNTS,
    "workers": COUNTS,
    "dask_workers": Bound(1, 256, integer=True, why="worker processes"),
    "width": Bound(MIN_PIXELS, MAX_PIXELS, integer=True, why="pixels"),
    "height": Bound(MIN_PIXELS, MAX_PIXELS, integer=True, why="pixels"),
    "grid": Bound(1, 1024, integer=True, why="grid x grid configs"),
    "repeats": Bound(1, 20, integer=True, why="runs per figure; the best counts"),
}


def flag(name: str) -> str:
    """The command-line spelling of a parameter name: ``max_num_seqs`` -> ``--max-num-seqs``."""
    return "--" + name.replace("_", "-")


def check_option(name: str, v: object, label: str | None = None) -> None:
    """Check ``v`` against ``OPTION_BOUNDS[name]``; the error names ``label``
    (default: the option's flag). Raises ValueError (one line)."""
    check(label or flag(name), v, OPTION_BOUNDS[name])


def coeff(name: str, v: float) -> None:
    """A step-time coefficient (alpha or beta, microseconds): finite, 0..MAX_COEFF_US."""
    check(name, v, Bound(0.0, MAX_COEFF_US, why="microseconds"))


CLI_NAMES = {
    "max_steps": "--max-steps",
    "alpha": "--alpha-coeffs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
}
SPEC_NAMES = {
    "max_steps": "max_steps",
    "alpha": "latency.alpha",
    "max_num_batched_tokens": "max_num_batched_tokens",
}


def clock_bound(
    max_steps: int,
    step_ns: float,
    alpha_ns: tuple[int, int],
    label: str = "",
    names: dict[str, str] = CLI_NAMES,
) -> None:
    """Refuse a configuration whose int64 ns clock could wrap.

    The clock reaches at most: the last arrival (``MAX_ARRIVAL_S``) + the
    queueing delay alpha0 + alpha1 x prompt (prompt <= INT32_MAX tokens; at
    most half the room left by arrivals) + max_steps x ``max_step_ns``. All of
    it must stay under ``INT64_MAX`` ns.
    Raises ValueError (one line, prefixed with ``label``), naming the options
    as ``names`` spells them (``CLI_NAMES`` or ``SPEC_NAMES``).
    """
    a0, a1 = alpha_ns  # alpha2 is added to latencies (float seconds), not to the clock
    queue = float(a0) + float(a1) * INT32_MAX
    budget = INT64_MAX - MAX_ARRIVAL_S * 1e9
    where = f"{label}: " if label else ""
    if queue > budget / 2:
        raise ValueError(
            f"{where}{names['alpha']}: alpha0 + alpha1 x {INT32_MAX:,} tokens must stay under "
            f"{budget / 2e9:.3g} s (int64 ns clock), got alpha0={a0 / 1e3:g} us, "
            f"alpha1={a1 / 1e3:g} us"
        )
    step = step_ns
    if step * max_steps > budget - queue:
        raise ValueError(
            f"{where}{names['max_steps']} {max_steps:,} x the longest possible step "
            f"({step / 1e9:.3g} s from the step-time coefficients, "
            f"{names['max_num_batched_tokens']} and the pool) must stay under "
            f"{(budget - queue) / 1e9:.3g} s (the int64 ns clock); lower one of them"
        )
