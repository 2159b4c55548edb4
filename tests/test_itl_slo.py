"""The ITL SLO (issue 13): run level on the ITL p99 over every token gap, gaps
never produced counting as +inf; per request on the largest gap; honoured by
plan run, check, safe-limit, max-rate and sweep specs. Expected values come
from the linear step-time model by hand, not from a run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import run_cli, verdicts_around
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.latency.step_time import SEED_ALPHA_US, SEED_BETA_US, LinearLatency
from planner.maxrate.search import FOUND, search_max_rate
from planner.metrics import missing_gaps
from planner.slo import SLO, from_options
from planner.workload.arrays import Workload
from planner.workload.traces import s1_exact

S1_LAT = LinearLatency(alpha=SEED_ALPHA_US, beta=SEED_BETA_US)
B0, B1, B2, _A0, _A1, A2 = S1_LAT.ns()
S1_CSV = "planner/data/s1_seed7.csv"
BIG = SchedulerConfig(num_gpu_blocks=60_000, max_num_seqs=256)


def _two_decoding() -> Workload:
    """Two 64-token prompts with 101 outputs each, both at t = 0: one prefill
    step, then 100 steps that each decode both (step b0 + 2 b2)."""
    return Workload(
        np.zeros(2),
        np.array([64, 64], np.int32),
        np.array([101, 101], np.int32),
        name="two-decoding",
    )


def test_goodput_key_itl_and_the_option_are_one_slo():
    assert from_options(goodput="ttft:2000 itl:20") == SLO(ttft_s=2.0, itl_s=0.02)
    assert from_options(itl_slo=0.02) == from_options(goodput="itl:20")
    assert SLO(itl_s=0.02).as_dict()["itl_slo_s"] == 0.02
    assert SLO(tpot_s=0.05, itl_s=0.02).describe() == "TPOT p99 <= 50 ms, ITL p99 <= 20 ms"
    assert SLO(itl_s=0.02).describe(per_request=True) == "max ITL <= 20 ms"


def test_itl_slo_below_the_decode_step_misses_and_above_holds():
    """Every gap is one step decoding both requests, b0 + 2 b2; ITL = that +
    alpha2. The run's ITL p99 (a histogram bin midpoint, within 3.1 %) and
    each request's largest gap decide the verdict and the goodput."""
    itl = (B0 + 2 * B2 + A2) / 1e9
    res = simulate([BIG], _two_decoding(), S1_LAT)
    below = res.metrics(SLO(itl_s=0.95 * itl)).iloc[0]
    above = res.metrics(SLO(itl_s=1.05 * itl)).iloc[0]
    assert below.itl_s_p99 == pytest.approx(itl, rel=1 / 33)
    assert below.max_token_stall_s == pytest.approx(itl, abs=1e-9)
    assert not below.itl_s_p99_is_lower_bound and below.unfinished == 0
    assert not below.meets_slo and below.goodput_rps == 0
    assert above.meets_slo and above.goodput_rps == pytest.approx(2 / below.sim_end_s)
    assert above.slo_margin == pytest.approx(above.itl_s_p99 / (1.05 * itl))


def _one_long(horizon_s: float) -> tuple[object, object]:
    cfg = SchedulerConfig(num_gpu_blocks=60_000, max_num_seqs=256, horizon_s=horizon_s)
    wl = Workload(np.zeros(1), np.array([16], np.int32), np.array([1001], np.int32), name="one")
    res = simulate([cfg], wl, S1_LAT)
    return res, res.metrics(SLO(itl_s=1.05 * (B0 + B2 + A2) / 1e9)).iloc[0]


def test_gaps_never_produced_count_as_misses():
    """One request of 1,001 outputs (1,000 gaps of b0 + b2, after one prefill
    step of b0 + 16 b1), cut by a horizon. Gaps owed at the end are +inf:
    with 5 owed (0.5 %) the p99 is still a produced gap, exact, and the SLO
    holds; with ~50 owed (5 %) the p99 is +inf, reported as a lower bound,
    and even a generous SLO misses. Produced + owed gaps are always 1,000."""
    prefill, decode = (B0 + 16 * B1) / 1e9, (B0 + B2) / 1e9
    for owed, bound in ((5, False), (50, True)):
        # the step crossing the horizon still lands its token: cut mid-step
        res, row = _one_long(prefill + (1000 - owed - 0.5) * decode)
        missing, open_ns = missing_gaps(res)
        produced = int(res.state.out.itl_hist[0].sum())
        assert produced + int(missing.sum()) == 1000
        assert int(missing.sum()) == owed and row.unfinished == 1
        assert 0 <= int(open_ns[0, 0]) < B0 + B2  # the last token is within one step of the end
        assert bool(row.itl_s_p99_is_lower_bound) is bound
        assert row.itl_s_p99 == pytest.approx((B0 + B2 + A2) / 1e9, rel=1 / 33)
        assert bool(row.meets_slo) is not bound
        assert row.goodput_rps == 0  # unfinished: no goodput, whatever its gaps


def test_an_overloaded_cut_run_misses_a_generous_itl_slo():
    """S1-exact on 7,463 blocks at max_num_seqs 32, cut at 120 s: 133
    requests unfinished, most of their tokens owed; run to completion the
    same 1 s ITL SLO holds (every gap is a few steps)."""
    cut = SchedulerConfig(num_gpu_blocks=7463, max_num_seqs=32, horizon_s=120.0)
    full = SchedulerConfig(num_gpu_blocks=7463, max_num_seqs=32)
    m = simulate([cut, full], s1_exact()).metrics(SLO(itl_s=1.0))
    assert m.itl_s_p99_is_lower_bound.tolist() == [True, False]
    assert m.meets_slo.tolist() == [False, True]
    assert m.itl_s_p99[0] <= m.itl_s_p99[1] * (1 + 1 / 16)  # a lower bound (same bin or below)


def _judge(cfg, wl, slo, scale):
    m = simulate([cfg], wl, S1_LAT, arrival_s=wl.arrival_s[None, :] / scale).metrics(slo).iloc[0]
    return bool(m.meets_slo), bool(m.overloaded)


def test_max_rate_with_only_an_itl_slo_holds_at_0_9_and_fails_at_1_1():
    """max_rate_scale s under an ITL SLO alone: plan run's metrics at 0.9 s meet
    it and keep up; at 1.1 s they miss it or are overloaded. On 60,000 blocks
    the ITL SLO binds before overload (1.1 s misses it, keeping up)."""
    wl, slo = s1_exact(), SLO(itl_s=0.015)
    cfgs = [BIG, SchedulerConfig(num_gpu_blocks=60_000, max_num_seqs=64)]
    t = search_max_rate(cfgs, wl, S1_LAT, slo).table
    assert (t.max_rate_limit == FOUND).all()
    assert (t.itl_s_p99_at_max_rate <= 0.015).all()
    for cfg, s in zip(cfgs, t.max_rate_scale, strict=True):
        met, over = _judge(cfg, wl, slo, 0.9 * s)
        assert met and not over, (cfg, s)
        met, over = _judge(cfg, wl, slo, 1.1 * s)
        assert (not met) or over, (cfg, s)
    met, over = _judge(BIG, wl, slo, 1.1 * t.max_rate_scale[0])
    assert not met and not over
    # without the ITL SLO the same config sustains more (overload only)
    assert search_max_rate([BIG], wl, S1_LAT, SLO()).table.max_rate_scale[0] > t.max_rate_scale[0]


def test_run_prints_the_itl_verdict(capsys):
    base = ("run", "--num-gpu-blocks", "60000", "--trace-file", S1_CSV)
    code, out, err = run_cli(capsys, *base, "--itl-slo", "0.012")
    assert code == 0, err
    assert "verdict: MISSES SLO (ITL p99 <= 12 ms): itl_s_p99 " in out and "None" not in out
    code, out, err = run_cli(capsys, *base, "--goodput", "itl:30", "--json")
    row = json.loads(out)
    assert row["itl_slo_s"] == 0.03 and row["meets_slo"] is True
    assert row["itl_s_p99_is_lower_bound"] is False and row["itl_s_p99"] <= 0.03
    cut = ("run", "--num-gpu-blocks", "7463", "--max-num-seqs", "32", "--horizon", "120")
    code, out, err = run_cli(capsys, *cut, "--trace-file", S1_CSV, "--itl-slo", "1")
    flat = " ".join(out.split())
    assert code == 0, err
    assert "itl_s_p99 │ ≥ " in flat
    assert "itl_s_p99 ≥ " in flat and "with token gaps never produced by the end" in flat


def test_plan_run_at_max_rates_answer_under_an_itl_slo(capsys):
    """plan max-rate --itl-slo, then plan run --rate-scale at 0.9x and 1.1x of
    its answer (no horizon: to completion), as a user types them."""
    slo = ["--itl-slo", "0.015"]
    pool = ["--trace-file", S1_CSV, "--num-gpu-blocks", "60000", "--max-num-seqs", "256"]
    code, out, err = run_cli(capsys, "max-rate", *pool, *slo, "--json")
    assert code == 0, err
    o = json.loads(out)
    s = o["configs"][0]["max_rate_scale"]
    assert o["itl_slo_s"] == 0.015 and o["configs"][0]["max_rate_limit"] == FOUND
    assert verdicts_around(capsys, [*pool, *slo], s) == [True, False]
    code, out, err = run_cli(capsys, "max-rate", *pool, *slo)
    assert code == 0 and "ITL p99 <= 15 ms (unserved requests miss it)" in " ".join(out.split())


def test_check_and_safe_limit_honour_the_itl_slo(capsys):
    """plan check is SAFE at a loose ITL SLO and UNSAFE at a tight one on the
    same traffic; safe-limit then recommends nothing and prints ITL p99."""
    # S1 at 0.4x its rate: at 1x its 300 requests arrive within one median E2E,
    # too short to judge whether the traffic keeps up (``metrics.overload_judged``)
    base = ["check", "--trace-file", S1_CSV, "--rate-scale", "0.4", "--num-gpu-blocks", "60000"]
    code, out, err = run_cli(capsys, *base, "--itl-slo", "0.05", "--json")
    o = json.loads(out)
    assert code == 0, err
    assert o["verdict"] == "safe" and o["traffic"]["meets_slo"]
    assert o["traffic"]["itl_s_p99"] <= 0.05
    code, out, err = run_cli(capsys, *base, "--itl-slo", "0.005")
    flat = " ".join(out.split())
    assert code == 1, err
    assert "MISSES the SLOs (ITL p99 <= 5 ms)" in flat and "ITL p99 " in flat
    # below one decode step (b0 + b2 + alpha2 = 9.1 ms) no max_num_seqs can meet it
    sl = ["safe-limit", "--trace-file", S1_CSV, "--rate-scale", "0.4", "--num-gpu-blocks", "60000",
          "--itl-slo", "0.005"]  # fmt: skip
    code, out, err = run_cli(capsys, *sl)
    flat = " ".join(out.split())
    assert code == 0, err
    assert "Nothing recommended" in flat and "ITL p99" in flat and "Recommended:" not in flat


@pytest.mark.slow
def test_sweep_slo_section_takes_itl_slo():
    from planner import load_spec, run_sweep

    spec = load_spec("sweeps/quick.toml").with_axes(
        max_num_seqs=[32, 256], num_gpu_blocks=[7463, 60000], preemption_mode=None
    )
    df = run_sweep(spec.with_slo(itl_slo=0.015))
    direct = simulate(
        [
            SchedulerConfig(num_gpu_blocks=n, max_num_seqs=s, horizon_s=120.0)
            for s in (32, 256)
            for n in (7463, 60000)
        ],
        s1_exact(),
    ).metrics(SLO(itl_s=0.015))
    assert df.itl_slo_s.tolist() == [0.015] * 4
    assert df.meets_slo.tolist() == direct.meets_slo.tolist()
    assert df.goodput_rps.tolist() == pytest.approx(direct.goodput_rps.tolist())
    # [search] at that [slo]: the ITL SLO bounds max_rate_scale as in plan max-rate
    found = run_sweep(spec.with_slo(itl_slo=0.015).with_search())
    cfgs = [
        SchedulerConfig(num_gpu_blocks=n, max_num_seqs=s) for s in (32, 256) for n in (7463, 60000)
    ]
    direct = search_max_rate(cfgs, s1_exact(), S1_LAT, SLO(itl_s=0.015)).table
    none = search_max_rate(cfgs, s1_exact(), S1_LAT, SLO()).table
    assert found.max_rate_scale.tolist() == pytest.approx(direct.max_rate_scale.tolist())
    assert (direct.max_rate_scale < none.max_rate_scale).any()  # the ITL SLO binds somewhere
    with pytest.raises(ValueError, match="slo.itl_slo must be at least 1e-09"):
        spec.with_slo(itl_slo=0.0)
    with pytest.raises(ValueError, match="slo.itl_slo and slo.goodput both set itl"):
        spec.with_slo(itl_slo=0.02, goodput="itl:20")


def test_heatmap_contour_label_names_the_itl_slo():
    """plan heatmap --slo-contour outlines ``meets_slo`` (the ITL SLO included,
    test above) and names the sweep's SLOs from its columns."""
    import pandas as pd

    from planner.plots.heatmap import _slo

    nan = float("nan")
    df = pd.DataFrame({"ttft_slo_s": [2.0], "tpot_slo_s": [nan], "itl_slo_s": [0.015]})
    assert _slo(df) == "TTFT p99 <= 2 s, ITL p99 <= 0.015 s and keeps up (judged not overloaded)"
