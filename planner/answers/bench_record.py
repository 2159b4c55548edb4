"""``plan bench --record``: every speed figure of the planner in one run.

The figures (issue 34's list), each measured on the current code and
machine, never asserted:

- output tokens per CPU-second on the S1 grid (``bench.s1_grid(32)``, 1,024
  configs, horizon 120 s): plain, with prefix caching, with async
  scheduling, and the caching/plain CPU-per-token ratio;
- CPU per configuration end to end (packing, kernel, metrics, Parquet) at
  64, 1,024 and 4,096 S1 configurations (grids 8, 32, 64);
- prefix caching against the plain path on the shipped Mooncake trace's
  first 1,200 s at max_num_batched_tokens 2,048 and 8,192
  (``bench.run_mooncake_bench``);
- a warm ``plan run`` of scenario S1 at 256 x 7,463 in a fresh process, and
  a first ``plan run`` on an empty Numba cache with and without prefix
  caching (``bench.run_startup_bench``: compile included).

Timings on a shared machine are noisy, so each in-process figure is the best
(least CPU) of ``repeats`` runs. A record is JSON (``record``); given
an earlier one (``--against``), each figure is printed beside it with the
ratio, so two commits measured in separate virtual environments compare
figure by figure.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import math
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numba

from planner.answers import bench
from planner.api import simulate
from planner.install_check import provenance
from planner.latency.step_time import LinearLatency


@dataclass(frozen=True)
class Figure:
    """One figure of the record: its JSON key, its label, its unit and
    whether a larger value is better."""

    key: str
    label: str
    unit: str
    higher_is_better: bool


FIGURES = (
    Figure("grid32_plain_mtok_per_cpu_s", "S1 grid 32, plain", "M tok/CPU-s", True),
    Figure("grid32_caching_mtok_per_cpu_s", "S1 grid 32, prefix caching", "M tok/CPU-s", True),
    Figure("grid32_async_mtok_per_cpu_s", "S1 grid 32, async scheduling", "M tok/CPU-s", True),
    Figure("grid32_caching_over_plain", "S1 grid 32, caching / plain CPU per token", "x", False),
    Figure("cpu_ms_per_config_64", "CPU per config, 64 configs, end to end", "ms", False),
    Figure("cpu_ms_per_config_1024", "CPU per config, 1,024 configs, end to end", "ms", False),
    Figure("cpu_ms_per_config_4096", "CPU per config, 4,096 configs, end to end", "ms", False),
    Figure("mooncake_caching_over_plain_2048", "Mooncake, caching / plain, mnbt 2,048", "x", False),
    Figure("mooncake_caching_over_plain_8192", "Mooncake, caching / plain, mnbt 8,192", "x", False),
    Figure("warm_plan_run_cpu_s", "warm plan run, S1 256 x 7,463, new process", "CPU-s", False),
    Figure("cold_plan_run_cpu_s", "first plan run, empty Numba cache", "CPU-s", False),
    Figure("cold_caching_plan_run_cpu_s", "first plan run, caching, empty cache", "CPU-s", False),
)  # fmt: skip

LABEL_WIDTH = 74  # the longest label with its unit

WARM_RUN_ARGS = ("run", "--num-gpu-blocks", "7463", "--max-num-seqs", "256", "--json")


def measure_record(repeats: int = 3) -> dict[str, float]:
    """Measure every figure of ``FIGURES`` (best of ``repeats`` for in-process
    figures; the 4,096-config grid and the fresh-process runs once each).
    Returns {key: value}; prints nothing."""
    wl, lat = bench.s1_workload(), LinearLatency()
    fig: dict[str, float] = {}
    for key, options in (
        ("plain", {}),
        ("caching", {"enable_prefix_caching": True}),
        ("async", {"async_scheduling": True}),
    ):
        with contextlib.redirect_stdout(io.StringIO()):
            bench.warm_variants(wl, lat, **options)
        cfgs = bench.s1_grid(32, **options)
        runs = [bench.time_grid(cfgs, wl, lat) for _ in range(repeats)]
        _, cpu, tokens, _ = min(runs, key=lambda r: r[1])
        fig[f"grid32_{key}_mtok_per_cpu_s"] = tokens / cpu / 1e6
    plain, caching = fig["grid32_plain_mtok_per_cpu_s"], fig["grid32_caching_mtok_per_cpu_s"]
    fig["grid32_caching_over_plain"] = plain / caching
    for side in (8, 32, 64):
        cfgs = bench.s1_grid(side)
        best = min(_end_to_end_cpu(cfgs, wl, lat) for _ in range(1 if side == 64 else repeats))
        fig[f"cpu_ms_per_config_{len(cfgs)}"] = best / len(cfgs) * 1e3
    with contextlib.redirect_stdout(io.StringIO()):
        moon = bench.run_mooncake_bench(repeats=repeats)
        startup = bench.run_startup_bench()
    for mnbt in bench.MOONCAKE_MNBT:
        fig[f"mooncake_caching_over_plain_{mnbt}"] = moon[f"ratio_{mnbt}"]
    fig["warm_plan_run_cpu_s"] = min(_fresh_run_cpu() for _ in range(repeats))
    fig["cold_plan_run_cpu_s"] = startup["cold_cpu_s"]
    fig["cold_caching_plan_run_cpu_s"] = startup["caching_cold_cpu_s"]
    return fig


def _end_to_end_cpu(cfgs: list, wl: object, lat: LinearLatency) -> float:
    """CPU seconds of what a sweep does with ``cfgs``: pack and simulate,
    summarize (``SimResult.metrics``) and write Parquet (to memory)."""
    c0 = time.process_time()
    df = simulate(cfgs, wl, lat, check_invariants=False).metrics()
    df.to_parquet(io.BytesIO())
    return time.process_time() - c0


def _fresh_run_cpu() -> float:
    """CPU seconds of one warm ``plan run`` (``WARM_RUN_ARGS``) in a fresh
    interpreter (imports included; the kernel loads from Numba's cache)."""
    return bench.child_run(dict(os.environ), base=WARM_RUN_ARGS)[1]


def record(figures: dict[str, float], repeats: int) -> dict:
    """The JSON record: provenance, when and where it was measured, and the figures."""
    return {
        **provenance(),
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
        "numba_threads": numba.get_num_threads(),
        "repeats": repeats,
        "figures": figures,
    }


def read_record(path: Path) -> dict[str, float]:
    """The figures of an earlier record: every value a finite number above 0
    (not a boolean), at least one of them a figure of ``FIGURES``. Raises
    ValueError (one line) when ``path`` is not a regular readable file or
    not such a record."""
    where = f"--against {path}"
    if not path.is_file():
        raise ValueError(f"{where}: not a regular file (give a record written by --record --out)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise ValueError(f"{where}: not a readable plan bench record ({why})") from None
    figures = data.get("figures") if isinstance(data, dict) else None
    if not isinstance(figures, dict) or not figures:
        raise ValueError(f"{where}: no 'figures' object (write one with --record --out)")
    for key, v in figures.items():
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if not ok or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{where}: figure {key!r} is {v!r}, not a finite number above 0")
    known = {f.key for f in FIGURES}
    if not known & set(figures):
        raise ValueError(f"{where}: none of its figures is one this version measures")
    return {k: float(v) for k, v in figures.items()}


def print_record(figures: dict[str, float], before: dict[str, float] | None = None) -> None:
    """One line per figure; with ``before``, the earlier value and now/before."""
    head = f"{'figure':<{LABEL_WIDTH}} {'now':>10}"
    if before is not None:
        head += f" {'before':>10} {'now/before':>11}"
    print(head)
    for f in FIGURES:
        if f.key not in figures:
            continue
        better = "higher" if f.higher_is_better else "lower"
        label = f"{f.label} ({f.unit}, {better} is better)"
        line = f"{label:<{LABEL_WIDTH}} {figures[f.key]:>10.3g}"
        if before is not None and f.key in before:  # read_record: every figure > 0
            ratio = figures[f.key] / before[f.key]  # inf when before is subnormal
            shown = f"{ratio:>10.2f}x" if math.isfinite(ratio) else f"{'off scale':>11}"
            line += f" {before[f.key]:>10.3g} {shown}"
        print(line)
