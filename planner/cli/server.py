"""The server settings a command runs, resolved once and printed with their source.

Every command that simulates or sizes a server calls ``resolve_server``: the
settings the user gave, else vLLM 0.33's defaults for the model and GPU
(``planner.models.vllm_defaults``), else scenario S1's server, with the
planner's deliberate differences marked (``planner.resolve.server``).
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from planner import resolve
from planner.cli.inert import given
from planner.inert import InertOption
from planner.models import vllm_defaults
from planner.models.vllm_defaults import Setting


def resolve_server(
    ctx: typer.Context,
    values: dict[str, Any],
    model: str | None,
    gpu: str | None,
    **kw: Any,
) -> dict[str, Setting]:
    """``resolve.server`` for a command's option values (``values``: field ->
    value, None = not given; keyword arguments as ``resolve.server`` takes).

    Raises:
        InertOption: --usage-context where it picks nothing (no --model or
            --gpu, or both batch sizes given).
        ValueError: an unknown model, GPU or usage context (one line).
    """
    if given(ctx, "usage_context"):
        if model is None and gpu is None:
            raise InertOption(
                "--usage-context has no effect without --model or --gpu (it picks vLLM's "
                "defaults for them)"
            )
        if values.get("max_num_batched_tokens") is not None:
            raise InertOption(
                "--usage-context has no effect with --max-num-batched-tokens given (the "
                "token budget is the only default it changes)"
            )
    names = (*vllm_defaults.FIELDS, vllm_defaults.HYBRID)
    return resolve.server({k: values.get(k) for k in names}, model, gpu, **kw)


def values(settings: dict[str, Setting]) -> dict[str, Any]:
    """field -> value of resolved settings."""
    return {k: s.value for k, s in settings.items()}


def s1_server(settings: dict[str, Setting]) -> bool:
    """Whether nothing came from vLLM's defaults (no --model or --gpu)."""
    return not any(s.source == vllm_defaults.VLLM for s in settings.values())


def print_settings(settings: dict[str, Setting], file: Any = None, also: str = "") -> None:
    """Print the settings that were not given, one per line under a heading;
    without --model/--gpu, one line naming scenario S1's server instead, with
    ``also`` (e.g. the step time and pool it assumes) appended."""
    out = sys.stdout if file is None else file
    lines = resolve.server_lines(settings)
    if not lines:
        return
    if s1_server(settings) and not any(
        s.source == vllm_defaults.DIFFERS for s in settings.values()
    ):
        shown = ", ".join(
            line.split(" (")[0] for line in lines if not line.startswith("gpu_memory")
        )
        print(
            f"server: scenario S1's, not vLLM's defaults (no --model or --gpu): {shown}{also}",
            file=out,
        )
        return
    print("server settings not given (source):", file=out)
    for line in lines:
        print(f"  {line}", file=out)
