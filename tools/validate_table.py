"""Print docs/validate.md's table: every shipped real run replayed by
``plan validate`` with every step-time backend (the roofline at its default
efficiencies; aiconfigurator-core's measured tables where it has data for the
GPU and model, with the optional extra ``aic`` installed), signed errors of
the means and of throughput. Run: ``python tools/validate_table.py`` (about
two minutes). It also writes ``planner/data/step_time_validation.json``
(``planner.latency.validated``): per step-time model, the TPOT errors and
their median absolute value."""

from __future__ import annotations

import datetime
import json
import statistics
import subprocess
import sys
from pathlib import Path

RUNS = Path(__file__).resolve().parents[1] / "planner" / "data" / "real-runs-llmservingsim"
# (folder, extra options): the runs name the base Llama-3.1-8B (the catalog holds
# the Instruct config, the same shapes); the RTX PRO 6000 runs record no GPU name.
# Qwen3-30B-A3B-Instruct-2507 has Qwen3-30B-A3B's shapes (its longer
# max_position_embeddings aside, which no request of the run comes near).
PRO = ["--gpu", "RTX-PRO-6000"]
CASES = [
    ("RTX4090_Llama-3.1-8B", ["--model", "llama-3.1-8b"]),
    ("RTXPRO6000_Llama-3.1-8B", ["--model", "llama-3.1-8b", *PRO]),
    ("RTXPRO6000_Qwen3-32B", PRO),
    ("RTXPRO6000_Qwen3-30B-A3B-Instruct-2507", ["--model", "qwen3-30b-a3b", *PRO]),
]
BACKENDS = ("roofline", "measured")
OUT = RUNS.parent / "step_time_validation.json"


def table() -> tuple[list[str], dict[str, dict[str, float]]]:
    """The markdown table's lines and, per backend, each replayed run's TPOT error."""
    lines = [
        "| run | step time | blocks | TTFT mean | TPOT mean | E2E mean | throughput |",
        "|---|---|---|---|---|---|---|",
    ]
    tpot: dict[str, dict[str, float]] = {b: {} for b in BACKENDS}
    for name, extra in CASES:
        for backend in BACKENDS:
            line, err = _row(name, backend, [*extra, "--latency", backend])
            lines.append(line)
            if err is not None:
                tpot[backend][name] = err
    return lines, tpot


def main() -> None:
    print(f"Run {datetime.date.today()} with `python tools/validate_table.py`.\n")
    lines, tpot = table()
    print("\n".join(lines))
    _write(tpot)


def _write(tpot: dict[str, dict[str, float]]) -> None:
    kinds = {
        b: {
            "tpot_error": runs,
            "median_abs_tpot_error": statistics.median(abs(e) for e in runs.values())
            if runs
            else None,
        }
        for b, runs in tpot.items()
    }
    doc = {
        "about": "Signed error of the mean TPOT (predicted / measured - 1) of each shipped "
        "real run replayed by plan validate, per step-time model, and the median of their "
        "absolute values (planner.latency.validated).",
        "date": str(datetime.date.today()),
        "script": "tools/validate_table.py",
        "kinds": kinds,
    }
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(OUT)


def _row(name: str, backend: str, options: list[str]) -> tuple[str, float | None]:
    """The table row of one run and backend, and its TPOT error (None: not replayed)."""
    cmd = [sys.executable, "-m", "planner.cli", "validate", str(RUNS / name), *options, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        why = p.stderr.strip().removeprefix("plan: error: ").replace(str(RUNS) + "/", "")
        return f"| {name} | {backend} | not replayed: {why} |||||", None
    o = json.loads(p.stdout)
    err = {(r["metric"], r["stat"]): r["error"] for r in o["comparison"]}
    cells = [f"{err[k]:+.1%}" for k in (("ttft_s", "mean"), ("tpot_s", "mean"),
                                        ("e2e_s", "mean"), ("throughput_rps", ""))]  # fmt: skip
    dp = o.get("data_parallel_size", 1)
    blocks = f"{o['num_gpu_blocks']:,}" + (f" per rank, DP {dp}" if dp > 1 else "")
    line = f"| {name} | {backend} | {blocks} | " + " | ".join(cells) + " |"
    return line, float(err[("tpot_s", "mean")])


if __name__ == "__main__":
    main()
