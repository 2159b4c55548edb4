"""docs/prefix-caching.md's shared-prefix table: the Azure conversation trace
at 8x with 80% of requests sharing one of four 512-token prefixes, prefix
caching and async scheduling off and on.

    .venv/bin/python tools/shared_prefix_table.py

Llama-3.1-8B on one H100 at gpu_memory_utilization 0.5, max_num_seqs 1,024,
max_num_batched_tokens 2,048, max_model_len 4,096 (the page's second command,
each option on or off by its ``--no-`` form). req/s is ``throughput_rps``
(completions per second). Prints the pool and the page's table
(``tests/test_doc_tables.py`` checks the page holds them).
"""

from __future__ import annotations

from plan_json import plan_json

BASE = [
    "run", "--trace-file", "planner/data/azure-llm-2023/AzureLLMInferenceTrace_conv.csv",
    "--rate-scale", "8", "--model", "llama-3.1-8b", "--gpu", "H100",
    "--gpu-memory-utilization", "0.5", "--max-num-seqs", "1024",
    "--max-num-batched-tokens", "2048", "--max-model-len", "4096", "--prefix-groups", "4",
    "--prefix-len", "512", "--prefix-share", "0.8",
]  # fmt: skip
ROWS = {
    "caching off": ["--no-enable-prefix-caching", "--no-async-scheduling"],
    "caching on": ["--enable-prefix-caching", "--no-async-scheduling"],
    "caching on, async": ["--enable-prefix-caching", "--async-scheduling"],
}
HEADER = ["| | prefill tokens | preemptions | req/s | TTFT p99 |", "|---|---|---|---|---|"]


def run(flags: list[str]) -> dict:
    return plan_json([*BASE, *flags])


def table() -> list[str]:
    """The pool line and the table's lines."""
    rows, blocks = [], set()
    for label, flags in ROWS.items():
        r = run(flags)
        blocks.add(r["num_gpu_blocks"])
        rows.append(
            f"| {label} | {r['prefill_tokens'] / 1e6:.1f} M | {r['preemptions']:,} | "
            f"{r['throughput_rps']:.1f} | {r['ttft_s_p99']:.1f} s |"
        )
    (pool,) = blocks
    return [f"Llama-3.1-8B/H100 at 0.5 utilisation ({pool:,} blocks)", *HEADER, *rows]


if __name__ == "__main__":
    print("\n".join(table()))
