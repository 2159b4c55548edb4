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

from dataclasses import dataclass

# Seed coefficients: llama-3.1-8b on H100 (BLIS defaults, shared/docs/semantics.md).
SEED_ALPHA_US: tuple[float, float, float] = (232.46, 1.75, 3357.44)
SEED_BETA_US: tuple[float, float, float] = (5752.71, 17.25, 6.00)


@dataclass(frozen=True)
class LinearLatency:
    """BLIS alpha/beta coefficients in microseconds (see module docstring).

    Raises:
        ValueError: if a coefficient is negative or not finite, or beta0 + beta2 is 0
            (a decode step that costs no time would let the clock stand still).
    """

    alpha: tuple[float, float, float] = SEED_ALPHA_US
    beta: tuple[float, float, float] = SEED_BETA_US

    def __post_init__(self) -> None:
        for name, coeffs in (("alpha", self.alpha), ("beta", self.beta)):
            if len(coeffs) != 3:
                raise ValueError(f"--{name}-coeffs needs 3 values, got {len(coeffs)}")
            for x in coeffs:
                if not (x >= 0 and x < float("inf")):
                    raise ValueError(f"--{name}-coeffs must be finite and >= 0, got {x}")
        if self.beta[0] + self.beta[2] <= 0 or self.beta[0] + self.beta[1] <= 0:
            raise ValueError("--beta-coeffs: a step must take time (beta0 + beta1/beta2 > 0)")

    def ns(self) -> tuple[int, int, int, int, int, int]:
        """(b0, b1, b2, a0, a1, a2) in integer nanoseconds."""
        return tuple(int(round(x * 1000.0)) for x in (*self.beta, *self.alpha))  # type: ignore[return-value]
