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

import math
from dataclasses import dataclass

from numba import njit

from planner import bounds

# Seed coefficients: llama-3.1-8b on H100 (BLIS defaults, shared/docs/semantics.md).
SEED_ALPHA_US: tuple[float, float, float] = (232.46, 1.75, 3357.44)
SEED_BETA_US: tuple[float, float, float] = (5752.71, 17.25, 6.00)

# Fitted linear coefficients per (model, GPU): (alpha, beta) in microseconds.
# Source: BLIS (inference-sim) blackbox defaults, as quoted for scenario S1.
LINEAR_PRESETS: dict[tuple[str, str], tuple[tuple[float, ...], tuple[float, ...]]] = {
    ("llama-3.1-8b", "H100"): (SEED_ALPHA_US, SEED_BETA_US),
}


MAX_COEFF_US = bounds.MAX_COEFF_US  # 1,000 s; bounds.clock_bound checks the whole run


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

    def floats(self) -> tuple[float, float, float, float, float, float]:
        """Roofline floats: unused by the linear model (ones, to avoid 0/0)."""
        return (0.0, 0.0, 0.0, 0.0, 1.0, 1.0)

    def describe(self) -> str:
        a, b = self.alpha, self.beta
        return f"linear alpha=({a[0]:g}, {a[1]:g}, {a[2]:g}) beta=({b[0]:g}, {b[1]:g}, {b[2]:g}) us"


# Default efficiencies of the roofline model. MFU 0.5 is the usual planning
# figure for large dense GEMMs on H100/A100 (prefill); MBU 0.8 is the share of
# peak HBM bandwidth decode kernels typically reach. Both are parameters.
DEFAULT_MFU = 0.5
DEFAULT_MBU = 0.8


@dataclass(frozen=True)
class RooflineLatency:
    """Per-step roofline: max(compute time, memory time) + a fixed overhead.

    - compute = (2 x params/tp x tokens + 4 x layers x heads/tp x head_dim x
      attended pairs) / (bf16 peak x MFU), where a chunk of n tokens after c
      cached ones attends n*c + n(n+1)/2 (query, key) pairs.
    - memory = (weights/tp + KV bytes/token/tp x tokens of KV touched) /
      (HBM bandwidth x MBU); a request's step touches c + n tokens of KV.

    The roofline idea: Williams et al., CACM 2009; its use for LLM inference:
    Yuan et al., "LLM Inference Unveiled" (2024). Tensor-parallel communication
    is not modelled. alpha (queueing delay, per-token overhead) as in
    ``LinearLatency``, default zero.

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

    def __post_init__(self) -> None:
        from planner.hardware import gpu, model

        model(self.model, self.quantization, self.kv_cache_dtype), gpu(self.gpu)
        bounds.check_option("mfu", self.mfu)
        bounds.check_option("mbu", self.mbu)
        bounds.check_option("tensor_parallel_size", self.tp)
        bounds.check_option("step_overhead_us", self.overhead_us)
        LinearLatency(self.alpha, (1.0, 0.0, 0.0))  # validates alpha

    def ns(self) -> tuple[int, int, int, int, int, int]:
        """(b0, b1, b2, a0, a1, a2) in ns: b0 is the fixed overhead, b1 = b2 = 0."""
        return tuple(  # type: ignore[return-value]
            int(round(x * 1000.0)) for x in (self.overhead_us, 0.0, 0.0, *self.alpha)
        )

    def floats(self) -> tuple[float, float, float, float, float, float]:
        """(FLOPs/token, FLOPs/attended pair, weight bytes, KV bytes/token,
        effective FLOP/s, effective bytes/s) on one GPU."""
        from planner.hardware import gpu, model

        m, g = model(self.model, self.quantization, self.kv_cache_dtype), gpu(self.gpu)
        heads = m.num_heads / self.tp
        return (
            2.0 * m.params / self.tp,
            4.0 * m.num_layers * heads * m.head_dim,
            m.weight_bytes(self.tp),
            float(m.kv_bytes_per_token(self.tp)),
            g.bf16_flops * self.mfu,
            g.hbm_bytes_per_s * self.mbu,
        )

    def describe(self) -> str:
        dtypes = f", quantization {self.quantization}" if self.quantization else ""
        if self.kv_cache_dtype != "auto":
            dtypes += f", KV {self.kv_cache_dtype}"
        return (
            f"roofline {self.model} on {self.tp} x {self.gpu} "
            f"(MFU {self.mfu:g}, MBU {self.mbu:g}, overhead {self.overhead_us:g} us{dtypes})"
        )


Latency = LinearLatency | RooflineLatency

# Step-time model kinds, as the kernel sees them.
LINEAR, ROOFLINE = 0, 1


@njit(cache=True)
def step_time_ns(kind, ip, fp, prefill, decode, attended, kv_tokens):  # noqa: ANN001, ANN201
    """Duration of one step in integer ns; 0 for a step that scheduled nothing.

    ``ip``: int params (b0, b1, b2) in ns; ``fp``: the roofline floats of
    ``RooflineLatency.floats``. ``attended``: (query, key) pairs of the step;
    ``kv_tokens``: KV tokens read or written. Shared by the kernel and the
    reference engine.
    """
    if prefill + decode == 0:
        return 0
    if kind == LINEAR:
        return ip[0] + ip[1] * prefill + ip[2] * decode
    flops = fp[0] * (prefill + decode) + fp[1] * attended
    nbytes = fp[2] + fp[3] * kv_tokens
    t = max(flops / fp[4], nbytes / fp[5])
    return ip[0] + int(math.ceil(t * 1e9))
