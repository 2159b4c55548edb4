"""Weight precision from ``--quantization`` or a checkpoint's ``quantization_config``,
and KV bytes from ``--kv-cache-dtype``, spelled as vLLM spells them.

Sources (vLLM 0.33.0):
- method names: ``vllm/model_executor/layers/quantization/__init__.py``,
  ``QuantizationMethods``;
- KV dtypes: ``vllm/config/cache.py``, ``CacheDType``;
- a ``--quantization`` that differs from the checkpoint's ``quant_method`` is
  refused at start-up (``ModelConfig._verify_quantization``), except the
  Marlin kernels of the same format (gptq -> gptq_marlin, awq -> awq_marlin).

Weight bits per method: the format's element width plus its scale overhead
(``SCALE_BITS``). Quantization applies to the decoder's linear layers; the
embedding table and lm_head stay in the model dtype (vLLM's default for all
methods modelled here: none quantizes ``VocabParallelEmbedding`` or, unless
``lm_head_quantized``, the lm_head).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# vLLM 0.33.0 QuantizationMethods, in its order.
VLLM_METHODS = (
    "awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4",
    "modelopt_mxfp8", "modelopt_mixed", "auto_gptq", "gptq", "gptq_marlin", "awq_marlin",
    "humming", "compressed-tensors", "experts_int8", "quark", "moe_wna16", "torchao", "inc",
    "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8", "online", "fp8_per_tensor", "fp8_per_block",
    "fp8_per_channel", "int8_per_channel_weight_only", "nvfp4_per_token", "mxfp8",
)  # fmt: skip

# Methods whose element width is fixed by the format (bits per weight element).
FIXED_BITS: dict[str, int] = {
    "fp8": 8, "fbgemm_fp8": 8, "modelopt_mxfp8": 8, "mxfp8": 8, "fp8_per_tensor": 8,
    "fp8_per_block": 8, "fp8_per_channel": 8, "int8_per_channel_weight_only": 8,
    "deepseek_v4_fp8": 8, "experts_int8": 8, "awq": 4, "auto_awq": 4, "awq_marlin": 4,
    "modelopt_fp4": 4, "nvfp4_per_token": 4, "mxfp4": 4, "gpt_oss_mxfp4": 4,
}  # fmt: skip

# Scale overhead, bits per weight: NVFP4 has an fp8 scale per 16 elements
# (8/16), MXFP4/MXFP8 an e8m0 scale per 32 (8/32); fp8 per-tensor/channel
# scales are negligible. Group-wise int formats (awq, gptq) add an fp16 scale
# and a zero point of ``bits`` per group: (16 + bits) / group_size.
SCALE_BITS: dict[str, float] = {
    "modelopt_fp4": 0.5, "nvfp4_per_token": 0.5, "mxfp4": 0.25, "gpt_oss_mxfp4": 0.25,
    "modelopt_mxfp8": 0.25, "mxfp8": 0.25,
}  # fmt: skip

# Methods whose width lives in the checkpoint's quantization_config.
FROM_CHECKPOINT = tuple(m for m in VLLM_METHODS if m not in FIXED_BITS)

# Methods vLLM 0.33 applies to an unquantized checkpoint (online quantization):
# their configs need no file (``get_config_filenames`` returns []) and build
# without the checkpoint's quantization_config, or they are online shorthands
# (``_ONLINE_SHORTHANDS``, ``vllm/config/quantization.py``). Every other method
# reads the checkpoint's config; without one, ``get_quant_config``
# (``vllm/model_executor/model_loader/weight_utils.py``) raises "Cannot find the
# config file".
ONLINE_METHODS = frozenset({
    "fp8", "fbgemm_fp8", "experts_int8", "fp_quant", "online", "fp8_per_tensor",
    "fp8_per_block", "fp8_per_channel", "mxfp8", "mxfp4", "int8_per_channel_weight_only",
    "nvfp4_per_token",
})  # fmt: skip

# Same format, different kernel: vLLM accepts these as overrides.
COMPATIBLE = {"gptq_marlin": "gptq", "awq_marlin": "awq", "auto_gptq": "gptq", "auto_awq": "awq"}

# KV cache dtypes the planner sizes, with bytes per element (0: the model dtype).
KV_CACHE_DTYPES: dict[str, int] = {
    "auto": 0, "float16": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}  # fmt: skip


class QuantizationError(ValueError):
    """An unknown or unsizable quantization / KV dtype; one line."""


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per KV element for ``--kv-cache-dtype`` (``auto``: the model dtype).

    Raises QuantizationError naming the alternatives for any other value
    (vLLM's packed formats such as nvfp4 or turboquant_* are not sized here).
    """
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise QuantizationError(
            f"--kv-cache-dtype: {kv_cache_dtype!r} is not one the planner sizes "
            f"(choose from {', '.join(KV_CACHE_DTYPES)})"
        )
    return KV_CACHE_DTYPES[kv_cache_dtype] or model_dtype_bytes


def checkpoint_kv_cache_dtype(qcfg: Mapping[str, Any] | None) -> str:
    """What ``--kv-cache-dtype auto`` becomes for this checkpoint
    (``vllm/utils/torch_utils.py``, ``resolve_kv_cache_dtype_string`` and
    ``get_kv_cache_quant_algo_string``): a ModelOpt checkpoint's
    ``kv_cache_quant_algo`` / ``kv_cache_scheme`` FP8 gives ``fp8_e4m3``, NVFP4
    ``nvfp4`` (not sized here); anything else stays ``auto`` (the model dtype)."""
    q = dict(qcfg or {})
    if not str(q.get("quant_method", "")).startswith("modelopt"):
        return "auto"
    inner = q.get("quantization") if isinstance(q.get("quantization"), dict) else q
    algo = (
        inner.get("kv_cache_scheme") or q.get("kv_cache_scheme")
        or inner.get("kv_cache_quant_algo") or q.get("kv_cache_quant_algo")
    )  # fmt: skip
    if isinstance(algo, dict):
        if (
            algo.get("dynamic") is False
            and algo.get("num_bits") == 8
            and algo.get("type") == "float"
        ):
            algo = "fp8"
        elif algo.get("num_bits") == 4 and algo.get("type") == "float":
            algo = "nvfp4"
        else:
            return "auto"
    if isinstance(algo, str):
        return {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}.get(algo.lower(), "auto")
    return "auto"


def _method_of(qcfg: Mapping[str, Any]) -> str:
    method = qcfg.get("quant_method")
    if not isinstance(method, str):
        raise QuantizationError("config.json: quantization_config has no quant_method")
    return method.lower()


def resolve_method(flag: str | None, qcfg: Mapping[str, Any] | None) -> str | None:
    """The quantization method in effect: the checkpoint's, or ``--quantization``
    for an unquantized checkpoint (vLLM's online quantization, ``ONLINE_METHODS``
    only). A flag that names a different format than the checkpoint, or a
    method that needs a quantized checkpoint on an unquantized one, is refused
    (QuantizationError, one line), as vLLM does.
    """
    if flag is not None and flag not in VLLM_METHODS:
        raise QuantizationError(
            f"--quantization: unknown method {flag!r} "
            f"(vLLM 0.33 methods: {', '.join(VLLM_METHODS)})"
        )
    if qcfg is None:
        if flag is not None and flag not in ONLINE_METHODS:
            raise QuantizationError(
                f"--quantization {flag}: the checkpoint has no quantization_config, and vLLM "
                f"0.33 quantizes online only with {', '.join(sorted(ONLINE_METHODS))} "
                f"('Cannot find the config file for {flag}')"
            )
        return flag
    method = _method_of(qcfg)
    if flag is not None and COMPATIBLE.get(flag, flag) != COMPATIBLE.get(method, method):
        raise QuantizationError(
            f"--quantization {flag}: the checkpoint is quantized with {method} "
            "(quantization_config.quant_method); vLLM refuses a different method"
        )
    return flag or method


def weight_bits(method: str | None, qcfg: Mapping[str, Any] | None, dtype_bytes: int) -> float:
    """Bits per weight of the decoder's linear layers, scales included.

    ``None``: unquantized, ``8 x dtype_bytes``. Fixed-width formats use
    ``FIXED_BITS`` + ``SCALE_BITS``; gptq/awq-style configs read ``bits`` and
    ``group_size``; compressed-tensors reads ``config_groups.*.weights.num_bits``
    (and ``group_size``); bitsandbytes reads ``load_in_4bit`` / ``load_in_8bit``;
    modelopt reads ``quant_algo`` (FP8, NVFP4). Raises QuantizationError naming
    the missing field.
    """
    if method is None:
        return 8.0 * dtype_bytes
    base = COMPATIBLE.get(method, method)
    q = dict(qcfg or {})
    if "quantization" in q and isinstance(q["quantization"], dict):  # modelopt hf_quant_config
        q = {**q, **q["quantization"]}
    if method in FIXED_BITS and base not in ("gptq", "awq"):
        return FIXED_BITS[method] + SCALE_BITS.get(method, 0.0)
    if base in ("gptq", "awq", "moe_wna16", "inc", "humming", "quark", "torchao", "fp_quant"):
        bits = q.get("bits", q.get("w_bit", 4 if base == "awq" else None))
        if not isinstance(bits, int | float):
            raise QuantizationError(
                f"quantization {method}: quantization_config.bits is needed to size the weights"
            )
        group = q.get("group_size", q.get("q_group_size", 128))
        overhead = (16 + bits) / group if isinstance(group, int) and group > 0 else 0.0
        return float(bits) + overhead
    if base == "compressed-tensors":
        groups = q.get("config_groups")
        if not isinstance(groups, dict) or not groups:
            raise QuantizationError(
                "quantization compressed-tensors: quantization_config.config_groups is needed"
            )
        w = next(iter(groups.values())).get("weights") or {}
        bits = w.get("num_bits")
        if not isinstance(bits, int):
            raise QuantizationError(
                "quantization compressed-tensors: config_groups.*.weights.num_bits is needed"
            )
        group = w.get("group_size")
        return bits + (16 / group if isinstance(group, int) and group > 0 else 0.0)
    if base == "bitsandbytes":
        if q.get("load_in_4bit"):
            return 4.0 + 0.5  # one fp32 absmax per 64 weights
        if q.get("load_in_8bit"):
            return 8.0
        raise QuantizationError(
            "quantization bitsandbytes: quantization_config.load_in_4bit or load_in_8bit is needed"
        )
    if base in ("modelopt", "modelopt_mixed"):
        algo = str(q.get("quant_algo", "")).upper()
        if "FP4" in algo:
            return 4.5
        if "FP8" in algo:
            return 8.0
        raise QuantizationError(f"quantization {method}: quantization_config.quant_algo is needed")
    raise QuantizationError(
        f"--quantization {method}: online method; give a checkpoint whose "
        "quantization_config names its format"
    )
