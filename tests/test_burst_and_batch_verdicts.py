"""Verdicts on workloads whose rate cannot be judged: a batch sent at once
has no rate to keep up with, a burst is too short to judge one, and a run cut
before anything completes is neither overloaded nor shown to keep up."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from helpers import run_cli
from planner import metrics

S1_CSV = Path(__file__).parents[1] / "planner" / "data" / "s1_seed7.csv"


def _offline_s1(tmp_path: Path) -> str:
    """S1's requests, every one sent at time 0."""
    df = pd.read_csv(S1_CSV)
    df["arrival_time_s"] = 0.0
    path = tmp_path / "s1_offline.csv"
    df.to_csv(path, index=False)
    return str(path)


def test_check_on_a_batch_claims_no_rate(capsys, tmp_path):
    """plan check said the batch 'keeps up' with 'nan of nan req/s'; it
    now judges the batch against the SLOs only, and says there is no rate."""
    args = ["check", "--num-gpu-blocks", "60000", "--max-num-seqs", "256"]
    args += ["--trace-file", _offline_s1(tmp_path), "--ttft-slo", "100"]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "nan" not in out and "keeps up" not in out
    assert "serves this batch and meets the SLOs" in out and "no arrival rate" in out
    code, out, err = run_cli(capsys, *args, "--json")
    traffic = json.loads(out)["traffic"]
    assert traffic["sent_at_once"] is True and traffic["keeps_up"] is None
    # an SLO the batch misses still fails it
    code, out, err = run_cli(capsys, *args[:-1], "1")
    assert code == 1 and "UNSAFE" in out and "misses the SLOs" in out
    assert "overloaded" not in out  # a batch has no rate to be overloaded at
    assert "the batch (sent at once, no rate) misses the SLOs" in out


def test_safe_limit_on_a_batch_claims_no_rate(capsys, tmp_path):
    args = ["safe-limit", "--num-gpu-blocks", "60000", "--trace-file", _offline_s1(tmp_path)]
    code, out, err = run_cli(capsys, *args, "--ttft-slo", "100")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("recommendation:"))
    assert "Recommended: max_num_seqs" in line and "serve this batch sent at once" in line
    assert "nan" not in line and "keeps up" not in line and "the offered load" not in line


def test_safe_limit_cut_by_its_horizon_is_not_called_overloaded(capsys):
    """S1's requests run about 35 s: with --horizon 20 the values large enough
    to admit every arrival complete nothing and are not overloaded, so 'every
    one is overloaded' was false."""
    args = ["safe-limit", "--num-gpu-blocks", "60000", "--trace-file", str(S1_CSV)]
    code, out, err = run_cli(capsys, *args, "--horizon", "20", "--json")
    assert code == 0, err
    o = json.loads(out)
    assert o["recommended"] is None
    rows = pd.DataFrame(o["evaluated"])
    stuck = (rows.completed == 0) & ~rows.overloaded & rows.overload_judged.isin([True, False])
    assert stuck.any() and rows.overloaded.any()  # both kinds are present
    text = o["recommendation"]
    assert "every one is overloaded" not in text
    assert f"{int(rows.overloaded.sum())} values are overloaded" in text
    assert "complete no request before the run ends" in text


def test_burst_advice_names_what_each_command_takes(capsys):
    """The advice to offer more requests names the option the command has."""
    code, out, _ = run_cli(
        capsys, "check", "--num-gpu-blocks", "60000", "--trace-file", str(S1_CSV), "--ttft-slo", "2"
    )
    assert code == 1 and "NOT SHOWN SAFE" in out
    assert "--trace-duration" in out and "--num-requests" not in out
    code, out, _ = run_cli(capsys, "run", "--num-requests", "100", "--rate", "150")
    assert "overload not judged" in out and "more requests (--num-requests)" in out
    code, out, _ = run_cli(capsys, "run", "--trace-file", str(S1_CSV), "--num-gpu-blocks", "60000")
    assert "overload not judged" in out and "--trace-duration" in out


def _row(window: float, e2e: np.ndarray) -> dict:
    arrival = np.linspace(0.0, window, len(e2e))[None, :]
    first = arrival + 0.01
    out = metrics.overload(
        arrival, first, np.array([window + e2e.max()]), np.array([len(e2e)]), lifetime_s=e2e[None]
    )
    return {k: v[0] for k, v in out.items()}


def test_a_window_is_judged_from_two_median_lifetimes():
    """One median E2E fills the running set and one more shows a queue: the
    verdict is judged at OVERLOAD_MIN_LIFETIMES (2) x the median, not below;
    an unfinished majority (+inf lifetimes) never judges a window > 0."""
    assert metrics.OVERLOAD_MIN_LIFETIMES == 2.0
    e2e = np.full(40, 10.0)
    assert not _row(19.9, e2e)["overload_judged"]
    assert _row(20.0, e2e)["overload_judged"]
    assert not _row(1e6, np.full(40, np.inf))["overload_judged"]
    assert _row(0.0, e2e)["overload_judged"]  # a batch: nothing to judge, no burst


def test_the_judged_lifetime_is_weighted_by_occupancy():
    """90 requests of 1 s and 10 of 100 s: the long ones hold 10 / 10.9 of the
    running set's request-seconds, so the lifetime the rule uses is theirs
    (100 s), not the plain median (1 s); an unfinished request counts as
    +inf, weighted by its lower bound."""
    life = np.array([[1.0] * 90 + [100.0] * 10])
    mask = np.ones(life.shape, bool)
    assert metrics.occupancy_median(life, None, mask)[0] == 100.0
    assert metrics.occupancy_median(np.full((1, 10), 5.0), None, mask[:, :10])[0] == 5.0
    unfinished = np.zeros(life.shape, bool)
    unfinished[0, 90:] = True  # the long ones still running at 100 s
    assert metrics.occupancy_median(life, unfinished, mask)[0] == np.inf
    assert metrics.occupancy_median(life, None, np.zeros(life.shape, bool))[0] == 0.0
    e2e = np.array([1.0] * 90 + [100.0] * 10)
    assert not _row(150.0, e2e)["overload_judged"]  # 1.5 x the weighted lifetime
    assert _row(200.0, e2e)["overload_judged"]


def test_report_and_heatmap_say_a_batch_is_served_not_kept_up_with():
    """plan report's run verdict, its sweep recommendation and the heatmap's
    SLO-contour legend said 'keeps up' for a batch sent at once."""
    from planner.plots.heatmap import _slo
    from planner.report.page import _one_recommendation, run_verdict

    rec = {"outcome": "ok", "overloaded": False, "overload_judged": True, "meets_slo": True}
    rec |= {"ttft_slo_s": 5.0, "overload_window_s": 0.0}
    assert "serves this batch" in run_verdict(rec) and "keeps up" not in run_verdict(rec)
    assert "keeps up" in run_verdict(rec | {"overload_window_s": 30.0})
    df = pd.DataFrame(
        {
            "config_id": [0, 1], "max_num_seqs": [8, 16], "num_gpu_blocks": [1000, 1000],
            "meets_slo": [True, True], "overloaded": [False, False],
            "overload_judged": [True, True], "overload_window_s": [0.0, 0.0],
            "completed": [5, 5], "livelocked": [False, False], "step_limit_hit": [False, False],
            "goodput_rps": [1.0, 1.0], "ttft_slo_s": [5.0, 5.0],
        }
    )  # fmt: skip
    text = _one_recommendation(df, "max_num_seqs", "num_gpu_blocks", ["max_num_seqs"])
    assert "serves this batch" in text and "keeps up" not in text
    assert "serves its batch" in _slo(df) and "keeps up" not in _slo(df)
    assert "keeps up" in _slo(df.assign(overload_window_s=30.0))
