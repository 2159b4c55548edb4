"""Write planner/data/allreduce_vllm.csv: vLLM's tensor-parallel all-reduce
latency as aiconfigurator-core measured it on real GPUs (not a runtime
dependency; the roofline reads the CSV).

aiconfigurator-core ships, per GPU system, ``comm/vllm/<version>/
custom_allreduce_perf.parquet``: ``vllm.distributed.communication_op.
tensor_model_parallel_all_reduce`` on a bfloat16 tensor of ``message_size``
elements, timed over 2, 4 or 8 GPUs of one node, with CUDA graphs
(``vllm_graph``) and without (``vllm_eager``), in ms (the collector:
ai-dynamo/aiconfigurator ``collector/collect_all_reduce.py``). For each
planner GPU and tensor-parallel size this keeps the newest vLLM release at or
below 0.33 that measured it.

Run (about 80 MB download)::

    pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp/aicdl
    python tools/extract_allreduce.py /tmp/aicdl/aiconfigurator_core-0.12.0-*.whl
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import zipfile
from pathlib import Path

import pandas as pd

from planner.latency.aic_systems import ALLREDUCE_SYSTEMS as SYSTEMS
from planner.latency.allreduce import CSV, FIRST_ELEMENTS, KNOTS

MIRRORED = (0, 33)
PATH = re.compile(
    r"aiconfigurator_core/systems/data/([^/]+)/comm/vllm/([^/]+)/custom_allreduce_perf\.parquet$"
)


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def _tables(wheel: Path) -> dict[tuple[str, str], pd.DataFrame]:
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if m := PATH.search(name):
                out[(m[1], m[2])] = pd.read_parquet(io.BytesIO(z.read(name)))
    return out


def rows(wheel: Path) -> pd.DataFrame:
    """One row per (GPU, tp, knot): graph and eager latency, ms."""
    tables = _tables(wheel)
    sizes = [FIRST_ELEMENTS * 2**k for k in range(KNOTS)]
    out = []
    for gpu, system in sorted(SYSTEMS.items()):
        found = [(v, t) for (s, v), t in tables.items() if s == system]
        found = [(v, t) for v, t in found if _version(v)[:2] <= MIRRORED]
        for tp in (2, 4, 8):
            have = [(v, t[t.num_gpus == tp]) for v, t in found if (t.num_gpus == tp).any()]
            if not have:
                continue
            version, t = max(have, key=lambda vt: _version(vt[0]))
            by = {
                b: t[t.backend == f"vllm_{b}"].set_index("message_size").latency
                for b in ("graph", "eager")
            }
            eager_only = by["graph"].empty  # some systems measured eager only
            for n in sizes:
                graph = by["eager" if eager_only else "graph"].get(n)
                eager = by["eager"].get(n)
                if graph is None or eager is None:
                    raise SystemExit(f"{system} vLLM {version} tp {tp}: no {n}-element measurement")
                out.append((gpu, system, version, tp, n, float(graph), float(eager)))
    cols = ["gpu", "aic_system", "vllm_version", "tp", "elements", "graph_ms", "eager_ms"]
    return pd.DataFrame(out, columns=cols)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("wheel", type=Path, help="aiconfigurator_core-0.12.0 wheel")
    a = p.parse_args()
    df = rows(a.wheel)
    df.to_csv(CSV, index=False, float_format="%.6g")
    print(f"wrote {CSV} ({len(df)} rows)", file=sys.stderr)


if __name__ == "__main__":
    main()
