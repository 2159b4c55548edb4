"""Print docs/validate.md's table: every shipped real run replayed by
``plan validate`` with the roofline at its default efficiencies, signed errors of the means and
of throughput. Run: ``python tools/validate_table.py`` (about a minute)."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

RUNS = Path(__file__).resolve().parents[1] / "planner" / "data" / "real-runs-llmservingsim"
# (folder, extra options): the runs name the base Llama-3.1-8B (the catalog holds
# the Instruct config, the same shapes); the RTX PRO 6000 runs record no GPU name.
ROOF = ["--latency", "roofline"]
PRO = ["--gpu", "RTX-PRO-6000", *ROOF]
CASES = [
    ("RTX4090_Llama-3.1-8B", ["--model", "llama-3.1-8b", *ROOF]),
    ("RTXPRO6000_Llama-3.1-8B", ["--model", "llama-3.1-8b", *PRO]),
    ("RTXPRO6000_Qwen3-32B", PRO),
    ("RTXPRO6000_Qwen3-30B-A3B-Instruct-2507", PRO),
]


def main() -> None:
    print(f"Run {datetime.date.today()} with `python tools/validate_table.py`.\n")
    print("| run | blocks | TTFT mean | TPOT mean | E2E mean | throughput |")
    print("|---|---|---|---|---|---|")
    for name, extra in CASES:
        cmd = [sys.executable, "-m", "planner.cli", "validate", str(RUNS / name), *extra, "--json"]
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if p.returncode != 0:
            print(
                f"| {name} | not replayed: {p.stderr.strip().removeprefix('plan: error: ')} |||||"
            )
            continue
        o = json.loads(p.stdout)
        err = {(r["metric"], r["stat"]): r["error"] for r in o["comparison"]}
        cells = [f"{err[k]:+.1%}" for k in (("ttft_s", "mean"), ("tpot_s", "mean"),
                                            ("e2e_s", "mean"), ("throughput_rps", ""))]  # fmt: skip
        print(f"| {name} | {o['num_gpu_blocks']:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
