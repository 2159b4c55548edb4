"""Prefix caching and shared-prefix workloads: hand-worked cases, options, errors.

(Step-exact agreement with vLLM is tests/test_conformance.py; kernel ==
reference on random cases is tests/test_crosscheck.py.)
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from helpers import STEP_LATENCY, run_cli
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.kernel import state as S
from planner.workload.arrays import (
    LengthDist,
    Workload,
    WorkloadError,
    synthetic,
    with_shared_prefixes,
)


def _admissions(res) -> list[tuple[int, int]]:
    ev = res.events()
    adm = ev[ev.kind == S.EV_ADMIT]
    return list(zip(adm.request.tolist(), adm.value.tolist(), strict=True))


def _sequential(prompt: int, prefix: int, n: int = 4) -> Workload:
    """n requests of one group, each arriving after the previous one finished."""
    return Workload(
        np.arange(n) * 1e-3,  # 1,000 steps apart at 1 us per step
        np.full(n, prompt, np.int32),
        np.full(n, 5, np.int32),
        name="seq",
        prefix_group=np.zeros(n, np.int32),
        prefix_len=np.full(n, prefix, np.int32),
    )


@pytest.mark.parametrize("prompt,prefix,hit", [(100, 64, 64), (100, 70, 64), (64, 64, 48)])
def test_later_requests_hit_the_shared_prefix(prompt, prefix, hit):
    # Full blocks of the shared prefix are hit; a hit never covers the whole
    # prompt (at most num_tokens - 1 tokens: 64 tokens of prompt -> 48).
    cfg = SchedulerConfig(num_gpu_blocks=100, block_size=16, max_model_len=512)
    on = simulate(
        [SchedulerConfig(**{**cfg.as_dict(), "enable_prefix_caching": True})],
        _sequential(prompt, prefix),
        STEP_LATENCY,
        log_entries=10_000,
    )
    off = simulate([cfg], _sequential(prompt, prefix), STEP_LATENCY, log_entries=10_000)
    assert _admissions(on) == [(0, 0), (1, hit), (2, hit), (3, hit)]
    assert _admissions(off) == [(i, 0) for i in range(4)]
    m_on, m_off = on.metrics().iloc[0], off.metrics().iloc[0]
    assert m_off.prefill_tokens - m_on.prefill_tokens == 3 * hit
    assert m_on.completed == m_off.completed == 4


def test_no_sharing_across_groups():
    wl = _sequential(100, 64)
    wl = Workload(
        wl.arrival_s,
        wl.prompt_tokens,
        wl.output_tokens,
        prefix_group=np.array([0, 1, 0, 1], np.int32),
        prefix_len=wl.prefix_len,
    )
    cfg = SchedulerConfig(num_gpu_blocks=100, max_model_len=512, enable_prefix_caching=True)
    res = simulate([cfg], wl, STEP_LATENCY, log_entries=10_000)
    assert _admissions(res) == [(0, 0), (1, 0), (2, 64), (3, 64)]


def test_eviction_takes_the_prefix_tail_first():
    # 12 usable blocks (1..12). Request 0 holds 1..5 (prefix blocks j0..j3 in
    # 1..4, its last partial block 5) and frees tail first: the unhashed 5 to
    # the front, the hashed j3, j2, j1, j0 to the back: [5, 6..12, 4, 3, 2, 1].
    # Request 1 (170 tokens, 11 blocks) pops 5, 6..12, 4, 3, 2, evicting j3..j1;
    # j0 survives, so request 2 of group 0 hits 16 tokens, not 48.
    wl = Workload(
        np.array([0, 1e-3, 2e-3]),
        np.array([64, 170, 64], np.int32),
        np.array([2, 2, 2], np.int32),
        prefix_group=np.array([0, 1, 0], np.int32),
        prefix_len=np.array([64, 0, 64], np.int32),
    )
    cfg = SchedulerConfig(
        num_gpu_blocks=13, max_model_len=512, enable_prefix_caching=True, max_num_batched_tokens=512
    )
    res = simulate([cfg], wl, STEP_LATENCY, log_entries=10_000)
    assert _admissions(res) == [(0, 0), (1, 0), (2, 16)]
    roomy = SchedulerConfig(**{**cfg.as_dict(), "num_gpu_blocks": 40})
    assert _admissions(simulate([roomy], wl, STEP_LATENCY, log_entries=10_000))[2] == (2, 48)


def test_with_shared_prefixes():
    d = LengthDist("constant", 100)
    base = synthetic(400, 5.0, d, d, seed=3)
    assert with_shared_prefixes(base, 0, 0, 0.0) is base
    wl = with_shared_prefixes(base, 4, 64, 0.5, seed=3)
    for a in ("arrival_s", "prompt_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(wl, a), getattr(base, a))
    member = wl.prefix_group >= 0
    assert 0.4 < member.mean() < 0.6
    assert set(wl.prefix_group[member].tolist()) == {0, 1, 2, 3}
    again = with_shared_prefixes(base, 4, 64, 0.5, seed=3)
    np.testing.assert_array_equal(wl.prefix_group, again.prefix_group)
    assert wl.fingerprint() != base.fingerprint()
    for bad in ((-1, 64, 0.5), (4, -1, 0.5), (4, 64, 1.5), (4, 2**31, 0.5), (0, 64, 0.5)):
        with pytest.raises(WorkloadError):
            with_shared_prefixes(base, *bad)


def test_caching_needs_recompute_preemption():
    with pytest.raises(ValueError, match="--enable-prefix-caching"):
        SchedulerConfig(enable_prefix_caching=True, preemption_mode="restart")
    with pytest.raises(ValueError, match="--async-scheduling"):
        SchedulerConfig(async_scheduling=True, preemption_mode="swap")


def test_cli_prefix_options(capsys):
    args = ["run", "--num-requests", "40", "--rate", "20", "--num-gpu-blocks", "3000"]
    args += ["--prompt-tokens", "300", "--output-tokens", "50", "--output-tokens-min", "10"]
    args += ["--output-tokens-max", "90", "--json"]
    code, off, _ = run_cli(capsys, *args)
    assert code == 0
    shared = ["--prefix-groups", "2", "--prefix-len", "256", "--prefix-share", "1"]
    code, on, _ = run_cli(capsys, *args, "--enable-prefix-caching", *shared)
    assert code == 0
    off_row, on_row = pd.Series(json.loads(off)), pd.Series(json.loads(on))
    assert on_row.completed == off_row.completed == 40
    assert on_row.prefill_tokens < off_row.prefill_tokens
    code, _, err = run_cli(
        capsys, *args, "--prefix-groups", "2", "--prefix-len", "9", "--prefix-share", "2"
    )
    assert code == 2 and "--prefix-share" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, *args, "--enable-prefix-caching", "--preemption-mode", "restart")
    assert code == 2 and "--enable-prefix-caching" in err and len(err.strip().splitlines()) == 1


def test_hash_table_matches_a_dict():
    # The kernel's open-addressing map (linear probing, backward-shift
    # deletion) against a Python dict, under random inserts and deletes in a
    # small table so probe runs wrap around and collide.
    from planner.kernel import prefix_cache as PC

    # Half the rounds draw runs of consecutive keys far apart, as a request's
    # blocks are keyed (``PC._home`` places runs of 8 side by side).
    rng = np.random.default_rng(5)
    for round_ in range(40):
        tkey = np.full(16, -1, np.int64)
        thead = np.full(16, -1, np.int32)
        ttail = np.full(16, -1, np.int32)
        model: dict[int, int] = {}
        for step in range(400):
            if round_ % 2:
                k = int(rng.integers(0, 4)) * 100_003 + int(rng.integers(0, 20))
            else:
                k = int(rng.integers(0, 40))
            i = PC.find(k, tkey)
            assert (i >= 0) == (k in model)
            if i >= 0:
                assert thead[i] == model[k]
                if rng.random() < 0.6:
                    PC._delete(i, tkey, thead, ttail)
                    del model[k]
            elif len(model) < 12:
                PC._put(k, step, tkey, thead, ttail)
                model[k] = step
        for k, v in model.items():
            assert thead[PC.find(k, tkey)] == v


def test_safe_limit_counts_shared_prefix_blocks_once(capsys):
    args = ["safe-limit", "--num-gpu-blocks", "3000", "--num-requests", "120", "--rate", "20"]
    args += ["--prompt-tokens", "800", "--prompt-tokens-stdev", "200", "--prompt-tokens-min", "600"]
    args += ["--prompt-tokens-max", "1000", "--output-tokens", "300", "--output-tokens-stdev"]
    args += ["100", "--output-tokens-min", "100", "--output-tokens-max", "500"]
    args += ["--horizon", "30", "--json"]
    code, plain, _ = run_cli(capsys, *args)
    assert code == 0
    shared = ["--prefix-groups", "2", "--prefix-len", "512", "--prefix-share", "1"]
    code, cached, _ = run_cli(capsys, *args, "--enable-prefix-caching", *shared)
    assert code == 0
    plain, cached = json.loads(plain), json.loads(cached)
    assert cached["analytic"] == plain["analytic"]  # the closed form assumes no sharing
    assert cached["simulated"] > plain["simulated"]


def test_decode_fast_path_runs_while_a_head_waits_whose_prefix_is_not_cached():
    """A waiting head whose shared-prefix blocks are not cached cannot lower its
    need by hits, so the decode fast path may still jump (``_decode_run_length``
    bounds the head's hits by its lookup's in-use blocks): with caching it
    covers as many steps as without. Each request is its own prefix group, so
    nothing is ever hit; a bound counting every shareable block made the fast
    path decline whenever a head waited (832 of 5,294 steps against 5,221)."""
    wl = synthetic(
        40, 1e6, LengthDist("constant", 1500), LengthDist("constant", 400), "poisson", seed=3
    )
    wl = with_shared_prefixes(wl, groups=40, prefix_len=1024, share=1.0, seed=3)
    runs = []
    for caching in (False, True):
        cfg = SchedulerConfig(
            num_gpu_blocks=400, max_num_seqs=16, max_model_len=4096, enable_prefix_caching=caching
        )
        runs.append(simulate([cfg], wl, STEP_LATENCY).state.out.counters[0])
    plain, cached = runs
    assert (
        cached[S.O_STEPS] == plain[S.O_STEPS] and cached[S.O_FINISHED] == plain[S.O_FINISHED] == 40
    )
    assert plain[S.O_MACRO_STEPS] > 0.9 * plain[S.O_STEPS]
    assert cached[S.O_MACRO_STEPS] >= 0.99 * plain[S.O_MACRO_STEPS]


@pytest.mark.slow
def test_free_queue_ring_keeps_vllms_order():
    # The free queue (a ring with gaps, ``PC.fq``) against a Python list
    # standing for vLLM's linked list, under random takings, hits on free
    # blocks and frees; 11 blocks in a ring of 32 slots, so hits leave enough
    # gaps for ``_fq_compact`` to run many times.
    from numba import njit

    from planner.kernel import prefix_cache as PC

    @njit
    def take(p, s, n):
        PC.get_new_blocks(n, s, 0, p)

    @njit
    def hit(p, s, b):
        p.hits[0] = b
        PC.touch(1, s, p)

    @njit
    def free(p, s, n):
        return PC.free_blocks(s, n, p, False)

    @njit
    def queue(p):
        mask = p.fq.shape[0] - 1
        out = [np.int32(0) for _ in range(0)]
        for c in range(p.pc[PC.FQ_HEAD], p.pc[PC.FQ_TAIL]):
            if p.fq[c & mask] >= 0:
                out.append(p.fq[c & mask])
        return np.array(out, dtype=np.int64)

    n_blocks, n_slots, maxb = 12, 6, 12
    i32, i64 = PC.cache_entries(n_blocks, n_slots, maxb, 1)
    a32, a64 = np.zeros(i32, np.int32), np.zeros(i64, np.int64)
    p = PC.new_cache(n_blocks, True, n_slots, maxb, 1, a32, a64, 1, 0, 0, 0)
    model = list(range(1, n_blocks))
    rows: dict[int, list[int]] = {}
    rng = np.random.default_rng(11)
    compactions = 0
    for _ in range(3000):
        idle = [s for s in range(n_slots) if s not in rows]
        op = rng.choice(3, p=[0.1, 0.45, 0.45])  # few takings: gaps pile up
        if op == 0 and idle and model:
            s, n = idle[0], int(rng.integers(1, len(model) + 1))
            take(p, s, n)
            rows[s], model = model[:n], model[n:]
        elif op == 1 and idle and model:
            s, b = idle[0], model[int(rng.integers(0, len(model)))]
            hit(p, s, b)
            rows[s] = [b]
            model.remove(b)
        elif rows:
            s = list(rows)[int(rng.integers(0, len(rows)))]
            held = rows.pop(s)
            for b in held:  # about half are hashed: those go to the back
                p.hkey[b] = PC.pending(7) if rng.random() < 0.5 else -1
            p.table[s, : len(held)] = held
            gaps = p.pc[PC.FQ_TAIL] - p.pc[PC.FQ_HEAD] - p.pc[PC.FREE_LEN]
            free(p, s, len(held))
            # only a compaction lowers the gaps while blocks join
            compactions += p.pc[PC.FQ_TAIL] - p.pc[PC.FQ_HEAD] - p.pc[PC.FREE_LEN] < gaps
            gone = held[::-1]  # tail first
            hashed = [b for b in gone if p.hkey[b] != -1]
            model = [b for b in gone if b not in hashed] + model + hashed
        assert list(queue(p)) == model
        assert p.pc[PC.FREE_LEN] == len(model)
    assert compactions >= 5
