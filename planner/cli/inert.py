"""Options that would have no effect: rejected with one line, never ignored.

The rules are data (``planner.inert``); this module checks them against what
the user actually gave, which Click records per parameter
(``Context.get_parameter_source``), so a default never trips a rule.
"""

from __future__ import annotations

import typer

from planner.inert import InertOption, Rule, derives_swap_bytes, option_value


def given(ctx: typer.Context, name: str) -> bool:
    """Did the user set parameter ``name`` (command line or environment)?

    Compares the source by name: Typer vendors its own copy of Click, whose
    ``ParameterSource`` is not ``click.core.ParameterSource``."""
    src = ctx.get_parameter_source(name)
    return src is not None and src.name in ("COMMANDLINE", "ENVIRONMENT")


def spelled(ctx: typer.Context, name: str) -> str:
    """The option ``name`` as the user spelled it on the command line: its first
    flag, or ``--no-X`` for a switch the user set off."""
    for p in ctx.command.params:
        if p.name == name and p.opts:
            off = getattr(p, "secondary_opts", None) and ctx.params.get(name) is False
            return p.secondary_opts[0] if off else p.opts[0]
    return "--" + name.replace("_", "-")


def reject_inert(ctx: typer.Context, rules: tuple[Rule, ...]) -> None:
    """Raise ``InertOption`` for the first option the user gave that a rule says
    has no effect."""
    params = ctx.params
    for rule in rules:
        if not rule.inert(params):
            continue
        for name in rule.options:
            if name in params and given(ctx, name):
                raise InertOption(f"{spelled(ctx, name)} {rule.reason}")


def reject_inert_hardware(ctx: typer.Context, full: bool, pool: bool) -> None:
    """Refuse --gpu, --model and --tensor-parallel-size where nothing reads
    them: the pool is given (``pool``: --num-gpu-blocks, or a varied pool) and
    the step time is linear from --beta-coeffs (no preset, roofline or table),
    and, for the model and its split, its attention is plain (``full``:
    ``SchedulerConfig.one_full_attention_group``) and no swap block size is
    derived from it. Raises ``InertOption`` (one line)."""
    p = ctx.params
    linear = (
        option_value(p.get("latency", "linear")) == "linear" and p.get("beta_coeffs") is not None
    )
    if not (pool and linear):
        return
    names = ["gpu"] + (
        ["model", "tensor_parallel_size"] if full and not derives_swap_bytes(p) else []
    )
    inert = [spelled(ctx, n) for n in names if n in p and given(ctx, n)]
    if inert:
        raise InertOption(
            f"{' and '.join(inert)} {'has' if len(inert) == 1 else 'have'} no effect: the pool "
            "is given and --beta-coeffs sets the linear step time (use --latency roofline or "
            "measured, or let the model and GPU size the pool)"
        )
