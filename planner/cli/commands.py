"""The ``plan`` command line (Typer). Parses, validates, calls ``planner.api``, prints.

Every error in the user's input ends as one line on stderr and exit code 2.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.console import Console

from planner import install_check
from planner.cli import options as opt
from planner.cli.calibrate import register as register_calibrate
from planner.cli.capacity import register as register_capacity_commands
from planner.cli.capacity import warn
from planner.cli.errors import EXIT_BAD_INPUT, InputError, os_error_line, os_error_reason
from planner.cli.inert import reject_inert
from planner.cli.maxrate import register as register_max_rate
from planner.cli.models import register as register_model_commands
from planner.cli.progress import stderr_reporter
from planner.cli.report import register as register_report
from planner.cli.run import register as register_run
from planner.cli.size import register as register_size
from planner.cli.validate import register as register_validate
from planner.inert import BENCH_RULES
from planner.sweep import store
from planner.sweep.report import Lines
from planner.text import count
from planner.workload.arrays import WorkloadError


class _HelpGroup(typer.core.TyperGroup):
    """The ``plan`` group; its help lists each command's whole first sentence
    (Click's default cuts it to the width with "...")."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Write the "Commands" section: name and first sentence, wrapped, never cut."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


# rich_markup_mode=None: help is laid out by Click's own formatter, which
# prints every option name in full at any width (Rich's panels cut names to
# the column, "--max-num-batche…", at 80 columns when stdout is not a
# terminal) and keeps bracketed text such as "[default: from --model/--gpu]"
# (Rich markup swallowed it, leaving "blocks .").
app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    cls=_HelpGroup,
    # Click caps help at 80 columns; use the whole terminal (COLUMNS), as Rich did.
    context_settings={"max_content_width": 10_000},
    help="Capacity planning for LLM servers that run the vLLM v1 scheduler.",
)


register_run(app)  # first: plan run heads the command list


class ColorScale(StrEnum):
    linear = "linear"
    log = "log"


@app.command(cls=opt.BoundedCommand)
def sweep(
    spec: opt.SweepSpecArg,
    out: Annotated[
        Path | None, typer.Option(help="Output directory (default results/NAME).")
    ] = None,
    workers: opt.Workers = None,
    chunk_size: Annotated[
        int | None, typer.Option(help="Configs per kernel call (default 1024, memory-capped).")
    ] = None,
    memory_limit: opt.MemoryLimit = "4GiB",
    dry_run: opt.DryRun = False,
    resume: opt.Resume = False,
    overwrite: opt.Overwrite = False,
    executor: opt.ExecutorOpt = opt.Executor.local,
    address: opt.DaskAddress = None,
    dask_workers: opt.DaskWorkers = None,
) -> None:
    """Simulate every configuration of a spec's grid and write one Parquet dataset."""
    from planner.sweep import driver
    from planner.sweep.spec import load_spec

    limit = driver.parse_memory(memory_limit)
    if chunk_size is not None and chunk_size < 1:
        raise InputError(f"--chunk-size must be >= 1, got {chunk_size}")
    opt.check_run_options(workers, resume, overwrite, executor, address, dask_workers)
    sw = load_spec(spec, limit)
    for line in sw.server_notes:
        print(f"plan: server setting not in the spec: {line}", file=sys.stderr)
    for message in sw.warnings:
        warn(message)
    console = Console(stderr=True, markup=False, soft_wrap=True)  # warnings
    report = Console(markup=False, soft_wrap=True)  # results: stdout, pipeable
    if dry_run:
        driver.dry_run(sw, chunk_size, limit, workers, Lines(sys.stdout))
        return
    dest = out if out is not None else driver.default_out(sw)
    t0 = time.perf_counter()
    try:
        df, ran = driver.run_sweep(
            sw, dest, chunk_size, limit, workers, resume, overwrite, stderr_reporter(),
            executor.value, address, dask_workers,
        )  # fmt: skip
    except KeyboardInterrupt:
        raise opt.Interrupted(_interrupted(dest)) from None
    wall = time.perf_counter() - t0
    if not ran:
        report.print(f"{dest / 'data.parquet'} is already complete ({count(len(df), 'config')})")
        return
    over = int((df.max_num_seqs > df.kv_safe_max_num_seqs).sum())
    if over:
        console.print(
            f"plan: warning: {over:,} of {len(df):,} configs set max_num_seqs above the "
            "analytic KV-safe limit (column kv_safe_max_num_seqs)"
        )
    from planner.metrics import pool_starts

    if refused := int((~pool_starts(df)).sum()):
        console.print(
            f"plan: warning: vLLM 0.33 refuses to start on the pool of {refused:,} of "
            f"{len(df):,} configs (column pool_starts: one max_model_len request needs "
            "more blocks than the pool less the null block); simulated, never recommended"
        )
    counts = df["outcome"].value_counts().to_dict()
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    if "overloaded" in df.columns:  # a verdict beside the outcome class: said with it
        summary += f"; overloaded {int(df['overloaded'].astype(bool).sum()):,}"
        from planner.metrics import bursts

        if (burst := int(bursts(df).sum())) > 0:
            summary += f", overload not judged {burst:,} (a burst: metrics.overload_judged)"
    report.print(
        f"wrote {count(len(df), 'config')} to {dest / 'data.parquet'} in {wall:.1f} s ({summary})"
    )
    hw = sw.spec.hardware
    if hw is not None and "num_gpu_blocks" not in (*sw.axes, *sw.spec.scheduler):
        pools = df.num_gpu_blocks
        report.print(
            f"num_gpu_blocks {pools.min():,} to {pools.max():,} (derived from {hw.model} on "
            f"{hw.tensor_parallel_size} x {hw.gpu}; each configuration's start-up profile at "
            "its own max_num_seqs and max_num_batched_tokens)"
        )


@app.command(cls=opt.BoundedCommand)
def heatmap(
    results: Annotated[Path, typer.Argument(help="Sweep output directory, e.g. results/quick.")],
    x: Annotated[str, typer.Option(help="Column on the x axis.")] = "max_num_seqs",
    y: Annotated[str, typer.Option(help="Column on the y axis.")] = "num_gpu_blocks",
    z: Annotated[
        str, typer.Option(help="Colour: completed, throughput, preemptions, ttft_p99, ...")
    ] = "completed",
    facet: Annotated[str, typer.Option(help="One panel per value ('' for none).")] = (
        "preemption_mode"
    ),
    where: Annotated[
        list[str] | None,
        typer.Option(metavar="AXIS=VALUE", help="Pin another axis: axis=value (repeatable)."),
    ] = None,
    mark: Annotated[
        str | None, typer.Option(help="Your current config as x,y, e.g. 256,7463.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="PNG or SVG, outside the sweep folder "
            "[default: RESULTS.heatmap.png beside it, e.g. results/quick.heatmap.png]"
        ),
    ] = None,
    width: Annotated[int, typer.Option(help="Pixels.")] = 1400,
    height: Annotated[int, typer.Option(help="Pixels.")] = 700,
    color_scale: Annotated[
        ColorScale, typer.Option(help="Colour scale of the metric (log: TTFT spans decades).")
    ] = ColorScale.linear,
    slo_contour: Annotated[
        bool,
        typer.Option(help="Outline the cells that meet the sweep's [slo] and keep up."),
    ] = False,
    recommend: Annotated[
        bool,
        typer.Option(
            help="Mark each panel's recommended cell: meets the SLOs, keeps up, within 1% of "
            "the best goodput, fewest resources on the y then x axis."
        ),
    ] = False,
) -> None:
    """Draw a sweep's metric over two axes with its failure regions and the KV-safe curve."""
    from planner.plots.heatmap import default_out
    from planner.plots.heatmap import heatmap as draw

    point = None
    if mark is not None:
        try:
            a, b = (float(v) for v in mark.split(","))
        except ValueError:
            raise InputError(f"--mark: expected x,y numbers, got {mark!r}") from None
        point = (a, b)
    dest = out if out is not None else default_out(results)
    try:
        path = draw(
            results, dest, x, y, z, facet or None, where or [], point, width, height,
            color_scale.value, slo_contour, recommend,
        )  # fmt: skip
    except OSError as e:
        raise InputError(f"cannot write {dest}: {os_error_reason(e)}") from None
    print(f"plan: wrote {path}", file=sys.stderr)


@app.command(cls=opt.BoundedCommand)
def bench(
    ctx: typer.Context,
    grid: Annotated[int, typer.Option(help="Grid side: grid x grid configs.")] = 64,
    reference: Annotated[
        bool, typer.Option(help="Also time the plain-Python reference on one config.")
    ] = True,
    async_scheduling: opt.AsyncScheduling = None,
    enable_prefix_caching: opt.EnablePrefixCaching = None,
    startup: Annotated[
        bool,
        typer.Option(help="Instead: time a first plan run (empty Numba cache) and a warm one."),
    ] = False,
    max_rate: Annotated[
        bool,
        typer.Option(
            help="Instead: time the highest-rate search over the grid against one plain "
            "sweep of it, and print the ratio."
        ),
    ] = False,
    mooncake: Annotated[
        bool,
        typer.Option(
            help="Instead: time one config on the shipped Mooncake trace's first 1,200 s "
            "with prefix caching off and on, and print the ratio."
        ),
    ] = False,
    record: Annotated[
        bool,
        typer.Option(
            help="Instead: measure every speed figure (S1 grids plain, caching and async; CPU "
            "per config at 64, 1,024 and 4,096 configs; Mooncake caching/plain; warm and first "
            "plan runs). Several minutes."
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(help="With --record: write the figures to this JSON file."),
    ] = None,
    against: Annotated[
        Path | None,
        typer.Option(
            help="With --record: an earlier record's JSON file; each figure is printed "
            "beside it with now/before."
        ),
    ] = None,
    repeats: Annotated[
        int,
        typer.Option(help="With --record: best of this many runs per in-process figure."),
    ] = 3,
) -> None:
    """Measure kernel speed on scenario S1 across a max_num_seqs x num_gpu_blocks grid."""
    from planner.answers.bench import run_bench, run_startup_bench

    reject_inert(ctx, BENCH_RULES)
    if record:
        _bench_record(out, against, repeats)
        return
    # scenario S1's server, no model or GPU: the planner's defaults (off, off)
    async_scheduling = bool(async_scheduling)
    enable_prefix_caching = bool(enable_prefix_caching)
    if startup:
        run_startup_bench()
        return

    if mooncake:
        from planner.answers.bench import run_mooncake_bench

        run_mooncake_bench(async_scheduling=async_scheduling)
        return
    if not 1 <= grid <= 1024:
        raise InputError(f"--grid must be in 1..1024 (grid x grid configs), got {grid}")
    if max_rate:
        from planner.answers.bench import run_max_rate_bench

        run_max_rate_bench(
            grid, async_scheduling=async_scheduling, enable_prefix_caching=enable_prefix_caching
        )
        return
    run_bench(
        grid,
        reference,
        async_scheduling=async_scheduling,
        enable_prefix_caching=enable_prefix_caching,
    )


def _check_writable(out: Path) -> None:
    """Refuse ``--out`` before minutes of measuring unless a file can be
    created beside it (a temporary one, removed at once). Raises InputError."""
    import tempfile

    if out.is_dir() or not out.parent.is_dir():
        raise InputError(f"--out {out}: not a file in an existing folder")
    try:
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"):
            pass
    except OSError as e:
        raise InputError(f"--out {out}: cannot write there ({os_error_reason(e)})") from None


def _bench_record(out: Path | None, against: Path | None, repeats: int) -> None:
    """``plan bench --record``: check the files first (one line, exit 2), then
    measure, write ``out`` atomically and print (``answers.bench_record``)."""
    import json

    from planner.answers import bench_record as BR
    from planner.sweep.store import atomic_write_bytes

    if out is not None:
        _check_writable(out)
    try:
        before = BR.read_record(against) if against is not None else None
    except ValueError as e:
        raise InputError(str(e)) from None
    print("plan bench --record: measuring every figure (several minutes) ...", file=sys.stderr)
    figures = BR.measure_record(repeats)
    if out is not None:
        text = json.dumps(BR.record(figures, repeats), indent=2) + "\n"
        try:
            atomic_write_bytes(out, lambda tmp: Path(tmp).write_text(text))
        except OSError as e:
            raise InputError(f"cannot write {out}: {os_error_reason(e)}") from None
        print(f"plan: wrote {out}", file=sys.stderr)
    BR.print_record(figures, before)


register_capacity_commands(app)
register_max_rate(app)
register_model_commands(app)
register_calibrate(app)
register_size(app)
register_validate(app)
register_report(app)


@functools.cache
def command() -> click.Command:
    """``app`` as the Click command that parses ``plan``'s arguments, built
    once per process: Typer builds it from every command's signature, 79 ms
    on a 2-core machine (2026-12-06), which each in-process call (the tests',
    thousands) paid again."""
    return typer.main.get_command(app)


def _interrupted(dest: Path) -> str:
    """What an interrupted ``plan sweep`` left in ``dest`` and how to go on."""
    n = store.finished_chunks(dest)
    if n == 0:
        return "interrupted before any chunk was written; rerun the same command to start again"
    return f"interrupted; {count(n, 'finished chunk')} in {dest}; rerun with --resume to continue"


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``plan`` script: one-line errors, exit code 2 on bad input.

    Exit codes: 0 done; 1 a failure verdict the user asked about (``plan check``:
    unsafe pool; ``plan run --fail-on``: the outcome is one of the classes);
    2 bad input; 130 interrupted.
    """
    try:  # is the imported `planner` ours? (another PyPI distribution installs one)
        install_check.check(sys.modules["planner"])
    except install_check.DistributionClash as e:
        print(f"plan: error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    cmd = command()
    if (twice := repeated_option(cmd, sys.argv[1:] if argv is None else argv)) is not None:
        print(f"plan: error: {twice}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    opt.flush_notes(keep=False)  # an earlier in-process call that failed left its own
    _watch_sigint()
    try:
        # Not standalone: errors come back here as exceptions; typer.Exit comes
        # back as the return value.
        rc = cmd.main(args=argv, prog_name="plan", standalone_mode=False)
        opt.flush_notes(keep=rc in (None, 0, 1))
        if rc == 130:  # Typer turns KeyboardInterrupt into Exit(130)
            print("plan: interrupted", file=sys.stderr)
        if isinstance(rc, int) and rc != 0:
            sys.exit(rc)
    except typer.Exit as e:
        opt.flush_notes(keep=e.exit_code in (0, 1))
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("plan: interrupted", file=sys.stderr)
        sys.exit(130)
    except opt.Interrupted as e:
        print(f"plan: {e}", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as e:  # usage errors: unknown option, malformed value
        if type(e).__name__ == "NoArgsIsHelpError":
            print(e.format_message(), file=sys.stderr)
            sys.exit(0)
        message = e.format_message().replace("Value error, ", "")  # pydantic's prefix
        print(f"plan: error: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except (InputError, WorkloadError, ValueError) as e:
        # One line whatever a library put in its message (pandas ends some in "\n").
        print(f"plan: error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except OSError as e:
        print(f"plan: error: {os_error_line(e)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except MemoryError:  # an input larger than this machine holds (planner.inputs caps some)
        print(
            "plan: error: out of memory: an input (a trace, a spec, a model file or the "
            "requested sizes) is larger than this machine can hold",
            file=sys.stderr,
        )
        sys.exit(EXIT_BAD_INPUT)
    except Exception:
        if _SIGINT[0]:  # Ctrl-C inside Numba's compiler surfaces as another error
            print("plan: interrupted", file=sys.stderr)
            sys.exit(130)
        raise


def repeated_option(group: click.Command, argv: list[str]) -> str | None:
    """One line naming an option given more than once in ``argv`` (a command's
    arguments, its name first), counting its aliases and its ``--no-`` form
    as the same option (``--num-gpu-blocks 50 --num-gpu-blocks-override
    7463``, ``--enable-prefix-caching --no-enable-prefix-caching``); None
    when none is. Click would keep the last silently: no silent overrides.
    Options that take several values (``multiple``) are exempt."""
    sub = group.commands.get(argv[0]) if argv else None  # type: ignore[attr-defined]
    if sub is None:
        return None
    # Typer's own copy of Click (typer._click): its classes are not click's.
    by_name = {
        name: p
        for p in sub.params
        if p.param_type_name == "option" and not p.multiple and not getattr(p, "count", False)
        for name in (*p.opts, *p.secondary_opts)
    }
    seen: dict[str, list[str]] = {}
    for tok in argv[1:]:
        if tok == "--":
            break
        name = tok.split("=", 1)[0]
        if (p := by_name.get(name)) is not None:
            seen.setdefault(p.name or name, []).append(name)
    for spellings in seen.values():
        if len(spellings) > 1:
            said = " then ".join(spellings)
            return f"{said}: the same option given {len(spellings)} times; give it once"
    return None


_SIGINT = [False]  # whether Ctrl-C arrived (``_watch_sigint``)
_SIGINT_HOOKED: list[bool] = []  # the handlers are installed once per process


def _watch_sigint() -> None:
    """Note Ctrl-C, then raise KeyboardInterrupt as Python does. A Ctrl-C that
    lands in a ctypes callback of Numba's compiler is swallowed there (Python
    prints it as unraisable) and the compile fails with another error, e.g.
    ``RuntimeError: no compiled object yet``; ``main`` then still reports an
    interruption, and the unraisable KeyboardInterrupt is not printed."""
    import signal

    _SIGINT[0] = False
    if threading.current_thread() is not threading.main_thread() or _SIGINT_HOOKED:
        return
    _SIGINT_HOOKED.append(True)

    def on_sigint(signum: int, frame: object) -> None:
        _SIGINT[0] = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    default_hook = sys.unraisablehook

    def hook(unraisable: object) -> None:
        if not isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt):
            default_hook(unraisable)  # type: ignore[arg-type]

    sys.unraisablehook = hook


if __name__ == "__main__":
    main()
