"""Replay golden vLLM scenarios (tests/golden, written by tools/record_vllm_traces.py)
in the kernel and the reference engine, as comparable per-step records."""

from __future__ import annotations

import functools
import gc
import gzip
import json
from pathlib import Path

import numpy as np

from helpers import STEP_LATENCY
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.kernel import state as S
from planner.kv_transfer import KVTransfer
from planner.latency.step_time import LinearLatency
from planner.reference import Engine
from planner.speculative import Speculation
from planner.workload.arrays import Workload

GOLDEN = Path(__file__).parent / "golden"
MAX_STEPS = 30_000
FIELDS = ("sched", "order", "new", "resumed", "preempted", "finished", "running", "waiting", "free")


def golden_names() -> list[str]:
    return sorted(p.name.removesuffix(".json.gz") for p in GOLDEN.glob("*.json.gz"))


def load(name: str) -> dict:
    with gzip.open(GOLDEN / f"{name}.json.gz", "rt") as f:
        return json.load(f)


@functools.cache
def scenario(name: str) -> dict:
    """Golden ``name``'s scenario, parsed once per process (read it, do not
    change it): test modules filter their parameters on it while pytest
    collects them, in every xdist worker."""
    return load(name)["scenario"]


def config_of(scn: dict) -> SchedulerConfig:
    timed = scn["mode"] == "time"
    return SchedulerConfig(
        num_gpu_blocks=scn["num_gpu_blocks"],
        block_size=scn["block_size"],
        max_num_seqs=scn["max_num_seqs"],
        max_num_batched_tokens=scn["max_num_batched_tokens"],
        max_model_len=scn["max_model_len"],
        long_prefill_token_threshold=scn["long_prefill_token_threshold"],
        watermark=scn["watermark"],
        scheduler_reserve_full_isl=scn["scheduler_reserve_full_isl"],
        policy=scn["policy"],
        async_scheduling=scn["async_scheduling"],
        enable_prefix_caching=scn["enable_prefix_caching"],
        sliding_window=scn.get("sliding_window", 0),
        full_attention_groups=scn.get("full_attention_groups", -1),
        sliding_window_groups=scn.get("sliding_window_groups", -1),
        mamba_groups=scn.get("mamba_groups", 0),
        horizon_s=scn["horizon_s"] if timed else float("inf"),
        max_steps=MAX_STEPS,
        speculation=_speculation(scn.get("speculative")),
        kv_transfer=_kv_transfer(scn.get("kv_transfer"), timed),
    )


def _kv_transfer(x: dict | None, timed: bool) -> KVTransfer | None:
    """A golden's ``kv_transfer`` (latency in steps, steps per 1,000 external
    tokens; a step is 1 us) as a ``KVTransfer``; None: colocated."""
    if not x:
        return None
    assert not timed, "kv_transfer goldens are step mode"
    return KVTransfer(x["latency"] * 1000, x["per_kilotoken"] * 1000)


def remote_of(scn: dict, perm: np.ndarray) -> np.ndarray:
    """(R,) bool: request perm[j] is remote (its KV comes from a prefill instance)."""
    return np.array([bool(scn["requests"][i].get("remote")) for i in perm], dtype=bool)


def _speculation(spec: dict | None) -> Speculation | None:
    """A golden's ``speculative`` entry as a ``Speculation`` (None: off)."""
    if not spec:
        return None
    return Speculation(
        spec["method"],
        spec["num_speculative_tokens"],
        tuple(spec["acceptance"]),
        spec["seed"],
        draft_model=spec.get("model"),
    )


def workload_of(scn: dict) -> tuple[Workload, LinearLatency, np.ndarray]:
    """(workload sorted by arrival, latency, perm): workload index j is golden request perm[j]."""
    reqs = scn["requests"]
    perm = np.array(sorted(range(len(reqs)), key=lambda i: (reqs[i]["arrival"], i)))
    if scn["mode"] == "time":
        lat = LinearLatency(alpha=tuple(scn["alpha_us"]), beta=tuple(scn["beta_us"]))
        arrival = np.array([reqs[i]["arrival"] for i in perm], dtype=np.float64)
    else:
        lat = STEP_LATENCY
        arrival = np.array([reqs[i]["arrival"] for i in perm], dtype=np.float64) * 1e-6
    wl = Workload(
        arrival,
        np.array([reqs[i]["prompt_len"] for i in perm], dtype=np.int32),
        np.array([reqs[i]["max_tokens"] for i in perm], dtype=np.int32),
        name=scn["name"],
        priority=np.array([reqs[i].get("priority", 0) for i in perm], dtype=np.int64),
        prefix_group=np.array([reqs[i].get("prefix_group", -1) for i in perm], dtype=np.int32),
        prefix_len=np.array([reqs[i].get("prefix_len", 0) for i in perm], dtype=np.int32),
        remote=remote_of(scn, perm) if scn.get("kv_transfer") else None,
        read_end_ns=read_ends_of(scn, perm),
    )
    return wl, lat, perm


def read_ends_of(scn: dict, perm: np.ndarray) -> np.ndarray | None:
    """(R,) int64 ns a prefill instance's request perm[j]'s read ends
    (``read_end``, in steps of 1 us), -1 for one not read; None without any."""
    reqs = scn["requests"]
    if not any("read_end" in r for r in reqs):
        return None
    ends = [round(reqs[i]["read_end"] * 1000) if "read_end" in reqs[i] else -1 for i in perm]
    return np.array(ends, dtype=np.int64)


def _empty() -> dict:
    return {k: [] for k in FIELDS}


def _finish_records(recs: list[dict]) -> list[dict]:
    seen: set[int] = set()
    for rec in recs:
        adm = rec.pop("admitted")
        for rid, comp in adm:
            (rec["resumed"] if rid in seen else rec["new"]).append([rid, comp])
            seen.add(rid)
        for k in ("sched", "new", "resumed", "preempted", "finished"):
            rec[k] = sorted(rec[k])
    return recs


def _per_step(steps: int, step: np.ndarray, cols: tuple[np.ndarray, ...]) -> list[list[list]]:
    """For events sorted by ``step``: per step, each of ``cols`` sliced as a list."""
    bounds = np.searchsorted(step, np.arange(steps + 1)).tolist()
    lists = [c.tolist() for c in cols]
    return [[c[bounds[i] : bounds[i + 1]] for c in lists] for i in range(steps)]


def _records(ev: np.ndarray, steps: int, perm: np.ndarray) -> list[dict]:
    """The kernel's event log ``ev`` ((n, 4): step, request or count, value,
    kind) as per-step records in golden form, request ids mapped through
    ``perm`` (the log of a long golden holds over a million events: sliced
    per step with NumPy rather than read one by one)."""
    step, r, value, kind = (ev[:, i] for i in range(4))
    o = np.argsort(step, kind="stable")  # by step, each step's events in log order
    step, r, value, kind = step[o], r[o], value[o], kind[o]
    raw = (kind == S.EV_STATE) | (kind == S.EV_FREE)  # counts, not request ids
    g = np.where(raw, r, perm[np.where(raw, 0, r)])
    recs = [{**_empty(), "admitted": []} for _ in range(steps)]
    m = kind == S.EV_SCHED
    for rec, (gs, vs) in zip(recs, _per_step(steps, step[m], (g[m], value[m])), strict=True):
        rec["sched"] = [[a, b] for a, b in zip(gs, vs, strict=True)]
        rec["order"] = gs
    for name, kd in (("preempted", S.EV_PREEMPT), ("finished", S.EV_FINISH)):
        m = kind == kd
        for rec, (gs,) in zip(recs, _per_step(steps, step[m], (g[m],)), strict=True):
            rec[name] = gs
    m = kind == S.EV_ADMIT
    for rec, (gs, vs) in zip(recs, _per_step(steps, step[m], (g[m], value[m])), strict=True):
        rec["admitted"] = list(zip(gs, vs, strict=True))
    m = kind == S.EV_STATE  # the last of a step's state events holds
    for i, a, b in zip(step[m].tolist(), r[m].tolist(), value[m].tolist(), strict=True):
        recs[i]["running"], recs[i]["waiting"] = a, b
    m = kind == S.EV_FREE
    for i, b in zip(step[m].tolist(), value[m].tolist(), strict=True):
        recs[i]["free"] = b
    return recs


def kernel_steps(scn: dict, features=None) -> tuple[list[dict], dict]:
    """Per-step records in golden form, and final facts, from the kernel
    (variant ``features``; None: the scenario's own, ``api.simulate``)."""
    wl, lat, perm = workload_of(scn)
    res = simulate([config_of(scn)], wl, lat, log_entries=4_000_000, features=features)
    n = int(res.state.out.counters[0, S.O_EVENTS])
    assert n <= res.state.out.events.shape[1], "event log truncated"
    steps = int(res.state.out.counters[0, S.O_STEPS])
    gc.disable()  # a long golden builds millions of small lists: no collection passes
    try:
        recs = _records(res.state.out.events[0, :n], steps, perm)
    finally:
        gc.enable()
    inv = np.argsort(perm)
    final = {
        "livelocked": bool(res.state.out.counters[0, S.O_LIVELOCKED]),
        "num_steps": steps,
        "end_ns": int(res.state.out.counters[0, S.O_END_NS]),
        "num_output_tokens": res.state.req.nout[0][inv].tolist(),
        "num_preemptions": res.state.req.npre[0][inv].tolist(),
        "first_token": res.state.req.first_ns[0][inv].tolist(),
        "finish": res.state.req.finish_ns[0][inv].tolist(),
    }
    return _finish_records(recs), final


def reference_steps(scn: dict) -> tuple[list[dict], dict]:
    """Per-step records in golden form, and final facts, from the reference engine."""
    wl, lat, perm = workload_of(scn)
    eng = Engine(
        config_of(scn),
        lat,
        np.round(wl.arrival_s * 1e9).astype(np.int64).tolist(),
        wl.prompt_tokens.tolist(),
        wl.output_tokens.tolist(),
        wl.priority.tolist(),
        wl.prefix_group.tolist(),
        wl.prefix_len.tolist(),
        remote=None if wl.remote is None else wl.remote.tolist(),
        read_end_ns=None if wl.read_end_ns is None else wl.read_end_ns.tolist(),
    ).run()
    recs = []
    for s in eng.steps:
        rec = _empty()
        rec["sched"] = [[int(perm[r]), n] for r, n in s.per_request]
        rec["order"] = [int(perm[r]) for r, _ in s.per_request]
        rec["preempted"] = [int(perm[r]) for r in s.victims]
        rec["finished"] = [int(perm[r]) for r in s.finishes]
        rec["admitted"] = [(int(perm[r]), c) for r, c in s.admissions]
        rec["running"], rec["waiting"], rec["free"] = s.sched_state
        recs.append(rec)
    order = np.argsort(perm)
    reqs = [eng.requests[j] for j in order]
    final = {
        "livelocked": eng.livelocked,
        "num_steps": len(eng.steps),
        "end_ns": eng.clock,
        "num_output_tokens": [r.num_output_tokens for r in reqs],
        "num_preemptions": [r.num_preemptions for r in reqs],
        "first_token": [r.first_token_ns for r in reqs],
        "finish": [r.finish_ns for r in reqs],
    }
    return _finish_records(recs), final


def golden_steps(gold: dict) -> list[dict]:
    out = []
    for rec in gold["steps"]:
        assert all(reason == "length" for _, reason in rec["finished"])
        r = {k: rec[k] for k in FIELDS}
        r["finished"] = sorted(i for i, _ in rec["finished"])
        out.append(r)
    return out


def first_difference(want: list[dict], got: list[dict], who: str) -> str | None:
    """None if equal, else a message showing the first step that differs."""
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        if w != g:
            keys = [k for k in FIELDS if w[k] != g[k]]
            lines = [f"{who}: step {i} differs in {', '.join(keys)}"]
            for k in keys:
                lines.append(f"  {k}: vllm {w[k]}")
                lines.append(f"  {k}: {who} {g[k]}")
            lines.append(f"  vllm step: {w}")
            lines.append(f"  {who} step: {g}")
            return "\n".join(lines)
    if len(want) != len(got):
        return f"{who}: {len(got)} steps, vllm {len(want)} (equal up to the shorter)"
    return None
