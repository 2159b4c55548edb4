"""How many GPUs: the cheapest deployment that serves a workload within its
SLOs, searched over GPU types, tensor-parallel sizes, replica counts and the
spec's scheduler axes.

Every candidate (GPU, TP) is the user's sweep spec with ``[hardware]`` set to
it and a ``replicas`` axis 1..R added; each runs through the sweep engine
(``sweep.driver``: chunks within a memory limit, a progress bar, resume),
whose fleets run the router kernel (``kernel/fleet.py``). A row **meets** the
target when ``maxrate.passes`` holds: something completed, no livelock or
step limit, not overloaded, every SLO met. Cost is the price table's hourly
price x GPUs (TP x replicas); cost per million output tokens divides it by
the fleet's simulated output tokens per second. The answer is the cheapest
row that meets the target (ties: fewer GPUs, then lower TTFT p99). Because
the whole grid is simulated and the answer is a minimum over the rows that
meet the target, a tighter SLO can only remove rows, so it never lowers the
cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from planner.maxrate.search import passes
from planner.metrics import front_end_failures, keeps_up
from planner.models.prices import PriceTable
from planner.slo import SLO
from planner.sweep.spec import SpecError, traffic_axis

# Scheduler settings vLLM has no flag for: the planner's mitigations and
# BLIS-style variants. A deployment recommendation must be a vLLM server.
NOT_VLLM = {
    "preemption_mode": "recompute",
    "stop_bound": "max_model_len",
    "null_block": True,
    "victim": None,
    "anti_starvation": 0,
    "admission": "vanilla",
    "adaptive_window": 0,
}


class SizingError(ValueError):
    """Sizing cannot run as asked; the message is one line saying what to change."""


@dataclass(frozen=True)
class Candidate:
    """One (GPU, tensor-parallel size) and its spec, or why it cannot serve."""

    gpu: str
    tp: int
    spec: object | None  # sweep_api.Spec; None when skipped
    skipped: str = ""


@dataclass
class Sizing:
    """The searched grid and the answer.

    ``table``: one row per simulated (GPU, TP, config) with every sweep column
    plus ``gpu``, ``tensor_parallel_size``, ``gpus``, ``usd_per_hour``,
    ``usd_per_million_output_tokens``, ``meets_target`` and the Pareto flags
    (``pareto_ttft``, ``pareto_tpot``); ``best``: the chosen row's index in
    ``table`` or None; ``skipped``: candidates that cannot hold the model."""

    table: pd.DataFrame
    best: int | None
    skipped: list[Candidate] = field(default_factory=list)


def candidates(
    path: Path,
    gpus: Sequence[str],
    tps: Sequence[int],
    max_replicas: int,
    routers: Sequence[str] = ("round_robin",),
    slo: dict | None = None,
    memory_limit: int | None = None,
) -> list[Candidate]:
    """Each (GPU, TP) as the spec file at ``path`` with that ``[hardware]``
    (the file's own gpu and tensor-parallel size are placeholders), replicas
    1..``max_replicas`` behind each of ``routers`` and, when given, ``slo``
    as its ``[slo]`` (``Spec.with_slo`` fields). A candidate the spec refuses
    for its hardware (the model does not fit, TP does not divide its heads)
    is kept as skipped with the reason; any other spec error is the user's to
    fix. A spec's ``horizon_s`` becomes ``arrivals_until_s`` (the requests
    due by then, each served to completion: a run stopped with requests in
    flight cannot judge TPOT, ITL or E2E); both given is a SizingError.
    With ``memory_limit`` (bytes), candidates whose configs would not
    fit in it are refused before they are built (``spec.check_expansion``).
    Raises SpecError, or SizingError when no candidate can run."""
    import tomlkit
    import tomlkit.exceptions

    from planner.inputs import MAX_SMALL_FILE_BYTES, check_readable
    from planner.sweep.api import Spec
    from planner.sweep.spec import SpecError, check_expansion, load_spec_text

    try:
        check_readable(path, "spec", MAX_SMALL_FILE_BYTES)
        text = path.read_text()
    except ValueError as e:
        raise SizingError(str(e)) from None
    except OSError as e:
        raise SizingError(f"{path}: cannot read it ({e.strerror or e})") from None
    try:
        user = tomlkit.parse(text.removeprefix("\ufeff"))
    except tomlkit.exceptions.ParseError as e:
        raise SizingError(f"{path}: not valid TOML ({e})") from None
    if "tensor_parallel_size" in user.get("hardware", {}):
        raise SizingError(
            "hardware.tensor_parallel_size: plan size sets it from --tensor-parallel-sizes; "
            "remove it from the spec"
        )
    _check_tensor_parallel_sizes(user.get("hardware", {}).get("model"), tps)
    if "horizon_s" in user and "arrivals_until_s" in user:
        raise SizingError(
            "horizon_s: plan size reads it as arrivals_until_s (the traffic due by then, served "
            "to completion); give one of them"
        )
    out = []
    for g in gpus:
        for tp in tps:
            doc = tomlkit.parse(text.removeprefix("\ufeff"))
            if "horizon_s" in doc:  # a window of traffic, every request judged whole
                doc["arrivals_until_s"] = doc.pop("horizon_s")
            if "hardware" in doc:
                doc["hardware"]["gpu"] = g  # type: ignore[index]
                doc["hardware"]["tensor_parallel_size"] = tp  # type: ignore[index]
            label = f"{path} with {g} x{tp}"
            try:
                sweep = load_spec_text(tomlkit.dumps(doc), path.parent, str(path), memory_limit)
                s = Spec(sweep, label)
            except SpecError as e:
                why = str(e).removeprefix(f"{path}: ")
                if not why.startswith("hardware: ") and "horizon_s" in user:
                    # the field the user wrote, not the one plan size read it as
                    raise SpecError(str(e).replace("arrivals_until_s", "horizon_s")) from None
                if not why.startswith("hardware: "):
                    raise
                out.append(Candidate(g, tp, None, why.removeprefix("hardware: ")))
                continue
            refused = next(
                (w for c in sweep.configs if (w := c.startup_refusal()) is not None), None
            )
            if refused is not None:  # no answer on a server that does not start
                out.append(Candidate(g, tp, None, refused))
                continue
            check_spec(s)
            if not any(c.spec is not None for c in out):  # the first; the others as large
                fleets = max_replicas * (len(routers) if max_replicas > 1 else 1)
                left = len(gpus) * len(tps) - len(out)
                what = f"plan size's {left} candidates"
                check_expansion(len(s.sweep.configs) * fleets * left, memory_limit, what)
            s = s.replace(name=f"{s.name}.{g}-tp{tp}")  # names its progress bar
            s = s.with_axes(replicas=list(range(1, max_replicas + 1)))
            if max_replicas > 1:
                s = s.with_axes(router=list(routers))
            if slo is not None:
                s = s.with_slo(**slo)
            out.append(Candidate(g, tp, s))
    if all(c.spec is None for c in out):
        reasons = "; ".join(f"{c.gpu} x{c.tp}: {c.skipped}" for c in out[:3])
        raise SizingError(
            f"no candidate GPU and tensor-parallel size can serve this model: {reasons}"
        )
    return out


def _check_tensor_parallel_sizes(model: object, tps: Sequence[int]) -> None:
    """A tensor-parallel size that does not split the model's heads fails on
    every GPU (vLLM refuses it): it is a bad option, not a skipped candidate.
    Raises SizingError (one line); an unknown model is the spec's to report."""
    from planner.models.hardware import HardwareError
    from planner.resolve import check_tensor_parallel

    if not isinstance(model, str):
        return
    for tp in tps:
        try:
            check_tensor_parallel(model, tp)
        except HardwareError:
            return  # an unknown or unreadable model: the spec load reports it
        except ValueError as e:
            why = str(e).replace(f"--tensor-parallel-size {tp} ", f"{tp} ", 1)
            raise SizingError(f"--tensor-parallel-sizes: {why}") from None


def check_spec(spec: object) -> None:
    """What ``plan size`` needs of the spec. Raises SizingError (one line)."""
    sweep = spec.sweep  # type: ignore[attr-defined]
    if sweep.spec.hardware is None:
        raise SizingError("the spec needs a [hardware] model (plan size picks the GPU)")
    if sweep.spec.latency.kind == "linear":
        raise SizingError(
            '[latency] kind = "linear" fits one GPU; plan size compares GPUs: use '
            '"roofline" or "measured"'
        )
    for key in ("num_gpu_blocks", "replicas", "router", "router_seed"):
        if key in sweep.axes or key in sweep.spec.scheduler:
            raise SizingError(
                f"{key}: plan size sets it (the pool from each GPU's memory, replicas and "
                "routers from --max-replicas and --routers); remove it from the spec"
            )
    try:
        traffic_axis(sweep.axes, "plan size")
    except SpecError as e:
        raise SizingError(str(e)) from None
    for key, vllm in NOT_VLLM.items():
        values = {getattr(c, key) for c in sweep.configs}
        if values != {vllm}:
            raise SizingError(
                f"{key}: plan size recommends a vLLM deployment, and vLLM runs only "
                f"{key} = {vllm!r}; remove it from the spec"
            )


def cost_columns(df: pd.DataFrame, prices: PriceTable, slo: SLO) -> pd.DataFrame:
    """Add ``gpus``, ``usd_per_hour``, ``usd_per_million_output_tokens`` (at
    the rate served, ``metrics.overload``; closed loop or a batch sent at
    once, the run's) and ``meets_target`` (``maxrate.passes``: also no request
    rejected or cut short) to sweep rows carrying ``gpu`` and
    ``tensor_parallel_size``."""
    df = df.copy()
    df["gpus"] = df["tensor_parallel_size"] * df["replicas"]
    df["usd_per_gpu_hour"] = [prices.price(g) for g in df["gpu"]]
    df["usd_per_hour"] = df["usd_per_gpu_hour"] * df["gpus"]
    with np.errstate(divide="ignore", invalid="ignore"):
        # Output tokens per hour the fleet serves: open loop, the accepted
        # rate when it keeps up (a rejected request yields no token), else the
        # rate it started requests over the arrival window (what it served),
        # x output tokens per completed request; the run's own output_tps
        # would also divide by the drain after the last arrival. Closed loop,
        # the clients' pace is the run's own: its output_tps. A batch sent at
        # once (no arrival window, so no rate) is priced by its run too.
        per_request = df["output_tps"] / df["throughput_rps"]
        served = np.where(df["overloaded"].astype(bool), df["served_rps"], df["accepted_rps"])
        open_loop = served * per_request * 3600.0
        own_pace = (df["max_concurrency"] > 0) | ~np.isfinite(served)
        tokens_per_hour = np.where(own_pace, df["output_tps"] * 3600.0, open_loop)
        df["usd_per_million_output_tokens"] = np.where(
            tokens_per_hour > 0, df["usd_per_hour"] / tokens_per_hour * 1e6, np.nan
        )
    df["meets_target"] = passes(df, slo)  # no request rejected or cut short, too
    return df


def pareto(cost: np.ndarray, latency: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """(N,) bool: the eligible rows no other eligible row beats on both cost
    and latency (lower is better; equal on both counts once, the first)."""
    out = np.zeros(len(cost), dtype=bool)
    idx = np.flatnonzero(eligible & np.isfinite(latency))
    order = idx[np.lexsort((latency[idx], cost[idx]))]
    best = math.inf
    for i in order:
        if latency[i] < best:
            out[i] = True
            best = latency[i]
    return out


def choose(df: pd.DataFrame) -> int | None:
    """Index of the cheapest row that meets the target (ties: fewer GPUs,
    lower TTFT p99, then the first), or None."""
    ok = df[df["meets_target"]]
    if ok.empty:
        return None
    ok = ok.sort_values(["usd_per_hour", "gpus", "ttft_s_p99"], kind="stable")
    return int(ok.index[0])


def other_speculation(df: pd.DataFrame, best: int) -> dict | None:
    """When the grid crosses speculative decoding on and off: the cheapest
    row meeting the target on the other side of the answer's (``choose``'s
    order) as {"speculative_decoding", "meets_target", "speculative_config",
    "spec_acceptance", "replicas", "gpu", "tensor_parallel_size", "gpus",
    "usd_per_hour"}, only the first two when no row there meets it; None when
    the grid does not cross it."""
    if "speculative_config" not in df or df["speculative_config"].eq("").nunique() < 2:
        return None
    spec_on = df.loc[best, "speculative_config"] != ""
    other = df[(df["speculative_config"] != "") != spec_on]
    pick = choose(other)
    if pick is None:
        return {"speculative_decoding": not spec_on, "meets_target": False}
    r = other.loc[pick]
    return {
        "speculative_decoding": not spec_on,
        "meets_target": True,
        "speculative_config": str(r["speculative_config"]),
        "spec_acceptance": str(r["spec_acceptance"]),
        "replicas": int(r["replicas"]),
        "gpu": str(r["gpu"]),
        "tensor_parallel_size": int(r["tensor_parallel_size"]),
        "gpus": int(r["gpus"]),
        "usd_per_hour": float(r["usd_per_hour"]),
    }


def finish(
    frames: list[pd.DataFrame], prices: PriceTable, slo: SLO, skipped: list[Candidate]
) -> Sizing:
    """Combine the candidates' sweep rows into the sizing table and choose."""
    df = pd.concat(frames, ignore_index=True)
    # One replica has nothing to route: keep its rows under the first router only.
    first = df["router"].iloc[0]
    df = df[(df["replicas"] > 1) | (df["router"] == first)].reset_index(drop=True)
    df = cost_columns(df, prices, slo)
    served = keeps_up(df) & ~df["livelocked"] & ~df["step_limit_hit"]
    # A fleet that rejects or cuts requests serves less than the traffic asks.
    served &= front_end_failures(df) == 0
    cost = df["usd_per_hour"].to_numpy(float)
    df["pareto_ttft"] = pareto(cost, df["ttft_s_p99"].to_numpy(float), served.to_numpy())
    df["pareto_tpot"] = pareto(cost, df["tpot_s_p99"].to_numpy(float), served.to_numpy())
    return Sizing(df, choose(df), skipped)


def serve_command(row: pd.Series, model: str, extra: dict | None = None) -> str:
    """``vllm serve`` for one replica of ``row``, every setting pinned where
    the planner's simulated default and vLLM's differ or depend on the GPU
    (prefix caching and async scheduling default on in vLLM 0.33 and off in
    the planner; max_num_seqs and max_num_batched_tokens default by GPU and
    usage context in ``EngineArgs``), so the deployed server is the one
    simulated. ``extra``: more settings (name -> value), appended in vLLM's
    spelling (e.g. a disaggregated role's ``kv_transfer_config``)."""
    from planner.models.catalog import aliases

    hf_id = aliases().get(model.lower(), model)
    keys = [
        "tensor_parallel_size", "gpu_memory_utilization", "max_model_len", "block_size",
        "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "async_scheduling",
    ]  # fmt: skip
    if int(row["long_prefill_token_threshold"]) > 0:
        keys.append("long_prefill_token_threshold")
    # vLLM SchedulerConfig settings the planner simulates, pinned when the
    # spec moved them from vLLM's default (watermark 0, full-sequence gate on).
    if float(row["watermark"]) > 0:
        keys.append("watermark")
    if not row["scheduler_reserve_full_isl"]:
        keys.append("scheduler_reserve_full_isl")
    settings = {k: row[k] for k in keys}
    if row["policy"] != "fcfs":
        settings["scheduling_policy"] = row["policy"]  # vLLM's name for the policy
    if row.get("speculative_config"):  # vLLM's JSON, quoted for the shell
        settings["speculative_config"] = f"'{row['speculative_config']}'"
    settings |= extra or {}
    return f"vllm serve {hf_id} " + " ".join(_vllm_flag(k, v) for k, v in settings.items())


def _vllm_flag(name: str, value: object) -> str:
    """One ``vllm serve`` argument in vLLM's spelling (``EngineArgs``: dashes;
    booleans as ``--x`` / ``--no-x``, argparse's BooleanOptionalAction)."""
    flag = name.replace("_", "-")
    if isinstance(value, bool | np.bool_):
        return "--" + ("" if value else "no-") + flag
    if isinstance(value, float | np.floating):
        return f"--{flag} {float(value):g}"
    if isinstance(value, int | np.integer):
        return f"--{flag} {int(value)}"
    return f"--{flag} {value}"


def write(sizing: Sizing, out: Path) -> tuple[Path, Path]:
    """Write the table as ``size.parquet`` and ``size.csv`` in ``out``
    (atomically: each to a temporary name, then renamed). Returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = (out / "size.parquet", out / "size.csv")
    for p in paths:
        tmp = p.with_name(f".{p.name}.tmp")
        if p.suffix == ".parquet":
            sizing.table.to_parquet(tmp, index=False)
        else:
            sizing.table.to_csv(tmp, index=False)
        tmp.replace(p)
    return paths
