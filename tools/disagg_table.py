"""docs/disaggregated.md's table: three GPUs as one aggregated fleet or split
into prefill and decode pools, Llama-3.1-8B on H100 (roofline step time).

    .venv/bin/python tools/disagg_table.py

600 synthetic requests (2,000-token prompts, 200 output tokens, both fixed)
at 25 req/s, constant arrivals; vLLM 0.33's defaults for the model and GPU
(async scheduling and prefix caching on). Rows: 3 aggregated replicas
(``--replicas 3``), 1 prefill + 2 decode, 2 prefill + 1 decode, and 2 + 1
over a link 100x slower than the default (0.5 GB/s per GPU). Prints the
page's table (``tests/test_doc_tables.py`` checks the page holds it).
"""

from __future__ import annotations

from plan_json import plan_json

BASE = [
    "run", "--model", "llama-3.1-8b", "--gpu", "h100", "--latency", "roofline",
    "--num-requests", "600", "--rate", "25",
    "--prompt-tokens", "2000", "--prompt-tokens-stdev", "0",
    "--output-tokens", "200", "--output-tokens-stdev", "0",
]  # fmt: skip
HEADER = [
    "| deployment (3 x H100) | output tok/s | TTFT p50 (ms) | TTFT p99 (ms) | TPOT p50 (ms) | "
    "TPOT p99 (ms) | KV load p99 (ms) | overloaded |",
    "|---|---:|---:|---:|---:|---:|---:|---|",
]


def sig3(x: float) -> str:
    """Three significant figures, trailing zeros kept (49.0), no bare point
    (487); from 1,000 on, whole numbers with commas."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:#.3g}".rstrip(".")


def aggregated() -> str:
    r = plan_json([*BASE, "--replicas", "3"])
    return (
        f"| 3 aggregated replicas | {r['output_tps']:,.0f} | {sig3(1e3 * r['ttft_s_p50'])} | "
        f"{sig3(1e3 * r['ttft_s_p99'])} | {sig3(1e3 * r['tpot_s_p50'])} | "
        f"{sig3(1e3 * r['tpot_s_p99'])} | - | {'yes' if r['overloaded'] else 'no'} |"
    )


def split(p: int, d: int, bandwidth: float | None = None) -> str:
    link = [] if bandwidth is None else ["--kv-transfer-bandwidth", str(bandwidth)]
    s = plan_json([*BASE, "--prefill-replicas", str(p), "--replicas", str(d), *link])["summary"]
    what = f"{p} prefill + {d} decode" + ("" if bandwidth is None else f", {bandwidth:g} GB/s link")
    return (
        f"| {what} | {s['output_tps']:,.0f} | {sig3(1e3 * s['ttft_s_p50'])} | "
        f"{sig3(1e3 * s['ttft_s_p99'])} | {sig3(1e3 * s['tpot_s_p50'])} | "
        f"{sig3(1e3 * s['tpot_s_p99'])} | {sig3(1e3 * s['transfer_s_p99'])} | "
        f"{_overloaded(s)} |"
    )


def _overloaded(s: dict) -> str:
    """Which pool falls behind its traffic, if one does."""
    pools = [p for p in ("prefill", "decode") if s[f"{p}_overloaded"]]
    if pools:
        return "yes (" + ", ".join(pools) + ")"
    return "no" if s["overload_judged"] else "not judged (too short)"


def table() -> list[str]:
    return HEADER + [aggregated(), split(1, 2), split(2, 1), split(2, 1, 0.5)]


if __name__ == "__main__":
    print("\n".join(table()))
