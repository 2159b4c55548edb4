"""plan calibrate on request-level results (a vllm bench serve --save-detailed
JSON): the fit recovers the step-time model that produced the results, and
bad files exit 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import run_cli
from planner.answers import calibrate as creq
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.latency.fit import CalibrationError
from planner.latency.step_time import LinearLatency, RooflineLatency
from planner.metrics import per_request
from planner.workload.arrays import LengthDist, Workload, synthetic

CFG = SchedulerConfig(num_gpu_blocks=4000, max_num_seqs=64, max_num_batched_tokens=2048)
TRUE_BETA = (7000.0, 30.0, 9.0)  # us: not a grid point of the fit
BASE = LinearLatency((0.0, 0.0, 0.0), (5752.71, 17.25, 6.00))


def workload(n: int = 160, rate: float = 6.0) -> Workload:
    wl = synthetic(
        n,
        rate,
        LengthDist("gaussian", 600, 300, 16, 2000),
        LengthDist("gaussian", 120, 60, 1, 400),
        arrival="poisson",
        seed=3,
    )
    return Workload(wl.arrival_s - wl.arrival_s[0], wl.prompt_tokens, wl.output_tokens)


def bench_json(path: Path, wl: Workload, lat, start: float = 1000.0, **extra) -> Path:
    """A vllm bench serve --save-detailed result whose requests got the TTFT
    and TPOT the simulator gives under ``lat`` (ITLs: equal gaps)."""
    q = per_request(simulate([CFG], wl, lat))
    ttft, tpot = q["ttft"][0], q["tpot"][0]
    assert q["done"][0].all()
    out = wl.output_tokens.tolist()
    doc = {
        "start_times": (wl.arrival_s + start).tolist(),
        "input_lens": wl.prompt_tokens.tolist(),
        "output_lens": out,
        "ttfts": ttft.tolist(),
        "itls": [[float(g)] * (n - 1) if n > 1 else [] for g, n in zip(tpot, out, strict=True)],
        "errors": [""] * len(out),
        **extra,
    }
    path.write_text(json.dumps(doc))
    return path


def test_linear_fit_recovers_the_coefficients_that_made_the_results(tmp_path):
    wl = workload()
    path = bench_json(tmp_path / "r.json", wl, LinearLatency((0.0, 0.0, 0.0), TRUE_BETA))
    fit = creq.fit_requests(creq.read_bench_result(path), CFG, BASE, "bench")
    b = fit.latency.beta  # type: ignore[union-attr]
    assert b[1] == pytest.approx(TRUE_BETA[1], rel=0.05)  # per prefill token
    # At this load a decode step holds a few requests: beta0 and beta2 are
    # told apart only through the step time they give there.
    for d in (1, 4, 8):
        assert b[0] + d * b[2] == pytest.approx(TRUE_BETA[0] + d * TRUE_BETA[2], rel=0.05)
    assert fit.tpot_err < 0.02 and fit.ttft_err < 0.10
    assert fit.requests == wl.num_requests and fit.failed == 0
    assert fit.options.startswith("--latency linear --alpha-coeffs 0,0,0 --beta-coeffs ")


def test_a_fit_from_the_true_model_is_the_true_model(tmp_path):
    """Starting at the truth, the grid's 1 x 1 point replays the results exactly."""
    wl = workload(80)
    truth = LinearLatency((0.0, 0.0, 0.0), TRUE_BETA)
    fit = creq.fit_requests(
        creq.read_bench_result(bench_json(tmp_path / "r.json", wl, truth)), CFG, truth, "b"
    )
    assert fit.latency.beta == pytest.approx(TRUE_BETA, rel=1e-9)  # type: ignore[union-attr]
    assert fit.ttft_err < 1e-12 and fit.tpot_err < 1e-12  # the ITL sum rounds


def test_roofline_fit_recovers_mfu_and_mbu(tmp_path):
    wl = workload(120, 4.0)
    truth = RooflineLatency("llama-3.1-8b", "H100", mfu=0.35, mbu=0.6)
    path = bench_json(tmp_path / "r.json", wl, truth)
    base = RooflineLatency("llama-3.1-8b", "H100")
    fit = creq.fit_requests(creq.read_bench_result(path), CFG, base, "bench")
    assert fit.latency.mbu == pytest.approx(0.6, rel=0.06)  # type: ignore[union-attr]
    assert fit.latency.mfu == pytest.approx(0.35, rel=0.15)  # type: ignore[union-attr]
    assert fit.tpot_err < 0.05


def test_failed_requests_are_left_out_and_counted(tmp_path):
    wl = workload(40)
    path = bench_json(tmp_path / "r.json", wl, BASE)
    doc = json.loads(path.read_text())
    doc["errors"][3] = "Bad Request"
    doc["output_lens"][5], doc["itls"][5] = 0, []  # as vLLM bench writes a request with no output
    path.write_text(json.dumps(doc))
    run = creq.read_bench_result(path)
    assert run.failed == 2 and len(run.prompt) == 38
    assert run.arrival_s[0] == 0.0 and np.all(np.diff(run.arrival_s) >= 0)


def test_cli_prints_the_options_and_the_percentiles(capsys, tmp_path):
    path = bench_json(tmp_path / "r.json", workload(60), LinearLatency((0.0, 0.0, 0.0), TRUE_BETA))
    code, out, err = run_cli(
        capsys, "calibrate", str(path), "--num-gpu-blocks", "4000", "--max-num-seqs", "64"
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("--latency linear --alpha-coeffs ")
    assert lines[1] == "num_gpu_blocks 4,000 (given)"
    assert "median |relative error| TTFT" in out and "TPOT p99" in out
    code, out, err = run_cli(
        capsys, "calibrate", str(path), "--num-gpu-blocks", "4000", "--max-num-seqs", "64", "--json"
    )
    assert code == 0 and json.loads(out)["requests"] == 60


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d.pop("itls"), "'itls'"),
        (lambda d: d.update(ttfts=d["ttfts"][:-1]), "'ttfts' is not a list"),
        (lambda d: d.update(input_lens=["x"] * len(d["input_lens"])), "not a number"),
        (lambda d: d.update(output_lens=[-1] * len(d["output_lens"])), "in 0..2,147,483,647"),
        (lambda d: d.update(errors=["boom"] * len(d["errors"])), "successful requests"),
        (lambda d: d.update({k: [] for k in d}), "holds no requests"),
        (lambda d: d.update(errors={"a": 1}), "'errors' is not a list"),
        (lambda d: d.update(errors=5), "'errors' is not a list"),
        (lambda d: d.update(errors="boom"), "'errors' is not a list"),
        (lambda d: d.update(errors=[""] * 10), "'errors' is not a list of 20"),
        (lambda d: d["errors"].__setitem__(2, ["x"]), "'errors'[2] is ['x'], not a string"),
        (lambda d: d["input_lens"].__setitem__(1, "503"), "'input_lens'[1] is '503'"),
        (lambda d: d["output_lens"].__setitem__(1, True), "'output_lens'[1] is True"),
        (
            lambda d: d["ttfts"].__setitem__(3, 1e300),
            "'ttfts' needs finite numbers in 0..1,000,000,000",
        ),
        (lambda d: d["ttfts"].__setitem__(3, 0.0), "request 3 has TTFT 0"),
        (lambda d: d["itls"].__setitem__(0, "0.01"), "'itls'[0] is '0.01', not a list"),
        (lambda d: d["itls"].__setitem__(0, [0.01] * 5000), "5,000 gaps for a"),
        (lambda d: d.update(itls=[[] for _ in d["itls"]]), "no inter-token gaps"),
        (
            lambda d: d.update(output_lens=[1] * len(d["output_lens"]), itls=[[]] * len(d["itls"])),
            "no successful request has 2 or more output tokens",
        ),
    ],
)
def test_bad_bench_results_are_one_line(capsys, tmp_path, edit, needle):
    path = bench_json(tmp_path / "r.json", workload(20), BASE)
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    code, out, err = run_cli(capsys, "calibrate", str(path), "--num-gpu-blocks", "4000")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_not_json_and_server_options_on_a_steps_csv_are_refused(capsys, tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text("{not json")
    code, _, err = run_cli(capsys, "calibrate", str(bad), "--num-gpu-blocks", "4000")
    assert code == 2 and "not a readable JSON file" in err
    steps = Path(__file__).parents[1] / "docs" / "calibrate_example.csv"
    code, _, err = run_cli(capsys, "calibrate", str(steps), "--max-num-seqs", "64")
    assert code == 2 and "--max-num-seqs describes the server" in err
    with pytest.raises(CalibrationError, match="'start_times'"):
        (tmp_path / "e.json").write_text("{}")
        creq.read_bench_result(tmp_path / "e.json")


def test_a_result_without_a_pool_is_refused(capsys, tmp_path):
    path = bench_json(tmp_path / "r.json", workload(20), BASE)
    code, _, err = run_cli(capsys, "calibrate", str(path))
    assert code == 2 and "needs the pool" in err


def test_a_request_longer_than_max_model_len_is_refused_naming_the_length(capsys, tmp_path):
    wl = workload(20)
    path = bench_json(tmp_path / "r.json", wl, BASE)
    longest = int((wl.prompt_tokens + wl.output_tokens).max())
    code, _, err = run_cli(
        capsys, "calibrate", str(path), "--num-gpu-blocks", "4000", "--max-model-len", "500"
    )
    assert code == 2 and f"at least {longest:,}" in err


def test_requests_a_small_pool_cannot_serve_are_named(tmp_path):
    wl = workload(30)
    path = bench_json(tmp_path / "r.json", wl, BASE)
    longest = int((wl.prompt_tokens + wl.output_tokens).max())
    # Too few blocks for the longest request (the null block takes one more):
    # it gets its first token, then can never grow; every later one waits.
    small = SchedulerConfig(num_gpu_blocks=-(-longest // 16), max_num_seqs=64)
    first_stuck = int(np.argmax(wl.prompt_tokens + wl.output_tokens))
    assert 0 < first_stuck < wl.num_requests - 1
    fit = creq.fit_requests(creq.read_bench_result(path), small, BASE, "b")
    assert fit.requests == first_stuck + 1
    assert fit.unserved == wl.num_requests - first_stuck - 1
    assert f"no first token to {fit.unserved:,} of the run's requests" in fit.describe()


def test_printed_options_replay_the_reported_fit(capsys, tmp_path):
    """Roofline with a kept overhead and alpha: the options name them, and
    their values are the rounded ones the figures come from."""
    wl = workload(60)
    truth = RooflineLatency("llama-3.1-8b", "H100", mfu=0.35, mbu=0.6, overhead_us=3000.0)
    path = bench_json(tmp_path / "r.json", wl, truth)
    base = RooflineLatency("llama-3.1-8b", "H100", overhead_us=3000.0, alpha=(500.0, 0.0, 0.0))
    fit = creq.fit_requests(creq.read_bench_result(path), CFG, base, "b")
    assert "--step-overhead-us 3000" in fit.options and "--alpha-coeffs 500,0,0" in fit.options
    mfu = float(fit.options.split("--mfu ")[1].split()[0])
    assert fit.latency.mfu == mfu  # type: ignore[union-attr]
    q = per_request(simulate([CFG], creq.read_bench_result(path).workload("b"), fit.latency))
    assert np.percentile(q["ttft"][0], 50) == pytest.approx(fit.table["TTFT p50"][1], rel=1e-12)


def test_a_best_point_on_the_edge_moves_the_search(tmp_path):
    """Results 10x slower than the base: the first grid (factors 1/4..4) ends
    on its edge, and the search moves on to the answer."""
    wl = workload(60)
    slow = LinearLatency((0.0, 0.0, 0.0), tuple(10 * b for b in BASE.beta))
    path = bench_json(tmp_path / "r.json", wl, slow)
    fit = creq.fit_requests(creq.read_bench_result(path), CFG, BASE, "b")
    assert fit.latency.beta[1] == pytest.approx(slow.beta[1], rel=0.05)  # type: ignore[union-attr]
    assert fit.tpot_err < 0.02 and not fit.at_edge


def test_json_output_has_no_nan(capsys, tmp_path):
    path = bench_json(tmp_path / "r.json", workload(30), BASE)
    code, out, err = run_cli(capsys, "calibrate", str(path), "--num-gpu-blocks", "4000", "--json")
    assert code == 0, err
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json"))
    assert doc["unserved"] == 0 and doc["at_edge"] == []


def test_a_json_named_otherwise_gets_a_hint(capsys, tmp_path):
    path = bench_json(tmp_path / "r.json", workload(20), BASE)
    txt = tmp_path / "r.txt"
    txt.write_text(path.read_text())
    code, _, err = run_cli(capsys, "calibrate", str(txt))
    assert code == 2 and "looks like JSON" in err


def test_printed_line_carries_the_server_options_of_the_replay(capsys, tmp_path):
    """The replay's pool and non-default scheduler options are on the printed
    line, so it pastes into plan run as it is (second tryout: the bench-JSON
    fit left out --max-num-batched-tokens 8192)."""
    path = bench_json(tmp_path / "r.json", workload(20), BASE)
    args = ("--num-gpu-blocks", "4000", "--max-num-batched-tokens", "8192")
    code, out, err = run_cli(capsys, "calibrate", str(path), *args, "--async-scheduling")
    assert code == 0, err
    line = out.splitlines()[0].split()
    for flag in (*args, "--async-scheduling"):
        assert flag in line, line
    # every setting the replay ran with is stated: plan run's defaults vary with --model/--gpu
    for flag in ("--max-num-seqs", "--max-model-len", "--block-size"):
        assert flag in line, line
    code, _, err = run_cli(capsys, "run", *line, "--num-requests", "5", "--json")
    assert code == 0, err


def test_a_sized_pool_is_printed_as_blocks(capsys, tmp_path):
    """A pool sized from --model/--gpu (and --gpu-memory-utilization) is
    printed as the --num-gpu-blocks the replay ran on (third tryout: pasted,
    the line sized another pool)."""
    path = bench_json(tmp_path / "r.json", workload(20), BASE)
    args = ("--latency", "roofline", "--model", "llama-3.1-8b", "--gpu", "H100")
    code, out, err = run_cli(
        capsys, "calibrate", str(path), *args, "--gpu-memory-utilization", "0.8"
    )
    assert code == 0, err
    line = out.splitlines()[0].split()
    blocks = int(line[line.index("--num-gpu-blocks") + 1])
    assert f"num_gpu_blocks {blocks:,} (derived" in out
    code, out, err = run_cli(capsys, "run", *line, "--num-requests", "5", "--json")
    assert code == 0 and json.loads(out)["num_gpu_blocks"] == blocks, err
