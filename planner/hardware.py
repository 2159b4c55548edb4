"""Model and GPU presets, KV bytes per block, and num_gpu_blocks sizing.

Sizing follows vLLM's start-up profile (``vllm/v1/worker/gpu_worker.py``,
``Worker.determine_available_memory``, and ``vllm/v1/core/kv_cache_utils.py``,
``get_kv_cache_config``): the KV pool gets

    total GPU memory x gpu_memory_utilization
      - model weights (per GPU) - peak activation memory - non-torch memory

and ``num_gpu_blocks = floor(pool bytes / page bytes)`` where one page holds
``block_size`` tokens of K and V for every layer.

The activation peak and non-torch memory are *measured* by vLLM at start-up;
here they are allowances (``activation_gib``, ``non_torch_gib``) with defaults
taken from vLLM's own start-up log for Llama-3.1-8B on one H100 (worked example
in ``num_gpu_blocks``). Override them, or pass ``--num-gpu-blocks``, when you
have your server's log.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer (from its Hugging Face ``config.json``)."""

    name: str
    num_layers: int  # num_hidden_layers
    hidden_size: int
    num_heads: int  # num_attention_heads (query heads)
    num_kv_heads: int  # num_key_value_heads
    head_dim: int
    params: float  # parameter count
    dtype_bytes: int = 2  # bf16 weights and KV cache

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """K and V bytes of one token on one GPU: 2 x layers x kv_heads/tp x head_dim x dtype.

        KV heads are split across tensor-parallel ranks; with fewer KV heads
        than ranks each rank keeps one (vLLM replicates them).
        """
        heads = max(1, self.num_kv_heads // tp)
        return 2 * self.num_layers * heads * self.head_dim * self.dtype_bytes

    def weight_bytes(self, tp: int = 1) -> float:
        """Weight bytes on one GPU (an even split across tp ranks)."""
        return self.params * self.dtype_bytes / tp


# Sources: each model's config.json on Hugging Face (layers, hidden, heads, KV
# heads, head dim) and its model card (parameter count).
MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        # meta-llama/Llama-3.1-8B: 32 layers, 4096 hidden, 32 q / 8 kv heads, 8.03B params
        ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 128, 8.03e9),
        # meta-llama/Llama-3.1-70B: 80 layers, 8192 hidden, 64 q / 8 kv heads, 70.6B params
        ModelSpec("llama-3.1-70b", 80, 8192, 64, 8, 128, 70.6e9),
        # Qwen/Qwen2.5-7B: 28 layers, 3584 hidden, 28 q / 4 kv heads, 7.62B params
        ModelSpec("qwen2.5-7b", 28, 3584, 28, 4, 128, 7.62e9),
        # mistralai/Mistral-7B-v0.3: 32 layers, 4096 hidden, 32 q / 8 kv heads, 7.25B params
        ModelSpec("mistral-7b", 32, 4096, 32, 8, 128, 7.25e9),
    )
}


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator: memory visible to torch, dense bf16 peak, HBM bandwidth."""

    name: str
    memory_gib: float  # torch.cuda total memory, GiB
    bf16_flops: float  # dense bf16 tensor-core peak, FLOP/s
    hbm_bytes_per_s: float  # memory bandwidth, bytes/s


# Sources: NVIDIA datasheets (dense, i.e. without sparsity) for FLOP/s and
# bandwidth; memory is what torch reports as total (slightly below the label).
GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        # H100 SXM5 80GB: 989.4 TFLOP/s bf16 dense, 3.35 TB/s HBM3; vLLM logs 79.19 GiB total
        GpuSpec("H100", 79.19, 989.4e12, 3.35e12),
        # H200 SXM 141GB: 989.4 TFLOP/s bf16 dense, 4.8 TB/s HBM3e; ~139.8 GiB visible
        GpuSpec("H200", 139.8, 989.4e12, 4.8e12),
        # A100 SXM4 80GB: 312 TFLOP/s bf16 dense, 2.039 TB/s HBM2e; ~79.15 GiB visible
        GpuSpec("A100-80GB", 79.15, 312e12, 2.039e12),
        # L40S 48GB: 362.05 TFLOP/s bf16 dense, 864 GB/s GDDR6; ~44.4 GiB visible
        GpuSpec("L40S", 44.4, 362.05e12, 0.864e12),
    )
}
GPU_ALIASES = {"h100": "H100", "h100-80gb": "H100", "h200": "H200", "a100": "A100-80GB",
               "a100-80gb": "A100-80GB", "l40s": "L40S"}  # fmt: skip


class HardwareError(ValueError):
    """Unknown preset or impossible sizing; one line."""


def model(name: str) -> ModelSpec:
    """Look up a model preset (case-insensitive). Raises HardwareError."""
    m = MODELS.get(name.lower())
    if m is None:
        raise HardwareError(f"--model: unknown model {name!r} (known: {', '.join(MODELS)})")
    return m


def gpu(name: str) -> GpuSpec:
    """Look up a GPU preset (case-insensitive; H100 = H100-80GB). Raises HardwareError."""
    key = GPU_ALIASES.get(name.lower(), name)
    g = GPUS.get(key)
    if g is None:
        raise HardwareError(f"--gpu: unknown GPU {name!r} (known: {', '.join(GPUS)})")
    return g


def kv_page_bytes(m: ModelSpec, block_size: int, tp: int = 1) -> int:
    """Bytes of one KV block on one GPU: block_size x kv_bytes_per_token."""
    return block_size * m.kv_bytes_per_token(tp)


def num_gpu_blocks(
    m: ModelSpec,
    g: GpuSpec,
    gpu_memory_utilization: float,
    block_size: int = 16,
    tp: int = 1,
    activation_gib: float = 1.19,
    non_torch_gib: float = 0.50,
) -> int:
    """KV blocks vLLM would allocate on each GPU (see the module docstring).

    Worked example, Llama-3.1-8B on one H100 at 0.90, block_size 16:
    79.19 GiB x 0.90 = 71.271 GiB; weights 8.03e9 x 2 B = 14.957 GiB; minus the
    activation peak 1.19 GiB and non-torch 0.50 GiB leaves 54.624 GiB for KV.
    A block holds 16 tokens x 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 B
    = 2 MiB, so num_gpu_blocks = floor(54.624 GiB / 2 MiB) = 27,967
    (447,472 tokens). vLLM's own log for this setup reports weights 14.99 GiB
    and about 54.6 GiB of KV cache, i.e. within 0.1% of this figure.

    Raises:
        HardwareError: if the utilisation is outside (0, 1], tp < 1, or the
            weights and allowances leave no room for a single block.
    """
    if not (0 < gpu_memory_utilization <= 1):
        raise HardwareError(
            f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}"
        )
    if tp < 1:
        raise HardwareError(f"--tensor-parallel-size must be >= 1, got {tp}")
    overhead = activation_gib + non_torch_gib
    blocks = _blocks(m, g, gpu_memory_utilization, block_size, tp, overhead)
    if blocks < 2:
        fits = [
            t
            for t in TP_SIZES
            if t > tp and _blocks(m, g, gpu_memory_utilization, block_size, t, overhead) >= 2
        ]
        hint = f"; a tensor-parallel size of {fits[0]} leaves room" if fits else ""
        raise HardwareError(
            f"{m.name} on {tp} x {g.name} at {gpu_memory_utilization}: weights "
            f"{m.weight_bytes(tp) / GIB:.1f} GiB leave no room for the KV cache{hint}"
        )
    return blocks


TP_SIZES = (1, 2, 4, 8)  # tensor-parallel sizes suggested when the weights do not fit


def _blocks(
    m: ModelSpec, g: GpuSpec, util: float, block_size: int, tp: int, overhead_gib: float
) -> int:
    """floor((memory x util - weights/tp - overhead) / page bytes): the sizing formula."""
    kv_bytes = g.memory_gib * GIB * util - m.weight_bytes(tp) - overhead_gib * GIB
    return int(kv_bytes // kv_page_bytes(m, block_size, tp))
