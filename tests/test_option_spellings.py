"""One definition per option (issue 14, item 3).

Commands that take the same setting take it under the same spelling, with the
same help and default; enumerations list their choices; sweep spec fields are
the command line's names (or a documented equivalent).
"""

from __future__ import annotations

from collections import defaultdict

import typer

from helpers import run_cli
from planner.cli.commands import app
from planner.sweep.spec import (
    SCHEDULER_AXES,
    WORKLOAD_AXES,
    HardwareSpec,
    LatencySpec,
    SloSpec,
    SweepSpec,
    WorkloadSpec,
)

GROUP = typer.main.get_command(app)
# Same parameter name, different settings on purpose: sweep writes a folder,
# heatmap a picture.
DIFFERENT_ON_PURPOSE = {"out"}
# Spec fields spelled differently from plan run's option, and what they are there.
SPEC_TO_RUN = {
    "path": "trace_file",
    "format": "trace_format",
    "columns": "trace_columns",
    "hash_block_size": "trace_hash_block_size",
    "start_s": "trace_start",
    "duration_s": "trace_duration",
    "horizon_s": "horizon",
    "think_time_s": "think_time",
    "alpha": "alpha_coeffs",
    "beta": "beta_coeffs",
    "overhead_us": "step_overhead_us",
    "prompt": "prompt_tokens",  # a table: mean, stdev, min, max = the four options
    "output": "output_tokens",
    "kind": None,  # a spec's workload or latency kind: a run picks it from other options
    "gamma_cv": None,  # spec only: gamma arrivals' coefficient of variation
    "arrivals_until_s": None,  # spec only (plan size's horizon_s); runs: --trace-duration
    "name": None,
    "description": None,
    "workload": None,
    "hardware": None,
    "scheduler": None,
    "axes": None,
    "slo": None,  # a table: ttft_slo, tpot_slo, itl_slo, e2e_slo, goodput = plan run's options
    "search": None,  # a table: rate_scale_min, rate_scale_max, rate_tolerance = plan max-rate's
}


def _params_by_name() -> dict[str, dict[str, object]]:
    by_name: dict[str, dict[str, object]] = defaultdict(dict)
    for cname, cmd in GROUP.commands.items():
        for p in cmd.params:
            by_name[p.name][cname] = p
    return by_name


def test_shared_options_are_defined_once():
    shared = 0
    for name, per_command in _params_by_name().items():
        if len(per_command) < 2 or name in DIFFERENT_ON_PURPOSE:
            continue
        shared += 1
        forms = {
            c: (tuple(p.opts), tuple(p.secondary_opts), p.help, repr(p.default))
            for c, p in per_command.items()
        }
        assert len(set(forms.values())) == 1, f"{name} differs between commands: {forms}"
    assert shared >= 20  # pool, hardware, trace, synthetic, latency options


def test_run_check_and_safe_limit_take_the_pool_and_trace_options():
    wanted = {
        "num_gpu_blocks",
        "block_size",
        "max_model_len",
        "model",
        "gpu",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "trace_file",
        "trace_format",
        "trace_columns",
        "trace_start",
        "trace_duration",
    }
    for cname in ("run", "check", "safe-limit"):
        names = {p.name for p in GROUP.commands[cname].params}
        assert wanted <= names, (cname, wanted - names)


def test_enumerations_show_their_choices(capsys):
    code, out, _ = run_cli(capsys, "run", "--help")
    assert code == 0
    text = " ".join(out.split())
    for choices in (
        "<youngest|priority|least_progress|most_blocks>",
        "<vanilla|projected|projected_oracle>",
        "<recompute|restart|swap>",
        "<auto|azure|csv|jsonl|mooncake>",
    ):
        assert choices in text


def test_vllm_spelling_of_the_pool_override_is_accepted(capsys):
    code, out, err = run_cli(
        capsys, "check", "--num-gpu-blocks-override", "65", "--max-model-len", "1024"
    )
    assert code == 0, err
    assert "65 blocks" in out


def test_spec_fields_use_the_command_line_names():
    run = {p.name for p in GROUP.commands["run"].params}
    assert {SPEC_TO_RUN.get(a, a) for a in SCHEDULER_AXES} <= run
    assert set(WORKLOAD_AXES) <= run
    for model in (WorkloadSpec, LatencySpec, HardwareSpec, SweepSpec, SloSpec):
        for field in model.model_fields:
            if field in run:
                continue
            assert field in SPEC_TO_RUN, f"{model.__name__}.{field}: no plan run equivalent"
            target = SPEC_TO_RUN[field]
            assert target is None or target in run, (field, target)
