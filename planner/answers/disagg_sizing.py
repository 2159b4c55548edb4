"""Sizing a disaggregated deployment: how many prefill and decode replicas.

``plan size --disaggregated`` runs this after the aggregated search
(``planner.answers.sizing``): for each candidate GPU and tensor parallelism,
P prefill and D decode replicas of it (``planner.disagg``), both with the
scheduler settings of the aggregated answer (its max_num_seqs and the spec's
other settings; the spec's largest max_num_seqs when nothing aggregated meets
the target), fleets of N = P + D = 2, 3, ... up to ``max_replicas`` GPUs'
worth of replicas, every P:D split of each N. The first N at which some split
meets the SLOs without overload is the candidate's cheapest (cost grows with
N); among its splits the one with the largest SLO margin wins. The answer is
the cheapest candidate's, priced as the aggregated table prices a replica
(``sizing.cost_columns``: GPUs x $/GPU-hour).

This is a bound of the search, not of the deployment space: each pool runs
the same GPU, TP and scheduler settings (vLLM lets them differ), and the
decode router is round robin.
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


@dataclass
class Split:
    """One P:D fleet tried: its figures (``summarize_disaggregated``) and cost."""

    gpu: str
    tp: int
    prefill_replicas: int
    decode_replicas: int
    usd_per_hour: float
    summary: dict

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
        keys = ("throughput_rps", "ttft_s_p99", "tpot_s_p99", "e2e_s_p99", "transfer_s_p99",
                "prefill_overloaded", "decode_overloaded", "meets_slo")  # fmt: skip
        return {
            "gpu": self.gpu,
            "tensor_parallel_size": self.tp,
            "prefill_replicas": self.prefill_replicas,
            "decode_replicas": self.decode_replicas,
            "gpus": (self.prefill_replicas + self.decode_replicas) * self.tp,
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
    """The cheapest disaggregated fleet of ``options`` meeting ``slo``
    (module docstring) and every split tried. Raises ValueError (one line)
    for a bad link or a config the decode side refuses."""
    if not slo.given():
        raise ValueError("--disaggregated needs an SLO to size against")
    tried: list[Split] = []
    best: Split | None = None
    for opt in options:
        kv = KVTransfer.from_link(opt.kv_bytes_per_token, bandwidth_gbps, latency_us)
        found = _cheapest(workload, opt, kv, slo, max_replicas, tried, progress)
        if found is not None and (best is None or found.usd_per_hour < best.usd_per_hour):
            best = found
    return best, tried


def _cheapest(
    workload: Workload,
    opt: Option,
    kv: KVTransfer,
    slo: SLO,
    max_replicas: int,
    tried: list[Split],
    progress: Callable[[str], None] | None,
) -> Split | None:
    """The first N (P + D) at which a split of ``opt`` meets the target, its
    split with the largest margin; None within ``max_replicas``."""
    cfg = dataclasses.replace(opt.config, replicas=1)
    for n in range(2, max_replicas + 1):
        ok = []
        for p in range(1, n):
            d = n - p
            if progress is not None:
                progress(f"disaggregated {opt.gpu} TP {opt.tp}: {p} prefill + {d} decode")
            res = simulate_disaggregated(
                workload, Pool(d, cfg, opt.latency), Pool(p, cfg, opt.latency), kv
            )
            split = Split(
                opt.gpu, opt.tp, p, d, n * opt.tp * opt.usd_per_gpu_hour,
                summarize_disaggregated(res, slo),
            )  # fmt: skip
            tried.append(split)
            if split.meets:
                ok.append(split)
        if ok:
            return max(ok, key=lambda s: s.margin(slo))
    return None
