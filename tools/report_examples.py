"""The screenshots of ``plan report``'s four page kinds in docs/report.md.

    python tools/report_examples.py            # screenshots from the shipped results
    python tools/report_examples.py --remake   # first remake the shipped results

The shipped example results live in docs/examples/report/: a sweep (the
``sweep.toml`` beside them), a sizing (tests/data/size_small.toml on H100 and
L40S), a run (scenario S1's server, 200 requests at 20 req/s) and a
validation (the shipped RTX 4090 run on the roofline), each with
only the files ``plan report`` reads. Each page is rendered with
``plan report`` into a temporary folder and photographed at 1,280 px wide by
Playwright in Debian's chromium (``apt-get install chromium``), the top 1,400 px,
as docs/report-{sweep,size,run,validate}.png.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples" / "report"
KEEP = {  # the files plan report reads, per kind
    "sweep": ("data.parquet", "_manifest.json"),
    "size": ("answer.json", "size.parquet", "pareto.png"),
    "run": ("run.json", "requests.parquet", "steps.parquet"),
    "validate": ("validate.json", "requests.parquet"),
}
MAKE = {
    "sweep": ["sweep", str(EXAMPLES / "sweep.toml")],
    "size": ["size", str(ROOT / "tests" / "data" / "size_small.toml"), "--gpus", "H100,L40S",
             "--max-replicas", "2"],
    "run": ["run", "--num-requests", "200", "--rate", "20", "--ttft-slo", "1"],
    "validate": ["validate", str(ROOT / "planner" / "data" / "real-runs-llmservingsim" /
                 "RTX4090_Llama-3.1-8B"), "--model", "llama-3.1-8b", "--latency", "roofline"],
}  # fmt: skip
HEIGHT = 1400


def plan(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "planner.cli", *args], check=True, cwd=ROOT)


def remake(tmp: Path) -> None:
    """Run each example into ``tmp``, then keep its ``KEEP`` files in EXAMPLES."""
    for kind, argv in MAKE.items():
        out = tmp / kind
        plan(*argv, "--out", str(out))
        dest = EXAMPLES / kind
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for name in KEEP[kind]:
            shutil.copy2(out / name, dest / name)


def screenshots(tmp: Path) -> None:
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        sys.exit("report_examples: no chromium binary (apt-get install chromium)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        for kind in KEEP:
            page_file = tmp / f"{kind}.html"
            plan("report", str((EXAMPLES / kind).relative_to(ROOT)), "--out", str(page_file))
            page = browser.new_page(viewport={"width": 1280, "height": HEIGHT})
            page.goto(page_file.as_uri())
            png = ROOT / "docs" / f"report-{kind}.png"
            page.screenshot(path=str(png), clip={"x": 0, "y": 0, "width": 1280, "height": HEIGHT})
            print(f"wrote {png.relative_to(ROOT)}")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--remake", action="store_true", help="remake the shipped results first")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.remake:
            remake(Path(tmp))
        screenshots(Path(tmp))


if __name__ == "__main__":
    main()
