"""``plan size``: the cheapest deployment (GPU, tensor parallelism, replicas,
vLLM flags) that serves a spec's workload within its SLOs (``planner.answers.sizing``)."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import shutil
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import typer
from rich.console import Console

from planner.answers import sizing
from planner.cli import options as opt
from planner.cli.json_out import dumps, print_json
from planner.cli.progress import stderr_reporter
from planner.install_check import provenance
from planner.kernel.variant import PLAIN, union
from planner.kv_transfer import DEFAULT_BANDWIDTH_GBPS, DEFAULT_LATENCY_US
from planner.maxrate.search import too_short
from planner.metrics import OVERLOAD_MIN_LIFETIMES, burst_text, front_end_failures, front_end_text
from planner.slo import SLO
from planner.sweep import store
from planner.text import count, noun

DEFAULT_MAX_REPLICAS = 8


def _split(text: str, flag: str) -> list[str]:
    """A comma-separated list: no empty item, none twice. Raises ValueError."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise ValueError(
            f"{flag}: expected a comma-separated list with no empty item, got {text!r}"
        )
    for t in items:
        if items.count(t) > 1:
            raise ValueError(f"{flag}: {t!r} is listed twice")
    return items


def _gpus(text: str | None, prices: object) -> list[str]:
    """Candidate GPUs (canonical names): the option's, else every priced GPU."""
    from planner.models.hardware import HardwareError, gpu

    if text is None:
        return list(prices.usd_per_gpu_hour)  # type: ignore[attr-defined]
    try:
        names = [gpu(g).name for g in _split(text, "--gpus")]
    except HardwareError as e:
        raise ValueError(f"--gpus: {str(e).removeprefix('--gpu: ')}") from None
    if len(set(names)) < len(names):
        raise ValueError(f"--gpus: {text!r} names one GPU twice")
    return names


def _tps(text: str) -> list[int]:
    from planner.bounds import check_option

    out = []
    for t in _split(text, "--tensor-parallel-sizes"):
        try:
            v = int(t)
        except ValueError:
            raise ValueError(f"--tensor-parallel-sizes: {t!r} is not an integer") from None
        check_option("tensor_parallel_size", v, "--tensor-parallel-sizes")
        out.append(v)
    return out


def _slo_fields(options: SLO) -> dict | None:
    """The SLO options as ``[slo]`` fields: each one given replaces the
    spec's value for that metric, the spec's others stay. None when no SLO
    option was given."""
    from planner.slo import FIELDS

    given = {f"{k.removesuffix('_s')}_slo": getattr(options, k) for k in FIELDS}
    given = {k: v for k, v in given.items() if v is not None}
    return given or None


def size(
    spec: opt.SweepSpecArg,
    gpus: Annotated[
        str | None,
        typer.Option(
            help="Candidate GPUs (plan models lists them), comma-separated [default: every GPU "
            "with a price]."
        ),
    ] = None,
    tensor_parallel_sizes: Annotated[
        str, typer.Option(help="Candidate tensor-parallel sizes, comma-separated, e.g. 1,2,4.")
    ] = "1",
    max_replicas: Annotated[
        int, typer.Option(help="Search 1..N replicas of each candidate.")
    ] = DEFAULT_MAX_REPLICAS,
    routers: Annotated[
        str,
        typer.Option(help="Routers to search, comma-separated (plan run --router lists them)."),
    ] = "round_robin",
    prices: Annotated[
        Path | None,
        typer.Option(
            help="GPU price table (CSV: gpu,usd_per_gpu_hour,source) [default: the shipped "
            "planner/data/gpu_prices.csv]."
        ),
    ] = None,
    ttft_slo: opt.TtftSlo = None,
    tpot_slo: opt.TpotSlo = None,
    itl_slo: opt.ItlSlo = None,
    e2e_slo: opt.E2eSlo = None,
    goodput: opt.Goodput = None,
    step_time_error: opt.StepTimeError = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Output directory [default: results/size-NAME]."),
    ] = None,
    workers: opt.Workers = None,
    memory_limit: opt.MemoryLimit = "4GiB",
    resume: opt.Resume = False,
    overwrite: opt.Overwrite = False,
    executor: opt.ExecutorOpt = opt.Executor.local,
    address: opt.DaskAddress = None,
    dask_workers: opt.DaskWorkers = None,
    dry_run: opt.DryRun = False,
    as_json: opt.AsJson = False,
    disaggregated: Annotated[
        bool,
        typer.Option(
            help="Also size disaggregated prefill/decode fleets (P prefill + D decode replicas "
            "of each candidate, the answer's scheduler settings) and show both answers."
        ),
    ] = False,
    kv_transfer_bandwidth: opt.KvTransferBandwidth = DEFAULT_BANDWIDTH_GBPS,
    kv_transfer_latency: opt.KvTransferLatency = DEFAULT_LATENCY_US,
    prefill_max_num_seqs: opt.PrefillMaxNumSeqs = None,
    prefill_max_num_batched_tokens: opt.PrefillMaxNumBatchedTokens = None,
) -> None:
    """The cheapest deployment that meets the SLOs without overload: GPU,
    tensor parallelism, replicas, router and vLLM flags, with its cost, its
    headroom and the vllm serve command for one replica.

    The spec gives the workload, the [hardware] model (its gpu is replaced by
    each of --gpus), [latency] roofline or measured, the SLOs ([slo], or the
    SLO options) and the scheduler settings or axes to search (e.g.
    max_num_seqs).

    Exit status: 0 an answer; 1 no candidate within the search meets the
    target; 2 bad input.
    """
    from planner.config import ROUTERS
    from planner.models import prices as price_tables
    from planner.sweep import driver

    slo_opts = opt.slo_from(ttft_slo, tpot_slo, itl_slo, e2e_slo, goodput)
    opt.check_run_options(workers, resume, overwrite, executor, address, dask_workers)
    names = _split(routers, "--routers")
    for r in names:
        if r not in ROUTERS:
            raise ValueError(f"--routers: unknown router {r!r} (known: {', '.join(ROUTERS)})")
    limit = driver.parse_memory(memory_limit)
    table = price_tables.load(prices)
    names_gpu, tps = _gpus(gpus, table), _tps(tensor_parallel_sizes)
    for g in names_gpu:
        table.price(g)  # every candidate needs a price
    if max_replicas == 1 and names != ["round_robin"]:
        raise ValueError("--routers needs --max-replicas > 1 (one server has nothing to route)")
    cands = sizing.candidates(
        spec, names_gpu, tps, max_replicas, names, _slo_fields(slo_opts), limit
    )
    first = next(c for c in cands if c.spec is not None)
    base = first.spec
    target = base.sweep.slo or SLO()  # type: ignore[attr-defined]
    if disaggregated and not target.given():
        raise ValueError("--disaggregated needs an SLO to size against ([slo] or --ttft-slo ...)")
    link = (kv_transfer_bandwidth, kv_transfer_latency)
    if disaggregated and max_replicas < 2:
        raise ValueError("--disaggregated needs --max-replicas >= 2 (one prefill + one decode)")
    own = {
        "max_num_seqs": prefill_max_num_seqs,
        "max_num_batched_tokens": prefill_max_num_batched_tokens,
    }
    own = {k: v for k, v in own.items() if v is not None}
    _check_disaggregated(cands, disaggregated, link, own)
    name = base.name.removesuffix(f".{first.gpu}-tp{first.tp}")  # the spec's, not a candidate's
    # Always size-NAME, even for a spec named size-X: two specs never share a
    # folder, and plan sweep's results/NAME is never plan size's.
    dest = out if out is not None else Path("results") / f"size-{name}"
    _check_memory(cands, limit, workers)
    search = {
        "spec": spec.name,  # the file's name and bytes: another path to it is the same search
        "spec_sha256": store.sha256_file(spec),
        "candidates": [[c.gpu, c.tp] for c in cands],
        "max_replicas": max_replicas,
        "routers": names,
        "slo": _slo_fields(slo_opts),
        "prices": None if prices is None else store.sha256_file(prices),
    }
    if not (dest / store.HOLDER).exists():  # in use: folder_lock says by whom
        check_folder(dest, search, resume, overwrite)  # also at --dry-run; before the lock file
    if dry_run:
        _print_plan(cands, as_json, max_replicas if disaggregated else 0)
        return
    with store.folder_lock(dest):  # a second plan size into this --out is refused
        claim_folder(dest, search, resume, overwrite)
        run = (workers, stderr_reporter(), executor.value, address, dask_workers)
        t0 = time.perf_counter()
        frames = _run_candidates(cands, dest, limit, resume, overwrite, run)
        wall = time.perf_counter() - t0
        result = sizing.finish(frames, table, target, [c for c in cands if c.spec is None])
        split = (
            _disaggregated(result, cands, table, target, max_replicas, link, own)
            if disaggregated
            else None
        )
        headroom = _headroom(result, cands, target)
        shifts = _sensitivity(result, cands, target, step_time_error, max_replicas)
        paths = sizing.write(result, dest)
        png = _plot(result, target, dest)
        pngs = [png] if split is None else [png, _plot_disaggregated(result, split, target, dest)]
        report = {**provenance(), **_report(result, cands, base, table, target, wall, headroom)}
        if report["answer"] is not None:  # the lines plan size prints, for plan report
            report["answer"]["headroom_text"] = _headroom_text(headroom)
            report["answer"]["sensitivity"] = shifts
            report["answer"]["sensitivity_text"] = _sensitivity_text(shifts, report["answer"])
        if split is not None:
            split["sensitivity_text"] = (
                DISAGG_SENSITIVITY
                if result.best is not None
                else "step-time sensitivity: not computed for the disaggregated fleet"
            )
            report["disaggregated"] = split
        _write_answer(dest, report)
        if as_json:
            print_json(report)
        else:
            _print(report, [*paths, *pngs, dest / ANSWER_FILE])
        if result.best is None and (split is None or split["answer"] is None):
            raise typer.Exit(1)  # neither answer meets the target


LINK_DEFAULTS = (DEFAULT_BANDWIDTH_GBPS, DEFAULT_LATENCY_US)


def _check_disaggregated(
    cands: list[sizing.Candidate],
    disaggregated: bool,
    link: tuple[float, float],
    own: dict[str, int],
) -> None:
    """Before any work: the link and prefill options act only with
    --disaggregated; with it every candidate's link must be one the kernel
    holds, and the prefill replicas' own settings (``own``) ones vLLM
    starts with beside every config's others. Raises ValueError (one line)."""
    from planner.cli.disagg import PREFILL_OWN
    from planner.kv_transfer import KVTransfer

    if not disaggregated:
        names = ("--kv-transfer-bandwidth", "--kv-transfer-latency")
        given = [n for n, v, d in zip(names, link, LINK_DEFAULTS, strict=True) if v != d]
        given += [PREFILL_OWN[k][1] for k in own]
        if given:
            raise ValueError(f"{' and '.join(given)} {'needs' if len(given) == 1 else 'need'} "
                             "--disaggregated")  # fmt: skip
        return
    for c in cands:
        if c.spec is None:
            continue
        sweep = c.spec.sweep  # type: ignore[attr-defined]
        cfg = sweep.configs[0]
        KVTransfer.from_link(_kv_bytes_per_token(sweep, c.tp, cfg), *link)
        if own:
            _check_prefill_own(sweep, f"{c.gpu} TP {c.tp}", own)


def _check_prefill_own(sweep: object, name: str, own: dict[str, int]) -> None:
    """Each config of a candidate's ``sweep`` as a prefill replica with the
    user's own settings ``own``: vLLM's start-up rule on the pair
    (``check_vllm_args``), the config's own checks (drafts within the
    budget) and a pool that holds the model (``Sweep.pool_blocks``). Raises
    ValueError (one line, naming the candidate and the prefill flags)."""
    from planner.cli.disagg import PREFILL_OWN, prefill_settings
    from planner.config import check_vllm_args
    from planner.sweep.spec import SpecError

    util = sweep.utilization()  # type: ignore[attr-defined]
    seen: set = set()
    for k in sweep.configs:  # type: ignore[attr-defined]
        merged = prefill_settings(k, own)
        key = (merged["max_num_seqs"], merged["max_num_batched_tokens"], k.block_size,
               k.speculation)  # fmt: skip
        if key in seen:
            continue
        seen.add(key)
        try:
            check_vllm_args(merged["max_num_seqs"], merged["max_num_batched_tokens"])
            dataclasses.replace(k, **merged)  # SchedulerConfig's own checks
            sweep.pool_blocks(  # type: ignore[attr-defined]
                util, k.block_size, merged["max_num_seqs"],
                merged["max_num_batched_tokens"], k.speculation,
            )  # fmt: skip
        except (ValueError, SpecError) as e:
            msg = str(e).removeprefix("hardware: ")
            for n in own:
                msg = msg.replace(*PREFILL_OWN[n])
            given = ", ".join(f"{PREFILL_OWN[n][1]} {v}" for n, v in own.items())
            raise ValueError(
                f"--disaggregated: the prefill replicas on {name} ({given}): {msg}"
            ) from None


def _disaggregated(
    result: sizing.Sizing,
    cands: list[sizing.Candidate],
    table: object,
    slo: SLO,
    max_replicas: int,
    link: tuple[float, float],
    own: dict[str, int],
) -> dict:
    """``--disaggregated``: the cheapest P:D fleet (``answers.disagg_sizing``)
    beside the aggregated answer, as the report's ``disaggregated`` entry;
    ``own``: the prefill replicas' own max_num_seqs/max_num_batched_tokens."""
    from planner.answers import disagg_sizing as ds

    runnable = [c for c in cands if c.spec is not None]
    sweeps = [c.spec.sweep for c in runnable]  # type: ignore[attr-defined]
    if any(len(s.workloads) != 1 for s in sweeps):
        raise ValueError("--disaggregated: the spec must have one workload (no workload axes)")
    df = result.table
    swept = set(sweeps[0].axes)  # the rest is each candidate's own (its vLLM defaults)
    if result.best is not None:  # the aggregated answer's value of each swept setting
        row = df.loc[result.best]
        best = cands[int(row["candidate"])].spec.sweep  # type: ignore[union-attr]
        chosen = _pool_settings(best.configs[int(row["config_id"])])
        want = {k: v for k, v in chosen.items() if k in swept}
    elif "max_num_seqs" in swept:  # none: the spec's largest max_num_seqs
        want = {"max_num_seqs": max(c.max_num_seqs for c in sweeps[0].configs)}
    else:
        want = {}
    options = [
        ds.Option(
            c.gpu,
            c.tp,
            float(table.price(c.gpu)),  # type: ignore[attr-defined]
            cfg := _pool_config(s, want, f"{c.gpu} TP {c.tp}"),
            s.latency,
            _kv_bytes_per_token(s, c.tp, cfg),
            _prefill_config(s, cfg, own),
        )  # fmt: skip
        for c, s in zip(runnable, sweeps, strict=True)
    ]
    wl = next(iter(sweeps[0].workloads.values()))
    best, tried = ds.search(wl, options, slo, max_replicas, *link)
    answer = None if best is None else best.as_dict()
    if answer is not None:
        from planner.disagg import PDRouter

        answer["vllm_serve"] = _role_commands(answer, options, df, sweeps[0])
        answer["router"] = PDRouter().describe()
    on = options[0] if answer is None else next(o for o in options if o.gpu == answer["gpu"])
    return {
        "max_num_seqs": on.config.max_num_seqs,
        "settings": want,  # the swept settings both pools take (the rest: each GPU's own)
        "prefill_settings": own,  # the prefill pool's own (the user's), over ``settings``
        "kv_transfer": {"bandwidth_gbps_per_gpu": link[0], "latency_us": link[1]},
        "answer": answer,
        "tried": [t.as_dict() for t in tried],
        "bound": f"P + D <= {max_replicas} replicas, each pool any candidate GPU and TP with "
        + (
            "the aggregated answer's value of each swept setting"
            if result.best is not None
            else "the spec's first value of each swept setting, its largest max_num_seqs (no "
            "aggregated answer)"
        )
        + (
            "; the prefill pool at " + ", ".join(f"{k} {v:,}" for k, v in own.items())
            if own
            else ""
        ),
    }


# A pool's own, not the scheduler's: each candidate sizes its pool and KV bytes,
# and a fleet's replicas and router are the P:D search's.
NOT_POOL_SETTINGS = ("num_gpu_blocks", "kv_block_bytes", "replicas", "router", "router_seed")


def _pool_config(sweep: object, want: dict, name: str) -> object:
    """The first one-replica config of a candidate's ``sweep`` with the
    settings ``want``. Raises ValueError (one line) when it has none."""
    for k in sweep.configs:  # type: ignore[attr-defined]
        if k.replicas == 1 and all(_pool_settings(k)[n] == v for n, v in want.items()):
            return k
    shown = ", ".join(f"{n} {v}" for n, v in want.items())
    raise ValueError(f"--disaggregated: candidate {name} has no configuration with {shown}")


def _pool_settings(cfg: object) -> dict:
    """``cfg``'s scheduler settings a disaggregated pool takes over (its
    ``columns`` less ``NOT_POOL_SETTINGS``)."""
    cols = cfg.columns()  # type: ignore[attr-defined]
    return {k: v for k, v in cols.items() if k not in NOT_POOL_SETTINGS}


def _utilization(table: pd.DataFrame, gpu: str, tp: int) -> float:
    """The candidate's gpu_memory_utilization in the aggregated table."""
    rows = table[(table["gpu"] == gpu) & (table["tensor_parallel_size"] == tp)]
    return float(rows["gpu_memory_utilization"].iloc[0])


def _prefill_config(sweep: object, cfg: object, own: dict[str, int]) -> object:
    """``cfg`` as a prefill replica with its own settings ``own`` (None when
    there are none), its pool profiled at them as vLLM profiles
    (``Sweep.pool_blocks``)."""
    if not own:
        return None
    from planner.cli.disagg import prefill_settings

    merged = prefill_settings(cfg, own)  # type: ignore[arg-type]
    util = sweep.utilization()  # type: ignore[attr-defined]
    blocks = sweep.pool_blocks(  # type: ignore[attr-defined]
        util, cfg.block_size, merged["max_num_seqs"], merged["max_num_batched_tokens"],  # type: ignore[attr-defined]
        cfg.speculation,  # type: ignore[attr-defined]
    )  # fmt: skip
    return dataclasses.replace(cfg, num_gpu_blocks=blocks, **merged)  # type: ignore[type-var]


def _role_commands(answer: dict, options: list, table: pd.DataFrame, sweep: object) -> dict:
    """Both roles' ``vllm serve`` commands for the answer's pools (each at its
    candidate's gpu_memory_utilization in the aggregated table)."""
    from planner.cli.disagg import role_serve_command

    model = sweep.spec.hardware.model  # type: ignore[attr-defined]
    by = {(o.gpu, o.tp): o for o in options}
    out = {}
    for role, gpu, tp in (
        ("prefill", answer["prefill_gpu"], answer["prefill_tensor_parallel_size"]),
        ("decode", answer["gpu"], answer["tensor_parallel_size"]),
    ):
        o = by[(gpu, tp)]
        cfg = o.as_prefill if role == "prefill" else o.config
        out[role] = role_serve_command(model, _utilization(table, gpu, tp), cfg, tp)
    return out


def _kv_bytes_per_token(sweep: object, tp: int, cfg: object) -> float:
    """The model's KV bytes per token per GPU at ``tp``, a drafter's KV layer
    included (``resolve.kv_block_bytes``)."""
    from planner import resolve

    model = sweep.spec.hardware.model  # type: ignore[attr-defined]
    bs = cfg.block_size  # type: ignore[attr-defined]
    spec = cfg.speculation  # type: ignore[attr-defined]
    return resolve.kv_block_bytes(None, model, bs, tp, speculation=spec) / bs


def _write_answer(dest: Path, report: dict) -> None:
    """``answer.json`` in the output folder: what --json prints (atomic)."""
    text = dumps(report)
    store.atomic_write_bytes(dest / ANSWER_FILE, lambda tmp: Path(tmp).write_text(text))


def _run_candidates(
    cands: list[sizing.Candidate],
    dest: Path,
    limit: int,
    resume: bool,
    overwrite: bool,
    opts: tuple,
) -> list[pd.DataFrame]:
    """Each runnable candidate's sweep into ``dest/sweeps/GPU-tpN`` (resumable),
    its rows tagged with the candidate. ``opts``: (workers, reporter,
    executor, address, dask_workers) as ``driver.run_sweep`` takes them."""
    from planner.sweep import driver

    workers, reporter, executor, address, dask_workers = opts
    frames = []
    for i, c in enumerate(cands):
        if c.spec is None:
            continue
        sweep = c.spec.sweep  # type: ignore[attr-defined]
        try:
            df, _ = driver.run_sweep(
                sweep, dest / "sweeps" / f"{c.gpu}-tp{c.tp}", None, limit, workers, resume,
                overwrite, reporter, executor, address, dask_workers,
            )  # fmt: skip
        except KeyboardInterrupt:
            raise opt.Interrupted(
                f"interrupted; finished chunks are in {dest / 'sweeps'}; rerun with --resume "
                "to continue"
            ) from None
        df = df.assign(candidate=i, gpu=c.gpu, tensor_parallel_size=c.tp)
        if "gpu_memory_utilization" not in df:
            df["gpu_memory_utilization"] = sweep.gpu_memory_utilization
        frames.append(df)
    return frames


SEARCH_FILE = store.SIZE_SEARCH  # the search that wrote a plan size folder
ANSWER_FILE = "answer.json"  # the --json answer, for plan report
SIZE_OUTPUTS = (
    "sweeps", "size.parquet", "size.csv", "pareto.png", "disaggregated.png", SEARCH_FILE,
    ANSWER_FILE,
)  # fmt: skip


def check_folder(dest: Path, search: dict, resume: bool, overwrite: bool) -> list[Path]:
    """Whether ``dest`` may hold this search, without touching it: a folder
    with a plan sweep's result is refused (plan size would mix its files with
    the sweep's, and neither command could then take the folder back); one
    with another search's results is refused unless ``overwrite``, or
    ``resume`` of the same search (``SEARCH_FILE`` equal to ``search``); one
    with this search's results needs one of the two, as ``plan sweep``'s does.
    Returns the plan size outputs ``overwrite`` would remove. Raises
    ValueError (one line)."""
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"--out {dest}: exists and is not a folder")
    if (dest / store.DATA).exists() or (dest / store.MANIFEST).exists():
        raise ValueError(f"{dest} holds a plan sweep result; choose another --out")
    held = [dest / n for n in SIZE_OUTPUTS if (dest / n).exists()]
    if held and not overwrite:
        try:
            old = json.loads((dest / SEARCH_FILE).read_text())
        except (OSError, ValueError):
            old = None
        if old != search:
            what = "another plan size search" if old is not None else "results of unknown origin"
            raise ValueError(
                f"{dest} holds {what} ({_search_text(old)}); pass --overwrite to replace it "
                "or --out another folder"
            )
        if not resume:
            raise ValueError(
                f"{dest} already holds this search; pass --resume to continue it or "
                "--overwrite to redo it"
            )
    return held if overwrite else []


def claim_folder(dest: Path, search: dict, resume: bool, overwrite: bool) -> None:
    """Make ``dest`` hold this search before anything runs (``check_folder``;
    with ``overwrite`` the earlier plan size outputs are removed first), then
    write ``SEARCH_FILE`` (atomically). Raises ValueError (one line)."""
    for path in check_folder(dest, search, resume, overwrite):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    text = json.dumps(search, indent=1)
    store.atomic_write_bytes(dest / SEARCH_FILE, lambda tmp: Path(tmp).write_text(text))


def _search_text(search: dict | None) -> str:
    """A search record in a few words: its spec and candidate GPUs."""
    if not search:
        return f"no readable {SEARCH_FILE}"
    gpus = ", ".join(f"{g} TP {tp}" for g, tp in search.get("candidates", []))
    spec = search.get("spec", "?")
    return f"{spec}: {gpus}, up to {count(int(search.get('max_replicas') or 0), 'replica')}"


def _print_plan(cands: list[sizing.Candidate], as_json: bool, split_replicas: int = 0) -> None:
    """--dry-run: each candidate's fleets, or why it is skipped; with
    --disaggregated (``split_replicas``: its --max-replicas, 0 without), the
    P:D fleets its search may try after the aggregated one."""
    plan: dict = {}
    for cand in cands:
        name = f"{cand.gpu} x{cand.tp}"
        if cand.spec is None:
            plan[name] = {"skipped": cand.skipped}
            continue
        sweep = cand.spec.sweep  # type: ignore[attr-defined]
        runs = sum(cfg.replicas for cfg in sweep.configs)
        plan[name] = {"fleets": len(sweep.configs), "replica_runs": runs}
    total = sum(p.get("fleets", 0) for p in plan.values())
    from planner.answers.disagg_sizing import fleet_count

    usable = sum(cand.spec is not None for cand in cands)
    splits = fleet_count(usable, split_replicas)
    if as_json:
        print_json(plan | ({"disaggregated_fleets_at_most": splits} if split_replicas else {}))
        return
    c = Console(markup=False, soft_wrap=True)
    for name, p in plan.items():
        if "skipped" in p:
            c.print(f"{name}: skipped ({p['skipped']})")
        else:
            c.print(f"{name}: {p['fleets']:,} fleets, {p['replica_runs']:,} replica runs")
    c.print(f"{total:,} fleets in all; nothing run (--dry-run)")
    if split_replicas:
        c.print(
            f"then --disaggregated: at most {splits:,} P:D fleets (P + D <= {split_replicas}, "
            "each pool on any candidate), cheapest first, until one meets the SLOs"
        )


def _headroom(result: sizing.Sizing, cands: list[sizing.Candidate], slo: SLO) -> dict | None:
    """The chosen deployment's highest sustainable rate (``maxrate``), or None."""
    from planner.maxrate.search import search_max_rate
    from planner.maxrate.search_range import SearchError, SearchRange

    if result.best is None:
        return None
    row = result.table.loc[result.best]
    if int(row["max_concurrency"]) > 0:
        return {"note": "closed-loop clients set their own rate; the search is for open loop"}
    sweep = cands[int(row["candidate"])].spec.sweep  # type: ignore[union-attr]
    cid = int(row["config_id"])
    key = next(k for k, ids in sweep.ids_by_workload().items() if cid in set(ids.tolist()))
    try:
        rng = sweep.search if sweep.search is not None else SearchRange()  # the spec's [search]
        found = search_max_rate([sweep.configs[cid]], sweep.workloads[key], sweep.latency, slo, rng)
    except SearchError as e:
        return {"note": str(e)}
    t = found.table.iloc[0]
    wl = sweep.workloads[key]
    return {
        "requests": int(wl.num_requests),
        "window_s": float(wl.arrival_s[-1] - wl.arrival_s[0]),  # at this traffic (1x)
        "max_rate_scale": float(t["max_rate_scale"]),
        "max_rps": float(t["max_rps"]),
        "limit": str(t["max_rate_limit"]),
        "monotone": bool(t["max_rate_monotone"]),
        "fail_scale": float(t["max_rate_fail_scale"]),
        "slo": slo.given(),
    }


def _sensitivity(
    result: sizing.Sizing,
    cands: list[sizing.Candidate],
    slo: SLO,
    given: float | None,
    max_replicas: int,
) -> dict | None:
    """The chosen deployment's fewest replicas with step times off by the
    validated (or given) error (``answers.sensitivity``), or None: no answer,
    or no error to apply."""
    from planner.answers import sensitivity

    if result.best is None:
        return None
    row = result.table.loc[result.best]
    sweep = cands[int(row["candidate"])].spec.sweep  # type: ignore[union-attr]
    cid = int(row["config_id"])
    chosen = sensitivity.chosen_error(given, sweep.latency)
    if chosen is None:
        return {"error": None, "why": sensitivity.no_error_text(given)}
    error, basis = chosen
    key = next(k for k, ids in sweep.ids_by_workload().items() if cid in set(ids.tolist()))
    slower, faster = sensitivity.replicas(
        sweep.configs[cid], sweep.workloads[key], sweep.latency, slo, error, max_replicas
    )
    return {
        "error": error,
        "basis": basis,
        "max_replicas": max_replicas,
        "replicas_if_slower": slower.value,
        "replicas_if_faster": faster.value,
    }


def _sensitivity_text(s: dict | None, a: dict) -> str:
    """The sensitivity line plan size prints."""
    if s is None or s["error"] is None:
        return f"step-time sensitivity: not computed ({'-' if s is None else s['why']})"
    e = f"{s['error']:.1%}"

    def fleet(k: int | None) -> str:
        if k is None:
            return f"none of up to {s['max_replicas']} replicas meets the target"
        same = " (the same)" if k == a["replicas"] else ""
        return f"{count(k, 'replica')}{same}"

    return (
        f"if step times are {e} slower than modelled: {fleet(s['replicas_if_slower'])}; "
        f"{e} faster: {fleet(s['replicas_if_faster'])} (same GPU, tensor parallelism and "
        f"flags; {e} is {s['basis']})"
    )


def _report(
    result: sizing.Sizing,
    cands: list[sizing.Candidate],
    spec: object,
    table: object,
    slo: SLO,
    wall: float,
    headroom: dict | None,
) -> dict:
    """Everything ``plan size`` says, as one dict (the --json output)."""
    df = result.table
    sweep = spec.sweep  # type: ignore[attr-defined]
    model = sweep.spec.hardware.model
    rep: dict = {
        "workload": next(iter(sweep.workloads.values())).name,
        "model": model,
        "slo": slo.describe() if slo.given() else "none (not overloaded only)",
        "price_table": table.label,  # type: ignore[attr-defined]
        "searched_fleets": len(df),
        "replica_runs": int(df["replicas"].sum()),
        "candidates": [f"{c.gpu} x{c.tp}" for c in cands if c.spec is not None],
        "skipped": {f"{c.gpu} x{c.tp}": c.skipped for c in result.skipped},
        "wall_s": wall,
        "answer": None,
    }
    until = float(sweep.spec.arrivals_until_s)
    if math.isfinite(until):  # a spec's horizon_s, read as a window of traffic
        n = next(iter(sweep.workloads.values())).num_requests
        rep["traffic_window"] = (
            f"the {count(n, 'request')} due by {until:g} s, each served to completion "
            "(arrivals_until_s; plan size reads a horizon_s so: a run stopped with requests in "
            "flight cannot judge TPOT, ITL or E2E)"
        )
    failed = front_end_failures(df)
    if result.best is None and bool((failed > 0).all()):
        least = int(np.argmin(failed))  # the row with the longest max_model_len, in effect
        what = front_end_text(
            int(df["rejected"].iloc[least]), int(df["cut"].iloc[least]),
            int(df["max_model_len"].iloc[least]),
        )  # fmt: skip
        rep["bound"] = f"in every fleet {what}: raise max_model_len in the spec"
        return rep
    burst = too_short(df, slo) if result.best is None else np.zeros(len(df), bool)
    if burst.any():  # only the workload's length stands between them and an answer
        rep["bound"] = (
            "no deployment searched can be judged to keep up: in each that met the rest "
            + burst_text(df[burst].iloc[0], "more requests (the spec's [workload])")
        )
        return rep
    if result.best is None:
        biggest = int(df["replicas"].max())
        rep["bound"] = (
            f"no deployment searched meets the target; the largest fleets tried "
            f"({biggest} replicas) are a bound, not an answer: raise --max-replicas or add "
            "GPUs or tensor-parallel sizes"
        )
        return rep
    row = df.loc[result.best]
    fewer = _one_fewer(df, result.best)
    rep["answer"] = {
        "gpu": row["gpu"],
        "tensor_parallel_size": int(row["tensor_parallel_size"]),
        "replicas": int(row["replicas"]),
        "gpus": int(row["gpus"]),
        "router": row["router"],
        "max_num_seqs": int(row["max_num_seqs"]),
        "max_num_batched_tokens": int(row["max_num_batched_tokens"]),
        "max_model_len": int(row["max_model_len"]),
        "gpu_memory_utilization": float(row["gpu_memory_utilization"]),
        "num_gpu_blocks": int(row["num_gpu_blocks"]),
        "usd_per_hour": float(row["usd_per_hour"]),
        "usd_per_gpu_hour": float(row["usd_per_gpu_hour"]),
        "usd_per_million_output_tokens": float(row["usd_per_million_output_tokens"]),
        "ttft_s_p99": float(row["ttft_s_p99"]),
        "tpot_s_p99": float(row["tpot_s_p99"]),
        "itl_s_p99": float(row["itl_s_p99"]),
        "offered_rps": float(row["offered_rps"]),
        "output_tokens_asked": int(row["output_tokens_asked"]),
        "output_tokens_served": int(row["output_tokens_served"]),
        "max_concurrency": int(row["max_concurrency"]),
        "speculative_config": str(row.get("speculative_config", "")),
        "spec_acceptance": str(row.get("spec_acceptance", "")),
        "step_time_model": row["latency_model"],
        "vllm_serve": sizing.serve_command(row, model),
        "other_speculation": sizing.other_speculation(df, result.best),
        "headroom": headroom,
        "one_fewer_replica_meets_target": fewer,
    }
    return rep


def _one_fewer(df: pd.DataFrame, best: int) -> bool | None:
    """Whether the same deployment with one replica fewer also meets the
    target (it never does when the search is exhaustive and R > 1); None at R = 1."""
    row = df.loc[best]
    if int(row["replicas"]) == 1:
        return None
    same = (df["candidate"] == row["candidate"]) & (df["replicas"] == row["replicas"] - 1)
    cols = ["max_num_seqs", "max_num_batched_tokens", "router", "gpu_memory_utilization"]
    cols += [c for c in ("speculative_config", "spec_acceptance", "spec_seed") if c in df]
    for col in cols:
        same &= df[col] == row[col]
    hit = df[same]
    return None if hit.empty else bool(hit["meets_target"].iloc[0])


def _print(rep: dict, paths: list[Path]) -> None:
    """The human-readable answer."""
    c = Console(markup=False, soft_wrap=True)
    c.print(f"plan size: {rep['workload']}, model {rep['model']}, SLO {rep['slo']}")
    if "traffic_window" in rep:
        c.print(f"traffic: {rep['traffic_window']}")
    c.print(
        f"searched {rep['searched_fleets']:,} fleets ({rep['replica_runs']:,} replica runs) "
        f"on {', '.join(rep['candidates'])} in {rep['wall_s']:.1f} s"
    )
    for name, why in rep["skipped"].items():
        c.print(f"skipped {name}: {why}")
    a = rep["answer"]
    if a is None:
        split = (rep.get("disaggregated") or {}).get("answer")
        which = "aggregated answer" if split is not None else "answer"
        c.print(f"{which}: none ({rep['bound']})")
    else:
        c.print(
            f"answer: {a['replicas']} x {a['gpu']} {noun(a['replicas'], 'replica')} at "
            f"tensor parallelism {a['tensor_parallel_size']} ({count(a['gpus'], 'GPU')}), "
            f"router {a['router']}, "
            f"max_num_seqs {a['max_num_seqs']}, max_num_batched_tokens "
            f"{a['max_num_batched_tokens']}, gpu_memory_utilization "
            f"{a['gpu_memory_utilization']:g} ({a['num_gpu_blocks']:,} blocks per replica)"
        )
        if a["speculative_config"]:
            c.print(
                f"speculative decoding {a['speculative_config']} at acceptance "
                f"{a['spec_acceptance']} (spec_acceptance): the answer rests on that "
                "acceptance; measure it on your traffic (vLLM logs it per position)"
            )
        if (o := a["other_speculation"]) is not None:
            side = (
                f"with speculative decoding {o['speculative_config']} at acceptance "
                f"{o['spec_acceptance']} (spec_acceptance; this comparison rests on it)"
                if o["speculative_decoding"] and o["meets_target"]
                else "with speculative decoding"
                if o["speculative_decoding"]
                else "without speculative decoding"
            )
            c.print(
                f"{side}: "
                + (
                    f"{o['replicas']} x {o['gpu']} at tensor parallelism "
                    f"{o['tensor_parallel_size']} ({count(o['gpus'], 'GPU')}), "
                    f"${o['usd_per_hour']:.2f}/h"
                    if o["meets_target"]
                    else "no fleet searched meets the target"
                )
            )
        c.print(
            f"cost: ${a['usd_per_hour']:.2f}/h ({a['gpus']} x ${a['usd_per_gpu_hour']:.3f} per "
            f"GPU-hour from {rep['price_table']}), ${a['usd_per_million_output_tokens']:.3f} "
            "per million output tokens at this traffic"
        )
        c.print(
            f"at this traffic: TTFT p99 {a['ttft_s_p99']:.3f} s, TPOT p99 "
            f"{a['tpot_s_p99'] * 1000:.1f} ms, ITL p99 {a['itl_s_p99'] * 1000:.1f} ms, "
            + (
                "every request sent at once (offline): no arrival rate to keep up with"
                if not math.isfinite(a["offered_rps"])  # no arrival window
                else f"{a['offered_rps']:.2f} req/s offered and kept up with"
                if a["max_concurrency"] == 0  # closed loop: the clients' pace, not the trace's
                else f"{a['max_concurrency']:,} closed-loop clients reaching "
                f"{a['offered_rps']:.2f} req/s (they send as answers come: no traffic of its "
                "own to keep up with)"
            )
        )
        whole = a["output_tokens_served"] == a["output_tokens_asked"]
        c.print(
            f"output tokens: {a['output_tokens_served']:,} served of "
            f"{a['output_tokens_asked']:,} asked"
            + (" (every request whole)" if whole else " (the rest unfinished when the run ended)")
        )
        c.print(a["headroom_text"])
        if a["one_fewer_replica_meets_target"] is False:
            fewer = count(a["replicas"] - 1, "replica")
            c.print(f"with {fewer} and the same flags it does not")
        c.print(f"step time: {a['step_time_model']}")
        c.print(a["sensitivity_text"])
        c.print(a["vllm_serve"])
    if "disaggregated" in rep:
        _print_disaggregated(c, rep)
    c.print(f"wrote {', '.join(str(p) for p in paths)}")


def _settings_text(d: dict) -> str:
    """The swept settings both pools take, in words (else max_num_seqs)."""
    given = d.get("settings") or {"max_num_seqs": d["max_num_seqs"]}
    return ", ".join(f"{k} {v}" for k, v in given.items())


# --step-time-error re-sizes the aggregated answer only (``_sensitivity``).
DISAGG_SENSITIVITY = (
    "step-time sensitivity: not computed for the disaggregated fleet (the one printed above "
    "re-sizes the aggregated answer only)"
)


def _print_disaggregated(c: Console, rep: dict) -> None:
    """``--disaggregated``: the cheapest P:D fleet beside the aggregated answer."""
    d, a = rep["disaggregated"], rep["answer"]
    x = d["kv_transfer"]
    c.print(
        f"disaggregated ({_settings_text(d)}, KV link {x['bandwidth_gbps_per_gpu']:g} "
        f"GB/s per GPU, {x['latency_us']:g} us per load; searched "
        f"{count(len(d['tried']), 'P:D fleet')}, {d['bound']}):"
    )
    b = d["answer"]
    if b is None:
        c.print("  none of the fleets searched meets the target")
    else:
        c.print(
            f"  {b['prefill_replicas']} prefill x {b['prefill_gpu']} at TP "
            f"{b['prefill_tensor_parallel_size']} + {b['decode_replicas']} decode x {b['gpu']} at "
            f"TP {b['tensor_parallel_size']} ({count(b['gpus'], 'GPU')}), "
            f"${b['usd_per_hour']:.2f}/h: TTFT p99 {b['ttft_s_p99']:.3f} s, TPOT p99 "
            f"{b['tpot_s_p99'] * 1000:.1f} ms, KV load p99 {b['transfer_s_p99'] * 1000:.2f} ms"
        )
        for role, cmd in b["vllm_serve"].items():
            c.print(f"  vllm serve ({role}): {cmd}", soft_wrap=True)
        c.print(f"  router: {b['router']}")
        c.print(f"  {d['sensitivity_text']}")
    if a is not None:
        c.print(
            f"  aggregated: {a['replicas']} x {a['gpu']} at TP {a['tensor_parallel_size']}, "
            f"${a['usd_per_hour']:.2f}/h: TTFT p99 {a['ttft_s_p99']:.3f} s, TPOT p99 "
            f"{a['tpot_s_p99'] * 1000:.1f} ms"
        )
    if a is None and b is not None:
        c.print("  cheaper at this traffic: disaggregated (no aggregated deployment meets it)")
    if a is not None and b is not None:
        win = (
            "aggregated" if a["usd_per_hour"] < b["usd_per_hour"]
            else "disaggregated" if b["usd_per_hour"] < a["usd_per_hour"]
            else "neither (equal cost)"
        )  # fmt: skip
        c.print(f"  cheaper at this traffic: {win}")


def _headroom_text(h: dict | None) -> str:
    if h is None:
        return "headroom: -"
    if "note" in h:
        return f"headroom: not searched ({h['note']})"
    if math.isnan(h["max_rate_scale"]):
        return "headroom: none found at the search's low end"
    if h["limit"] == "at_search_max" and h["max_rate_scale"] < 1:  # the answer meets 1x
        return (
            f"headroom: not measured: the spec's [search] range ends at "
            f"{h['max_rate_scale']:.2f}x, below this traffic"
        )
    bound = " (the search's top)" if h["limit"] == "at_search_max" else ""
    if h["limit"] == "workload_too_short":
        bound = (
            f" (at {h['fail_scale']:.3g}x the workload's requests arrive within "
            f"{OVERLOAD_MIN_LIFETIMES:g}x their occupancy-weighted median E2E, too short to judge "
            "a higher rate)"
        )
    held = "at the SLOs" if h["slo"] else "without overload"
    odd = (
        f"; pass/fail is not monotone ({h['fail_scale']:.3g}x failed below a pass): every "
        "scale tried up to it passed"
        if not h["monotone"]
        else ""
    )
    return (
        f"headroom: sustains {'at least' if bound else 'up to'} {h['max_rate_scale']:.2f}x "
        "this traffic "
        f"({h['max_rps']:.2f} req/s) {held}{bound}{odd}{_short_window(h)}"
    )


# Below this many requests a p99 rests on fewer than 10 of them: headroom
# judged at the SLOs on such a workload is the rate at which a handful of
# requests met them. (Whether the rate is sustained at all is the overload
# rule's to judge, ``metrics.OVERLOAD_MIN_LIFETIMES``; a bound it sets says so.)
SHORT_WINDOW_REQUESTS = 1000


def _short_window(h: dict) -> str:
    """The caveat for headroom at the SLOs measured on fewer than
    SHORT_WINDOW_REQUESTS requests: its p99s rest on a few of them. None when
    there is no SLO, or when the workload's length already bounds the answer."""
    if h["requests"] >= SHORT_WINDOW_REQUESTS or not h["slo"]:
        return ""
    if h["limit"] == "workload_too_short":
        return ""
    few = max(1, h["requests"] // 100)
    return (
        f"; measured on {count(h['requests'], 'request')}, so each p99 rests on the slowest "
        f"{few}: size on a longer window to trust it"
    )


# What plan size adds after its candidates ran: importing the max-rate search,
# the headroom run, the Parquet and CSV writes and the Pareto picture
# (matplotlib). Measured 2026-12-04 (Linux x86-64; tests/data/size_small.toml
# on 4 candidates): 50 MiB from the resident memory after the last candidate to
# the end's peak (15 MiB the headroom search, 34 MiB the picture); plus ~12%.
# The headroom search's own configs are counted again beside it (conservative).
AFTER_RUNS_BYTES = 56 * 2**20


def _check_memory(cands: list[sizing.Candidate], limit: int, workers: int | None) -> None:
    """Refuse, before any candidate runs, a search that would pass ``limit``
    (bytes): every candidate's chunks beside the JIT of every kernel variant
    any candidate needs (once the first ran, its kernels stay while the next
    run), then the chosen fleet's headroom search (``VERIFY_FRACTIONS``
    configs in one call) beside ``AFTER_RUNS_BYTES``. Raises SweepError (one
    line)."""
    from planner.maxrate.search import VERIFY_FRACTIONS
    from planner.sweep import driver

    sweeps = [c.spec.sweep for c in cands if c.spec is not None]  # type: ignore[attr-defined]
    fleet = any(driver.has_fleets(sw) for sw in sweeps)
    caching = set().union(*(driver.caching_values(sw) for sw in sweeps))
    marks = functools.reduce(union, (driver.sweep_features(sw) for sw in sweeps), PLAIN)
    budget = driver.chunk_budget(limit, workers, fleet, caching, marks)
    plans = [driver.plan_chunks(sw, None, budget) for sw in sweeps]
    k = len(VERIFY_FRACTIONS)
    after = AFTER_RUNS_BYTES + max(
        p.budget.fixed + p.budget.chunk_bytes(k, per, p.scratch_bytes[key])
        for p in plans
        for key, per in p.bytes_per_config.items()
    )
    if after > limit:
        raise driver.SweepError(
            f"--memory-limit {limit / 2**20:,.0f} MiB is too small for plan size: after the "
            f"candidates, the headroom search ({k} configs at once), the files and the Pareto "
            f"picture need about {after / 2**20:,.0f} MiB; raise --memory-limit"
        )


def _plot(result: sizing.Sizing, slo: SLO, dest: Path) -> Path:
    from planner.plots.pareto import pareto_png

    return pareto_png(result.table, result.best, slo, dest / "pareto.png")


def _plot_disaggregated(result: sizing.Sizing, split: dict, slo: SLO, dest: Path) -> Path:
    from planner.plots.disagg import disagg_png

    path = dest / "disaggregated.png"
    return disagg_png(result.table, result.best, split["tried"], split["answer"], slo, path)


def register(app: typer.Typer) -> None:
    """Add ``size`` to the ``plan`` app."""
    app.command("size", cls=opt.BoundedCommand)(size)
