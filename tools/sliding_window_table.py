"""docs/sliding-window.md's synthetic table: one pool, full attention against
two sliding windows.

    .venv/bin/python tools/sliding_window_table.py

400 requests of 2,000 prompt and 4,000 output tokens at 2/s on 3,000 blocks
of 16, max_model_len 16,384, max_num_seqs 128, max_num_batched_tokens 2,048,
the default linear step time (the page's second command, at each
``--sliding-window``). Prints the page's table (``tests/test_doc_tables.py``
checks the page holds it).
"""

from __future__ import annotations

from plan_json import plan_json

BASE = [
    "run", "--num-gpu-blocks", "3000", "--max-model-len", "16384", "--num-requests", "400",
    "--rate", "2", "--prompt-tokens", "2000", "--output-tokens", "4000", "--max-num-seqs", "128",
]  # fmt: skip
WINDOWS = {0: "full (`--sliding-window 0`)", 4096: "window 4,096", 1024: "window 1,024"}
HEADER = [
    "| attention | completed | preemptions | preempted requests | decodes per step "
    "| output tok/s | TTFT p99 s | outcome |",
    "|---|---:|---:|---:|---:|---:|---:|---|",
]


def row(window: int, label: str) -> str:
    r = plan_json([*BASE, "--sliding-window", str(window)])
    return (
        f"| {label} | {r['completed']:,} | {r['preemptions']:,} | {r['preempted_requests']:,} | "
        f"{r['decode_tokens'] / r['steps']:.1f} | {r['output_tps']:,.0f} | "
        f"{r['ttft_s_p99']:.1f} | {r['outcome']} |"
    )


def table() -> list[str]:
    return HEADER + [row(w, label) for w, label in WINDOWS.items()]


if __name__ == "__main__":
    print("\n".join(table()))
