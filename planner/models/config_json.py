"""A model's shape from its Hugging Face ``config.json``: the fields vLLM 0.33
reads to size the KV cache per layer, and a parameter count for the weights.

KV fields (``vllm/config/model.py``: ``get_head_size``, ``get_num_kv_heads``,
``get_sliding_window``; per-layer window from each model file, e.g.
``vllm/model_executor/models/llama.py``, ``gemma3.py``, ``gpt_oss.py``):

- ``num_hidden_layers``; ``num_attention_heads``; ``num_key_value_heads``
  (absent: equal to the attention heads, multi-head attention);
- head size: MLA (``kv_lora_rank`` set) ``kv_lora_rank + qk_rope_head_dim``
  with one latent "head" shared by all TP ranks; else ``head_dim`` if set,
  else ``hidden_size // num_attention_heads``;
- per-layer attention: ``layer_types`` (``full_attention``,
  ``sliding_attention``, ``chunked_attention``); without it, the defaults
  transformers' config classes fill in (gemma2: every other layer sliding,
  gemma3 / cohere2: ``sliding_window_pattern``, qwen2/qwen3: layers from
  ``max_window_layers`` on when ``use_sliding_window``, gpt_oss: even layers,
  llama4: chunked local attention except every ``no_rope_layer_interval``-th
  (NoPE) layer), qwen3_next / qwen3_5 (Gated DeltaNet linear attention):
  every ``full_attention_interval``-th layer (default 4) full, the others
  ``linear_attention``. For llama, mistral, mixtral, phi3 and starcoder2, whose config
  classes leave ``layer_types`` unset, a ``sliding_window`` windows every layer
  (``EngineArgs.create_engine_config`` sets ``CacheConfig.sliding_window``, the
  fallback of every ``Attention`` layer). Another model_type with a window and
  no ``layer_types`` is refused.
- linear attention (``linear_attention``, Gated DeltaNet, model_types in
  ``GDN_MODEL_TYPES``): one recurrent state per request and layer, sized as
  ``vllm/model_executor/models/qwen3_5.py`` / ``qwen3_next.py``
  (``get_mamba_state_shape_from_config``, ``get_mamba_state_dtype_from_config``)
  and ``vllm/model_executor/layers/mamba/mamba_utils.py``
  (``gated_delta_net_state_shape``): conv state (``linear_conv_kernel_dim`` - 1)
  x (2 x ``linear_num_key_heads`` x ``linear_key_head_dim`` +
  ``linear_num_value_heads`` x ``linear_value_head_dim``) / tp in the model
  dtype (``mamba_cache_dtype`` auto); SSM state ``linear_num_value_heads`` / tp
  x ``linear_value_head_dim`` x ``linear_key_head_dim`` in ``mamba_ssm_dtype``
  for qwen3_5 (``Qwen3_5ForConditionalGenerationConfig.verify_and_update_config``
  in ``vllm/model_executor/models/config.py`` copies it into
  ``mamba_ssm_cache_dtype``), else the model dtype.
- Mamba2 layers (model_types in ``MAMBA2_MODEL_TYPES``), kind ``linear`` with
  ``state_kind`` "mamba2": nemotron_h's ``hybrid_override_pattern`` ("M" Mamba2,
  "*" attention, "-" MLP only, "E" MoE only; the last two hold no KV, kind
  ``mlp``), granitemoehybrid's ``layer_types`` ("mamba" / "attention", or the
  new names "linear_attention" / "full_attention"). One state per request and
  layer, sized as ``MambaStateShapeCalculator.mamba2_state_shape``
  (``vllm/model_executor/layers/mamba/mamba_utils.py``) from each model file's
  ``get_mamba_state_shape_from_config`` (``nemotron_h.py``,
  ``granitemoehybrid.py``): groups G raised to tp when tp does not divide them
  (``extra_groups_for_head_shards``); conv state (kernel - 1) x (I + 2 G N) / tp
  in the model dtype; SSM state heads / tp x head_dim x N in the SSM dtype,
  where I = mamba_num_heads x mamba_head_dim (nemotron_h) or mamba_expand x
  hidden_size (granitemoehybrid) and N the state size. SSM dtype
  (``MambaStateDtypeCalculator.mamba2_state_dtype``): nemotron_h the config's
  ``mamba_ssm_cache_dtype``, float32 when absent
  (``NemotronHForCausalLMConfig`` in ``vllm/model_executor/models/config.py``);
  granitemoehybrid the model dtype (``mamba_ssm_cache_dtype`` auto).
  Attention head size: nemotron_h ``head_dim`` or hidden / heads;
  granitemoehybrid always hidden / heads (``granitemoehybrid.py``).
  Mamba layers of other hybrids (jamba's Mamba1, bamba, falcon_h1, zamba2,
  plamo2, lfm2, minimax_text_01, ...) and any other layer kind are refused,
  naming the field.
- ``torch_dtype`` (or ``dtype``): float32 checkpoints run in bfloat16
  (``_resolve_auto_dtype``), 2 bytes; none named reads as float32, as vLLM's
  ``_get_config_dtype`` does without safetensors metadata, with a note
  (``NO_DTYPE_NOTE``); ``quantization_config`` as in
  ``planner.models.quantization``.

Parameter count (weights), from the same file; norms and biases are left out
(< 0.1% of any catalog model):

    embed = vocab_size x hidden_size, lm_head the same unless tie_word_embeddings
    attention per layer = hidden x (q_heads + 2 kv_heads) x head_dim + q_heads x head_dim x hidden
    MLA per layer = hidden x q_lora_rank + q_lora_rank x heads x (qk_nope + qk_rope)
                    (or hidden x heads x (qk_nope + qk_rope) without q_lora_rank)
                    + hidden x (kv_lora_rank + qk_rope)
                    + kv_lora_rank x heads x (qk_nope + v_head_dim)
                    + heads x v_head_dim x hidden
    dense MLP per layer = 3 x hidden x intermediate_size (gated), 2 x (starcoder2)
    MoE MLP per layer = (experts + shared experts) x 3 x hidden x moe_intermediate_size
                        + hidden x experts (router); Llama 4: one shared expert, MoE
                        every interleave_moe_layer_step-th layer, 3 x hidden x
                        intermediate_size_mlp in the others

    Gated DeltaNet (linear attention) per layer, replacing the attention term
    (vLLM's ``GatedDeltaNetAttention``: in_proj_qkvz, in_proj_ba, conv1d, out_proj)
                  = hidden x (2 key_dim + 2 value_dim) + hidden x 2 value_heads
                    + conv_dim x linear_conv_kernel_dim + value_dim x hidden
    (key_dim = linear_num_key_heads x linear_key_head_dim, value_dim likewise,
    conv_dim = 2 key_dim + value_dim); full attention with ``attn_output_gate``
    (qwen3_next, qwen3_5) has a q_proj twice as wide (queries and gate).

    Mamba2 per layer (vLLM's ``MambaMixer2``: in_proj, conv1d, out_proj; A, D,
    dt_bias left out) = hidden x (2 I + 2 G N + heads) + (I + 2 G N) x kernel
                        + I x hidden
    nemotron_h: "-" layers 2 x hidden x intermediate_size (relu2, not gated);
    "E" layers n_routed_experts x 2 x hidden x moe_intermediate_size + hidden x
    n_routed_experts + n_shared_experts x 2 x hidden x
    moe_shared_expert_intermediate_size. granitemoehybrid: every layer has
    num_local_experts x 3 x hidden x intermediate_size + hidden x experts (router)
    and a shared MLP 3 x hidden x shared_intermediate_size.

The linear layers (attention and MLP) are what quantization shrinks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.inputs import MAX_SMALL_FILE_BYTES, check_readable
from planner.models import config_fields, max_len, quantization
from planner.models.config_fields import ModelConfigError

FULL, SLIDING, CHUNKED, LINEAR = "full", "sliding", "chunked", "linear"
MLP = "mlp"  # a layer without attention or state (nemotron_h "-" / "E"): no KV
KINDS = (FULL, SLIDING, CHUNKED, LINEAR, MLP)
LAYER_TYPE_NAMES = {
    "full_attention": FULL,
    "sliding_attention": SLIDING,
    "chunked_attention": CHUNKED,
    "linear_attention": LINEAR,
}
# model_types whose linear_attention layers are Gated DeltaNet, as vLLM 0.33's
# qwen3_next.py and qwen3_5.py build them (``GatedDeltaNetAttention``)
GDN_MODEL_TYPES = frozenset(
    {"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}
)
# of these, the ones whose config's mamba_ssm_dtype sets the SSM state dtype
# (vllm/model_executor/models/config.py, Qwen3_5ForConditionalGenerationConfig)
SSM_DTYPE_FROM_CONFIG = frozenset({"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
# hybrids with Mamba / Mamba2 / other state layers the planner does not size,
# and the config field that describes those layers
MAMBA_HYBRIDS = {
    "jamba": "attn_layer_period",
    "bamba": "attn_layer_indices",
    "falcon_h1": "mamba_d_ssm",
    "zamba2": "layers_block_type",
    "plamo2": "mamba_step",
    "mamba": "state_size",
    "mamba2": "state_size",
    "lfm2": "layer_types",
    "minimax_text_01": "attn_type_list",
}
# hybrids whose Mamba2 layers the planner sizes (``MambaMixer2``)
MAMBA2_MODEL_TYPES = frozenset({"nemotron_h", "granitemoehybrid"})
# nemotron_h's pattern letters (vLLM's nemotron_h.py ALL_DECODER_LAYER_TYPES)
NEMOTRON_H_PATTERN = {"M": LINEAR, "*": FULL, "-": MLP, "E": MLP}
NEMOTRON_H_BLOCK_TYPES = {
    "mamba": LINEAR, "linear_attention": LINEAR, "attention": FULL, "full_attention": FULL,
    "mlp": MLP, "moe": MLP,
}  # fmt: skip
GRANITE_LAYER_TYPES = {
    "mamba": LINEAR, "linear_attention": LINEAR, "attention": FULL, "full_attention": FULL
}  # fmt: skip
STATE_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 2, "float": 2}
# What the planner says when config.json names no dtype (``_config_dtype``).
NO_DTYPE_NOTE = (
    "config.json names no torch_dtype: vLLM then reads the checkpoint's safetensors "
    "dtypes, else float32 (ModelConfig's _get_config_dtype), and its default dtype auto "
    "serves float32 in bfloat16 (_resolve_auto_dtype, vllm/config/model.py): sized at 2 bytes"
)


def _config_dtype(cfg: dict, outer: dict) -> tuple[str, str]:
    """The checkpoint dtype config.json names (``torch_dtype``, or ``dtype`` as
    newer transformers write it; the text config's first, then the outer
    config's) and a note. None named: "float32" with ``NO_DTYPE_NOTE`` (vLLM's
    fallback; both serve in 2 bytes under vLLM's default dtype auto)."""
    for c in (cfg, outer):
        for key in ("torch_dtype", "dtype"):
            if c.get(key) is not None:
                return str(c[key]), ""
    return "float32", NO_DTYPE_NOTE


NON_GATED_MLP = frozenset({"starcoder2", "gpt_bigcode", "gpt2"})
# model_types whose transformers config class leaves layer_types unset, so that a
# bare sliding_window windows every layer in vLLM 0.33: EngineArgs.create_engine_config
# sets CacheConfig.sliding_window when layer_types is None, and each Attention
# layer without a per-layer window falls back to it.
ALL_SLIDING_WITHOUT_LAYER_TYPES = frozenset({"llama", "mistral", "mixtral", "phi3", "starcoder2"})


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only model, as vLLM sizes its KV cache and weights.

    ``layer_types``: one of FULL, SLIDING, CHUNKED, LINEAR (a recurrent state:
    Gated DeltaNet or Mamba2, per ``state_kind``) or MLP (no KV) per layer;
    ``num_layers`` counts them all. ``mla_dim`` > 0:
    MLA, one latent of that many elements per token and layer (no V), the
    same on every TP rank. ``params``: total parameters; ``linear_params``: the
    part quantization applies to. ``weight_bits``: bits per linear weight;
    ``kv_bytes``: bytes per KV element.
    """

    name: str
    num_layers: int  # num_hidden_layers
    hidden_size: int
    num_heads: int  # num_attention_heads (query heads)
    num_kv_heads: int  # num_key_value_heads
    head_dim: int
    params: float  # parameter count
    dtype_bytes: int = 2  # model dtype (bf16)
    layer_types: tuple[str, ...] = ()
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    mla_dim: int = 0
    linear_params: float = 0.0
    weight_bits: float = 16.0
    kv_bytes: int = 2
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    vocab_size: int = 0
    intermediate_size: int = 0  # per token's MLP: dense, or top_k x moe_intermediate_size
    source: str = ""
    note: str = ""
    quantization_config: Mapping[str, Any] | None = None
    # Gated DeltaNet (linear attention) state, for LINEAR layers
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    ssm_state_bytes: int = 0  # bytes per SSM state element (mamba_ssm_cache_dtype)
    # which recurrent state LINEAR layers hold: "gdn" (Gated DeltaNet) or "mamba2"
    state_kind: str = "gdn"
    # Mamba2 state (state_kind "mamba2"): I, heads, head_dim, N, G, conv kernel
    mamba_intermediate: int = 0
    mamba_num_heads: int = 0
    mamba_head_dim: int = 0
    mamba_state_size: int = 0
    mamba_n_groups: int = 0
    mamba_conv_kernel: int = 0
    # vLLM's default --max-model-len for this config (``max_len.derived_max_model_len``)
    # and the key it comes from; 0 when not derived.
    max_model_len: int = 0
    max_model_len_key: str = ""
    # The largest --max-model-len vLLM starts with (``max_len.max_model_len_limit``).
    max_model_len_limit: int = 0
    # Mixture of experts (``_routed_experts``): routed expert parameters over
    # all MoE layers (shared experts are always active and not counted), the
    # routed experts per layer and how many each token runs (top-k). 0: dense.
    routed_expert_params: float = 0.0
    num_experts: int = 0
    experts_per_token: int = 0
    # Multi-token-prediction modules the checkpoint carries (config.json's
    # ``num_nextn_predict_layers``, DeepSeek-V3 style, or ``mtp_num_hidden_layers``,
    # Qwen3-Next style): what vLLM's ``--speculative-config`` method mtp loads.
    mtp_layers: int = 0
    moe_layers: int = 0
    # Local-attention layers (sliding, chunked) whose KV the pool stores as
    # full attention because the hybrid KV cache manager is off
    # (``without_hybrid_kv_cache_manager``); their compute stays local.
    promoted_layers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.layer_types:
            object.__setattr__(self, "layer_types", (FULL,) * self.num_layers)

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        """KV heads on one GPU: ``max(1, kv_heads // tp)`` (``get_num_kv_heads``); MLA: 1."""
        return 1 if self.mla_dim else max(1, self.num_kv_heads // tp)

    def kv_bytes_per_token_layer(self, tp: int = 1) -> int:
        """KV bytes of one token in one layer on one GPU (``AttentionSpec``:
        heads x (head_size + head_size_v) x dtype; MLA: mla_dim x dtype)."""
        if self.mla_dim:
            return self.mla_dim * self.kv_bytes
        return self.kv_heads_per_rank(tp) * 2 * self.head_dim * self.kv_bytes

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """KV bytes of one token over all layers on one GPU."""
        return self.num_layers * self.kv_bytes_per_token_layer(tp)

    def linear_state_bytes(self, tp: int = 1) -> int:
        """Bytes of one request's Gated DeltaNet state in one linear-attention
        layer on one GPU (``MambaSpec.page_size_bytes`` before padding): conv
        state (kernel - 1) x conv_dim / tp x model dtype + SSM state
        value_heads / tp x value_dim x key_dim x SSM dtype; 0 without such layers.
        """
        if LINEAR not in self.layer_types:
            return 0
        if self.state_kind == "mamba2":
            return self._mamba2_state_bytes(tp)
        conv_dim = (
            2 * self.linear_num_key_heads * self.linear_key_head_dim
            + self.linear_num_value_heads * self.linear_value_head_dim
        )
        conv = (self.linear_conv_kernel_dim - 1) * (conv_dim // tp) * self.dtype_bytes
        ssm = (
            (self.linear_num_value_heads // tp)
            * self.linear_value_head_dim
            * self.linear_key_head_dim
            * self.ssm_state_bytes
        )
        return conv + ssm

    def _mamba2_conv_dim(self, tp: int) -> int:
        """I + 2 G N with G raised to tp when tp does not divide it
        (``mamba2_state_shape``, ``extra_groups_for_head_shards``)."""
        g = self.mamba_n_groups
        if g % tp:
            g = tp
        return self.mamba_intermediate + 2 * g * self.mamba_state_size

    def _mamba2_state_bytes(self, tp: int) -> int:
        """One request's Mamba2 state in one layer on one GPU: conv state
        (kernel - 1) x conv_dim / tp x model dtype + SSM state heads / tp x
        head_dim x state size x SSM dtype (module docstring)."""
        conv = (self.mamba_conv_kernel - 1) * (self._mamba2_conv_dim(tp) // tp) * self.dtype_bytes
        ssm = (
            (self.mamba_num_heads // tp)
            * self.mamba_head_dim
            * self.mamba_state_size
            * self.ssm_state_bytes
        )
        return conv + ssm

    def active_params(self) -> float:
        """Parameters one token runs through: all but the routed experts it
        does not pick (top-k of E per MoE layer); every parameter when dense."""
        if not self.num_experts:
            return self.params
        idle = self.routed_expert_params * (1.0 - self.experts_per_token / self.num_experts)
        return self.params - idle

    def expert_weight_bytes(self, tp: int = 1, dp: int = 1) -> float:
        """Bytes of the routed experts' weights on one GPU (at ``weight_bits``,
        an even split across the tp x dp GPUs); 0 for a dense model. ``dp``:
        data-parallel ranks. vLLM splits a MoE layer over all tp x dp GPUs of a
        data-parallel deployment (``FusedMoEParallelConfig.make``, vLLM 0.33
        ``model_executor/layers/fused_moe/config.py``: it flattens tp across
        dp; each GPU holds whole experts under --enable-expert-parallel,
        slices of every expert otherwise: the same bytes)."""
        return self.routed_expert_params * self.weight_bits / 8 / (tp * dp)

    def weight_bytes(self, tp: int = 1, dp: int = 1) -> float:
        """Weight bytes on one GPU (an even split across tp ranks): linear
        layers at ``weight_bits``, the rest (embeddings, lm_head) at the dtype;
        with ``dp`` data-parallel ranks the routed experts' share is split
        over tp x dp GPUs (``expert_weight_bytes``), the rest replicated."""
        linear = self.linear_params or self.params
        rest = self.params - linear
        whole = (linear * self.weight_bits / 8 + rest * self.dtype_bytes) / tp
        return whole - self.expert_weight_bytes(tp) + self.expert_weight_bytes(tp, dp)

    def with_options(
        self, quantization_flag: str | None, kv_cache_dtype: str = "auto"
    ) -> ModelSpec:
        """This model under ``--quantization`` and ``--kv-cache-dtype``
        (``planner.models.quantization``; raises QuantizationError)."""
        method = quantization.resolve_method(quantization_flag, self.quantization_config)
        if kv_cache_dtype == "auto":
            kv_cache_dtype = quantization.checkpoint_kv_cache_dtype(self.quantization_config)
        return replace(
            self,
            quantization=method,
            weight_bits=quantization.weight_bits(
                method, self.quantization_config, self.dtype_bytes
            ),
            kv_cache_dtype=kv_cache_dtype,
            kv_bytes=quantization.kv_dtype_bytes(kv_cache_dtype, self.dtype_bytes),
        )

    def check_tensor_parallel(self, tp: int) -> None:
        """vLLM's rule: the attention heads split evenly over the TP ranks, and
        KV heads split evenly or are replicated (``ModelConfig.verify_with_parallel_config``,
        ``QKVParallelLinear``). Raises ModelConfigError."""
        if self.num_heads % tp:
            raise ModelConfigError(
                f"--tensor-parallel-size {tp} does not divide num_attention_heads "
                f"{self.num_heads} of {self.name} (vLLM requires it)"
            )
        kv = self.num_kv_heads
        if not self.mla_dim and (kv % tp if kv >= tp else tp % kv):
            raise ModelConfigError(
                f"--tensor-parallel-size {tp} neither divides nor is a multiple of "
                f"num_key_value_heads {kv} of {self.name} (vLLM requires one of them)"
            )
        if LINEAR in self.layer_types and self.state_kind == "mamba2":
            self._check_mamba2_tensor_parallel(tp)
        elif LINEAR in self.layer_types:  # mamba_utils.gated_delta_net_state_shape: divide()
            conv_dim = (
                2 * self.linear_num_key_heads * self.linear_key_head_dim
                + self.linear_num_value_heads * self.linear_value_head_dim
            )
            for what, n in (
                ("linear_num_value_heads", self.linear_num_value_heads),
                ("the linear-attention conv dim (2 x linear_num_key_heads x "
                 "linear_key_head_dim + linear_num_value_heads x linear_value_head_dim)",
                 conv_dim),
            ):  # fmt: skip
                if n % tp:
                    raise ModelConfigError(
                        f"--tensor-parallel-size {tp} does not divide {what} {n} of "
                        f"{self.name} (vLLM splits the linear-attention state evenly)"
                    )

    def _check_mamba2_tensor_parallel(self, tp: int) -> None:
        """``MambaMixer2``'s asserts and ``mamba2_state_shape``'s ``divide()``:
        tp divides the Mamba heads, the intermediate size and the conv dim, and
        divides the groups unless there is one group. Raises ModelConfigError."""
        g = self.mamba_n_groups
        if g % tp and g != 1:
            raise ModelConfigError(
                f"--tensor-parallel-size {tp} does not divide the {g} Mamba2 groups of "
                f"{self.name} (vLLM's MambaMixer2 requires it unless there is one group)"
            )
        for what, n in (
            ("the Mamba2 heads", self.mamba_num_heads),
            ("the Mamba2 intermediate size", self.mamba_intermediate),
            ("the Mamba2 conv dim (intermediate + 2 x groups x state size)",
             self._mamba2_conv_dim(tp)),
        ):  # fmt: skip
            if n % tp:
                raise ModelConfigError(
                    f"--tensor-parallel-size {tp} does not divide {what} {n} of "
                    f"{self.name} (vLLM splits the Mamba2 state evenly)"
                )

    def hybrid_kv(self) -> bool:
        """Whether vLLM's hybrid KV cache manager changes this model's pool:
        full-attention layers beside sliding-window or chunked ones, or
        recurrent-state (linear) layers beside attention."""
        kinds = set(self.layer_types) - {MLP}
        return (FULL in kinds and bool(kinds & {SLIDING, CHUNKED})) or (
            LINEAR in kinds and len(kinds) > 1
        )

    def with_drafter(self, method: str) -> ModelSpec:
        """This model with an EAGLE, EAGLE-3 or MTP drafter loaded beside it, as
        vLLM 0.33 sizes the pool for both (``GPUModelRunner.load_model`` loads
        the drafter before the memory profile; its attention layer joins the
        KV cache spec, ``get_kv_cache_spec``):

        - one more full-attention KV layer of the target's shape (a released
          EAGLE/EAGLE-3 head and vLLM's single MTP module have one decoder
          layer; the pool's page grows by 1/num_layers);
        - the drafter's weights: one target decoder layer (the model's linear
          weights over its layers, every expert included) plus its input
          projection (2 x hidden^2 for EAGLE and MTP, which concatenate two
          hidden states; 3 x hidden^2 for EAGLE-3, three), plus for EAGLE-3 its
          own LM head (vocab_size x hidden: vLLM shares the target's embedding
          and, for EAGLE and MTP, its LM head, ``EagleProposer._maybe_share_*``;
          an EAGLE-3 head's draft vocabulary is at most the target's, so this
          is an upper bound). An estimate from the target's dimensions (the
          head's own config.json is not read), not a measurement.

        Raises:
            ModelConfigError: ``method`` is not eagle, eagle3 or mtp.
        """
        if method not in ("eagle", "eagle3", "mtp"):
            raise ModelConfigError(f"no drafter model for speculative method {method!r}")
        h = float(self.hidden_size)
        head = float(self.vocab_size) * h
        linear = self.linear_params or max(self.params - 2.0 * head, 0.0)
        layer = linear / self.num_layers + (3.0 if method == "eagle3" else 2.0) * h * h
        own_head = head if method == "eagle3" else 0.0
        return replace(
            self,
            num_layers=self.num_layers + 1,
            layer_types=(*self.layer_types, FULL),
            params=self.params + layer + own_head,
            linear_params=self.linear_params + layer if self.linear_params else 0.0,
        )

    def without_hybrid_kv_cache_manager(self) -> ModelSpec:
        """This model as vLLM 0.33 stores it with the hybrid KV cache manager
        off (``unify_hybrid_kv_cache_specs`` and ``_promote_local_kv_cache_specs``
        in ``vllm/v1/core/kv_cache_planning.py``): beside full attention, every
        sliding-window and chunked layer allocates blocks for all its tokens,
        as full attention; a model of one attention type is unchanged.

        Raises:
            ModelConfigError: recurrent-state (linear) layers, which vLLM
                cannot unify into one type ("Failed to promote local KV cache
                specs"): such a model does not start without the manager.
        """
        if LINEAR in self.layer_types and len(set(self.layer_types) - {MLP}) > 1:
            raise ModelConfigError(
                f"{self.name}: vLLM 0.33 does not start with --disable-hybrid-kv-cache-manager: "
                "its recurrent-state layers need the hybrid KV cache manager"
            )
        if not self.hybrid_kv():
            return self
        local = (SLIDING, CHUNKED)
        types = tuple(FULL if t in local else t for t in self.layer_types)
        return replace(
            self,
            layer_types=types,
            promoted_layers=tuple(t for t in self.layer_types if t in local),
        )

    def describe(self) -> str:
        """One line: layers by attention type, KV layout, dtypes."""
        kinds = {k: self.layer_types.count(k) for k in KINDS}
        parts = [f"{n} {k}" for k, n in kinds.items() if n]
        kv = (
            f"MLA latent {self.mla_dim}"
            if self.mla_dim
            else f"{self.num_kv_heads} KV heads x {self.head_dim}"
        )
        win = f", window {self.sliding_window:,}" if kinds[SLIDING] else ""
        chunk = f", chunk {self.attention_chunk_size:,}" if kinds[CHUNKED] else ""
        if kinds[LINEAR]:
            what = "Mamba2" if self.state_kind == "mamba2" else "linear-attention"
            chunk += (
                f", {what} state {self.linear_state_bytes():,} B per request and "
                f"layer (SSM {self.ssm_state_bytes} B/element)"
            )
        if self.promoted_layers:
            n_local = len(self.promoted_layers)
            kind = "chunked" if CHUNKED in self.promoted_layers else "sliding-window"
            parts.append(
                f"of them {n_local} {kind} stored as full attention: hybrid KV cache manager off"
            )
        q = self.quantization or "none"
        return (
            f"{self.name}: {self.num_layers} layers ({', '.join(parts)}{win}{chunk}), {kv}; "
            f"{self.params / 1e9:.2f}B params, weights {self.weight_bits:g} bit "
            f"(quantization {q}), KV {self.kv_bytes} B/element ({self.kv_cache_dtype})"
        )


def _need(cfg: Mapping[str, Any], key: str, where: str) -> int:
    v = cfg.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ModelConfigError(f"{where}: {key} is missing or not a positive integer")
    return v


def _layer_types(cfg: Mapping[str, Any], n: int, where: str) -> tuple[str, ...]:
    """Per-layer attention kind (see the module docstring for the rules)."""
    mt = str(cfg.get("model_type", ""))
    window = cfg.get("sliding_window")
    explicit = cfg.get("layer_types")
    if mt in MAMBA2_MODEL_TYPES:
        return _mamba2_layer_types(cfg, n, where)
    if mt in MAMBA_HYBRIDS:
        raise ModelConfigError(
            f"{where}: model_type {mt!r} has Mamba state layers ({MAMBA_HYBRIDS[mt]}), which "
            "the planner does not size; sized: full, sliding-window, chunked, Gated "
            f"DeltaNet linear attention ({', '.join(sorted(GDN_MODEL_TYPES))}) and Mamba2 "
            f"({', '.join(sorted(MAMBA2_MODEL_TYPES))})"
        )
    if explicit is None and mt in GDN_MODEL_TYPES:
        # transformers' Qwen3NextConfig / Qwen3_5TextConfig: full_attention_interval
        # (default 4); every interval-th layer is full attention
        interval = cfg.get("full_attention_interval", 4)
        if not isinstance(interval, int) or interval < 1:
            raise ModelConfigError(f"{where}: full_attention_interval must be a positive integer")
        explicit = [
            "linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)
        ]
    if explicit is not None:
        if not isinstance(explicit, list) or len(explicit) != n:
            raise ModelConfigError(f"{where}: layer_types must list {n} layer types")
        out = []
        for t in explicit:
            if t not in LAYER_TYPE_NAMES:
                raise ModelConfigError(
                    f"{where}: layer_types has {t!r} layers, which the planner does not size; "
                    f"sized kinds: {', '.join(LAYER_TYPE_NAMES)}"
                )
            if t == "linear_attention" and mt not in GDN_MODEL_TYPES:
                known = ", ".join(sorted(GDN_MODEL_TYPES))
                raise ModelConfigError(
                    f"{where}: layer_types has 'linear_attention' layers but model_type {mt!r} "
                    f"is not one whose state the planner sizes ({known})"
                )
            out.append(LAYER_TYPE_NAMES[t])
        return tuple(out)
    if mt in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        if not cfg.get("use_sliding_window"):
            return (FULL,) * n
        first = int(cfg.get("max_window_layers", 28))
        return tuple(SLIDING if i >= first else FULL for i in range(n))
    if mt in ("llama4", "llama4_text") and cfg.get("attention_chunk_size"):
        # transformers' Llama4TextConfig: a NoPE (full attention) layer every
        # no_rope_layer_interval layers, chunked local attention elsewhere
        # (vLLM's llama4.py: ChunkedLocalAttention unless no_rope_layers[i] == 0)
        interval = int(cfg.get("no_rope_layer_interval", 4))
        rope = cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
        if len(rope) != n:
            raise ModelConfigError(
                f"{where}: no_rope_layers must list {n} layers (num_hidden_layers), not {len(rope)}"
            )
        return tuple(CHUNKED if r else FULL for r in rope)
    if not window:
        return (FULL,) * n
    if mt == "gemma2":
        return tuple(SLIDING if (i + 1) % 2 else FULL for i in range(n))
    if mt in ("gemma3", "gemma3_text", "cohere2"):
        pattern = int(cfg.get("sliding_window_pattern", 6 if mt != "cohere2" else 4))
        return tuple(SLIDING if (i + 1) % pattern else FULL for i in range(n))
    if mt == "gpt_oss":
        return tuple(SLIDING if i % 2 == 0 else FULL for i in range(n))
    if mt in ALL_SLIDING_WITHOUT_LAYER_TYPES:
        return (SLIDING,) * n
    raise ModelConfigError(
        f"{where}: sliding_window is set but layer_types is not, and model_type "
        f"{mt!r} has no known per-layer rule; add layer_types"
    )


def _mamba2_layer_types(cfg: Mapping[str, Any], n: int, where: str) -> tuple[str, ...]:
    """Per-layer kinds of a Mamba2 hybrid (module docstring): nemotron_h from
    ``hybrid_override_pattern`` (or transformers' ``layers_block_type`` list),
    granitemoehybrid from ``layer_types``; the list must have
    ``num_hidden_layers`` entries and at least one attention layer."""
    mt = cfg["model_type"]
    if mt == "nemotron_h":
        pattern = cfg.get("hybrid_override_pattern")
        names: Mapping[str, str] = NEMOTRON_H_PATTERN
        field = "hybrid_override_pattern"
        if pattern is None and isinstance(cfg.get("layers_block_type"), list):
            pattern, names, field = (
                cfg["layers_block_type"],
                NEMOTRON_H_BLOCK_TYPES,
                "layers_block_type",
            )
        if not isinstance(pattern, (str, list)):
            raise ModelConfigError(f"{where}: hybrid_override_pattern is missing (nemotron_h)")
    else:
        pattern, names, field = cfg.get("layer_types"), GRANITE_LAYER_TYPES, "layer_types"
        if not isinstance(pattern, list):
            raise ModelConfigError(f"{where}: layer_types is missing (granitemoehybrid)")
    if len(pattern) != n:
        raise ModelConfigError(f"{where}: {field} must list {n} layers (num_hidden_layers)")
    bad = sorted({str(t) for t in pattern if t not in names})
    if bad:
        raise ModelConfigError(
            f"{where}: {field} has {', '.join(map(repr, bad))} layers, which {mt} does not "
            f"have (known: {', '.join(names)})"
        )
    out = tuple(names[t] for t in pattern)
    if FULL not in out or LINEAR not in out:
        raise ModelConfigError(
            f"{where}: {field} needs both Mamba2 and attention layers (the planner sizes "
            "Mamba2 hybrids, not pure Mamba2 or pure attention models of this type)"
        )
    return out


MAMBA2_FIELDS = {  # ModelSpec field: (nemotron_h name, granitemoehybrid name)
    "mamba_num_heads": ("mamba_num_heads", "mamba_n_heads"),
    "mamba_head_dim": ("mamba_head_dim", "mamba_d_head"),
    "mamba_state_size": ("ssm_state_size", "mamba_d_state"),
    "mamba_n_groups": ("n_groups", "mamba_n_groups"),
    "mamba_conv_kernel": ("conv_kernel", "mamba_d_conv"),
}
# nemotron_h configs may spell these the granitemoehybrid way (transformers'
# NemotronHConfig pops mamba_n_groups / mamba_d_conv into n_groups / conv_kernel)
NEMOTRON_H_ALIASES = {"n_groups": "mamba_n_groups", "conv_kernel": "mamba_d_conv"}


def _mamba2_fields(cfg: Mapping[str, Any], hidden: int, where: str) -> dict[str, int]:
    """The Mamba2 state fields vLLM's ``get_mamba_state_shape_from_config``
    reads (module docstring), as ModelSpec fields; each must be in the config."""
    nemotron = cfg["model_type"] == "nemotron_h"
    out = {}
    for field, (nem, gran) in MAMBA2_FIELDS.items():
        key = nem if nemotron else gran
        if nemotron and key not in cfg and NEMOTRON_H_ALIASES.get(key) in cfg:
            key = NEMOTRON_H_ALIASES[key]
        if not nemotron and key == "mamba_d_head" and cfg.get(key) == "auto":
            # GraniteMoeHybridConfig: "auto" -> mamba_expand x hidden // mamba_n_heads
            out[field] = _need(cfg, "mamba_expand", where) * hidden // out["mamba_num_heads"]
            continue
        out[field] = _need(cfg, key, where)
    if nemotron:
        out["mamba_intermediate"] = out["mamba_num_heads"] * out["mamba_head_dim"]
    else:
        out["mamba_intermediate"] = _need(cfg, "mamba_expand", where) * hidden
    return out


def _mamba2_ssm_bytes(cfg: Mapping[str, Any], dtype_bytes: int, where: str) -> int:
    """Bytes per SSM state element: nemotron_h the config's
    ``mamba_ssm_cache_dtype`` (float32 when absent, ``NemotronHForCausalLMConfig``),
    other Mamba2 hybrids the model dtype (``mamba_ssm_cache_dtype`` auto)."""
    if cfg["model_type"] != "nemotron_h":
        return dtype_bytes
    ssm = str(cfg.get("mamba_ssm_cache_dtype") or "float32")
    if ssm not in STATE_DTYPE_BYTES:
        raise ModelConfigError(
            f"{where}: mamba_ssm_cache_dtype is {ssm!r} (sized: {', '.join(STATE_DTYPE_BYTES)})"
        )
    return STATE_DTYPE_BYTES[ssm]


def _mamba2_params(
    cfg: Mapping[str, Any],
    types: tuple[str, ...],
    heads: int,
    kv: int,
    hd: int,
    m2: Mapping[str, int],
    where: str,
) -> tuple[float, float, float]:
    """(total, linear, attention-linear) parameter counts of a Mamba2 hybrid
    (module docstring formulas)."""
    hidden = _need(cfg, "hidden_size", where)
    vocab = _need(cfg, "vocab_size", where)
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    i, n, g = m2["mamba_intermediate"], m2["mamba_state_size"], m2["mamba_n_groups"]
    conv_dim = i + 2 * g * n
    mamba = (
        hidden * (i + conv_dim + m2["mamba_num_heads"])
        + conv_dim * m2["mamba_conv_kernel"]
        + i * hidden
    )
    attn = hidden * (heads + 2 * kv) * hd + heads * hd * hidden
    n_attn, n_mamba = types.count(FULL), types.count(LINEAR)
    if cfg["model_type"] == "nemotron_h":
        mlp = 0
        pattern = cfg.get("hybrid_override_pattern") or ""
        if "-" in pattern or "mlp" in (cfg.get("layers_block_type") or []):
            n_mlp = pattern.count("-") or cfg["layers_block_type"].count("mlp")
            mlp += n_mlp * 2 * hidden * _need(cfg, "intermediate_size", where)
        n_moe = pattern.count("E") or (cfg.get("layers_block_type") or []).count("moe")
        if n_moe:
            if cfg.get("moe_latent_size"):
                raise ModelConfigError(f"{where}: moe_latent_size is set, which the planner "
                                       "does not count (nemotron_h MoE layers)")  # fmt: skip
            e = _need(cfg, "n_routed_experts", where)
            shared = int(cfg.get("n_shared_experts") or 0) * int(
                cfg.get("moe_shared_expert_intermediate_size") or 0
            )
            mlp += n_moe * (
                e * 2 * hidden * _need(cfg, "moe_intermediate_size", where)
                + hidden * e
                + 2 * hidden * shared
            )
    else:
        e = int(cfg.get("num_local_experts") or 0)
        per = 3 * hidden * int(cfg.get("shared_intermediate_size") or 0)
        if e:
            per += e * 3 * hidden * _need(cfg, "intermediate_size", where) + hidden * e
        mlp = len(types) * per
    linear = n_attn * attn + n_mamba * mamba + mlp
    return float(linear + embed), float(linear), float(n_attn * attn)


def _params(cfg: Mapping[str, Any], layers: int, heads: int, kv: int, hd: int, where: str):
    """(total, linear, attention-linear) parameter counts (module docstring formulas)."""
    hidden = _need(cfg, "hidden_size", where)
    vocab = _need(cfg, "vocab_size", where)
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    if cfg.get("kv_lora_rank"):
        nope = _need(cfg, "qk_nope_head_dim", where)
        rope = _need(cfg, "qk_rope_head_dim", where)
        v = _need(cfg, "v_head_dim", where)
        lora_kv = cfg["kv_lora_rank"]
        qr = cfg.get("q_lora_rank")
        q = hidden * qr + qr * heads * (nope + rope) if qr else hidden * heads * (nope + rope)
        attn = q + hidden * (lora_kv + rope) + lora_kv * heads * (nope + v) + heads * v * hidden
    else:
        attn = hidden * (heads + 2 * kv) * hd + heads * hd * hidden
    experts = next(
        (cfg[k] for k in ("n_routed_experts", "num_local_experts", "num_experts") if cfg.get(k)),
        0,
    )
    mats = 2 if cfg.get("model_type") in NON_GATED_MLP else 3
    dense = (
        mats * hidden * _need(cfg, "intermediate_size", where) if "intermediate_size" in cfg else 0
    )
    if experts:
        moe_i = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size")
        if not isinstance(moe_i, int):
            raise ModelConfigError(f"{where}: moe_intermediate_size is missing")
        llama4 = cfg.get("model_type") in ("llama4", "llama4_text")
        shared = cfg.get("n_shared_experts") or (1 if llama4 else 0)  # Llama 4: one shared
        shared_i = cfg.get("shared_expert_intermediate_size")
        moe = (experts + shared) * 3 * hidden * moe_i + hidden * experts
        if shared_i:
            moe += 3 * hidden * shared_i
        first_dense = int(cfg.get("first_k_dense_replace", 0) or 0)
        if first_dense and not dense:
            raise ModelConfigError(f"{where}: intermediate_size is missing (dense layers)")
        mlp_total = first_dense * dense + (layers - first_dense) * moe
        if llama4:  # MoE every interleave_moe_layer_step-th layer, dense MLPs between
            step = int(cfg.get("interleave_moe_layer_step", 1))
            n_moe = layers // step
            dense_mlp = 3 * hidden * int(cfg.get("intermediate_size_mlp") or 0)
            mlp_total = n_moe * moe + (layers - n_moe) * dense_mlp
    else:
        if not dense:
            raise ModelConfigError(f"{where}: intermediate_size is missing")
        mlp_total = layers * dense
    linear = layers * attn + mlp_total
    return float(linear + embed), float(linear), float(layers * attn)


def _routed_experts(cfg: Mapping[str, Any], layers: int) -> tuple[float, int, int, int]:
    """(routed expert parameters over all MoE layers, experts E, top-k, MoE
    layers) as
    ``_params`` counts them: 3 x hidden x moe_intermediate_size per expert
    (gate, up, down), on every layer but DeepSeek's first_k_dense_replace
    ones and, for Llama 4, every interleave_moe_layer_step-th; (0, 0, 0) for
    a dense model (four zeros)."""
    experts = next(
        (cfg[k] for k in ("n_routed_experts", "num_local_experts", "num_experts") if cfg.get(k)),
        0,
    )
    if not experts:
        return 0.0, 0, 0, 0
    k = int(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 1)
    if k > int(experts):  # a router cannot pick more experts than there are
        raise ModelConfigError(
            f"config.json: num_experts_per_tok ({k}) exceeds the routed experts ({int(experts)})"
        )
    moe_i = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0)
    n_moe = layers - int(cfg.get("first_k_dense_replace", 0) or 0)
    if cfg.get("model_type") in ("llama4", "llama4_text"):
        n_moe = layers // int(cfg.get("interleave_moe_layer_step", 1))
    return (
        float(n_moe * experts * 3 * int(cfg["hidden_size"]) * moe_i),
        int(experts),
        k,
        n_moe,
    )


def _mlp_per_token(cfg: Mapping[str, Any]) -> int:
    """Intermediate width one token's MLP computes: dense, or top-k experts."""
    experts = any(cfg.get(k) for k in ("n_routed_experts", "num_local_experts", "num_experts"))
    if experts:
        k = cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 1
        return int(k) * int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0)
    return int(cfg.get("intermediate_size") or 0)


def from_config(cfg: Mapping[str, Any], name: str, where: str = "config.json") -> ModelSpec:
    """A ModelSpec from a parsed config.json (dict). Raises ModelConfigError
    naming the field that is missing or not sizable, or whose type or range is
    wrong (``config_fields.check``, before anything is read)."""
    config_fields.check(cfg, where)
    outer = cfg
    if isinstance(cfg.get("text_config"), dict):  # multimodal: the language model's config
        cfg = {**cfg["text_config"], "quantization_config": cfg.get("quantization_config")}
        cfg = {k: v for k, v in cfg.items() if v is not None}
    layers = _need(cfg, "num_hidden_layers", where)
    heads = _need(cfg, "num_attention_heads", where)
    kv = cfg.get("num_key_value_heads") or heads
    mla = 0
    if cfg.get("kv_lora_rank"):
        mla = int(cfg["kv_lora_rank"]) + _need(cfg, "qk_rope_head_dim", where)
        hd = mla
    elif cfg.get("head_dim") and cfg.get("model_type") != "granitemoehybrid":
        hd = int(cfg["head_dim"])
    else:
        hd = _need(cfg, "hidden_size", where) // heads
        if hd == 0:
            raise ModelConfigError(
                f"{where}: hidden_size {cfg['hidden_size']:,} / num_attention_heads {heads:,} "
                "gives a head size of 0; expected hidden_size >= num_attention_heads"
            )
    types = _layer_types(cfg, layers, where)
    mamba2 = cfg.get("model_type") in MAMBA2_MODEL_TYPES
    m2 = _mamba2_fields(cfg, _need(cfg, "hidden_size", where), where) if mamba2 else {}
    gdn = _gdn_fields(cfg, where) if LINEAR in types and not mamba2 else {}
    window = cfg.get("sliding_window") if SLIDING in types else None
    chunk = cfg.get("attention_chunk_size") if CHUNKED in types else None
    if SLIDING in types and not isinstance(window, int):
        raise ModelConfigError(f"{where}: sliding_window is needed for sliding_attention layers")
    if CHUNKED in types and not isinstance(chunk, int):
        raise ModelConfigError(
            f"{where}: attention_chunk_size is needed for chunked_attention layers"
        )
    dtype, dtype_note = _config_dtype(cfg, outer)
    if dtype not in DTYPE_BYTES:
        raise ModelConfigError(
            f"{where}: torch_dtype is {dtype or 'missing'!s} (sized: {', '.join(DTYPE_BYTES)})"
        )
    nb = DTYPE_BYTES[dtype]
    if mamba2:
        total, linear, attn = _mamba2_params(cfg, types, heads, kv, hd, m2, where)
    else:
        total, linear, attn = _params(cfg, layers, heads, kv, hd if not mla else 0, where)
    if gdn or cfg.get("attn_output_gate"):
        total, linear, attn = _hybrid_params(cfg, types, heads, hd, gdn, (total, linear, attn))
    ssm_bytes = _mamba2_ssm_bytes(cfg, nb, where) if mamba2 else 0
    if gdn:
        ssm = str(cfg.get("mamba_ssm_dtype") or "auto")
        if cfg.get("model_type") not in SSM_DTYPE_FROM_CONFIG or ssm == "auto":
            ssm_bytes = nb  # mamba_ssm_cache_dtype auto: the conv state's (model) dtype
        elif ssm in STATE_DTYPE_BYTES:
            ssm_bytes = STATE_DTYPE_BYTES[ssm]
        else:
            raise ModelConfigError(
                f"{where}: mamba_ssm_dtype is {ssm!r} (sized: {', '.join(STATE_DTYPE_BYTES)})"
            )
    qcfg = outer.get("quantization_config") or cfg.get("quantization_config")
    skipped = (qcfg or {}).get("modules_to_not_convert") or []
    if any("self_attn" in str(m) for m in skipped):  # e.g. gpt-oss: MXFP4 experts only
        linear -= attn
    method = quantization.resolve_method(None, qcfg)
    kv_dtype = quantization.checkpoint_kv_cache_dtype(qcfg)
    if kv_dtype not in quantization.KV_CACHE_DTYPES:
        raise ModelConfigError(
            f"{where}: quantization_config.kv_cache_quant_algo stores the KV cache as "
            f"{kv_dtype}, which the planner does not size"
        )
    routed, n_experts, top_k, moe_layers = _routed_experts(cfg, layers)
    typed = {**cfg, "model_type": outer.get("model_type") or cfg.get("model_type")}
    mml, mml_key = max_len.derived_max_model_len(typed, outer.get("_tokenizer_max_length"))
    mml_limit = max_len.max_model_len_limit(typed, outer.get("_tokenizer_max_length"))
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=int(cfg["hidden_size"]),
        num_heads=heads,
        num_kv_heads=int(kv),
        head_dim=hd,
        params=total,
        dtype_bytes=nb,
        layer_types=types,
        sliding_window=window,
        attention_chunk_size=chunk,
        mla_dim=mla,
        linear_params=linear,
        weight_bits=quantization.weight_bits(method, qcfg, nb),
        kv_bytes=quantization.kv_dtype_bytes(kv_dtype, nb),
        kv_cache_dtype=kv_dtype,
        quantization=method,
        vocab_size=int(cfg["vocab_size"]),
        intermediate_size=_mlp_per_token(cfg),
        source=str(outer.get("_source", where)),
        note="; ".join(n for n in (str(outer.get("_note", "")), dtype_note) if n),
        quantization_config=qcfg,
        ssm_state_bytes=ssm_bytes,
        state_kind="mamba2" if mamba2 else "gdn",
        max_model_len=mml,
        max_model_len_key=mml_key,
        max_model_len_limit=mml_limit,
        routed_expert_params=routed,
        num_experts=n_experts,
        experts_per_token=top_k,
        moe_layers=moe_layers,
        mtp_layers=int(
            cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers") or 0
        ),
        **gdn,
        **m2,
    )


GDN_FIELDS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)


def _gdn_fields(cfg: Mapping[str, Any], where: str) -> dict[str, int]:
    """The Gated DeltaNet fields vLLM sizes the linear-attention state from
    (``get_mamba_state_shape_from_config``); each must be in the config.json."""
    return {f: _need(cfg, f, where) for f in GDN_FIELDS}


def _hybrid_params(
    cfg: Mapping[str, Any],
    types: tuple[str, ...],
    heads: int,
    hd: int,
    gdn: Mapping[str, int],
    counts: tuple[float, float, float],
) -> tuple[float, float, float]:
    """``_params``' counts with Gated DeltaNet layers in place of attention and
    the output gate's q_proj half (module docstring formulas)."""
    total, linear, attn = counts
    hidden = int(cfg["hidden_size"])
    per_attn = attn / len(types)
    gate = heads * hd * hidden if cfg.get("attn_output_gate") else 0
    n_lin = types.count(LINEAR)
    n_attn = len(types) - n_lin
    gdn_layer = 0
    if gdn:
        key = gdn["linear_num_key_heads"] * gdn["linear_key_head_dim"]
        value = gdn["linear_num_value_heads"] * gdn["linear_value_head_dim"]
        gdn_layer = (
            hidden * (2 * key + 2 * value)
            + hidden * 2 * gdn["linear_num_value_heads"]
            + (2 * key + value) * gdn["linear_conv_kernel_dim"]
            + value * hidden
        )
    new_attn = n_attn * (per_attn + gate) + n_lin * gdn_layer
    return total - attn + new_attn, linear - attn + new_attn, float(new_attn)


def load(path: Path, name: str | None = None) -> ModelSpec:
    """Read a config.json (a file, or a folder holding one). Raises
    ModelConfigError (one line) when it is missing, not JSON, or not sizable."""
    p = path / "config.json" if path.is_dir() else path
    try:
        check_readable(p, "--model", MAX_SMALL_FILE_BYTES)
    except ValueError as e:
        raise ModelConfigError(str(e)) from None
    try:
        cfg = json.loads(p.read_text())
    except OSError as e:
        raise ModelConfigError(f"--model {path}: cannot read {p} ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"--model {path}: {p} is not JSON ({e.msg})") from None
    except UnicodeDecodeError:
        raise ModelConfigError(f"--model {path}: {p} is not JSON (not UTF-8 text)") from None
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"--model {path}: {p} is not a JSON object")
    tok = _tokenizer_max_length(p.parent / "tokenizer_config.json")
    if tok is not None:
        cfg = {**cfg, "_tokenizer_max_length": tok}
    return from_config(cfg, name or str(path), str(p))


def _tokenizer_max_length(p: Path) -> int | None:
    """``model_max_length`` of the tokenizer_config.json beside a config.json,
    which lowers vLLM's default max_model_len (``_get_and_verify_max_len``);
    None when there is no such file or field. Raises ModelConfigError (one
    line) for a file that is there but not a JSON object, or a
    model_max_length that is not a whole number >= 1."""
    if not p.is_file():
        return None
    try:
        tok = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelConfigError(f"{p}: cannot read it as JSON ({e})") from None
    if not isinstance(tok, dict):
        raise ModelConfigError(f"{p}: expected a JSON object")
    v = tok.get("model_max_length")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 1 or v != int(v):
        raise ModelConfigError(f"{p}: model_max_length must be a whole number >= 1, got {v!r}")
    return int(v)
