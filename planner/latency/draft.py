"""The drafter's time in a step of EAGLE, EAGLE-3 or MTP speculative decoding.

What vLLM 0.33 runs (``vllm/v1/spec_decode/eagle.py``, ``EagleProposer.propose``,
which serves ``eagle``, ``eagle3`` and ``mtp``): after the target model's
forward pass, the draft model runs once over every token the target ran in
the step (it reads the target's hidden states), then k - 1 more times over
one token per request in the batch, one pass per further draft position.

The planner's price (roofline, on the target's GPU and tensor parallelism):
the draft model is one decoder layer of the target's dimensions plus an LM
head over the target's vocabulary. EAGLE-3's head is one decoder layer with
its own LM head (Li et al., "EAGLE-3", 2025; its released heads use a draft
vocabulary no larger than the target's, so the LM head here is an upper
bound); DeepSeek-V3's MTP module is one transformer block sharing the
target's head (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024). A pass
over T tokens costs max(FLOPs / FLOP/s, bytes / bytes/s) with FLOPs = 2 x
the layer's active parameters and the head's x T + one layer's attention
FLOPs per (query, key) pair, and bytes = the layer's and the head's weights
+ one layer's KV bytes per token of KV touched; the GPU's effective rates
are the target's (``RooflineLatency.floats``: MFU, MBU). The k - 1 later
passes attend nothing new beyond the KV they read. Not measured against a
real EAGLE run (none is in the repository).
"""

from __future__ import annotations

import math

from numba import njit

from planner.latency.step_time import ROOFLINE_FLOATS

# The drafter's floats in a config's float row (``config.NFLOAT``), after the
# target's roofline floats: FLOPs per token, FLOPs per attended pair, weight
# bytes read per pass, KV bytes per token touched (all one GPU's).
DRAFT_FLOPS, DRAFT_PAIR, DRAFT_BYTES, DRAFT_KV = (ROOFLINE_FLOATS + i for i in range(4))
DRAFT_FLOATS = 4


def draft_floats(name: str, tp: int, quantization: str | None, kv_cache_dtype: str) -> tuple:
    """(FLOPs per token, FLOPs per attended pair, weight bytes per pass, KV
    bytes per token) of one drafter pass on one GPU at tensor parallelism
    ``tp`` (module docstring): one decoder layer's active parameters (the
    model's active parameters less its embedding and LM head, over its
    layers) plus the LM head (vocab_size x hidden_size).

    Raises:
        ValueError: for a model the catalog does not know (``hardware.model``).
    """
    from planner.models.hardware import model

    m = model(name, quantization, kv_cache_dtype)
    head = float(m.vocab_size) * m.hidden_size
    rest = m.params - m.linear_params if m.linear_params else 2.0 * head
    layer_active = max(m.active_params() - rest, 0.0) / m.num_layers
    layer_bytes = max(m.weight_bytes(tp) - rest * m.dtype_bytes / tp, 0.0) / m.num_layers
    return (
        2.0 * (layer_active + head) / tp,
        4.0 * m.num_heads / tp * m.head_dim,
        layer_bytes + head * m.dtype_bytes / tp,
        float(m.kv_bytes_per_token_layer(tp)),
    )


@njit(cache=True)
def draft_ns(fp, k, tokens, requests, attended, kv_tokens):  # noqa: ANN001, ANN201
    """The drafter's ns in a step that ran ``tokens`` target tokens for
    ``requests`` requests, with ``attended`` (query, key) pairs and
    ``kv_tokens`` KV tokens touched (one layer's worth of each), k draft
    positions; ``fp`` a config's float row (``DRAFT_*`` and the target's
    effective FLOP/s and bytes/s at 4 and 5). 0 for an empty step."""
    if tokens == 0:
        return 0
    flops_s, bytes_s = fp[4], fp[5]
    first = max(
        (fp[DRAFT_FLOPS] * tokens + fp[DRAFT_PAIR] * attended) / flops_s,
        (fp[DRAFT_BYTES] + fp[DRAFT_KV] * kv_tokens) / bytes_s,
    )
    later = max(
        fp[DRAFT_FLOPS] * requests / flops_s, (fp[DRAFT_BYTES] + fp[DRAFT_KV] * kv_tokens) / bytes_s
    )
    return int(math.ceil((first + (k - 1) * later) * 1e9))
