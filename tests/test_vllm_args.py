"""Settings vLLM refuses at start-up are refused here too, and the messages
around a first run say what is true (found by a new-user tryout)."""

from __future__ import annotations

import json
import re

import pytest

import planner.cli.commands as cli
from helpers import SMALL_SYNTHETIC, run_cli
from planner import api
from planner.sweep.spec import SpecError, load_spec_text

REFUSAL = "vLLM 0.33 refuses to start (max_num_batched_tokens must be >= max_num_seqs)"


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--max-num-batched-tokens", "128", "--num-requests", "5"],
        ["run", "--max-num-seqs", "4096", "--num-requests", "5"],
        [
            "check",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "H100",
            "--max-num-seqs",
            "4096",
            "--max-num-batched-tokens",
            "2048",
        ],
        ["max-rate", "--num-requests", "5", "--vary", "max_num_seqs=64,4096"],
    ],
)
def test_max_num_seqs_above_the_token_budget_is_refused(capsys, args):
    """vLLM's ``SchedulerConfig.verify_max_model_len`` raises for
    max_num_batched_tokens < max_num_seqs; ``plan check`` used to call such a
    pool SAFE."""
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and REFUSAL in err and len(err.strip().splitlines()) == 1, err


def test_the_budget_may_equal_max_num_seqs(capsys):
    code, _, err = run_cli(
        capsys, "run", "--max-num-batched-tokens", "256", "--num-requests", "5"
    )  # default max_num_seqs 256
    assert code == 0, err


SPEC = (
    'name = "budget"\n'
    + SMALL_SYNTHETIC
    + """[scheduler]
num_gpu_blocks = 2000
max_num_batched_tokens = 512
[axes]
max_num_seqs = [256, 1024]
"""
)


def test_a_sweep_cell_vllm_refuses_names_the_config(tmp_path):
    with pytest.raises(SpecError, match=r"config 1: max_num_batched_tokens 512 is below"):
        load_spec_text(SPEC, tmp_path)


def test_safe_limit_searches_no_further_than_the_token_budget(capsys):
    code, out, err = run_cli(
        capsys, "safe-limit", "--num-gpu-blocks", "7463", "--max-num-batched-tokens", "128",
        "--num-requests", "300", "--json",
    )  # fmt: skip
    assert code == 0, err
    o = json.loads(out)
    assert o["search_limit"] == 128
    assert max(r["max_num_seqs"] for r in o["evaluated"]) <= 128


def test_no_room_names_the_activation_peak(capsys):
    code, _, err = run_cli(
        capsys, "check", "--model", "llama-3.1-8b", "--gpu", "H100",
        "--max-num-batched-tokens", "600000",
    )  # fmt: skip
    assert code == 2 and "activation peak 66.4" in err and "max_num_batched_tokens 600,000" in err


@pytest.mark.parametrize(
    ("fleet", "caching", "needle"),
    [
        (False, {False}, "compiling the simulation kernel"),
        (False, {True}, "compiling the simulation kernel"),
        (True, {False}, "compiling the replicas' simulation kernel"),
        (False, {False, True}, "each prefix-caching setting compiles its own"),
    ],
)
def test_the_compile_note_follows_the_kernel_that_compiles(monkeypatch, fleet, caching, needle):
    """Issue 34: the estimate is a probe compile measured now, scaled
    (``kernel.compile_time``): twice the probe, twice the estimate; none for
    the replicas' kernel, which is not calibrated."""
    from planner.kernel import compile_time

    monkeypatch.setattr(api, "kernels_status", lambda f, c, *a: "cold")
    estimates = []
    for probe in (0.1, 0.2):
        monkeypatch.setattr(compile_time, "probe_seconds", lambda probe=probe: probe)
        note = api.compile_note(fleet, caching)
        assert needle in note and ("replicas'" in note) == fleet
        estimates.append([int(x) for x in re.findall(r"about (\d+) CPU-s", note)])
    if fleet:
        assert estimates == [[], []] and not re.search(r"\d", note)
    else:
        per = sum(compile_time.PROBES_PER_KERNEL[(c, 0)] for c in caching)
        assert estimates == [[round(0.1 * per)], [round(0.2 * per)]]
    monkeypatch.setattr(api, "kernels_status", lambda f, c, *a: "cached")
    assert api.compile_note(fleet, caching) == ""


def test_the_compiled_note_says_the_compile_it_timed(monkeypatch):
    monkeypatch.setattr(api, "COMPILES", [(1.0, 2.0), (12.4, 19.6), (0.5, 1.0)])
    assert api.compiled_note(99.0, 99.0, 1) == (
        "compiled the kernel in 13 s wall, 21 CPU-s (measured)"
    )
    assert "first run on this machine: 99 s wall" in api.compiled_note(99.0, 99.0, 3)


@pytest.mark.parametrize("status", ["cold", "cached"])
def test_the_first_run_says_its_measured_time(capsys, monkeypatch, status):
    """Issue 31: the compile time a first run prints is the one it measured
    (here a fake clock of 42 s and 77 CPU-s), and a warm run says nothing."""
    from planner.cli import options as opt
    from planner.config import SchedulerConfig

    monkeypatch.setattr(api, "kernels_status", lambda f, c, *a: status)
    clock = iter([100.0, 142.0])
    cpu = iter([3.0, 80.0])
    monkeypatch.setattr(opt.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(api, "cpu_seconds", lambda: next(cpu))
    with opt.say_compile([SchedulerConfig(max_num_seqs=4, num_gpu_blocks=100)]):
        pass
    err = capsys.readouterr().err
    if status == "cold":
        assert "compiling the simulation kernel" in err
        assert "first run on this machine: 42 s wall, 77 CPU-s" in err
    else:
        assert err == ""


def test_ctrl_c_inside_the_compiler_is_an_interruption(capsys, monkeypatch):
    """Numba swallows a KeyboardInterrupt raised in one of its ctypes callbacks
    and fails with another error; after a Ctrl-C, ``main`` reports it as an
    interruption (exit 130), not as a traceback."""
    from planner import resolve

    def interrupted_compile(*args: object, **kwargs: object) -> None:
        cli._SIGINT[0] = True
        raise RuntimeError("no compiled object yet for <Library 'stop_length'>")

    monkeypatch.setattr(resolve, "latency", interrupted_compile)
    code, _, err = run_cli(capsys, "run", "--num-requests", "5")
    assert code == 130 and err.strip() == "plan: interrupted"

    def bug(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(resolve, "latency", bug)
    with pytest.raises(RuntimeError, match="a bug"):  # without a Ctrl-C it stays an error
        cli.main(["run", "--num-requests", "5"])


def test_a_run_with_replicas_times_its_whole_first_run(monkeypatch):
    """Replicas run the router's kernel, which compiles within its run: the
    lone step loop is not compiled ahead for them and nothing is recorded as
    the compile, so the note after a first run times the whole run."""
    from planner.config import SchedulerConfig
    from planner.workload.arrays import LengthDist, synthetic

    loops = []
    monkeypatch.setattr(api, "kernel_status", lambda *a, **k: "cold")
    monkeypatch.setattr(api, "compile_ahead", lambda args: False)
    monkeypatch.setattr(api, "compile_loop", lambda args: loops.append(args))
    monkeypatch.setattr(api, "COMPILES", [(1.0, 2.0)])
    d = LengthDist("constant", 8)
    cfg = SchedulerConfig(num_gpu_blocks=100, replicas=2)
    api.simulate([cfg], synthetic(4, 10.0, d, d))
    assert loops == [] and api.COMPILES == [(1.0, 2.0)]
    assert api.compiled_note(30.0, 40.0, None).startswith("first run on this machine: 30 s")
    api.simulate([SchedulerConfig(num_gpu_blocks=100)], synthetic(4, 10.0, d, d))
    assert len(loops) == 1 and len(api.COMPILES) == 2  # the lone server: timed apart
