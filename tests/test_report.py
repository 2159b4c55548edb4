"""``plan report`` (issue 37): one self-contained HTML page per result.

Each kind of page (sweep, sizing, run) is rendered from a result made here,
and opened in a real headless browser (Debian's ``chromium`` through
Playwright): no console error, no request beyond the page itself, and its
headline figures equal the result's Parquet/JSON. Folders that are not a
finished result, or were written before results recorded the planner's
version, are one line and exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from helpers import plan_quiet, run_cli
from planner.install_check import VERSION

ROOT = Path(__file__).resolve().parents[1]
SMALL_SIZE = ROOT / "tests" / "data" / "size_small.toml"
SWEEP = """name = "report-sweep"
description = "a small pool-given sweep with an SLO, for plan report"
horizon_s = 60.0
[workload]
kind = "synthetic"
num_requests = 40
rate = 4
[workload.prompt]
mean = 300
[workload.output]
mean = 200
[scheduler]
max_num_batched_tokens = 2048
max_model_len = 4096
[slo]
ttft_slo = 1.0
[axes]
max_num_seqs = [4, 16, 64]
num_gpu_blocks = [200, 800, 3000]
"""
RUN_ARGS = ("--num-requests", "60", "--rate", "6", "--ttft-slo", "1")
REAL_RUN = ROOT / "planner" / "data" / "real-runs-llmservingsim" / "RTX4090_Llama-3.1-8B"
VALIDATE_ARGS = (str(REAL_RUN), "--model", "llama-3.1-8b", "--latency", "roofline")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, Path]:
    """One result of each kind, and its page."""
    tmp = tmp_path_factory.mktemp("results")
    spec = tmp / "sweep.toml"
    spec.write_text(SWEEP)
    out = {k: tmp / k for k in ("sweep", "size", "run", "validate")}
    runs = {
        "sweep": ("sweep", str(spec), "--out", str(out["sweep"])),
        "size": ("size", str(SMALL_SIZE), "--gpus", "H100,L40S", "--max-replicas", "2",
                 "--out", str(out["size"])),
        "run": ("run", *RUN_ARGS, "--out", str(out["run"])),
        "validate": ("validate", *VALIDATE_ARGS, "--out", str(out["validate"])),
    }  # fmt: skip
    for kind, argv in runs.items():
        code, err = plan_quiet(*argv)
        assert code == 0, (kind, err)
        code, err = plan_quiet("report", str(out[kind]))
        assert code == 0, (kind, err)
    return out


def _page(folder: Path) -> str:
    return (folder / "report.html").read_text()


@pytest.mark.parametrize("kind", ["sweep", "size", "run", "validate"])
def test_a_page_is_self_contained(results, kind):
    page = _page(results[kind])
    assert page.startswith("<!doctype html>")
    for outside in ("http://", "https://", "<link", 'src="/', "@import"):
        assert outside not in page, outside
    assert f"planner {VERSION}" in page and "vLLM 0.33.0" in page
    assert "data:image/png;base64," in page


def test_results_record_the_planner_version(results, capsys):
    run = json.loads((results["run"] / "run.json").read_text())
    size = json.loads((results["size"] / "answer.json").read_text())
    check = json.loads((results["validate"] / "validate.json").read_text())
    for rec in (run, size, check):
        assert rec["planner_version"] == VERSION and rec["vllm_version_mirrored"] == "0.33.0"
    code, out, _ = run_cli(capsys, "run", "--num-requests", "5", "--json")
    assert code == 0 and json.loads(out)["planner_version"] == VERSION


def test_a_run_records_its_itl_distribution(results):
    """run.json's ITL histogram holds every gap between two tokens of the run."""
    rec = json.loads((results["run"] / "run.json").read_text())
    per = pd.read_parquet(results["run"] / "requests.parquet")
    assert rec["completed"] == len(per)  # every request finished: no gap owed
    gaps = (per["output_tokens"] - 1).clip(lower=0).sum()
    assert sum(rec["itl_histogram"]["count"]) == gaps
    itl = rec["itl_histogram"]["itl_s"]
    assert itl == sorted(itl) and itl[0] <= rec["itl_s_p50"] <= itl[-1]
    assert "ITL (s)" not in _page(results["run"])  # drawn into the picture, not the text


def test_the_sweep_page_names_the_recommended_configuration(results):
    from planner.plots.heatmap import recommended

    df = pd.read_parquet(results["sweep"] / "data.parquet")
    row = recommended(df, "max_num_seqs", "num_gpu_blocks")
    assert row is not None  # the fixture's SLO is met somewhere
    assert f"(config_id {int(row['config_id'])}): meets the SLOs" in _page(results["sweep"])


def test_a_sweep_of_more_axes_pins_the_rest_and_says_so(tmp_path):
    spec = tmp_path / "four.toml"
    text = SWEEP.replace("max_model_len = 4096\n", "")
    text += 'preemption_mode = ["recompute", "restart"]\nmax_model_len = [2048, 4096]\n'
    spec.write_text(text)
    code, err = plan_quiet("sweep", str(spec), "--out", str(tmp_path / "four"))
    assert code == 0, err
    code, err = plan_quiet("report", str(tmp_path / "four"))
    assert code == 0, err
    page = _page(tmp_path / "four")
    assert page.count("over max_num_seqs x num_gpu_blocks at max_model_len=2048</p>") == 4
    assert "not drawn" not in page


# --- in a real browser --------------------------------------------------------------


def _browser():
    """Playwright's Chromium on Debian's chromium binary, or a skip saying why."""
    playwright = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install '.[test]')"
    )
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("no chromium binary: .ci/run installs Debian's chromium with apt-get")
    return playwright.sync_playwright(), exe


def _open(folder: Path) -> tuple[dict[str, str], list[str], list[str], str]:
    """Open the page: (headline key -> text, console errors, outside requests, verdict)."""
    ctx, exe = _browser()
    with ctx as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto((folder / "report.html").as_uri())
        page.wait_for_load_state("load")
        heads = {
            el.get_attribute("data-key"): el.query_selector("b").inner_text()
            for el in page.query_selector_all("#headline [data-key]")
        }
        verdict = page.inner_text("#verdict") if page.query_selector("#verdict") else ""
        page.emulate_media(media="print")  # prints on A4
        pdf = page.pdf(format="A4")
        assert pdf.startswith(b"%PDF") and len(pdf) > 10_000
        page.emulate_media(media="screen")
        # Sorting works: a click on the first header orders the rows by it.
        table = page.query_selector("table.sortable")
        table.query_selector("th").click()
        first = table.eval_on_selector_all(
            "tbody tr", "rows => rows.map(r => r.cells[0].dataset.v)"
        )
        browser.close()
    outside = [u for u in requests if u != (folder / "report.html").as_uri()]
    keys = [float(v) if _number(v) else v for v in first]
    assert keys == sorted(keys, key=lambda v: (isinstance(v, str), v)), first[:10]
    return heads, errors, outside, verdict


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _figure(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.slow
def test_sweep_page_in_a_browser(results):
    heads, errors, outside, _ = _open(results["sweep"])
    assert errors == [] and outside == []
    df = pd.read_parquet(results["sweep"] / "data.parquet")
    for name, n in df["outcome"].value_counts().items():
        assert _figure(heads[f"outcome_{name}"]) == n
    assert _figure(heads["overloaded"]) == int(df["overloaded"].sum())
    ok = df["meets_slo"].astype(bool) & ~df["overloaded"].astype(bool)
    assert _figure(heads["meets_slo"]) == int(ok.sum())


@pytest.mark.slow
def test_size_page_in_a_browser(results):
    heads, errors, outside, verdict = _open(results["size"])
    assert errors == [] and outside == []
    a = json.loads((results["size"] / "answer.json").read_text())["answer"]
    assert _figure(heads["gpus"]) == a["gpus"]
    assert _figure(heads["usd_per_hour"]) == pytest.approx(a["usd_per_hour"], abs=0.005)
    assert _figure(heads["ttft_s_p99"]) == pytest.approx(a["ttft_s_p99"], rel=1e-3)
    assert f"{a['replicas']} x {a['gpu']}" in verdict


@pytest.mark.slow
def test_run_page_in_a_browser(results):
    heads, errors, outside, verdict = _open(results["run"])
    assert errors == [] and outside == []
    rec = json.loads((results["run"] / "run.json").read_text())
    assert heads["outcome"] == rec["outcome"]
    assert _figure(heads["completed"]) == rec["completed"]
    for key in ("throughput_rps", "ttft_s_p99", "tpot_s_p99", "e2e_s_p99"):
        assert _figure(heads[key]) == pytest.approx(rec[key], rel=1e-3), key
    assert ("meets its SLOs" in verdict) == bool(rec["meets_slo"])
    assert ("overloaded" in verdict) == bool(rec["overloaded"])


@pytest.mark.slow
def test_validate_page_in_a_browser(results):
    heads, errors, outside, _ = _open(results["validate"])
    assert errors == [] and outside == []
    rec = json.loads((results["validate"] / "validate.json").read_text())
    cmp = pd.DataFrame(rec["comparison"])
    for metric in ("e2e_s", "ttft_s", "tpot_s"):
        want = cmp[(cmp.metric == metric) & (cmp.stat == "mean")].error.iloc[0]
        assert float(heads[f"error_{metric}"].rstrip("%")) == pytest.approx(100 * want, abs=0.05)
    per = pd.read_parquet(results["validate"] / "requests.parquet")
    assert len(per) == rec["requests"]


# --- what is not a finished result ----------------------------------------------------


def _refused(capsys, path: Path, needle: str) -> None:
    code, out, err = run_cli(capsys, "report", str(path))
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("plan: error:") and needle in err, err
    assert "Traceback" not in err


def test_a_folder_that_is_no_result_is_one_line(capsys, tmp_path):
    _refused(capsys, tmp_path / "missing", "no such file or folder")
    (tmp_path / "empty").mkdir()
    _refused(capsys, tmp_path / "empty", "not a planner result")
    (tmp_path / "file.json").write_text("{}")
    _refused(capsys, tmp_path / "file.json", "not a planner result")
    (tmp_path / "file.txt").write_text("hello")
    _refused(capsys, tmp_path / "file.txt", "not a planner result")


def test_a_plan_run_json_file_gets_a_page_that_says_what_it_lacks(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", *RUN_ARGS, "--json")
    assert code == 0, err
    (tmp_path / "run.json").write_text(out)
    code, _, err = run_cli(capsys, "report", str(tmp_path / "run.json"))
    assert code == 0, err
    page = (tmp_path / "run.html").read_text()
    assert "Not on this page: latency distributions and the run over time" in page
    rec = json.loads(out)
    assert f'data-key="completed">completed<b>{rec["completed"]:,}</b>' in page
    del rec["planner_version"]
    (tmp_path / "old.json").write_text(json.dumps(rec))
    _refused(capsys, tmp_path / "old.json", "did not record its version")


@pytest.mark.parametrize(
    "field,value,says",
    [
        ("completed", "many", "completed: Input should be a valid integer"),
        ("outcome", "fine", "outcome: expected one of ok, churning"),
        ("ttft_s_p99", -5, "ttft_s_p99: Input should be greater than or equal to 0"),
        ("overloaded", "no", "overloaded: Input should be a valid boolean"),
        ("num_gpu_blocks", 0, "num_gpu_blocks: Input should be greater than or equal to 1"),
    ],
)
def test_a_run_record_edited_out_of_shape_is_one_line(capsys, tmp_path, field, value, says):
    """What the page shows is checked as plan run writes it (hostile pass)."""
    code, out, err = run_cli(capsys, "run", "--num-requests", "5", "--json")
    assert code == 0, err
    rec = json.loads(out)
    assert field in rec
    rec[field] = value
    (tmp_path / "edited.json").write_text(json.dumps(rec))
    _refused(capsys, tmp_path / "edited.json", says)


def test_an_interrupted_sweep_is_one_line(capsys, tmp_path):
    folder = tmp_path / "cut"
    folder.mkdir()
    (folder / "_manifest.json").write_text(json.dumps({"num_chunks": 4, "chunks": {"0": {}}}))
    _refused(capsys, folder, "an interrupted sweep (1 of 4 chunks)")


def test_results_of_an_older_planner_are_one_line(capsys, results, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(results["run"], run)
    rec = json.loads((run / "run.json").read_text())
    del rec["planner_version"]
    (run / "run.json").write_text(json.dumps(rec))
    _refused(capsys, run, "did not record its version")
    size = tmp_path / "size"
    shutil.copytree(results["size"], size)
    (size / "answer.json").unlink()
    _refused(capsys, size, "without answer.json")
    (run / "run.json").write_text("{not json")
    _refused(capsys, run, "not readable JSON")


def test_a_run_without_its_trace_says_what_is_missing(capsys, results, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(results["run"], run)
    (run / "steps.parquet").unlink()
    code, _, err = run_cli(capsys, "report", str(run))
    assert code == 0, err
    assert "Not on this page: running, waiting, KV use and throughput over time" in _page(run)


def test_run_out_refuses_a_folder_of_other_files(capsys, tmp_path):
    folder = tmp_path / "busy"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    code, _, err = run_cli(capsys, "run", "--num-requests", "5", "--out", str(folder))
    assert code == 2 and "not a plan run result" in err and err.count("\n") == 1
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_validate_out_refuses_a_folder_of_other_files(capsys, tmp_path):
    folder = tmp_path / "busy"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    code, _, err = run_cli(capsys, "validate", *VALIDATE_ARGS, "--out", str(folder))
    assert code == 2 and "not a plan validate result" in err and err.count("\n") == 1


def test_report_out_must_be_html(capsys, results, tmp_path):
    code, _, err = run_cli(capsys, "report", str(results["run"]), "--out", str(tmp_path / "x.txt"))
    assert code == 2 and "expected a .html file name" in err


def test_a_horizon_run_page_marks_lower_bounds_and_says_why(tmp_path):
    """Fresh-user tryout: a run cut by --horizon showed its lower-bound p99s as
    exact figures, and a fleet's page never said it was one."""
    run = tmp_path / "cut"
    code, err = plan_quiet("run", "--num-requests", "50", "--rate", "10", "--horizon", "0.5",
                           "--out", str(run))  # fmt: skip
    assert code == 0, err
    assert plan_quiet("report", str(run))[0] == 0
    page, rec = _page(run), json.loads((run / "run.json").read_text())
    assert rec["e2e_s_p99_is_lower_bound"] and "≥ " in page
    assert "the horizon ended the run before the last arrival" in page
    fleet = tmp_path / "fleet"
    code, err = plan_quiet("run", "--num-requests", "40", "--rate", "10", "--replicas", "2",
                           "--out", str(fleet))  # fmt: skip
    assert code == 0, err
    assert plan_quiet("report", str(fleet))[0] == 0
    assert "2 replicas behind router round_robin" in _page(fleet)


def test_odd_requests_and_a_missing_out_folder_are_handled(capsys, results, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(results["run"], run)
    pd.DataFrame({"a": [1]}).to_parquet(run / "requests.parquet")
    code, _, err = run_cli(capsys, "report", str(run))
    assert code == 0 and "not drawn" in _page(run), err  # a page saying what it lacks
    code, _, err = run_cli(capsys, "report", str(run), "--out", str(tmp_path / "no" / "r.html"))
    assert code == 2 and "make it first" in err and not (tmp_path / "no").exists()


def test_a_sweep_over_traffic_recommends_per_workload_value():
    """The page recommended 'rate_scale 0.4' as if the traffic were a setting;
    with a workload axis it now recommends a configuration at each value."""
    from planner.report.page import _recommended

    grid = pd.MultiIndex.from_product(
        [[0.4, 1.0], [1000, 4000], [8, 64]], names=["rate_scale", "num_gpu_blocks", "max_num_seqs"]
    ).to_frame(index=False)
    grid["config_id"] = range(len(grid))
    grid["completed"] = 10
    grid["livelocked"] = grid["step_limit_hit"] = False
    grid["overload_judged"] = True
    # at 1.0 only the largest pool at 64 keeps up; at 0.4 every one does
    grid["overloaded"] = (grid.rate_scale == 1.0) & ~(
        (grid.num_gpu_blocks == 4000) & (grid.max_num_seqs == 64)
    )
    grid["meets_slo"] = True
    grid["goodput_rps"] = grid.max_num_seqs / 10.0
    text = _recommended(grid)
    assert text.startswith("Recommended (per workload")
    assert "at rate_scale 0.4: max_num_seqs 64, num_gpu_blocks 1,000" in text
    assert "at rate_scale 1: max_num_seqs 64, num_gpu_blocks 4,000" in text
    assert "rate_scale 0.4 (config_id" not in text
