"""Multi-turn sessions (issue 17, item 2): each turn's prompt is the history plus
a new message, sent a think time after the previous answer; sharing follows
from the history. Checked from first principles on the generated workload and
on the kernel's per-request times and admission hits."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import run_cli
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.kernel import state as S
from planner.latency.step_time import LinearLatency
from planner.sweep.spec import SpecError, load_spec_text
from planner.workload.arrays import LengthDist, WorkloadError, sessions, synthetic

LAT = LinearLatency(alpha=(200.0, 1.0, 0.0), beta=(4000.0, 15.0, 6.0))
MSG = LengthDist("gaussian", 120, 60, 1, 400)
OUT = LengthDist("gaussian", 80, 40, 1, 300)


def test_a_turn_holds_the_whole_history_plus_a_new_message():
    wl = sessions(5, 4, 2.0, MSG, OUT, arrival="poisson", seed=3)
    first = synthetic(5, 2.0, MSG, OUT, arrival="poisson", seed=3)
    p = wl.prompt_tokens.reshape(5, 4).astype(np.int64)
    o = wl.output_tokens.reshape(5, 4).astype(np.int64)
    assert np.array_equal(p[:, 0], first.prompt_tokens)  # first turns are synthetic's
    assert np.all(p[:, 1:] > p[:, :-1] + o[:, :-1])  # history and at least one new token
    assert np.array_equal(wl.session, np.repeat(np.arange(5), 4))
    assert np.array_equal(wl.arrival_s, np.repeat(first.arrival_s, 4))
    nt = wl.next_turn()
    assert nt.tolist() == [i + 1 if i % 4 < 3 else -1 for i in range(20)]


def _run(turns: int, think: float, blocks: int = 20_000, caching: bool = True, seed: int = 1):
    wl = sessions(8, turns, 1.0, MSG, OUT, arrival="poisson", seed=seed)
    cfg = SchedulerConfig(
        num_gpu_blocks=blocks, max_model_len=16_384, max_num_batched_tokens=1024,
        enable_prefix_caching=caching, think_time_s=think,
    )  # fmt: skip
    per_step = S.max_events_per_step(cfg.max_num_seqs, wl.num_requests)
    return wl, simulate([cfg], wl, LAT, log_entries=200_000 * per_step // 50)


def test_each_turn_is_sent_a_think_time_after_the_previous_answer():
    wl, res = _run(turns=5, think=1.5)
    sent, fin = res.arrival_ns[0], res.state.req.finish_ns[0]
    nt = wl.next_turn()
    has_next = np.flatnonzero(nt >= 0)
    assert np.all(fin >= 0)  # every turn finished
    assert np.array_equal(sent[nt[has_next]], fin[has_next] + 1_500_000_000)
    # TTFT counts from the send: every turn's first token comes after it.
    assert np.all(res.state.req.first_ns[0] > sent)


def test_turn_k_hits_every_full_block_of_turn_k_minus_1():
    """Nothing is evicted on this pool, so turn k's admission finds every full
    block turn k - 1 computed: its prompt and output but the last token (which
    was sampled, never fed back), i.e. floor((p + o - 1) / bs) blocks."""
    wl, res = _run(turns=4, think=0.5)
    ev = res.events(0)
    admits = ev[ev.kind == S.EV_ADMIT].groupby("request")["value"].first()
    bs = 16
    nt = wl.next_turn()
    prev = {int(n): i for i, n in enumerate(nt) if n >= 0}
    assert res.state.out.counters[0, S.O_PREEMPTIONS] == 0
    checked = 0
    for r in range(wl.num_requests):
        if r not in prev:
            assert admits[r] == 0  # a session's first turn finds nothing of its own
            continue
        q = prev[r]
        history = int(wl.prompt_tokens[q]) + int(wl.output_tokens[q])
        assert admits[r] == (history - 1) // bs * bs, r
        checked += 1
    assert checked == 8 * 3


def test_sessions_without_caching_recompute_the_history():
    wl, res = _run(turns=3, think=0.5, caching=False)
    assert res.state.out.counters[0, S.O_PREFILL_TOKENS] == int(wl.prompt_tokens.sum())


def test_a_rejected_turn_ends_its_session():
    """A turn whose prompt reaches max_model_len is refused by the front end; its
    answer never came, so the session's later turns are never sent, and they
    count in no latency."""
    wl = sessions(3, 6, 1.0, MSG, OUT, arrival="constant", seed=0)
    cfg = SchedulerConfig(num_gpu_blocks=5000, max_model_len=700)
    res = simulate([cfg], wl, LAT)
    status = res.state.req.status[0].reshape(3, 6)
    for row in status:
        rejected = np.flatnonzero(row == S.REJECTED)
        assert len(rejected) == 1  # the first too-long turn
        assert np.all(row[rejected[0] + 1 :] == S.FUTURE)  # never sent
        assert np.all(row[: rejected[0]] == S.FINISHED)
    df = res.metrics()
    assert df.loc[0, "unserved"] == 0  # unsent turns are no misses


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--turns", "0"], "--turns"),
        (["--turns", "3", "--max-concurrency", "2"], "--turns"),
        (["--turns", "3", "--prefix-groups", "2", "--prefix-len", "64"], "--turns"),
        (["--think-time", "1"], "--think-time"),
        (["--turns", "2", "--think-time", "-1"], "--think-time"),
    ],
)
def test_bad_session_input_is_one_line(capsys, args, needle):
    code, out, err = run_cli(capsys, "run", "--num-requests", "5", *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err


def test_sessions_reject_a_too_long_history():
    with pytest.raises(WorkloadError, match="--turns"):
        sessions(2, 10_000, 1.0, LengthDist("constant", 10**6, 0, 1, 10**6), OUT)


SPEC = """
name = "sessions"
[workload]
kind = "synthetic"
num_requests = 6
rate = 1
turns = 3
[workload.prompt]
mean = 100
[workload.output]
mean = 40
[scheduler]
enable_prefix_caching = true
{extra}
"""


def test_sessions_in_a_spec(tmp_path):
    sweep = load_spec_text(SPEC.format(extra="[axes]\nthink_time_s = [0.0, 2.0]"), tmp_path)
    (wl,) = sweep.workloads.values()
    assert wl.num_requests == 18 and wl.session is not None
    with pytest.raises(SpecError, match="max_concurrency"):
        load_spec_text(SPEC.format(extra="[axes]\nmax_concurrency = [0, 2]"), tmp_path)
    no_turns = SPEC.replace("turns = 3\n", "")
    with pytest.raises(SpecError, match="think_time_s"):
        load_spec_text(no_turns.format(extra="[axes]\nthink_time_s = [0.0, 2.0]"), tmp_path)
