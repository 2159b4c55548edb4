"""``--compat blis`` (sweep field ``compat``): the fields it implies, refused
when the user sets them otherwise, and the defect switch that needs it
(docs/blis-compat.md). No silent override: every contrary value is one line, exit 2.
"""

from __future__ import annotations

import json

import pytest

from helpers import run_cli
from planner.config import BLIS_IMPLIED, SchedulerConfig, blis_config, compat_settings
from planner.latency.step_time import RooflineLatency
from planner.sweep.spec import SpecError, load_spec

SYN = 'kind = "synthetic"\nnum_requests = 4\nprompt = { kind = "constant", mean = 64 }\n'
SYN += 'output = { kind = "constant", mean = 8 }\n'
RUN = ("run", "--num-gpu-blocks", "200", "--num-requests", "4", "--prompt-tokens", "64")
RUN += ("--output-tokens", "8", "--json")


@pytest.mark.parametrize(
    "flag,shown,implied",
    [
        (["--preemption-mode", "recompute"], "--preemption-mode recompute", "restart"),
        (["--null-block"], "--null-block true", "false"),
        (["--scheduler-reserve-full-isl"], "--scheduler-reserve-full-isl true", "false"),
        (["--no-enable-prefix-caching"], "--enable-prefix-caching false", "true"),
    ],
)
def test_cli_refuses_a_contrary_explicit_value(capsys, flag, shown, implied):
    code, out, err = run_cli(capsys, *RUN, "--compat", "blis", *flag)
    assert code == 2 and out == ""
    want = f"plan: error: {shown} contradicts --compat blis (it implies {implied})"
    assert err.strip().splitlines() == [want]


def test_cli_implies_the_fields_and_accepts_agreeing_values(capsys):
    code, out, err = run_cli(capsys, *RUN, "--compat", "blis")
    assert code == 0, err
    row = json.loads(out)
    assert row["compat"] == "blis" and not row["blis_full_hit_defect"]
    assert {k: row[k] for k in BLIS_IMPLIED} == BLIS_IMPLIED
    args = ("--preemption-mode", "restart", "--no-null-block", "--enable-prefix-caching")
    code, out2, err = run_cli(capsys, *RUN, "--compat", "blis", *args)
    assert code == 0, err
    assert json.loads(out2)["completed"] == row["completed"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--blis-full-hit-defect"], "--blis-full-hit-defect needs --compat blis"),
        (["--compat", "blis", "--watermark", "0.01"], "--watermark 0.01 contradicts --compat"),
        (["--compat", "blis", "--latency", "roofline", "--model", "llama-3.1-8b",
          "--gpu", "H100"], "--compat blis needs the linear step-time model"),
        # before the measured table is built (it would print its data note first)
        (["--compat", "blis", "--latency", "measured", "--model", "llama-3.1-8b",
          "--gpu", "H100"], "--compat blis needs the linear step-time model"),
    ],
)  # fmt: skip
def test_cli_other_contradictions_are_one_line(capsys, args, message):
    code, out, err = run_cli(capsys, *RUN, *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


def test_vllm_compat_implies_nothing():
    assert compat_settings("vllm", {"null_block": True}) == {}
    with pytest.raises(ValueError, match="--compat must be one of"):
        compat_settings("sglang", {})


def test_config_checks_the_implied_fields():
    with pytest.raises(ValueError, match="--preemption-mode recompute contradicts --compat blis"):
        SchedulerConfig(compat="blis")
    with pytest.raises(ValueError, match="--null-block true contradicts --compat blis"):
        blis_config(null_block=True)
    cfg = blis_config(max_num_seqs=4)
    assert (cfg.preemption_mode, cfg.null_block, cfg.enable_prefix_caching) == (
        "restart",
        False,
        True,
    )
    assert not cfg.scheduler_reserve_full_isl


def test_compat_needs_the_linear_model():
    from planner.api import simulate
    from planner.workload.traces import s1_exact

    roof = RooflineLatency("llama-3.1-8b", "H100")
    with pytest.raises(ValueError, match="needs the linear step-time model"):
        simulate([blis_config()], s1_exact(), roof)


def _spec(tmp_path, scheduler: str, axes: str = "max_num_seqs = [4]"):
    p = tmp_path / "s.toml"
    p.write_text(f'name = "t"\n[workload]\n{SYN}[scheduler]\n{scheduler}\n[axes]\n{axes}\n')
    return p


@pytest.mark.parametrize(
    "scheduler,axes,where",
    [
        ('compat = "blis"\nnull_block = true', "max_num_seqs = [4]", "scheduler.null_block"),
        ('compat = "blis"', 'preemption_mode = ["restart", "recompute"]', "axes.preemption_mode"),
        ("blis_full_hit_defect = true", "max_num_seqs = [4]", "scheduler.blis_full_hit_defect"),
    ],
)
def test_spec_refuses_contrary_values(tmp_path, scheduler, axes, where):
    with pytest.raises(SpecError, match=f': {where}: .*(contradicts|needs) compat "blis"'):
        load_spec(_spec(tmp_path, scheduler, axes))


def test_spec_compat_axis_implies_the_fields(tmp_path):
    sweep = load_spec(_spec(tmp_path, "num_gpu_blocks = 200", 'compat = ["vllm", "blis"]'))
    by = {c.compat: c for c in sweep.configs}
    assert by["vllm"].preemption_mode == "recompute" and by["vllm"].null_block
    assert {k: getattr(by["blis"], k) for k in BLIS_IMPLIED} == BLIS_IMPLIED


def test_spec_crossing_compat_with_an_implied_axis_says_how_to_sweep_it(tmp_path):
    """compat x preemption_mode has contradicting rows (blis with recompute): the
    one-line refusal says how to get the grid meant (tryout finding)."""
    axes = 'compat = ["vllm", "blis"]\npreemption_mode = ["recompute", "restart"]'
    with pytest.raises(SpecError) as e:
        load_spec(_spec(tmp_path, "num_gpu_blocks = 200", axes))
    msg = str(e.value)
    assert 'axes.preemption_mode: recompute contradicts compat "blis"' in msg
    assert "leave preemption_mode out of it" in msg and "\n" not in msg
    # A field compat blis needs but does not set: the hint keeps only the split.
    axes = 'compat = ["vllm", "blis"]\nblis_full_hit_defect = [true, false]'
    with pytest.raises(SpecError) as e:
        load_spec(_spec(tmp_path, "num_gpu_blocks = 200", axes))
    assert 'needs compat "blis"; a grid crossing compat with blis_full_hit_defect' in str(e.value)
    assert "leave" not in str(e.value)
    # Without compat as an axis the refusal stays as it was.
    with pytest.raises(SpecError) as e:
        load_spec(_spec(tmp_path, 'compat = "blis"', 'preemption_mode = ["recompute"]'))
    assert "leave" not in str(e.value)


def test_spec_with_compat_and_a_non_linear_model_is_refused_at_load(tmp_path):
    """Before any work (a sweep used to start, then stop, leaving its folder)."""
    p = tmp_path / "s.toml"
    p.write_text(
        f'name = "t"\n[workload]\n{SYN}[hardware]\nmodel = "llama-3.1-8b"\ngpu = "H100"\n'
        '[latency]\nkind = "roofline"\n[scheduler]\ncompat = "blis"\n[axes]\nmax_num_seqs = [4]\n'
    )
    with pytest.raises(SpecError, match=r"scheduler.compat: compat blis needs latency.kind"):
        load_spec(p)


def test_contradiction_is_named_before_options_it_makes_inert(capsys):
    """--preemption-mode swap without CPU blocks would ask for --cpu-swap-blocks,
    which compat blis forbids anyway: the contradiction comes first."""
    code, out, err = run_cli(capsys, *RUN, "--compat", "blis", "--preemption-mode", "swap")
    assert code == 2 and "contradicts --compat blis" in err


def test_compat_implies_caching_for_the_prefix_affinity_router(capsys):
    code, out, err = run_cli(
        capsys, *RUN, "--compat", "blis", "--replicas", "2", "--router", "prefix_affinity"
    )
    assert code == 0, err
    assert json.loads(out)["enable_prefix_caching"] is True


def test_run_text_says_compat_is_on(capsys):
    text = [a for a in RUN if a != "--json"]
    code, out, err = run_cli(capsys, *text, "--compat", "blis", "--blis-full-hit-defect")
    assert code == 0, err
    assert "compat blis: BLIS b563c440's scheduler rules, with its full-hit defect" in out


def test_coefficients_finer_than_a_ns_are_warned_under_compat(capsys):
    args = (*RUN, "--compat", "blis", "--beta-coeffs")
    code, _, err = run_cli(capsys, *args, "5752.7123,17.25,6")
    assert code == 0 and "more than 3 decimals in us" in err
    code, _, err = run_cli(capsys, *args, "5752.712,17.25,6")
    assert code == 0 and "decimals" not in err
