"""BLIS replay golden fixtures (tests/golden/blis, written by tools/record_blis.py).

BLIS (inference-sim) at commit b563c440 replayed ``planner/data/s1_seed7.csv``
with S1's settings on an 8 x 8 grid of max_num_seqs x num_gpu_blocks, and for
256 x 7,463 step by step. These tests pin the BLIS facts the fixtures show
(docs/blis-compat.md), check that ``compat="blis"`` with the full-hit defect
switch reproduces them exactly (every step of the step log, completed,
preemptions and BLIS's allocation-failure counter on the whole grid), and
record how far planner's nearest vLLM-rule settings,
``--preemption-mode restart --no-null-block --no-scheduler-reserve-full-isl``,
and compat blis without the defect switch stay from BLIS.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from planner.api import simulate
from planner.config import SchedulerConfig, blis_config
from planner.kernel import state as S
from planner.latency.step_time import SEED_ALPHA_US, SEED_BETA_US
from planner.workload.traces import s1_exact

GOLDEN = Path(__file__).parent / "golden" / "blis"
META = json.loads((GOLDEN / "meta.json").read_text())
GRID = pd.read_csv(GOLDEN / "grid.csv.gz")
FOCUS = tuple(META["focus"])
BLOCK_SIZE = 16
HORIZON_US = 120_000_000
# Today's first step where planner's step log leaves BLIS's at 256 x 7,463: an
# arrival lands on the other side of a step boundary because BLIS truncates
# step times to whole microseconds (docs/blis-compat.md, rule 3).
FIRST_DIVERGENCE = 262
# Events the step-log replay at 256 x 7,463 writes (1.34 million measured).
LOG_ENTRIES = 1_600_000


def _config(seqs: int, blocks: int) -> SchedulerConfig:
    return SchedulerConfig(
        num_gpu_blocks=int(blocks),
        max_num_seqs=int(seqs),
        block_size=BLOCK_SIZE,
        max_num_batched_tokens=2048,
        max_model_len=4096,
        preemption_mode="restart",
        null_block=False,
        scheduler_reserve_full_isl=False,
        horizon_s=HORIZON_US / 1e6,
    )


def _compat(seqs: int, blocks: int, defect: bool = True) -> SchedulerConfig:
    return blis_config(
        num_gpu_blocks=int(blocks),
        max_num_seqs=int(seqs),
        block_size=BLOCK_SIZE,
        max_num_batched_tokens=2048,
        max_model_len=4096,
        horizon_s=HORIZON_US / 1e6,
        blis_full_hit_defect=defect,
    )


def _key(s: int, b: int) -> str:
    return f"seqs{s}-blocks{b}"


@pytest.fixture(scope="module")
def planner_grid() -> pd.DataFrame:
    cfgs = [_config(s, b) for s, b in zip(GRID.max_num_seqs, GRID.num_gpu_blocks, strict=True)]
    return simulate(cfgs, s1_exact()).metrics()


@pytest.fixture(scope="module")
def compat_grid() -> pd.DataFrame:
    """compat blis with the defect switch on the grid, and BLIS's failure counter."""
    cfgs = [_compat(s, b) for s, b in zip(GRID.max_num_seqs, GRID.num_gpu_blocks, strict=True)]
    res = simulate(cfgs, s1_exact())
    df = res.metrics()
    df["macro_steps"] = res.state.out.counters[:, S.O_MACRO_STEPS]
    return df


@pytest.fixture(scope="module")
def compat_run():
    """compat blis with the defect switch at 256 x 7,463, traced and logged."""
    return simulate([_compat(*FOCUS)], s1_exact(), trace_steps=20_000, log_entries=LOG_ENTRIES)


@pytest.fixture(scope="module")
def blis_steps() -> pd.DataFrame:
    df = pd.read_csv(GOLDEN / f"steps_{FOCUS[0]}_{FOCUS[1]}.csv.gz", keep_default_na=False)
    for col in ("admitted", "preempted", "finished"):
        df[col + "_n"] = df[col].astype(str).map(lambda s: len(s.split()))
    return df


@pytest.fixture(scope="module")
def planner_trace() -> pd.DataFrame:
    res = simulate([_config(*FOCUS)], s1_exact(), trace_steps=20_000)
    return res.trace(0)


def _spans(steps: pd.DataFrame) -> list[tuple[int, int, int, int]]:
    """(step, request, start, end) of every admission in BLIS's step log."""
    out = []
    for step, ids, spans in zip(steps.step, steps.admitted, steps.admitted_span, strict=True):
        for i, sp in zip(str(ids).split(), str(spans).split(), strict=True):
            s, e = sp.split("-")
            out.append((int(step), int(i), int(s), int(e)))
    return out


# ---- the fixtures themselves -------------------------------------------------


def test_fixtures_match_the_shipped_workload_and_commit():
    import hashlib

    data = (Path(__file__).parents[1] / META["workload"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == META["workload_sha256"]
    assert META["blis_commit"].startswith("b563c440")
    flags = dict(zip(META["flags"][::2], META["flags"][1::2], strict=True))
    cfg = _config(*FOCUS)
    assert tuple(map(float, flags["--alpha-coeffs"].split(","))) == SEED_ALPHA_US
    assert tuple(map(float, flags["--beta-coeffs"].split(","))) == SEED_BETA_US
    assert int(flags["--block-size-in-tokens"]) == cfg.block_size
    assert int(flags["--max-num-scheduled-tokens"]) == cfg.max_num_batched_tokens
    assert int(flags["--max-model-len"]) == cfg.max_model_len
    assert int(flags["--horizon"]) == HORIZON_US
    assert len(GRID) == 64 and set(FOCUS) <= set(GRID.max_num_seqs) | set(GRID.num_gpu_blocks)


def test_blis_case_figures_at_256_x_7463(blis_steps):
    row = GRID[(GRID.max_num_seqs == FOCUS[0]) & (GRID.num_gpu_blocks == FOCUS[1])].iloc[0]
    assert (row.completed, row.preemptions) == (175, 3711)  # the case text's figures
    assert blis_steps.finished_n.sum() == row.completed
    assert blis_steps.preempted_n.sum() == row.preemptions
    reqs = pd.read_csv(GOLDEN / f"requests_{FOCUS[0]}_{FOCUS[1]}.csv.gz")
    assert len(reqs) == row.completed


def test_blis_truncates_step_times_to_whole_microseconds(blis_steps):
    """Rule 3: each step starts exactly trunc(beta0 + beta1 p + beta2 d) us after the last."""
    b0, b1, b2 = SEED_BETA_US
    dur = np.trunc(b0 + b1 * blis_steps.prefill + b2 * blis_steps.decode).astype(np.int64)
    gap = blis_steps.start_us.diff().shift(-1).to_numpy()[:-1]
    assert (gap == dur.to_numpy()[:-1]).all()
    rounded = np.round(b0 + b1 * blis_steps.prefill + b2 * blis_steps.decode).astype(np.int64)
    assert (gap != rounded.to_numpy()[:-1]).any()  # truncation, not rounding
    # first entry: arrival 0.1 s + trunc(232.46 + 1.75 * 300) = 100,757 us
    assert blis_steps.start_us.iloc[0] == 100_000 + int(232.46 + 1.75 * 300)


def test_blis_restarted_requests_hit_their_own_cached_prompt_blocks(blis_steps):
    """Rule 1: a first admission never hits; a re-admission may start at a block boundary."""
    prompt = s1_exact().prompt_tokens
    admissions: dict[int, list] = {}
    for step, req, start, end in _spans(blis_steps):
        admissions.setdefault(step, []).append((req, start, end))
    seen_preempted: set[int] = set()
    first_hits, re_hits = 0, 0
    for step, preempted in zip(blis_steps.step, blis_steps.preempted, strict=True):
        for req, start, end in admissions.get(step, []):
            assert start % BLOCK_SIZE == 0 and start <= end <= prompt[req]
            if req in seen_preempted:
                re_hits += start > 0
            else:
                first_hits += start > 0
        seen_preempted.update(int(i) for i in str(preempted).split())
    assert first_hits == 0 and re_hits > 0


def test_blis_fully_cached_block_multiple_prompt_is_admitted_with_no_tokens(blis_steps):
    """Rule 5 (the defect): a fully cached prompt of k * block_size tokens is admitted
    scheduling 0 tokens; only such prompts are."""
    prompt = s1_exact().prompt_tokens
    zero = [(req, s) for _, req, s, e in _spans(blis_steps) if s == e]
    assert len(zero) > 0
    assert all(prompt[r] % BLOCK_SIZE == 0 and s == prompt[r] for r, s in zero)


def test_blis_runs_a_step_that_starts_before_the_horizon(blis_steps):
    """Rule 4: the last step starts at or before the horizon and ends after it."""
    b0, b1, b2 = SEED_BETA_US
    last = blis_steps.iloc[-1]
    end = last.start_us + int(b0 + b1 * last.prefill + b2 * last.decode)
    assert last.start_us <= HORIZON_US < end


# ---- planner against BLIS ----------------------------------------------------


def test_planner_matches_blis_where_nothing_is_preempted(planner_grid):
    quiet = GRID.preemptions == 0
    assert quiet.sum() >= 20
    got = planner_grid[quiet.to_numpy()]
    assert (got.preemptions.to_numpy() == 0).all()
    assert (got.completed.to_numpy() == GRID.completed[quiet].to_numpy()).all()
    # and planner preempts exactly where BLIS does
    assert ((planner_grid.preemptions.to_numpy() == 0) == quiet.to_numpy()).all()


def test_planner_step_log_matches_blis_until_the_first_truncation_shift(blis_steps, planner_trace):
    """Same tokens, admissions, preemptions and finishes per step up to step 261;
    start times drift apart by under 1 us per step (rounding vs truncation)."""
    n = FIRST_DIVERGENCE
    pairs = (
        ("prefill_tokens", "prefill"),
        ("decode_tokens", "decode"),
        ("admitted", "admitted_n"),
        ("preempted", "preempted_n"),
        ("finished", "finished_n"),
    )
    for ours, theirs in pairs:
        a = planner_trace[ours].to_numpy()[: n + 1]
        b = blis_steps[theirs].to_numpy()[: n + 1]
        assert (a[:n] == b[:n]).all(), ours
    differs = any(
        planner_trace[ours].iloc[n] != blis_steps[theirs].iloc[n] for ours, theirs in pairs
    )
    assert differs, "planner now agrees past step 261: update FIRST_DIVERGENCE"
    drift_us = planner_trace.start_s.to_numpy()[:n] * 1e6 - blis_steps.start_us.to_numpy()[:n]
    assert (drift_us >= 0).all() and (drift_us < np.arange(n) + 1).all()


PREEMPTING = [
    (int(s), int(b))
    for s, b, p in GRID[["max_num_seqs", "num_gpu_blocks", "preemptions"]].to_numpy()
    if p > 0
]


def test_nearest_vllm_settings_preempt_less_than_blis(planner_grid):
    """Without compat, planner agrees with BLIS in 2 of the 33 preempting
    configurations and preempts less in the others (docs/blis-compat.md)."""
    got = planner_grid.set_index(["max_num_seqs", "num_gpu_blocks"])
    want = GRID.set_index(["max_num_seqs", "num_gpu_blocks"])
    agree = [k for k in PREEMPTING if got.preemptions[k] == want.preemptions[k]]
    assert agree == [(32, 6214), (128, 19310)]
    assert all(got.preemptions[k] < want.preemptions[k] for k in PREEMPTING if k not in agree)


# ---- compat blis against BLIS ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("seqs,blocks", PREEMPTING, ids=[_key(*k) for k in PREEMPTING])
def test_compat_matches_blis_where_it_preempts(compat_grid, seqs, blocks):
    ours = compat_grid[
        (compat_grid.max_num_seqs == seqs) & (compat_grid.num_gpu_blocks == blocks)
    ].iloc[0]
    theirs = GRID[(GRID.max_num_seqs == seqs) & (GRID.num_gpu_blocks == blocks)].iloc[0]
    got = (int(ours.completed), int(ours.preemptions), int(ours.kv_allocation_failures))
    want = (int(theirs.completed), int(theirs.preemptions), int(theirs.kv_allocation_failures))
    assert got == want, f"(completed, preemptions, alloc failures): planner {got}, BLIS {want}"


def test_compat_matches_blis_on_the_whole_grid(compat_grid):
    for col, theirs in (
        ("completed", "completed"),
        ("preemptions", "preemptions"),
        ("kv_allocation_failures", "kv_allocation_failures"),
    ):
        assert (compat_grid[col].to_numpy() == GRID[theirs].to_numpy()).all(), col
    # The decode fast path knows none of compat's rules: it never runs there.
    assert (compat_grid.macro_steps.to_numpy() == 0).all()


def _ids(events: pd.DataFrame, kind: int, n_steps: int) -> list[list[int]]:
    """Per step, the requests of one event kind in the log's order."""
    out: list[list[int]] = [[] for _ in range(n_steps)]
    sel = events[events.kind == kind]
    for step, r in zip(sel.step, sel.request, strict=True):
        out[int(step)].append(int(r))
    return out


def test_compat_step_log_matches_blis_on_every_step(blis_steps, compat_run):
    """Every step: start tick, prefill and decode tokens, and the requests
    admitted (with the token span each was allocated), preempted and finished."""
    tr = compat_run.trace(0)
    assert len(tr) == len(blis_steps) == META["focus_steps"]
    start_us = tr.start_s.to_numpy() * 1e6
    assert (np.round(start_us).astype(np.int64) == blis_steps.start_us.to_numpy()).all()
    assert (tr.prefill_tokens.to_numpy() == blis_steps.prefill.to_numpy()).all()
    assert (tr.decode_tokens.to_numpy() == blis_steps.decode.to_numpy()).all()
    ev = compat_run.events(0)
    assert int(compat_run.state.out.counters[0, S.O_EVENTS]) <= LOG_ENTRIES
    n = len(tr)
    for name, kind in (
        ("admitted", S.EV_ADMIT),
        ("preempted", S.EV_PREEMPT),
        ("finished", S.EV_FINISH),
    ):
        want = [sorted(int(x) for x in str(v).split()) for v in blis_steps[name]]
        got = [sorted(x) for x in _ids(ev, kind, n)]
        assert got == want, name
    assert sorted(_our_spans(ev)) == sorted(_spans(blis_steps))


def _our_spans(ev: pd.DataFrame) -> list[tuple[int, int, int, int]]:
    """(step, request, start, end) of every admission in planner's event log:
    start is num_computed_tokens at admission, end adds the tokens scheduled."""
    sched = ev[ev.kind == S.EV_SCHED].set_index(["step", "request"]).value
    adm = ev[ev.kind == S.EV_ADMIT]
    return [
        (int(s), int(r), int(c0), int(c0) + int(sched[(s, r)]))
        for s, r, c0 in zip(adm.step, adm.request, adm.value, strict=True)
    ]


def test_compat_defect_reproduces_the_zero_token_admissions(blis_steps, compat_run):
    """Rule 5: the 202 admissions of a fully cached 400-token prompt with no tokens."""
    zero = [(s, r) for s, r, a, b in _spans(blis_steps) if a == b]
    ours = [(s, r) for s, r, a, b in _our_spans(compat_run.events(0)) if a == b]
    assert len(zero) == 202 and sorted(ours) == sorted(zero)


def test_compat_without_the_defect_switch_at_256_x_7463():
    """Our fixed variant (a fully cached prompt claims its blocks): figures of
    docs/blis-compat.md's emulation, 173 / 3,508 against BLIS's 175 / 3,711."""
    m = simulate([_compat(*FOCUS, defect=False)], s1_exact()).metrics().iloc[0]
    assert (m.completed, m.preemptions) == (173, 3508)
