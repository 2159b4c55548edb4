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
