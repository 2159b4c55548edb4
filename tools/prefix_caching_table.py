"""docs/prefix-caching.md's Mooncake table: prefix caching off and on at four
pool sizes, on the Mooncake conversation trace's first 1,200 s.

    .venv/bin/python tools/prefix_caching_table.py

Llama-3.1-8B on H100 (linear step time of the preset), max_model_len 131,072,
max_num_seqs 256, max_num_batched_tokens 2,048, synchronous scheduling, run to
completion. Pools: 8,000 and 16,000 blocks, what the H100 preset derives at
gpu_memory_utilization 0.9 (``resolve.num_gpu_blocks``) and 1,000,000 (an
unbounded reference, not a GPU). Prints the page's table, one row per run
(``tests/test_doc_tables.py`` checks the page holds these rows).
"""

from __future__ import annotations

from plan_json import plan_json

from planner import resolve

BASE = [
    "run", "--trace-file", "planner/data/mooncake-fast25/conversation_trace.jsonl",
    "--trace-format", "mooncake", "--trace-duration", "1200", "--model", "llama-3.1-8b",
    "--gpu", "H100", "--max-model-len", "131072", "--max-num-seqs", "256",
    "--max-num-batched-tokens", "2048", "--no-async-scheduling",
]  # fmt: skip
HEADER = [
    "| num_gpu_blocks | caching | completed | preemptions | TTFT p99 | hit rate |",
    "|---|---|---|---|---|---|",
]


def preset_blocks() -> int:
    """The H100 preset's pool for Llama-3.1-8B at 0.9 and this server."""
    blocks, _ = resolve.num_gpu_blocks(
        None, "llama-3.1-8b", "H100", 0.9, 16, 1, 0, max_num_seqs=256, max_num_batched_tokens=2048
    )
    return blocks


def row(blocks: int, caching: bool) -> str:
    flag = "--enable-prefix-caching" if caching else "--no-enable-prefix-caching"
    r = plan_json([*BASE, "--num-gpu-blocks", str(blocks), flag])
    hit = f"{100 * r['prefix_cache_hit_rate']:.1f}%" if caching else "–"
    return (
        f"| {blocks:,} | {'on' if caching else 'off'} | {r['completed']:,} | "
        f"{r['preemptions']:,} | {r['ttft_s_p99']:.1f} s | {hit} |"
    )


def table() -> list[str]:
    rows = [row(b, c) for b in (8000, 16000, preset_blocks(), 1_000_000) for c in (False, True)]
    return HEADER + rows


if __name__ == "__main__":
    print("\n".join(table()))
