"""Every ``plan`` command runs once on a small input (issue 31, the fast subset).

``pytest -m "not slow"`` keeps this file: a newcomer's first run exercises
each command end to end (parse, simulate, print or write) in seconds, while
the slow files check them in depth. A command added to the app without a
case here fails ``test_every_command_has_a_case``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

from helpers import run_cli
from planner.cli.commands import app
from planner.install_check import VERSION

ROOT = Path(__file__).parents[1]
SIZE_SPEC = str(ROOT / "tests" / "data" / "size_small.toml")
CALIBRATE_CSV = str(ROOT / "docs" / "calibrate_example.csv")
SPEC = """
name = "tiny"
horizon_s = 30.0
[workload]
kind = "synthetic"
num_requests = 40
rate = 4
[workload.prompt]
kind = "constant"
mean = 200
[workload.output]
kind = "constant"
mean = 50
[axes]
max_num_seqs = [8, 32]
num_gpu_blocks = [200, 2000]
"""


def _sweep_then_heatmap(capsys, tmp: Path) -> list[tuple[int, str, str]]:
    spec = tmp / "tiny.toml"
    spec.write_text(SPEC)
    out = tmp / "tiny"
    first = run_cli(capsys, "sweep", str(spec), "--out", str(out))
    png = tmp / "tiny.png"
    second = run_cli(capsys, "heatmap", str(out), "--out", str(png))
    assert png.stat().st_size > 1000
    return [first, second]


CASES = {
    "run": ["run", "--num-requests", "30", "--json"],
    "check": ["check", "--num-gpu-blocks", "64", "--max-model-len", "1024"],
    "safe-limit": ["safe-limit", "--num-gpu-blocks", "2000", "--num-requests", "40", "--json"],
    "max-rate": [
        "max-rate",
        "--num-gpu-blocks",
        "60000",
        "--num-requests",
        "40",
        "--ttft-slo",
        "2",
        "--json",
    ],  # fmt: skip
    "models": ["models"],
    "calibrate": ["calibrate", CALIBRATE_CSV],
    "size": ["size", SIZE_SPEC, "--gpus", "H100", "--max-replicas", "1", "--json"],
    "bench": ["bench", "--grid", "2", "--no-reference"],
    "validate": [
        "validate",
        str(ROOT / "planner" / "data" / "real-runs-llmservingsim" / "RTX4090_Llama-3.1-8B"),
        "--model",
        "llama-3.1-8b",
        "--latency",
        "roofline",
    ],
}
EXPECTED = {"check": 1}  # a 64-block pool at max_model_len 1024 is unsafe: exit 1


def test_every_command_has_a_case():
    commands = set(typer.main.get_command(app).commands)
    assert commands == set(CASES) | {"sweep", "heatmap", "report"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_command_runs_once(capsys, tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)  # plan size writes results/size-NAME here
    argv = list(CASES[name])
    if name == "size":
        argv += ["--out", str(tmp_path / "size")]
    code, out, err = run_cli(capsys, *argv)
    assert code == EXPECTED.get(name, 0), f"plan {' '.join(argv)}: exit {code}\n{err}"
    assert out.strip(), err
    if "--json" in argv:  # standard JSON: no bare NaN or Infinity; says who made it
        rec = json.loads(out, parse_constant=_refuse)
        assert rec["planner_version"] == VERSION and rec["vllm_version_mirrored"] == "0.33.0"


def _refuse(name: str) -> None:
    raise AssertionError(f"--json wrote {name}, which is not JSON")


def test_run_out_and_report_run_once(capsys, tmp_path):
    """plan report draws a result folder: here plan run --out's."""
    code, _, err = run_cli(capsys, "run", "--num-requests", "20", "--out", str(tmp_path / "r"))
    assert code == 0, err
    code, _, err = run_cli(capsys, "report", str(tmp_path / "r"))
    assert code == 0, err
    assert (tmp_path / "r" / "report.html").stat().st_size > 10_000


def test_sweep_and_heatmap_run_once(capsys, tmp_path):
    for code, _, err in _sweep_then_heatmap(capsys, tmp_path):
        assert code == 0, err
