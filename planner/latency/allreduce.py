"""Tensor-parallel all-reduce time from measurements of vLLM on real GPUs.

Source: aiconfigurator-core 0.12.0 (ai-dynamo/aiconfigurator, Apache-2.0)
ships ``systems/data/<system>/comm/vllm/<version>/custom_allreduce_perf.parquet``:
vLLM's ``tensor_model_parallel_all_reduce`` (whichever kernel vLLM picks: its
custom all-reduce, NCCL or symmetric memory) on a bfloat16 tensor of
``message_size`` elements over 2, 4 or 8 GPUs of one node, with CUDA graphs
and without (collector ``collector/collect_all_reduce.py``). ``tools/
extract_allreduce.py`` copies, per planner GPU and tensor-parallel size, the
newest vLLM release at or below 0.33 into ``planner/data/allreduce_vllm.csv``
(23 message sizes, 128 x 2^k elements for k = 0..22).

How a step uses it (``allreduce_s``): vLLM runs one all-reduce of
(tokens x hidden_size) activations after the vocabulary-parallel embedding
(``VocabParallelEmbedding.forward``) and two per decoder layer, after the
attention output and after the MLP or MoE (``RowParallelLinear`` /
``FusedMoE`` with ``reduce_results``; Megatron-LM's split, Shoeybi et al.,
2019): ``2 x num_hidden_layers + 1`` per step, each taking the table's time
at that message size, interpolated linearly between the measured sizes and
extended along the last segment beyond them. A step of at most
``GRAPH_TOKENS`` tokens (vLLM 0.33's default CUDA-graph capture ceiling,
``VllmConfig._set_cudagraph_sizes``: 512, 1,024 on compute capability 10.x)
takes the CUDA-graph time, a larger one the eager time; the ceiling's
further cap at 2 x max_num_seqs and max_num_batched_tokens is not applied.
Left out: the logits gather of the LM head and any overlap of communication
with compute (vLLM 0.33 overlaps none by default).

A GPU or tensor-parallel size without a measurement (RTX 4090, MI300X,
MI325X, L4, A10G, H100 PCIe and NVL, GB200 at tp 8, tensor parallelism above
8) keeps the bandwidth-only ring formula of
``RooflineLatency`` and says so in its description.
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from pathlib import Path

from numba import njit

CSV = Path(__file__).resolve().parents[1] / "data" / "allreduce_vllm.csv"
FIRST_ELEMENTS = 128  # smallest measured message, elements
KNOTS = 23  # message sizes 128 x 2^k elements, k = 0..KNOTS-1
DATA_VERSION = "aiconfigurator-core 0.12.0"

# vLLM 0.33's default CUDA-graph capture ceiling, tokens (module docstring).
GRAPH_TOKENS = 512
GRAPH_TOKENS_SM100 = 1024


@dataclass(frozen=True)
class AllReduceTable:
    """Measured all-reduce latency of one (GPU, tensor-parallel size).

    ``graph_s`` and ``eager_s``: KNOTS floats, seconds, at 128 x 2^k bfloat16
    elements; ``source``: the aiconfigurator system and vLLM release."""

    gpu: str
    tp: int
    source: str
    graph_s: tuple[float, ...]
    eager_s: tuple[float, ...]


@functools.cache
def _load() -> dict[tuple[str, int], AllReduceTable]:
    rows: dict[tuple[str, int], list[dict[str, str]]] = {}
    with CSV.open(newline="") as f:
        for r in csv.DictReader(f):
            rows.setdefault((r["gpu"], int(r["tp"])), []).append(r)
    out = {}
    for (gpu, tp), rs in rows.items():
        rs.sort(key=lambda r: int(r["elements"]))
        if [int(r["elements"]) for r in rs] != [FIRST_ELEMENTS << k for k in range(KNOTS)]:
            raise ValueError(f"{CSV.name}: {gpu} tp {tp} lacks the {KNOTS} message sizes")
        src = f"{DATA_VERSION}, {rs[0]['aic_system']}, vLLM {rs[0]['vllm_version']}"
        ms = (tuple(float(r[k]) / 1e3 for r in rs) for k in ("graph_ms", "eager_ms"))
        out[(gpu, tp)] = AllReduceTable(gpu, tp, src, *ms)
    return out


def lookup(gpu: str, tp: int) -> AllReduceTable | None:
    """The measured table of ``gpu`` (a ``hardware.GPUS`` name) at ``tp``, or
    None when none was measured (tp 1 needs none)."""
    return _load().get((gpu, tp))


def graph_tokens(sm: int) -> int:
    """vLLM 0.33's default CUDA-graph capture ceiling on a GPU of compute
    capability ``sm`` (x 10): 1,024 on the 10.x family, else 512."""
    return GRAPH_TOKENS_SM100 if 100 <= sm < 110 else GRAPH_TOKENS


@njit(cache=True, inline="always")
def interp_s(fp, base, elements):  # noqa: ANN001, ANN201
    """Seconds of one all-reduce of ``elements`` bfloat16 values from the
    KNOTS latencies in ``fp[base:base+KNOTS]`` (at 128 x 2^k elements):
    linear between neighbouring sizes, the first value below the first,
    the last segment extended beyond the last."""
    if elements <= FIRST_ELEMENTS:
        return fp[base]
    i = int(math.floor(math.log2(elements / FIRST_ELEMENTS)))
    i = min(i, KNOTS - 2)
    x0 = float(FIRST_ELEMENTS << i)
    y0, y1 = fp[base + i], fp[base + i + 1]
    return y0 + (y1 - y0) * (elements - x0) / x0
