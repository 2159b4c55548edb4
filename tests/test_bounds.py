"""Issue 19 item 5: every numeric input has a bound (``planner.bounds``), checked
before any work, and a value outside it ends in exit 2 with one line naming the
option (or spec field / axis, or file and row) and the bound."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import typer

from helpers import run_cli
from planner import bounds
from planner.cli import options as cli_options
from planner.cli.commands import app
from planner.config import SchedulerConfig, pack_configs
from planner.latency.step_time import LinearLatency
from planner.sweep.spec import SpecError, load_spec
from planner.workload.arrays import WorkloadError
from planner.workload.traces import read_trace

COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]
# Positional arguments each command needs to parse (the bound check comes first).
ARGS = {
    "sweep": ["no-such-spec.toml"],
    "heatmap": ["no-such-results"],
    "calibrate": ["no-such-steps.csv"],
    "size": ["no-such-spec.toml"],
    "validate": ["no-such-run"],
}
HOSTILE = ("0", "-1", "1e308", "nan", "inf", str(2**63), str(2**64))


def one_error_line(code: int, err: str) -> str:
    """The single stderr line of a refused command."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_every_numeric_option_has_a_bound():
    missing = [
        f"{name} {p.name}"
        for name, cmd in COMMANDS.items()
        for p in cli_options.numeric_params(cmd)
        if p.name not in bounds.OPTION_BOUNDS
    ]
    assert not missing
    assert sum(len(cli_options.numeric_params(c)) for c in COMMANDS.values()) > 80


def hostile_cases() -> list[tuple[str, str, str]]:
    """(command, option, value) for every numeric option and every hostile value
    outside the option's documented bound (values inside it are accepted)."""
    cases = []
    seen: set[str] = set()  # options already tried with every value on an earlier command
    for name, cmd in COMMANDS.items():
        for p in cli_options.numeric_params(cmd):
            bound = bounds.OPTION_BOUNDS[p.name]
            # An option is one definition shared by its commands (tests/test_help.py):
            # every hostile value on the first command that takes it, the first
            # refused value on each later one (that command checks bounds at all).
            first = len(cases)
            for text in HOSTILE:
                if p.name in seen and len(cases) > first:
                    break
                value: float | int = float(text) if bound.integer is False else 0
                if bound.integer:
                    try:
                        value = int(text)
                    except ValueError:  # a float given to an int option: a usage error
                        cases.append((name, p.opts[0], text))
                        continue
                if not bound.holds(value):
                    cases.append((name, p.opts[0], text))
            seen.add(p.name)
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("name,flag,value", hostile_cases())
def test_hostile_numbers_are_refused_naming_the_option(
    capsys, tmp_path, monkeypatch, name, flag, value
):  # noqa: E501
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, name, *ARGS.get(name, []), f"{flag}={value}")
    line = one_error_line(code, err)
    param = next(p for p in COMMANDS[name].params if flag in p.opts)
    assert any(f"'{o}'" in line or f"{o} " in line for o in param.opts), line
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_accepted_extremes_are_documented():
    """The hostile values some options accept, each by its documented bound."""
    h = bounds.OPTION_BOUNDS
    assert h["horizon"].holds(math.inf) and h["trace_duration"].holds(math.inf)
    assert h["watermark"].holds(0.0) and not h["watermark"].holds(1.0)
    assert h["seed"].holds(2**63 - 1) and not h["seed"].holds(2**63)
    assert not h["num_gpu_blocks"].holds(2**31) and h["num_gpu_blocks"].holds(2**31 - 1)
    assert not h["block_size"].holds(True)  # a bool is not a count


@pytest.mark.parametrize(
    "args,flag",
    [
        (
            ["run", "--swap-bandwidth-gbps", "1e-300", "--preemption-mode", "swap"],
            "--swap-bandwidth-gbps",
        ),  # noqa: E501
        (["run", "--swap-bandwidth-gbps", "1e-300"], "--swap-bandwidth-gbps"),
        (["check", "--block-size", str(2**63), "--num-gpu-blocks", "1000"], "--block-size"),
        (["check", "--num-gpu-blocks", str(2**64)], "--num-gpu-blocks"),
        (["check", "--num-gpu-blocks", str(2**63)], "--num-gpu-blocks"),
        (["run", "--beta-coeffs", "1e9,1e9,1e9", "--num-requests", "5000"], "--max-steps"),
        (["run", "--alpha-coeffs", "0,1e9,0", "--num-requests", "5"], "--alpha-coeffs"),
    ],
)
def test_listed_inputs(capsys, tmp_path, monkeypatch, args, flag):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *args, "--json")
    line = one_error_line(code, err)
    assert flag in line and out == ""
    assert list(tmp_path.iterdir()) == []


def test_clock_cannot_wrap_in_the_config_layer():
    """pack_configs (before every kernel call) refuses a config whose int64 ns
    clock could wrap, and accepts the defaults with a wide margin."""
    from planner.config import max_step_ns

    slow = LinearLatency(beta=(1e9, 1e9, 1e9))
    with pytest.raises(ValueError, match="int64 ns clock"):
        pack_configs([SchedulerConfig()], [slow])
    pack_configs([SchedulerConfig(max_steps=2**31 - 1)], [LinearLatency()])
    assert max_step_ns(SchedulerConfig(), LinearLatency()) < 1e9  # under 1 s


def spec(tmp_path: Path, axis: str, head: str = "", prefix: bytes = b"") -> Path:
    p = tmp_path / "s.toml"
    text = (
        f'name = "b"\n{head}\n[workload]\nkind = "synthetic"\nnum_requests = 5\n'
        "[workload.prompt]\nmean = 100\n[workload.output]\nmean = 10\n"
        f"[axes]\nmax_num_seqs = {axis}\n"
    )
    p.write_bytes(prefix + text.encode())
    return p


@pytest.mark.parametrize(
    "axis,where",
    [
        ('{start = 1, stop = 1e30, num = 3, scale = "log"}', "axes.max_num_seqs.stop"),
        ('{start = 0.4, stop = 64, num = 3, scale = "log"}', "axes.max_num_seqs.start"),
        ("{start = 1, stop = 2, num = 5}", "axes.max_num_seqs"),
        ("[0, 4]", "axes.max_num_seqs"),
    ],
)
def test_spec_axes_name_the_axis(tmp_path, axis, where):
    with pytest.raises(SpecError, match=rf"s\.toml: {where}"):
        load_spec(spec(tmp_path, axis))


@pytest.mark.parametrize(
    "head,where",
    [
        ("max_steps = 10000000\n[latency]\nbeta = [1e9, 1e9, 1e9]", "config 0: max_steps"),
        ("max_steps = 2147483648", "max_steps must be"),
        ("horizon_s = 1e300", "horizon_s must be"),
        ("[latency]\nalpha = [1, 1e300, 1]", "latency.alpha must be"),
    ],
)
def test_spec_fields_name_the_field(tmp_path, head, where):
    with pytest.raises(SpecError, match=where):
        load_spec(spec(tmp_path, "[1, 2]", head))


def test_spec_with_a_utf8_bom_loads(tmp_path):
    sw = load_spec(spec(tmp_path, "[1, 2]", prefix=b"\xef\xbb\xbf"))
    assert sw.axes["max_num_seqs"] == [1, 2]


def test_sweep_refused_before_writing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = spec(tmp_path, '{start = 1, stop = 1e30, num = 3, scale = "log"}')
    code, _, err = run_cli(capsys, "sweep", str(p), "--out", str(tmp_path / "out"))
    assert "axes.max_num_seqs" in one_error_line(code, err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stamp", ["18:15:50", "6:15 PM", "18:15", "2023 18:15"])
def test_timestamps_without_a_date_are_refused(tmp_path, stamp):
    p = tmp_path / "t.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        f"{stamp},396,109\n"
    )
    with pytest.raises(WorkloadError, match=r"t\.csv: row 3: TIMESTAMP value .* no full date"):
        read_trace(p)


def test_dated_timestamps_still_read(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "16 Nov 2023 18:15:52,396,109\n"
    )
    wl = read_trace(p)
    assert wl.arrival_s.tolist() == pytest.approx([0.0, 4.314579, 5.3194100])


S1_CSV = Path(__file__).resolve().parents[1] / "planner" / "data" / "s1_seed7.csv"
SYNTHETIC = '[workload]\nkind = "synthetic"\nnum_requests = 5\n'
LENGTHS = "[workload.prompt]\nmean = 100\n[workload.output]\nmean = 10\n"


def table(name: str, body: dict[str, str]) -> str:
    """A TOML table ``[name]`` with ``key = value`` lines (values as TOML text)."""
    return f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in body.items())


def field_spec(path: str, value: str) -> str:
    """A spec valid but for ``path = value`` (a field of FIELD_BOUNDS)."""
    section, _, key = path.rpartition(".")
    trace = key in {"start_s", "duration_s", "rate_scale", "max_requests"}
    workload = (
        {"kind": '"trace"', "path": f'"{S1_CSV}"'}
        if trace
        else {"kind": '"synthetic"', "num_requests": "5"}
    )
    if key == "gamma_cv":
        workload["arrival"] = '"gamma"'
    length = {"mean": "1"} if key in ("min", "max") else {"mean": "100"}
    tables = {
        "": {"name": '"b"'},
        "workload": workload,
        "workload.prompt": dict(length),
        "workload.output": dict(length),
        "hardware": {"model": '"llama-3.1-8b"', "gpu": '"H100"'},
        "latency": {"kind": '"roofline"'},
        "scheduler": {"num_gpu_blocks": "7463"},
        "axes": {"max_num_seqs": "[1, 2]"},
    }
    if trace:
        del tables["workload.prompt"], tables["workload.output"]
    tables[section][key] = value
    top = "".join(f"{k} = {v}\n" for k, v in tables.pop("").items())
    return top + "".join(table(k, v) for k, v in tables.items())


def spec_field_cases() -> list[tuple[str, str]]:
    from planner.sweep.spec import FIELD_BOUNDS

    cases = []
    for path, name in FIELD_BOUNDS.items():
        bound = bounds.OPTION_BOUNDS[name]
        for text in HOSTILE:
            literal = text.lstrip("-").isdigit()  # TOML reads it as an integer
            v = int(text) if literal else float(text)
            if bound.integer and not literal or not bound.holds(v):
                cases.append((path, text))
    return cases


@pytest.mark.parametrize("path,value", spec_field_cases())
def test_hostile_spec_fields_are_refused_naming_the_field(tmp_path, path, value):
    from planner.sweep.spec import load_spec_text

    toml_value = {"nan": "nan", "inf": "inf"}.get(value, value)
    with pytest.raises(SpecError) as e:
        load_spec_text(field_spec(path, toml_value), tmp_path)
    assert path.rpartition(".")[2] in str(e.value) and "\n" not in str(e.value)


def test_field_spec_is_valid_when_the_value_is(tmp_path):
    """The generator above builds specs that load when the value is in range."""
    from planner.sweep.spec import load_spec_text

    load_spec_text(field_spec("workload.gamma_cv", "1.5"), tmp_path)
    load_spec_text(field_spec("workload.start_s", "0"), tmp_path)
    load_spec_text(field_spec("workload.prompt.stdev", "3"), tmp_path)


@pytest.mark.parametrize("axis", ["rate", "seed", "max_num_seqs", "watermark", "num_gpu_blocks"])
@pytest.mark.parametrize("value", ["-1", "1e308", "nan", str(2**63), str(2**64)])
def test_hostile_axis_values_are_refused_naming_the_axis(tmp_path, axis, value):
    from planner.sweep.spec import load_spec_text

    text = f'name = "b"\n{SYNTHETIC}{LENGTHS}[axes]\n{axis} = [{value}]\n'
    with pytest.raises(SpecError, match=rf"axes\.{axis}"):
        load_spec_text(text, tmp_path)


def test_bound_text_is_exact():
    assert "0..9,223,372,036,854,775,807 " in bounds.OPTION_BOUNDS["seed"].describe() + " "
    assert bounds.OPTION_BOUNDS["horizon"].describe().startswith("a number in (0, 1e+09] or inf")


@pytest.mark.parametrize(
    "extra,field",
    [
        ("[latency]\nbeta = [0, 0, 0]\n", "latency.beta"),
        ('[hardware]\nmodel = "llama-3.1-8b"\ngpu = "B300"\n', "hardware.gpu"),
        # an explicit linear kind without a preset (no kind: the best available)
        (
            '[hardware]\nmodel = "qwen2.5-7b"\ngpu = "H100"\n[latency]\nkind = "linear"\n',
            "latency.beta",
        ),
    ],
)
def test_spec_errors_use_spec_field_names(tmp_path, extra, field):
    """Validators shared with the CLI name flags; a spec's errors name its fields."""
    from planner.sweep.spec import load_spec_text

    text = f'name = "b"\n{SYNTHETIC}{LENGTHS}{extra}[axes]\nmax_num_seqs = [1, 2]\n'
    with pytest.raises(SpecError, match=re.escape(field)) as e:
        load_spec_text(text, tmp_path)
    assert " --" not in str(e.value)


def test_arrivals_beyond_the_clock_name_the_options(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "run", "--num-requests", "2000", "--rate", "1e-6")
    line = one_error_line(code, err)
    assert "--num-requests 2,000 at --rate 1e-06/s" in line


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_gives_every_numeric_option_its_range(capsys, monkeypatch, name):
    """Issue 35 item 2: the range and its reason are in the help too."""
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = run_cli(capsys, name, "--help")
    assert code == 0
    for p in cli_options.numeric_params(COMMANDS[name]):
        if isinstance(p, typer.core.TyperArgument):
            continue
        lines = out.splitlines()
        i = next(
            i for i, x in enumerate(lines) if x.split()[:1] in ([p.opts[0]], [p.opts[0] + ","])
        )
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("-")), i + 3
        )
        entry = " ".join(x.strip() for x in lines[i:end])
        assert f"[range: {bounds.OPTION_BOUNDS[p.name].help_text()}]" in entry, entry
