"""With --model and --gpu but no --latency and no linear preset for them, the
step time is the best the planner has (issue 33, item 3): aiconfigurator-core's
measured tables where it has data, else the roofline; said in one note. An
explicit --latency linear is never replaced."""

from __future__ import annotations

import pytest

from helpers import run_cli
from planner.latency import measured

S1 = "planner/data/s1_seed7.csv"
NOTE = "plan: note: no --latency given and no linear preset for"


def test_a_model_without_a_preset_gets_measured_step_times(capsys):
    pytest.importorskip("aiconfigurator_core")
    code, out, err = run_cli(capsys, "run", "--model", "qwen3-32b", "--gpu", "H100",
                             "--num-requests", "20")  # fmt: skip
    assert code == 0, err
    assert f"{NOTE} qwen3-32b on 1 x H100, so measured, since" in err
    assert "step time: measured qwen3-32b on 1 x H100" in out


def test_a_gpu_without_measured_data_gets_the_roofline(capsys):
    code, out, err = run_cli(capsys, "run", "--model", "llama-3.1-8b", "--gpu", "RTX-4090",
                             "--num-requests", "20")  # fmt: skip
    assert code == 0, err
    assert "so roofline, since aiconfigurator has no vLLM data for GPU RTX-4090" in err
    assert "step time: roofline llama-3.1-8b on 1 x RTX-4090" in out


def test_without_aiconfigurator_the_roofline_says_why(capsys, monkeypatch):
    def not_installed(name: str) -> str:
        raise measured.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(measured.metadata, "version", not_installed)
    code, out, err = run_cli(capsys, "max-rate", "--model", "qwen3-32b", "--gpu", "H100",
                             "--trace-file", S1, "--ttft-slo", "2",
                             "--max-requests", "50", "--max-model-len", "16384")  # fmt: skip
    assert code == 0, err
    assert "so roofline, since aiconfigurator-core is not installed (pip install" in err
    assert "roofline qwen3-32b on 1 x H100" in err


def test_the_preset_pair_keeps_its_linear_coefficients(capsys):
    code, out, err = run_cli(capsys, "run", "--model", "llama-3.1-8b", "--gpu", "H100",
                             "--num-requests", "20")  # fmt: skip
    assert code == 0, err
    assert NOTE not in err and "step time: linear alpha=" in out


@pytest.mark.parametrize(
    "extra",
    [["--latency", "linear"], ["--compat", "blis"], ["--mfu", "0.4"], ["--beta-coeffs", "1,2"]],
    ids=["explicit linear", "blis compat", "mfu without roofline", "bad beta"],
)
def test_an_explicit_choice_is_never_replaced(capsys, extra):
    code, _, err = run_cli(capsys, "run", "--model", "qwen3-32b", "--gpu", "H100",
                           "--num-requests", "5", *extra)  # fmt: skip
    assert code == 2 and NOTE not in err
    assert err.startswith("plan: error:") and len(err.strip().splitlines()) == 1, err


def test_a_sweep_spec_without_a_latency_kind_takes_the_best_available(capsys, tmp_path):
    spec = tmp_path / "q.toml"
    spec.write_text(
        'name = "q"\n[workload]\nkind = "synthetic"\nnum_requests = 20\n'
        'prompt = { kind = "constant", mean = 500 }\noutput = { kind = "constant", mean = 50 }\n'
        '[hardware]\nmodel = "llama-3.1-8b"\ngpu = "RTX-4090"\n'
        "[axes]\nmax_num_seqs = [16, 32]\n"
    )
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "out"))
    assert code == 0, err
    assert "no latency.kind given and no linear preset for llama-3.1-8b on 1 x RTX-4090" in err
    assert "so roofline, since aiconfigurator has no vLLM data for GPU RTX-4090" in err
    linear = spec.read_text().replace("[axes]", '[latency]\nkind = "linear"\n[axes]')
    spec.write_text(linear)  # an explicit kind is never replaced
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "out2"))
    assert code == 2 and "no linear coefficients for llama-3.1-8b" in err


def test_blis_compat_without_coefficients_names_a_way_it_takes(capsys):
    """--compat blis refuses the roofline, so its error may not suggest it."""
    code, _, err = run_cli(capsys, "run", "--model", "qwen3-32b", "--gpu", "H100",
                           "--num-requests", "5", "--compat", "blis")  # fmt: skip
    assert code == 2 and "--compat blis needs the linear step time" in err
    assert "--beta-coeffs" in err and "roofline" not in err


def test_bad_input_after_the_note_is_still_one_line(capsys):
    """The step-time note waits until the input is accepted: a pool that
    cannot hold the model is reported in one line, and the next command in
    the same process does not inherit the dropped note."""
    code, _, err = run_cli(capsys, "run", "--model", "llama-3.1-70b", "--gpu", "L4")
    assert code == 2 and NOTE not in err and len(err.strip().splitlines()) == 1, err
    code, _, err = run_cli(capsys, "run", "--num-requests", "5")
    assert code == 0 and NOTE not in err, err
