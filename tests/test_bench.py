"""plan bench --enable-prefix-caching also times the plain grid and prints the
cost ratio issue 17 asks for (no timing is asserted: only that the figures
are measured and printed)."""

from __future__ import annotations

from pathlib import Path

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
    from planner import resolve

    blocks, _ = resolve.num_gpu_blocks(
        None, "llama-3.1-8b", "H100", 0.9, 16, 1, 0, max_num_seqs=256, max_num_batched_tokens=2048
    )
    assert f"{blocks:,} blocks" in out  # the H100 preset's pool for Llama-3.1-8B
    page = (Path(__file__).parents[1] / "docs" / "prefix-caching.md").read_text()
    assert f"Llama-3.1-8B linear preset, {blocks:,}\nblocks" in page  # the page quotes it
    for mnbt in MOONCAKE_MNBT:
        plain, caching = fig[f"plain_{mnbt}_s"], fig[f"caching_{mnbt}_s"]
        assert plain > 0 and caching > 0 and fig[f"ratio_{mnbt}"] == caching / plain
        assert f"{plain:.3f} s without caching, {caching:.3f} s with it" in out
    code, _, err = run_cli(capsys, "bench", "--mooncake", "--enable-prefix-caching")
    assert code == 2 and "has no effect with --mooncake" in err


def _fake_figures(scale: float) -> dict[str, float]:
    from planner.answers.bench_record import FIGURES

    return {f.key: scale * (i + 1) for i, f in enumerate(FIGURES)}


def test_record_writes_every_figure_and_compares_with_an_earlier_one(capsys, tmp_path, monkeypatch):
    """--record --out writes a JSON record of every figure; --against prints
    each figure beside the earlier record with now/before. The measuring is
    replaced (it takes minutes; each figure's bench is tested on its own)."""
    import json

    from planner.answers import bench_record as BR

    monkeypatch.setattr(BR, "measure_record", lambda repeats: _fake_figures(2.0))
    before = tmp_path / "before.json"
    before.write_text(json.dumps({"figures": _fake_figures(1.0)}))
    out = tmp_path / "now.json"
    code, text, err = run_cli(
        capsys, "bench", "--record", "--out", str(out), "--against", str(before)
    )
    assert code == 0, err
    rec = json.loads(out.read_text())
    assert rec["figures"] == _fake_figures(2.0)
    assert rec["planner_version"] and rec["repeats"] == 3
    lines = text.splitlines()
    assert len(lines) == 1 + len(BR.FIGURES)
    for f, line in zip(BR.FIGURES, lines[1:], strict=True):
        assert line.startswith(f.label) and line.endswith("2.00x")


def test_record_refuses_bad_files_and_stray_options(capsys, tmp_path):
    """Each is refused in one line before anything is measured (a hostile
    tryout's cases: an --out under /proc, a deeply nested or unusable
    --against, a named pipe)."""
    import os

    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)
    unusable = {
        "nan": '{"figures": {"grid32_plain_mtok_per_cpu_s": NaN}}',
        "bool": '{"figures": {"grid32_plain_mtok_per_cpu_s": true}}',
        "zero": '{"figures": {"grid32_plain_mtok_per_cpu_s": 0}}',
        "unknown": '{"figures": {"unrelated": 1.0}}',
    }
    for name, text in unusable.items():
        (tmp_path / f"{name}.json").write_text(text)
    cases = [
        (("--record", "--against", str(deep)), "nested too deeply"),
        (("--record", "--against", str(pipe)), "not a regular file"),
        (("--record", "--against", str(tmp_path / "nan.json")), "not a finite number above 0"),
        (("--record", "--against", str(tmp_path / "bool.json")), "not a finite number above 0"),
        (("--record", "--against", str(tmp_path / "zero.json")), "not a finite number above 0"),
        (("--record", "--against", str(tmp_path / "unknown.json")), "none of its figures"),
        (("--record", "--out", "/proc/planner-record.json"), "cannot write there"),
        (("--record", "--against", str(bad)), "no 'figures' object"),
        (("--record", "--against", str(tmp_path / "missing.json")), "not a regular file"),
        (
            ("--record", "--out", str(tmp_path / "no" / "x.json")),
            "not a file in an existing folder",
        ),
        (("--record", "--out", str(tmp_path)), "not a file in an existing folder"),
        (("--out", str(tmp_path / "x.json")), "has no effect without --record"),
        (("--record", "--grid", "8"), "--grid has no effect with --record"),
        (("--record", "--repeats", "0"), "--repeats"),
    ]
    for args, why in cases:
        code, _, err = run_cli(capsys, "bench", *args)
        assert code == 2 and why in err and len(err.strip().splitlines()) == 1, (args, err)


def test_against_a_subnormal_figure_says_off_scale(capsys):
    """A figure of 1e-320 in an earlier record is positive and finite, so it
    is read; now/before overflows and is shown as off scale, not ``infx``."""
    from planner.answers.bench_record import FIGURES, print_record

    key = FIGURES[0].key
    print_record({key: 300.0}, {key: 1e-320})
    out = capsys.readouterr().out
    assert "off scale" in out and "inf" not in out
