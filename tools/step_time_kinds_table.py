"""docs/step-time-measured.md's table: scenario S1's workload under each
step-time model, Llama-3.1-8B on one H100 with the pool sized from its memory.

    .venv/bin/python tools/step_time_kinds_table.py

S1's synthetic workload (300 requests at 10 req/s) and S1's server settings
(max_num_seqs 256, max_num_batched_tokens 2,048, max_model_len 4,096, caching
and async scheduling off), ``gpu_memory_utilization`` 0.9, once per
``--latency`` kind; the measured kind needs aiconfigurator-core (the ``aic``
or ``test`` extra). Prints the pool and the page's table
(``tests/test_doc_tables.py`` checks the page holds them).
"""

from __future__ import annotations

from plan_json import plan_json

BASE = [
    "run", "--model", "llama-3.1-8b", "--gpu", "H100", "--max-num-seqs", "256",
    "--max-num-batched-tokens", "2048", "--max-model-len", "4096",
    "--gpu-memory-utilization", "0.9", "--no-enable-prefix-caching", "--no-async-scheduling",
]  # fmt: skip
KINDS = {
    "linear": "linear (BLIS seed α/β)",
    "roofline": "roofline (MFU 0.5, MBU 0.8)",
    "measured": "measured (aiconfigurator, vLLM 0.24.0 data)",
}
HEADER = [
    "| step-time model | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | preemptions |",
    "|---|---|---|---|---|---|",
]


def run(kind: str) -> dict:
    return plan_json([*BASE, "--latency", kind])


def table() -> list[str]:
    """The pool line and the table's lines."""
    rows, blocks = [], set()
    for kind, label in KINDS.items():
        r = run(kind)
        blocks.add(r["num_gpu_blocks"])
        rows.append(
            f"| {label} | {r['ttft_s_p50']:.3f} s | {r['ttft_s_p99']:#.3g} s | "
            f"{1e3 * r['tpot_s_p50']:#.3g} ms | {1e3 * r['tpot_s_p99']:#.3g} ms | "
            f"{r['preemptions']:,} |"
        )
    (pool,) = blocks  # one pool: the step time does not size it
    return [f"pool sized from H100 memory, {pool:,} blocks", *HEADER, *rows]


if __name__ == "__main__":
    print("\n".join(table()))
