"""Issue 33, item 2 (part): a mixture of experts is priced by the experts a
token runs (FLOPs: top-k of E) and the experts a step reads (bytes: the
fraction 1 - (1 - k/E)^T its T tokens pick under uniform routing). Before, the
roofline charged every expert for every token: gpt-oss-120b on an MI300X was
flat at 1,396 output tokens/s from 64 to 256 clients."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from helpers import run_cli
from planner.latency.step_time import ROOFLINE, RooflineLatency, step_time_ns
from planner.models import hardware

# Qwen3-30B-A3B by hand, from its config.json (48 layers, hidden 2,048, 32 query
# and 4 KV heads of 128, 128 experts of 768, top-8, vocabulary 151,936, untied):
ATTN = 2048 * (32 + 2 * 4) * 128 + 32 * 128 * 2048  # q, k, v, o per layer
EXPERTS = 128 * 3 * 2048 * 768  # gate, up, down of every routed expert, per layer
ROUTER = 2048 * 128
EMBED = 151936 * 2048 * 2
TOTAL = 48 * (ATTN + EXPERTS + ROUTER) + EMBED  # 30,531,911,680
ACTIVE = TOTAL - 48 * EXPERTS * (128 - 8) // 128  # 3,352,821,760


def test_active_parameters_by_hand():
    m = hardware.model("qwen3-30b-a3b")
    assert m.params == TOTAL and m.routed_expert_params == 48 * EXPERTS
    assert m.active_params() == ACTIVE
    dense = hardware.model("llama-3.1-8b")
    assert dense.active_params() == dense.params and dense.expert_weight_bytes() == 0


@pytest.mark.parametrize("tokens", [1, 8, 64, 4096])
def test_a_decode_step_reads_the_experts_its_tokens_pick(tokens):
    lat = RooflineLatency("qwen3-30b-a3b", "H100")
    g = hardware.gpu("H100")
    experts_bytes = 48 * EXPERTS * 2  # bf16
    other_bytes = (TOTAL - 48 * EXPERTS) * 2
    read = other_bytes + experts_bytes * (1 - (1 - 8 / 128) ** tokens)
    flops = 2 * ACTIVE * tokens  # no attention pairs: an empty context
    want = math.ceil(
        max(flops / (g.bf16_flops * lat.mfu), read / (g.hbm_bytes_per_s * lat.mbu)) * 1e9
    )
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    fp = np.array(lat.floats(), dtype=np.float64)
    got = step_time_ns(ROOFLINE, ip, fp, 0, tokens, 0, 0, np.zeros(4))
    assert got == pytest.approx(want, abs=1)


def test_moe_decode_throughput_grows_with_the_batch(capsys):
    """gpt-oss-120b on an MI300X, 1,024-in / 1,024-out clients at concurrency
    64 and 256: InferenceX (PR #1061, vLLM 0.17) measured output throughput
    rising 2.1x (2,008 to 4,271 tokens/s); a flat figure means every expert
    was read for every token."""
    tps = []
    for clients in (64, 256):
        code, out, err = run_cli(
            capsys, "run", "--model", "openai/gpt-oss-120b", "--gpu", "MI300X", "--latency",
            "roofline", "--max-concurrency", str(clients), "--arrival", "offline",
            "--length-dist", "constant", "--prompt-tokens", "1024", "--output-tokens", "1024",
            "--num-requests", str(2 * clients), "--json",
        )  # fmt: skip
        assert code == 0, err
        tps.append(json.loads(out)["output_tps"])
    assert tps[1] >= 1.8 * tps[0], tps


def test_data_parallel_ranks_split_the_experts_by_hand():
    """Two data-parallel ranks (vLLM's FusedMoEParallelConfig flattens tp
    across dp): each GPU holds and reads half the routed experts, touched by
    both ranks' tokens, and all-gathers/reduce-scatters 2 x (D - 1) x 2,048
    bf16 values per token per MoE layer over the link; the pool grows by the
    bytes freed. Dense models and one rank are unchanged."""
    one = RooflineLatency("qwen3-30b-a3b", "RTX-PRO-6000").floats()
    two = RooflineLatency("qwen3-30b-a3b", "RTX-PRO-6000", data_parallel_size=2).floats()
    g = hardware.gpu("RTX-PRO-6000")
    assert two[7] == pytest.approx(48 * EXPERTS * 2 / 2) and one[7] == pytest.approx(
        48 * EXPERTS * 2
    )
    assert two[2] == pytest.approx(one[2])  # attention, router, embeddings: replicated
    assert two[8] == pytest.approx(2 * math.log1p(-8 / 128))
    assert two[0] == one[0]  # each rank computes its own tokens' share of expert FLOPs
    assert two[6] - one[6] == pytest.approx(2 * 1 * 2048 * 48 * 2 / g.link_bytes_per_s)
    m = hardware.model("qwen3-30b-a3b")
    assert m.weight_bytes(1, 2) == pytest.approx(m.weight_bytes(1) - 48 * EXPERTS * 2 / 2)
    one_pool = hardware.num_gpu_blocks(m, g, 0.9)
    two_pool = hardware.num_gpu_blocks(m, g, 0.9, dp=2)
    page = hardware.kv_page_bytes(m, 16)
    assert two_pool - one_pool == pytest.approx(48 * EXPERTS * 2 / 2 / page, abs=1)
    dense = RooflineLatency("llama-3.1-8b", "H100", data_parallel_size=2).floats()
    assert dense == RooflineLatency("llama-3.1-8b", "H100").floats()
