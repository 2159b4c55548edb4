"""Trace readers: Azure 2023 traces, generic CSV/JSONL, options, malformed files."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from planner.cli import main
from planner.traces import AZURE_CODE, AZURE_CONV, TraceOptions, read_trace
from planner.workload import WorkloadError

SLICE = Path(__file__).parent / "data" / "azure_conv_head50.csv"


def _stdlib_read(path: Path) -> tuple[list[float], list[int], list[int]]:
    """An independent reading of an Azure CSV with the csv and datetime modules."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))

    def ts(text: str) -> datetime:
        day, frac = text.split(".")
        return datetime.strptime(day, "%Y-%m-%d %H:%M:%S").replace(
            microsecond=int(frac[:6].ljust(6, "0"))
        )

    t0 = ts(rows[0]["TIMESTAMP"])
    t = [(ts(r["TIMESTAMP"]) - t0).total_seconds() for r in rows]
    return t, [int(r["ContextTokens"]) for r in rows], [int(r["GeneratedTokens"]) for r in rows]


def test_azure_slice_matches_an_independent_reading():
    wl = read_trace(SLICE)
    t, p, o = _stdlib_read(SLICE)
    assert wl.num_requests == len(t) == 50
    assert wl.arrival_s[0] == 0.0
    assert wl.arrival_s[-1] == pytest.approx(t[-1], abs=1e-6)
    assert int(wl.prompt_tokens.sum()) == sum(p)
    assert int(wl.output_tokens.sum()) == sum(o)
    np.testing.assert_allclose(wl.arrival_s, t, atol=1e-6)


@pytest.mark.parametrize("path,rows", [(AZURE_CONV, 19366), (AZURE_CODE, 8819)])
def test_shipped_azure_traces(path, rows):
    wl = read_trace(path)
    assert wl.num_requests == rows
    assert 3400 < wl.arrival_s[-1] < 3600  # about an hour
    assert np.all(np.diff(wl.arrival_s) >= 0)


def test_options_window_scale_cap_and_clip():
    full = read_trace(SLICE)
    t = full.arrival_s
    start, dur = float(t[10]), float(t[30] - t[10])
    win = read_trace(SLICE, options=TraceOptions(start_s=start, duration_s=dur))
    inside = (t >= start) & (t < start + dur)
    assert win.num_requests == inside.sum()
    np.testing.assert_allclose(win.arrival_s, t[inside] - start)
    fast = read_trace(SLICE, options=TraceOptions(rate_scale=2.0, max_requests=7))
    np.testing.assert_allclose(fast.arrival_s, t[:7] / 2.0)
    clip = read_trace(SLICE, options=TraceOptions(max_model_len=600))
    p, o = full.prompt_tokens, full.output_tokens
    expect = np.where(p < 600, np.minimum(o, 600 - p), o)
    assert (clip.output_tokens == expect).all()
    assert (clip.prompt_tokens == p).all()  # long prompts stay: the kernel rejects them


def test_generic_csv_jsonl_and_timestamps(tmp_path):
    rows = [(0.0, 10, 5), (0.5, 20, 6), (2.25, 30, 7)]
    c = tmp_path / "r.csv"
    c.write_text("t,p,o\n" + "".join(f"{a},{b},{d}\n" for a, b, d in rows))
    wl = read_trace(c, "csv", arrival_col="t", prompt_col="p", output_col="o")
    assert wl.arrival_s.tolist() == [0.0, 0.5, 2.25]
    j = tmp_path / "r.jsonl"
    j.write_text(
        "".join(
            json.dumps({"timestamp": 1700000000 + a, "prompt_tokens": b, "output_tokens": d}) + "\n"
            for a, b, d in rows
        )
    )
    wl2 = read_trace(j)
    assert wl2.arrival_s.tolist() == [0.0, 0.5, 2.25]
    assert wl2.prompt_tokens.tolist() == [10, 20, 30]


BAD = [
    ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n", "missing column"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,abc,44\n", "row 2"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,-4,44\n", "ContextTokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nnot a time,4,44\n", "TIMESTAMP"),
    (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,4,44\n"
        "2023-11-16 18:15:40.00,4,44\n",
        "goes backwards",
    ),
    ("", "empty"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,4,44,9\n", "more fields"),
]


@pytest.mark.parametrize("body,needle", BAD)
def test_malformed_traces_exit_2_one_line(capsys, tmp_path, body, needle):
    f = tmp_path / "bad.csv"
    f.write_text(body)
    with pytest.raises(WorkloadError, match=needle):
        read_trace(f)
    with pytest.raises(SystemExit) as exc:
        main(["run", "--trace-file", str(f)])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert len(err.strip().splitlines()) == 1 and "bad.csv" in err


def test_plan_run_on_azure_with_presets(capsys):
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "run",
                "--trace-file",
                str(AZURE_CONV),
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "H100",
                "--gpu-memory-utilization",
                "0.9",
                "--max-num-seqs",
                "256",
                "--max-requests",
                "1500",
                "--json",
            ]
        )
        raise SystemExit(0)
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0
    assert out["num_gpu_blocks"] == 27967 and out["num_gpu_blocks_derived"] is True
    assert out["latency_model"].startswith("linear alpha=(232.46")
    assert out["arrived"] == 1500 and out["completed"] + out["rejected"] <= 1500
    assert out["completed"] > 1000
