"""Sizing a disaggregated deployment: how many prefill and decode replicas, of which GPU.

``plan size --disaggregated`` runs this after the aggregated search
(``planner.answers.sizing``). Each pool may take any candidate GPU and
tensor parallelism: P prefill replicas of candidate i and D decode replicas
of candidate j (``planner.disagg``), both with the scheduler settings of the
aggregated answer (its max_num_seqs and the spec's other settings; the
spec's largest max_num_seqs when nothing aggregated meets the target; the
prefill pool's own max_num_seqs and max_num_batched_tokens where given), with
P + D up to ``max_replicas``. Fleets are tried in order of cost (P x TP_i x
$/GPU-hour_i + D x TP_j x $/GPU-hour_j, fewer GPUs first at equal cost); the
first cost at which some fleet meets the SLOs without overload is the
answer's, and among the fleets of that cost the one with the largest SLO
margin wins. Priced as the aggregated table prices a replica
(``sizing.cost_columns``).

Two prunes keep the search short, both assuming more replicas never load a
pool more: a prefill pool (i, P) that fell behind its traffic by its own
work rules out (i, P') for every P' <= P (not one held back by the decode
side's reads, ``disagg._held_back``: more decode replicas or another link
may free it), and a decode pool (j, D) that fell behind while its prefill
pool kept up rules out (j, D') for every D' <= D. With one
candidate this is the search over N = P + D = 2, 3, ... and every split of
each N.

This is a bound of the search, not of the deployment space: the decode pool
runs the aggregated answer's scheduler settings and the prefill pool those
too, but for the max_num_seqs and max_num_batched_tokens the user gives it
(``Option.prefill_config``; the search does not choose them), and both
pools run behind llm-d's P/D router (``disagg.PDRouter``'s default, seed 0).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner.config import SchedulerConfig
from planner.disagg import Pool, simulate_disaggregated, summarize_disaggregated
from planner.kv_transfer import KVTransfer
from planner.latency.step_time import Latency
from planner.slo import SLO
from planner.workload.arrays import Workload


@dataclass(frozen=True)
class Option:
    """One candidate's pools: its GPU, TP, $/GPU-hour, one replica's config
    and step time, and the model's KV bytes per token per GPU (the link's
    per-token cost, ``KVTransfer.from_link``)."""

    gpu: str
    tp: int
    usd_per_gpu_hour: float
    config: SchedulerConfig
    latency: Latency
    kv_bytes_per_token: float
    # As a prefill replica: its own scheduler settings and the pool they size
    # (vLLM starts each instance with its own flags); None: ``config``.
    prefill_config: SchedulerConfig | None = None

    @property
    def as_prefill(self) -> SchedulerConfig:
        """One prefill replica's config."""
        return self.config if self.prefill_config is None else self.prefill_config


@dataclass
class Split:
    """One P:D fleet tried: each pool's GPU and TP, its figures
    (``summarize_disaggregated``) and cost."""

    gpu: str  # the decode pool's
    tp: int
    prefill_replicas: int
    decode_replicas: int
    usd_per_hour: float
    summary: dict
    prefill_gpu: str = ""  # "" : the decode pool's
    prefill_tp: int = 0  # 0: the decode pool's

    @property
    def gpus(self) -> int:
        """GPUs of both pools."""
        return self.prefill_replicas * (self.prefill_tp or self.tp) + self.decode_replicas * self.tp

    @property
    def meets(self) -> bool:
        s = self.summary
        return bool(s.get("meets_slo")) and s["overload_judged"] and not s["overloaded"]

    def margin(self, slo: SLO) -> float:
        """The smallest headroom over the given p99 objectives (limit / p99, >= 1 meets)."""
        worst = math.inf
        for name, limit in (("ttft_s", slo.ttft_s), ("tpot_s", slo.tpot_s), ("e2e_s", slo.e2e_s)):
            if limit is not None:
                p99 = self.summary[f"{name}_p99"]
                worst = min(worst, limit / p99 if p99 > 0 else math.inf)
        return worst

    def as_dict(self) -> dict:
        keys = (
            "throughput_rps", "ttft_s_p99", "tpot_s_p99", "e2e_s_p99", "transfer_s_p99",
            "prefill_overloaded", "decode_overloaded", "meets_slo",
            "prefill_read_hold_peak_blocks", "prefill_held_back_by", "reads_converged",
        )  # fmt: skip
        return {
            "gpu": self.gpu,
            "tensor_parallel_size": self.tp,
            "prefill_gpu": self.prefill_gpu or self.gpu,
            "prefill_tensor_parallel_size": self.prefill_tp or self.tp,
            "prefill_replicas": self.prefill_replicas,
            "decode_replicas": self.decode_replicas,
            "gpus": self.gpus,
            "usd_per_hour": self.usd_per_hour,
            **{k: self.summary.get(k) for k in keys},
        }


def search(
    workload: Workload,
    options: Sequence[Option],
    slo: SLO,
    max_replicas: int,
    bandwidth_gbps: float,
    latency_us: float,
    progress: Callable[[str], None] | None = None,
) -> tuple[Split | None, list[Split]]:
    """The cheapest disaggregated fleet over ``options`` (each pool any of
    them) meeting ``slo`` (module docstring) and every fleet tried. The KV
    link's per-token time is the decode pool's (its GPU's share of the KV).
    Raises ValueError (one line) for a bad link or a config the decode side
    refuses."""
    if not slo.given():
        raise ValueError("--disaggregated needs an SLO to size against")
    links = [
        KVTransfer.from_link(o.kv_bytes_per_token, bandwidth_gbps, latency_us) for o in options
    ]
    tried: list[Split] = []
    behind_p: dict[int, int] = {}  # prefill option -> most replicas that fell behind
    behind_d: dict[int, int] = {}  # decode option -> the same, with its prefill keeping up
    best: list[Split] = []
    for cost, _, i, p, j, d in _fleets(options, max_replicas):
        if best and cost > best[0].usd_per_hour:
            break
        if p <= behind_p.get(i, 0) or d <= behind_d.get(j, 0):
            continue
        split = _try(workload, options[i], p, options[j], d, links[j], slo, cost, progress)
        tried.append(split)
        s = split.summary
        if s.get("prefill_overloaded") and not s.get("prefill_held_back_by"):
            behind_p[i] = max(behind_p.get(i, 0), p)
        elif s.get("decode_overloaded"):
            behind_d[j] = max(behind_d.get(j, 0), d)
        if split.meets:
            best.append(split)
    return (max(best, key=lambda t: t.margin(slo)) if best else None), tried


def fleet_count(options: int, max_replicas: int) -> int:
    """How many P:D fleets ``_fleets`` lists for ``options`` candidates: every
    (prefill option, P, decode option, D) with P, D >= 1 and P + D <=
    ``max_replicas``."""
    return options**2 * max_replicas * (max_replicas - 1) // 2


def _fleets(options: Sequence[Option], max_replicas: int) -> list[tuple]:
    """Every (cost, GPUs, prefill option, P, decode option, D) with P, D >= 1
    and P + D <= ``max_replicas``, cheapest first (then fewer GPUs, then the
    options' and counts' order)."""
    out = []
    for i, a in enumerate(options):
        for j, b in enumerate(options):
            for p in range(1, max_replicas):
                for d in range(1, max_replicas - p + 1):
                    cost = p * a.tp * a.usd_per_gpu_hour + d * b.tp * b.usd_per_gpu_hour
                    out.append((cost, p * a.tp + d * b.tp, i, p, j, d))
    return sorted(out)


def _try(
    workload: Workload,
    pre: Option,
    p: int,
    dec: Option,
    d: int,
    kv: KVTransfer,
    slo: SLO,
    cost: float,
    progress: Callable[[str], None] | None,
) -> Split:
    """Simulate P prefill replicas of ``pre`` and D decode replicas of ``dec``."""
    if progress is not None:
        progress(
            f"disaggregated {p} prefill ({pre.gpu} TP {pre.tp}) + {d} decode "
            f"({dec.gpu} TP {dec.tp})"
        )
    res = simulate_disaggregated(
        workload,
        Pool(d, dataclasses.replace(dec.config, replicas=1), dec.latency),
        Pool(p, dataclasses.replace(pre.as_prefill, replicas=1), pre.latency),
        kv,
    )
    return Split(dec.gpu, dec.tp, p, d, cost, summarize_disaggregated(res, slo), pre.gpu, pre.tp)
