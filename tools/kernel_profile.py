"""Where the step loop spends its time, by jitted function, with Linux ``perf``.

    perf record -g -o perf.data python tools/kernel_profile.py [--grid 64] [--caching]
    python tools/kernel_profile.py --report perf.data

Numba's machine code lives in anonymous memory, so ``perf`` sees bare
addresses. ``perf`` reads a JIT's symbols from ``/tmp/perf-<pid>.map`` (one
line per function: start address, size and name, hexadecimal; the format of
``tools/perf/Documentation/jit-interface.txt`` in the Linux sources). This
script compiles the kernel in its own process (an empty Numba cache in a
temporary folder: a kernel loaded from the cache keeps no LLVM module to read
the functions from, so the first step costs a cold compile, 15-25 CPU-s on a
2-core machine), writes that map for every function of every compiled planner
kernel, then runs ``simulate`` on scenario S1's grid (``answers.bench.s1_grid``)
once, timed. ``--report`` sums ``perf report``'s self samples by jitted
function (Numba's mangled names read back as ``module.function``) and prints
each one's share of the kernel's samples: the compile's samples (LLVM and
Python) are left out, as is every other symbol.

A function LLVM inlined into its caller is counted in the caller; the
non-inlined ones (Numba's ``@njit`` functions the step loop calls and LLVM
kept apart) are what the report can tell apart.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

# _ZN7planner6kernel4step17_decode_fast_pathB...: Numba's mangling of a
# qualified name (an Itanium-style nested name: each part its length, then
# its text), then an ABI tag.
PART = re.compile(r"\d+")


def demangle(text: str) -> str | None:
    """``planner.kernel.step._decode_fast_path`` for the first Numba-mangled
    planner symbol in ``text``, else None."""
    at = text.find("_ZN7planner")
    if at < 0:
        return None
    s, i, parts = text, at + 3, []
    while (n := PART.match(s, i)) is not None:
        size = int(n.group())
        parts.append(s[n.end() : n.end() + size])
        i = n.end() + size
    return ".".join(parts)


def shares(report: str) -> list[tuple[str, float]]:
    """(function, share of the planner kernel's self samples) from the text
    of ``perf report --no-children --sort symbol -g none --stdio``, largest
    first; shares sum to 1 (an empty list when no planner symbol shows)."""
    total: Counter[str] = Counter()
    for line in report.splitlines():
        cols = line.split()
        if len(cols) < 3 or not cols[0].endswith("%"):
            continue
        name = demangle(line)
        if name is not None:
            total[name] += float(cols[0].rstrip("%"))
    s = sum(total.values())
    return [(n, v / s) for n, v in total.most_common()] if s > 0 else []


def write_map(path: Path) -> int:
    """Write ``perf``'s JIT map for every compiled function of every planner
    dispatcher in this process; returns how many functions it names."""
    from numba.core.registry import CPUDispatcher

    syms: dict[int, str] = {}
    seen: set[int] = set()
    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("planner"):
            continue
        for obj in list(vars(mod).values()):
            if not isinstance(obj, CPUDispatcher):
                continue
            for cres in obj.overloads.values():
                lib = cres.library
                if id(lib) in seen or getattr(lib, "_final_module", None) is None:
                    continue
                seen.add(id(lib))
                for f in lib._final_module.functions:
                    if not f.is_declaration:
                        addr = lib.get_pointer_to_function(f.name)
                        if addr:
                            syms[addr] = f.name
    addrs = sorted(syms)
    with path.open("w") as fh:
        for a, b in zip(addrs, [*addrs[1:], addrs[-1] + 4096] if addrs else [], strict=True):
            fh.write(f"{a:x} {min(b - a, 1 << 20):x} {syms[a]}\n")
    return len(addrs)


def run(grid: int, caching: bool) -> None:
    """Compile cold, write the map, time one ``simulate`` over S1's grid."""
    cache = tempfile.mkdtemp(prefix="kernel-profile-numba-")
    os.environ["NUMBA_CACHE_DIR"] = cache
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    try:
        from planner.answers.bench import s1_grid, s1_workload
        from planner.api import simulate
        from planner.latency.step_time import LinearLatency

        wl, lat = s1_workload(), LinearLatency()
        opts = {"enable_prefix_caching": True} if caching else {}
        simulate(s1_grid(2, **opts), wl, lat)  # compile
        n = write_map(Path(f"/tmp/perf-{os.getpid()}.map"))
        cfgs = s1_grid(grid, **opts)
        c0 = time.process_time()
        simulate(cfgs, wl, lat, check_invariants=False)
        took = time.process_time() - c0
        print(f"{len(cfgs):,} configs: {took:.2f} CPU-s; perf map of {n} functions written")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def report(data: str) -> None:
    """Print each planner function's share of the kernel's samples."""
    text = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--sort", "symbol", "-g", "none",
         "--stdio"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    rows = shares(text)
    if not rows:
        sys.exit("no planner function in the samples: was the map written (run, not --report)?")
    for name, share in rows:
        print(f"{100 * share:6.1f}%  {name}")


def main() -> None:
    """Parse the arguments; run or report."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", type=int, default=64, help="S1 grid side (grid x grid configs)")
    ap.add_argument("--caching", action="store_true", help="prefix caching on")
    ap.add_argument("--report", metavar="PERF_DATA", help="summarise a perf.data file instead")
    a = ap.parse_args()
    if a.report:
        report(a.report)
    else:
        run(a.grid, a.caching)


if __name__ == "__main__":
    main()
