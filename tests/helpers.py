"""Shared helpers: run the kernel and the reference engine on the same case."""

from __future__ import annotations

import contextlib
import io

import numpy as np
from hypothesis import HealthCheck, settings

from planner.api import simulate
from planner.cli.commands import command, main
from planner.config import SchedulerConfig
from planner.kernel import state as S
from planner.latency.step_time import LinearLatency
from planner.reference import Engine
from planner.workload.arrays import Workload

STEP_LATENCY = LinearLatency(alpha=(0, 0, 0), beta=(1, 0, 0))  # 1 us per step, no delays


def uniform(n: int, prompt: int, output: int) -> Workload:
    """n identical requests, all present at t = 0."""
    return Workload(
        np.zeros(n), np.full(n, prompt, np.int32), np.full(n, output, np.int32), name="uniform"
    )


def run_reference(cfg: SchedulerConfig, wl: Workload, lat: LinearLatency) -> Engine:
    arrival_ns = np.round(wl.arrival_s * 1e9).astype(np.int64)
    prio = None if wl.priority is None else [int(x) for x in wl.priority]
    group = None if wl.prefix_group is None else wl.prefix_group.tolist()
    plen = None if wl.prefix_len is None else wl.prefix_len.tolist()
    hashes = None
    if wl.hash_ids is not None:
        off = wl.hash_offsets
        hashes = [wl.hash_ids[off[i] : off[i + 1]].tolist() for i in range(wl.num_requests)]
    return Engine(
        cfg,
        lat,
        arrival_ns.tolist(),
        wl.prompt_tokens.tolist(),
        wl.output_tokens.tolist(),
        prio,
        group,
        plen,
        hashes,
        wl.hash_block_size,
        None if wl.session is None else wl.session.tolist(),
        None if wl.remote is None else wl.remote.tolist(),
        None if wl.read_end_ns is None else wl.read_end_ns.tolist(),
    ).run()


def kernel_trace_rows(res, c: int) -> list[tuple]:
    steps = int(res.state.out.counters[c, S.O_STEPS])
    return [tuple(int(x) for x in row) for row in res.state.out.trace[c, :steps]]


def reference_trace_rows(eng: Engine) -> list[tuple]:
    return [
        (
            s.start_ns,
            s.end_ns,
            s.scheduled,
            s.prefill,
            s.decode,
            s.running,
            s.waiting,
            s.free,
            s.preempted,
            s.finished,
            s.admitted,
        )
        for s in eng.steps
    ]


def kernel_log(res, c: int) -> list[tuple[int, int, int]]:
    n = int(res.state.out.counters[c, S.O_EVENTS])
    assert n <= res.state.out.events.shape[1], "request log truncated: raise log_entries"
    rows = res.state.out.events[c, :n]
    return [tuple(int(x) for x in row[:3]) for row in rows if row[3] == S.EV_SCHED]


def kernel_events(res, c: int) -> list[tuple[int, int, int, int]]:
    """Every logged event of config c, sorted: (step, request, value, kind)."""
    n = int(res.state.out.counters[c, S.O_EVENTS])
    assert n <= res.state.out.events.shape[1], "event log truncated: raise log_entries"
    return sorted(tuple(int(x) for x in row) for row in res.state.out.events[c, :n])


def reference_events(eng: Engine) -> list[tuple[int, int, int, int]]:
    """The reference engine's steps as kernel events (``state.EV_*``), sorted."""
    ev = []
    for i, s in enumerate(eng.steps):
        ev += [(i, r, n, S.EV_SCHED) for r, n in s.per_request]
        ev += [(i, r, 0, S.EV_PREEMPT) for r in s.victims]
        ev += [(i, r, 0, S.EV_FINISH) for r in s.finishes]
        ev += [(i, r, c, S.EV_ADMIT) for r, c in s.admissions]
        run, wait, free = s.sched_state
        ev += [(i, run, wait, S.EV_STATE), (i, -1, free, S.EV_FREE)]
    return sorted(ev)


def reference_log(eng: Engine) -> list[tuple[int, int, int]]:
    return [(i, rid, n) for i, s in enumerate(eng.steps) for rid, n in s.per_request]


def compare_final(res, c: int, eng: Engine) -> None:
    """Kernel config c and the reference agree on every per-request and counter output."""
    st, oi = res.state, res.state.out.counters[c]
    reqs = eng.requests
    assert st.req.nout[c].tolist() == [r.num_output_tokens for r in reqs]
    assert st.req.entry_ns[c].tolist() == [r.entry_ns for r in reqs]
    sent = res.arrival_ns if res.arrival_ns.ndim == 1 else res.arrival_ns[c]
    assert sent.tolist() == [r.arrival_ns for r in reqs]
    assert st.req.npre[c].tolist() == [r.num_preemptions for r in reqs]
    assert st.req.first_ns[c].tolist() == [r.first_token_ns for r in reqs]
    assert st.req.finish_ns[c].tolist() == [r.finish_ns for r in reqs]
    assert st.req.ncomp[c].tolist() == [r.num_computed_tokens for r in reqs]
    assert st.req.sched_ns[c].tolist() == [r.first_scheduled_ns for r in reqs]
    assert st.req.last_ns[c].tolist() == [r.last_token_ns for r in reqs]
    assert st.req.max_gap_ns[c].tolist() == [r.max_token_gap_ns for r in reqs]
    assert st.req.ngap[c].tolist() == [r.num_token_gaps for r in reqs]
    assert st.out.itl_hist[c].tolist() == eng.sched.itl_hist
    assert oi[S.O_STEPS] == len(eng.steps)
    assert oi[S.O_PREEMPTIONS] == eng.preemptions
    assert oi[S.O_REJECTED] == eng.rejected
    assert oi[S.O_ARRIVED] == eng.arrived
    assert oi[S.O_END_NS] == eng.clock
    assert bool(oi[S.O_LIVELOCKED]) == eng.livelocked
    assert bool(oi[S.O_STEP_LIMIT]) == eng.step_limit
    assert oi[S.O_MIN_FREE] == eng.min_free
    assert oi[S.O_RUNNING_END] == len(eng.sched.running)
    assert oi[S.O_WAITING_END] == len(eng.sched.waiting)
    np.testing.assert_allclose(st.out.floats[c, S.F_WASTE_NS], eng.waste_ns, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(st.out.floats[c, S.F_KV_BLOCK_NS], eng.kv_block_ns, rtol=1e-12)
    assert [oi[S.O_PC_QUERIES], oi[S.O_PC_HITS]] == eng.sched.cache_stats
    assert [oi[S.O_PC_PRE_QUERIES], oi[S.O_PC_PRE_HITS]] == eng.sched.cache_stats_preempted
    assert oi[S.O_KV_ALLOC_FAILURES] == eng.sched.kv.alloc_failures
    assert oi[S.O_HOLD_PEAK] == eng.sched.hold_peak


def run_both(cfgs: list[SchedulerConfig], wl: Workload, lat: LinearLatency, features=None):
    """The kernel traced and on its fast path (kernel variant ``features``,
    None: the configs' own, ``api.simulate``), and the reference engine."""
    steps = max(c.max_steps for c in cfgs)
    per_step = S.max_events_per_step(max(c.max_num_seqs for c in cfgs), wl.num_requests)
    traced = simulate(
        cfgs, wl, lat, trace_steps=steps + 1, log_entries=steps * per_step, features=features
    )
    fast = simulate(cfgs, wl, lat, features=features)
    engines = [run_reference(c, wl, lat) for c in cfgs]
    return traced, fast, engines


def assert_step_for_step(traced, fast, c: int, eng: Engine) -> None:
    """Kernel config c matches the reference engine ``eng`` step for step in
    the traced run (per-step rows, the scheduler log, the event log) and in
    every final output of both the traced and the fast-path run."""
    assert kernel_trace_rows(traced, c) == reference_trace_rows(eng)
    assert kernel_log(traced, c) == reference_log(eng)
    assert kernel_events(traced, c) == reference_events(eng)
    compare_final(traced, c, eng)
    compare_final(fast, c, eng)


def last_wins(args: list[str]) -> list[str]:
    """``args`` with each option given more than once (or with its alias or
    ``--no-`` form) kept only where it last appears, with its value: the
    tests' idiom of a base command line plus overrides. ``plan`` itself
    refuses a repeated option (``commands.repeated_option``; tested with
    ``run_cli_as_typed``)."""
    sub = command().commands.get(args[0]) if args else None
    if sub is None:
        return args
    params = {
        name: p
        for p in sub.params
        if p.param_type_name == "option" and not p.multiple
        for name in (*p.opts, *p.secondary_opts)
    }
    items: list[tuple[str | None, list[str]]] = []  # (param name or None, tokens)
    i = 1
    while i < len(args):
        tok = args[i]
        name = tok.split("=", 1)[0]
        p = params.get(name) if tok.startswith("--") else None
        if p is None:
            items.append((None, [tok]))
            i += 1
            continue
        takes = 0 if (p.is_flag or "=" in tok) else 1
        items.append((p.name, args[i : i + 1 + takes]))
        i += 1 + takes
    last = {key: j for j, (key, _) in enumerate(items) if key is not None}
    kept = [t for j, (key, toks) in enumerate(items) if key is None or last[key] == j for t in toks]
    return [args[0], *kept]


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run ``plan ARGS`` in-process, a repeated option's last value winning
    (``last_wins``): (exit code, stdout, stderr)."""
    return run_cli_as_typed(capsys, *last_wins(list(args)))


def run_cli_as_typed(capsys, *args: str) -> tuple[int, str, str]:
    """Run ``plan ARGS`` in-process exactly as given: (exit code, stdout, stderr)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    out, err = capsys.readouterr()
    return code, out, err


def plan_quiet(*args: str) -> tuple[int, str]:
    """Run ``plan ARGS`` in-process with stdout discarded: (exit code, stderr).
    Any exception other than SystemExit propagates (a traceback fails the test)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0
    return code, err.getvalue()


def assert_one_line_or_ran(code: int, err: str) -> None:
    """The promise for bad input: exit 0 (it ran) or exit 2 with one line."""
    assert code in (0, 2), err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("plan: error: "), err


def fuzz_settings(max_examples: int) -> settings:
    """Hypothesis settings of the fuzz tests: a fixed seed, a bounded number of
    examples, no deadline (machines are shared)."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def verdicts_around(capsys, args: list[str], scale: float) -> list[bool]:
    """``plan run ARGS --rate-scale`` at 0.9x and 1.1x of ``scale`` (a
    max-rate answer): for each, whether it meets its SLOs and keeps up (not
    overloaded, on a window long enough to judge: ``metrics.keeps_up``)."""
    import json

    out_verdicts = []
    for f in (0.9, 1.1):
        code, out, err = run_cli(capsys, "run", *args, "--rate-scale", f"{scale * f!r}", "--json")
        assert code == 0, err
        row = json.loads(out)
        keeps = not row["overloaded"] and row["overload_judged"]
        out_verdicts.append(row["meets_slo"] and keeps)
    return out_verdicts


# The [workload] table of a small synthetic sweep spec (5 requests, prompts of
# 200 tokens and outputs of 50 on average) for tests that build spec text.
SMALL_SYNTHETIC = """[workload]
kind = "synthetic"
num_requests = 5
[workload.prompt]
mean = 200
[workload.output]
mean = 50
"""
# The [hardware] and [latency] tables of a spec on one H100: Llama-3.1-8B, roofline.
ROOFLINE_H100 = """[hardware]
model = "llama-3.1-8b"
gpu = "H100"
[latency]
kind = "roofline"
"""
