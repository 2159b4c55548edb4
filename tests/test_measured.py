"""The measured step-time backend: the kernel's table interpolation (no extra
needed) and, with aiconfigurator-core installed, the tables it builds."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from test_crosscheck import _linear_for_compat, _random_case

from helpers import compare_final, kernel_trace_rows, reference_trace_rows, run_both, run_cli
from planner.kernel import state as S
from planner.latency.measured import AIC_SYSTEMS, GRID
from planner.latency.step_time import MEASURED, MeasuredLatency, measured_table_ns, step_time_ns

# A function multilinear in each input (P, D, a, Cp), in ns: multilinear
# interpolation reproduces it exactly, also beyond the grid's ends.
COEF = (900_000.0, 17_000.0, 40_000.0, 6.0, 3.0, 0.5, 0.25)


def f_ns(p: float, d: float, a: float, cp: float) -> float:
    c0, cp_, cd, cda, cpc, cpd, cpdc = COEF
    return c0 + cp_ * p + cd * d + cda * d * a + cpc * p * cp / 64 + cpd * p * d + cpdc * p * d * a


def synthetic_table(grid=GRID) -> np.ndarray:
    gp, gd, ga, gc = grid
    vals = np.array(
        [[[[f_ns(p, d, a, c) for c in gc] for a in ga] for d in gd] for p in gp], dtype=np.float64
    )
    head = np.array([len(g) for g in grid], dtype=np.float64)
    return np.concatenate([head, *(np.asarray(g, dtype=np.float64) for g in grid), vals.ravel()])


def synthetic_latency(scale: float = 1.0, overhead_us: float = 0.0) -> MeasuredLatency:
    return MeasuredLatency(
        "llama-3.1-8b", "H100", 1, synthetic_table(), "synthetic", scale, overhead_us
    )


def step_inputs(p: int, cp: int, decode_ctx: list[int]) -> tuple[int, int, int, int]:
    """(prefill, decode, attended, kv_tokens) as the kernel counts them for one
    prefill chunk of p tokens after cp computed ones and decodes whose KV
    (their new token included) is decode_ctx."""
    att = p * cp + p * (p + 1) // 2 if p else 0
    kv = cp + p if p else 0
    return p, len(decode_ctx), att + sum(decode_ctx), kv + sum(decode_ctx)


def test_interpolation_reproduces_a_multilinear_function_and_splits_the_context():
    lat = synthetic_latency(scale=1.5, overhead_us=7.0)
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    fp = np.array(lat.floats())
    rng = np.random.default_rng(3)
    for _ in range(300):
        p = int(rng.choice([0, 1, int(rng.integers(2, 20000))]))
        cp = int(rng.integers(0, 70000)) if p > 1 else 0
        ctx = [int(x) for x in rng.integers(1, 140000, int(rng.integers(0, 1100)))]
        if p + len(ctx) == 0:
            continue
        args = step_inputs(p, cp, ctx)
        d = len(ctx)
        a = sum(ctx) / d if d else 1.0
        want = 7000 + max(math.ceil(1.5 * f_ns(p, d, a, cp)), 1)
        got = step_time_ns(MEASURED, ip, fp, *args, lat.table)
        assert abs(got - want) <= 1, (p, cp, d, a)  # float rounding of the ceil only
    assert step_time_ns(MEASURED, ip, fp, 0, 0, 0, 0, lat.table) == 0


def test_several_fresh_prefills_give_no_prefill_context():
    """Two fresh prompts (no computed tokens) in one step: the split gives Cp 0
    and the decodes keep their own KV."""
    tab = synthetic_table()
    p1, p2, ctx = 300, 500, [1000, 3000]
    att = p1 * (p1 + 1) // 2 + p2 * (p2 + 1) // 2 + sum(ctx)
    kv = p1 + p2 + sum(ctx)
    got = measured_table_ns(tab, p1 + p2, 2, att, kv)
    assert got == pytest.approx(f_ns(p1 + p2, 2, 2000, 0), rel=1e-12)


def test_kernel_fast_path_and_reference_agree_under_the_measured_kind():
    """Seeded random cases (tests/test_crosscheck.py's) with a measured table:
    kernel == reference step for step, and the decode fast path changes nothing."""
    rng = np.random.default_rng(20261201)
    fast_runs = 0
    for _ in range(40):
        cfgs, wl, _ = _random_case(rng, rng)
        lat = synthetic_latency(scale=float(rng.uniform(0.5, 2.0)))
        cfgs = _linear_for_compat(cfgs, lat)
        traced, fast, engines = run_both(cfgs, wl, lat)
        for c, eng in enumerate(engines):
            assert kernel_trace_rows(traced, c) == reference_trace_rows(eng)
            compare_final(traced, c, eng)
            compare_final(fast, c, eng)
            fast_runs += fast.state.out.counters[c][S.O_MACRO_STEPS] > 0
    assert fast_runs >= 5


def test_gpu_without_data_exits_2_naming_the_alternatives(capsys):
    code, out, err = run_cli(
        capsys, "run", "--latency", "measured", "--model", "llama-3.1-8b", "--gpu", "RTX-4090"
    )
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and "RTX-4090" in line
    assert all(g in line for g in AIC_SYSTEMS) and "--latency roofline" in line


def test_measured_scale_needs_the_measured_kind(capsys):
    code, _, err = run_cli(capsys, "run", "--measured-scale", "1.2")
    assert code == 2 and "--measured-scale" in err and "measured" in err


# ---- with aiconfigurator-core -------------------------------------------------


def test_table_matches_direct_estimates():
    """At grid points the table holds aiconfigurator's own estimate; between
    them the interpolation stays within 6% (README: median 0.3-0.6%, p95
    about 2%, max 5.7% on 400 random steps of each kind)."""
    pytest.importorskip("aiconfigurator_core")
    from planner.latency import measured

    lat = measured.build("llama-3.1-8b", "H100", quiet=True)
    est = measured.Estimator("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", 1, None, "auto")
    for p, d, a, cp in [(2048, 0, 1, 0), (0, 64, 2048, 0), (512, 64, 1024, 4096)]:
        args = step_inputs(p, cp, [a] * d)
        assert measured_table_ns(lat.table, *args) == pytest.approx(
            est.ms(p, d, d * a, cp) * 1e6, rel=1e-9
        )
    rng = np.random.default_rng(11)
    for _ in range(60):
        p = int(rng.integers(0, 8192))
        cp = int(rng.integers(0, 16384)) if p > 1 else 0
        d = int(rng.integers(0 if p else 1, 512))
        a = int(rng.integers(1, 16384))
        got = measured_table_ns(lat.table, *step_inputs(p, cp, [a] * d))
        assert got == pytest.approx(est.ms(p, d, d * a, cp) * 1e6, rel=0.06)


def test_measured_run_names_its_data_version(capsys):
    pytest.importorskip("aiconfigurator_core")
    code, out, err = run_cli(
        capsys, "run", "--latency", "measured", "--model", "llama-3.1-8b", "--gpu", "H100",
        "--num-requests", "20", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert "h100_sxm vLLM 0.24.0 data" in err and "older than the vLLM 0.33" in err


def test_longest_step_bounds_every_reachable_step():
    """config.max_step_ns (the int64 clock guard) is at least any step's time
    for steps within the token budget and the pool."""
    from planner.config import SchedulerConfig, max_step_ns

    cfg = SchedulerConfig(num_gpu_blocks=500, max_num_batched_tokens=2048)
    lat = synthetic_latency(scale=1.2, overhead_us=3.0)
    bound = max_step_ns(cfg, lat)
    ip = np.array(lat.ns()[:3], dtype=np.int64)
    fp = np.array(lat.floats())
    pool = cfg.num_gpu_blocks * cfg.block_size
    rng = np.random.default_rng(5)
    for _ in range(300):
        p = int(rng.integers(0, 2049))
        d = int(rng.integers(0 if p else 1, 2049 - p))
        cp = int(rng.integers(0, pool - p + 1)) if p > 1 else 0
        ctx = [pool // (d or 1)] * d
        assert step_time_ns(MEASURED, ip, fp, *step_inputs(p, cp, ctx), lat.table) <= bound


MEASURED_SPEC = """
name = "measured"
horizon_s = 30
[workload]
kind = "synthetic"
num_requests = 20
rate = 2
[workload.prompt]
mean = 300
[workload.output]
mean = 50
[hardware]
model = "llama-3.1-8b"
gpu = "H100"
[latency]
kind = "measured"
[axes]
max_num_seqs = [8, 64]
"""


def test_a_spec_takes_the_measured_kind(tmp_path):
    """Without the extra a spec with it is refused in one line naming it; with
    the extra its configs run on the measured tables."""
    from planner.sweep.spec import SpecError, load_spec_text

    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        with pytest.raises(SpecError, match="aic"):
            load_spec_text(MEASURED_SPEC, tmp_path)
        return
    sweep = load_spec_text(MEASURED_SPEC, tmp_path)
    assert type(sweep.latency).__name__ == "MeasuredLatency"
    from planner.api import simulate

    (wl,) = sweep.workloads.values()
    df = simulate(sweep.configs, wl, sweep.latency).metrics()
    assert (df.completed > 0).all()
    with pytest.raises(SpecError, match="beta"):
        load_spec_text(
            MEASURED_SPEC.replace('kind = "measured"', 'kind = "measured"\nbeta = [1, 1, 1]'),
            tmp_path,
        )


def test_any_catalog_model_or_config_json_aiconfigurator_reads(capsys, tmp_path):
    """Issue 33: not only the models aiconfigurator ships a config for. The
    catalog's Mixtral (not in AIC_MODELS) and a config.json path holding
    Llama-3.1-8B's config build tables; the config.json path gives the same
    table as the preset (aiconfigurator reads the same architecture), and a
    config without architectures gets the model type's."""
    pytest.importorskip("aiconfigurator_core")
    import json

    from planner.latency import measured
    from planner.models import catalog

    assert "mistralai/Mixtral-8x7B-Instruct-v0.1" not in measured.AIC_MODELS
    mix = measured.build("mixtral-8x7b", "H100", tp=2, quiet=True)
    assert mix.table.size > 0 and "h100_sxm" in mix.source
    cfg = dict(catalog.entries()["meta-llama/Llama-3.1-8B-Instruct"]["config"])
    assert "architectures" not in cfg
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    mine = measured.build(str(tmp_path), "H100", quiet=True)
    preset = measured.build("llama-3.1-8b", "H100", quiet=True)
    np.testing.assert_allclose(mine.table, preset.table, rtol=0.02)
    folder = measured.aic_model(str(tmp_path))
    written = json.loads((Path(folder) / "config.json").read_text())
    assert written["architectures"] == ["LlamaForCausalLM"]


def test_a_model_aiconfigurator_cannot_read_is_one_line(capsys, tmp_path):
    pytest.importorskip("aiconfigurator_core")
    code, _, err = run_cli(
        capsys, "run", "--latency", "measured", "--model", "mistral-7b", "--gpu", "H100",
        "--num-requests", "5",
    )  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "mistral-7b" in err and "MistralForCausalLM" in err and "--latency roofline" in err
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "no_such_type", "hidden_size": 64}')
    from planner.latency import measured

    with pytest.raises(measured.MeasuredError, match="no_such_type"):
        measured.aic_model(str(bad))


def test_bad_input_after_the_tables_load_is_still_one_line(capsys):
    """The data-version line is a note said once the input is accepted, so a
    refusal found after the tables load is the only line on stderr."""
    pytest.importorskip("aiconfigurator_core")
    args = ("run", "--model", "llama-3.1-8b", "--gpu", "H100", "--latency", "measured")
    code, _, err = run_cli(capsys, *args, "--max-num-seqs", "64", "--max-num-batched-tokens", "8")
    assert code == 2 and err.count("\n") == 1 and "refuses to start" in err
    code, _, err = run_cli(capsys, *args, "--num-requests", "3", "--max-num-seqs", "8")
    assert code == 0 and "plan: note: measured step times:" in err
