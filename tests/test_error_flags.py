"""Every option an error or warning names exists on the command that printed it.

Two nets: (1) each command is driven with a corpus of bad inputs (every option
given a bad value in turn, plus cross-option mistakes) and every ``--flag`` in
its stderr must be one of that command's options; (2) the ``--flags`` in the
string literals of the functions a command calls to resolve its inputs must
all be options of that command.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import click
import pytest
import typer

from helpers import run_cli
from planner import resolve
from planner.answers import safelimit
from planner.cli import options as cli_options
from planner.cli.capacity import _pool
from planner.cli.commands import app
from planner.models import hardware
from planner.workload import arrays as workload
from planner.workload import traces

ROOT = Path(__file__).parents[1]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


def options(name: str) -> set[str]:
    """Every spelling of every option of command ``name`` (``--x``, ``--no-x``)."""
    return {o for p in COMMANDS[name].params for o in (*p.opts, *p.secondary_opts)}


UNKNOWN = re.compile(r"No such option: --[\w-]+")  # Click repeating what the user typed


def named_flags(stderr: str) -> set[str]:
    """Flags that ``plan:`` lines (errors and warnings) name as options to use."""
    lines = [UNKNOWN.sub("", ln) for ln in stderr.splitlines() if ln.startswith("plan:")]
    return {f for line in lines for f in FLAG.findall(line)}


# Base arguments that make each command cheap when the bad value happens to be valid.
BASE = {
    "run": ["--num-requests", "2", "--prompt-tokens", "8", "--output-tokens", "4"],
    "check": ["--num-gpu-blocks", "64"],
    "safe-limit": [
        "--num-gpu-blocks", "64", "--num-requests", "3", "--prompt-tokens", "8",
        "--output-tokens", "4", "--horizon", "2",
    ],
    "sweep": [str(ROOT / "sweeps" / "quick.toml"), "--dry-run"],
    "heatmap": ["/no/such/results"],
    "bench": [],
    "max-rate": [
        "--num-gpu-blocks", "64", "--num-requests", "3", "--prompt-tokens", "8",
        "--output-tokens", "4", "--rate-scale-max", "2",
    ],
    "models": [],
    "calibrate": [str(ROOT / "docs" / "calibrate_example.csv")],
    "size": [
        str(ROOT / "tests" / "data" / "size_small.toml"), "--gpus", "H100", "--max-replicas", "2",
        "--dry-run",
    ],
    "validate": [
        str(ROOT / "planner" / "data" / "real-runs-llmservingsim" / "RTX4090_Llama-3.1-8B"),
        "--model", "llama-3.1-8b", "--latency", "roofline",
    ],
    "report": ["/no/such/result"],
}  # fmt: skip

# Cross-option mistakes a new user makes, per command.
POOL_MISTAKES = [
    ["--model", "llama-3.1-8b"],
    ["--gpu", "H100"],
    ["--model", "no-such-model", "--gpu", "H100"],
    ["--model", "llama-3.1-8b", "--gpu", "no-such-gpu"],
    ["--model", "llama-3.1-70b", "--gpu", "H100"],
    ["--model", "llama-3.1-8b", "--gpu", "H100", "--gpu-memory-utilization", "1.5"],
    ["--model", "llama-3.1-8b", "--gpu", "H100", "--tensor-parallel-size", "0"],
    ["--num-gpu-blocks", "100", "--gpu-memory-utilization", "0.5"],
    ["--tensor-parallel-size", "2"],
    ["--trace-file", "/no/such.csv"],
]
LATENCY_MISTAKES = [
    ["--model", "llama-3.1-70b", "--gpu", "H100", "--tensor-parallel-size", "2"],
    ["--model", "qwen2.5-7b", "--gpu", "A100-80GB"],
    ["--latency", "roofline"],
    ["--latency", "roofline", "--beta-coeffs", "1,2,3"],
    ["--mfu", "0.4"],
    ["--latency", "roofline", "--model", "llama-3.1-8b", "--gpu", "H100", "--mfu", "2"],
    ["--beta-coeffs", "1,2"],
    ["--alpha-coeffs", "x"],
]
WORKLOAD_MISTAKES = [
    ["--prompt-tokens", "500", "--prompt-tokens-max", "400"],
    ["--prompt-tokens-stdev", "-5"],
    ["--length-dist", "constant", "--output-tokens-stdev", "3"],
    ["--prefix-groups", "2"],
    ["--prefix-groups", "2", "--prefix-len", "4", "--prefix-share", "2"],
    ["--trace-file", str(ROOT / "planner" / "data" / "s1_seed7.csv"), "--num-requests", "5"],
    ["--trace-file", str(ROOT / "planner" / "data" / "s1_seed7.csv"), "--seed", "3"],
    ["--rate-scale", "2"],
    ["--arrival", "offline", "--rate", "3"],
]
MISTAKES = {
    "run": POOL_MISTAKES + LATENCY_MISTAKES + WORKLOAD_MISTAKES,
    "safe-limit": POOL_MISTAKES + LATENCY_MISTAKES + WORKLOAD_MISTAKES,
    "max-rate": POOL_MISTAKES + LATENCY_MISTAKES + WORKLOAD_MISTAKES,
    "check": POOL_MISTAKES
    + [
        ["--tokens-per-request", "0"],
        ["--max-model-len", "0"],
        ["--quantization", "fp8"],
        ["--model", "llama-3.1-8b", "--gpu", "H100", "--quantization", "int3"],
        ["--model", "llama-3.1-8b", "--gpu", "H100", "--kv-cache-dtype", "fp4"],
        ["--model", "llama-3.1-70b", "--gpu", "H100", "--tensor-parallel-size", "3"],
    ],
    "models": [["--gpu", "H100"]],
    "size": [
        ["--gpus", "MI300X"],
        ["--gpus", "RTX-4090", "--tensor-parallel-sizes", "3"],
        ["--gpus", "Z80"],
        ["--max-replicas", "1", "--routers", "least_kv"],
        ["--prices", "/no/such.csv"],
        ["--ttft-slo", "-1"],
    ],
}


BAD_VALUES = ("-1", "0", "nan", "abc", "")  # wrong for nearly every option


def bad_values(p: click.Parameter) -> tuple[str, ...]:
    """Values to try for ``p``: none for flags and arguments."""
    if p.param_type_name != "option" or getattr(p, "is_flag", False):
        return ()
    return BAD_VALUES


def corpus() -> list[tuple[str, list[str]]]:
    cases = []
    seen: set[str] = set()  # options already tried with every bad value
    for name, cmd in COMMANDS.items():
        for p in cmd.params:
            # One definition per option (tests/test_help.py): every bad value on
            # the first command that takes it, one on each later command.
            values = bad_values(p)[: 1 if p.name in seen else None]
            for v in values:
                cases.append((name, [*BASE[name], p.opts[0], v]))
            seen.add(p.name)
        cases += [(name, [*BASE[name], *args]) for args in MISTAKES.get(name, [])]
    return cases


def test_corpus_covers_every_command():
    assert {name for name, _ in corpus()} == set(COMMANDS)


@pytest.mark.slow
@pytest.mark.parametrize("name,args", corpus(), ids=lambda x: x if isinstance(x, str) else None)
def test_errors_name_only_options_of_their_command(capsys, tmp_path, monkeypatch, name, args):
    monkeypatch.chdir(tmp_path)  # files a case may write land in tmp_path
    code, _, err = run_cli(capsys, name, *args)
    assert "Traceback" not in err
    stray = named_flags(err) - options(name)
    assert not stray, f"plan {name} {' '.join(args)}: {err.strip()!r} names {sorted(stray)}"


# (2) Static: the functions each command calls to resolve its inputs.
REACHES: dict[str, list[Callable]] = {
    "run": [
        cli_options.step_time, cli_options.coeffs, cli_options.synthetic_workload,
        resolve.latency, resolve.num_gpu_blocks, hardware.model, hardware.gpu,
        hardware.num_gpu_blocks, workload.LengthDist, workload.length_from_options,
        workload.synthetic, workload.with_shared_prefixes, traces.read_trace,
        traces.TraceOptions,
    ],
    "safe-limit": [
        cli_options.step_time, cli_options.coeffs, cli_options.synthetic_workload,
        resolve.latency, resolve.num_gpu_blocks, hardware.model, hardware.gpu,
        hardware.num_gpu_blocks, workload.LengthDist, workload.length_from_options,
        workload.synthetic, workload.with_shared_prefixes, safelimit.find_safe_limits, _pool,
    ],
    "check": [
        _pool, resolve.num_gpu_blocks, hardware.model, hardware.gpu, hardware.num_gpu_blocks,
    ],
}  # fmt: skip
# check and safe-limit call traces.read_trace with a constant format and window
# (they have no --trace-format/--trace-start/--trace-duration), so its checks
# of those cannot fire there; the corpus above drives their trace options.


def string_flags(tree: ast.AST) -> set[str]:
    """``--flags`` in the string literals (f-strings included) of ``tree``, docstrings
    excepted (they describe, they are never printed)."""
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return {
        f
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
        for f in FLAG.findall(n.value)
    }


def literal_flags(fn: Callable) -> set[str]:
    """``--flags`` in the string literals of ``fn``'s source."""
    return string_flags(ast.parse(textwrap.dedent(inspect.getsource(fn))))


@pytest.mark.parametrize("name", sorted(REACHES))
def test_messages_of_reached_functions_name_only_options_of_the_command(name):
    for fn in REACHES[name]:
        stray = literal_flags(fn) - options(name)
        assert not stray, f"plan {name} reaches {fn.__qualname__}, which names {sorted(stray)}"


# Another tool's flags, named with that tool: plan calibrate reads the JSON that
# ``vllm bench serve --save-result --save-detailed`` writes.
OTHER_TOOLS = {"--save-result", "--save-detailed"}


def test_every_flag_in_the_package_names_some_command_option():
    """No message anywhere names an option that no command has (or another
    tool's, named with it: ``OTHER_TOOLS``)."""
    every = set().union(*(options(n) for n in COMMANDS)) | OTHER_TOOLS
    for path in (ROOT / "planner").rglob("*.py"):
        stray = string_flags(ast.parse(path.read_text())) - every
        assert not stray, f"{path.relative_to(ROOT)} names {sorted(stray)}"


def test_sweep_spec_errors_name_spec_fields(capsys, tmp_path):
    """A spec's length error names spec fields (workload.prompt.min), not CLI-like ones."""
    spec = tmp_path / "s.toml"
    spec.write_text(
        'name = "t"\nhorizon_s = 10.0\n[workload]\nkind = "synthetic"\nnum_requests = 10\n'
        "rate = 1\n[workload.prompt]\nmean = 500\nmax = 400\n[workload.output]\nmean = 10\n"
        "[scheduler]\nblock_size = 16\n[axes]\nmax_num_seqs = [8]\nnum_gpu_blocks = [500]\n"
    )
    code, _, err = run_cli(capsys, "sweep", str(spec), "--dry-run")
    assert code == 2 and "workload.prompt.min/workload.prompt.max" in err
    assert not named_flags(err)
