"""config.json checked as data before it is sized (issue 35, item 1).

One typed model (pydantic) of the fields ``planner.models.config_json`` reads,
applied to a config.json and to its nested ``text_config``. Fields the planner
does not read pass through untouched (``extra="allow"``); a field it reads
must have the type and range below, else ``check`` raises ``ModelConfigError``
in one line naming the file, the field, the value and what is expected.

The rules follow what vLLM and transformers accept where they say it: layer,
head, expert and dimension counts are integers (transformers'
``PretrainedConfig`` keeps a JSON string as a string, and vLLM's arithmetic on
it fails), intervals and patterns are positive integers (vLLM divides by
``interleave_moe_layer_step``, ``no_rope_layer_interval``,
``full_attention_interval`` and ``sliding_window_pattern``), flags are booleans
and ``quantization_config`` is a mapping (``QuantizationConfig.from_config``
reads it by key). The upper bounds are the planner's: they keep every derived
quantity (bytes per token, parameter counts, per-layer tuples) finite and
small enough to build, far above any published model (the largest catalog
model has 61 layers and a 129,280-token vocabulary).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
)

MAX_LAYERS = 4_096  # layer counts (and per-layer lists): builds tuples of this length
MAX_DIM = 1 << 24  # widths, head sizes, vocabulary: products stay within int64 bytes
MAX_COUNT = 1 << 16  # heads, experts, groups, intervals

Layers = Annotated[StrictInt, Field(gt=0, le=MAX_LAYERS)]
Dim = Annotated[StrictInt, Field(gt=0, le=MAX_DIM)]
Count = Annotated[StrictInt, Field(gt=0, le=MAX_COUNT)]
CountOrZero = Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]
DimOrZero = Annotated[StrictInt, Field(ge=0, le=MAX_DIM)]
LayerIndex = Annotated[StrictInt, Field(ge=0, le=MAX_LAYERS)]
Text = Annotated[str, Field(max_length=256)]
# Context lengths (max_position_embeddings and vLLM's other length keys): the
# planner's token counts are int32 (planner.bounds), as is any max_model_len.
Length = Annotated[StrictInt, Field(gt=0, le=(1 << 31) - 1)]


# A RoPE scaling factor multiplies the context length (planner.models.max_len):
# finite and positive (transformers' rope validation refuses factor < 1 for most
# types; the planner refuses only what no type can mean), at most 1e6.
Factor = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]
# Weight bits of a quantized checkpoint (GPTQ 2/3/4/8, AWQ 4, compressed-tensors
# 4/8, ...): an integer 1..16.
Bits = Annotated[StrictInt, Field(ge=1, le=16)]


def _group_size(v: int) -> int:
    """A quantization group: -1 (one group per output channel, GPTQ's
    convention) or a positive number of weights."""
    if v == 0 or v < -1:
        raise ValueError("-1 (per channel) or a positive integer")
    return v


GroupSize = Annotated[StrictInt, Field(le=MAX_DIM), AfterValidator(_group_size)]


class RopeFields(BaseModel):
    """One RoPE parameter set (``rope_scaling``, or one entry of
    ``rope_parameters``), the keys ``planner.models.max_len`` reads."""

    model_config = ConfigDict(extra="allow", strict=True)

    rope_type: Text | None = None
    type: Text | None = None
    factor: Factor | None = None
    original_max_position_embeddings: Annotated[StrictInt, Field(gt=0, le=(1 << 31) - 1)] | None = (
        None
    )


class WeightScheme(BaseModel):
    """compressed-tensors' ``config_groups.*.weights``."""

    model_config = ConfigDict(extra="allow", strict=True)

    num_bits: Bits | None = None
    group_size: GroupSize | None = None


class ConfigGroup(BaseModel):
    """One compressed-tensors config group (a mapping with ``weights``)."""

    model_config = ConfigDict(extra="allow", strict=True)

    weights: WeightScheme | None = None


class QuantFields(BaseModel):
    """The keys of ``quantization_config`` that ``planner.models.quantization``
    reads (GPTQ/AWQ bits and groups, compressed-tensors groups, bitsandbytes
    flags, modelopt's algorithm and its nested ``quantization``)."""

    model_config = ConfigDict(extra="allow", strict=True)

    quant_method: Text | None = None
    bits: Bits | None = None
    w_bit: Bits | None = None
    group_size: GroupSize | None = None
    q_group_size: GroupSize | None = None
    load_in_4bit: StrictBool | None = None
    load_in_8bit: StrictBool | None = None
    quant_algo: Text | None = None
    config_groups: dict[str, ConfigGroup] | None = None
    quantization: QuantFields | None = None


class ModelConfigError(ValueError):
    """A config.json the planner cannot size exactly; one line naming the field
    (raised here and by ``planner.models.config_json``, which re-exports it)."""


class ConfigFields(BaseModel):
    """The fields of a config.json (or of its ``text_config``) the planner reads."""

    model_config = ConfigDict(extra="allow", strict=True)

    model_type: Text | None = None
    num_hidden_layers: Layers | None = None
    hidden_size: Dim | None = None
    num_attention_heads: Count | None = None
    num_key_value_heads: Count | None = None
    head_dim: Dim | None = None
    vocab_size: Dim | None = None
    intermediate_size: Dim | None = None
    intermediate_size_mlp: Dim | None = None
    moe_intermediate_size: Dim | None = None
    shared_expert_intermediate_size: DimOrZero | None = None
    shared_intermediate_size: DimOrZero | None = None
    moe_shared_expert_intermediate_size: DimOrZero | None = None
    moe_latent_size: Dim | None = None
    num_local_experts: Count | None = None
    num_experts: Count | None = None
    n_routed_experts: Count | None = None
    n_shared_experts: CountOrZero | None = None
    num_experts_per_tok: Count | None = None
    experts_per_token: Count | None = None
    first_k_dense_replace: LayerIndex | None = None
    interleave_moe_layer_step: Count | None = None
    kv_lora_rank: Dim | None = None
    q_lora_rank: Dim | None = None
    qk_nope_head_dim: Dim | None = None
    qk_rope_head_dim: Dim | None = None
    v_head_dim: Dim | None = None
    sliding_window: Dim | None = None
    sliding_window_pattern: Count | None = None
    use_sliding_window: StrictBool | None = None
    max_window_layers: LayerIndex | None = None
    attention_chunk_size: Dim | None = None
    no_rope_layer_interval: Count | None = None
    no_rope_layers: (
        Annotated[list[Annotated[StrictInt, Field(ge=0, le=1)]], Field(max_length=MAX_LAYERS)]
        | None
    ) = None
    full_attention_interval: Count | None = None
    layer_types: Annotated[list[Text], Field(max_length=MAX_LAYERS)] | None = None
    layers_block_type: Annotated[list[Text], Field(max_length=MAX_LAYERS)] | None = None
    hybrid_override_pattern: Annotated[str, Field(max_length=MAX_LAYERS)] | None = None
    attn_output_gate: StrictBool | None = None
    tie_word_embeddings: StrictBool | None = None
    linear_conv_kernel_dim: Count | None = None
    linear_key_head_dim: Dim | None = None
    linear_value_head_dim: Dim | None = None
    linear_num_key_heads: Count | None = None
    linear_num_value_heads: Count | None = None
    mamba_head_dim: Dim | None = None
    mamba_num_heads: Count | None = None
    mamba_expand: Count | None = None
    n_groups: Count | None = None
    ssm_state_size: Dim | None = None
    conv_kernel: Count | None = None
    mamba_ssm_dtype: Text | None = None
    mamba_ssm_cache_dtype: Text | None = None
    max_position_embeddings: Length | None = None
    n_positions: Length | None = None
    max_seq_len: Length | None = None
    seq_length: Length | None = None
    model_max_length: Length | None = None
    max_target_positions: Length | None = None
    max_sequence_length: Length | None = None
    max_seq_length: Length | None = None
    seq_len: Length | None = None
    original_max_position_embeddings: Length | None = None
    rope_scaling: dict[str, Any] | None = None
    rope_parameters: dict[str, Any] | None = None
    torch_dtype: Text | None = None
    dtype: Text | None = None
    quantization_config: dict[str, Any] | None = None
    text_config: dict[str, Any] | None = None


def _expected(error: Mapping[str, Any]) -> str:
    """pydantic's reason for one field, shortened to what the field needs."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if "gt" in ctx or "ge" in ctx or "le" in ctx:
        lo = f"> {ctx['gt']}" if "gt" in ctx else f">= {ctx['ge']}" if "ge" in ctx else ""
        hi = f"<= {ctx['le']:,}" if "le" in ctx else ""
        return "a number " + " and ".join(p for p in (lo, hi) if p)
    if "max_length" in ctx:
        return f"at most {ctx['max_length']:,} items or characters"
    if kind == "value_error":  # an AfterValidator's own words
        return str(ctx.get("error", error["msg"]))
    return {
        "int_type": "an integer",
        "float_type": "a number",
        "finite_number": "a finite number",
        "model_type": "a mapping (a JSON object)",
        "bool_type": "true or false",
        "string_type": "a string",
        "dict_type": "a mapping (a JSON object)",
        "list_type": "a list",
    }.get(kind, str(error["msg"]).lower())


def check(cfg: object, where: str) -> None:
    """Raise ``ModelConfigError`` (one line) unless ``cfg`` is a JSON object whose
    read fields, and those of a nested ``text_config``, have ``ConfigFields``'s
    types and ranges. ``where`` names the file in the message."""
    if not isinstance(cfg, Mapping):
        raise ModelConfigError(f"{where}: expected a JSON object, got {type(cfg).__name__}")
    for part, fields in (("", cfg), ("text_config.", cfg.get("text_config"))):
        if part and fields is None:
            continue
        _validate(ConfigFields, dict(fields), where, part)
        heads, kv = fields.get("num_attention_heads"), fields.get("num_key_value_heads")
        if heads is not None and kv is not None and heads % kv != 0:
            raise ModelConfigError(
                f"{where}: {part}num_attention_heads {heads} is not a multiple of "
                f"{part}num_key_value_heads {kv}; vLLM's attention layer requires it "
                "(vllm/model_executor/layers/attention/attention.py, Attention.__init__)"
            )
        for key in ("rope_scaling", "rope_parameters"):
            rope = fields.get(key)
            if isinstance(rope, Mapping) and rope:
                nested = all(isinstance(v, Mapping) for v in rope.values())
                for name, one in rope.items() if nested else ((None, rope),):
                    inner = f"{part}{key}." + (f"{name}." if name is not None else "")
                    _validate(RopeFields, dict(one), where, inner)
        if isinstance(fields.get("quantization_config"), Mapping):
            _validate(QuantFields, dict(fields["quantization_config"]), where,
                      f"{part}quantization_config.")  # fmt: skip


def _validate(model: type[BaseModel], data: dict, where: str, prefix: str) -> None:
    """``model.model_validate(data)``, its first error as one ModelConfigError
    line naming ``prefix`` + the field's path."""
    try:
        model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = prefix + ".".join(str(x) for x in err["loc"])
        value = repr(err.get("input"))
        value = value if len(value) <= 40 else value[:37] + "..."
        raise ModelConfigError(f"{where}: {field} is {value}; expected {_expected(err)}") from None
