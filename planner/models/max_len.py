"""A model's default max_model_len, as vLLM 0.33 derives it from config.json.

vLLM's rule (``_get_and_verify_max_len`` in ``vllm/config/model.py`` and
``ModelArchConfigConvertorBase.derive_max_model_len_and_key`` in
``vllm/transformers_utils/model_arch_config_convertor.py``):

1. The smallest of the length keys the (text) config has (``LENGTH_KEYS``);
   ``model_max_length``, when present, wins outright (Command-R / Cohere).
2. A tokenizer's ``model_max_length`` (tokenizer_config.json), when known,
   lowers it.
3. No key at all: 2,048, with a warning.
4. RoPE scaling multiplies it by ``factor``, except for rope types whose
   ``max_position_embeddings`` is already scaled (``PRESCALED_ROPE_TYPES``)
   and for gemma3 configs (already scaled, vLLM's own note).
5. LongRoPE: ``original_max_position_embeddings`` instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
PRESCALED_ROPE_TYPES = frozenset(
    {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}
)
NO_KEY_DEFAULT = 2048  # _get_and_verify_max_len's fallback when no key is found


def _rope_parameters(cfg: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The config's RoPE parameter dicts (``iter_rope_parameters``): transformers
    v5's ``rope_parameters`` (possibly one per layer type) or the older
    ``rope_scaling`` (``type`` read as ``rope_type``, as ``patch_rope_parameters``
    does)."""
    rp = cfg.get("rope_parameters")
    if rp is None:
        rp = cfg.get("rope_scaling")
    if not isinstance(rp, Mapping) or not rp:
        return
    nested = all(isinstance(v, Mapping) for v in rp.values())
    for p in rp.values() if nested else (rp,):
        if isinstance(p, Mapping) and p:
            yield {**p, "rope_type": p.get("rope_type", p.get("type", "default"))}


def derived_max_model_len(
    cfg: Mapping[str, Any], tokenizer_max_length: int | None = None
) -> tuple[int, str]:
    """(max_model_len, the key it comes from) for a parsed (text) config.json
    dict, as vLLM 0.33 defaults ``--max-model-len`` (module docstring).

    Returns an int >= 1 and a short text naming the key and any RoPE factor,
    e.g. ``(131072, "max_position_embeddings")``. Raises nothing: a config
    without any key gets vLLM's 2,048 and says so.
    """
    length, key = math.inf, ""
    for k in LENGTH_KEYS:
        v = cfg.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and v < length:
            length, key = v, k
    if isinstance(cfg.get("model_max_length"), int | float) and cfg["model_max_length"]:
        length, key = cfg["model_max_length"], "model_max_length"
    if tokenizer_max_length is not None and tokenizer_max_length < length:
        length, key = tokenizer_max_length, "tokenizer_config.json model_max_length"
    if length == math.inf:
        return NO_KEY_DEFAULT, f"no length key in config.json: vLLM assumes {NO_KEY_DEFAULT:,}"
    params = list(_rope_parameters(cfg))
    if params and "gemma3" not in str(cfg.get("model_type", "")):
        factor = 1.0
        for p in params:
            if p["rope_type"] not in PRESCALED_ROPE_TYPES:
                factor = p.get("factor", factor)
        factor = 1.0 if factor is None else float(factor)
        if factor != 1.0:
            length, key = length * factor, f"{key} x RoPE factor {factor:g}"
    if any(p["rope_type"] == "longrope" for p in params):
        orig = cfg.get("original_max_position_embeddings")
        if isinstance(orig, int) and not isinstance(orig, bool):
            length, key = orig, "original_max_position_embeddings (LongRoPE)"
    return max(1, int(length)), key


def max_model_len_limit(cfg: Mapping[str, Any], tokenizer_max_length: int | None = None) -> int:
    """The largest --max-model-len vLLM 0.33 starts with for this config
    (``_get_and_verify_max_len``): the derived length before LongRoPE's
    default (steps 1-4), or a larger ``model_max_length`` in config.json;
    above it vLLM raises unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``."""
    params = list(_rope_parameters(cfg))
    plain = {**cfg}
    if any(p["rope_type"] == "longrope" for p in params):
        plain.pop("original_max_position_embeddings", None)
    length, _ = derived_max_model_len(plain, tokenizer_max_length)
    own = cfg.get("model_max_length")
    if isinstance(own, int) and not isinstance(own, bool) and own > length:
        length = own
    return length
