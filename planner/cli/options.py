"""Command-line options shared by several ``plan`` commands, each defined once.

A command declares a parameter with one of these types and the option has the
same name, help and parsing everywhere, so an error message that names it
(``resolve.latency``: "pass --beta-coeffs ...") is true for every command that
can print it. ``tests/test_error_flags.py`` checks that for all commands.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import sys
import time
import typing
from collections.abc import Callable, Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, TypeVar

import click
import numpy as np
import typer

from planner import bounds, resolve
from planner.config import ADMISSIONS, COMPATS, ROUTERS, VICTIMS, SchedulerConfig
from planner.latency.step_time import Latency, MeasuredLatency
from planner.models.hardware import GPUS
from planner.slo import SLO, from_options
from planner.speculative import Speculation, acceptance_from_log, parse_speculative_config
from planner.speculative import speculation_from as _speculation_from
from planner.text import count
from planner.workload.arrays import (
    S1_OUTPUT,
    S1_PROMPT,
    Workload,
    drawn_mean_warning,
    length_from_options,
    seed_acts,
    sessions,
)
from planner.workload.traces import DEFAULT_COLUMNS

F = TypeVar("F", bound=Callable[..., object])


class Interrupted(Exception):
    """Ctrl-C during a long command; work done so far is on disk (the message
    says where and how to resume; ``cli.main`` prints it, exit 130)."""


class BoundedCommand(typer.core.TyperCommand):
    """A ``plan`` command whose numeric options are checked against
    ``planner.bounds.OPTION_BOUNDS`` after parsing and before the command runs;
    its help lists the options under their panels (``panel``), each numeric
    one with its range and the range's reason."""

    def invoke(self, ctx: click.Context) -> object:
        """Check every numeric option given or defaulted, then run the command.

        Raises ValueError (one line naming the option and its bound)."""
        check_numeric_options(ctx)
        return super().invoke(ctx)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Options grouped by help panel (each option's ``rich_help_panel``, in
        the order the panels first appear), each laid out by Click's own
        formatter (full option names at any width); ungrouped ones under "Options"."""
        groups: dict[str, list[tuple[str, str]]] = {}
        numeric = {p.name for p in numeric_params(self)}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.name in numeric:  # its bound and reason
                bound = bounds.OPTION_BOUNDS[param.name].help_text()
                record = (record[0], f"{record[1]}  [range: {bound}]".lstrip())
            if record is not None:
                title = getattr(param, "rich_help_panel", None) or "Options"
                groups.setdefault(title, []).append(record)
        for title, rows in groups.items():
            with formatter.section(title):
                formatter.write_dl(rows)


@dataclasses.dataclass(frozen=True)
class Param:
    """One option of a command whose options are a table (``takes``): the
    Python name (the flag is ``--`` + name with dashes, unless its
    ``typer.Option`` names one), its ``Annotated[type, typer.Option(...)]``
    and its default."""

    name: str
    kind: object
    default: object = None


def panel(title: str, *params: Param) -> tuple[Param, ...]:
    """``params`` listed under ``title`` in the command's help: each
    ``typer.Option`` copied with ``rich_help_panel=title``."""
    out = []
    for p in params:
        base, *meta = typing.get_args(p.kind)
        meta = [copy.copy(m) for m in meta]
        for m in meta:
            if isinstance(m, typer.models.OptionInfo):
                m.rich_help_panel = title
        out.append(dataclasses.replace(p, kind=Annotated[(base, *meta)]))
    return tuple(out)


def takes(*params: Param) -> Callable[[F], F]:
    """Give a command written as ``def cmd(ctx, **o)`` the signature Typer
    reads: ``ctx: typer.Context`` then ``params`` in order, keyword-only.
    The option definitions stay in one table; the body reads ``o[name]``."""
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise ValueError(
            f"an option is listed twice: {sorted(n for n in names if names.count(n) > 1)}"
        )

    def give(fn: F) -> F:
        ctx = inspect.Parameter(
            "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
        )
        kw = inspect.Parameter.KEYWORD_ONLY
        rest = [inspect.Parameter(p.name, kw, default=p.default, annotation=p.kind) for p in params]
        fn.__signature__ = inspect.Signature([ctx, *rest], return_annotation=None)  # type: ignore[attr-defined]
        return fn

    return give


NUMERIC_TYPES = frozenset({"int", "float", "list[int]", "list[float]"})


def numeric_params(command: click.Command) -> list[typer.core.TyperOption]:
    """The command's parameters annotated int or float (lists of them included)."""
    return [
        p
        for p in command.params
        if isinstance(p, typer.core.TyperOption | typer.core.TyperArgument)
        and p.bare_type() in NUMERIC_TYPES
    ]


def check_numeric_options(ctx: click.Context) -> None:
    """Each numeric parameter's value (each element of a list) against its bound."""
    for p in numeric_params(ctx.command):
        value = ctx.params.get(p.name or "")
        name = bounds.flag(p.name or "")
        label = name if name in p.opts or not p.opts else p.opts[0]
        for v in value if isinstance(value, list | tuple) else [value]:
            if v is not None:
                bounds.check_option(p.name or "", v, label)


class LatencyKind(StrEnum):
    """Step-time models (``planner.latency.step_time``; ``resolve.LATENCY_KINDS``)."""

    linear = "linear"
    roofline = "roofline"
    measured = "measured"


LatencyOpt = Annotated[
    LatencyKind,
    typer.Option(
        help="Step-time model [default: linear; with --model and --gpu that have no linear "
        "preset (only llama-3.1-8b on one H100 has one): measured where aiconfigurator-core "
        "has data for them, else roofline, said on stderr].",
        show_default=False,
    ),
]


class GdnPrefillBackendKind(StrEnum):
    """vLLM's Gated DeltaNet prefill kernels that change KV sizing
    (``planner.models.kv_cache.GDN_PREFILL_BACKENDS``)."""

    flashinfer = "flashinfer"
    triton = "triton"


GdnPrefillBackend = Annotated[
    GdnPrefillBackendKind,
    typer.Option(
        help="Gated DeltaNet prefill kernel of a linear-attention hybrid, which sizes its "
        "blocks when prefix caching is on: flashinfer (vLLM's choice on Hopper, and on "
        "Blackwell with CUDA >= 13) or triton (elsewhere)."
    ),
]
AlphaCoeffs = Annotated[
    str | None,
    typer.Option(
        help="alpha0,alpha1,alpha2 in microseconds [default: preset or S1 seed; 0,0,0 when "
        "--beta-coeffs is given, which then describes another fit]."
    ),
]
BetaCoeffs = Annotated[
    str | None,
    typer.Option(help="beta0,beta1,beta2 in microseconds [default: preset or S1 seed]."),
]
Mfu = Annotated[float | None, typer.Option(help="Roofline: model FLOP utilisation.")]
Mbu = Annotated[float | None, typer.Option(help="Roofline: memory bandwidth use.")]
StepOverheadUs = Annotated[
    float, typer.Option(help="Roofline or measured: fixed per step, microseconds.")
]
MeasuredScale = Annotated[
    float | None,
    typer.Option(help="Measured: factor on the table's step times (plan calibrate fits it)."),
]
StepTimeError = Annotated[
    float | None,
    typer.Option(
        help="Fraction the step time may be off by: the answer is also given with every step "
        "that much slower and faster [default: the step-time model's median TPOT error on the "
        "shipped real runs (docs/validate.md), none for a model they did not exercise; 0: off]."
    ),
]


def coeffs(text: str, flag: str) -> tuple[float, float, float]:
    """Parse ``a,b,c`` (three numbers, microseconds) given to ``flag``.

    Raises ValueError (one line, naming ``flag``) otherwise.
    """
    try:
        vals = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{flag}: expected three comma-separated numbers, got {text!r}") from None
    if len(vals) != 3:
        raise ValueError(f"{flag}: expected three comma-separated numbers, got {text!r}")
    return vals  # type: ignore[return-value]


# Notes a command says on stderr once its input has passed every check: held
# until the simulation starts (``say_compile``) or the command ends, and
# dropped when it fails on bad input, whose report stays one line.
_NOTES: list[str] = []


def note(text: str) -> None:
    """Say ``plan: note: TEXT`` on stderr once the command's input is accepted."""
    _NOTES.append(text)


def flush_notes(keep: bool = True) -> None:
    """Print the held notes (``keep``) or drop them (bad input), and forget them."""
    if keep:
        for text in _NOTES:
            print(f"plan: note: {text}", file=sys.stderr, flush=True)
    _NOTES.clear()


def step_time(
    latency: LatencyKind,
    model: str | None,
    gpu: str | None,
    tp: int,
    alpha_coeffs: str | None,
    beta_coeffs: str | None,
    mfu: float | None,
    mbu: float | None,
    step_overhead_us: float,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    measured_scale: float | None = None,
    latency_given: bool = True,
    quiet: bool = False,
    speculation: Speculation | None = None,
) -> Latency:
    """The step-time model from the latency options above (``resolve.latency``
    picks it and states the defaults); the roofline reads the model's weight
    and KV bytes under ``--quantization`` and ``--kv-cache-dtype``. With no
    ``--latency`` given (``latency_given`` False), no linear coefficients and
    no linear preset for the model and GPU, the best model available instead
    (``resolve.best_available_latency``), said on stderr once the input is
    accepted (``note``). ``quiet``: the measured tables' data-version line is
    not printed (a second pool on a GPU whose line was printed).
    ``speculation``: the run's; an EAGLE, EAGLE-3 or MTP drafter is priced
    only by the roofline (``latency.draft``), so with a model and GPU and nothing chosen
    the default is the roofline, said in a note (else a default would refuse
    the drafter the user asked for)."""
    if measured_scale is not None and latency != LatencyKind.measured:
        raise ValueError("--measured-scale needs --latency measured")
    chose = latency_given or any(x is not None for x in (alpha_coeffs, beta_coeffs, mfu, mbu))
    drafter = speculation is not None and speculation.lookahead_tokens > 0
    if drafter and not chose and model is not None and gpu is not None:
        lat = resolve.latency(
            "roofline", model, gpu, tp, None, None, None, None, step_overhead_us,
            quantization, kv_cache_dtype,
        )  # fmt: skip
        note(
            "no --latency given and a drafter in --speculative-config, so the roofline, the "
            f"step-time model that prices the drafter: {lat.describe()}"
        )
        return lat
    if not chose and model is not None and gpu is not None:
        unchosen = resolve.unchosen_latency(
            model, gpu, tp, quantization, kv_cache_dtype, step_overhead_us
        )
        if unchosen is not None:
            note(unchosen[1])
            return unchosen[0]
    lat = resolve.latency(
        latency.value,
        model,
        gpu,
        tp,
        None if alpha_coeffs is None else coeffs(alpha_coeffs, "--alpha-coeffs"),
        None if beta_coeffs is None else coeffs(beta_coeffs, "--beta-coeffs"),
        mfu,
        mbu,
        step_overhead_us,
        quantization,
        kv_cache_dtype,
        quiet=True,  # said below, once the input is accepted
    )
    if isinstance(lat, MeasuredLatency) and not quiet:
        from planner.latency.measured import data_line

        note(data_line(lat))
    if measured_scale is not None:
        lat = dataclasses.replace(lat, scale=measured_scale)  # type: ignore[type-var]
    return lat


# Synthetic workloads (``planner.workload.arrays.synthetic``); S1's shapes are the defaults.
class Arrival(StrEnum):
    """Arrival processes (``workload.ARRIVALS``)."""

    constant = "constant"
    poisson = "poisson"
    gamma = "gamma"
    offline = "offline"


class LengthKind(StrEnum):
    """Length laws of a synthetic workload (``workload.LENGTH_KINDS``)."""

    gaussian = "gaussian"
    lognormal = "lognormal"
    constant = "constant"


PROMPT_HELP = "Synthetic prompt mean, tokens [default: S1's 300, stdev 200, 200..400]."
OUTPUT_HELP = "Synthetic output mean, tokens [default: S1's 3,500, stdev 3,200, 3,200..3,596]."
STDEV_HELP = "Standard deviation, tokens [default: S1's when no length option is given, else 0]."
MIN_HELP = "Lower clamp, tokens [default: S1's when no length option is given, else 1]."
MAX_HELP = "Upper clamp, tokens [default: S1's when no length option is given, else none]."

NumRequests = Annotated[int, typer.Option(help="Synthetic: request count.")]
Rate = Annotated[float, typer.Option(help="Synthetic: requests per second.")]
ArrivalOpt = Annotated[
    Arrival,
    typer.Option(
        help="Synthetic arrival process: constant gaps, poisson (exponential gaps), gamma (gaps "
        "with coefficient of variation --gamma-cv) or offline (all at time 0)."
    ),
]
GammaCv = Annotated[
    float | None,
    typer.Option(
        help="With --arrival gamma: the coefficient of variation of the gaps between arrivals "
        "(standard deviation / mean; 1 is poisson, above 1 burstier, below 1 smoother) "
        "[default: 1]."
    ),
]
LengthDistOpt = Annotated[LengthKind, typer.Option(help="Synthetic length law.")]
PromptTokens = Annotated[float | None, typer.Option(help=PROMPT_HELP)]
OutputTokens = Annotated[float | None, typer.Option(help=OUTPUT_HELP)]
Stdev = Annotated[float | None, typer.Option(help=STDEV_HELP)]
Min = Annotated[int | None, typer.Option(help=MIN_HELP)]
Max = Annotated[int | None, typer.Option(help=MAX_HELP)]
Seed = Annotated[
    int | None,
    typer.Option(
        help="Workload seed: synthetic draws and --prefix-groups members (refused where nothing is "
        "drawn) [default: 0]."
    ),
]
PrefixGroups = Annotated[
    int, typer.Option(help="Shared-prefix groups (with --prefix-len, --prefix-share).")
]
PrefixLen = Annotated[int, typer.Option(help="Tokens of each group's shared prefix.")]
PrefixShare = Annotated[
    float, typer.Option(help="Share of requests in a shared-prefix group, 0..1.")
]

Lengths = tuple[float | None, float | None, int | None, int | None]  # mean, stdev, min, max


def synthetic_workload(
    num_requests: int,
    rate: float,
    arrival: Arrival,
    length_dist: LengthKind,
    prompt: Lengths,
    output: Lengths,
    gamma_cv: float | None,
    seed: int | None,
    turns: int = 1,
    prefix: tuple[int, int, float] = (0, 0, 0.0),
) -> Workload:
    """The synthetic workload of the options above (``workload.synthetic``;
    lengths by ``workload.length_from_options``, S1's shapes by default;
    ``gamma_cv`` None is 1, the coefficient of variation of gamma gaps); with
    ``turns`` > 1, ``num_requests`` sessions of that many turns, the prompt
    lengths being each turn's new message (``workload.sessions``).
    Warns on stderr when clamping moved the drawn mean of lengths the user
    chose (``drawn_mean_warning``; S1's own shape is clamped by design).

    ``seed`` None is 0, not given; a seed given where nothing is drawn
    (``workload.seed_acts``, with the ``prefix`` (groups, len, share) applied
    after) is refused.

    Raises ValueError (one line): a seed that changes nothing; arrivals that
    would span more than ``bounds.MAX_ARRIVAL_S`` (naming --num-requests and
    --rate)."""
    span = (num_requests - 1) / rate if arrival != Arrival.offline else 0.0
    if span > bounds.MAX_ARRIVAL_S:
        raise ValueError(
            f"--num-requests {num_requests:,} at --rate {rate:g}/s arrive over {span:.3g} s, "
            f"beyond {bounds.MAX_ARRIVAL_S:g} s (arrivals are int64 ns; bounds.MAX_ARRIVAL_S)"
        )
    kind = length_dist.value
    p = length_from_options(kind, *prompt, S1_PROMPT, "--prompt-tokens")
    o = length_from_options(kind, *output, S1_OUTPUT, "--output-tokens")
    if seed is not None and not seed_acts(arrival.value, p, o, prefix[0], prefix[2]):
        raise ValueError(
            f"--seed has no effect: {arrival.value} arrivals and lengths that draw nothing "
            "(constant, or no stdev) and no random prefix groups"
        )
    cv = 1.0 if gamma_cv is None else gamma_cv
    wl = sessions(num_requests, turns, rate, p, o, arrival.value, seed or 0, cv)
    new_messages = wl.prompt_tokens if wl.session is None else wl.prompt_tokens[::turns]
    starts = wl.arrival_s if wl.session is None else wl.arrival_s[::turns]
    if (msg := _drawn_rate_check(starts, rate, arrival, cv)) is not None:
        print(f"plan: warning: {msg}", file=sys.stderr)
    for dist, drawn, given in ((p, new_messages, prompt), (o, wl.output_tokens, output)):
        if any(v is not None for v in given) and (msg := drawn_mean_warning(drawn, dist)):
            print(f"plan: warning: {msg}", file=sys.stderr)
    return wl


# A drawn rate this far from --rate is worth a warning.
DRAWN_RATE_TOLERANCE = 0.2


def _drawn_rate_check(starts: np.ndarray, rate: float, arrival: Arrival, cv: float) -> str | None:
    """Random arrivals (poisson, gamma) whose drawn rate, (n - 1) / span over
    ``starts`` (seconds), is more than DRAWN_RATE_TOLERANCE away from
    ``rate``: the warning, or None. Raises ValueError (one line) when every
    arrival fell on one instant (gamma gaps so dispersed that nearly all are
    0): such a run has no rate at all."""
    if arrival not in (Arrival.poisson, Arrival.gamma) or len(starts) < 2:
        return None
    span = float(starts.max() - starts.min())
    law = "exponential gaps"
    if arrival == Arrival.gamma:
        law = f"gamma gaps with coefficient of variation {cv:g}"
    if span <= 0:
        raise ValueError(
            f"--arrival {arrival.value} drew all {len(starts):,} arrivals at one instant ({law}): "
            "no rate to run at; give a smaller --gamma-cv, or --arrival offline for a batch"
        )
    drawn = (len(starts) - 1) / span
    if abs(drawn / rate - 1) <= DRAWN_RATE_TOLERANCE:
        return None
    return (
        f"the {len(starts):,} arrivals drawn ({law}) span {span:.3g} s: {drawn:.3g} req/s, "
        f"not the --rate {rate:g} asked; offer more requests (--num-requests) for a drawn rate "
        "closer to it"
    )


# Pool, hardware, scheduler and trace options shared by run, check, safe-limit
# and bench. Names and meanings follow vLLM's flags (vllm/engine/arg_utils.py,
# EngineArgs) where vLLM has the setting.
NumGpuBlocks = Annotated[
    int | None,
    typer.Option(
        "--num-gpu-blocks",
        "--num-gpu-blocks-override",
        help="KV pool size N in blocks (vLLM's --num-gpu-blocks-override) [default: sized "
        "from --model and --gpu; plan run without them: S1's 7,463].",
    ),
]
# The server settings vLLM defaults per model and GPU (planner.models.vllm_defaults):
# None = not given, resolved by resolve.server and printed with its source.
VLLM_DEFAULT = "[default: vLLM 0.33's for --model/--gpu; without them S1's {}]"
BlockSize = Annotated[
    int | None,
    typer.Option(help="Tokens per KV block (vLLM's --block-size). " + VLLM_DEFAULT.format(16)),
]
MaxNumSeqs = Annotated[
    int | None,
    typer.Option(
        "--max-num-seqs",
        "--max-num-running-reqs",
        help="Cap on running requests (vLLM's). " + VLLM_DEFAULT.format(256),
    ),
]
MaxModelLen = Annotated[
    int | None,
    typer.Option(
        help="Context length limit, tokens (vLLM's) [default: the --model config.json's, "
        "as vLLM derives it; without --model 4,096]."
    ),
]
MaxNumBatchedTokens = Annotated[
    int | None,
    typer.Option(
        help="Token budget per step (vLLM's --max-num-batched-tokens). "
        + VLLM_DEFAULT.format("2,048")
    ),
]
DisableHybridKvCacheManager = Annotated[
    bool | None,
    typer.Option(
        help="vLLM's --disable-hybrid-kv-cache-manager: store sliding-window and chunked "
        "layers beside full attention as full attention [default: vLLM 0.33's, off for "
        "chunked local attention (Llama 4), else on]; --no-disable-hybrid-kv-cache-manager "
        "with chunked layers stands for vLLM's environment switch that allows them with the "
        "manager (docs: models and KV)."
    ),
]
UsageContextOpt = Annotated[
    str,
    typer.Option(
        help="Whose defaults: serve (vllm serve, UsageContext.OPENAI_API_SERVER) or llm "
        "(the offline LLM class); they differ in the token budget per step."
    ),
]
Model = Annotated[
    str | None,
    typer.Option(
        help="Model: a catalog id (e.g. meta-llama/Llama-3.1-8B-Instruct), a preset alias "
        "(llama-3.1-8b) or a path to a folder or file with a config.json (sizes the KV pool).",
    ),
]
Gpu = Annotated[
    str | None,
    typer.Option(help=f"GPU preset: {', '.join(GPUS)} (case-insensitive; H100 is H100-80GB SXM)."),
]
Quantization = Annotated[
    str | None,
    typer.Option(
        help="vLLM's --quantization (fp8, awq, gptq, compressed-tensors, modelopt_fp4, mxfp4, "
        "...) [default: the checkpoint's quantization_config, else none].",
    ),
]
KvCacheDtype = Annotated[
    str,
    typer.Option(help="vLLM's --kv-cache-dtype: auto, fp8, fp8_e4m3, fp8_e5m2, bfloat16, float16."),
]
GpuMemoryUtilization = Annotated[
    float | None,
    typer.Option(
        help="vLLM's --gpu-memory-utilization (sizes the pool with --model) [default: "
        "vLLM 0.33's 0.92]."
    ),
]
TensorParallelSize = Annotated[int, typer.Option(help="GPUs per replica (vLLM's).")]
Horizon = Annotated[
    float, typer.Option(help="Simulated seconds; default: until every request ends.")
]
AsyncScheduling = Annotated[
    bool | None,
    typer.Option(
        help="Schedule step N+1 before step N's output lands. "
        + VLLM_DEFAULT.format("off")
        + " (vLLM's: on)"
    ),
]
SpeculativeConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--speculative-config",
        help='vLLM\'s --speculative-config JSON, e.g. \'{"method": "ngram", '
        '"num_speculative_tokens": 3}\'. Simulated: ngram, ngram_gpu (no drafter model); '
        "eagle, eagle3 (with 'model') and mtp (k lookahead KV slots; the drafter priced on "
        "the roofline, without prefix caching). Needs --spec-acceptance.",
    ),
]
SpecAcceptance = Annotated[
    str | None,
    typer.Option(
        help="Speculative decoding: vLLM's logged per-position acceptance rates, "
        "comma-separated (one per draft token, non-increasing), or one rate alpha (each draft "
        "accepted with probability alpha when the ones before it were)."
    ),
]
SpecAcceptanceLog = Annotated[
    Path | None,
    typer.Option(
        help="Speculative decoding: fit the per-position acceptance rates from a vLLM server "
        "log (its 'SpecDecoding metrics' lines, weighted by drafted tokens) instead of "
        "--spec-acceptance."
    ),
]
SpecSeed = Annotated[
    int, typer.Option(help="Speculative decoding: the seed of the acceptance draws.")
]
EnablePrefixCaching = Annotated[
    bool | None,
    typer.Option(help="Prefix caching. " + VLLM_DEFAULT.format("off") + " (vLLM's: on)"),
]
MaxConcurrency = Annotated[
    int,
    typer.Option(
        help="Closed loop: at most N requests in the system, each sent when one ends (vLLM "
        "bench's --max-concurrency; with --arrival offline, N clients). 0 = open loop."
    ),
]
ThinkTime = Annotated[
    float,
    typer.Option(
        help="Seconds a client waits after an answer before its next request (closed loop, "
        "or between session turns)."
    ),
]
Turns = Annotated[
    int,
    typer.Option(
        help="Multi-turn sessions: each of --num-requests sessions (arriving at --rate) has this "
        "many turns; a turn's prompt is the history plus a new --prompt-tokens message, sent "
        "--think-time after the previous answer. 1 = single requests."
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]

# Service-level objectives (planner.slo): on the p99 of each metric, unserved
# requests counting as misses; seconds, or vLLM bench's goodput form in ms.
TtftSlo = Annotated[
    float | None, typer.Option(help="SLO on TTFT p99, seconds (unserved requests miss it).")
]
TpotSlo = Annotated[
    float | None, typer.Option(help="SLO on TPOT p99, seconds (unserved requests miss it).")
]
ItlSlo = Annotated[
    float | None,
    typer.Option(
        help="SLO on ITL p99 over every token gap, seconds (tokens never produced miss it)."
    ),
]
E2eSlo = Annotated[
    float | None,
    typer.Option(help="SLO on E2E latency p99, seconds (unserved requests miss it)."),
]
Goodput = Annotated[
    list[str] | None,
    typer.Option(
        metavar='"ttft:MS tpot:MS e2el:MS"',
        help="SLOs in vLLM bench's --goodput form, milliseconds (instead of --ttft-slo, "
        "--tpot-slo, --e2e-slo; itl:MS for --itl-slo is this planner's extension).",
    ),
]


def more_requests(trace: bool) -> str:
    """How plan run, max-rate and safe-limit offer more requests, for
    ``metrics.burst_text``: a longer trace window, or more synthetic ones."""
    if trace:
        return "more requests (a longer trace, or a longer --trace-duration window of it)"
    return "more requests (--num-requests)"


def speculation_from(
    config: str | None, acceptance: str | None, seed: int, log: Path | None = None
) -> Speculation | None:
    """``speculative.speculation_from`` for the options of a command (None
    without --speculative-config); with --spec-acceptance-log ``log``, the
    rates fitted from it (``speculative.acceptance_from_log``, said on
    stderr). Raises ValueError (one line)."""
    if config == "":
        raise ValueError(
            "--speculative-config is empty: give vLLM's JSON, or leave the option out for no "
            "speculative decoding"
        )
    if log is None:
        return _speculation_from(config, acceptance, seed)
    if acceptance is not None:
        raise ValueError("give --spec-acceptance or --spec-acceptance-log, not both")
    if config is None:
        raise ValueError("--spec-acceptance-log needs --speculative-config")
    rates, lines, drafted = acceptance_from_log(log)
    k = parse_speculative_config(config)["num_speculative_tokens"]
    if k != len(rates):
        raise ValueError(
            f"--spec-acceptance-log {log}: its drafts have {len(rates)} positions, "
            f"--speculative-config num_speculative_tokens {k}"
        )
    spec = _speculation_from(config, rates, seed)
    print(
        f"plan: acceptance fitted from {count(lines, 'SpecDecoding metrics line')} of {log} "
        f"({drafted:,} drafted tokens)",
        file=sys.stderr,
    )
    return spec


def slo_from(
    ttft_slo: float | None,
    tpot_slo: float | None,
    itl_slo: float | None,
    e2e_slo: float | None,
    goodput: list[str] | None,
) -> SLO:
    """The SLO of the options above (``planner.slo.from_options``); raises
    ``slo.SLOError`` (a ValueError, one line) on a value <= 0 or a metric given twice."""
    return from_options(ttft_slo, tpot_slo, e2e_slo, goodput, itl_slo=itl_slo)


class TraceFormat(StrEnum):
    """Trace file formats (``planner.workload.traces.read_trace``)."""

    auto = "auto"
    azure = "azure"
    csv = "csv"
    jsonl = "jsonl"
    mooncake = "mooncake"


TraceFile = Annotated[
    Path | None,
    typer.Option(
        "--trace-file",
        "--requests-csv",
        help="Request trace (Azure CSV, or CSV/JSONL with columns arrival_time_s, "
        "prompt_tokens, output_tokens and optionally priority, prefix_group, prefix_len, "
        "hash_ids; a Mooncake JSONL trace; "
        "other names with --trace-columns); else a synthetic workload.",
    ),
]
TraceFormatOpt = Annotated[TraceFormat, typer.Option(help="Trace file format.")]
TraceColumns = Annotated[
    str | None,
    typer.Option(
        help="Trace column names as key=column,... (keys with their default names: "
        + ", ".join(f"{k}={v}" for k, v in DEFAULT_COLUMNS.items())
        + "), e.g. arrival=ts,output=completion_tokens.",
    ),
]
TraceHashBlockSize = Annotated[
    int | None,
    typer.Option(
        help="Tokens per hash id of the trace's hash_ids column (prefix caching: blocks "
        "share KV where their prefix's ids agree); --block-size must divide it "
        "[default: 512 for --trace-format mooncake].",
    ),
]
TraceStart = Annotated[float, typer.Option(help="Trace window start, seconds.")]
TraceDuration = Annotated[float, typer.Option(help="Trace window length, seconds.")]
RateScale = Annotated[float, typer.Option(help="Trace replay speed: 2 = twice as fast.")]
MaxRequests = Annotated[int | None, typer.Option(help="Keep the trace's first N requests.")]


# Choices come from the kernel's own tables, so they are defined once.
Victim = StrEnum("Victim", {k: k for k in VICTIMS})  # config.VICTIMS
Admission = StrEnum("Admission", {k: k for k in ADMISSIONS})  # config.ADMISSIONS
VictimOpt = Annotated[
    Victim | None,
    typer.Option(help="Mitigation: preemption victim [default: vLLM's rule for the policy]."),
]
AdmissionOpt = Annotated[Admission, typer.Option(help="Mitigation: admission rule.")]
Compat = StrEnum("Compat", {k: k for k in COMPATS})  # config.COMPATS
CompatOpt = Annotated[
    Compat,
    typer.Option(
        help="Scheduler rules: vllm (vLLM 0.33), or blis (BLIS b563c440: implies "
        "--preemption-mode restart --no-null-block --no-scheduler-reserve-full-isl "
        "--enable-prefix-caching; docs/blis-compat.md)."
    ),
]
BlisFullHitDefect = Annotated[
    bool,
    typer.Option(
        help="With --compat blis: also BLIS's defect, a fully cached prompt of k x "
        "block_size tokens holds no prompt blocks."
    ),
]
FullAttentionGroups = Annotated[
    int | None,
    typer.Option(
        help="KV cache groups of full-attention layers sharing the pool with the "
        "sliding-window ones (a hybrid model) [default: from --model, else 1 without "
        "a window, 0 with one].",
        show_default=False,
    ),
]
SlidingWindowGroups = Annotated[
    int | None,
    typer.Option(
        help="KV cache groups of sliding-window layers [default: from --model, else 1 "
        "with a window, 0 without].",
        show_default=False,
    ),
]
SlidingWindow = Annotated[
    int | None,
    typer.Option(
        help="Every attention layer slides over this many tokens (HF config.json's "
        "sliding_window; vLLM frees blocks outside it); 0 = full attention "
        "[default: from --model, else 0].",
        show_default=False,
    ),
]
Router = StrEnum("Router", {k: k for k in ROUTERS})  # config.ROUTERS
Replicas = Annotated[
    int,
    typer.Option(
        help="Identical vLLM servers behind a router, each with this pool and these flags, fed "
        "from one stream; metrics are the fleet's."
    ),
]
RouterOpt = Annotated[
    Router,
    typer.Option(
        help="How the router picks a replica (with --replicas > 1; with --prefill-replicas "
        "llm_d unless given, or round_robin for vLLM's proxy): round_robin, random, "
        "least_outstanding (fewest requests in flight), least_kv (fewest KV blocks in use), "
        "prefix_affinity (SGLang's cache-aware policy), llm_d (llm-d's endpoint picker: "
        "prefix-cache-scorer x 2 + queue-scorer x 1, ties by --router-seed)."
    ),
]
RouterSeed = Annotated[
    int, typer.Option(help="Seed of --router random, and of --router llm_d's ties.")
]
# The KV link of a disaggregated deployment (``planner.kv_transfer``: its
# defaults and their sources); ``plan run --prefill-replicas``, ``plan size
# --disaggregated``.
PrefillMaxNumSeqs = Annotated[
    int | None,
    typer.Option(
        help="The prefill replicas' max_num_seqs (vLLM's --max-num-seqs on the prefill "
        "instance) [default: the decode replicas']."
    ),
]
PrefillMaxNumBatchedTokens = Annotated[
    int | None,
    typer.Option(
        help="The prefill replicas' token budget per step (vLLM's --max-num-batched-tokens "
        "on the prefill instance) [default: the decode replicas']."
    ),
]
KvTransferBandwidth = Annotated[
    float,
    typer.Option(
        help="Disaggregated prefill/decode: the KV link, GB/s per GPU (one 400 Gb/s NIC per "
        "GPU, ConnectX-7)."
    ),
]
KvTransferLatency = Annotated[
    float,
    typer.Option(
        help="Disaggregated prefill/decode: the KV link, microseconds per load (a stated "
        "default, not measured)."
    ),
]


# How a sweep runs (``plan sweep`` and ``plan size``, which runs one sweep per
# candidate): ``sweep.driver.run_sweep``'s arguments.
class Executor(StrEnum):
    """Where chunks run: this process, or Dask tasks."""

    local = "local"
    dask = "dask"


SweepSpecArg = Annotated[
    Path, typer.Argument(help="Sweep spec (TOML), e.g. sweeps/quick.toml.", show_default=False)
]
DryRun = Annotated[
    bool,
    typer.Option(
        help="Print what would run (plan sweep: the grid, chunk plan and time estimate; plan "
        "size: the candidates and their fleets); run nothing."
    ),
]
Workers = Annotated[int | None, typer.Option(help="Kernel threads (default: all cores).")]
MemoryLimit = Annotated[
    str, typer.Option(help="Cap on the whole process's peak memory, e.g. 4GiB.")
]
Resume = Annotated[bool, typer.Option(help="Continue an interrupted sweep.")]


Overwrite = Annotated[bool, typer.Option(help="Replace an existing sweep's output.")]
ExecutorOpt = Annotated[
    Executor, typer.Option(help="local (this process) or dask (one task per chunk).")
]
DaskAddress = Annotated[
    str | None,
    typer.Option(help="Dask scheduler, e.g. tcp://host:8786 [default: LocalCluster]."),
]
DaskWorkers = Annotated[
    int | None, typer.Option(help="LocalCluster worker processes [default: cores].")
]


def check_run_options(
    workers: int | None,
    resume: bool,
    overwrite: bool,
    executor: Executor,
    address: str | None,
    dask_workers: int | None,
) -> None:
    """The sweep-running options together. Raises ValueError (one line)."""
    from numba import config

    threads = config.NUMBA_NUM_THREADS
    if workers is not None and not (1 <= workers <= threads):
        raise ValueError(f"--workers must be in 1..{threads}, got {workers}")
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    if dask_workers is not None and not 1 <= dask_workers <= 256:
        raise ValueError(f"--dask-workers must be in 1..256, got {dask_workers}")
    if executor != Executor.dask and (address is not None or dask_workers is not None):
        raise ValueError("--address and --dask-workers need --executor dask")


@contextlib.contextmanager
def say_compile(
    configs: Sequence[SchedulerConfig],
    workload: Workload | None = None,
    latency: Latency | Sequence[Latency] | None = None,
) -> Iterator[None]:
    """Around the simulation of ``configs``: print ``api.compile_note_for`` on
    stderr when their kernel will compile first (a first run), so a wait is not
    taken for a hang, and after it the measured time (``api.compiled_note``).
    With ``workload``, first raise what ``simulate`` would refuse about it
    before compiling (``workload_checks.check_block_sizes`` and
    ``check_horizon``: WorkloadError), so a refusal stays one line."""
    from planner.api import COMPILES, compile_note_for, compiled_note, cpu_seconds
    from planner.workload_checks import check_block_sizes, check_horizon

    if workload is not None:
        check_block_sizes(workload, configs)
        check_horizon(workload, configs, "--horizon")
    flush_notes()  # the input passed its checks
    note = compile_note_for(configs, workload, latency=latency)
    if note:
        print(f"plan: {note}", file=sys.stderr, flush=True)
    fleet = any(c.replicas > 1 for c in configs)  # compiles within its run
    t0, c0, n0 = time.perf_counter(), cpu_seconds(), None if fleet else len(COMPILES)
    yield
    if note:
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        print(f"plan: {compiled_note(wall, cpu, n0)}", file=sys.stderr, flush=True)
