"""Step-exact conformance with the real vLLM 0.33 scheduler.

Each file in tests/golden was recorded from vLLM (tools/record_vllm_traces.py);
the kernel and the reference engine must reproduce it step for step: tokens
scheduled per request and their order, admissions (new or resumed, with the
computed tokens they start from), preemptions, finishes, and the running,
waiting and free-block counts after scheduling. Time-mode scenarios compare
end-to-end results per request (first token, finish, outputs, preemptions).
"""

from __future__ import annotations

import pytest
from conformance import (
    first_difference,
    golden_names,
    golden_steps,
    kernel_steps,
    load,
    reference_steps,
    scenario,
)

NAMES = golden_names()
ENGINES = {"kernel": kernel_steps, "reference": reference_steps}


@pytest.mark.slow
def test_golden_scenarios_cover_the_issue():
    assert len(NAMES) >= 30
    golds = [load(n) for n in NAMES]
    assert all(g["vllm"] == "0.33.0" for g in golds)
    scns = [g["scenario"] for g in golds]
    for flag in ("enable_prefix_caching", "async_scheduling", "scheduler_reserve_full_isl"):
        assert {s[flag] for s in scns} == {True, False}, flag
    assert {s["policy"] for s in scns} == {"fcfs", "priority"}
    assert {s["mode"] for s in scns} == {"steps", "time"}
    assert any(r.get("prefix_group", -1) >= 0 for s in scns for r in s["requests"])
    # Prefix-cache hits happened, with caching and async together among them.
    hits = {
        n
        for n, g in zip(NAMES, golds, strict=True)
        for s in g.get("steps", ())
        for _, c in s["new"] + s["resumed"]
        if c > 0
    }
    assert any(scenario(n)["async_scheduling"] for n in hits)


@pytest.mark.slow
def test_golden_sliding_window_scenarios_cover_the_issue():
    """Sliding-window goldens: sync and async, step and time mode, windows on
    and off a block boundary, the gate on and off, preemption under pressure,
    and chunked prefill whose chunks pass the window (blocks freed before the
    request's prefill ends)."""
    golds = [g for g in (load(n) for n in NAMES) if g["scenario"].get("sliding_window", 0)]
    assert len(golds) >= 15
    scns = [g["scenario"] for g in golds]
    assert {s["async_scheduling"] for s in scns} == {True, False}
    assert {s["mode"] for s in scns} == {"steps", "time"}
    assert {s["scheduler_reserve_full_isl"] for s in scns} == {True, False}
    assert {s["sliding_window"] % s["block_size"] == 0 for s in scns} == {True, False}
    preempting = [g for g in golds if sum(r["num_preemptions"] for r in g["requests"])]
    assert {g["scenario"]["async_scheduling"] for g in preempting} == {True, False}
    assert any(
        s["max_num_batched_tokens"] < r["prompt_len"] and s["sliding_window"] < r["prompt_len"]
        for s in scns
        for r in s["requests"]
    )
    # Hybrids: full-attention and sliding-window KV cache groups in one pool,
    # sync and async, with preemption.
    hybrid = [g for g in golds if g["scenario"].get("full_attention_groups", 0) > 0]
    assert len(hybrid) >= 10
    assert {g["scenario"]["sliding_window_groups"] for g in hybrid} >= {1, 5}
    assert {g["scenario"]["async_scheduling"] for g in hybrid} == {True, False}
    assert any(sum(r["num_preemptions"] for r in g["requests"]) for g in hybrid)


@pytest.mark.slow
def test_golden_mamba_scenarios_cover_the_issue():
    """Mamba-hybrid goldens (prefix caching off, ``mamba_cache_mode`` "none"):
    Qwen3.5's 3 groups and Nemotron-H's 6 beside a full-attention group, sync
    and async, the gate on and off, step and time mode, chunked prefill,
    preemption under pressure in both scheduling modes, and the Mamba blocks
    visible in the free counts (a request holds one per group)."""
    golds = [g for g in (load(n) for n in NAMES) if g["scenario"].get("mamba_groups", 0)]
    assert len(golds) >= 15
    scns = [g["scenario"] for g in golds]
    assert not any(s["enable_prefix_caching"] for s in scns)
    assert {s["mamba_groups"] for s in scns} >= {1, 3, 6}
    assert {s["async_scheduling"] for s in scns} == {True, False}
    assert {s["scheduler_reserve_full_isl"] for s in scns} == {True, False}
    assert {s["mode"] for s in scns} == {"steps", "time"}
    preempting = [g for g in golds if sum(r["num_preemptions"] for r in g["requests"])]
    assert {g["scenario"]["async_scheduling"] for g in preempting} == {True, False}
    first = load("mamba_s2_3x1")["steps"][0]  # 7 prompts of 300 tokens, block 16, 3 groups
    held = [n for _, n in first["sched"]]
    assert first["free"] == 400 - 1 - sum(-(-n // 16) + 3 for n in held)


# The fast subset (-m "not slow") keeps the kernel on the short goldens; the
# reference engine and the long S1-length traces run in the full suite.
LONG = ("s1_exact", "swa_s1_time", "hyb_s1_time", "mamba_s1_time")
# The plain-Python reference engine takes 7-19 s on each long golden. It runs on
# one long golden per attention kind (full, sliding window, hybrid); on the
# other long ones (S1 at max_num_seqs 256, with async and caching; the windowed
# S1 with async) only the kernel is checked against vLLM, and the reference is
# checked against the kernel on randomized cases with async and caching
# (tests/test_crosscheck.py). This keeps the suite under 10 minutes on 2 cores.
REFERENCE_LONG = ("s1_exact_seqs32", "swa_s1_time", "hyb_s1_time")
CASES = [
    pytest.param(
        name,
        engine,
        marks=[pytest.mark.slow] if engine != "kernel" or name.startswith(LONG) else [],
    )
    for name in NAMES
    for engine in sorted(ENGINES)
    if engine == "kernel" or not name.startswith(LONG) or name in REFERENCE_LONG
]


@pytest.mark.parametrize(
    "name,engine", CASES, ids=[f"{n}-{e}" for n, e in (c.values for c in CASES)]
)
def test_matches_vllm(name, engine):
    gold = load(name)
    scn = gold["scenario"]
    got, final = ENGINES[engine](scn)
    if scn["mode"] == "time":
        assert final["num_steps"] == gold["num_steps"]
        assert final["end_ns"] == gold["end_ns"]
        for key in ("first_token", "finish", "num_output_tokens", "num_preemptions"):
            want = [-1 if r[key] is None else r[key] for r in gold["requests"]]
            assert final[key] == want, key
        return
    want = golden_steps(gold)
    if gold["outcome"] == "stalled":
        # vLLM was stopped after a run of empty steps; the simulator proves the
        # livelock at the first step that repeats and stops there.
        assert final["livelocked"], "vLLM stalled; the simulator did not prove a livelock"
        k = len(got)
        assert k <= len(want)
        tail = want[k - 1 :]
        assert all(not s["sched"] and not s["preempted"] for s in tail)
        assert all(s == tail[0] for s in tail)
        want = want[:k]
    else:
        assert gold["outcome"] == "drained"
        assert not final["livelocked"]
    msg = first_difference(want, got, engine)
    assert msg is None, msg
    if gold["outcome"] == "drained":
        assert final["num_output_tokens"] == [r["num_output_tokens"] for r in gold["requests"]]
        assert final["num_preemptions"] == [r["num_preemptions"] for r in gold["requests"]]


@pytest.mark.slow
def test_golden_disaggregated_decode_scenarios_cover_the_issue():
    """Decode-side goldens (a KV connector loading remote prefills): at least
    10, sync and async, with transfers that land while the pool is full (a load refused for
    blocks, then started), preemption of a request whose KV arrived (it
    recomputes locally: resumed from 0), prefix caching shortening loads,
    priority, loads held back by an in-flight prefill's reservation, and the
    one-block-short livelock."""
    golds = {n: load(n) for n in NAMES if scenario(n).get("kv_transfer")}
    assert len(golds) >= 10
    scns = [g["scenario"] for g in golds.values()]
    assert {s["enable_prefix_caching"] for s in scns} == {True, False}
    # Async scheduling (vLLM's default; a KV consumer's ``defer_block_free``):
    # at least 10, with preemption, caching and priority among them.
    asyn = [g for g in golds.values() if g["scenario"]["async_scheduling"]]
    assert len(asyn) >= 10
    assert sum(sum(r["num_preemptions"] for r in g["requests"]) for g in asyn) >= 50
    assert {g["scenario"]["enable_prefix_caching"] for g in asyn} == {True, False}
    assert {g["scenario"]["policy"] for g in asyn} == {"fcfs", "priority"}
    assert {s["policy"] for s in scns} == {"fcfs", "priority"}
    assert any(g["outcome"] == "stalled" for g in golds.values())
    loads = [sum(len(s["loads"]) for s in g["steps"]) for g in golds.values()]
    assert sum(loads) >= 100
    # A request whose KV was loaded, later preempted and resumed from scratch.
    resumed_remote = [
        n
        for n, g in golds.items()
        for s in g["steps"]
        for i, c in s["resumed"]
        if g["scenario"]["requests"][i].get("remote") and c == 0
    ]
    assert resumed_remote
    # A load that could not start at once (blocks short) with requests waiting:
    # some step started no load while a remote request waited and the pool was low.
    assert any(
        s["waiting"] > 0 and s["free"] < 20 and not s["loads"]
        for g in golds.values()
        for s in g["steps"]
    )


@pytest.mark.slow
def test_golden_prefill_side_scenarios_cover_the_issue(monkeypatch):
    """Prefill-side goldens (NixlConnector's ``delay_free_blocks``: a finished
    prefill's blocks held until the decode side's read): at least 20, sync
    and async, with and without prefix caching, with steps that schedule
    nothing until a read ends; and the holds are needed: freed at each
    request's finish, the reference engine differs from vLLM on most."""
    import conformance

    golds = {n: load(n) for n in NAMES if n.startswith("pd_prefill")}
    assert len(golds) >= 20
    scns = [g["scenario"] for g in golds.values()]
    assert {s["async_scheduling"] for s in scns} == {False, True}
    assert {s["enable_prefix_caching"] for s in scns} == {False, True}
    sent = [sum(len(s["sent"]) for s in g["steps"]) for g in golds.values()]
    assert sum(sent) >= 100
    waits = [g for g in golds.values() if any(not s["sched"] and s["sent"] for s in g["steps"])]
    assert len(waits) >= 5
    patch = (conformance, "read_ends_of", lambda *a: None)
    differs = _reference_differs(monkeypatch, patch, golds, every=True)
    assert len(differs) >= len(golds) // 2, differs


def _reference_differs(monkeypatch, patch: tuple, golds: dict, every: bool = False) -> list[str]:
    """The goldens of ``golds`` (name -> golden) on which the reference engine,
    with ``patch`` (a ``monkeypatch.setattr`` argument tuple) applied,
    differs from vLLM (up to its own last step: a livelock it proves earlier
    counts as agreeing): all of them with ``every``, else the first only
    (a rule is needed if one golden says so; the rest would only cost time)."""
    with monkeypatch.context() as m:
        m.setattr(*patch)
        out = []
        for n, g in golds.items():
            got, _ = reference_steps(g["scenario"])
            want = golden_steps(g)[: len(got)]
            if first_difference(want, got, "reference") is not None:
                out.append(n)
                if not every:
                    break
        return out


@pytest.mark.slow
def test_drafts_on_the_decode_side_need_each_rule(monkeypatch):
    """The ``pd_spec_*`` goldens (speculative decoding on a disaggregated
    decode side, vLLM 0.33): at least 20, n-gram and EAGLE-3, sync and async,
    one livelocked; and each rule they add is needed: without the speculative
    step's blocks a load leaves free (``_spec_decode_step_blocks``), without
    the deferred free of a request that ends while the step in flight holds
    it (``defer_block_free``), or without padding a loaded request's one
    token to 1 + k (``pad_spec_decode``), the reference engine differs from
    vLLM on some of them."""
    from planner import reference as R

    names = [n for n in NAMES if n.startswith("pd_spec_")]
    golds = {n: load(n) for n in names}
    assert len(golds) >= 20
    scns = [g["scenario"] for g in golds.values()]
    assert {s["speculative"]["method"] for s in scns} == {"ngram", "eagle3"}
    assert {s["async_scheduling"] for s in scns} == {False, True}
    assert any(g["outcome"] == "stalled" for g in golds.values())

    def differs(patch: tuple) -> list[str]:
        return _reference_differs(monkeypatch, patch, golds)

    assert differs((R.Scheduler, "_spec_decode_step_blocks", lambda self: 0))

    def free_at_once(self, req):  # no deferral: the blocks go back now
        self.free(req)
        return []

    assert differs((R.KVCacheManager, "pop_blocks_for_free", free_at_once))
    assert differs((R.Scheduler, "_padded", lambda self, *a: 1))


@pytest.mark.slow
def test_prefix_caching_with_sliding_windows_needs_each_rule(monkeypatch):
    """The ``*_caching_*`` window goldens (prefix caching on sliding-window
    and hybrid models, vLLM 0.33): at least 20, sliding-only and hybrid, sync
    and async, with hits, preemptions and a livelock; and each rule is
    needed: caching every sliding block (no ``reachable_block_mask``), no
    junction (``shared_prefix_boundary``), or a sliding hit taken as a chain
    from block 0 instead of a run found from the right each make the
    reference engine differ from vLLM on some of them."""
    from planner import reference as R

    names = [n for n in NAMES if n.startswith(("swa_caching_", "hyb_caching_"))]
    golds = {n: load(n) for n in names if scenario(n)["mode"] == "steps"}
    assert len(golds) >= 20
    scns = [g["scenario"] for g in golds.values()]
    assert all(s["enable_prefix_caching"] and s["sliding_window"] for s in scns)
    assert {s.get("full_attention_groups", 0) > 0 for s in scns} == {True, False}
    assert {s["async_scheduling"] for s in scns} == {True, False}
    assert any(g["outcome"] == "stalled" for g in golds.values())
    hit = [n for n, g in golds.items() for s in g["steps"] for _, c in s["new"] if c > 0]
    assert {golds[n]["scenario"]["async_scheduling"] for n in hit} == {True, False}
    assert sum(r["num_preemptions"] for g in golds.values() for r in g["requests"]) >= 20

    def differs(patch: tuple) -> list[str]:
        return _reference_differs(monkeypatch, patch, golds)

    every_block = (R.KVCacheManager, "_reachable", lambda self, req, a, b: [True] * (b - a))
    assert differs(every_block)
    real_get = R.KVCacheManager.get_computed_blocks

    def no_junction(self, req):
        hits = real_get(self, req)
        req.junction = 0
        return hits

    assert differs((R.KVCacheManager, "get_computed_blocks", no_junction))

    def chain_from_zero(self, req, n, groups):
        rows = [[] for _ in groups]
        for j in range(n):
            row = self._cached(req, j, groups)
            if row is None:
                break
            for out, b in zip(rows, row, strict=True):
                out.append(b)
        return rows

    assert differs((R.KVCacheManager, "_window_hit", chain_from_zero))


@pytest.mark.slow
def test_prefix_caching_with_a_drafter_needs_each_rule(monkeypatch):
    """The ``eagle_cache_*`` goldens (EAGLE-3 with prefix caching, vLLM 0.33,
    where a block's hash covers the next token): at least 16, sync and async,
    with hits and preemptions; and each half of the rule is needed: keys
    that ignore the lookahead token (a prefix ending on a block boundary
    sharing its last block) or blocks hashed before their lookahead token
    exists each make the reference engine differ from vLLM on some of them."""
    from planner import reference as R

    golds = {n: load(n) for n in NAMES if n.startswith("eagle_cache_")}
    assert len(golds) >= 16
    scns = [g["scenario"] for g in golds.values()]
    assert all(s["enable_prefix_caching"] and s["speculative"]["method"] == "eagle3" for s in scns)
    assert {s["async_scheduling"] for s in scns} == {True, False}
    hit = [n for n, g in golds.items() for s in g["steps"] for _, c in s["new"] if c > 0]
    assert {golds[n]["scenario"]["async_scheduling"] for n in hit} == {True, False}
    assert sum(r["num_preemptions"] for g in golds.values() for r in g["requests"]) >= 10
    real_key = R.KVCacheManager.block_key

    def key_without_lookahead(self, req, j):
        look, self.look = self.look, 0
        try:
            return real_key(self, req, j)
        finally:
            self.look = look

    no_lookahead = (R.KVCacheManager, "block_key", key_without_lookahead)
    assert _reference_differs(monkeypatch, no_lookahead, golds)
    every_token = (R.KVCacheManager, "hashed_tokens", lambda self, req: req.num_tokens)
    assert _reference_differs(monkeypatch, every_token, golds)
