"""Lay a ``Result`` out as one self-contained HTML page (Jinja2).

Everything is inline: the style sheet, the pictures (PNG data URIs from
``charts``) and one small script that sorts a table by the column whose
header is clicked. The page asks for nothing over the network, reads at
1,280 px and prints on A4 (``@page``; tables wrap, pictures scale).
"""

from __future__ import annotations

import html
import math

import jinja2
import numpy as np
import pandas as pd

from planner.install_check import VERSION, VLLM_MIRRORED
from planner.metrics import OVERLOAD_MIN_LIFETIMES, batches, bursts, is_batch, keeps_up, pace_text
from planner.plots.heatmap import recommended
from planner.report import charts
from planner.report.results import SIZE_PARETO, Result
from planner.sweep.spec import HARDWARE_AXES, SCHEDULER_AXES, WORKLOAD_AXES
from planner.text import count

MAX_ROWS = 20_000  # rows a page's table holds (about 15 MB); more are counted, not shown

# The columns a table shows first, per kind, where present.
SWEEP_COLUMNS = (
    "config_id", "max_num_seqs", "num_gpu_blocks", "max_num_batched_tokens", "preemption_mode",
    "enable_prefix_caching", "async_scheduling", "rate_scale", "outcome", "overloaded",
    "overload_judged", "meets_slo", "completed", "throughput_rps", "goodput_rps", "ttft_s_p99",
    "tpot_s_p99", "itl_s_p99", "e2e_s_p99", "preemptions", "kv_safe_max_num_seqs",
)  # fmt: skip
SIZE_COLUMNS = (
    "gpu", "tensor_parallel_size", "replicas", "gpus", "router", "max_num_seqs",
    "max_num_batched_tokens", "num_gpu_blocks", "usd_per_hour", "usd_per_million_output_tokens",
    "meets_target", "pareto", "overloaded", "ttft_s_p99", "tpot_s_p99", "itl_s_p99",
)  # fmt: skip
REQUEST_COLUMNS = (
    "request", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s",
    "queue_delay_s", "preemptions",
)  # fmt: skip
RUN_HEADLINE = (
    ("outcome", "outcome"), ("overloaded", "overloaded"), ("meets_slo", "meets SLO"),
    ("completed", "completed"), ("throughput_rps", "throughput (req/s)"),
    ("output_tps", "output tokens/s"), ("ttft_s_p99", "TTFT p99 (s)"),
    ("tpot_s_p99", "TPOT p99 (s)"), ("itl_s_p99", "ITL p99 (s)"), ("e2e_s_p99", "E2E p99 (s)"),
    ("preemptions", "preemptions"), ("offered_rps", "offered (req/s)"),
)  # fmt: skip

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
_TEMPLATE = _ENV.from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1240px;
  padding: 0 20px; color: #1b1b1b; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; overflow-wrap: anywhere; }
.headline { display: flex; flex-wrap: wrap; gap: 10px; }
.headline div { border: 1px solid #ccc; border-radius: 6px; padding: 6px 10px; min-width: 120px; }
.headline b { display: block; font-size: 18px; }
.verdict { font-size: 16px; padding: 8px 12px; border-left: 4px solid #555; background: #f4f4f4; }
img { max-width: 100%; height: auto; display: block; margin: 8px 0; }
.note { color: #6b4e00; background: #fff6dc; padding: 6px 10px; }
.caption { margin: 14px 0 0; color: #444; font-style: italic; }
code, pre { font: 12.5px ui-monospace, monospace; } pre { white-space: pre-wrap;
  background: #f4f4f4; padding: 8px; overflow-wrap: anywhere; }
.tablewrap { max-height: 640px; overflow: auto; border: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 12.5px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th { position: sticky; top: 0; background: #fafafa; cursor: pointer; user-select: none; }
th[aria-sort=ascending]::after { content: " \\25B2"; }
th[aria-sort=descending]::after { content: " \\25BC"; }
footer { margin-top: 32px; color: #666; font-size: 12px; }
@page { size: A4; margin: 14mm; }
@media print { body { max-width: none; margin: 0; padding: 0; font-size: 11px; }
  .tablewrap { max-height: none; overflow: visible; border: 0; }
  th { position: static; } h2 { break-after: avoid; } img { break-inside: avoid; }
  table { width: 100%; } th, td { white-space: normal; overflow-wrap: anywhere;
  font-size: 8px; padding: 1px 3px; } tr { break-inside: avoid; } }
</style></head>
<body>
<h1>{{ title }}</h1>
<dl class="facts">
{% for k, v in facts %}<dt>{{ k }}</dt><dd>{{ v }}</dd>
{% endfor %}</dl>
{% if verdict %}<p class="verdict" id="verdict">{{ verdict }}</p>{% endif %}
{% if headline %}<div class="headline" id="headline">
{% for label, key, value in headline %}<div data-key="{{ key }}">{{ label }}<b>{{ value }}</b></div>
{% endfor %}</div>{% endif %}
{% for item in notes %}<p class="note">{{ item }}</p>{% endfor %}
{% for s in sections %}<h2>{{ s.title }}</h2>
{% if s.pre %}<pre>{{ s.pre }}</pre>{% endif %}
{% for p in s.pictures %}{% if p.uri is defined %}<p class="caption">{{ p.title }}</p>
<img alt="{{ p.title }}" src="{{ p.uri }}">
{% else %}<p class="note">{{ p.title }}: not drawn ({{ p.why }})</p>{% endif %}{% endfor %}
{% if s.table %}{{ s.table | safe }}{% endif %}
{% endfor %}
<footer>Report by planner {{ version }} (mirrors vLLM {{ vllm }}'s v1 scheduler); the result
was written by planner {{ result_version }}. Click a column header to sort.</footer>
<script>
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var down = th.getAttribute("aria-sort") === "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", down ? "descending" : "ascending");
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
        var nx = parseFloat(x), ny = parseFloat(y);
        var c = (isNaN(nx) || isNaN(ny)) ? String(x).localeCompare(String(y)) : nx - ny;
        return down ? -c : c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
</script>
</body></html>
"""
)


def _fmt(v: object) -> str:
    """A cell or figure for people: 4 significant digits, thousands separated."""
    if isinstance(v, bool | np.bool_):
        return "yes" if v else "no"
    if isinstance(v, int | np.integer):
        return f"{int(v):,}"
    if isinstance(v, float | np.floating):
        if math.isnan(v):
            return "-"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return "-" if v is None else str(v)


def sortable_table(df: pd.DataFrame, columns: tuple[str, ...], table_id: str) -> str:
    """HTML of ``df``'s ``columns`` (those present, then no others), at most
    ``MAX_ROWS`` rows, each cell carrying its raw value for the sorter."""
    cols = [c for c in columns if c in df.columns]
    shown = df.head(MAX_ROWS)
    # A value that is only a lower bound (requests unserved at the run's end)
    # reads "≥ x", as plan run prints it.
    bound = {c: shown[f"{c}_is_lower_bound"].astype(bool).to_numpy()
             for c in cols if f"{c}_is_lower_bound" in shown}  # fmt: skip
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    rows = []
    for i, rec in enumerate(shown[cols].itertuples(index=False)):
        cells = "".join(
            f'<td data-v="{html.escape(str(v))}">'
            f"{'&ge; ' if c in bound and bound[c][i] else ''}{html.escape(_fmt(v))}</td>"
            for c, v in zip(cols, rec, strict=True)
        )
        rows.append(f"<tr>{cells}</tr>")
    more = (
        f'<p class="note">This table holds the first {MAX_ROWS:,} of {len(df):,} rows (sorting '
        "orders those only); every row is in the result files.</p>"
        if len(df) > MAX_ROWS
        else ""
    )
    return (
        f'<div class="tablewrap"><table class="sortable" id="{table_id}"><thead><tr>{head}'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{more}"
    )


def _section(title: str, pictures: list = (), table: str = "", pre: str = "") -> dict:
    return {"title": title, "pictures": list(pictures), "table": table, "pre": pre}


def _sweep(r: Result) -> dict:
    df = r.table
    counts = df["outcome"].value_counts() if "outcome" in df else pd.Series(dtype=int)
    headline = [(name, f"outcome_{name}", _fmt(int(n))) for name, n in counts.items()]
    if "overloaded" in df:
        headline.append(("overloaded", "overloaded", _fmt(int(df["overloaded"].sum()))))
    if "meets_slo" in df:
        ok = df["meets_slo"].astype(bool) & keeps_up(df) if "overloaded" in df else df["meets_slo"]
        pace = "serve their batch" if batches(df).all() else "keep up"
        headline.append((f"meet the SLOs and {pace}", "meets_slo", _fmt(int(ok.sum()))))
    if "overloaded" in df:
        if burst := int(bursts(df).sum()):
            headline.append(("overload not judged (a burst)", "overload_judged", _fmt(burst)))
    pictures = charts.sweep_heatmaps(r.folder, df)
    return {
        "title": f"plan sweep: {r.record.get('name', r.folder.name)}",
        "headline": headline,
        "verdict": _recommended(df),
        "sections": [
            _section("Heatmaps", pictures),
            _section(
                f"Configurations ({len(df):,})", table=sortable_table(df, SWEEP_COLUMNS, "rows")
            ),
        ],
    }


def _recommended(df: pd.DataFrame) -> str:
    """The sweep's recommended configuration, as the heatmaps mark it
    (``planner.plots.heatmap.recommended``: it meets the SLOs and keeps up,
    within a tolerance of the best goodput, with the fewest resources), or
    that none qualifies; empty without SLOs. The workload is the traffic, not
    a setting to choose: when a workload axis varies, one recommendation per
    workload value."""
    if "meets_slo" not in df.columns:
        return ""
    axes = charts.heatmap_axes(df)
    x, y = axes[:2] if axes else ("max_num_seqs", "num_gpu_blocks")
    varied = [a for a in (*SCHEDULER_AXES, *WORKLOAD_AXES, *HARDWARE_AXES) if a in df]
    varied = [a for a in varied if df[a].nunique() > 1]
    traffic = [a for a in varied if a in WORKLOAD_AXES]
    settings = [a for a in varied if a not in WORKLOAD_AXES]
    if not traffic:
        return "Recommended: " + _one_recommendation(df, x, y, settings)
    parts = []
    for key, part in df.groupby(traffic, sort=True):
        values = key if isinstance(key, tuple) else (key,)
        at = ", ".join(f"{a} {_fmt(v)}" for a, v in zip(traffic, values, strict=True))
        parts.append(f"at {at}: {_one_recommendation(part, x, y, settings)}")
    return "Recommended (per workload: the traffic is not a setting to choose): " + "; ".join(parts)


def _one_recommendation(df: pd.DataFrame, x: str, y: str, settings: list[str]) -> str:
    """The recommended row of ``df`` (``recommended``) in words, or 'none'."""
    row = recommended(df, x, y)
    if row is None:
        return "none: no configuration meets the SLOs and keeps up with its traffic"
    setting = ", ".join(f"{a} {_fmt(row[a])}" for a in settings)
    pace = pace_text(row)
    return (
        f"{setting} (config_id {int(row['config_id'])}): meets the SLOs, {pace}, "
        f"goodput {_fmt(row['goodput_rps'])} req/s"
    )


def _size(r: Result) -> dict:
    a = r.record.get("answer")
    sections = []
    if a:
        verdict = (
            f"Answer: {a['replicas']} x {a['gpu']} at tensor parallelism "
            f"{a['tensor_parallel_size']} ({count(a['gpus'], 'GPU')}), max_num_seqs "
            f"{a['max_num_seqs']}, router {a['router']}: ${a['usd_per_hour']:.2f}/h"
        )
        headline = [
            ("GPUs", "gpus", _fmt(a["gpus"])),
            ("$ per hour", "usd_per_hour", f"{a['usd_per_hour']:.2f}"),
            ("$ per million output tokens", "usd_per_million_output_tokens",
             _fmt(a.get("usd_per_million_output_tokens"))),
            ("TTFT p99 (s)", "ttft_s_p99", _fmt(a.get("ttft_s_p99"))),
            ("TPOT p99 (s)", "tpot_s_p99", _fmt(a.get("tpot_s_p99"))),
        ]  # fmt: skip
        sections.append(_section("The command to start it", pre=a.get("vllm_serve", "")))
        sections.append(_section("Headroom", pre=str(a.get("headroom_text", "-"))))
        if "sensitivity_text" in a:  # answers written before it have none
            sections.append(_section("If the step time is off", pre=str(a["sensitivity_text"])))
    else:
        verdict = f"No deployment met the target. {r.record.get('bound', '')}"
        headline = []
    pareto = r.folder / SIZE_PARETO
    if pareto.exists():
        pic = charts.Picture(
            "cost against latency (Pareto front)", charts.png_uri(pareto.read_bytes())
        )
        sections.append(_section("Pareto front", [pic]))
    sections.append(
        _section(
            f"Candidates ({len(r.table):,})", table=sortable_table(r.table, SIZE_COLUMNS, "rows")
        )
    )
    return {
        "title": f"plan size: {r.folder.name}",
        "headline": headline,
        "verdict": verdict,
        "sections": sections,
    }


def run_verdict(rec: dict) -> str:
    """The run's verdict in one sentence, from its JSON (what ``plan run`` judged)."""
    slo = any(rec.get(f"{m}_slo_s") is not None for m in ("ttft", "tpot", "itl", "e2e"))
    over = bool(rec.get("overloaded"))
    parts = [f"outcome {rec.get('outcome', '-')}"]
    if slo:
        parts.append("meets its SLOs" if rec.get("meets_slo") else "misses its SLOs")
    if over:
        parts.append("overloaded: the queue grows")
    elif is_batch(rec):
        parts.append("serves this batch sent at once (no arrival rate to keep up with)")
    elif rec.get("overload_judged", True):
        parts.append("keeps up with the offered load")
    else:
        parts.append(
            f"overload not judged: its arrivals span less than {OVERLOAD_MIN_LIFETIMES:g}x "
            "its occupancy-weighted median E2E, a burst that says nothing about the rate sustained"
        )
    text = "Verdict: " + ", ".join(parts)
    if rec.get("ended_by_horizon"):
        text += (
            f" (the horizon ended the run before the last arrival: judged on the "
            f"{_fmt(rec.get('overload_window_s'))} s of arrivals it covered; a figure "
            "marked ≥ is a lower bound)"
        )
    return text


def _run(r: Result) -> dict:
    rec = r.record
    headline = [
        (label, key, ("≥ " if rec.get(f"{key}_is_lower_bound") else "") + _fmt(rec.get(key)))
        for key, label in RUN_HEADLINE
        if key in rec
    ]
    null = 1 if rec.get("null_block", True) else 0
    usable = int(rec.get("num_gpu_blocks", 0)) - null
    pictures = [charts.latency_cdfs(r.table, rec.get("itl_histogram"))] if not r.table.empty else []
    if r.steps is not None:
        pictures.append(charts.time_series(r.steps, r.table, usable))
    sections = [_section("Distributions and time series", pictures)] if pictures else []
    if not r.table.empty:
        sections.append(
            _section(
                f"Requests ({len(r.table):,})",
                table=sortable_table(r.table, REQUEST_COLUMNS, "rows"),
            )
        )
    return {
        "title": f"plan run: {r.folder.name}",
        "headline": headline,
        "verdict": run_verdict(rec),
        "sections": sections,
    }


VALIDATE_COLUMNS = (
    "request", "arrival_s", "prompt_tokens", "output_tokens", "measured_ttft_s",
    "predicted_ttft_s", "measured_tpot_s", "predicted_tpot_s", "measured_e2e_s",
    "predicted_e2e_s",
)  # fmt: skip
COMPARISON_COLUMNS = ("metric", "stat", "measured", "predicted", "error")


def _validate(r: Result) -> dict:
    rec = r.record
    cmp = pd.DataFrame(rec.get("comparison", []), columns=list(COMPARISON_COLUMNS))
    headline = []
    for metric, stat, label in (
        ("e2e_s", "mean", "E2E mean"), ("ttft_s", "mean", "TTFT mean"),
        ("tpot_s", "mean", "TPOT mean"), ("throughput_rps", "", "throughput"),
    ):  # fmt: skip
        row = cmp[(cmp["metric"] == metric) & (cmp["stat"] == stat)]
        if len(row) and row["error"].notna().iloc[0]:
            headline.append((f"{label} error", f"error_{metric}", f"{row['error'].iloc[0]:+.1%}"))
    title = f"{rec.get('run_name', r.folder.name)}: {rec.get('latency_model', '')}"
    pictures = [charts.predicted_vs_measured(r.table, title)] if not r.table.empty else []
    shown = cmp.assign(error=[f"{e:+.1%}" if pd.notna(e) else "-" for e in cmp["error"]])
    sections = [
        _section("Predicted against measured, per metric",
                 table=sortable_table(shown, COMPARISON_COLUMNS, "comparison")),
    ]  # fmt: skip
    if pictures:
        sections.append(_section("Per request", pictures))
        sections.append(
            _section(f"Requests ({len(r.table):,})",
                     table=sortable_table(r.table, VALIDATE_COLUMNS, "rows"))
        )  # fmt: skip
    return {
        "title": f"plan validate: {rec.get('run_name', r.folder.name)}",
        "headline": headline,
        "verdict": "Error = predicted / measured - 1; the replay uses the run's own settings "
        "and logged pool.",
        "sections": sections,
    }


LAYOUTS = {"sweep": _sweep, "size": _size, "run": _run, "validate": _validate}


def render(r: Result) -> str:
    """The page of ``r`` as HTML text."""
    parts = LAYOUTS[r.kind](r)
    facts = [*r.facts.items(), ("result", str(r.folder))]
    notes = [f"Not on this page: {m}." for m in r.missing]
    if r.version != VERSION:
        notes.append(f"This result was written by planner {r.version}; this is planner {VERSION}.")
    return _TEMPLATE.render(
        **parts, facts=facts, notes=notes, version=VERSION, vllm=VLLM_MIRRORED,
        result_version=r.version,
    )  # fmt: skip
