"""Model and GPU presets, KV bytes per block, and num_gpu_blocks sizing.

Sizing follows vLLM 0.33's start-up profile (``vllm/v1/worker/gpu_worker.py``,
``Worker.determine_available_memory``; ``vllm/v1/core/kv_cache_planning.py``,
``get_kv_cache_config_from_groups``): the KV pool gets the memory left after
the terms of ``planner.models.memory_profile`` (weights per GPU, peak activation,
non-torch memory, CUDA graphs), and ``num_gpu_blocks = floor(pool bytes /
bytes per block)`` where a block id spans the layers of the largest KV cache
group (``planner.models.kv_cache``). The measured terms are estimates here; pass
``--num-gpu-blocks`` when you have your server's log.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planner.models import catalog, kv_cache, memory_profile
from planner.models.config_json import ModelConfigError, ModelSpec
from planner.models.quantization import QuantizationError

GIB = 2**30


# Presets are catalog entries (``planner/data/models``), kept under their
# short names; ``model`` also takes any catalog id or a config.json path.
PRESETS = ("llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "mistral-7b")
MODELS: dict[str, ModelSpec] = {name: catalog.lookup(name) for name in PRESETS}  # type: ignore[misc]


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator: memory visible to torch, dense bf16 peak, HBM bandwidth,
    and the GPU-to-GPU bandwidth tensor parallelism's all-reduces use (each
    direction: NVLink's or Infinity Fabric's total over two; for cards without
    such links PCIe's one-direction rate, 32 GB/s for Gen4 x16, 64 GB/s for Gen5
    x16)."""

    name: str
    memory_gib: float  # torch.cuda total memory, GiB
    bf16_flops: float  # dense bf16 tensor-core peak, FLOP/s
    hbm_bytes_per_s: float  # memory bandwidth, bytes/s
    link_bytes_per_s: float  # GPU-to-GPU bandwidth, each direction, bytes/s
    sm: int = 0  # CUDA compute capability x 10 (kernel choices); 0: ROCm


# Sources (dense, i.e. without sparsity, FLOP/s and bandwidth), recorded
# 2026-11-30. Memory is what torch reports as total, in GiB: from a vLLM
# start-up log where one was at hand (H100), else the label converted.
GPU_SOURCES: dict[str, str] = {
    "H100": "https://www.nvidia.com/en-us/data-center/h100/ (SXM5; 79.19 GiB from vLLM's log)",
    "H200": "https://www.nvidia.com/en-us/data-center/h200/ (SXM)",
    "A100-80GB": "https://www.nvidia.com/en-us/data-center/a100/ (SXM4 80GB)",
    "A100-40GB": "https://www.nvidia.com/en-us/data-center/a100/ (SXM4 40GB)",
    "L40S": "https://www.nvidia.com/en-us/data-center/l40s/",
    "B200": "https://www.nvidia.com/en-us/data-center/dgx-b200/ (per GPU: 180 GB, 8 TB/s)",
    "RTX-4090": "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/ "
    "(NVIDIA Ada Lovelace architecture whitepaper: 165.2 TFLOP/s bf16 dense, fp32 accumulate)",
    "MI300X": "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
    "RTX-PRO-6000": "ai-dynamo/aiconfigurator (Apache-2.0) commit 095f58a5, "
    "aic-core/src/aiconfigurator_core/systems/rtx_pro_6000_server.yaml (Server Edition: "
    "97,887 MiB from nvidia-smi, 467.8 TFLOP/s bf16 dense at its observed 2,430 MHz, 1.792 TB/s "
    "GDDR7, PCIe Gen5 x16 64 GB/s each way; recorded 2026-12-04)",
    # Added 2026-12-05 (issue 33 item 4); "AIC" = ai-dynamo/aiconfigurator (Apache-2.0)
    # commit 095f58a5, aic-core/src/aiconfigurator_core/systems/, the same files as the
    # aiconfigurator-core 0.12.0 wheel.
    "L4": "AIC l4.yaml (121 TFLOP/s bf16 dense, 300 GB/s GDDR6, PCIe Gen4 x16 32 GB/s each "
    "way, sm 89); 22.03 GiB total from torch's out-of-memory message on an L4, "
    "https://github.com/ArcInstitute/evo2/issues/190",
    "A10G": "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/ "
    "(24 GB GDDR6, 600 GB/s); 70 TFLOP/s 16-bit tensor from full-stack-deep-learning/"
    "website docs/cloud-gpus/index.md, citing NVIDIA's A10G datasheet "
    "https://d1.awsstatic.com/product-marketing/ec2/"
    "NVIDIA_AWS_A10G_DataSheet_FINAL_02_17_2022.pdf; "
    "22.20 GiB total from torch on a g5.12xlarge, "
    "https://github.com/XavierXiao/Dreambooth-Stable-Diffusion/issues/18 (secondary sources)",
    "H100-PCIe": "AIC h100_pcie.yaml (756.5 TFLOP/s bf16 dense, 2 TB/s HBM2e, PCIe Gen5 x16 "
    "64 GB/s each way without NVLink, sm 90); NVIDIA H100 PCIe product brief PB-11133-001_v02 "
    "(80 GB, >2,000 GB/s); memory: the 80 GB label converted (80e9 B = 74.51 GiB)",
    "H100-NVL": "https://www.nvidia.com/en-us/data-center/h100/ as quoted by "
    "https://github.com/KellerJordan/modded-nanogpt/issues/116 (1,671 TFLOP/s bf16 with "
    "sparsity); 94 GB HBM3, 3.9 TB/s, NVLink bridge 600 GB/s: secondary summaries of NVIDIA's "
    "page; 93.00 GiB total from torch on an H100 NVL, "
    "https://github.com/ali-vilab/VACE/issues/56",
    "GB200": "AIC gb200.yaml (one Blackwell GPU of a GB200 superchip: 189,471 MiB from "
    "nvidia-smi, 2,500 TFLOP/s bf16, 8 TB/s HBM3e, NVLink 5 900 GB/s each way, sm 100; "
    "it cites NVIDIA's Blackwell datasheet https://nvdam.widen.net/s/wwnsxrhm2w/"
    "blackwell-datasheet-3384703)",
    "MI325X": "https://rocm.docs.amd.com/en/7.13.0-preview/reference/gpu-specs.html (256 GiB "
    "VRAM); https://docs.vultr.com/inference-cookbook/rocm/getting-started/hardware-requirements "
    "(6.0 TB/s, 1,307 TFLOP/s 16-bit, from AMD's MI325X page); 1,307.4 TFLOP/s bf16 dense "
    "and 7 Infinity Fabric links as on MI300X: secondary summaries of AMD's page",
}
GPU_SOURCES_RECORDED = "2026-11-30"
# GPU-to-GPU links (``link_bytes_per_s``) from the same pages, recorded
# 2026-12-01: NVLink 900 GB/s (H100, H200 SXM), 600 GB/s (A100 SXM4), 1.8 TB/s
# (B200), AMD Infinity Fabric 896 GB/s aggregate (MI300X); L40S and RTX 4090
# have no NVLink and talk over PCIe Gen4 x16 (64 GB/s both ways). Added
# 2026-12-05 from GPU_SOURCES: L4 and A10G PCIe Gen4 x16, H100 PCIe Gen5 x16
# (128 GB/s both ways; its optional two-card NVLink bridge is not modelled),
# H100 NVL's NVLink bridge 600 GB/s (pairs only), GB200 NVLink 5 1.8 TB/s,
# MI325X 7 x 128 GB/s Infinity Fabric links (896 GB/s, as MI300X).
GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        # H100 SXM5 80GB: 989.4 TFLOP/s bf16 dense, 3.35 TB/s HBM3; vLLM logs 79.19 GiB total
        GpuSpec("H100", 79.19, 989.4e12, 3.35e12, 450e9, 90),  # NVLink 900 GB/s both ways
        # H200 SXM 141GB: 989.4 TFLOP/s bf16 dense, 4.8 TB/s HBM3e; ~139.8 GiB visible
        GpuSpec("H200", 139.8, 989.4e12, 4.8e12, 450e9, 90),  # NVLink 900 GB/s both ways
        # A100 SXM4 80GB: 312 TFLOP/s bf16 dense, 2.039 TB/s HBM2e; ~79.15 GiB visible
        GpuSpec("A100-80GB", 79.15, 312e12, 2.039e12, 300e9, 80),  # NVLink 600 GB/s both ways
        # A100 SXM4 40GB: 312 TFLOP/s bf16 dense, 1.555 TB/s HBM2; ~39.39 GiB visible
        GpuSpec("A100-40GB", 39.39, 312e12, 1.555e12, 300e9, 80),  # NVLink 600 GB/s both ways
        # L40S 48GB: 362.05 TFLOP/s bf16 dense, 864 GB/s GDDR6; ~44.4 GiB visible
        GpuSpec("L40S", 44.4, 362.05e12, 0.864e12, 32e9, 89),  # PCIe Gen4 x16
        # B200 180GB: 2.25 PFLOP/s bf16 dense, 8 TB/s HBM3e; 180e9 B = 167.6 GiB
        GpuSpec("B200", 167.6, 2250e12, 8.0e12, 900e9, 100),  # NVLink 1.8 TB/s both ways
        # GeForce RTX 4090 24GB (consumer): 165.2 TFLOP/s bf16 dense with fp32
        # accumulate, 1.008 TB/s GDDR6X; ~23.65 GiB visible
        GpuSpec("RTX-4090", 23.65, 165.2e12, 1.008e12, 32e9, 89),  # PCIe Gen4 x16
        # AMD Instinct MI300X 192GB: 1,307.4 TFLOP/s bf16 dense, 5.3 TB/s HBM3;
        # 192 GiB of HBM, ~191.98 GiB visible to ROCm torch
        GpuSpec("MI300X", 191.98, 1307.4e12, 5.3e12, 448e9),  # Infinity Fabric 896 GB/s both ways
        # RTX PRO 6000 Blackwell (Server Edition's figures, GPU_SOURCES): 96 GB GDDR7,
        # 97,887 MiB = 95.59 GiB visible, 467.8 TFLOP/s bf16 dense, 1.792 TB/s
        GpuSpec("RTX-PRO-6000", 95.59, 467.8e12, 1.792e12, 64e9, 120),  # PCIe Gen5 x16
        # L4 24GB: 121 TFLOP/s bf16 dense, 300 GB/s GDDR6; torch reports 22.03 GiB
        GpuSpec("L4", 22.03, 121e12, 0.3e12, 32e9, 89),  # PCIe Gen4 x16
        # A10G 24GB (AWS G5): 70 TFLOP/s 16-bit tensor (dense: a measured bf16 matmul
        # reaches 69.5), 600 GB/s GDDR6; torch reports 22.20 GiB; GA102, sm 86
        GpuSpec("A10G", 22.20, 70e12, 0.6e12, 32e9, 86),  # PCIe Gen4 x16
        # H100 PCIe 80GB: 756.5 TFLOP/s bf16 dense, 2 TB/s HBM2e; no torch figure
        # found, the label converted: 80e9 B = 74.51 GiB (SXM's log: 79.19)
        GpuSpec("H100-PCIe", 74.51, 756.5e12, 2.0e12, 64e9, 90),  # PCIe Gen5 x16
        # H100 NVL 94GB: 835.5 TFLOP/s bf16 dense (1,671 with sparsity), 3.9 TB/s
        # HBM3; torch reports 93.00 GiB
        GpuSpec("H100-NVL", 93.0, 835.5e12, 3.9e12, 300e9, 90),  # NVLink bridge 600 GB/s
        # GB200, one Blackwell GPU: 2,500 TFLOP/s bf16 dense, 8 TB/s HBM3e;
        # 189,471 MiB = 185.03 GiB from nvidia-smi (as RTX-PRO-6000)
        GpuSpec("GB200", 185.03, 2500e12, 8.0e12, 900e9, 100),  # NVLink 1.8 TB/s both ways
        # AMD Instinct MI325X 256GB: 1,307.4 TFLOP/s bf16 dense, 6 TB/s HBM3E;
        # 256 GiB of HBM (ROCm's table); the figure visible to torch not found
        GpuSpec("MI325X", 256.0, 1307.4e12, 6.0e12, 448e9),  # Infinity Fabric 896 GB/s
    )
}
GPU_ALIASES = {"h100": "H100", "h100-80gb": "H100", "h200": "H200", "a100": "A100-80GB",
               "a100-80gb": "A100-80GB", "a100-40gb": "A100-40GB", "l40s": "L40S",
               "b200": "B200", "rtx-4090": "RTX-4090", "rtx4090": "RTX-4090",
               "4090": "RTX-4090", "mi300x": "MI300X", "rtx-pro-6000": "RTX-PRO-6000",
               "rtxpro6000": "RTX-PRO-6000", "l4": "L4", "a10g": "A10G",
               "h100-pcie": "H100-PCIe", "h100pcie": "H100-PCIe", "h100-nvl": "H100-NVL",
               "h100nvl": "H100-NVL", "gb200": "GB200", "mi325x": "MI325X"}  # fmt: skip


class HardwareError(ValueError):
    """Unknown preset or impossible sizing; one line."""


def model(
    name: str,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    disable_hybrid_kv_cache_manager: bool | None = None,
) -> ModelSpec:
    """A catalog model (Hugging Face id or preset alias, case-insensitive) or a
    path to a folder/file with a config.json, under ``--quantization``,
    ``--kv-cache-dtype`` and ``--disable-hybrid-kv-cache-manager``
    (``hybrid_kv_cache_manager_off``). Raises HardwareError (one line)."""
    try:
        m = catalog.lookup(name)
        if m is None:
            p = Path(name)
            if not p.exists():
                known = ", ".join(PRESETS)
                raise HardwareError(
                    f"--model: unknown model {name!r} (presets: {known}; the catalog's "
                    "Hugging Face ids are listed by plan models; or a path to a config.json)"
                )
            m = model_config_load(p)
        if quantization is not None or kv_cache_dtype != "auto":
            m = m.with_options(quantization, kv_cache_dtype)
        if hybrid_kv_cache_manager_off(m, disable_hybrid_kv_cache_manager):
            m = m.without_hybrid_kv_cache_manager()
        return m
    except (ModelConfigError, QuantizationError) as e:
        raise HardwareError(str(e)) from None


CHUNKED_WITH_HYBRID_ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"


def hybrid_kv_cache_manager_off(m: ModelSpec, given: bool | None) -> bool:
    """Whether vLLM 0.33 runs ``m`` with its hybrid KV cache manager off:
    ``given`` (``--disable-hybrid-kv-cache-manager`` or its ``--no-`` form), else
    vLLM's default (``VllmConfig.__post_init__``, ``vllm/config/vllm.py``): off
    for a model with chunked local attention (a latency regression, unless
    ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1``; the ``--no-``
    form stands for that), on otherwise.

    Raises:
        HardwareError: the flag given for a model whose pool it cannot change
            (one attention type, no recurrent state).
    """
    if given is not None and not m.hybrid_kv():
        raise HardwareError(
            f"--{'' if given else 'no-'}disable-hybrid-kv-cache-manager has no effect on "
            f"{m.name}: its KV layers are all one type"
        )
    if given is not None:
        return given
    return "chunked" in m.layer_types


def model_config_load(p: Path) -> ModelSpec:
    """``model_config.load`` (a config.json file or folder)."""
    from planner.models.config_json import load

    return load(p)


def gpu(name: str, flag: str = "--gpu") -> GpuSpec:
    """Look up a GPU preset (case-insensitive; H100 = H100-80GB). Raises
    HardwareError (one line, naming ``flag``, the option that gave it)."""
    key = GPU_ALIASES.get(name.lower(), name)
    g = GPUS.get(key)
    if g is None:
        raise HardwareError(f"{flag}: unknown GPU {name!r} (known: {', '.join(GPUS)})")
    return g


def kv_page_bytes(m: ModelSpec, block_size: int, tp: int = 1) -> int:
    """Bytes one block id takes in the pool on one GPU (``kv_cache.bytes_per_block``:
    block_size x KV bytes per token over the largest group's layers; every
    layer for a model with one attention type)."""
    return kv_cache.bytes_per_block(kv_cache.groups(m, block_size, tp))


def num_gpu_blocks(
    m: ModelSpec,
    g: GpuSpec,
    gpu_memory_utilization: float,
    block_size: int = 16,
    tp: int = 1,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 1024,
    cudagraphs: bool = True,
    dp: int = 1,
) -> int:
    """KV blocks vLLM would allocate on each GPU: ``memory_profile.terms``
    (available bytes) // ``kv_page_bytes``; ``dp`` data-parallel ranks split
    a mixture of experts' routed experts (``ModelSpec.expert_weight_bytes``).

    Worked example, Llama-3.1-8B on one H100 at 0.90, block_size 16, vLLM
    0.33's H100 defaults (8,192 batched tokens, 1,024 sequences):
    79.19 GiB x 0.90 = 71.271 GiB; weights 8.030e9 x 2 B = 14.957 GiB;
    activation peak max(8,192 x (4 x 4,096 + 3 x 14,336) x 2 B = 0.906 GiB,
    1,024 x 128,256 x 14 B = 1.712 GiB) = 1.712 GiB; non-torch 0.50 GiB; CUDA
    graphs 0.36 GiB; 53.742 GiB left. A block holds 16 tokens x 2 (K, V) x 32
    layers x 8 KV heads x 128 x 2 B = 2 MiB, so num_gpu_blocks = 27,515
    (-1.6% from the 27,967 this planner quoted from vLLM's log of ~54.6 GiB).

    Raises:
        HardwareError: if the utilisation is outside (0, 1], tp < 1, tp does
            not split the heads as vLLM requires, or nothing is left for a
            single block.
    """
    if not (0 < gpu_memory_utilization <= 1):
        raise HardwareError(
            f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}"
        )
    if tp < 1:
        raise HardwareError(f"--tensor-parallel-size must be >= 1, got {tp}")
    try:
        m.check_tensor_parallel(tp)
    except ModelConfigError as e:
        raise HardwareError(str(e)) from None
    args = (
        g, gpu_memory_utilization, block_size, max_num_batched_tokens, max_num_seqs, cudagraphs, dp
    )  # fmt: skip
    blocks = _blocks(m, tp, *args)
    if blocks < 2:
        fits = [t for t in TP_SIZES if t > tp and _fits(m, t, args)]
        hint = f"; a tensor-parallel size of {fits[0]} leaves room" if fits else ""
        terms = memory_terms(m, g, gpu_memory_utilization, tp, *args[3:])
        raise HardwareError(
            f"{m.name} on {tp} x {g.name} at {gpu_memory_utilization}: no room for the KV "
            f"cache (per GPU, GiB: {terms.requested / GIB:.1f} requested - weights "
            f"{terms.weights / GIB:.1f} - activation peak {terms.activation / GIB:.1f} at "
            f"max_num_batched_tokens {max_num_batched_tokens:,}, max_num_seqs "
            f"{max_num_seqs:,} - non-torch {terms.non_torch / GIB:.1f} - CUDA graphs "
            f"{terms.cuda_graphs / GIB:.2f}){hint}"
        )
    return blocks


TP_SIZES = (1, 2, 4, 8)  # tensor-parallel sizes suggested when the weights do not fit


def _fits(m: ModelSpec, tp: int, args: tuple) -> bool:
    try:
        m.check_tensor_parallel(tp)
    except ModelConfigError:
        return False
    return _blocks(m, tp, *args) >= 2


def memory_terms(
    m: ModelSpec, g: GpuSpec, util: float, tp: int = 1, max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 1024, cudagraphs: bool = True, dp: int = 1,
) -> memory_profile.MemoryTerms:  # fmt: skip
    """``memory_profile.terms`` for a GPU preset."""
    return memory_profile.terms(
        m, g.memory_gib, util, tp, max_num_batched_tokens, max_num_seqs, cudagraphs, g.sm, dp
    )


def _blocks(
    m: ModelSpec, tp: int, g: GpuSpec, util: float, block_size: int, mnbt: int, mns: int, cg: bool,
    dp: int = 1,
) -> int:  # fmt: skip
    """floor(available bytes / bytes per block): the sizing formula."""
    avail = memory_terms(m, g, util, tp, mnbt, mns, cg, dp).available
    return int(avail // kv_page_bytes(m, block_size, tp))
