"""Issue 33, item 1 (part): ``plan validate RUN`` replays a real run with the
run's own engine settings and pool and prints predicted against measured;
``plan run --requests-out`` writes the per-request rows it compares."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from helpers import run_cli
from planner.answers import validate as v

RUNS = Path(__file__).resolve().parents[1] / "planner" / "data" / "real-runs-llmservingsim"
RTX4090 = RUNS / "RTX4090_Llama-3.1-8B"
MOE_DP = RUNS / "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507"


def _folder(tmp_path: Path, rows: list[dict], meta: dict | None = None) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps(meta or {"engine_kwargs": {"model": "llama-3.1-8b"}}))
    (d / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


ROW = {"input_toks": 100, "output_toks": 11, "queued_ts": 5.0, "first_token_ts": 5.5,
       "last_token_ts": 6.5}  # fmt: skip


def test_a_run_folder_is_read_with_the_servers_timestamps(tmp_path):
    rows = [ROW, {**ROW, "queued_ts": 7.0, "first_token_ts": 7.25, "last_token_ts": 8.25}]
    r = v.read_run(_folder(tmp_path, rows[::-1]))  # out of order on disk
    assert list(r.arrival_s) == [0.0, 2.0]
    assert list(r.ttft_s) == [0.5, 0.25] and list(r.e2e_s) == [1.5, 1.25]
    assert r.tpot_s[0] == pytest.approx(0.1)  # (6.5 - 5.5) / (11 - 1)
    df = v.compare(r, {"ttft_s": r.ttft_s * 2, "tpot_s": r.tpot_s, "e2e_s": r.e2e_s})
    ttft = df[(df.metric == "ttft_s") & (df.stat == "mean")].iloc[0]
    assert ttft.error == pytest.approx(1.0)  # predicted twice the measured: +100%


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (
            lambda rows: [{k: x for k, x in rows[0].items() if k != "first_token_ts"}],
            "'first_token_ts' must be a number",
        ),  # fmt: skip
        (lambda rows: [{**rows[0], "first_token_ts": 4.0}], "first_token_ts is before"),
        (lambda rows: [{**rows[0], "input_toks": 1e300}], "'input_toks' must be a number"),
        (lambda rows: [{**rows[0], "input_toks": 12.5}], "must be a whole number"),
        (lambda rows: [], "holds no requests"),
        (lambda rows: [{**rows[0], "output_toks": "11"}], "'output_toks' must be a number"),
    ],
)
def test_a_malformed_run_is_one_line(capsys, tmp_path, edit, needle):
    d = _folder(tmp_path, edit([ROW]))
    code, _, err = run_cli(capsys, "validate", str(d), "--gpu", "H100")
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_a_folder_without_requests_is_one_line(capsys, tmp_path):
    (tmp_path / "meta.json").write_text("{}")
    code, _, err = run_cli(capsys, "validate", str(tmp_path))
    assert code == 2 and "no requests.jsonl" in err and err.count("\n") == 1


def test_the_rtx_4090_run_replays_on_its_logged_pool(capsys):
    code, out, err = run_cli(
        capsys,
        "validate",
        str(RTX4090),
        "--model",
        "llama-3.1-8b",
        "--latency",
        "roofline",
        "--json",
    )
    assert code == 0, err
    o = json.loads(out)
    assert o["num_gpu_blocks"] == 2588 and o["gpu"] == "RTX-4090"  # meta.json's pool and GPU
    s = o["server_settings"]
    assert s["max_num_seqs"]["value"] == 256 and s["max_num_seqs"]["source"] == "given"
    assert s["enable_prefix_caching"]["value"] and s["async_scheduling"]["value"]
    rows = {(r["metric"], r["stat"]): r for r in o["comparison"]}
    assert len(rows) == 13
    ttft = rows[("ttft_s", "mean")]
    assert ttft["measured"] == pytest.approx(65.46, abs=0.01)  # the README's measured mean
    assert all(np.isfinite(r["error"]) for r in o["comparison"])


def _with_engine(tmp_path: Path, src: Path, **engine) -> Path:
    """A copy of the run ``src`` whose meta.json states ``engine`` too."""
    folder = tmp_path / f"{src.name}-edited"
    shutil.copytree(src, folder)
    meta = json.loads((folder / "meta.json").read_text())
    meta["engine_kwargs"].update(engine)
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def test_data_parallel_ranks_replay_as_replicas(capsys, tmp_path):
    """The MoE run's two data-parallel ranks replay as two replicas behind
    least_outstanding (vLLM's DP load balancer), each its own scheduler and
    pool, with what is not modelled printed; one rank of the same run serves
    less and queues more."""
    args = ["--model", "qwen3-30b-a3b", "--gpu", "RTX-PRO-6000", "--latency", "roofline", "--json"]
    code, out, err = run_cli(capsys, "validate", str(MOE_DP), *args)
    assert code == 0, err
    two = json.loads(out)
    assert two["data_parallel_size"] == 2
    notes = " ".join(two["data_parallel_notes"])
    assert "least_outstanding" in notes and "1/2 of the routed experts read" in notes
    assert two["num_gpu_blocks"] > 1.5 * 20452  # half the experts' bytes freed for KV
    one_rank = _with_engine(tmp_path, MOE_DP, data_parallel_size=1, enable_expert_parallel=False)
    code, out, err = run_cli(capsys, "validate", str(one_rank), *args)
    assert code == 0, err
    one = json.loads(out)
    assert one["data_parallel_size"] == 1 and one["data_parallel_notes"] == []

    def pred(o, metric, stat):
        return next(
            r["predicted"] for r in o["comparison"] if (r["metric"], r["stat"]) == (metric, stat)
        )

    assert pred(two, "throughput_rps", "") > 1.2 * pred(one, "throughput_rps", "")
    assert one["num_gpu_blocks"] == 20452  # one rank holds every expert
    assert pred(two, "ttft_s", "mean") < pred(one, "ttft_s", "mean")
    code, out, _ = run_cli(capsys, "validate", str(MOE_DP), *args[:-1])
    assert "per rank, 2 data-parallel ranks" in out and "note: data_parallel_size 2" in out


def test_what_the_planner_cannot_express_is_refused_in_one_line(capsys, tmp_path):
    piped = _with_engine(tmp_path, RTX4090, pipeline_parallel_size=2)
    code, _, err = run_cli(capsys, "validate", str(piped), "--model", "llama-3.1-8b")
    assert code == 2 and "pipeline_parallel_size 2 is not modelled" in err
    assert err.count("\n") == 1
    bad = _with_engine(tmp_path / "b", RTX4090, data_parallel_size=0.5)
    code, _, err = run_cli(capsys, "validate", str(bad), "--model", "llama-3.1-8b")
    assert code == 2 and "data_parallel_size: input should be a valid integer" in err
    huge = _with_engine(tmp_path / "h", RTX4090, data_parallel_size=5000)
    code, _, err = run_cli(capsys, "validate", str(huge), "--model", "llama-3.1-8b")
    assert code == 2 and "data_parallel_size 5,000: at most 1,024 ranks" in err
    code, _, err = run_cli(
        capsys, "validate", str(RTX4090), "--model", "llama-3.1-8b", "--max-num-seqs", "64"
    )
    assert code == 2 and "contradicts the run, which states 256" in err
    nogpu = tmp_path / "nogpu"
    shutil.copytree(RTX4090, nogpu)
    meta = json.loads((nogpu / "meta.json").read_text())
    meta["hardware"]["device_name"] = "NVIDIA Imaginary 9000"
    (nogpu / "meta.json").write_text(json.dumps(meta))
    code, _, err = run_cli(capsys, "validate", str(nogpu), "--model", "llama-3.1-8b")
    assert code == 2 and "no GPU preset for 'NVIDIA Imaginary 9000'" in err


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_plan_run_writes_one_row_per_request(capsys, tmp_path, suffix):
    path = tmp_path / f"requests{suffix}"
    code, out, err = run_cli(
        capsys, "run", "--num-requests", "30", "--requests-out", str(path), "--json"
    )
    assert code == 0, err
    df = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    o = json.loads(out)
    assert len(df) == 30 and list(df.request) == list(range(30))
    done = ~df.e2e_censored.astype(bool)
    assert int(done.sum()) == o["completed"]
    assert (df.first_token_s[done] >= df.first_scheduled_s[done]).all()
    assert (df.finish_s[done] >= df.first_token_s[done]).all()
    assert df.ttft_s[done].mean() == pytest.approx(o["ttft_s_mean"], rel=1e-9)
    code, _, err = run_cli(capsys, "run", "--num-requests", "3", "--requests-out", "x.txt")
    assert code == 2 and "--requests-out" in err and err.count("\n") == 1


def test_the_picture_is_drawn_and_a_bad_name_is_one_line(capsys, tmp_path):
    args = ["validate", str(RTX4090), "--model", "llama-3.1-8b", "--latency", "roofline"]
    png = tmp_path / "v.png"
    code, _, err = run_cli(capsys, *args, "--plot", str(png))
    assert code == 0, err
    assert png.stat().st_size > 20_000 and png.read_bytes()[:4] == b"\x89PNG"
    code, _, err = run_cli(capsys, *args, "--plot", str(tmp_path / "v.jpg"))
    assert code == 2 and "--plot" in err and err.count("\n") == 1
    # refused before the replay, and before the note on the step time it would take
    code, _, err = run_cli(capsys, *args[:4], "--plot", str(tmp_path / "v.txt"))
    assert code == 2 and err.startswith("plan: error: --plot") and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("meta", "needle"),
    [
        ({"hardware": "string"}, "hardware: input should be a valid dictionary"),
        ({"engine_kwargs": {"tensor_parallel_size": 0}}, "tensor_parallel_size: input should be"),
        ({"engine_kwargs": {"max_num_seqs": "256"}}, "max_num_seqs: input should be a valid"),
        ({"kv_cache": {"gpu_memory_utilization": 5}}, "gpu_memory_utilization: input should"),
        ({"resolved_config": {"scheduler_config": [1]}}, "resolved_config.scheduler_config"),
    ],
)
def test_a_malformed_meta_json_is_one_line_naming_the_field(capsys, tmp_path, meta, needle):
    d = _folder(tmp_path, [ROW], {"engine_kwargs": {"model": "llama-3.1-8b"}} | meta)
    code, _, err = run_cli(capsys, "validate", str(d), "--gpu", "H100", "--latency", "roofline")
    assert code == 2 and needle in err and "meta.json" in err and err.count("\n") == 1, err


def test_a_gpu_that_contradicts_the_run_is_refused(capsys):
    code, _, err = run_cli(
        capsys, "validate", str(RTX4090), "--model", "llama-3.1-8b", "--gpu", "H100",
        "--latency", "roofline",
    )  # fmt: skip
    assert code == 2 and "contradicts the run, which ran on NVIDIA GeForce RTX 4090" in err


def test_an_unknown_recorded_model_names_meta_json_not_the_flag(capsys):
    """The run's meta.json names meta-llama/Llama-3.1-8B (the base model, not
    in the catalog): the error blames the run and suggests the preset."""
    code, _, err = run_cli(capsys, "validate", str(RUNS / "RTX4090_Llama-3.1-8B"))
    assert code == 2 and "the run records model 'meta-llama/Llama-3.1-8B'" in err
    assert "--model llama-3.1-8b" in err and "--model: unknown" not in err
    assert len(err.strip().splitlines()) == 1


def test_an_instruct_variant_suggests_its_base_preset(capsys):
    """The MoE run records Qwen/Qwen3-30B-A3B-Instruct-2507; the catalog has
    qwen3-30b-a3b, the same shapes: the one-line error suggests it."""
    code, _, err = run_cli(capsys, "validate", str(MOE_DP))
    assert code == 2 and "--model qwen3-30b-a3b" in err and len(err.strip().splitlines()) == 1
