"""Trace readers: Azure 2023 traces, generic CSV/JSONL, options, malformed files."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from helpers import run_cli
from planner.cli.commands import main
from planner.models import hardware
from planner.workload.arrays import WorkloadError
from planner.workload.traces import (
    AZURE_CODE,
    AZURE_CONV,
    TraceOptions,
    load_trace,
    parse_columns,
    read_trace,
)

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
    # Lengths stay as asked: the front end's rules act per configuration.
    p, o = full.prompt_tokens.astype(int), full.output_tokens.astype(int)
    np.testing.assert_array_equal(full.rejected(600), (p >= 600) | (o > 600))
    np.testing.assert_array_equal(full.cut(600), (p + o > 600) & (p < 600) & (o <= 600))


def test_generic_csv_jsonl_and_timestamps(tmp_path):
    rows = [(0.0, 10, 5), (0.5, 20, 6), (2.25, 30, 7)]
    c = tmp_path / "r.csv"
    c.write_text("t,p,o\n" + "".join(f"{a},{b},{d}\n" for a, b, d in rows))
    wl = read_trace(c, "csv", columns={"arrival": "t", "prompt": "p", "output": "o"})
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
    (  # tryout finding: pandas' own message, naming neither file nor column
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46+00:00,4,44\n"
        "2023-11-16 18:15:47+05:00,4,44\n",
        "column TIMESTAMP: timestamps pandas cannot read together",
    ),
    (  # integers bounds in full, as every other message writes them
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,0,44\n",
        r"want an integer in 1\.\.2,147,483,647\)",
    ),
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
    # sized with this run's max_num_seqs (256) and vLLM's H100 default max_num_batched_tokens
    m, g = hardware.model("llama-3.1-8b"), hardware.gpu("H100")
    assert out["num_gpu_blocks"] == hardware.num_gpu_blocks(m, g, 0.9, 16, 1, 8192, 256)
    assert out["num_gpu_blocks"] == pytest.approx(27967, rel=0.02)  # the README's figure
    assert out["num_gpu_blocks_derived"] is True
    assert out["latency_model"].startswith("linear alpha=(232.46")
    assert out["arrived"] == 1500 and out["completed"] + out["rejected"] <= 1500
    assert out["completed"] > 1000


# ---- Issue 18: every trace column the workload model has is read; the rest are
# reported; column names can be mapped (--trace-columns, spec workload.columns).

# All three arrive together; one slot (max_num_seqs 1): FCFS serves the long
# request first, priority serves the two short urgent ones first.
PRIO_ROWS = "arrival_time_s,prompt_tokens,output_tokens,priority\n0,64,400,5\n0,64,8,0\n0,64,8,0\n"
ONE_SLOT = ("--max-num-seqs", "1", "--num-gpu-blocks", "200", "--max-model-len", "1024", "--json")
SAFE_LIMIT = [
    "safe-limit",
    "--num-gpu-blocks",
    "200",
    "--max-model-len",
    "1024",
    "--percentile",
    "50",
]
CHECK = ["check", "--num-gpu-blocks", "200", "--max-model-len", "1024"]  # safe: exit 0


def _write(tmp_path: Path, name: str, text: str) -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


def test_priority_column_is_read_and_changes_the_priority_policy(capsys, tmp_path):
    f = _write(tmp_path, "p.csv", PRIO_ROWS)
    assert read_trace(f).priority.tolist() == [5, 0, 0]
    code, out, err = run_cli(
        capsys, "run", "--trace-file", str(f), "--policy", "priority", *ONE_SLOT
    )
    assert code == 0 and err == ""
    prio = json.loads(out)
    code, out, err = run_cli(capsys, "run", "--trace-file", str(f), *ONE_SLOT)
    fcfs = json.loads(out)
    # the long request last instead of first: the mean TTFT drops
    assert prio["ttft_s_mean"] < fcfs["ttft_s_mean"] / 2


def test_priorities_under_fcfs_warn_once(capsys, tmp_path):
    f = _write(tmp_path, "p.csv", PRIO_ROWS)
    for cmd in (
        ["run", *ONE_SLOT],
        SAFE_LIMIT,
        CHECK,
    ):
        code, _, err = run_cli(capsys, *cmd, "--trace-file", str(f))
        assert code == 0, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("plan: warning: p.csv"), (cmd, err)
        assert "priorit" in lines[0] and "no effect" in lines[0]
    code, _, err = run_cli(capsys, "run", *ONE_SLOT, "--trace-file", str(f), "--victim", "priority")
    assert code == 0 and err == ""  # the priority victim rule reads them


def test_unknown_columns_warn_once_naming_them(capsys, tmp_path):
    f = _write(
        tmp_path,
        "s.csv",
        "arrival_time_s,prompt_tokens,output_tokens,session_id,turn\n0,10,5,a,1\n1,10,5,a,2\n",
    )
    read = load_trace(f)
    assert read.ignored == ("session_id", "turn")
    for cmd in (
        ["run"],
        SAFE_LIMIT,
        CHECK,
    ):
        code, _, err = run_cli(capsys, *cmd, "--trace-file", str(f))
        assert code == 0, err
        warn = [x for x in err.splitlines() if "ignored column" in x]
        assert len(warn) == 1 and "session_id, turn" in warn[0], err
        assert warn[0].startswith("plan: warning: s.csv")
    assert load_trace(SLICE).ignored == ()


def test_prefix_columns_are_read(capsys, tmp_path):
    f = _write(
        tmp_path,
        "g.jsonl",
        "".join(
            json.dumps(r) + "\n"
            for r in (
                {"arrival_time_s": 0, "prompt_tokens": 600, "output_tokens": 4,
                 "prefix_group": 0, "prefix_len": 512},
                {"arrival_time_s": 1, "prompt_tokens": 600, "output_tokens": 4,
                 "prefix_group": None, "prefix_len": None},
                {"arrival_time_s": 2, "prompt_tokens": 600, "output_tokens": 4,
                 "prefix_group": 0, "prefix_len": 512},
            )
        ),
    )  # fmt: skip
    wl = read_trace(f)
    assert wl.prefix_group.tolist() == [0, -1, 0] and wl.prefix_len.tolist() == [512, 0, 512]
    args = ("run", "--trace-file", str(f), "--max-num-seqs", "8", "--json")
    code, out, err = run_cli(capsys, *args, "--enable-prefix-caching")
    assert code == 0 and err == ""
    cached = json.loads(out)
    code, out, err = run_cli(capsys, *args)
    assert "shared prefixes change nothing" in err
    assert cached["prefill_tokens"] == json.loads(out)["prefill_tokens"] - 512
    # a synthetic prefix draw would silently replace the trace's groups
    code, _, err = run_cli(capsys, *args, "--prefix-groups", "2", "--prefix-len", "8",
                           "--prefix-share", "0.5")  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1 and "give one or the other" in err
    bad = _write(
        tmp_path, "h.csv", "arrival_time_s,prompt_tokens,output_tokens,prefix_group\n0,9,9,1\n"
    )
    with pytest.raises(WorkloadError, match="needs a prefix_len column"):
        read_trace(bad)


MAPPED = "ts,prompt_tokens,completion_tokens\n0,10,5\n0.5,20,6\n2.25,30,7\n"


def test_trace_columns_map_names_in_every_command(capsys, tmp_path):
    f = _write(tmp_path, "m.csv", MAPPED)
    cols = "arrival=ts,prompt=prompt_tokens,output=completion_tokens"
    wl = read_trace(f, columns=parse_columns(cols))
    assert wl.arrival_s.tolist() == [0.0, 0.5, 2.25] and wl.output_tokens.tolist() == [5, 6, 7]
    for cmd in (
        ["run"],
        SAFE_LIMIT,
        CHECK,
    ):
        code, out, err = run_cli(
            capsys, *cmd, "--trace-file", str(f), "--trace-columns", cols, "--json"
        )
        assert code == 0 and err == "", (cmd, err)
        assert json.loads(out)["workload" if cmd[0] != "run" else "completed"] in ("m.csv", 3)
        code, _, err = run_cli(capsys, *cmd, "--trace-file", str(f))  # unmapped: names the fix
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "missing column 'arrival_time_s' or 'timestamp'" in err
        assert "columns found: ts, prompt_tokens, completion_tokens" in err
        assert "output=output_tokens" in err and "m.csv" in err


BAD_MAPS = [
    ("arrival=ts,colour=red", "unknown key 'colour'"),
    ("arrival=ts,arrival=t", "key 'arrival' is given twice"),
    ("arrival=ts,output=ts", "column 'ts' is mapped twice"),
    ("arrival=ts,timestamp=ts2", "not both"),
    ("arrival=ts,output=completion", "missing column 'completion'"),
    ("arrival=ts,output=completion_tokens,priority=prio", "missing column 'prio'"),
    (
        "arrival=ts,output=completion_tokens,priority=prompt_tokens",
        "'prompt_tokens' would be read as both priority (mapped) and prompt",
    ),
    ("arrival", "expected key=column"),
    ("arrival=", "arrival needs a column name"),
]


@pytest.mark.parametrize("text,needle", BAD_MAPS)
def test_bad_trace_columns_exit_2_one_line(capsys, tmp_path, text, needle):
    f = _write(tmp_path, "m.csv", MAPPED)
    for cmd in (
        ["run"],
        SAFE_LIMIT,
        CHECK,
    ):
        code, _, err = run_cli(capsys, *cmd, "--trace-file", str(f), "--trace-columns", text)
        assert code == 2 and len(err.strip().splitlines()) == 1, (cmd, err)
        assert err.startswith("plan: error:") and needle in err, (cmd, err)


def test_trace_options_without_a_trace_are_refused(capsys):
    for cmd in (
        ["run", "--trace-columns", "arrival=ts"],
        ["run", "--rate-scale", "2"],
        ["run", "--trace-format", "jsonl"],
        ["run", "--max-requests", "5"],
        ["safe-limit", "--num-gpu-blocks", "200", "--trace-columns", "arrival=ts"],
        ["safe-limit", "--num-gpu-blocks", "200", "--max-requests", "5"],
        ["check", "--num-gpu-blocks", "200", "--trace-columns", "arrival=ts"],
    ):
        code, _, err = run_cli(capsys, *cmd)
        assert code == 2 and "needs --trace-file" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "name,body,needle",
    [
        ("semi.csv", "ts;prompt;output\n0;1;2\n", "separated by semicolons"),
        ("tab.csv", "ts\tprompt\toutput\n0\t1\t2\n", "separated by tabs"),
        ("empty.jsonl", "", "the file is empty"),
        ("blank.jsonl", "\n\n", "the file is empty"),
        ("arrays.jsonl", "[0, 1, 2]\n", "columns found: 0, 1, 2"),
    ],
)
def test_misshapen_files_say_what_is_wrong(capsys, tmp_path, name, body, needle):
    f = _write(tmp_path, name, body)
    code, _, err = run_cli(capsys, "run", "--trace-file", str(f))
    assert code == 2 and len(err.strip().splitlines()) == 1 and name in err
    assert needle in err and "missing column 'timestamp'" not in err


def test_safe_limit_refuses_synthetic_options_with_a_trace(capsys, tmp_path):
    f = _write(tmp_path, "m.csv", "arrival_time_s,prompt_tokens,output_tokens\n0,10,5\n")
    for extra, needle in (
        (["--num-requests", "5"], "--num-requests has no effect with --trace-file"),
        (["--rate", "3"], "--rate has no effect with --trace-file"),
        (["--prompt-tokens", "9"], "--prompt-tokens has no effect with --trace-file"),
        (["--seed", "3"], "--seed has no effect with --trace-file"),
    ):
        code, _, err = run_cli(capsys, *SAFE_LIMIT, "--trace-file", str(f), *extra)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_a_missing_column_names_the_formats_own_columns(capsys, tmp_path):
    """The "accepted" list of a refusal is the one of the format read: Mooncake's
    input_length/output_length, not the generic names (tryout finding)."""
    f = tmp_path / "g.jsonl"
    f.write_text('{"arrival_time_s": 0, "prompt_tokens": 20, "output_tokens": 3}\n')
    code, _, err = run_cli(capsys, "run", "--trace-file", str(f), "--trace-format", "mooncake")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "missing column 'input_length'" in err
    assert "prompt=input_length, output=output_length" in err and "prompt=prompt_tokens" not in err


def test_errors_name_the_jsonl_line(capsys, tmp_path):
    """A JSONL file has no header: its third line is row 3 (was row 4; tryout
    finding). A CSV's third data row stays row 4 (the header is row 1)."""
    rows = [{"arrival_time_s": t, "prompt_tokens": 20, "output_tokens": 3} for t in range(4)]
    rows[2]["prompt_tokens"] = -5
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = run_cli(capsys, "run", "--trace-file", str(f))
    assert code == 2 and "t.jsonl: row 3: bad prompt_tokens value '-5'" in err, err
    c = tmp_path / "t.csv"
    c.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,20,3\n1,20,3\n2,-5,3\n")
    code, _, err = run_cli(capsys, "run", "--trace-file", str(c))
    assert code == 2 and "t.csv: row 4: bad prompt_tokens value '-5'" in err, err


def test_mooncake_timestamp_bounds_are_in_milliseconds(capsys, tmp_path):
    """Its timestamps are milliseconds, and the refusal says so (tryout
    finding: 'want seconds in 0..1e+12')."""
    f = tmp_path / "m.jsonl"
    f.write_text('{"timestamp": -5, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n')
    code, _, err = run_cli(capsys, "run", "--trace-file", str(f), "--trace-format", "mooncake")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "want milliseconds in 0..1e+12" in err


def test_date_times_mapped_as_arrival_name_the_timestamp_mapping(capsys, tmp_path):
    """Issue 31: ``--trace-columns arrival=ts`` on ISO times says to map
    ``timestamp=ts``; that mapping reads the file, and numbers out of range
    get no such hint."""
    iso = tmp_path / "iso.csv"
    iso.write_text("ts,p,o\n2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:50.99,396,109\n")
    code, _, err = run_cli(
        capsys, "run", "--trace-file", str(iso), "--trace-columns", "arrival=ts,prompt=p,output=o"
    )
    assert code == 2 and err.count("\n") == 1 and "map it with timestamp=ts" in err
    cols = "timestamp=ts,prompt=p,output=o"
    code, out, err = run_cli(
        capsys, "run", "--trace-file", str(iso), "--trace-columns", cols, "--json"
    )
    assert code == 0, err
    assert json.loads(out)["completed"] == 2
    neg = tmp_path / "neg.csv"
    neg.write_text("ts,p,o\n-1,374,44\n")
    code, _, err = run_cli(
        capsys, "run", "--trace-file", str(neg), "--trace-columns", "arrival=ts,prompt=p,output=o"
    )
    assert code == 2 and "timestamp=" not in err
