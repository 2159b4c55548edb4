"""--gamma-cv: the gamma arrival process's coefficient of variation on the
command line (a sweep spec's workload.gamma_cv had it; the command line
offered gamma arrivals only at CV 1, i.e. poisson)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from helpers import run_cli


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_the_gaps_have_the_coefficient_of_variation_asked(capsys, tmp_path, cv):
    path = tmp_path / "r.csv"
    args = ("run", "--arrival", "gamma", "--gamma-cv", str(cv), "--num-requests", "4000")
    code, out, err = run_cli(capsys, *args, "--rate", "50", "--requests-out", str(path))
    assert code == 0, err
    gaps = np.diff(np.sort(pd.read_csv(path).arrival_s.to_numpy()))
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)


@pytest.mark.parametrize(
    "extra,needle",
    [
        (("--gamma-cv", "2"), "--gamma-cv needs --arrival gamma"),
        (("--arrival", "poisson", "--gamma-cv", "2"), "--gamma-cv needs --arrival gamma"),
        (("--trace-file", "planner/data/s1_seed7.csv", "--gamma-cv", "2"), "--trace-file"),
        (("--arrival", "gamma", "--gamma-cv", "0"), "--gamma-cv must be"),
    ],
)
@pytest.mark.parametrize("command", ["run", "max-rate", "safe-limit"])
def test_a_gamma_cv_with_no_effect_is_refused(capsys, command, extra, needle):
    pool = () if command == "run" else ("--num-gpu-blocks", "7463")
    code, out, err = run_cli(capsys, command, *pool, *extra)
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_gaps_so_dispersed_that_every_arrival_coincides_are_refused(capsys):
    """--gamma-cv 1000 drew all 300 arrivals at t = 0: plan run quietly ran a
    batch and plan max-rate called it offline (tryout finding)."""
    for command in ("run", "max-rate"):
        pool = () if command == "run" else ("--num-gpu-blocks", "7463")
        args = (command, *pool, "--arrival", "gamma", "--gamma-cv", "1000")
        code, out, err = run_cli(capsys, *args)
        assert code == 2 and "at one instant" in err and err.count("\n") == 1, err


def test_a_drawn_rate_far_from_the_asked_one_is_named(capsys):
    """CV 50 over 3,000 requests drew 3.58 req/s against --rate 2, unsaid."""
    args = ("run", "--arrival", "gamma", "--gamma-cv", "50", "--num-requests", "3000")
    code, out, err = run_cli(capsys, *args, "--rate", "2")
    assert code == 0 and "not the --rate 2 asked" in err, err
    code, out, err = run_cli(capsys, "run", "--arrival", "poisson", "--rate", "2")
    assert code == 0 and "not the --rate" not in err
