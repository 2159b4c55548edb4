"""Speculative decoding (``planner.speculative``): the draws, the kernel against
the reference engine, the limits the issue names, and bad input.

The step-for-step checks against vLLM 0.33 are the ``spec_*`` goldens
(tests/test_conformance.py); ``test_spec_goldens_cover_the_rules`` says what
they exercise.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conformance import first_difference, golden_names, golden_steps, kernel_steps, load, scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import STEP_LATENCY, assert_step_for_step, plan_quiet, run_both, run_cli, uniform
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.kernel import state as S
from planner.latency.step_time import RooflineLatency
from planner.speculative import (
    MAX_SPEC_TOKENS,
    Speculation,
    accepted_drafts,
    accepted_drafts_py,
    parse_speculative_config,
)
from planner.workload.arrays import Workload

NGRAM3 = '{"method": "ngram", "num_speculative_tokens": 3}'
EAGLE3 = (
    '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
    '"num_speculative_tokens": 3}'
)


def test_jitted_and_plain_draws_agree():
    rng = random.Random(7)
    for rates in ((0.0,), (1.0,), (0.63,), (0.9, 0.5, 0.45, 0.1)):
        thr = Speculation("ngram", 4, rates).thresholds()
        for _ in range(3000):
            args = (rng.randrange(2**62), rng.randrange(2**31), rng.randrange(2**31))
            d = rng.randrange(0, 5)
            assert accepted_drafts(*args, d, thr) == accepted_drafts_py(*args, d, thr)


@pytest.mark.parametrize("rates", [(0.8, 0.6, 0.3), (0.5,), (1.0, 1.0, 0.0)])
def test_draws_follow_the_per_position_rates(rates):
    """P(at least j drafts accepted) over many draws is the j-th per-position
    rate (vLLM's logged metric), within sampling noise."""
    spec = Speculation("ngram", 3, rates, seed=3)
    thr = spec.thresholds()
    n = 40_000
    got = np.array([accepted_drafts(3, r, 17, 3, thr) for r in range(n)])
    for j, want in enumerate(spec.per_position(), start=1):
        assert abs(float(np.mean(got >= j)) - want) < 4 * np.sqrt(want * (1 - want) / n) + 1e-9


@st.composite
def spec_configs(draw):
    k = draw(st.integers(1, 5))
    mnbt = draw(st.integers(k + 1, 200))
    rates = draw(st.sampled_from([(0.0,), (1.0,), (0.7,), (0.9, 0.6, 0.3, 0.2, 0.1)]))
    method = draw(st.sampled_from(["ngram", "ngram", "eagle3", "mtp"]))
    head = "h" if method == "eagle3" else None
    return SchedulerConfig(
        num_gpu_blocks=draw(st.integers(4, 60)),
        block_size=draw(st.sampled_from([1, 4, 16])),
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=mnbt,
        max_model_len=draw(st.integers(8, 300)),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3, 32])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.05])),
        scheduler_reserve_full_isl=draw(st.booleans()),
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        enable_prefix_caching=draw(st.booleans()),
        async_scheduling=draw(st.booleans()),
        max_steps=4000,
        speculation=Speculation(
            method,
            k,
            (rates + (0.05,) * k)[:k] if len(rates) > 1 else rates,
            seed=draw(st.integers(0, 9)),
            draft_model=head,
        ),  # fmt: skip
    )


@st.composite
def small_workloads(draw):
    r = draw(st.integers(1, 8))
    groups = draw(st.lists(st.integers(-1, 1), min_size=r, max_size=r))
    return Workload(
        np.cumsum(draw(st.lists(st.floats(0, 3e-5), min_size=r, max_size=r))),
        np.array(draw(st.lists(st.integers(1, 120), min_size=r, max_size=r)), np.int32),
        np.array(draw(st.lists(st.integers(1, 90), min_size=r, max_size=r)), np.int32),
        name="random",
        priority=np.array(draw(st.lists(st.integers(0, 2), min_size=r, max_size=r))),
        prefix_group=np.array(groups, np.int32),
        prefix_len=np.full(r, draw(st.sampled_from([4, 16, 40])), np.int32),
    )


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(cfg=spec_configs(), wl=small_workloads())
def test_kernel_matches_reference_with_drafts(cfg, wl):
    """Randomized: the kernel (traced and untraced) and the reference engine
    agree step for step with speculative decoding, and the run conserves
    requests and blocks; the same config without drafts rides along."""
    cfgs = [cfg, replace(cfg, speculation=None)]
    traced, fast, engines = run_both(cfgs, wl, STEP_LATENCY)
    for c, eng in enumerate(engines):
        assert_step_for_step(traced, fast, c, eng)
        oi = fast.state.out.counters[c]
        assert oi[S.O_INVARIANT_ERRORS] == 0
        done = oi[S.O_FINISHED] + oi[S.O_RUNNING_END] + oi[S.O_WAITING_END] + oi[S.O_REJECTED]
        assert done == oi[S.O_ARRIVED]


def test_drafter_time_matches_the_reference():
    """30 seeded cases with an EAGLE-3 or MTP drafter on the roofline: the
    kernel and the reference engine agree step for step, clocks included
    (the drafter's time, ``latency.draft.draft_ns``, in both)."""
    rng = np.random.default_rng(20261208)
    lat = RooflineLatency("llama-3.1-8b", "H100", overhead_us=50.0)
    for _ in range(30):
        r = int(rng.integers(2, 12))
        wl = Workload(
            np.cumsum(rng.uniform(0, 0.01, r)),
            rng.integers(1, 400, r).astype(np.int32),
            rng.integers(1, 120, r).astype(np.int32),
            name="drafter",
        )
        k = int(rng.integers(1, 6))
        cfgs = [
            SchedulerConfig(
                num_gpu_blocks=int(rng.integers(10, 80)),
                block_size=int(rng.choice([4, 16])),
                max_num_seqs=int(rng.integers(1, 8)),
                max_num_batched_tokens=int(rng.integers(k + 1, 512)),
                max_model_len=int(rng.integers(64, 600)),
                async_scheduling=bool(rng.random() < 0.5),
                enable_prefix_caching=False,
                max_steps=4000,
                speculation=_drafter(rng, k),
            )
            for _ in range(2)
        ]
        traced, fast, engines = run_both(cfgs, wl, lat)
        for c, eng in enumerate(engines):
            assert_step_for_step(traced, fast, c, eng)
            assert fast.state.out.counters[c, S.O_INVARIANT_ERRORS] == 0


def _drafter(rng: np.random.Generator, k: int) -> Speculation:
    method = str(rng.choice(["eagle3", "mtp"]))
    rate = float(rng.choice([0.0, 0.6, 1.0]))
    return Speculation(method, k, (rate,), draft_model="h" if method == "eagle3" else None)


def _decode_steps(k: int | None, rate: float, output: int = 401, run_async: bool = False) -> int:
    """Steps a lone request (100-token prompt) takes after its prefill."""
    spec = None if k is None else Speculation("ngram", k, (rate,))
    cfg = SchedulerConfig(num_gpu_blocks=200, async_scheduling=run_async, speculation=spec)
    res = simulate([cfg], uniform(1, 100, output), STEP_LATENCY)
    assert int(res.state.req.nout[0, 0]) == output
    return int(res.state.out.counters[0, S.O_STEPS]) - 1


@pytest.mark.parametrize("run_async", [False, True])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_acceptance_one_divides_decode_steps_by_k_plus_one(k, run_async):
    """The issue's limit: with every draft accepted, a lone request's decode
    steps fall to within 10% of 1/(k+1) of those without drafts (sync and
    async scheduling)."""
    plain = _decode_steps(None, 1.0, run_async=run_async)
    spec = _decode_steps(k, 1.0, run_async=run_async)
    assert abs(spec / plain - 1 / (k + 1)) <= 0.1 / (k + 1)


def test_drafter_lookahead_and_draft_time():
    """EAGLE-3 / MTP (``DRAFTER_METHODS``): k lookahead KV slots per request
    (vLLM's num_lookahead_tokens), a drafter priced per step on the roofline
    (k passes: more steps' time than n-gram at the same acceptance), and the
    serve command's JSON keeps the head's name."""
    eagle = Speculation("eagle3", 3, (0.7,), draft_model="h/eagle3")
    mtp = Speculation("mtp", 2, (0.7,))
    assert (eagle.lookahead_tokens, mtp.lookahead_tokens) == (3, 2)
    assert Speculation("ngram", 3, (0.7,)).lookahead_tokens == 0
    assert json.loads(eagle.config_json())["model"] == "h/eagle3"
    lat = RooflineLatency("llama-3.1-8b", "H100")
    wl = uniform(32, 500, 200)
    base = SchedulerConfig(
        num_gpu_blocks=20_000, max_num_seqs=64, async_scheduling=False,
        enable_prefix_caching=False,
    )  # fmt: skip
    cfgs = [replace(base, speculation=sp) for sp in (None, Speculation("ngram", 3, (0.7,)), eagle)]
    res = simulate(cfgs, wl, lat)
    end = res.state.out.counters[:, S.O_END_NS]
    steps = res.state.out.counters[:, S.O_STEPS]
    assert steps[1] == steps[2]  # the same draws and schedule, the pool being ample
    assert end[2] > end[1] * 1.02  # the drafter's passes cost time
    assert end[1] < end[0]  # 70% acceptance on a lone-ish load pays


def test_lookahead_slots_hold_k_more_blocks():
    """k lookahead slots per request (``num_lookahead_tokens``): with one-token
    blocks a lone request holds exactly k more blocks under an EAGLE drafter
    than under n-gram at the same k and acceptance (the same schedule)."""
    wl = uniform(1, 60, 10)
    cfg = SchedulerConfig(
        num_gpu_blocks=200, block_size=1, async_scheduling=False, enable_prefix_caching=False
    )
    ng = replace(cfg, speculation=Speculation("ngram", 5, (0.0,)))
    ea = replace(cfg, speculation=Speculation("eagle3", 5, (0.0,), draft_model="h"))
    res = simulate([ng, ea], wl, STEP_LATENCY)
    c = res.state.out.counters
    assert c[0, S.O_STEPS] == c[1, S.O_STEPS]
    assert c[0, S.O_MIN_FREE] - c[1, S.O_MIN_FREE] == 5


@pytest.mark.parametrize("run_async", [False, True])
def test_kv_slack_is_the_kernels_peak(run_async):
    """``Speculation.kv_slack_tokens`` is what the KV-safe limit adds to a
    request's length: with one-token blocks a lone request's peak KV is its
    L - 1 tokens plus exactly that, for n-gram and a drafter, at any
    acceptance; and the analytic limit of a pool shrinks by it."""
    wl = uniform(1, 60, 10)
    cfg = SchedulerConfig(
        num_gpu_blocks=200, block_size=1, async_scheduling=run_async, enable_prefix_caching=False
    )
    specs = [Speculation("ngram", 4, (0.0,)), Speculation("eagle3", 5, (0.0,), draft_model="h")]
    cfgs = [replace(cfg, speculation=s) for s in specs]
    res = simulate(cfgs, wl, STEP_LATENCY)
    peak = 199 - res.state.out.counters[:, S.O_MIN_FREE]
    slack = [s.kv_slack_tokens(run_async) for s in specs]
    assert list(peak) == [69 + x for x in slack]
    assert [c.kv_safe_max_num_seqs(70) for c in cfgs] == [199 // (70 + x) for x in slack]
    assert cfg.kv_safe_max_num_seqs(70) == 199 // 70


def test_acceptance_zero_costs_throughput():
    """The issue's limit: drafts that are never accepted take as many steps as
    none and price k more tokens in each: the same load runs slower."""
    assert _decode_steps(3, 0.0) == _decode_steps(None, 0.0)
    lat = RooflineLatency("llama-3.1-8b", "H100")
    wl = uniform(64, 900, 300)
    base = SchedulerConfig(num_gpu_blocks=20_000, max_num_seqs=64, async_scheduling=False)
    cfgs = [base, replace(base, speculation=Speculation("ngram", 3, (0.0,)))]
    end = simulate(cfgs, wl, lat).state.out.counters[:, S.O_END_NS]
    assert end[1] > end[0] * 1.02


def test_spec_goldens_cover_the_rules():
    """The vLLM 0.33 goldens with drafts: at least 10 scenarios, sync and
    async; every draft
    accepted and none; preemption of requests holding drafts; prefix-cache
    re-admission; padding (a waiting request with one token left scheduled
    with k invalid drafts); drafts cut by the token budget; a proven livelock."""
    golds = [load(n) for n in golden_names() if scenario(n).get("speculative")]
    assert len(golds) >= 10
    assert {g["scenario"]["async_scheduling"] for g in golds} == {False, True}
    rates = {tuple(g["scenario"]["speculative"]["acceptance"]) for g in golds}
    assert {(0.0,), (1.0,)} <= rates
    pads = cut = pre = hits = 0
    for g in golds:
        scn = g["scenario"]
        k = scn["speculative"]["num_speculative_tokens"]
        for s in g["steps"]:
            sched = dict(map(tuple, s["sched"]))
            pre += len(s["preempted"])
            for r, c in s["new"] + s["resumed"]:
                hits += c > 0
                pads += sched.get(r, 0) == 1 + k and scn["requests"][r]["prompt_len"] - c <= 1
            cut += any(1 < n < 1 + k for n in sched.values()) and scn["max_num_batched_tokens"] < 64
    assert pads >= 3 and pre >= 20 and hits >= 10 and cut >= 1
    assert any(g["outcome"] == "stalled" for g in golds)


def test_eagle_goldens_need_the_lookahead(monkeypatch):
    """The EAGLE-3 goldens (at least 10, sync and async) check the lookahead
    KV rule: the kernel without it (num_lookahead_tokens 0) differs from vLLM
    on at least 10 of them."""
    names = [n for n in golden_names() if n.startswith("eagle_")]
    golds = [load(n) for n in names]
    assert len(golds) >= 10
    assert {g["scenario"]["async_scheduling"] for g in golds} == {False, True}
    monkeypatch.setattr(Speculation, "lookahead_tokens", property(lambda self: 0))
    differ = 0
    for g in golds:
        got, _ = kernel_steps(g["scenario"])
        differ += first_difference(golden_steps(g), got, "kernel") is not None
    assert differ >= 10


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(method="draft_model"), "query slot"),
        (dict(method="nonsense"), "not simulated"),
        (dict(method="eagle3"), "needs 'model'"),
        (dict(method="mtp", draft_model="x"), "is for eagle"),
        (dict(method="eagle", draft_model="x", prompt_lookup=(2, None)), "n-gram keys"),
        (dict(method="eagle3", draft_model=" "), "name or path"),
        (dict(prompt_lookup=(0, None)), "prompt_lookup_min must be an integer >= 1"),
        (dict(num_speculative_tokens=0), "1..16"),
        (dict(num_speculative_tokens=MAX_SPEC_TOKENS + 1), "1..16"),
        (dict(acceptance=(1.5,)), r"\[0, 1\]"),
        (dict(acceptance=(-0.1,)), r"\[0, 1\]"),
        (dict(acceptance=(float("nan"),)), r"\[0, 1\]"),
        (dict(acceptance=(0.2, 0.5, 0.1)), "cannot rise"),
        (dict(acceptance=(0.5, 0.4)), "needs 1 rate or 3"),
        (dict(seed=-1), "--spec-seed"),
    ],
)
def test_bad_speculation_is_one_line(kw, match):
    args = dict(method="ngram", num_speculative_tokens=3, acceptance=(0.5,), seed=0) | kw
    with pytest.raises(ValueError, match=match) as e:
        Speculation(**args)
    assert "\n" not in str(e.value)


def test_configs_the_goldens_do_not_check_are_refused():
    spec = Speculation("ngram", 3, (0.5,))
    for kw, match in (
        (dict(max_num_batched_tokens=3, max_num_seqs=1), "cannot hold"),
        (dict(preemption_mode="swap", enable_prefix_caching=False), "swap"),
        (dict(sliding_window=64, enable_prefix_caching=False), "sliding window"),
    ):
        with pytest.raises(ValueError, match=match):
            SchedulerConfig(**({"async_scheduling": False, "speculation": spec} | kw))


@pytest.mark.parametrize(
    "text, match",
    [
        ("{", "not JSON"),
        ("[1]", "JSON object"),
        ('{"method": "ngram"}', "num_speculative_tokens"),
        ('{"method": "ngram", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1}',
         "not simulated"),
    ],
)  # fmt: skip
def test_bad_speculative_config_json(text, match):
    with pytest.raises(ValueError, match=match):
        parse_speculative_config(text)


@pytest.mark.parametrize(
    "args, match",
    [
        (["--speculative-config", NGRAM3], "needs --spec-acceptance"),
        (["--speculative-config", NGRAM3, "--spec-acceptance", "1.5"], r"\[0, 1\]"),
        (["--speculative-config", NGRAM3, "--spec-acceptance", "x"], "rates in"),
        (["--speculative-config", "{bad", "--spec-acceptance", "0.5"], "not JSON"),
        (["--spec-acceptance", "0.5"], "needs --speculative-config"),
        (["--speculative-config", "", "--spec-seed", "3"], "is empty"),
        (["--speculative-config", NGRAM3[:-1] + ', "prompt_lookup_max": "x"}',
          "--spec-acceptance", "0.5"], "prompt_lookup_max must be an integer"),
        (["--speculative-config", NGRAM3[:-1] + ', "prompt_lookup_min": 5, '
          '"prompt_lookup_max": 2}', "--spec-acceptance", "0.5"], "must be <= prompt_lookup_max"),
        (["--speculative-config", NGRAM3, "--spec-acceptance", "0.5", "--compat", "blis"],
         "with --compat blis"),
        (["--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}',
          "--spec-acceptance", "0.5"], "needs 'model'"),
        (["--speculative-config", EAGLE3, "--spec-acceptance", "0.5",
          "--no-enable-prefix-caching", "--latency", "linear"], "priced on the roofline"),
        (["--speculative-config", EAGLE3, "--spec-acceptance", "0.5", "--model", "llama-3.1-8b",
          "--gpu", "H100", "--latency", "roofline", "--enable-prefix-caching",
          "--prefill-replicas", "1"], "prefix caching on a disaggregated decode side"),
        (["--speculative-config", NGRAM3, "--spec-acceptance", "0.5",
          "--max-num-batched-tokens", "3", "--max-num-seqs", "2"], "cannot hold"),
        (["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}',
          "--spec-acceptance", "0.5", "--model", "llama-3.1-8b", "--gpu", "H100",
          "--latency", "roofline", "--no-enable-prefix-caching"], "no multi-token-prediction"),
    ],
)  # fmt: skip
def test_plan_run_bad_speculation_is_one_line_exit_2(args, match):
    code, err = plan_quiet("run", "--num-requests", "5", *args)
    assert code == 2
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.search(match, lines[0]), lines[0]
    assert "speculative_config" not in lines[0], "a CLI error names the flag, not the spec field"


def test_plan_run_names_the_speculation(capsys):
    code, out, err = run_cli(
        capsys,
        "run", "--num-requests", "20", "--model", "llama-3.1-8b", "--gpu", "H100",
        "--speculative-config", NGRAM3, "--spec-acceptance", "0.8,0.6,0.4",
    )  # fmt: skip
    assert code == 0, err
    out += err
    assert "speculative decoding: ngram, 3 draft tokens" in out
    assert "mean acceptance length 2.80" in out
    assert "async_scheduling true (vLLM default" in out


def _max_rps(capsys, *spec: str) -> float:
    code, out, err = run_cli(
        capsys, "max-rate", "--num-requests", "600", "--prompt-tokens", "1000",
        "--prompt-tokens-stdev", "0", "--output-tokens", "300", "--output-tokens-stdev", "0",
        "--tpot-slo", "0.02", "--model", "llama-3.1-8b", "--gpu", "h100", "--latency",
        "roofline", *spec, "--json",
    )  # fmt: skip
    assert code == 0, err
    return float(json.loads(out)["configs"][0]["max_rps"])


@pytest.mark.slow
def test_max_rate_moves_with_the_acceptance(capsys):
    """plan max-rate takes --speculative-config: under a TPOT SLO, drafts the
    target mostly accepts raise the highest rate, drafts it never accepts
    lower it (the roofline prices their tokens)."""
    none = _max_rps(capsys)
    good = _max_rps(capsys, "--speculative-config", NGRAM3, "--spec-acceptance", "0.9")
    bad = _max_rps(capsys, "--speculative-config", NGRAM3, "--spec-acceptance", "0")
    assert bad < none < good


SPEC_SWEEP = """
name = "spec-sweep"
[workload]
kind = "synthetic"
num_requests = 600
rate = 30
[workload.prompt]
mean = 1000
[workload.output]
mean = 300
[hardware]
model = "llama-3.1-8b"
[latency]
kind = "roofline"
[slo]
ttft_slo = 2.0
tpot_slo = 0.02
[axes]
speculative_config = ["", '{"method": "ngram", "num_speculative_tokens": 3}']
[scheduler]
spec_acceptance = 0.8
"""


def test_a_sweep_crosses_speculative_decoding_on_and_off(tmp_path):
    """A spec's speculative_config axis (with spec_acceptance fixed) gives
    rows with and without drafts; their columns say which, as given."""
    from planner.sweep.spec import load_spec_text

    text = SPEC_SWEEP.replace("[hardware]", '[hardware]\ngpu = "H100"')
    sweep = load_spec_text(text, tmp_path)
    off, on = sweep.configs
    assert off.speculation is None
    assert on.speculation == Speculation("ngram", 3, (0.8,))
    cols = on.columns()
    assert cols["speculative_config"] == '{"method":"ngram","num_speculative_tokens":3}'
    assert cols["spec_acceptance"] == "0.8" and cols["num_speculative_tokens"] == 3
    assert off.columns()["speculative_config"] == "" and off.columns()["spec_acceptance"] == ""


@pytest.mark.parametrize(
    "edit, needle",
    [
        (("spec_acceptance = 0.8", "spec_acceptance = 1.7"), "scheduler.spec_acceptance: "),
        (("spec_acceptance = 0.8", 'spec_acceptance = "x"'), "scheduler.spec_acceptance: "),
        (("spec_acceptance = 0.8", "spec_acceptance = true"), "scheduler.spec_acceptance: "),
        (("spec_acceptance = 0.8", "spec_acceptance = [0.8]"),
         "scheduler: spec_acceptance takes one value, not list [0.8]; to sweep it, give"),
        (("spec_acceptance = 0.8", ""), "needs spec_acceptance"),
        (("spec_acceptance = 0.8", 'spec_acceptance = 0.8\npreemption_mode = "restart"'),
         'speculative_config is not simulated with preemption_mode "restart"'),
        (("spec_acceptance = 0.8", 'spec_acceptance = 0.8\nadmission = "projected"'),
         'speculative_config is not simulated with admission "projected"'),
        (('"num_speculative_tokens": 3}', '"num_speculative_tokens": 3, "x": 1}'),
         "axes.speculative_config: "),
        (("'{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'", '"{"'), "not JSON"),
        (("speculative_config = [", "max_num_seqs = [64]\n#"), "no effect without"),
        (("speculative_config = [\"\", ", "speculative_config = [3, "), "JSON text, got int"),
        (("speculative_config = [\"\", ", "speculative_config = [true, "), "JSON text, got bool"),
        (("speculative_config = [\"\", '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}']",
          "speculative_config = ['{\"method\": \"ngram\", \"num_speculative_tokens\": 3}', "
          "'{\"num_speculative_tokens\":3,\"method\":\"ngram\"}']"), "mean the same"),
    ],
)  # fmt: skip
def test_bad_speculation_in_a_spec_is_one_line(tmp_path, edit, needle):
    """A spec's speculative keys: bad values, repeats that mean the same and
    keys without effect are one-line SpecErrors naming the key."""
    from planner.sweep.spec import SpecError, load_spec_text

    text = SPEC_SWEEP.replace("[hardware]", '[hardware]\ngpu = "H100"').replace(*edit)
    with pytest.raises(SpecError) as e:
        load_spec_text(text, tmp_path)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_drafter_off_the_roofline_in_a_spec_names_the_spec_keys(tmp_path):
    """The spec's spelling throughout (hostile-pass finding: a CLI flag's
    error said 'speculative_config', a spec's said '--latency roofline')."""
    from planner.sweep.spec import SpecError, load_spec_text

    text = SPEC_SWEEP.replace("[hardware]", '[hardware]\ngpu = "H100"')
    text = text.replace('kind = "roofline"', 'kind = "linear"\nalpha = [1, 0, 0]\nbeta = [1, 1, 0]')
    text = text.replace(NGRAM3, EAGLE3) + "enable_prefix_caching = false\n"
    with pytest.raises(SpecError) as e:
        load_spec_text(text, tmp_path)
    msg = str(e.value)
    assert "speculative_config method 'eagle3'" in msg and '[latency] kind = "roofline"' in msg
    assert "--" not in msg, msg


@pytest.mark.slow
def test_plan_size_says_which_side_of_speculative_decoding_wins(capsys, tmp_path):
    """plan size over a speculative_config axis: the answer's vllm serve
    command carries --speculative-config when drafts win, and the answer
    names the cheapest fleet on the other side."""
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC_SWEEP)
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        capsys, "size", str(spec), "--gpus", "H100", "--max-replicas", "3", "--out", str(out),
        "--json",
    )  # fmt: skip
    assert code == 0, err
    a = json.loads(stdout)["answer"]
    other = a["other_speculation"]
    assert other is not None and other["speculative_decoding"] != bool(a["speculative_config"])
    if a["speculative_config"]:
        assert '--speculative-config \'{"method":"ngram"' in a["vllm_serve"]
        assert not other["meets_target"] or other["usd_per_hour"] >= a["usd_per_hour"]
    else:
        assert "--speculative-config" not in a["vllm_serve"]


LOG_LINE = (
    "INFO 12-01 10:00:{s:02d} [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
    "2.10, Accepted throughput: 100.00 tokens/s, Drafted throughput: 300.00 tokens/s, "
    "Accepted: 1100 tokens, Drafted: {n} tokens, Per-position acceptance rate: {rates}, "
    "Avg Draft acceptance rate: 36.7%"
)


def test_acceptance_fitted_from_a_vllm_log_weights_by_drafted_tokens(tmp_path):
    from planner.speculative import acceptance_from_log

    log = tmp_path / "vllm.log"
    log.write_text(
        "\n".join(
            [
                "INFO starting",
                LOG_LINE.format(s=1, n=3000, rates="0.600, 0.350, 0.150"),
                "INFO other",
                LOG_LINE.format(s=11, n=1000, rates="0.700, 0.450, 0.250"),
            ]
        )
    )
    rates, lines, drafted = acceptance_from_log(log)
    assert (lines, drafted) == (2, 4000)
    assert rates == pytest.approx((0.625, 0.375, 0.175))


@pytest.mark.parametrize(
    "text, k, match",
    [
        ("no metrics here", 3, "no 'SpecDecoding metrics' line"),
        (LOG_LINE.format(s=1, n=10, rates="0.6, 0.3"), 3, "its drafts have 2 positions"),
        (LOG_LINE.format(s=1, n=0, rates="0.6, 0.3, 0.1"), 3, "no drafted tokens"),
        (LOG_LINE.format(s=1, n=9, rates="0.2, 0.9, 0.95"), 3, "not non-increasing"),
        (LOG_LINE.format(s=1, n=9, rates="1.8, 0.9, 0.5"), 3, "not non-increasing"),
    ],
)
def test_bad_acceptance_logs_are_one_line_exit_2(tmp_path, text, k, match):
    log = tmp_path / "vllm.log"
    log.write_text(text)
    config = f'{{"method": "ngram", "num_speculative_tokens": {k}}}'
    code, err = plan_quiet(
        "run", "--num-requests", "5", "--speculative-config", config,
        "--spec-acceptance-log", str(log),
    )  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1 and match in err, err


def test_the_run_report_names_the_speculation():
    """plan report's facts for a plan run result with drafts (its --json
    ``speculation``), and none without."""
    from planner.report.results import _run_facts

    spec = Speculation("ngram", 3, (0.8, 0.6, 0.4))
    record = {"speculation": {
        "method": spec.method, "num_speculative_tokens": 3,
        "per_position_acceptance": list(spec.per_position()),
        "mean_acceptance_length": spec.mean_acceptance_length(),
    }}  # fmt: skip
    fact = _run_facts(record)["speculative decoding"]
    assert "ngram, 3 draft tokens" in fact and "0.80, 0.60, 0.40" in fact and "2.80" in fact
    assert "speculative decoding" not in _run_facts({"speculation": None})


def test_safe_limit_takes_the_speculation(capsys):
    """plan safe-limit simulates its max_num_seqs candidates with the drafts
    given and says so in --json (``speculation``)."""
    args = ["safe-limit", "--num-gpu-blocks", "2000", "--num-requests", "60", "--json"]
    spec = ["--speculative-config", NGRAM3, "--spec-acceptance", "0.7"]
    code, out, err = run_cli(capsys, *args, *spec)
    assert code == 0, err
    got = json.loads(out)
    assert (
        got["speculation"]["speculative_config"] == '{"method":"ngram","num_speculative_tokens":3}'
    )
    assert got["speculation"]["per_position_acceptance"] == pytest.approx([0.7, 0.49, 0.343])
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and json.loads(out)["speculation"] is None, err


def test_an_acceptance_axis_over_rows_without_drafts_warns(tmp_path):
    """Crossing spec_acceptance with "" repeats the rows without drafts: the
    sweep says so (one warning), and the rows with drafts differ."""
    from planner.sweep.spec import load_spec_text

    text = SPEC_SWEEP.replace("[hardware]", '[hardware]\ngpu = "H100"')
    text = text.replace("[scheduler]\nspec_acceptance = 0.8", "spec_acceptance = [0.5, 0.9]")
    sweep = load_spec_text(text, tmp_path)
    assert len(sweep.configs) == 4
    assert any("no effect in the 2 rows without speculative_config" in w for w in sweep.warnings)
    acc = [c.speculation.acceptance for c in sweep.configs if c.speculation is not None]
    assert sorted(acc) == [(0.5,), (0.9,)]


def test_a_drafter_takes_its_weights_and_kv_layer_from_the_pool(tmp_path):
    """vLLM loads an EAGLE/EAGLE-3/MTP drafter before sizing the pool: one
    more KV layer of the target's shape, one target decoder layer's weights
    plus the drafter's input projection (and EAGLE-3's own LM head). n-gram
    loads nothing. Sweep rows and plan run size the same pool."""
    from planner import resolve
    from planner.models import hardware

    m = hardware.model("llama-3.1-8b")
    h, layers = m.hidden_size, m.num_layers
    one_layer = (m.params - 2 * m.vocab_size * h) / layers
    for method, extra in (("eagle", 2 * h * h), ("eagle3", 3 * h * h + m.vocab_size * h)):
        d = m.with_drafter(method)
        assert d.weight_bytes() - m.weight_bytes() == pytest.approx(2 * (one_layer + extra))
        assert d.kv_bytes_per_token() * layers == m.kv_bytes_per_token() * (layers + 1)
    kw = dict(max_num_seqs=256, max_num_batched_tokens=8192, simulated=True)
    kw["full_attention_only"] = False

    def pool(spec: Speculation | None) -> int:
        return resolve.num_gpu_blocks(
            None, "llama-3.1-8b", "H100", 0.9, 16, 1, 0, speculation=spec, **kw
        )[0]

    plain, ngram = pool(None), pool(Speculation("ngram", 3, (0.7,)))
    eagle = pool(Speculation("eagle", 3, (0.7,), draft_model="h"))
    eagle3 = pool(Speculation("eagle3", 3, (0.7,), draft_model="h"))
    assert ngram == plain and eagle3 < eagle < plain * layers / (layers + 1)
    from planner.sweep.spec import load_spec_text

    text = SPEC_SWEEP.replace("[hardware]", '[hardware]\ngpu = "H100"').replace(
        '\'{"method": "ngram", "num_speculative_tokens": 3}\'',
        '\'{"method": "eagle", "num_speculative_tokens": 3, "model": "h"}\'',
    )
    text = text.replace("[scheduler]", "[scheduler]\nenable_prefix_caching = false")
    off, on = load_spec_text(text, tmp_path).configs
    assert on.speculation is not None and on.speculation.method == "eagle"
    assert on.num_gpu_blocks < off.num_gpu_blocks


def test_mtp_layers_come_from_the_config_json(tmp_path):
    """``ModelSpec.mtp_layers`` reads DeepSeek-V3's ``num_nextn_predict_layers``
    and Qwen3-Next's ``mtp_num_hidden_layers``; a model with neither has none
    (and method mtp is refused on it, above)."""
    import json

    from planner.models import hardware

    assert hardware.model("deepseek-v3").mtp_layers == 1
    assert hardware.model("llama-3.1-8b").mtp_layers == 0
    path = Path(__file__).parents[1] / "planner" / "data" / "models" / "qwen3-8b.json"
    cfg = json.loads(path.read_text())["config"]
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**cfg, "mtp_num_hidden_layers": 2}))
    assert hardware.model(str(folder)).mtp_layers == 2


def test_a_drafter_without_a_latency_choice_runs_on_the_roofline(capsys):
    """Llama-3.1-8B on H100 defaults to its linear preset, which prices no
    drafter; with an EAGLE-3 drafter and no --latency the run takes the
    roofline and says so in a note, instead of refusing a default the user
    never chose (explicit --latency linear is still refused)."""
    args = ("run", "--model", "llama-3.1-8b", "--gpu", "H100", "--num-requests", "5",
            "--speculative-config", EAGLE3, "--spec-acceptance", "0.5")  # fmt: skip
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "plan: note: no --latency given and a drafter in --speculative-config" in err
    assert "step time: roofline llama-3.1-8b on 1 x H100" in out
    code, _, err = run_cli(capsys, *args, "--latency", "linear")
    assert code == 2 and "priced on the roofline" in err
