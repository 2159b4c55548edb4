"""The ``llm_d`` router: llm-d's P/D endpoint picker (prefix-cache-scorer x 2
+ queue-scorer x 1, max-score-picker; ``kernel/routers.py``), checked
against a plain re-statement of its rule and on fleets (its prefix groups: ``test_replicas.py``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planner.api import simulate
from planner.config import SchedulerConfig
from planner.kernel.routers import (
    LLM_D_MAX_PREFIX_BLOCKS,
    LLM_D_PREFIX_WEIGHT,
    LLM_D_QUEUE_WEIGHT,
    llm_d_choice,
)
from planner.workload.arrays import Workload


def _scores(prompt, block, keys_of_r, key_tokens, held, waiting):
    """llm-d's scores, restated: queue-scorer's (max - w) / (max - min)
    (1 when equal) and prefix-cache-scorer's matched blocks / prompt blocks."""
    lo, hi = min(waiting), max(waiting)
    blocks = -(-prompt // block) if prompt >= block else 0  # a partial last block hashes too
    total = min(blocks, LLM_D_MAX_PREFIX_BLOCKS)
    out = []
    for i, w in enumerate(waiting):
        q = 1.0 if hi == lo else (hi - w) / (hi - lo)
        mine = [key_tokens[j] for j in keys_of_r if held[j, i]]
        matched = 0 if not mine else (blocks if max(mine) >= prompt else max(mine) // block)
        p = min(matched, total) / total if total else 0.0
        out.append(LLM_D_PREFIX_WEIGHT * p + LLM_D_QUEUE_WEIGHT * q)
    return np.array(out)


def _choose(prompt, block, key_tokens, held, waiting, rng):
    """``llm_d_choice`` for one request whose keys are all of ``key_tokens``."""
    n_keys = len(key_tokens)
    key_off = np.array([0, n_keys], np.int64)
    keys = np.arange(n_keys, dtype=np.int64)
    return llm_d_choice(
        0, prompt, block, key_off, keys, np.asarray(key_tokens, np.int64),
        held.astype(np.int32), np.asarray(waiting, np.int64), np.uint64(rng),
    )  # fmt: skip


def test_a_case_by_hand():
    """Prompt 64 tokens in 16-token blocks (4 blocks). Replica 0 holds a key
    of 32 tokens: 2 x 2/4 + 0 (longest queue) = 1.0; replica 1, the shortest
    queue: 0 + 1 = 1.0; replica 2: 0 + 0.5. A tie of 0 and 1; a 48-token
    key on replica 0 gives it 1.5 and the request."""
    held = np.zeros((2, 3), np.bool_)
    held[0, 0] = True
    seen = {_choose(64, 16, [32, 48], held, [4, 0, 2], s)[0] for s in range(40)}
    assert seen == {0, 1}
    held[1, 0] = True
    assert {_choose(64, 16, [32, 48], held, [4, 0, 2], s)[0] for s in range(40)} == {0}


def test_the_index_hashes_at_most_256_blocks_and_a_whole_prompt_matches_its_tail():
    """8,192 tokens in 16-token blocks: the index hashes the first 256, so a
    4,096-token prefix scores 2 x 256/256 = 2 and beats an empty queue (1).
    A 50-token prompt sent before whole (4 blocks, the last partial) scores
    2 against the empty queue's 1; its first 16 tokens alone would score
    2 x 1/4 = 0.5."""
    held = np.ones((1, 2), np.bool_)
    held[0, 1] = False
    assert {_choose(8192, 16, [4096], held, [3, 0], s)[0] for s in range(20)} == {0}
    assert {_choose(50, 16, [50], held, [1, 0], s)[0] for s in range(20)} == {0}
    assert {_choose(50, 16, [16], held, [1, 0], s)[0] for s in range(20)} == {1}


def test_the_choice_is_a_highest_score_and_ties_are_all_reachable():
    gen = np.random.default_rng(3)
    for _ in range(300):
        n = int(gen.integers(1, 6))
        n_keys = int(gen.integers(0, 4))
        prompt = int(gen.integers(1, 200))
        block = int(gen.choice([1, 16, 32]))
        key_tokens = sorted(int(x) for x in gen.integers(1, prompt + 1, n_keys))
        held = gen.random((max(n_keys, 1), n)) < 0.4
        waiting = gen.integers(0, 4, n).tolist()
        s = _scores(prompt, block, range(n_keys), key_tokens, held, waiting)
        best = set(np.flatnonzero(s == s.max()).tolist())
        picks = {_choose(prompt, block, key_tokens, held, waiting, seed)[0] for seed in range(60)}
        assert picks == best, (prompt, block, key_tokens, held, waiting, s)


def test_the_seed_decides_ties_and_nothing_else():
    held = np.zeros((1, 4), np.bool_)
    a = [_choose(100, 16, [], held, [0, 0, 0, 0], s)[0] for s in range(50)]
    b = [_choose(100, 16, [], held, [0, 0, 0, 0], s)[0] for s in range(50)]
    assert a == b and len(set(a)) == 4


def test_the_queue_scorer_keeps_up_where_random_does_not():
    """Long and short requests alternate at a rate two replicas serve only
    when balanced: with no prefixes llm_d is a random pick among the
    replicas of the shortest waiting queue, which keeps up where the
    random router (the same seed and stream) falls behind."""
    r = 400
    i = np.arange(r)
    wl = Workload(
        i * 0.05,
        np.where(i % 2 == 0, 2000, 100).astype(np.int32),
        np.where(i % 2 == 0, 400, 10).astype(np.int32),
    )
    base = SchedulerConfig(num_gpu_blocks=2000, max_num_seqs=32, replicas=2)
    rand = simulate([replace(base, router="random")], wl).metrics().iloc[0]
    m = simulate([replace(base, router="llm_d")], wl).metrics().iloc[0]
    assert rand["overloaded"] and not m["overloaded"]
    assert m["ttft_s_p99"] < rand["ttft_s_p99"] / 2


@pytest.mark.parametrize("seed", [0, 1])
def test_llm_d_follows_its_seed(seed):
    r = 200
    wl = Workload(np.arange(r) * 0.5, np.full(r, 100, np.int32), np.full(r, 5, np.int32))
    cfg = SchedulerConfig(num_gpu_blocks=600, replicas=4, router="llm_d", router_seed=seed)
    a = simulate([cfg], wl).replica_metrics()["requests_sent"].tolist()
    b = simulate([cfg], wl).replica_metrics()["requests_sent"].tolist()
    c = simulate([replace(cfg, router_seed=seed + 7)], wl).replica_metrics()["requests_sent"]
    assert a == b and a != c.tolist()
