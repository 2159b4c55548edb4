"""SLOs (issue 13, items 1 and 4 of the SLO work): one definition, vLLM bench's
goodput form, and unserved requests counted in the percentiles and verdicts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import run_cli
from planner.api import simulate
from planner.config import SchedulerConfig
from planner.slo import SLO, SLOError, from_options, parse_goodput
from planner.workload.traces import s1_exact


def test_goodput_form_is_milliseconds_and_matches_the_options():
    assert parse_goodput(["ttft:2000 tpot:50 e2el:60000"]) == {
        "ttft_s": 2.0,
        "tpot_s": 0.05,
        "e2e_s": 60.0,
    }
    assert parse_goodput(["ttft:2000", "tpot:50"]) == parse_goodput(["ttft:2000,tpot:50"])
    assert from_options(goodput="ttft:2000 e2el:60000") == SLO(ttft_s=2.0, e2e_s=60.0)
    assert from_options(2.0, 0.05) == from_options(goodput=["ttft:2000", "tpot:50"])


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"ttft_slo": 0.0}, "--ttft-slo must be at least 1e-09"),
        ({"tpot_slo": -1.0}, "--tpot-slo must be at least 1e-09"),
        ({"e2e_slo": float("nan")}, "--e2e-slo must be a finite number"),
        ({"goodput": "ttft:0"}, "ttft must be > 0 ms"),
        ({"goodput": "ttft=5"}, "expected KEY:MS"),
        ({"goodput": "ttft:5 ttft:6"}, "ttft given twice"),
        ({"goodput": "latency:5"}, r"unknown metric 'latency' \(known: ttft, tpot, itl, e2el\)"),
        ({"itl_slo": 0.0}, "--itl-slo must be at least 1e-09"),
        ({"itl_slo": -0.01}, "--itl-slo must be at least 1e-09"),
        ({"goodput": "itl:0"}, "itl must be > 0 ms"),
        ({"goodput": "itl:5 itl:6"}, "itl given twice"),
        ({"itl_slo": 0.02, "goodput": "itl:20"}, "--itl-slo and --goodput both set itl"),
        ({"goodput": ""}, "expected KEY:MS pairs"),
        ({"ttft_slo": 2.0, "goodput": "ttft:2000"}, "--ttft-slo and --goodput both set ttft"),
    ],
)
def test_bad_slos_are_one_line_errors(kwargs, needle):
    with pytest.raises(SLOError, match=needle) as e:
        from_options(**kwargs)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "args",
    [
        ("--ttft-slo", "0"),
        ("--tpot-slo", "-0.5"),
        ("--e2e-slo", "0"),
        ("--goodput", "ttft:0"),
        ("--goodput", "e2el:-3"),
        ("--itl-slo", "0"),
        ("--goodput", "itl:0"),
    ],
)
@pytest.mark.parametrize("command", ["run", "safe-limit", "max-rate"])
def test_slo_at_or_below_zero_exits_2_with_one_line(capsys, command, args):
    code, out, err = run_cli(capsys, command, "--num-gpu-blocks", "7463", *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("plan: error: ")


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--itl-slo", "0"), "--itl-slo"),
        (("--itl-slo", "-0.02"), "--itl-slo"),
        (("--goodput", "itl:0"), "itl must be > 0 ms"),
        (("--itl-slo", "0.02", "--goodput", "itl:20"), "--itl-slo and --goodput both set itl"),
        (("--goodput", "itl:20 itl:30"), "itl given twice"),
    ],
)
@pytest.mark.parametrize("command", ["run", "check", "safe-limit", "max-rate"])
def test_bad_itl_slo_exits_2_with_one_line(capsys, command, args, needle):
    """Every command that takes SLOs refuses a bad ITL SLO before any run."""
    base = (command, "--num-gpu-blocks", "7463", "--trace-file", "planner/data/s1_seed7.csv")
    code, out, err = run_cli(capsys, *base, *args)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("plan: error: ") and needle in err


@pytest.fixture(scope="module")
def s1_horizon_and_full():
    """S1-exact on 7,463 blocks at max_num_seqs 32 (overloaded: 101 requests have
    no first token at 120 s), cut at 120 s and run to completion. Every request
    arrives by 30 s, so both runs count the same requests."""
    cut = SchedulerConfig(num_gpu_blocks=7463, max_num_seqs=32, horizon_s=120.0)
    full = SchedulerConfig(num_gpu_blocks=7463, max_num_seqs=32)
    m = simulate([cut, full], s1_exact()).metrics()
    return m.iloc[0], m.iloc[1]


STATS = ("mean", "p50", "p90", "p99")


@pytest.mark.parametrize("metric", ["ttft_s", "tpot_s", "e2e_s", "queue_delay_s"])
def test_horizon_statistics_are_exact_or_flagged_lower_bounds(s1_horizon_and_full, metric):
    """The run to completion knows every request's latency: a statistic of the
    cut run flagged as a lower bound is at most the true one; an unflagged one
    is the true one (unserved requests cannot move it)."""
    cut, full = s1_horizon_and_full
    assert full.unserved == 0 and full.unfinished == 0
    flagged = 0
    for stat in STATS:
        key = f"{metric}_{stat}"
        if key not in cut:
            continue
        assert not full[f"{key}_is_lower_bound"]
        if cut[f"{key}_is_lower_bound"]:
            flagged += 1
            assert cut[key] <= full[key] + 1e-9, key
        else:
            assert cut[key] == pytest.approx(full[key], rel=1e-12), key
    assert flagged >= 1  # 101 unserved requests: the p99 depends on them


def test_unserved_requests_raise_the_percentiles(s1_horizon_and_full):
    """Dropping the unserved (the old rule) understated TTFT p99 exactly when
    overloaded: the served-only p99 is below what is now reported (a lower
    bound), which is below the true p99 of the run to completion."""
    cut, full = s1_horizon_and_full
    assert cut.overloaded and cut.unserved == 101
    res = simulate(
        [SchedulerConfig(num_gpu_blocks=7463, max_num_seqs=32, horizon_s=120.0)], s1_exact()
    )
    st, arr = res.state, res.arrival_ns
    served = (st.req.first_ns[0] >= 0) & (st.req.first_ns[0] <= 120e9)
    old_p99 = np.percentile((st.req.first_ns[0][served] - arr[served]) / 1e9 + 3357.44e-6, 99)
    assert old_p99 < cut.ttft_s_p99 <= full.ttft_s_p99
    assert full.ttft_s_p99 > old_p99 + 10
    assert cut.ttft_s_p99_is_lower_bound


def test_slo_verdict_counts_unserved_as_misses(s1_horizon_and_full):
    """A TTFT SLO far above every lower bound still fails: the unserved are misses.
    Run to completion, the same SLO is judged on exact values."""
    cfgs = [
        SchedulerConfig(num_gpu_blocks=7463, max_num_seqs=32, horizon_s=120.0),
        SchedulerConfig(num_gpu_blocks=7463, max_num_seqs=32),
        SchedulerConfig(num_gpu_blocks=60000, max_num_seqs=256, horizon_s=120.0),
    ]
    slo = SLO(ttft_s=1e6)
    m = simulate(cfgs, s1_exact()).metrics(slo)
    assert m.meets_slo.tolist() == [False, True, True]
    assert m.ttft_slo_s.tolist() == [1e6] * 3 and m.tpot_slo_s.isna().all()


def test_goodput_by_hand():
    """goodput_rps = requests finished by the horizon meeting every SLO, per
    second of the horizon (vLLM's rule), recomputed from the kernel's times."""
    cfg = SchedulerConfig(num_gpu_blocks=60000, max_num_seqs=256, horizon_s=120.0)
    res = simulate([cfg], s1_exact())
    slo = SLO(ttft_s=0.02, e2e_s=37.0)
    m = res.metrics(slo).iloc[0]
    st, arr, a2 = res.state, res.arrival_ns, 3357.44e-6
    done = (st.req.finish_ns[0] >= 0) & (st.req.finish_ns[0] <= 120e9)
    ttft = (st.req.first_ns[0] - arr) / 1e9 + a2
    e2e = (st.req.finish_ns[0] - arr) / 1e9 + a2 * st.req.nout[0]
    good = done & (ttft <= 0.02) & (e2e <= 37.0)
    assert 0 < good.sum() < done.sum()  # both SLOs bite on some requests
    assert m.goodput_rps == pytest.approx(good.sum() / 120.0)


def test_run_prints_lower_bounds_and_the_slo_verdict(capsys):
    args = ("run", "--num-gpu-blocks", "7463", "--max-num-seqs", "32", "--horizon", "120")
    args += ("--trace-file", "planner/data/s1_seed7.csv", "--goodput", "ttft:2000 e2el:60000")
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "ttft_s_p99           │ ≥ " in out
    assert "verdict: MISSES SLO (TTFT p99 <= 2 s, E2E p99 <= 60 s)" in out
    assert "None" not in out
    code, out, _ = run_cli(capsys, *args, "--json")
    row = json.loads(out)
    assert row["ttft_s_p99_is_lower_bound"] is True and row["meets_slo"] is False
    assert row["e2e_slo_s"] == 60.0 and row["unserved"] == 101
    for key in ("queue_delay_s_p50", "queue_delay_s_p99", "goodput_rps"):
        assert key in row


def test_sweep_spec_slo_section_adds_goodput_and_the_verdict():
    from planner import load_spec, run_sweep
    from planner.sweep.spec import load_spec_text

    spec = load_spec("sweeps/quick.toml").with_axes(
        max_num_seqs=[32, 256], num_gpu_blocks=[7463, 60000], preemption_mode=None
    )
    df = run_sweep(spec.with_slo(goodput="ttft:2000 e2el:60000"))
    direct = simulate(
        [
            SchedulerConfig(num_gpu_blocks=n, max_num_seqs=s, horizon_s=120.0)
            for s in (32, 256)
            for n in (7463, 60000)
        ],
        s1_exact(),
    ).metrics(SLO(ttft_s=2.0, e2e_s=60.0))
    assert df.meets_slo.tolist() == direct.meets_slo.tolist()
    assert df.goodput_rps.tolist() == pytest.approx(direct.goodput_rps.tolist())
    assert df.e2e_slo_s.tolist() == [60.0] * 4
    assert df.meets_slo.any() and not df.meets_slo.all()
    with pytest.raises(ValueError, match="slo.ttft_slo must be at least 1e-09"):
        spec.with_slo(ttft_slo=0.0)
    text = spec.to_toml() + "\n[slo]\n"
    needle = "slo: give ttft_slo, tpot_slo, itl_slo, e2e_slo or goodput"
    with pytest.raises(ValueError, match=needle):
        load_spec_text(text, spec.base_dir)


S1_CSV = "planner/data/s1_seed7.csv"


def test_check_with_an_slo_judges_the_traffic(capsys):
    """plan check's SAFE covers the SLOs and overload once they are given."""
    base = ["check", "--trace-file", S1_CSV, "--ttft-slo", "2"]
    code, out, err = run_cli(
        capsys, *base, "--num-gpu-blocks", "7463", "--max-num-seqs", "32", "--horizon", "120"
    )
    flat = " ".join(out.split())
    assert code == 1, err
    assert "traffic at max_num_seqs 32: is OVERLOADED and MISSES the SLOs" in flat
    assert "TTFT p99 ≥ 99.7 s" in flat and "verdict: UNSAFE" in flat and " SAFE -" not in flat
    # at 0.4x S1's rate: at 1x its arrivals are a burst too short to judge
    code, out, err = run_cli(
        capsys, *base, "--num-gpu-blocks", "60000", "--rate-scale", "0.4", "--json"
    )
    o = json.loads(out)
    assert code == 0, err
    assert o["verdict"] == "safe" and o["traffic"]["keeps_up"] and o["traffic"]["meets_slo"]
    assert o["traffic"]["ttft_s_p99"] < 2 and o["traffic"]["max_num_seqs"] == 256


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["--max-num-seqs", "32"],
            "--max-num-seqs needs --model and --gpu without --num-gpu-blocks",
        ),
        (["--latency", "roofline"], "--latency needs an SLO"),
        (["--ttft-slo", "2"], "--ttft-slo needs --trace-file"),
        (["--goodput", "ttft:2000"], "--goodput needs --trace-file"),
    ],
)
def test_check_refuses_simulation_options_without_an_slo(capsys, args, needle):
    code, _, err = run_cli(capsys, "check", "--num-gpu-blocks", "60000", *args)
    assert code == 2 and err.count("\n") == 1 and needle in err
