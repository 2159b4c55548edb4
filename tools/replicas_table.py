"""docs/replicas.md's table: replicas and routers on the Azure conversation
trace at 8x, Llama-3.1-8B on H100 with the roofline step time.

    .venv/bin/python tools/replicas_table.py

The sizing example's server (max_num_seqs 256, max_num_batched_tokens 2,048,
gpu_memory_utilization 0.9, prefix caching and async scheduling off,
max_model_len 16,384), SLOs TTFT p99 <= 2 s and TPOT p99 <= 50 ms. Prints
the page's table (``tests/test_doc_tables.py`` checks the page holds it).
"""

from __future__ import annotations

from plan_json import plan_json

BASE = [
    "run", "--trace-file", "planner/data/azure-llm-2023/AzureLLMInferenceTrace_conv.csv",
    "--rate-scale", "8", "--model", "llama-3.1-8b", "--gpu", "h100", "--latency", "roofline",
    "--max-model-len", "16384", "--ttft-slo", "2", "--tpot-slo", "0.05",
    "--max-num-seqs", "256", "--max-num-batched-tokens", "2048",
    "--gpu-memory-utilization", "0.9", "--no-enable-prefix-caching", "--no-async-scheduling",
]  # fmt: skip
RR, LO, LKV = "round_robin", "least_outstanding", "least_kv"
FLEETS = [(1, None), (3, RR), (3, LO), (3, LKV), (4, RR), (4, LO), (4, LKV), (6, RR), (6, LO)]
HEADER = [
    "| replicas | router | TTFT p99 (s) | TPOT p99 (ms) | overloaded | meets both SLOs |",
    "|---:|---|---:|---:|---|---|",
]


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def sig3(x: float) -> str:
    """Three significant figures, trailing zeros kept (49.0), no bare point (487)."""
    return f"{x:#.3g}".rstrip(".")


def row(replicas: int, router: str | None) -> str:
    fleet = ["--replicas", str(replicas)] + (["--router", router] if router else [])
    r = plan_json([*BASE, *fleet])
    return (
        f"| {replicas} | {router or '-'} | {sig3(r['ttft_s_p99'])} | "
        f"{sig3(1e3 * r['tpot_s_p99'])} | {yes(r['overloaded'])} | {yes(r['meets_slo'])} |"
    )


def table() -> list[str]:
    return HEADER + [row(n, router) for n, router in FLEETS]


if __name__ == "__main__":
    print("\n".join(table()))
