"""The memory vLLM's start-up profile leaves for the KV cache, term by term.

vLLM 0.33.0, ``vllm/v1/worker/gpu_worker.py``, ``Worker.determine_available_memory``:

    available = total x gpu_memory_utilization
                - weights - peak activation - non-torch memory   (non_kv_cache_memory)
                - CUDA graph memory estimate   (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS,
                                                 on by default since 0.21)

vLLM measures the last three on the GPU; here each is a stated estimate:

- weights per GPU: ``ModelSpec.weight_bytes(tp)`` (parameter count from
  config.json x bits of the quantization, ``planner.models.config_json``),
  plus the padding MXFP4 expert kernels add when they load the weights
  (``mxfp4_padding_bytes``).
- peak activation, the larger of the two passes of ``profile_run``:
  the dummy forward over max_num_batched_tokens tokens T,
  ``T x (4 x hidden + 3 x intermediate / tp) x 2 B`` (residual, hidden and
  attention output; the MLP's gate/up output and its activation, bf16), and
  the dummy sampler over S = min(max_num_seqs, max_num_batched_tokens) rows
  (``GPUModelRunner._dummy_run`` spreads its T tokens over that many requests
  and ``_dummy_sampler_run`` samples one row per request),
  ``S x vocab x 14 B``: the logits in the model's dtype (2 B, bf16) that
  ``_dummy_sampler_run`` holds while ``Sampler.forward`` works on their fp32
  copy (4 B; temperature divides it in place), and then the two fp32 tensors
  of the sampling step (4 + 4 B): FlashInfer's top-k mask and probabilities
  (``flashinfer_sample``), or on the second, seeded call that
  ``_dummy_sampler_run`` makes, the probabilities and the exponential noise
  ``q`` of ``random_sample`` (Triton's top-k/top-p works in place, and the
  noise divides the probabilities in place). No log-probabilities: the dummy
  metadata asks for none (``vllm/v1/sample/sampler.py``,
  ``vllm/v1/sample/ops/topk_topp_sampler.py``, vLLM 0.33.0). Not counted: the
  Triton kernels' cached (programs x vocab) fp32 buffer, about 80 MiB (vLLM
  PR #33538). Releases before that PR sorted the vocabulary (values and int64
  indices) and peaked near 39 B (``tests/data/memory_logs.json``'s llm-d rows).
  Both terms follow the server's own max_num_batched_tokens and max_num_seqs,
  so the pool does too: every command sizes a configuration's pool at that
  configuration's two values (``planner.resolve.num_gpu_blocks``).
- non-torch memory (CUDA context, cuBLAS/NCCL workspaces): 0.5 GiB at TP 1,
  as vLLM's start-up log for Llama-3.1-8B on one H100 reports; 1.0 GiB with
  TP > 1 for NCCL's buffers (an allowance, not a measurement).
- CUDA graphs: 0.36 GiB, the "Estimated CUDA graph memory" of a public vLLM
  0.27 start-up log (gpustack/runner PR #251, a TP 2 run whose model the
  excerpt does not name; other public logs show 0.17 to 1.4 GiB), an
  allowance; 0 for engines before 0.21, which captured graphs after sizing the
  pool (``cudagraphs=False``).

Each term is an estimate of a measured quantity: when you have your server's
log, pass ``--num-gpu-blocks`` from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.models.config_json import ModelSpec

GIB = 2**30
NON_TORCH_TP1_GIB = 0.5
NON_TORCH_TP_GIB = 1.0
CUDA_GRAPH_GIB = 0.36
ACT_BYTES = 2  # bf16 activations
LOGIT_BYTES = 2 + 4 + 4 + 4  # per (row, vocab entry): module docstring


# vLLM 0.33's MXFP4 MoE kernel for each CUDA architecture (compute capability
# x 10) and the multiples it rounds (hidden, intermediate per partition) up to:
# ``select_mxfp4_moe_backend`` walks ``_get_priority_backends_for_gpt_oss`` and
# ``mxfp4_round_up_hidden_size_and_intermediate_size`` pads
# (``vllm/model_executor/layers/fused_moe/oracle/mxfp4.py``). SM90 runs the
# OpenAI Triton kernels (intermediate to 64, hidden as is); SM100 FlashInfer's
# TRT-LLM kernels and SM8x / SM120 Marlin (hidden to 256, intermediate to 128).
MXFP4_ROUNDING = {80: (256, 128), 86: (256, 128), 89: (256, 128), 90: (1, 64),
                  100: (256, 128), 120: (256, 128)}  # fmt: skip


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k


def mxfp4_padding_bytes(m: ModelSpec, sm: int, tp: int = 1) -> float:
    """Bytes the MXFP4 MoE kernel's padding adds to the routed experts on one
    GPU: each expert's gate/up/down hold hidden' x intermediate' instead of
    hidden x intermediate (``MXFP4_ROUNDING``; intermediate per tensor-parallel
    rank), at the checkpoint's bits. 0 for other quantizations, dense models,
    and ROCm or unknown architectures (``sm`` 0: not modelled)."""
    if m.quantization != "mxfp4" or not m.num_experts or sm not in MXFP4_ROUNDING:
        return 0.0
    h_k, i_k = MXFP4_ROUNDING[sm]
    hidden = m.hidden_size
    inter = m.intermediate_size // max(m.experts_per_token, 1) // tp
    grown = _round_up(hidden, h_k) * _round_up(inter, i_k) / (hidden * inter) - 1.0
    return m.expert_weight_bytes(tp) * grown


@dataclass(frozen=True)
class MemoryTerms:
    """Bytes of each term on one GPU (see the module docstring); ``weights``
    includes ``weight_padding``."""

    requested: float  # total x gpu_memory_utilization
    weights: float
    activation: float
    non_torch: float
    cuda_graphs: float
    weight_padding: float = 0.0

    @property
    def available(self) -> float:
        """Bytes left for the KV cache."""
        return self.requested - self.weights - self.activation - self.non_torch - self.cuda_graphs

    def describe(self) -> str:
        """One line, GiB."""
        g = [x / GIB for x in (self.requested, self.weights, self.activation)]
        pad = (
            f" (of them {self.weight_padding / GIB:.2f} MXFP4 kernel padding)"
            if self.weight_padding
            else ""
        )
        return (
            f"memory per GPU: {g[0]:.2f} GiB requested - weights {g[1]:.2f}{pad} - activation peak "
            f"{g[2]:.2f} - non-torch {self.non_torch / GIB:.2f} - CUDA graphs "
            f"{self.cuda_graphs / GIB:.2f} = {self.available / GIB:.2f} GiB for the KV cache"
        )


def activation_bytes(
    m: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int, tp: int
) -> float:
    """Peak activation estimate, bytes (module docstring): the larger of the
    forward pass over T tokens and the sampler over min(S, T) rows."""
    t, s = max_num_batched_tokens, min(max_num_seqs, max_num_batched_tokens)
    forward = t * (4 * m.hidden_size + 3 * m.intermediate_size / tp) * ACT_BYTES
    sampler = s * m.vocab_size * LOGIT_BYTES
    return float(max(forward, sampler))


def terms(
    m: ModelSpec,
    memory_gib: float,
    gpu_memory_utilization: float,
    tp: int = 1,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 1024,
    cudagraphs: bool = True,
    sm: int = 0,
    dp: int = 1,
) -> MemoryTerms:
    """The memory terms for one GPU of CUDA architecture ``sm`` (compute
    capability x 10; 0: ROCm or unknown) of a deployment of ``dp``
    data-parallel ranks (a mixture of experts' routed experts are split over
    them, ``ModelSpec.expert_weight_bytes``). Defaults: vLLM 0.33's for an
    OpenAI server on an H100-class GPU
    (``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``: 8,192
    batched tokens, 1,024 sequences)."""
    pad = mxfp4_padding_bytes(m, sm, tp) / dp
    return MemoryTerms(
        requested=memory_gib * GIB * gpu_memory_utilization,
        weight_padding=pad,
        weights=m.weight_bytes(tp, dp) + pad,
        activation=activation_bytes(m, max_num_batched_tokens, max_num_seqs, tp),
        non_torch=(NON_TORCH_TP1_GIB if tp == 1 else NON_TORCH_TP_GIB) * GIB,
        cuda_graphs=CUDA_GRAPH_GIB * GIB if cudagraphs else 0.0,
    )
