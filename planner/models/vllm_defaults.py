"""The server settings ``vllm serve`` would pick for a model on a GPU (vLLM 0.33).

One resolver for every command and sweep row (issue 32, item 1): each
scheduler and cache setting the user leaves out takes vLLM 0.33's default
for that model and GPU, and says where it comes from.

Sources, all in vLLM 0.33.0:

- max_num_seqs, max_num_batched_tokens: ``EngineArgs.get_batch_defaults`` and
  ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``
  (``vllm/engine/arg_utils.py``). By the GPU's total memory and usage context
  (``vllm serve`` = ``UsageContext.OPENAI_API_SERVER``; the offline ``LLM``
  class = ``LLM_CLASS``): >= 160 GiB: 16,384 tokens and 1,024 sequences for
  both; >= 70 GiB and not an A100: 8,192 (serve) / 16,384 (LLM) and 1,024;
  else 2,048 (serve) / 8,192 (LLM) and 256 (also vLLM's choice when it cannot
  read the device). Then, when max_num_batched_tokens is defaulted, it is at
  most max_num_seqs x max_model_len (chunked prefill is on for generative
  models, so it is not raised to max_model_len); a defaulted max_num_seqs is
  at most max_num_batched_tokens.
- max_model_len: ``_get_and_verify_max_len`` (``vllm/config/model.py``), see
  ``planner.models.max_len``.
- enable_prefix_caching: ``EngineArgs._set_default_chunked_prefill_and_prefix_caching_args``
  from ``ModelConfig.is_prefix_caching_supported``: on for generative models.
- async_scheduling: ``VllmConfig.__post_init__``: on unless an incompatible
  option (pooling models, executors without it) turns it off.
- block_size: ``CacheConfig.DEFAULT_BLOCK_SIZE`` = 16 (``vllm/config/cache.py``).
- gpu_memory_utilization: ``CacheConfig.gpu_memory_utilization`` = 0.92.

Without a model or GPU there is nothing vLLM would derive them from; the
planner then runs scenario S1's server (``PLANNER_DEFAULTS``) and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.models.config_json import ModelSpec
from planner.models.hardware import GpuSpec

SERVE = "serve"  # UsageContext.OPENAI_API_SERVER (vllm serve)
LLM_CLASS = "llm"  # UsageContext.LLM_CLASS (the offline LLM class)
USAGE_CONTEXTS = (SERVE, LLM_CLASS)

# The settings this module resolves, in the order they are printed.
FIELDS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "enable_prefix_caching",
    "async_scheduling",
    "block_size",
    "gpu_memory_utilization",
)
# Scenario S1's server (docs/scenario-s1.md): what a run without --model and
# --gpu simulates. vLLM's own fallback for a device it cannot read is the same
# 256 sequences and 2,048 tokens (``get_batch_defaults``).
PLANNER_DEFAULTS: dict[str, Any] = {
    "max_num_seqs": 256,
    "max_num_batched_tokens": 2048,
    "max_model_len": 4096,
    "enable_prefix_caching": False,
    "async_scheduling": False,
    "block_size": 16,
    "gpu_memory_utilization": 0.92,
}
# Only for a model whose pool the hybrid KV cache manager changes
# (``ModelSpec.hybrid_kv``); its value follows hardware.hybrid_kv_cache_manager_off.
HYBRID = "disable_hybrid_kv_cache_manager"
BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE
GPU_MEMORY_UTILIZATION = 0.92  # CacheConfig.gpu_memory_utilization

GIVEN = "given"
VLLM = "vLLM default"
PLANNER = "planner default"
DIFFERS = "planner differs from vLLM"


@dataclass(frozen=True)
class Setting:
    """One resolved setting: its value, whose it is (``GIVEN``, ``VLLM``,
    ``PLANNER`` or ``DIFFERS``) and why (the vLLM function, or the reason)."""

    value: Any
    source: str
    why: str = ""

    def text(self) -> str:
        """``(vLLM default: why)`` style note for printing; empty when given."""
        if self.source == GIVEN:
            return ""
        return f"({self.source}: {self.why})" if self.why else f"({self.source})"


def batch_defaults(g: GpuSpec | None, usage: str = SERVE) -> tuple[int, int, str]:
    """(max_num_batched_tokens, max_num_seqs, why) before the model caps them,
    for GPU ``g`` (None: a device vLLM cannot read) under ``usage`` (``SERVE``
    or ``LLM_CLASS``), as ``EngineArgs.get_batch_defaults`` picks them.
    Raises ValueError for an unknown usage context."""
    if usage not in USAGE_CONTEXTS:
        raise ValueError(f"--usage-context must be one of {USAGE_CONTEXTS}, got {usage!r}")
    mem = 0.0 if g is None else g.memory_gib
    a100 = g is not None and "a100" in g.name.lower()
    where = "EngineArgs.get_batch_defaults"
    if mem >= 160:
        return 16384, 1024, f"{where}, a GPU with >= 160 GiB"
    if mem >= 70 and not a100:
        tokens = 8192 if usage == SERVE else 16384
        return tokens, 1024, f"{where}, a GPU with >= 70 GiB other than A100"
    tokens = 2048 if usage == SERVE else 8192
    what = "an unknown device" if g is None else "a GPU with < 70 GiB or an A100"
    return tokens, 256, f"{where}, {what}"


def settings(
    given: dict[str, Any],
    model: ModelSpec | None,
    gpu: GpuSpec | None,
    usage: str = SERVE,
) -> dict[str, Setting]:
    """Every field of ``FIELDS``: the given value (``given[name]`` not None),
    else vLLM 0.33's default for ``model`` on ``gpu`` (module docstring), else,
    with neither model nor GPU, ``PLANNER_DEFAULTS``.

    ``model`` alone gives max_model_len and the on/off defaults; ``gpu``
    alone the batch sizes (vLLM's unknown-device sizes without it).
    Returns a dict in ``FIELDS`` order. Raises ValueError for an unknown
    usage context, or a given max_model_len above the model's limit (vLLM's
    ``_get_and_verify_max_len`` refuses it).
    """
    tokens, seqs, why = batch_defaults(gpu, usage)
    vllm = model is not None or gpu is not None
    out: dict[str, Setting] = {}

    def pick(name: str, value: Any, why: str) -> Any:
        if given.get(name) is not None:
            out[name] = Setting(given[name], GIVEN)
        elif vllm:
            out[name] = Setting(value, VLLM, why)
        else:
            out[name] = Setting(PLANNER_DEFAULTS[name], PLANNER, "scenario S1's server")
        return out[name].value

    if model is not None and model.max_model_len:
        mml_why = f"_get_and_verify_max_len, config.json {model.max_model_len_key}"
        asked = given.get("max_model_len")
        if asked is not None and model.max_model_len_limit and asked > model.max_model_len_limit:
            raise ValueError(
                f"max_model_len {asked:,} is above {model.name}'s {model.max_model_len_limit:,} "
                "(config.json): vLLM 0.33 refuses to start (_get_and_verify_max_len) unless "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, whose positions past it the planner does not "
                "model"
            )
        mml = pick("max_model_len", model.max_model_len, mml_why)
    else:
        mml = given.get("max_model_len") or PLANNER_DEFAULTS["max_model_len"]
        out["max_model_len"] = (
            Setting(mml, GIVEN)
            if given.get("max_model_len") is not None
            else Setting(mml, PLANNER, "no --model to derive it from")
        )
    seqs_given = given.get("max_num_seqs")
    seqs_now = seqs if seqs_given is None else seqs_given
    pick(
        "max_num_batched_tokens",
        min(seqs_now * mml, tokens),
        f"{why}, at most max_num_seqs x max_model_len",
    )
    mnbt = out["max_num_batched_tokens"].value
    pick("max_num_seqs", min(seqs, mnbt), f"{why}, at most max_num_batched_tokens")
    pick(
        "enable_prefix_caching",
        True,
        "ModelConfig.is_prefix_caching_supported, on for generative models",
    )
    pick("async_scheduling", True, "VllmConfig.__post_init__")
    raised = model is not None and "linear" in model.layer_types
    pick(
        "block_size",
        BLOCK_SIZE,
        "CacheConfig.DEFAULT_BLOCK_SIZE"
        + ("; vLLM raises it so an attention page holds a linear-attention layer's state "
           "(_align_hybrid_block_size), the size the attention line gives" if raised else ""),
    )  # fmt: skip
    pick("gpu_memory_utilization", GPU_MEMORY_UTILIZATION, "CacheConfig.gpu_memory_utilization")
    if model is not None and (model.hybrid_kv() or model.promoted_layers):
        pick(
            HYBRID,
            bool(model.promoted_layers),
            "VllmConfig.__post_init__: off for chunked local attention, else on",
        )
    return {name: out[name] for name in (*FIELDS, HYBRID) if name in out}


def differs(s: Setting, value: Any, why: str) -> Setting:
    """``s`` turned to ``value`` because the planner cannot run vLLM's default
    (``why``); a given setting is never changed (the caller rejects it)."""
    if s.source == GIVEN or s.value == value:
        return s
    return Setting(value, DIFFERS, f"vLLM's default is {s.value}; {why}")
