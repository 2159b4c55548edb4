"""Scheduler configurations: one validated ``SchedulerConfig``, and ``pack_configs``
which turns many of them into the struct-of-arrays matrix the kernel reads.

Names and defaults follow vLLM's ``SchedulerConfig`` / ``CacheConfig``
(``vllm/config/scheduler.py``, ``vllm/config/cache.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from planner import bounds
from planner.capacity import (
    analytic_safe_max_num_seqs,
    mamba_max_num_seqs,
    min_startup_blocks,
    vllm_starts,
)
from planner.kv_transfer import KVTransfer
from planner.latency.allreduce import interp_s
from planner.latency.draft import DRAFT_FLOATS, draft_floats
from planner.latency.step_time import (
    AR_COUNT,
    AR_EAGER,
    AR_ELEMENTS,
    AR_GRAPH,
    LINEAR,
    MEASURED,
    NO_TABLE,
    ROOFLINE,
    ROOFLINE_FLOATS,
    SW_KV,
    SW_PAIR,
    SW_WINDOW,
    Latency,
    LinearLatency,
    MeasuredLatency,
    RooflineLatency,
    blis_alpha2_ns,
    measured_table_ns,
)
from planner.models.vllm_defaults import PLANNER_DEFAULTS as S1_SERVER
from planner.speculative import MAX_SPEC_TOKENS, Speculation

# Named option values (the kernel sees the integers).
PREEMPTION_MODES = {"recompute": 0, "restart": 1, "swap": 2}
STOP_BOUNDS = {"max_model_len": 0, "max_servable": 1}
POLICIES = {"fcfs": 0, "priority": 1}
# ``compat``: "vllm" (vLLM 0.33's rules, the default) or "blis", BLIS b563c440's
# rules (docs/blis-compat.md), a named setting that implies these fields.
COMPATS = {"vllm": 0, "blis": 1}
# Mitigations (``planner/kernel/policies.py``; off by default = vLLM 0.33) and
# fleet routers (``planner/kernel/routers.py``, which names each code).
VICTIMS = {"youngest": 0, "priority": 1, "least_progress": 2, "most_blocks": 3}
ADMISSIONS = {"vanilla": 0, "projected": 1, "projected_oracle": 2}
ROUTERS = {
    "round_robin": 0,
    "random": 1,
    "least_outstanding": 2,
    "least_kv": 3,
    "prefix_affinity": 4,
    "llm_d": 5,
}
BLIS_IMPLIED = {
    "preemption_mode": "restart",
    "null_block": False,
    "scheduler_reserve_full_isl": False,
    "enable_prefix_caching": True,
}

# Column indices of the packed int64 config matrix (shape (C, NCOLS)).
(
    N,
    BS,
    SEQS,
    MNBT,
    MML,
    THR,
    WM_BLOCKS,
    GATE,
    PREEMPT,
    STOP,
    NULL,
    POLICY,
    HORIZON_NS,
    MAX_STEPS,
    B0,
    B1,
    B2,
    A0,
    A1,
    A2,
    LAT_KIND,
    VICTIM,
    ANTI_STARVATION,
    ADMISSION,
    ADAPT_WINDOW,
    ADAPT_THRESHOLD,
    ADAPT_STEP,
    SWAP_CPU_BLOCKS,
    SWAP_NS_PER_BLOCK,
    ASYNC,
    CACHING,
    CONC,
    THINK_NS,
    LAT_TABLE,
    REPLICAS,
    ROUTER,
    ROUTER_SEED,
    COMPAT,
    DEFECT,
    SW,
    SW_CAP,
    GROUPS_FULL,
    GROUPS_SW,
    GROUPS_MAMBA,  # Mamba / linear-attention state groups (``mamba_groups``)
    PRICE_WIN2,  # window of a hybrid's sliding layers in the roofline (floats' SW_WINDOW; 0: none)
    XFER,  # disaggregated decode side (``kv_transfer``): 1 = on
    XFER_LAT_NS,  # its load latency, ns
    XFER_PS,  # its transfer time per external token, ps
    SPEC_K,  # speculative decoding: num_speculative_tokens (0: off)
    SPEC_SEED,  # its acceptance draws' seed
    SPEC_LA,  # its lookahead KV slots (vLLM's num_lookahead_tokens: k for a drafter, 0 n-gram)
    SPEC_T,  # first of MAX_SPEC_TOKENS conditional acceptance thresholds (of 2^53)
) = range(52)
NCOLS = SPEC_T + MAX_SPEC_TOKENS
MAX_KV_GROUPS = 1024  # KV cache groups of one model (gemma-3-27b has 7)
# floats per config: the roofline's (latency.RooflineLatency.floats), then a
# drafter's (latency.draft: EAGLE, EAGLE-3, MTP; 0s otherwise)
NFLOAT = ROOFLINE_FLOATS + DRAFT_FLOATS

NO_HORIZON_NS = bounds.INT64_MAX
MAX_INT = bounds.INT32_MAX  # sizes and counts fit int32 arrays in the kernel
MAX_HORIZON_S = bounds.MAX_HORIZON_S  # ~31 years: the clock is int64 nanoseconds
DEFAULT_MAX_STEPS = 10_000_000

# Numeric fields, each checked against bounds.OPTION_BOUNDS under its own name.
NUMERIC_FIELDS = (
    "num_gpu_blocks",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "long_prefill_token_threshold",
    "watermark",
    "anti_starvation",
    "adaptive_window",
    "adaptive_threshold",
    "adaptive_step",
    "cpu_swap_blocks",
    "swap_bandwidth_gbps",
    "kv_block_bytes",
    "max_concurrency",
    "think_time_s",
    "replicas",
    "router_seed",
    "horizon_s",
    "max_steps",
    "sliding_window",
)
FIELD_FLAGS = {
    "horizon_s": "--horizon",
    "think_time_s": "--think-time",
}  # fields whose flag is not --FIELD-NAME


@dataclass(frozen=True)
class SchedulerConfig:
    """One scheduler + pool configuration. Token and block counts are ints.

    Defaults: scenario S1's server (``vllm_defaults.PLANNER_DEFAULTS``, what a
    command runs without --model and --gpu) and S1's pool; the scheduler rules
    are vLLM 0.33's. With a model or GPU the commands resolve vLLM's own
    defaults first (``planner.resolve.server``).

    Raises:
        ValueError: naming the field (spelled as its CLI flag) and the bad value.
    """

    num_gpu_blocks: int = 7463
    block_size: int = S1_SERVER["block_size"]
    max_num_seqs: int = S1_SERVER["max_num_seqs"]
    max_num_batched_tokens: int = S1_SERVER["max_num_batched_tokens"]
    max_model_len: int = S1_SERVER["max_model_len"]
    long_prefill_token_threshold: int = 0
    watermark: float = 0.0
    scheduler_reserve_full_isl: bool = True
    preemption_mode: str = "recompute"
    stop_bound: str = "max_model_len"
    null_block: bool = True
    policy: str = "fcfs"
    victim: str | None = None  # None: vLLM's rule for the policy (youngest / priority)
    anti_starvation: int = 0
    admission: str = "vanilla"
    adaptive_window: int = 0  # steps; 0 = no adaptive cap
    adaptive_threshold: int = 0  # preemptions per window that trigger a cut
    adaptive_step: int = 1  # max_num_seqs regained per calm window
    cpu_swap_blocks: int = 0  # swap mode: CPU tier capacity, blocks
    swap_bandwidth_gbps: float = 25.0  # swap mode: GB/s each way (PCIe Gen4 x16 ~ 25)
    kv_block_bytes: int = 2 * 2**20  # swap mode: bytes of one block (Llama-3.1-8B, bs 16)
    async_scheduling: bool = S1_SERVER["async_scheduling"]  # vLLM's is on (vllm_defaults)
    enable_prefix_caching: bool = S1_SERVER["enable_prefix_caching"]  # vLLM's is on
    # Closed-loop load (vLLM bench's --max-concurrency): at most this many
    # requests in the system; 0 = open loop (arrivals at their times).
    max_concurrency: int = 0
    think_time_s: float = (
        0.0  # closed loop: a client's pause between an answer and its next request
    )
    # Replicas behind a router (``kernel/fleet.py``): this many identical
    # servers, each with this config's pool and scheduler, fed from one stream.
    replicas: int = 1
    router: str = "round_robin"
    router_seed: int = 0  # the random router's stream
    horizon_s: float = math.inf
    max_steps: int = DEFAULT_MAX_STEPS
    # BLIS compatibility (docs/blis-compat.md): "blis" implies BLIS_IMPLIED;
    # the defect switch adds BLIS's full-hit defect (rule 5), compat blis only.
    compat: str = "vllm"
    blis_full_hit_defect: bool = False
    # Sliding-window attention on every layer (vLLM's ``SlidingWindowSpec``,
    # HF config.json's ``sliding_window``): tokens a query attends back,
    # itself included; 0 = full attention. Blocks wholly outside the window
    # are freed step by step (``SlidingWindowManager.remove_skipped_blocks``).
    sliding_window: int = 0
    # KV cache groups sharing the pool (vLLM's per-group block tables,
    # ``kv_cache_planning.get_kv_cache_groups``): full-attention ones and
    # sliding-window ones. -1: the model's one group (full attention, or
    # sliding when ``sliding_window`` is set); a hybrid (gemma-2/3, gpt-oss)
    # has both. Resolved to counts when the config is made.
    full_attention_groups: int = -1
    sliding_window_groups: int = -1
    # KV cache groups of Mamba-style state layers (vLLM's ``MambaSpec`` groups:
    # Gated DeltaNet, Mamba2) under ``mamba_cache_mode`` "none", vLLM's mode
    # with prefix caching off: ``MambaManager`` gives a request one block per
    # group (its ``block_size`` is max_model_len) from its first allocation
    # until it is freed. 0: none.
    mamba_groups: int = 0
    # Speculative decoding (vLLM's --speculative-config with the planner's
    # acceptance model, ``planner.speculative``); None: off.
    speculation: Speculation | None = None
    # Disaggregated decode side (vLLM's --kv-transfer-config on a decode
    # instance, ``planner.kv_transfer``): requests marked remote load their
    # prompt's KV from a prefill instance; None: a colocated server.
    kv_transfer: KVTransfer | None = None

    def __post_init__(self) -> None:
        for name in NUMERIC_FIELDS:  # bounds.OPTION_BOUNDS: int32 counts, int64 ns
            bounds.check_option(name, getattr(self, name), FIELD_FLAGS.get(name))
        for name in (
            "scheduler_reserve_full_isl",
            "null_block",
            "async_scheduling",
            "enable_prefix_caching",
        ):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise ValueError(
                    f"--{_flag(name)} must be true or false, got {getattr(self, name)!r}"
                )
        if self.num_gpu_blocks < 2 and self.null_block:
            raise ValueError("--num-gpu-blocks must be >= 2: block 0 is the null block")
        if self.victim is not None and self.victim not in VICTIMS:
            raise ValueError(f"--victim must be one of {sorted(VICTIMS)}, got {self.victim!r}")
        for name, allowed in (
            ("preemption_mode", PREEMPTION_MODES),
            ("stop_bound", STOP_BOUNDS),
            ("policy", POLICIES),
            ("admission", ADMISSIONS),
            ("router", ROUTERS),
        ):
            v = getattr(self, name)
            if v not in allowed:
                raise ValueError(f"--{_flag(name)} must be one of {sorted(allowed)}, got {v!r}")
        self._check_compat()
        self._resolve_groups()
        self._check_sliding_window()
        self._check_mamba()
        self._check_speculation()
        self._check_kv_transfer()
        for name in ("async_scheduling", "enable_prefix_caching"):
            if name == "enable_prefix_caching" and self.compat == "blis":
                continue  # BLIS caches under restart (docs/blis-compat.md, rule 1)
            if getattr(self, name) and self.preemption_mode != "recompute":
                raise ValueError(
                    f"--{_flag(name)} is modelled with recompute preemption only, "
                    f"not {self.preemption_mode!r}"
                )

    def _check_compat(self) -> None:
        """``compat`` is a known setting; "blis" holds the fields it implies
        (``BLIS_IMPLIED``), no watermark and no async scheduling (BLIS has
        neither); the defect switch needs it. Raises ValueError (one line)."""
        if self.compat not in COMPATS:
            raise ValueError(f"--compat must be one of {sorted(COMPATS)}, got {self.compat!r}")
        if not isinstance(self.blis_full_hit_defect, bool | np.bool_):
            raise ValueError(
                f"--blis-full-hit-defect must be true or false, got {self.blis_full_hit_defect!r}"
            )
        if self.compat != "blis":
            if self.blis_full_hit_defect:
                raise ValueError("--blis-full-hit-defect needs --compat blis")
            return
        compat_settings("blis", {k: getattr(self, k) for k in BLIS_IMPLIED})
        if self.watermark != 0.0:
            raise ValueError(
                f"--watermark {self.watermark:g} contradicts --compat blis (BLIS has none)"
            )
        if self.async_scheduling:
            raise ValueError(
                "--async-scheduling contradicts --compat blis (BLIS schedules in sync)"
            )

    def _resolve_groups(self) -> None:
        """Resolve -1 group counts (the model's one group) and check them:
        integers in 0..MAX_KV_GROUPS, at least one group, sliding groups
        exactly when there is a window. Raises ValueError (one line)."""
        window = self.sliding_window > 0
        for name, default in (
            ("full_attention_groups", 0 if window else 1),
            ("sliding_window_groups", 1 if window else 0),
        ):
            v = getattr(self, name)
            if isinstance(v, bool | np.bool_) or not isinstance(v, int | np.integer):
                raise ValueError(f"--{_flag(name)} must be an integer, got {v!r}")
            if v == -1:
                object.__setattr__(self, name, default)
            elif not 0 <= v <= MAX_KV_GROUPS:
                raise ValueError(f"--{_flag(name)} must be in 0..{MAX_KV_GROUPS}, got {v}")
        if window != (self.sliding_window_groups > 0):
            raise ValueError(
                f"--sliding-window-groups {self.sliding_window_groups} needs "
                + ("--sliding-window 0" if not self.sliding_window_groups else "a --sliding-window")
            )
        if self.full_attention_groups + self.sliding_window_groups == 0:
            raise ValueError("--full-attention-groups 0 needs sliding-window groups")
        v = self.mamba_groups
        if isinstance(v, bool | np.bool_) or not isinstance(v, int | np.integer):
            raise ValueError(f"mamba_groups must be an integer, got {v!r}")
        if not 0 <= v <= MAX_KV_GROUPS:
            raise ValueError(f"mamba_groups must be in 0..{MAX_KV_GROUPS}, got {v}")

    def _check_mamba(self) -> None:
        """Mamba groups are simulated under vLLM's ``mamba_cache_mode`` "none"
        (prefix caching off), beside full-attention groups, with vLLM's own
        rules and recompute preemption: vLLM caches them only in "align" mode
        (``MambaManager``'s assert), whose state checkpoints are not
        simulated. Raises ValueError (one line)."""
        if self.mamba_groups == 0:
            return
        for name, bad in (
            ("prefix caching on (vLLM's default, its mamba_cache_mode align): add "
             "--no-enable-prefix-caching", self.enable_prefix_caching),
            ("--compat blis", self.compat == "blis"),
            (f"--preemption-mode {self.preemption_mode}", self.preemption_mode != "recompute"),
            ("--stop-bound max_servable", self.stop_bound == "max_servable"),
            ("a sliding window", self.sliding_window > 0),
            ("--full-attention-groups 0", self.full_attention_groups == 0),
        ):  # fmt: skip
            if bad:
                raise ValueError(
                    f"{self.mamba_groups} Mamba state groups (the model's linear-attention layers) "
                    f"are not simulated with {name}"
                )

    @property
    def one_full_attention_group(self) -> bool:
        """Plain full attention: no sliding window, one KV cache group (what a
        model's attention fields amount to when they change nothing)."""
        return self.sliding_window == 0 and self.kv_groups == 1 and self.mamba_groups == 0

    def startup_refusal(self) -> str | None:
        """Why vLLM 0.33's start-up check refuses this pool, in words, or None
        when it accepts it: one max_model_len request must fit the pool less
        the null block (``capacity.vllm_starts``, ``check_enough_kv_cache_memory``),
        for plain full attention under vLLM's rules; None where the check is
        not simulated (compat blis, windows, several groups)."""
        if self.compat != "vllm" or not self.one_full_attention_group:
            return None
        n, mml, bs = self.num_gpu_blocks, self.max_model_len, self.block_size
        if vllm_starts(n, mml, bs, True):
            return None
        return (
            f"vLLM 0.33 refuses to start on this pool: {n:,} blocks, where one max_model_len "
            f"({mml:,}-token) request needs {min_startup_blocks(mml, bs, True):,} with the null "
            "block (check_enough_kv_cache_memory)"
        )

    @property
    def pool_starts(self) -> bool:
        """``startup_refusal`` is None. A pool that fails is still simulated
        (tests and the livelock scenarios use tiny pools), but no answer
        recommends it."""
        return self.startup_refusal() is None

    def check_pool_starts(self) -> None:
        """Raise ValueError (one line, with the fix) when vLLM 0.33 refuses to
        start on the pool (``startup_refusal``). The answers that recommend a
        setting for a given pool (safe-limit, max-rate) call it: there is no
        answer to give on a server that does not start. ``plan run`` and
        sweeps simulate such pools and say so instead."""
        if (why := self.startup_refusal()) is not None:
            need = min_startup_blocks(self.max_model_len, self.block_size, True)
            raise ValueError(
                f"{why}; fix: --num-gpu-blocks {need:,} or more, or a smaller --max-model-len"
            )

    @property
    def kv_groups(self) -> int:
        """KV cache groups sharing the pool: a request takes one block per
        group for each block of tokens (``KVCacheCoordinator``)."""
        return self.full_attention_groups + self.sliding_window_groups

    def _check_sliding_window(self) -> None:
        """A sliding window is simulated under vLLM's own rules only: not with
        compat blis (BLIS has no sliding window), swap preemption (a named
        option whose CPU tier keeps no null blocks) or the max_servable stop
        bound (the pool's tokens bound a request's length only under full
        attention). Raises ValueError (one line)."""
        if self.sliding_window == 0 and self.kv_groups == 1:
            return
        for name, bad in (
            ("compat blis", self.compat == "blis"),
            ("preemption-mode swap", self.preemption_mode == "swap"),
            ("stop-bound max_servable", self.stop_bound == "max_servable"),
        ):
            if bad:
                # The window may come from --model: say what it is, and both sources.
                what = (
                    f"a {self.sliding_window:,}-token sliding window (--sliding-window or the "
                    "model's)"
                    if self.sliding_window
                    else f"{self.kv_groups} KV cache groups (--full-attention-groups)"
                )
                raise ValueError(f"{what} is not simulated with --{name}")

    def _vllm_rules_only(self) -> tuple[tuple[str, bool], ...]:
        """(setting, whether this config has it) for the settings a feature
        checked only against vLLM's own scheduler refuses (speculative
        decoding, the decode side): BLIS compatibility, swap or restart
        preemption, a sliding window or several KV cache groups, the
        adaptive cap, projected admission."""
        return (
            ("--compat blis", self.compat == "blis"),
            (f"--preemption-mode {self.preemption_mode}", self.preemption_mode != "recompute"),
            (
                "a sliding window, Mamba state groups or several KV cache groups",
                not self.one_full_attention_group,
            ),
            ("an adaptive cap", self.adaptive_window > 0),
            (f"--admission {self.admission}", self.admission != "vanilla"),
        )

    def _check_speculation(self) -> None:
        """Speculative decoding is simulated where goldens from vLLM 0.33 check
        it: recompute preemption, full attention, vLLM's own rules, sync or
        async scheduling. Raises ValueError (one line)."""
        if self.speculation is None:
            return
        if not isinstance(self.speculation, Speculation):
            raise ValueError(f"speculation must be a Speculation, got {self.speculation!r}")
        for what, bad in self._vllm_rules_only():
            if bad:
                raise ValueError(f"--speculative-config is not simulated with {what}")
        drafter = self.speculation.lookahead_tokens > 0
        if drafter and self.enable_prefix_caching and self.kv_transfer is not None:
            raise ValueError(
                f"--speculative-config method {self.speculation.method!r} is not simulated with "
                "prefix caching on a disaggregated decode side (with a KV connector vLLM keeps "
                "the legacy block hashes and drops the trailing cached block): turn it off "
                "(--no-enable-prefix-caching; in a spec enable_prefix_caching = false)"
            )
        k = self.speculation.num_speculative_tokens
        if self.max_num_batched_tokens < 1 + k:
            raise ValueError(
                f"--max-num-batched-tokens {self.max_num_batched_tokens:,} cannot hold one "
                f"request's token and its {k} draft tokens: every verification would be cut "
                "(vLLM 0.33 starts such a server; the planner refuses it)"
            )

    def _check_kv_transfer(self) -> None:
        """The decode side is simulated where goldens from vLLM 0.33 check it:
        sync or async scheduling, full attention, recompute preemption, vLLM's
        own rules, with or without drafts (``pd_spec_*``); replicas take
        remote requests behind a router (a decode pool, ``planner.disagg``)
        and hold a prefill pool's blocks for reads. Raises ValueError (one
        line)."""
        if self.kv_transfer is None:
            return
        if not isinstance(self.kv_transfer, KVTransfer):
            raise ValueError(f"kv_transfer must be a KVTransfer, got {self.kv_transfer!r}")
        for what, bad in (
            *self._vllm_rules_only(),
            ("--max-concurrency (a closed loop)", self.max_concurrency > 0),
        ):  # fmt: skip
            if bad:
                raise ValueError(f"a disaggregated decode side is not simulated with {what}")

    def check_vllm_starts(self, largest: int | None = None) -> None:
        """Raise ValueError (one line) for settings vLLM 0.33 refuses at start-up:
        max_num_batched_tokens below max_num_seqs (``SchedulerConfig.
        verify_max_model_len``, ``vllm/config/scheduler.py``), and with Mamba
        groups max_num_seqs above the pool (``capacity.mamba_max_num_seqs``). The commands and
        the sweep spec call it on what a user gives; the kernel itself runs
        such a configuration (tests use tiny budgets), so it is not a field
        check. compat blis is exempt: BLIS has no such rule. ``largest``: the
        largest max_num_seqs that starts, for the fix, where the caller sized
        the pool from max_num_seqs (``capacity.largest_starting_max_num_seqs``);
        None: the pool is fixed, so it is the pool's blocks."""
        if self.compat == "vllm":
            check_vllm_args(self.max_num_seqs, self.max_num_batched_tokens)
        most = mamba_max_num_seqs(self.num_gpu_blocks)
        if self.mamba_groups and self.max_num_seqs > most:
            fix = most if largest is None else largest
            raise ValueError(
                f"vLLM 0.33 refuses to start: max_num_seqs ({self.max_num_seqs:,}) exceeds "
                f"available Mamba cache blocks ({most:,}) (CompilationConfig."
                f"resolve_cudagraph_mode_and_sizes); fix: --max-num-seqs {fix:,} (the largest "
                "that starts) or a larger pool"
            )

    def attention_line(self) -> str | None:
        """One line naming a sliding window or Mamba state groups and the KV
        cache groups; None for full attention (nothing to say)."""
        if self.mamba_groups:
            return (
                f"attention: {self.full_attention_groups} full-attention and "
                f"{self.mamba_groups} Mamba state KV cache groups in one pool of "
                f"{self.block_size:,}-token blocks; vLLM's mamba_cache_mode none (prefix "
                "caching off): a request holds one block per Mamba group from admission to "
                "its end (MambaManager)"
            )
        if not self.sliding_window:
            return None
        w, f, s = self.sliding_window, self.full_attention_groups, self.sliding_window_groups
        where = (
            "on every layer"
            if f == 0
            else f"in {s} of {f + s} KV cache groups ({f} full attention, one pool)"
        )
        return (
            f"attention: sliding window of {w:,} tokens {where}; blocks outside it freed "
            "step by step, as vLLM's SlidingWindowManager does"
        )

    @property
    def sliding_window_cap(self) -> int:
        """Blocks the whole-sequence gate asks of one sliding-window request at
        most: ``SlidingWindowSpec.max_admission_blocks_per_request``
        (``vllm/v1/kv_cache_interface.py``) = cdiv(min(window - 1 + in-flight
        tokens, max_model_len), block_size) + 1, in-flight tokens =
        ``VllmConfig.max_in_flight_tokens`` (2 x max_num_batched_tokens with
        async scheduling, else 1 x). 0 without a window."""
        if self.sliding_window == 0:
            return 0
        in_flight = (2 if self.async_scheduling else 1) * self.max_num_batched_tokens
        tokens = min(self.sliding_window - 1 + in_flight, self.max_model_len)
        return -(-tokens // self.block_size) + 1

    @property
    def kv_slack_tokens(self) -> int:
        """Tokens of KV a request can hold past its length under this config's
        speculative decoding (``Speculation.kv_slack_tokens``); 0 without."""
        spec = self.speculation
        return 0 if spec is None else spec.kv_slack_tokens(self.async_scheduling)

    def kv_safe_max_num_seqs(self, request_tokens: float) -> int:
        """``capacity.analytic_safe_max_num_seqs`` on this config's pool for
        requests of ``request_tokens`` tokens (float, e.g. a mean), plus the
        tokens speculative decoding holds past a request's length
        (``Speculation.kv_slack_tokens``), with this config's sliding window and
        KV cache groups. Returns an int >= 0."""
        slack = self.kv_slack_tokens
        return analytic_safe_max_num_seqs(
            self.num_gpu_blocks, self.block_size, request_tokens + slack, self.null_block,
            self.sliding_window_cap, self.full_attention_groups, self.sliding_window_groups,
            self.mamba_groups,
        )  # fmt: skip

    @property
    def think_time_ns(self) -> int:
        """``think_time_s`` in integer ns (the kernel's clock)."""
        return int(round(self.think_time_s * 1e9))

    @property
    def victim_rule(self) -> str:
        """The victim rule in force: explicit, else vLLM's for the policy."""
        if self.victim is not None:
            return self.victim
        return "priority" if self.policy == "priority" else "youngest"

    @property
    def swap_ns_per_block(self) -> int:
        """Transfer time of one block over the swap link: bytes / (GB/s) = ns."""
        return int(math.ceil(self.kv_block_bytes / self.swap_bandwidth_gbps))

    @property
    def watermark_blocks(self) -> int:
        """``int(watermark * num_gpu_blocks)`` (``KVCacheManager.__init__``)."""
        return int(self.watermark * self.num_gpu_blocks)

    def as_dict(self) -> dict:
        """Field -> value (``SchedulerConfig(**c.as_dict())`` is ``c``)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def columns(self) -> dict:
        """``as_dict`` as a results table's columns: ``speculation`` flattened
        to the options that set it, ``speculative_config`` (vLLM's JSON, ""
        when off), ``spec_acceptance`` (as given, "" when off) and
        ``spec_seed``, and to ``speculative_method`` ("" when off),
        ``num_speculative_tokens`` (0 when off) and ``mean_acceptance_length``
        (tokens per verifying step; 1 when off)."""
        out = self.as_dict()
        x = out.pop("kv_transfer")
        out["kv_transfer"] = "" if x is None else x.as_text()
        s = out.pop("speculation")
        out["speculative_config"] = "" if s is None else s.config_json()
        out["spec_acceptance"] = "" if s is None else s.acceptance_text()
        out["spec_seed"] = 0 if s is None else s.seed
        out["speculative_method"] = "" if s is None else s.method
        out["num_speculative_tokens"] = 0 if s is None else s.num_speculative_tokens
        out["mean_acceptance_length"] = 1.0 if s is None else s.mean_acceptance_length()
        return out


def compat_settings(compat: str, explicit: dict) -> dict:
    """The fields ``compat`` implies (``BLIS_IMPLIED`` for "blis", none for
    "vllm"), checked against the values the user gave (``explicit``: field ->
    value, only fields the user set). Returns the implied fields.

    Raises:
        ValueError: one line naming the first given field that contradicts it.
    """
    if compat not in COMPATS:
        raise ValueError(f"--compat must be one of {sorted(COMPATS)}, got {compat!r}")
    if compat != "blis":
        return {}
    for name, want in BLIS_IMPLIED.items():
        if name in explicit and explicit[name] != want:
            given = explicit[name]
            shown = given if isinstance(given, str) else str(bool(given)).lower()
            implied = want if isinstance(want, str) else str(want).lower()
            raise ValueError(
                f"--{_flag(name)} {shown} contradicts --compat blis (it implies {implied})"
            )
    return dict(BLIS_IMPLIED)


def blis_config(**fields: object) -> SchedulerConfig:
    """A ``SchedulerConfig`` with ``compat="blis"`` and the fields it implies
    (``compat_settings``); ``fields`` are the others (a contrary value of an
    implied field raises ValueError, one line)."""
    implied = compat_settings("blis", fields)
    return SchedulerConfig(**{**fields, **implied, "compat": "blis"})  # type: ignore[arg-type]


def _worst_allreduce_s(fp: tuple[float, ...], tokens: float) -> float:
    """The measured all-reduce of a ``tokens``-token step at the slower of
    its CUDA-graph and eager latencies (a bound for ``max_step_ns``)."""
    f = np.array(fp, dtype=np.float64)
    n = tokens * f[AR_ELEMENTS]
    return f[AR_COUNT] * max(interp_s(f, AR_GRAPH, n), interp_s(f, AR_EAGER, n))


def max_step_ns(cfg: SchedulerConfig, lat: Latency) -> float:
    """The longest step ``cfg`` can take under ``lat``, in ns (a float, an upper bound).

    A step schedules at most T = min(max_num_batched_tokens, num_gpu_blocks x
    block_size) tokens (vLLM v1's token budget counts prefill and decode
    tokens; every scheduled token needs a KV slot). Linear: b0 + max(b1, b2) x T.
    Roofline: overhead + max(FLOPs/(peak x MFU), bytes/(HBM x MBU)) with every
    token attending max_model_len keys and the whole pool read, plus T tokens'
    all-reduce time (see ``latency.step_time_ns``). Measured: overhead + twice the largest table
    value at the corners of the box the step can reach (up to T prefill
    tokens and T decodes, the prefill context and the decodes' summed KV each
    up to the pool's tokens): the table is multilinear, so this bounds it
    unless its slopes change sign. Swap preemption adds at
    most a pool's worth of block transfers.
    """
    tokens = float(min(cfg.max_num_batched_tokens, cfg.num_gpu_blocks * cfg.block_size))
    b0, b1, b2, *_ = lat.ns()
    if isinstance(lat, LinearLatency):
        t = b0 + max(b1, b2) * tokens
    elif isinstance(lat, MeasuredLatency):
        n, pool = int(tokens), cfg.num_gpu_blocks * cfg.block_size
        corners = [
            (p, d, p * c + p * (p + 1) // 2 + d * x, p + c + d * x)
            for p in (0, n)
            for d in (0, n)
            for c in (0, pool)
            for x in (1, max(pool // max(d, 1), 1))
            if 0 < p + d
        ]
        worst = max(measured_table_ns(lat.table, *c) for c in corners)
        t = b0 + 2.0 * lat.scale * worst
    else:
        fp = lat.floats()
        pair, kv = fp[1] + fp[SW_PAIR], fp[3] + fp[SW_KV]  # a hybrid's layers as full ones
        flops = fp[0] * tokens + pair * tokens * cfg.max_model_len
        nbytes = fp[2] + fp[7] + kv * (cfg.num_gpu_blocks * cfg.block_size + tokens)
        comm = fp[6] * tokens + _worst_allreduce_s(fp, tokens)
        t = b0 + math.ceil((max(flops / fp[4], nbytes / fp[5]) + comm) * 1e9)
        t += _draft_bound_ns(cfg, lat, fp, tokens)
    if cfg.preemption_mode == "swap":
        t += float(cfg.swap_ns_per_block) * 2 * cfg.num_gpu_blocks
    return float(t)


def _draft_bound_ns(cfg: SchedulerConfig, lat: Latency, fp: tuple, tokens: float) -> float:
    """The drafter's longest time in a step (``latency.draft``), ns: k passes
    over T tokens, each attending max_model_len keys and reading the whole
    pool; 0 without a drafter."""
    d = draft_floats_of(cfg, lat)
    if not any(d):
        return 0.0
    kv = cfg.num_gpu_blocks * cfg.block_size + tokens
    flops = d[0] * tokens + d[1] * tokens * cfg.max_model_len
    one = max(flops / fp[4], (d[2] + d[3] * kv) / fp[5])
    return math.ceil(cfg.speculation.num_speculative_tokens * one * 1e9)  # type: ignore[union-attr]


def clock_bound(cfg: SchedulerConfig, lat: Latency, label: str = "", spec: bool = False) -> None:
    """``bounds.clock_bound`` for one config: its int64 ns clock cannot wrap.

    Raises ValueError (one line; option names as in a spec when ``spec``), also
    for a drafter off the roofline (``check_drafter_latency``)."""
    check_drafter_latency(cfg, lat, spec)
    _clock_bound(cfg, lat, label, spec)


def _clock_bound(cfg: SchedulerConfig, lat: Latency, label: str = "", spec: bool = False) -> None:
    """``clock_bound`` without the drafter check (``pack_configs``)."""
    ns = lat.ns()
    names = bounds.SPEC_NAMES if spec else bounds.CLI_NAMES
    bounds.clock_bound(cfg.max_steps, max_step_ns(cfg, lat), (ns[3], ns[4]), label, names)


def _flag(name: str) -> str:
    return name.replace("_", "-")


def check_vllm_args(max_num_seqs: int, max_num_batched_tokens: int) -> None:
    """Raise ValueError (one line) when vLLM 0.33 refuses these at start-up:
    max_num_batched_tokens below max_num_seqs (``SchedulerConfig.
    verify_max_model_len``, ``vllm/config/scheduler.py``)."""
    if max_num_batched_tokens < max_num_seqs:
        raise ValueError(
            f"--max-num-batched-tokens {max_num_batched_tokens:,} is below --max-num-seqs "
            f"{max_num_seqs:,}: vLLM 0.33 refuses to start (max_num_batched_tokens must be "
            ">= max_num_seqs)"
        )


def pack_configs(
    configs: Sequence[SchedulerConfig], latencies: Sequence[Latency]
) -> tuple[np.ndarray, np.ndarray]:
    """Pack C configs and their step-time models into the kernel's matrices.

    Args:
        configs: C scheduler configs.
        latencies: C latency models (one per config) or a single one for all.
    Returns:
        (cfg, cfgf): int64 array of shape (C, NCOLS), columns named by the
        module constants (``N``, ``BS``, ...; times in integer ns), and float64
        array of shape (C, NFLOAT) with the roofline parameters.
    Raises:
        ValueError: if the lengths disagree, no config is given, or a config's
            clock could pass int64 nanoseconds (``bounds.clock_bound``).
    """
    if len(configs) == 0:
        raise ValueError("no configurations to simulate")
    if len(latencies) == 1:
        latencies = list(latencies) * len(configs)
    if len(latencies) != len(configs):
        raise ValueError("need one latency model per config, or one for all")
    out = np.zeros((len(configs), NCOLS), dtype=np.int64)
    outf = np.zeros((len(configs), NFLOAT), dtype=np.float64)
    rows, _ = _table_rows(latencies)
    for i, (c, lat) in enumerate(zip(configs, latencies, strict=True)):
        _clock_bound(c, lat)  # the int64 ns clock cannot wrap
        outf[i, :ROOFLINE_FLOATS] = lat.floats()
        outf[i, ROOFLINE_FLOATS:] = draft_floats_of(c, lat)
        horizon = NO_HORIZON_NS if math.isinf(c.horizon_s) else int(round(c.horizon_s * 1e9))
        out[i, :] = (
            c.num_gpu_blocks,
            c.block_size,
            c.max_num_seqs,
            c.max_num_batched_tokens,
            c.max_model_len,
            c.long_prefill_token_threshold,
            c.watermark_blocks,
            int(c.scheduler_reserve_full_isl),
            PREEMPTION_MODES[c.preemption_mode],
            STOP_BOUNDS[c.stop_bound],
            int(c.null_block),
            POLICIES[c.policy],
            horizon,
            c.max_steps,
            *lat.ns(),
            lat_kind(lat),
            VICTIMS[c.victim_rule],
            c.anti_starvation,
            ADMISSIONS[c.admission],
            c.adaptive_window,
            c.adaptive_threshold,
            c.adaptive_step,
            c.cpu_swap_blocks,
            c.swap_ns_per_block,
            int(c.async_scheduling),
            int(c.enable_prefix_caching),
            c.max_concurrency,
            c.think_time_ns,
            rows[i],
            c.replicas,
            ROUTERS[c.router],
            c.router_seed,
            COMPATS[c.compat],
            int(c.blis_full_hit_defect),
            c.sliding_window,
            c.sliding_window_cap,
            c.full_attention_groups,
            c.sliding_window_groups,
            c.mamba_groups,
            int(outf[i, SW_WINDOW]),
            *_xfer_columns(c.kv_transfer),
            *_spec_columns(c.speculation),
        )
        if c.compat == "blis":
            check_compat_latency(c.compat, isinstance(lat, LinearLatency))
            out[i, A2] = blis_alpha2_ns(out[i, A2])
    return out, outf


def _spec_columns(spec: Speculation | None) -> tuple[int, ...]:
    """``SPEC_K``, ``SPEC_SEED``, ``SPEC_LA`` and the ``SPEC_T`` thresholds of
    one config (all 0 without speculative decoding)."""
    if spec is None:
        return (0,) * (3 + MAX_SPEC_TOKENS)
    k, seed, la = spec.num_speculative_tokens, spec.seed, spec.lookahead_tokens
    return (k, seed, la, *(int(x) for x in spec.thresholds()))


def draft_floats_of(c: SchedulerConfig, lat: Latency) -> tuple[float, ...]:
    """A config's drafter floats (``latency.draft``): 0s without a drafter,
    and on a step-time model other than the roofline, which prices no drafter
    (the commands refuse that pairing, ``check_drafter_latency``; the
    conformance tests run drafters in unit steps)."""
    spec = c.speculation
    if spec is None or spec.lookahead_tokens == 0 or not isinstance(lat, RooflineLatency):
        return (0.0,) * DRAFT_FLOATS
    return draft_floats(lat.model, lat.tp, lat.quantization, lat.kv_cache_dtype)


def check_drafter_latency(cfg: SchedulerConfig, lat: Latency, spec: bool = False) -> None:
    """A drafter (EAGLE, EAGLE-3, MTP) is priced on the roofline only
    (``latency.draft``), and MTP needs a model whose checkpoint has MTP
    layers (``ModelSpec.mtp_layers``; vLLM's ``SpeculativeConfig`` loads
    them). Raises ValueError (one line; a sweep spec's spelling when
    ``spec``) for another step-time model, which would run the drafter for
    free, or MTP on a model without such layers."""
    sp = cfg.speculation
    name = "speculative_config" if spec else "--speculative-config"
    if sp is not None and sp.lookahead_tokens and not isinstance(lat, RooflineLatency):
        fix = '[latency] kind = "roofline"' if spec else "--latency roofline"
        raise ValueError(
            f"{name} method {sp.method!r} is priced on the roofline (its "
            f"drafter's time, planner.latency.draft): use {fix}"
        )
    if sp is not None and sp.method == "mtp" and isinstance(lat, RooflineLatency):
        from planner.models.hardware import model

        layers = model(lat.model).mtp_layers
        if layers == 0:
            raise ValueError(
                f"{name} method 'mtp': {lat.model} has no multi-token-prediction "
                "layers (num_nextn_predict_layers / mtp_num_hidden_layers in its config.json); "
                "vLLM cannot load an MTP drafter for it"
            )
        if layers > 1:
            raise ValueError(
                f"{name} method 'mtp': {lat.model} has {layers} MTP modules; "
                "multi-module MTP is not simulated (its prefill lookahead)"
            )


def _xfer_columns(x: KVTransfer | None) -> tuple[int, int, int]:
    """``XFER``, ``XFER_LAT_NS``, ``XFER_PS`` of one config (0s: colocated)."""
    return (0, 0, 0) if x is None else (1, x.latency_ns, x.ps_per_token)


def check_compat_latency(compat: str, linear: bool) -> None:
    """``--compat blis`` runs BLIS's linear "blackbox" step time only. Raises
    ValueError (one line) for another step-time model."""
    if compat == "blis" and not linear:
        raise ValueError("--compat blis needs the linear step-time model (BLIS blackbox)")


def lat_kind(lat: Latency) -> int:
    """The kernel's step-time kind of ``lat`` (``latency.LINEAR``, ``ROOFLINE``, ``MEASURED``)."""
    if isinstance(lat, LinearLatency):
        return LINEAR
    return MEASURED if isinstance(lat, MeasuredLatency) else ROOFLINE


def _table_rows(latencies: Sequence[Latency]) -> tuple[list[int], list[np.ndarray]]:
    """Each latency's row in the stacked measured tables (0 for a model
    without a table) and the distinct tables in order of first use."""
    rows, tables, seen = [], [], {}
    for lat in latencies:
        if not isinstance(lat, MeasuredLatency):
            rows.append(0)
            continue
        key = id(lat.table)
        if key not in seen:
            seen[key] = len(tables)
            tables.append(lat.table)
        rows.append(seen[key])
    return rows, tables


def pack_tables(latencies: Sequence[Latency]) -> np.ndarray:
    """The ``state.Requests.lat_tables`` of ``latencies`` (one per config, or
    one for all): the distinct measured tables stacked, shape (T, L) float64
    (rows padded with zeros to the longest), ``latency.NO_TABLE`` when none;
    the rows ``pack_configs`` writes in the ``LAT_TABLE`` column."""
    _, tables = _table_rows(latencies)
    if not tables:
        return NO_TABLE
    out = np.zeros((len(tables), max(t.shape[0] for t in tables)), dtype=np.float64)
    for i, t in enumerate(tables):
        out[i, : t.shape[0]] = t
    return out
