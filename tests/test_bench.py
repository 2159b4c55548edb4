"""plan bench --enable-prefix-caching also times the plain grid and prints the
cost ratio issue 17 asks for (no timing is asserted: only that the figures
are measured and printed)."""

from __future__ import annotations

from helpers import run_cli
from planner.answers.bench import run_bench


def test_caching_bench_prints_its_cost_against_the_plain_grid(capsys):
    fig = run_bench(2, False, enable_prefix_caching=True)
    out = capsys.readouterr().out
    assert fig["sim_output_tokens"] > 0
    assert fig["caching_cost_ratio"] == fig["plain_tokens_per_cpu_s"] / fig["tokens_per_cpu_s"]
    assert f"caching / plain CPU per token: {fig['caching_cost_ratio']:10.2f}x" in out


def test_plain_bench_prints_no_ratio(capsys):
    code, out, err = run_cli(capsys, "bench", "--grid", "2", "--no-reference")
    assert code == 0, err
    assert "caching / plain" not in out


def test_an_inert_switch_is_named_as_given(capsys):
    """The refusal names the spelling the user typed: --no-reference, not
    --reference (tryout finding)."""
    for flag in ("--no-reference", "--reference"):
        code, _, err = run_cli(capsys, "bench", flag, "--startup")
        assert code == 2
        why = "has no effect with --startup (it times fresh plan run processes)"
        assert err.strip() == f"plan: error: {flag} {why}"


def test_mooncake_bench_times_caching_off_and_on(capsys):
    from planner.answers.bench import MOONCAKE_MNBT, run_mooncake_bench

    fig = run_mooncake_bench(repeats=1)
    out = capsys.readouterr().out
    assert "28,204 blocks" in out  # the H100 preset's pool for Llama-3.1-8B
    for mnbt in MOONCAKE_MNBT:
        plain, caching = fig[f"plain_{mnbt}_s"], fig[f"caching_{mnbt}_s"]
        assert plain > 0 and caching > 0 and fig[f"ratio_{mnbt}"] == caching / plain
        assert f"{plain:.3f} s without caching, {caching:.3f} s with it" in out
    code, _, err = run_cli(capsys, "bench", "--mooncake", "--enable-prefix-caching")
    assert code == 2 and "has no effect with --mooncake" in err
