"""Figures the docs quote from a ``plan`` command, rerun (issue 31): each row
names the page, the text it quotes, the command (shown beside the figure on
the page) and what the command prints, so a change to the code that moves a
figure fails here until the page is updated."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_cli

DOCS = Path(__file__).parents[1] / "docs"
L8 = ["--model", "llama-3.1-8b", "--gpu", "H100"]
G27 = ["--model", "gemma-3-27b", "--gpu", "H100"]
S1_SERVER = ["--max-num-seqs", "256", "--max-num-batched-tokens", "2048"]
MAX_RATE = [
    "max-rate", *L8, "--latency", "roofline", "--trace-file",
    "planner/data/azure-llm-2023/AzureLLMInferenceTrace_conv.csv", "--trace-duration", "600",
    "--max-model-len", "16384", "--ttft-slo", "2", "--tpot-slo", "0.05",
]  # fmt: skip
SPEC_RUN = [
    "run", *L8, "--latency", "roofline", "--num-requests", "1", "--no-enable-prefix-caching",
    "--spec-acceptance", "0.7", "--speculative-config",
]  # fmt: skip
# (page, quoted on the page, plan argv, printed by it)
FIGURES = [
    ("traces-and-hardware.md", "that is 27,515 blocks",
     ["check", *L8, "--gpu-memory-utilization", "0.9"], "pool: 27,515 blocks"),
    ("traces-and-hardware.md", "num_gpu_blocks 28,326 (derived from presets;",
     ["check", *L8], "pool: 28,326 blocks"),
    ("traces-and-hardware.md", "gets 14,899 blocks at those defaults",
     ["check", *G27], "pool: 14,899 blocks"),
    ("traces-and-hardware.md", "and 15,752 at max_num_seqs 256",
     ["check", *G27, *S1_SERVER, "--gpu-memory-utilization", "0.9"], "pool: 15,752 blocks"),
    ("speculative-decoding.md", "28,326 blocks without a drafter", ["check", *L8],
     "pool: 28,326 blocks"),
    ("speculative-decoding.md", "27,235 with EAGLE,",
     [*SPEC_RUN, '{"method":"eagle","num_speculative_tokens":3,"model":"h"}'],
     "num_gpu_blocks 27,235 (derived"),
    ("speculative-decoding.md", "26,734 with EAGLE-3",
     [*SPEC_RUN, '{"method":"eagle3","num_speculative_tokens":3,"model":"h"}'],
     "num_gpu_blocks 26,734 (derived"),
    ("capacity-checks.md", "0.424 for 8,193 blocks",
     ["check", *L8, "--max-model-len", "131072", "--gpu-memory-utilization", "0.3"],
     "--gpu-memory-utilization 0.424 or more (sized as above, it gives 8,193 blocks"),
    ("max-rate.md", "max rate is 10.536 req/s; 23.2% faster: 19.745 req/s", MAX_RATE,
     "max rate is 10.536 req/s; 23.2% faster: 19.745 req/s"),
    ("max-rate.md", "finds 13.96 req/s (TPOT p99 49 ms at that rate)", MAX_RATE,
     "(13.962 req/s, 3,634 output tokens/s); at it: TTFT p99 592 ms, TPOT p99 49 ms"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "page, quoted, argv, printed", FIGURES, ids=[f"{p}: {q[:30]}" for p, q, _, _ in FIGURES]
)
def test_the_quoted_figure_is_what_the_command_prints(capsys, page, quoted, argv, printed):
    text = " ".join((DOCS / page).read_text().split())
    assert quoted in text, f"docs/{page} no longer quotes: {quoted}"
    code, out, err = run_cli(capsys, *argv)
    assert printed in " ".join(out.split()), f"plan {' '.join(argv)} no longer prints: {printed}"
