"""docs/speculative-decoding.md's table: what n-gram speculative decoding buys
at light, moderate and heavy load, Llama-3.1-8B on one H100 (roofline step time).

    .venv/bin/python tools/spec_decode_table.py

600 synthetic requests (1,000-token prompts, 300 output tokens, both fixed),
constant arrivals at each rate; vLLM 0.33's defaults for the model and GPU
(async scheduling and prefix caching on). Rows: no
drafts, and ngram with k = 3 drafts at acceptance 0 (no draft ever right),
0.3 and 0.8 (alpha, each draft accepted with that probability when the ones
before it were). Then ``plan max-rate`` on the same workload under TPOT p99 <=
20 ms for each. Prints the page's tables (``tests/test_doc_tables.py`` checks
the page holds them).
"""

from __future__ import annotations

from plan_json import plan_json

BASE = [
    "run", "--model", "llama-3.1-8b", "--gpu", "h100", "--latency", "roofline",
    "--num-requests", "600", "--prompt-tokens", "1000", "--prompt-tokens-stdev", "0",
    "--output-tokens", "300", "--output-tokens-stdev", "0",
]  # fmt: skip
RATES = (2, 20, 40)
SPECS = (None, "0", "0.3", "0.8")
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3}'
HEADER = [
    "| rate (req/s) | drafts | output tok/s | TPOT p50 (ms) | TTFT p99 (s) | E2E p50 (s) | "
    "overloaded |",
    "|---:|---|---:|---:|---:|---:|---|",
]


def sig3(x: float) -> str:
    """Three significant figures, trailing zeros kept (49.0), no bare point (487)."""
    return f"{x:#.3g}".rstrip(".")


def row(rate: float, acceptance: str | None) -> str:
    spec = ["--speculative-config", NGRAM, "--spec-acceptance", acceptance] if acceptance else []
    r = plan_json([*BASE, "--rate", str(rate), *spec])
    what = "none" if acceptance is None else f"ngram k=3, acceptance {acceptance}"
    return (
        f"| {rate} | {what} | {r['output_tps']:,.0f} | {sig3(1e3 * r['tpot_s_p50'])} | "
        f"{sig3(r['ttft_s_p99'])} | {sig3(r['e2e_s_p50'])} | {'yes' if r['overloaded'] else 'no'} |"
    )


MAX_RATE_HEADER = [
    "| drafts | max rate, TPOT p99 <= 20 ms (req/s) | TPOT p99 there (ms) | TTFT p99 there (s) |",
    "|---|---:|---:|---:|",
]


def max_rate_row(acceptance: str | None) -> str:
    """``plan max-rate`` on the same workload under TPOT p99 <= 20 ms."""
    spec = ["--speculative-config", NGRAM, "--spec-acceptance", acceptance] if acceptance else []
    argv = ["max-rate", *BASE[1:], "--tpot-slo", "0.02", *spec]
    c = plan_json(argv)["configs"][0]
    what = "none" if acceptance is None else f"ngram k=3, acceptance {acceptance}"
    return (
        f"| {what} | {sig3(c['max_rps'])} | {sig3(1e3 * c['tpot_s_p99_at_max_rate'])} | "
        f"{sig3(c['ttft_s_p99_at_max_rate'])} |"
    )


def table() -> list[str]:
    rows = HEADER + [row(rate, a) for rate in RATES for a in SPECS]
    return rows + [""] + MAX_RATE_HEADER + [max_rate_row(a) for a in SPECS]


if __name__ == "__main__":
    print("\n".join(table()))
