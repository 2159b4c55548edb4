"""Per-config metrics and the outcome class, from a finished ``SimResult``.

Latency definitions (BLIS conventions, ``shared/docs/semantics.md``), seconds:

- TTFT = first-token time - arrival + alpha2 (the queueing delay is inside).
- TPOT = (finish - first token) / (outputs - 1) + alpha2, per request with >= 2
  outputs: its mean inter-token latency (ITL), so TPOT percentiles are taken
  across requests.
- E2E  = finish - arrival + alpha2 * outputs (TTFT plus every ITL sample).

Counts use the horizon: ``completed`` are finishes at or before it, and the
throughputs divide by the horizon (or, with none, by the simulated span).
"""

from __future__ import annotations

import warnings
from typing import Protocol

import numpy as np
import pandas as pd

from planner import config as K
from planner.capacity import usable_blocks
from planner.kernel import state as S
from planner.workload import Workload


class SimResult(Protocol):
    """What metrics read of a finished run (``planner.api.SimResult`` has it;
    declared here so that metrics never imports the module that calls it)."""

    configs: list
    latencies: list
    workload: Workload
    cfg: np.ndarray  # (C, NCOLS) int64 packed configs
    arrival_ns: np.ndarray  # (R,) int64, or (C, R) with per-config arrivals
    state: S.State


# Outcome classes.
OK, CHURNING, THRASHING, STARVED, LIVELOCKED, STEP_LIMIT = (
    "ok",
    "churning",
    "thrashing",
    "starved",
    "livelocked",
    "step_limit",
)
OUTCOMES = (OK, CHURNING, THRASHING, STARVED, LIVELOCKED, STEP_LIMIT)
# A config thrashes when at least this share of its busy step time recomputed
# KV it had computed before (re-prefill after recompute preemption, or the
# re-decode of discarded outputs under BLIS restart). Calibrated on scenario S1
# at max_num_seqs 256: restart spends ~43% of its time redoing work and gains
# nothing over max_num_seqs 32 (collapse); recompute spends ~11% and completes
# ~55% more (churn). A config that preempts below this share is "churning".
THRASHING_WASTE_SHARE = 0.25

PERCENTILES = (50, 90, 99)


def _stats(prefix: str, x: np.ndarray) -> dict[str, np.ndarray]:
    """mean, p50, p90, p99 across axis 1 of a (C, R) float array with NaN = absent."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = {f"{prefix}_mean": np.nanmean(x, axis=1)}
        q = np.nanpercentile(x, PERCENTILES, axis=1)
    for p, row in zip(PERCENTILES, q, strict=True):
        out[f"{prefix}_p{p}"] = row
    return out


def outcome(
    livelocked: np.ndarray,
    completed: np.ndarray,
    offered: np.ndarray,
    preemptions: np.ndarray,
    waste_share: np.ndarray,
    step_limit: np.ndarray | None = None,
) -> np.ndarray:
    """Outcome class per config, shape (C,) of str, first match wins:

    ``livelocked`` (the kernel proved a request can never be scheduled again:
    a frozen pool or a repeating cycle), ``step_limit`` (the run stopped at
    max_steps with requests unfinished and nothing proven: its counts are a
    truncated run's, so no other verdict is claimed), ``starved`` (requests
    were offered, none completed), ``thrashing`` (waste share >=
    THRASHING_WASTE_SHARE), ``churning`` (preempted, below that share), else
    ``ok``. All arguments have shape (C,); ``step_limit`` is the kernel's
    O_STEP_LIMIT flag (None: no run hit it).
    """
    cls = np.full(len(completed), OK, dtype=object)
    cls[preemptions > 0] = CHURNING
    cls[waste_share >= THRASHING_WASTE_SHARE] = THRASHING
    cls[(completed == 0) & (offered > 0)] = STARVED
    if step_limit is not None:
        cls[step_limit.astype(bool)] = STEP_LIMIT
    cls[livelocked.astype(bool)] = LIVELOCKED
    return cls


def _per_request(res: SimResult) -> dict[str, np.ndarray]:
    """(C, R) arrays: completed mask, TTFT, TPOT, E2E in seconds (NaN = absent)."""
    st, cfg = res.state, res.cfg
    horizon = cfg[:, K.HORIZON_NS][:, None]
    a2_s = cfg[:, K.A2][:, None] / 1e9
    arr = res.arrival_ns if res.arrival_ns.ndim == 2 else res.arrival_ns[None, :]
    done = (st.finish_ns >= 0) & (st.finish_ns <= horizon)
    first = (st.first_ns >= 0) & (st.first_ns <= horizon)
    multi = done & (st.nout >= 2)
    return {
        "done": done,
        "ttft": np.where(first, (st.first_ns - arr) / 1e9 + a2_s, np.nan),
        "e2e": np.where(done, (st.finish_ns - arr) / 1e9 + a2_s * st.nout, np.nan),
        "tpot": np.where(
            multi, (st.finish_ns - st.first_ns) / 1e9 / np.maximum(st.nout - 1, 1) + a2_s, np.nan
        ),
    }


def span_s(res: SimResult) -> np.ndarray:
    """Seconds the throughputs divide by: the horizon, or the simulated span."""
    horizon = res.cfg[:, K.HORIZON_NS]
    s = np.where(horizon != K.NO_HORIZON_NS, horizon, res.state.out_i[:, S.O_END_NS]) / 1e9
    return np.where(s > 0, s, np.nan)


def goodput_rps(res: SimResult, ttft_slo_s: float | None, tpot_slo_s: float | None) -> np.ndarray:
    """Completed requests per second that met both SLOs (a missing SLO always
    holds; a single-token request has no TPOT and meets it). Shape (C,)."""
    q = _per_request(res)
    ok = q["done"].copy()
    if ttft_slo_s is not None:
        ok &= q["ttft"] <= ttft_slo_s
    if tpot_slo_s is not None:
        ok &= np.isnan(q["tpot"]) | (q["tpot"] <= tpot_slo_s)
    return ok.sum(axis=1) / span_s(res)


def summarize(res: SimResult) -> pd.DataFrame:
    """One row per config: config columns, counts, throughput, latency, outcome."""
    st, cfg = res.state, res.cfg
    oi = st.out_i
    q = _per_request(res)
    done = q["done"]
    span = span_s(res)
    completed = done.sum(axis=1)
    out_tok = np.where(done, st.nout, 0).sum(axis=1)
    fin = np.where(done, st.finish_ns, np.iinfo(np.int64).max).min(axis=1)
    usable = np.array(
        [usable_blocks(int(n), bool(b)) for n, b in zip(cfg[:, K.N], cfg[:, K.NULL], strict=True)]
    )
    busy = oi[:, S.O_BUSY_NS].astype(float)
    waste_share = np.divide(
        st.out_f[:, S.F_WASTE_NS], busy, out=np.zeros(len(busy)), where=busy > 0
    )
    offered = oi[:, S.O_ARRIVED]  # rejected requests were offered too

    df = pd.DataFrame([c.as_dict() for c in res.configs])
    df["workload"] = res.workload.name
    cols: dict[str, np.ndarray] = {
        "completed": completed,
        "finished": oi[:, S.O_FINISHED],
        "rejected": oi[:, S.O_REJECTED],
        "running_end": oi[:, S.O_RUNNING_END],
        "waiting_end": oi[:, S.O_WAITING_END],
        "arrived": oi[:, S.O_ARRIVED],
        "preemptions": oi[:, S.O_PREEMPTIONS],
        "preempted_requests": (st.npre > 0).sum(axis=1),
        "throughput_rps": completed / span,
        "output_tps": out_tok / span,
        "first_completion_s": np.where(completed > 0, fin / 1e9, np.nan),
        **_stats("ttft_s", q["ttft"]),
        **_stats("tpot_s", q["tpot"]),
        **_stats("e2e_s", q["e2e"]),
        "peak_kv_blocks": usable - oi[:, S.O_MIN_FREE],
        "peak_kv_usage": (usable - oi[:, S.O_MIN_FREE]) / usable,
        "steps": oi[:, S.O_STEPS],
        "zero_token_steps": oi[:, S.O_ZERO_STEPS],
        "prefill_tokens": oi[:, S.O_PREFILL_TOKENS],
        "decode_tokens": oi[:, S.O_DECODE_TOKENS],
        "waste_share": waste_share,
        "sim_end_s": oi[:, S.O_END_NS] / 1e9,
        "livelocked": oi[:, S.O_LIVELOCKED].astype(bool),
        "livelock_step": oi[:, S.O_LIVELOCK_STEP],
        "step_limit_hit": oi[:, S.O_STEP_LIMIT].astype(bool),
        "invariant_errors": oi[:, S.O_INVARIANT_ERRORS],
    }
    for k, v in cols.items():
        df[k] = v
    df["outcome"] = outcome(
        oi[:, S.O_LIVELOCKED],
        completed,
        offered,
        oi[:, S.O_PREEMPTIONS],
        waste_share,
        oi[:, S.O_STEP_LIMIT],
    )
    return df
