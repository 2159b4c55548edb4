"""Block-hash traces (issue 17 items 1 and 4): the Mooncake trace, block
identities from hash ids, and the prefix-cache hit rate against the ideal."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from helpers import STEP_LATENCY, run_cli
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.workload.arrays import Workload, WorkloadError
from planner.workload.block_hashes import chain_ids, ideal_hits, private_singletons
from planner.workload.traces import MOONCAKE_CONV, TraceOptions, load_trace, read_trace

MOONCAKE = str(MOONCAKE_CONV)


def _lists(wl: Workload) -> list[list[int]]:
    off = wl.hash_offsets
    return [wl.hash_ids[off[i] : off[i + 1]].tolist() for i in range(wl.num_requests)]


def test_mooncake_trace_ships_and_its_ids_are_prefix_chained():
    raw = [json.loads(line) for line in MOONCAKE_CONV.read_text().splitlines()]
    assert len(raw) == 12_031
    assert (MOONCAKE_CONV.parent / "LICENSE-APACHE").exists()
    wl = read_trace(MOONCAKE_CONV, "mooncake")
    assert wl.num_requests == 12_031 and wl.hash_block_size == 512
    assert wl.arrival_s[-1] == pytest.approx(raw[-1]["timestamp"] / 1000)
    assert _lists(wl)[7] == raw[7]["hash_ids"]
    # Each id occurs at one position after one parent id, so an id names its
    # whole prefix (vLLM's chained block hash): equal ids mean equal prefixes.
    seen: dict[int, tuple[int, int]] = {}
    for ids in _lists(wl):
        for t, h in enumerate(ids):
            assert seen.setdefault(h, (t, ids[t - 1] if t else -1)) == (t, ids[t - 1] if t else -1)
    assert load_trace(MOONCAKE_CONV).workload.hash_block_size == 512  # auto-detected


def _independent_ideal(wl: Workload, bs: int) -> tuple[int, int]:
    """Unbounded cache, one request at a time, from the raw ids: a full vLLM
    block of r hits when every trace block up to and including its own is full
    in r and was full, with the same ids, in an earlier request; at most
    prompt - 1 tokens, whole blocks."""
    hb = wl.hash_block_size
    cached: set[tuple[int, ...]] = set()
    hits = queries = 0
    for ids, p in zip(_lists(wl), wl.prompt_tokens.tolist(), strict=True):
        n = 0
        for j in range((p - 1) // bs):
            t = j * bs // hb
            if (t + 1) * hb > p or tuple(ids[: t + 1]) not in cached:
                break
            n += 1
        hits += n * bs
        queries += p
        cached.update(tuple(ids[: t + 1]) for t in range(p // hb))
    return hits, queries


@pytest.mark.parametrize("block_size", [16, 128])
def test_one_at_a_time_on_an_unbounded_pool_hits_the_ideal(block_size):
    # 150 Mooncake requests, each arriving 10 s after the previous one (they
    # take < 0.1 s at 1 us per step), on a pool that holds them all at once.
    wl = read_trace(MOONCAKE_CONV, "mooncake", TraceOptions(max_requests=150))
    wl = replace(wl, arrival_s=np.arange(wl.num_requests) * 10.0)
    blocks = int((-(-(wl.prompt_tokens + wl.output_tokens.astype(np.int64)) // block_size)).sum())
    cfg = SchedulerConfig(
        num_gpu_blocks=blocks + 2,
        block_size=block_size,
        max_model_len=200_000,
        max_num_batched_tokens=8192,
        enable_prefix_caching=True,
    )
    row = simulate([cfg], wl, STEP_LATENCY).metrics().iloc[0]
    hits, queries = _independent_ideal(wl, block_size)
    assert hits > 0 and row.completed == wl.num_requests and row.preemptions == 0
    assert (row.prefix_cache_hits, row.prefix_cache_queries) == (hits, queries)
    assert row.prefix_cache_hit_rate == pytest.approx(hits / queries, rel=0, abs=0)
    assert row.prefix_cache_preempted_queries == 0
    assert ideal_hits(wl, block_size) == ideal_hits(wl, block_size)  # deterministic
    assert (ideal_hits(wl, block_size).hits, ideal_hits(wl, block_size).queries) == (hits, queries)
    assert row.ideal_prefix_cache_hit_rate == pytest.approx(hits / queries)
    off = simulate([replace(cfg, enable_prefix_caching=False)], wl, STEP_LATENCY).metrics()
    assert off.prefix_cache_queries.iloc[0] == 0 and np.isnan(off.prefix_cache_hit_rate.iloc[0])
    assert off.prefill_tokens.iloc[0] - row.prefill_tokens == hits


def _three_requests(ids: list[int]) -> Workload:
    """Three requests of 20 prompt tokens (two 8-token trace blocks and a
    partial one) and 2 output tokens, with these 9 trace ids."""
    return Workload(
        np.array([0.0, 1.0, 2.0]),
        np.array([20, 20, 20], np.int32),
        np.array([2, 2, 2], np.int32),
        hash_ids=np.array(ids, np.int64),
        hash_offsets=np.array([0, 3, 6, 9], np.int64),
        hash_block_size=8,
    )


def test_blocks_share_exactly_where_prefixes_do():
    # Three requests of 2 trace blocks (8 tokens each) + 4 tokens: r1 shares
    # r0's first trace block only, r2 shares both; partial blocks never.
    wl = _three_requests([1, 2, 3, 1, 9, 4, 1, 2, 3])
    cfg = SchedulerConfig(num_gpu_blocks=100, block_size=4, max_model_len=64)
    res = simulate([replace(cfg, enable_prefix_caching=True)], wl, STEP_LATENCY)
    row = res.metrics().iloc[0]
    assert (row.prefix_cache_hits, row.prefix_cache_queries) == (8 + 16, 60)
    with pytest.raises(WorkloadError, match="does not divide"):
        simulate([replace(cfg, block_size=16, enable_prefix_caching=True)], wl, STEP_LATENCY)


def _write(tmp_path, name: str, text: str):
    f = tmp_path / name
    f.write_text(text)
    return str(f)


def test_bad_hash_input_is_one_line_exit_2(capsys, tmp_path):
    rows = [
        {"arrival_time_s": 0, "prompt_tokens": 20, "output_tokens": 3, "hash_ids": [1, 2, 3]},
        {"arrival_time_s": 1, "prompt_tokens": 20, "output_tokens": 3, "hash_ids": [1, "x", 5]},
    ]
    bad = _write(tmp_path, "bad.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    rows[1]["hash_ids"] = [1, 2.5, 5]
    frac = _write(tmp_path, "frac.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    rows[1]["hash_ids"] = "1 2 5 ]]]"  # text must be a whole list (tryout finding)
    junk = _write(tmp_path, "junk.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    rows[1]["hash_ids"] = "1,,5"
    gap = _write(tmp_path, "gap.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    rows[1]["hash_ids"] = [1, 2, 5]
    good = _write(tmp_path, "good.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    base = ["run", "--num-gpu-blocks", "200", "--enable-prefix-caching", "--trace-file"]
    cases = [
        ([bad, "--trace-hash-block-size", "8", "--block-size", "4"], "row 2: bad hash_ids"),
        ([frac, "--trace-hash-block-size", "8", "--block-size", "4"], "row 2: bad hash_ids"),
        ([junk, "--trace-hash-block-size", "8", "--block-size", "4"], "row 2: bad hash_ids"),
        ([gap, "--trace-hash-block-size", "8", "--block-size", "4"], "row 2: bad hash_ids"),
        ([good], "needs --trace-hash-block-size"),
        ([good, "--trace-hash-block-size", "4"], "hash ids for 20 prompt tokens"),
        ([good, "--trace-hash-block-size", "8", "--block-size", "16"], "does not divide"),
        ([MOONCAKE, "--max-requests", "5", "--block-size", "48"], "does not divide"),
        ([MOONCAKE, "--trace-hash-block-size", "256"], "mooncake format's hash blocks"),
    ]
    for extra, msg in cases:
        code, _, err = run_cli(capsys, *base, *extra)
        assert code == 2 and msg in err and len(err.strip().splitlines()) == 1, (extra, err)
    args = [good, "--trace-hash-block-size", "8", "--block-size", "4", "--json"]
    code, out, err = run_cli(capsys, *base, *args)
    assert code == 0, err
    assert json.loads(out)["prefix_cache_hits"] == 16  # r1 hits r0's two full trace blocks


RUN = ["run", "--trace-file", MOONCAKE, "--trace-format", "mooncake", "--max-requests", "120"]
RUN += ["--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "131072", "--json"]


def test_mooncake_runs_end_to_end_with_caching_on_and_off(capsys):
    code, on, err = run_cli(capsys, *RUN, "--enable-prefix-caching")
    assert code == 0, err
    code, off, err2 = run_cli(capsys, *RUN, "--no-enable-prefix-caching")  # vLLM's default: on
    assert code == 0, err2
    assert "hash ids change nothing" in err2 or "change nothing without prefix caching" in err2
    on, off = json.loads(on), json.loads(off)
    assert on["completed"] == off["completed"] == 120
    assert 0 < on["prefix_cache_hit_rate"] <= on["ideal_prefix_cache_hit_rate"]
    assert off["prefix_cache_queries"] == 0 and on["prefill_tokens"] < off["prefill_tokens"]


def test_mooncake_sweep_with_caching_on_and_off(capsys, tmp_path):
    spec = tmp_path / "m.toml"
    spec.write_text(
        f"""name = "mooncake"
horizon_s = 600
[workload]
kind = "trace"
path = "{MOONCAKE}"
format = "mooncake"
max_requests = 120
[hardware]
model = "llama-3.1-8b"
gpu = "H100"
[scheduler]
max_model_len = 131072
[axes]
enable_prefix_caching = [false, true]
gpu_memory_utilization = [0.5, 0.9]
"""
    )
    out = tmp_path / "res"
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(out))
    assert code == 0, err
    df = pd.read_parquet(out / "data.parquet")
    assert len(df) == 4
    on, off = df[df.enable_prefix_caching], df[~df.enable_prefix_caching]
    assert (on.prefix_cache_hit_rate > 0).all() and off.prefix_cache_hit_rate.isna().all()
    assert (on.ideal_prefix_cache_hit_rate >= on.prefix_cache_hit_rate).all()
    spec.write_text(spec.read_text().replace("[axes]", "block_size = 48\n[axes]"))
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "bad"))
    assert code == 2 and "does not divide" in err and len(err.strip().splitlines()) == 1, err


def _hashed_case(rng: np.random.Generator):
    """A few requests whose trace blocks (hb tokens) branch from a small tree of
    ids, so prefixes are shared at every depth, and four caching configs."""
    r = int(rng.integers(2, 9))
    hb = int(rng.choice([4, 16, 32]))
    prompt = rng.integers(1, 200, r).astype(np.int32)
    ids, off = [], [0]
    for p in prompt.tolist():
        n = -(-p // hb)
        ids += [int(x) for x in rng.integers(0, 2, n)]  # few choices: many shared prefixes
        off.append(len(ids))
    wl = Workload(
        np.cumsum(rng.uniform(0, 2e-4, r)),  # 0..200 steps apart
        prompt,
        rng.integers(1, 100, r).astype(np.int32),
        name="hashed",
        hash_ids=np.array(ids, np.int64),
        hash_offsets=np.array(off, np.int64),
        hash_block_size=hb,
    )
    cfgs = [
        SchedulerConfig(
            num_gpu_blocks=int(rng.integers(8, 80)),
            block_size=int(rng.choice([b for b in (1, 2, 4, 16) if hb % b == 0])),
            max_num_seqs=int(rng.integers(1, 8)),
            max_num_batched_tokens=int(rng.integers(8, 400)),
            max_model_len=int(rng.integers(64, 400)),
            scheduler_reserve_full_isl=bool(rng.random() < 0.7),
            async_scheduling=bool(rng.random() < 0.5),
            enable_prefix_caching=True,
            policy=str(rng.choice(["fcfs", "priority"])),
            max_steps=3000,
        )
        for _ in range(4)
    ]
    return cfgs, wl


@pytest.mark.slow
def test_kernel_matches_reference_on_hashed_workloads():
    from helpers import (
        compare_final,
        kernel_events,
        kernel_trace_rows,
        reference_events,
        reference_trace_rows,
        run_both,
    )

    rng = np.random.default_rng(17)
    hit = preempted_hit = 0
    for _ in range(100):
        cfgs, wl = _hashed_case(rng)
        traced, fast, engines = run_both(cfgs, wl, STEP_LATENCY)
        for c, eng in enumerate(engines):
            assert kernel_trace_rows(traced, c) == reference_trace_rows(eng)
            assert kernel_events(traced, c) == reference_events(eng)
            compare_final(traced, c, eng)  # prefix-cache stats included
            compare_final(fast, c, eng)
            hit += eng.sched.cache_stats[1] > 0
            preempted_hit += eng.sched.cache_stats_preempted[1] > 0
    assert hit >= 80 and preempted_hit >= 5, (hit, preempted_hit)


def test_ids_no_other_request_carries_become_private():
    # r0 and r1 share their first trace block only; r2 shares nothing; -1 (a
    # partial block) stays -1. A block after a singleton is a singleton too.
    wl = _three_requests([1, 2, 3, 1, 9, 4, 5, 6, 7])
    chained = chain_ids(wl)
    out = private_singletons(chained)
    assert chained.tolist() == [0, 1, -1, 0, 2, -1, 3, 4, -1]
    assert out.tolist() == [0, -1, -1, 0, -1, -1, -1, -1, -1]
    assert chained.tolist() == [0, 1, -1, 0, 2, -1, 3, 4, -1]  # the input is not changed
    assert private_singletons(np.full(3, -1, np.int64)).tolist() == [-1, -1, -1]


def _chained_by_dict(wl: Workload) -> list[int]:
    """``chain_ids`` restated plainly: one id per distinct (parent id, raw id)
    pair, in order of first occurrence; -1 for a partial trace block."""
    dense: dict[tuple[int, int], int] = {}
    out = [-1] * len(wl.hash_ids)
    for r, (ids, p) in enumerate(zip(_lists(wl), wl.prompt_tokens.tolist(), strict=True)):
        parent = -1
        for t in range(p // wl.hash_block_size):
            parent = dense.setdefault((parent, ids[t]), len(dense))
            out[int(wl.hash_offsets[r]) + t] = parent
    return out


def test_chain_ids_match_a_plain_restatement():
    # The vectorized chaining against a dict, on the Mooncake trace's first
    # 600 s and on random traces whose ids repeat at different depths and
    # under different parents (so only whole prefixes may share an id).
    wl = read_trace(MOONCAKE_CONV, "mooncake", TraceOptions(duration_s=600.0))
    assert chain_ids(wl).tolist() == _chained_by_dict(wl)
    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(1, 30))
        prompt = rng.integers(1, 49, n)  # some end in a partial trace block
        counts = -(-prompt // 8)
        wl = Workload(
            np.arange(n, dtype=np.float64),
            prompt.astype(np.int32),
            np.ones(n, np.int32),
            hash_ids=rng.integers(0, 3, counts.sum()).astype(np.int64),
            hash_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            hash_block_size=8,
        )
        assert chain_ids(wl).tolist() == _chained_by_dict(wl)


def test_runs_that_read_no_block_hashes_skip_the_chaining(monkeypatch):
    # Only prefix caching and the prefix_affinity router read the chained ids;
    # a plain run gets the "no hash ids" fields and the same results.
    import planner.api as api

    wl = _three_requests([1, 2, 3, 1, 9, 4, 1, 2, 3])
    plain = SchedulerConfig(num_gpu_blocks=100, block_size=4, max_model_len=64)
    _, key, hb = api.hash_arrays(wl, [plain])
    assert hb.tolist() == [0] and len(key) == 0
    readers = (replace(plain, enable_prefix_caching=True), replace(plain, router="prefix_affinity"))
    for on in readers:
        assert api.hash_arrays(wl, [plain, on])[2].tolist() == [8]
    before = simulate([plain], wl, STEP_LATENCY).metrics()
    monkeypatch.setattr(api, "chain_ids", lambda _: pytest.fail("chained a plain run's ids"))
    assert simulate([plain], wl, STEP_LATENCY).metrics().equals(before)


@pytest.mark.slow
def test_a_block_size_refusal_on_a_cold_cache_is_one_line(tmp_path):
    """On a first run the refusal comes before the compile notice, so stderr is
    the one error line (fresh-clone finding)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    args = ["run", "--trace-file", MOONCAKE, "--max-requests", "5", "--block-size", "48"]
    proc = subprocess.run(
        [sys.executable, "-m", "planner.cli", *args, "--enable-prefix-caching"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "plan: error: --block-size 48 does not divide the trace's hash block size 512: "
        "a vLLM block would span two trace blocks"
    ]


def test_spec_errors_name_spec_fields(tmp_path):
    """A spec's workload error names its own field, not the CLI flag (tryout
    finding: 'workload: --trace-hash-block-size has no effect')."""
    from planner.sweep.spec import SpecError, load_spec

    trace = Path(__file__).parents[1] / "planner" / "data" / "s1_seed7.csv"
    path = tmp_path / "hb.toml"
    path.write_text(
        f'name = "hb"\n[workload]\nkind = "trace"\npath = "{trace}"\nhash_block_size = 16\n'
        "[axes]\nmax_num_seqs = [8]\n"
    )
    with pytest.raises(SpecError, match=r"workload: workload.hash_block_size has no effect"):
        load_spec(path)
