"""Step-time models. Today: BLIS's linear "blackbox" alpha/beta model.

Source: BLIS (inference-sim), ``sim/latency`` blackbox model, as summarised in
``shared/docs/semantics.md``. All coefficients are in microseconds:

- step time      = beta0 + beta1 * prefill_tokens + beta2 * decode_tokens
- queueing delay = alpha0 + alpha1 * prompt_tokens   (before a request enters ``waiting``)
- per-token overhead alpha2, added to TTFT and to each ITL sample, not to the clock.

The kernel works in integer nanoseconds, so each coefficient is rounded to the
nearest nanosecond (``round(us * 1000)``). The seed coefficients have two decimals
in microseconds, so this rounding is exact for them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from planner import bounds
from planner.latency import allreduce
from planner.latency.allreduce import KNOTS, interp_s

# Seed coefficients: llama-3.1-8b on H100 (BLIS defaults, shared/docs/semantics.md).
SEED_ALPHA_US: tuple[float, float, float] = (232.46, 1.75, 3357.44)
SEED_BETA_US: tuple[float, float, float] = (5752.71, 17.25, 6.00)

# Fitted linear coefficients per (model, GPU): (alpha, beta) in microseconds.
# Source: BLIS (inference-sim) blackbox defaults, as quoted for scenario S1.
LINEAR_PRESETS: dict[tuple[str, str], tuple[tuple[float, ...], tuple[float, ...]]] = {
    ("llama-3.1-8b", "H100"): (SEED_ALPHA_US, SEED_BETA_US),
}


MAX_COEFF_US = bounds.MAX_COEFF_US  # 1,000 s; bounds.clock_bound checks the whole run


def _check_factor(factor: float) -> None:
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"a step-time factor must be positive and finite, got {factor!r}")


@dataclass(frozen=True)
class LinearLatency:
    """BLIS alpha/beta coefficients in microseconds (see module docstring).

    Raises:
        ValueError: if a coefficient is outside 0..MAX_COEFF_US us or not finite
            (``bounds.coeff``), or beta0 + beta2 is 0
            (a decode step that costs no time would let the clock stand still).
    """

    alpha: tuple[float, float, float] = SEED_ALPHA_US
    beta: tuple[float, float, float] = SEED_BETA_US

    def __post_init__(self) -> None:
        for name, coeffs in (("alpha", self.alpha), ("beta", self.beta)):
            if len(coeffs) != 3:
                raise ValueError(f"--{name}-coeffs needs 3 values, got {len(coeffs)}")
            for x in coeffs:
                bounds.coeff(f"--{name}-coeffs", x)
        if self.beta[0] + self.beta[2] <= 0 or self.beta[0] + self.beta[1] <= 0:
            raise ValueError("--beta-coeffs: a step must take time (beta0 + beta1/beta2 > 0)")

    def ns(self) -> tuple[int, int, int, int, int, int]:
        """(b0, b1, b2, a0, a1, a2) in integer nanoseconds."""
        return tuple(int(round(x * 1000.0)) for x in (*self.beta, *self.alpha))  # type: ignore[return-value]

    def floats(self) -> tuple[float, ...]:
        """Roofline floats: unused by the linear model (ones, to avoid 0/0)."""
        return (0.0, 0.0, 0.0, 0.0, 1.0, 1.0) + (0.0,) * (ROOFLINE_FLOATS - 6)

    def describe(self) -> str:
        a, b = self.alpha, self.beta
        return f"linear alpha=({a[0]:g}, {a[1]:g}, {a[2]:g}) beta=({b[0]:g}, {b[1]:g}, {b[2]:g}) us"

    def slower(self, factor: float) -> LinearLatency:
        """The same model with every step ``factor`` times as long (the betas
        scaled; alpha, queueing before a request enters, unchanged). Raises
        ValueError for a factor that is not positive and finite or a scaled
        coefficient outside ``planner.bounds``."""
        _check_factor(factor)
        return LinearLatency(self.alpha, tuple(b * factor for b in self.beta))  # type: ignore[arg-type]


# Default efficiencies of the roofline model. MFU 0.5 is the usual planning
# figure for large dense GEMMs on H100/A100 (prefill); MBU 0.8 is the share of
# peak HBM bandwidth decode kernels typically reach. Both are parameters.
DEFAULT_MFU = 0.5
DEFAULT_MBU = 0.8

# RooflineLatency.floats() layout past the first nine: the measured all-reduce
# (``planner.latency.allreduce``): all-reduces per step (0 without a table),
# elements per token (hidden_size), the CUDA-graph token ceiling, then KNOTS
# graph and KNOTS eager latencies in seconds.
AR_COUNT, AR_ELEMENTS, AR_GRAPH_TOKENS, AR_GRAPH = 9, 10, 11, 12
AR_EAGER = AR_GRAPH + KNOTS
# Then a hybrid's sliding-window layers, priced apart (``RooflineLatency``):
# FLOPs per (query, key) pair and KV bytes per token of those layers, and
# their window in tokens (all 0 unless the model mixes full and sliding layers).
SW_PAIR, SW_KV, SW_WINDOW = AR_EAGER + KNOTS, AR_EAGER + KNOTS + 1, AR_EAGER + KNOTS + 2
# Then the bytes of recurrent state (linear attention: Gated DeltaNet, Mamba2)
# each scheduled request reads and writes per step, over all such layers.
STATE_RW = SW_WINDOW + 1
ROOFLINE_FLOATS = STATE_RW + 1


def overhead_ns(
    overhead_us: float, alpha: tuple[float, float, float]
) -> tuple[int, int, int, int, int, int]:
    """The kernel's integer coefficients (b0, b1, b2, a0, a1, a2), ns, of a
    model whose only beta is a fixed per-step overhead (roofline, measured):
    each microsecond figure rounded to the nearest nanosecond."""
    return tuple(  # type: ignore[return-value]
        int(round(x * 1000.0)) for x in (overhead_us, 0.0, 0.0, *alpha)
    )


IDLE_LOG_ALL_BUSY = -745.0  # ln of the smallest positive double: k = E reads every expert


def idle_log(k: int, experts: int) -> float:
    """ln(1 - k/E), the log-probability that one token leaves a given routed
    expert idle under uniform top-k routing; 0 for a dense model (E = 0)."""
    if experts <= 0:
        return 0.0
    if k >= experts:
        return IDLE_LOG_ALL_BUSY
    return math.log1p(-k / experts)


@dataclass(frozen=True)
class RooflineLatency:
    """Per-step roofline: max(compute time, memory time) + a fixed overhead.

    - compute = (2 x active params/tp x tokens + 4 x layers x heads/tp x
      head_dim x attended pairs) / (bf16 peak x MFU), where a chunk of n
      tokens after c cached ones attends n*c + n(n+1)/2 (query, key) pairs.
      Active params: a mixture of experts runs each token through its top-k
      of E routed experts only (``ModelSpec.active_params``; Shazeer et al.,
      2017; Fedus et al., 2022); dense models run every parameter.
    - memory = (weights/tp + KV bytes/token/tp x tokens of KV touched) /
      (HBM bandwidth x MBU); a request's step touches c + n tokens of KV.
      Routed experts' weights are read only for the experts the step's T
      tokens pick: under uniform routing an expert is idle with probability
      (1 - k/E)^T, so a step reads the fraction 1 - (1 - k/E)^T of them
      (k/E at T = 1, nearly all for a large batch).
    - tensor-parallel communication, added (vLLM runs the all-reduces on the
      critical path): 2 x layers + 1 all-reduces of (tokens x hidden_size)
      activations per step, each timed from vLLM's own all-reduce as
      aiconfigurator-core measured it on that GPU and tensor-parallel size
      (``planner.latency.allreduce``: latency and bandwidth both). Where
      nothing was measured (RTX 4090, L4, A10G, MI300X, ...), a bandwidth-only
      bound: per token, 2 all-reduces per layer of hidden_size activations in
      the model dtype (Megatron-LM's split: one after attention, one after
      the MLP; Shoeybi et al., 2019), each moving 2 (tp - 1) / tp of its
      bytes over every GPU's link (ring all-reduce; Patarasuk and Yuan, JPDC
      2009) at ``hardware.GpuSpec.link_bytes_per_s``, without the latency of
      each all-reduce (``--step-overhead-us`` can carry it). Zero at tp = 1.
    - sliding-window layers read and attend only their window: a model
      whose layers all slide is priced with its window (the kernel's pairs
      and KV tokens are window-bounded, ``kernel.step._attention``); a hybrid
      (full and sliding layers: gemma-2/3, gpt-oss) prices its full layers'
      share on whole-context pairs and KV tokens and its sliding layers' share
      on window-bounded ones, each share its layer count over all layers
      (``sliding_split``). Chunked local layers are priced as full
      attention, an upper bound.
    - linear-attention (Gated DeltaNet, Mamba2) layers hold no per-token KV:
      each request the step schedules reads its recurrent state (conv + SSM,
      ``ModelSpec.linear_state_bytes``, what ``MambaSpec`` pages hold) from
      the cache and writes it back once per layer (vLLM's
      ``fused_recurrent_gated_delta_rule`` / ``selective_state_update``
      update it in place; a chunked prefill starts from the stored state and
      stores the last one), so a step moves 2 x state bytes x linear layers
      per scheduled request. Their projections are in the parameters; the
      recurrence's own FLOPs (a few per state element per token; a Qwen3.5-27B
      layer's state is 0.19% of its parameters) are not charged. MLP-only
      layers (Nemotron-H's) have no attention term.
    - data parallelism (``data_parallel_size`` D > 1, one rank's GPU priced):
      vLLM splits a mixture of experts' routed experts over the tp x D GPUs
      (``ModelSpec.expert_weight_bytes``) and steps the ranks together, each
      MoE layer gathering every rank's tokens, so a GPU reads 1/D of the
      routed experts, touched by the tokens of all D ranks (taken as D x its
      own: the other ranks' batches are not simulated, and are assumed as
      large), and computes its own tokens' share of expert FLOPs. vLLM 0.33's
      default ``--all2all-backend allgather_reducescatter``
      (``ParallelConfig.all2all_backend``) all-gathers the tokens' hidden
      states before each MoE layer and reduce-scatters its output, so each GPU
      receives 2 x (D - 1) x hidden_size values per token of its batch per MoE
      layer, charged at ``GpuSpec.link_bytes_per_s`` (bandwidth only) on top.

    The roofline idea: Williams et al., CACM 2009; its use for LLM inference:
    Yuan et al., "LLM Inference Unveiled" (2024). alpha (queueing delay,
    per-token overhead) as in ``LinearLatency``, default zero.

    Raises:
        ValueError: for efficiencies outside (0, 1], tp outside 1..MAX_TP or an
            overhead outside 0..MAX_COEFF_US (``planner.bounds``).
    """

    model: str
    gpu: str
    tp: int = 1
    mfu: float = DEFAULT_MFU
    mbu: float = DEFAULT_MBU
    overhead_us: float = 0.0
    alpha: tuple[float, float, float] = (0.0, 0.0, 0.0)
    quantization: str | None = None  # vLLM's --quantization: weight bytes
    kv_cache_dtype: str = "auto"  # vLLM's --kv-cache-dtype: KV bytes
    time_scale: float = 1.0  # every step this many times as long (``slower``)
    data_parallel_size: int = 1  # ranks a mixture of experts is split over (class doc)

    def __post_init__(self) -> None:
        from planner.models.hardware import gpu, model

        _check_factor(self.time_scale)
        bounds.check_option("data_parallel_size", self.data_parallel_size)

        model(self.model, self.quantization, self.kv_cache_dtype), gpu(self.gpu)
        bounds.check_option("mfu", self.mfu)
        bounds.check_option("mbu", self.mbu)
        bounds.check_option("tensor_parallel_size", self.tp)
        bounds.check_option("step_overhead_us", self.overhead_us)
        LinearLatency(self.alpha, (1.0, 0.0, 0.0))  # validates alpha

    def ns(self) -> tuple[int, int, int, int, int, int]:
        """(b0, b1, b2, a0, a1, a2) in ns: b0 is the fixed overhead, b1 = b2 = 0."""
        return overhead_ns(self.overhead_us * self.time_scale, self.alpha)

    def slower(self, factor: float) -> RooflineLatency:
        """The same model with every step ``factor`` times as long: its rates
        divided and its overhead and all-reduce times multiplied by it
        (``time_scale``). Raises ValueError for a factor that is not positive
        and finite."""
        _check_factor(factor)
        return dataclasses.replace(self, time_scale=self.time_scale * factor)

    def floats(self) -> tuple[float, ...]:
        """(FLOPs/token, FLOPs/attended pair, weight bytes read every step,
        KV bytes/token, effective FLOP/s, effective bytes/s, bandwidth-only
        all-reduce seconds/token, routed expert weight bytes, ln(1 - k/E),
        then the measured all-reduce at ``AR_COUNT``..``ROOFLINE_FLOATS``) on
        one GPU (``config.NFLOAT`` floats); expert terms are 0 for a dense
        model, the bandwidth-only term 0 where a measurement is used."""
        from planner.models.hardware import gpu, model

        m, g = model(self.model, self.quantization, self.kv_cache_dtype), gpu(self.gpu)
        heads = m.num_heads / self.tp
        dp = self.data_parallel_size
        experts = m.expert_weight_bytes(self.tp, dp)
        tab = self.allreduce_table()
        measured: tuple[float, ...] = (0.0,) * (SW_PAIR - AR_COUNT)
        if tab is not None:
            count, per_token = 2.0 * m.num_layers + 1.0, float(m.hidden_size)
            graph = float(allreduce.graph_tokens(g.sm))
            measured = (count, per_token, graph, *tab.graph_s, *tab.eager_s)
        f = self.time_scale
        if tab is not None:
            measured = (*measured[:3], *(x * f for x in measured[3:]))
        from planner.models.config_json import LINEAR as LINEAR_LAYER
        from planner.models.config_json import MLP as MLP_LAYER

        n_sw, window = self.sliding_split()
        per_pair = 4.0 * heads * m.head_dim  # one layer's attention FLOPs per pair
        per_kv = float(m.kv_bytes_per_token_layer(self.tp))
        n_linear = sum(t == LINEAR_LAYER for t in m.layer_types)
        attn = sum(t not in (LINEAR_LAYER, MLP_LAYER) for t in m.layer_types)
        full = attn - n_sw  # layers priced on whole-context sums
        return (
            2.0 * m.active_params() / self.tp,
            full * per_pair,
            m.weight_bytes(self.tp, dp) - experts,
            full * per_kv,
            g.bf16_flops * self.mfu / f,
            g.hbm_bytes_per_s * self.mbu / f,
            ((0.0 if tab is not None else self.comm_s_per_token()) + self.dp_comm_s_per_token())
            * f,
            experts,
            dp * idle_log(m.experts_per_token, m.num_experts),
            *measured,
            n_sw * per_pair,
            n_sw * per_kv,
            float(window),
            2.0 * n_linear * m.linear_state_bytes(self.tp) / f,
        )

    def sliding_split(self) -> tuple[int, int]:
        """(sliding-window layers, window in tokens) priced apart: a hybrid's
        (full and sliding layers both); (0, 0) for full attention and for a
        model whose layers all slide (the kernel's own sums are then
        window-bounded already)."""
        from planner.models.config_json import SLIDING
        from planner.models.hardware import model

        m = model(self.model, self.quantization, self.kv_cache_dtype)
        n_sw = sum(1 for t in m.layer_types if t == SLIDING)
        if n_sw == 0 or n_sw == m.num_layers or not m.sliding_window:
            return 0, 0
        return n_sw, int(m.sliding_window)

    def allreduce_table(self) -> allreduce.AllReduceTable | None:
        """The measured all-reduce of this GPU at this tp; None at tp 1 or
        where nothing was measured (``planner.latency.allreduce``)."""
        return None if self.tp == 1 else allreduce.lookup(self.gpu, self.tp)

    def comm_s_per_token(self) -> float:
        """Seconds per token of the bandwidth-only all-reduce bound (class
        docstring), used where no measurement exists."""
        from planner.models.hardware import gpu, model

        if self.tp == 1:
            return 0.0
        m, g = model(self.model, self.quantization, self.kv_cache_dtype), gpu(self.gpu)
        ring = 2.0 * (self.tp - 1) / self.tp
        return 2.0 * m.num_layers * ring * m.hidden_size * m.dtype_bytes / g.link_bytes_per_s

    def dp_comm_s_per_token(self) -> float:
        """Seconds per token of a data-parallel MoE's all-gather and
        reduce-scatter (class docstring); 0 for one rank or a dense model."""
        from planner.models.hardware import gpu, model

        m = model(self.model, self.quantization, self.kv_cache_dtype)
        if self.data_parallel_size == 1 or not m.num_experts:
            return 0.0
        values = 2.0 * (self.data_parallel_size - 1) * m.hidden_size * m.moe_layers
        return values * m.dtype_bytes / gpu(self.gpu).link_bytes_per_s

    def describe(self) -> str:
        dtypes = f", quantization {self.quantization}" if self.quantization else ""
        if self.kv_cache_dtype != "auto":
            dtypes += f", KV {self.kv_cache_dtype}"
        if self.data_parallel_size > 1:
            dtypes += f", one of {self.data_parallel_size} data-parallel ranks"
        return (
            f"roofline {self.model} on {self.tp} x {self.gpu} "
            f"(MFU {self.mfu:g}, MBU {self.mbu:g}, overhead {self.overhead_us:g} us{dtypes}"
            + (f", step times x{self.time_scale:.3g}" if self.time_scale != 1.0 else "")
            + self._comm_text()
            + ")"
            + self._layer_text()
        )

    def _layer_text(self) -> str:
        """What the roofline does not price exactly for this model's layer
        kinds (class docstring): linear-attention (Mamba) and chunked local
        layers are priced as full attention; "" otherwise."""
        from planner.models.hardware import model

        m = model(self.model, self.quantization, self.kv_cache_dtype)
        n = sum(t == "chunked" for t in m.layer_types)
        if not n:
            return ""
        return f"; its {n} chunked local attention layers are priced as full attention"

    def _comm_text(self) -> str:
        if self.tp == 1:
            return ""
        tab = self.allreduce_table()
        if tab is not None:
            return f", all-reduce measured ({tab.source})"
        return (
            f", all-reduce {self.comm_s_per_token() * 1e6:.3g} us/token, bandwidth only "
            "(no measurement for this GPU and tp)"
        )


@dataclass(frozen=True, eq=False)
class MeasuredLatency:
    """Step times interpolated in a table of aiconfigurator-core estimates
    (built by ``planner.latency.measured.build``; the table layout is
    ``measured_table_ns``'s). ``scale`` multiplies every table value (the
    correction factor ``plan calibrate`` fits); ``overhead_us`` is added per
    step; alpha as in ``LinearLatency``.

    Raises:
        ValueError: for a scale outside (0, 1000] or an overhead or alpha
            outside ``planner.bounds``.
    """

    model: str
    gpu: str
    tp: int
    table: np.ndarray  # (L,) float64, see measured_table_ns
    source: str  # e.g. "aiconfigurator-core 0.12.0, h100_sxm vLLM 0.24.0 data"
    scale: float = 1.0
    overhead_us: float = 0.0
    alpha: tuple[float, float, float] = (0.0, 0.0, 0.0)
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    # the vLLM release aiconfigurator collected the data on (``measured.data_line``)
    data_version: str = dataclasses.field(default="", compare=False)

    def __post_init__(self) -> None:
        bounds.check_option("measured_scale", self.scale)
        bounds.check_option("step_overhead_us", self.overhead_us)
        LinearLatency(self.alpha, (1.0, 0.0, 0.0))  # validates alpha

    def ns(self) -> tuple[int, int, int, int, int, int]:
        """(b0, b1, b2, a0, a1, a2) in ns: b0 is the fixed overhead, b1 = b2 = 0."""
        return overhead_ns(self.overhead_us, self.alpha)

    def floats(self) -> tuple[float, ...]:
        """(scale, 0, 0, 0, 1, 1, 0, ...): the kernel's float params of the
        measured kind (aiconfigurator's estimate includes its all-reduces)."""
        return (self.scale, 0.0, 0.0, 0.0, 1.0, 1.0) + (0.0,) * (ROOFLINE_FLOATS - 6)

    def slower(self, factor: float) -> MeasuredLatency:
        """The same table with every step ``factor`` times as long (its scale
        and overhead multiplied). Raises ValueError for a factor that is not
        positive and finite or a result outside ``planner.bounds``."""
        _check_factor(factor)
        return dataclasses.replace(
            self, scale=self.scale * factor, overhead_us=self.overhead_us * factor
        )

    def describe(self) -> str:
        dtypes = f", quantization {self.quantization}" if self.quantization else ""
        if self.kv_cache_dtype != "auto":
            dtypes += f", KV {self.kv_cache_dtype}"
        scale = f", x{self.scale:g}" if self.scale != 1.0 else ""
        return (
            f"measured {self.model} on {self.tp} x {self.gpu} ({self.source}{scale}, "
            f"overhead {self.overhead_us:g} us{dtypes})"
        )


Latency = LinearLatency | RooflineLatency | MeasuredLatency


def hardware_options(lat: RooflineLatency | MeasuredLatency) -> str:
    """The command-line options naming what ``lat`` prices (``--model``,
    ``--gpu``, and ``--tensor-parallel-size``, ``--quantization``,
    ``--kv-cache-dtype`` when not the default), so that a fitted step time
    printed with them replays as fitted (``plan calibrate``)."""
    out = f"--model {lat.model} --gpu {lat.gpu}"
    if lat.tp != 1:
        out += f" --tensor-parallel-size {lat.tp}"
    if lat.quantization is not None:
        out += f" --quantization {lat.quantization}"
    if lat.kv_cache_dtype != "auto":
        out += f" --kv-cache-dtype {lat.kv_cache_dtype}"
    return out


# Step-time model kinds, as the kernel sees them.
LINEAR, ROOFLINE, MEASURED = 0, 1, 2
NO_TABLE = np.zeros((1, 4), dtype=np.float64)  # the stacked tables when no config has one


@njit(cache=True)
def _segment(g, x):  # noqa: ANN001, ANN202
    """(j, t): x lies at g[j] + t (g[j+1] - g[j]) on the ascending grid g, the
    first or last segment extended beyond the grid's ends (t < 0 or t > 1)."""
    n = g.shape[0]
    j = 0
    while j < n - 2 and x >= g[j + 1]:
        j += 1
    return j, (x - g[j]) / (g[j + 1] - g[j])


@njit(cache=True)
def measured_table_ns(tab, prefill, decode, attended, kv_tokens):  # noqa: ANN001, ANN201
    """Multilinear interpolation of a measured step-time table, in float ns.

    ``tab`` (float64, 1-D): sizes (n0, n1, n2, n3), then the ascending grids
    of prefill tokens P, decode requests D, mean decode context a (KV tokens
    per decode request, its new token included) and prefill context Cp (the
    prefill's computed tokens before the chunk: cached prefix or earlier
    chunks), then the n0*n1*n2*n3 step times in ns, C order. Every grid has at
    least 2 points; beyond a grid's ends the nearest segment is extended.

    The step's KV inputs are split as if its prefill tokens were one request's
    chunk of P tokens after Cp computed ones: the step's (query, key) pairs
    less its KV tokens are (P - 1) Cp + P (P - 1) / 2 for that chunk (decodes
    add as many pairs as KV tokens), so Cp = (attended - kv_tokens - P (P - 1)
    / 2) / (P - 1), clipped to [0, kv_tokens - P]; the decodes' KV is the
    rest. Exact when a step holds at most one prefill with computed tokens
    (several fresh prefills give Cp = 0, also exact); otherwise the context
    is shared between Cp and the decodes.
    """
    p = float(prefill)
    d = float(decode)
    rest = float(kv_tokens) - p
    cp = 0.0
    if prefill > 1:
        cp = (float(attended) - float(kv_tokens) - p * (p - 1.0) / 2.0) / (p - 1.0)
        cp = min(max(cp, 0.0), rest)
    a = max((rest - cp) / d, 1.0) if decode > 0 else 1.0
    n0, n1, n2, n3 = int(tab[0]), int(tab[1]), int(tab[2]), int(tab[3])
    o1 = 4 + n0
    o2 = o1 + n1
    o3 = o2 + n2
    ov = o3 + n3
    j0, t0 = _segment(tab[4:o1], p)
    j1, t1 = _segment(tab[o1:o2], d)
    j2, t2 = _segment(tab[o2:o3], a)
    j3, t3 = _segment(tab[o3:ov], cp)
    out = 0.0
    for b0 in range(2):
        w0 = t0 if b0 else 1.0 - t0
        for b1 in range(2):
            w1 = t1 if b1 else 1.0 - t1
            for b2 in range(2):
                w2 = t2 if b2 else 1.0 - t2
                for b3 in range(2):
                    w3 = t3 if b3 else 1.0 - t3
                    i = (((j0 + b0) * n1 + j1 + b1) * n2 + j2 + b2) * n3 + j3 + b3
                    out += w0 * w1 * w2 * w3 * tab[ov + i]
    return out


# ---- BLIS compatibility (``compat="blis"``, docs/blis-compat.md, rule 3) ----
# BLIS b563c440 works in whole microseconds: ``BlackboxLatencyModel``
# (``sim/latency/latency.go``) sums its float64 coefficients and converts the
# sum to int64 (``clampToInt64``), which truncates. The kernel's coefficients
# are integer ns; ns / 1000.0 is the nearest float64 to the microsecond figure
# whenever that has at most three decimals (IEEE division rounds correctly),
# so these reproduce BLIS's float64 arithmetic for such coefficients.


@njit(cache=True)
def blis_step_ns(ip, prefill, decode):  # noqa: ANN001, ANN201
    """``BlackboxLatencyModel.StepTime``: max(1, int64(beta0 + beta1 x prefill +
    beta2 x decode)) us, added in that order in float64, as ns. ``ip``: (b0,
    b1, b2) ns. Unlike ``step_time_ns`` a step that scheduled nothing still
    costs beta0 (BLIS runs the step)."""
    t = ip[0] / 1000.0
    t += (ip[1] / 1000.0) * float(prefill)
    t += (ip[2] / 1000.0) * float(decode)
    return max(1, int(t)) * 1000


@njit(cache=True)
def blis_queue_ns(a0, a1, prompt):  # noqa: ANN001, ANN201
    """``BlackboxLatencyModel.QueueingTime``: int64(alpha0 + alpha1 x prompt) us,
    as ns (``a0``/``a1`` in ns)."""
    t = a0 / 1000.0
    t += (a1 / 1000.0) * float(prompt)
    return int(t) * 1000


def blis_alpha2_ns(a2: int) -> int:
    """``BlackboxLatencyModel.OutputTokenProcessingTime``: int64(alpha2) us, as ns."""
    return int(a2) // 1000 * 1000


@njit(cache=True)
def step_time_ns(kind, ip, fp, prefill, decode, attended, kv_tokens, tab, attended_w=0, kv_w=0, nreq=0):  # noqa: ANN001, ANN201, E501  # fmt: skip
    """Duration of one step in integer ns; 0 for a step that scheduled nothing.

    ``kind``: ``LINEAR``, ``ROOFLINE`` or ``MEASURED``. ``ip``: int params
    (b0, b1, b2) in ns; ``fp``: the roofline floats of
    ``RooflineLatency.floats`` (measured: ``fp[0]`` scales the table).
    ``attended``: (query, key) pairs of the step; ``kv_tokens``: KV tokens
    read or written; ``tab``: the config's measured table (``MEASURED`` only,
    ``measured_table_ns``), a step taking at least 1 ns. ``attended_w`` and
    ``kv_w``: the same sums bounded by a hybrid's sliding window
    (``fp[SW_WINDOW]``; roofline only, 0 otherwise). ``nreq``: requests the
    step schedules, each moving ``fp[STATE_RW]`` bytes of linear-attention
    state (roofline only). Shared by the kernel (which calls the two parts,
    ``measured_step_ns`` and ``analytic_step_ns``, itself, so that a run
    without measured tables compiles no table code) and the reference
    engine.
    """
    if kind == MEASURED:
        return measured_step_ns(ip, fp, tab, prefill, decode, attended, kv_tokens)
    return analytic_step_ns(kind, ip, fp, prefill, decode, attended, kv_tokens, attended_w, kv_w, nreq)  # noqa: E501  # fmt: skip


@njit(cache=True)
def measured_step_ns(ip, fp, tab, prefill, decode, attended, kv_tokens):  # noqa: ANN001, ANN201
    """``step_time_ns`` of a ``MEASURED`` config (same arguments): the table's
    interpolation scaled by ``fp[0]``, at least 1 ns, plus ``ip[0]``; 0 for
    an empty step."""
    if prefill + decode == 0:
        return 0
    t_ns = fp[0] * measured_table_ns(tab, prefill, decode, attended, kv_tokens)
    return ip[0] + max(int(math.ceil(t_ns)), 1)


@njit(cache=True)
def analytic_step_ns(kind, ip, fp, prefill, decode, attended, kv_tokens, attended_w, kv_w, nreq):  # noqa: ANN001, ANN201, E501  # fmt: skip
    """``step_time_ns`` of a ``LINEAR`` or ``ROOFLINE`` config (same
    arguments): 0 for an empty step."""
    if prefill + decode == 0:
        return 0
    if kind == LINEAR:
        return ip[0] + ip[1] * prefill + ip[2] * decode
    tokens = prefill + decode
    flops = fp[0] * tokens + fp[1] * attended + fp[SW_PAIR] * attended_w
    touched = 1.0 - math.exp(fp[8] * tokens)  # routed experts read (class doc)
    nbytes = fp[2] + fp[7] * touched + fp[3] * kv_tokens + fp[SW_KV] * kv_w + fp[STATE_RW] * nreq
    t = max(flops / fp[4], nbytes / fp[5]) + fp[6] * tokens + allreduce_step_s(fp, tokens)
    return ip[0] + int(math.ceil(t * 1e9))


@njit(cache=True)
def allreduce_step_s(fp, tokens):  # noqa: ANN001, ANN201
    """Seconds of measured tensor-parallel all-reduce in a step of ``tokens``
    tokens (``RooflineLatency``; 0 without a measurement): ``fp[AR_COUNT]``
    all-reduces of ``tokens x fp[AR_ELEMENTS]`` elements, at the CUDA-graph
    latencies up to ``fp[AR_GRAPH_TOKENS]`` tokens, eager ones above."""
    if fp[AR_COUNT] == 0.0:
        return 0.0
    base = AR_GRAPH if tokens <= fp[AR_GRAPH_TOKENS] else AR_EAGER
    return fp[AR_COUNT] * interp_s(fp, base, tokens * fp[AR_ELEMENTS])
