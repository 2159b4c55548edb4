"""Peak RSS of `plan sweep --memory-limit` runs against their limit (a benchmark,
not a test: the machine's load and allocator change the figures).

Each case runs in a fresh process under `/usr/bin/time -v` (Linux) and reports
its "Maximum resident set size", its exit status and, when it refused, its
one-line message. "cold" cases point NUMBA_CACHE_DIR at an empty temporary
folder, so the kernel compiles; "warm" ones fill a shared cache first.

    python tools/memory_check.py            # every case (a few minutes on 2 cores)
    python tools/memory_check.py --jit      # only the JIT allowance probe
    python tools/memory_check.py --case azure-512-warm --case caching-5m-300

`--jit` measures what `planner.sweep.driver`'s `JIT_*_BYTES` allow for: the
resident memory each kernel variant (lone server or router, without and with
prefix caching) adds through a 1-config and a 2-config `simulate`, once Numba's
runtime is up, loaded from a warm cache and compiled cold, in two orders.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLAN = str(Path(sys.executable).parent / "plan")
TRACE = ROOT / "planner" / "data" / "s1_seed7.csv"
MiB = 2**20

PROBE = """
import sys
from planner.api import simulate
from planner.capacity import usable_blocks
from planner.config import SchedulerConfig
from planner.workload.arrays import LengthDist, synthetic
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
d = LengthDist("constant", 8)
wl = synthetic(2, 1.0, d, d)
if sys.argv[1] == "fill":
    for fleet in (1, 2):
        for caching in (False, True):
            cfg = SchedulerConfig(num_gpu_blocks=8, max_model_len=64, replicas=fleet,
                                  enable_prefix_caching=caching)
            simulate([cfg] * 2, wl)
    sys.exit()
if len(sys.argv) > 2:  # compile in this process only, as a tight budget forces
    from planner.kernel import warm
    warm._ALLOWED[0] = False
usable_blocks(2, True)  # Numba's runtime up, as chunk_budget starts it
before = rss()
print(f"runtime up {before:.0f}")
for v in sys.argv[1].split(","):
    cfg = SchedulerConfig(num_gpu_blocks=8, max_model_len=64, replicas=1 + (v[0] == "r"),
                          enable_prefix_caching=v[1] == "c")
    for n in (1, 2):
        simulate([cfg] * n, wl)
    now = rss()
    print(f"{v} {now - before:.0f}")
    before = now
"""

SMALL_SPEC = """
name = "{name}"
horizon_s = 60.0
[workload]
kind = "trace"
path = "{trace}"
[scheduler]
block_size = {block_size}
max_num_batched_tokens = 2048
max_model_len = 4096
num_gpu_blocks = {blocks}
enable_prefix_caching = {caching}
[axes]
max_num_seqs = [64, 128, 256, 512]
"""


def peak(cmd: list[str], env: dict[str, str]) -> tuple[int, int, str]:
    """(exit status, peak RSS in bytes, last stderr line) of ``cmd`` under time -v."""
    p = subprocess.run(
        ["/usr/bin/time", "-v", *cmd], env=env, capture_output=True, text=True, check=False
    )
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    code = int(re.search(r"Exit status: (\d+)", p.stderr).group(1))
    skip = ("\t", "Command exited", "Command terminated")
    lines = [ln for ln in p.stderr.splitlines() if ln and not ln.startswith(skip)]
    return code, rss * 1024, lines[-1] if lines else ""


def env_with(cache: str) -> dict[str, str]:
    env = dict(os.environ)
    env["NUMBA_CACHE_DIR"] = cache
    env["COLUMNS"] = "400"  # one line per message
    return env


def specs(tmp: Path) -> dict[str, Path]:
    """The azure-conv spec and two small ones: prefix caching on a 5 M-block
    pool, and block_size 2**27."""
    out = {"azure": ROOT / "sweeps" / "azure-conv.toml"}
    for name, bs, blocks, caching in (
        ("caching-5m", 16, 5_000_000, "true"),
        ("block-2p27", 2**27, 64, "false"),
    ):
        path = tmp / f"{name}.toml"
        path.write_text(
            SMALL_SPEC.format(name=name, trace=TRACE, block_size=bs, blocks=blocks, caching=caching)
        )
        out[name] = path
    return out


CASES = (  # (name, spec, limit, cache)
    ("azure-512-warm", "azure", "512MiB", "warm"),
    ("azure-512-cold", "azure", "512MiB", "cold"),
    ("azure-300-warm", "azure", "300MiB", "warm"),
    ("azure-300-cold", "azure", "300MiB", "cold"),
    ("caching-5m-300", "caching-5m", "300MiB", "warm"),
    ("caching-5m-1GiB", "caching-5m", "1GiB", "warm"),
    ("block-2p27-300", "block-2p27", "300MiB", "warm"),
    # just above the minimum each refusal above states (about 420 and 778 MiB);
    # block_size 2**27 needs no more than 16 since the fast path's histogram is
    # capped (kernel.state.FAST_PATH_MAX_BLOCK_SIZE)
    ("azure-425-cold", "azure", "425MiB", "cold"),
    ("caching-5m-780MiB", "caching-5m", "780MiB", "warm"),
)


VARIANT_ORDERS = ("lp,lc,rp,rc", "rc,rp,lc,lp")  # l lone / r router, p plain / c caching
NO_CHILD = "lp"  # also compiled cold without kernel.warm's child process


def jit_probe(warm_cache: str) -> None:
    """Print what each kernel variant adds to the resident memory once Numba's
    runtime is up, loaded from the cache and compiled cold, in two orders."""
    print(f"{'cache':<6} {'order':<12} MiB added per variant (runtime up first)")
    for kind in ("warm", "cold"):
        for order in VARIANT_ORDERS:
            with tempfile.TemporaryDirectory() as cold:
                cache = warm_cache if kind == "warm" else cold
                env = env_with(cache)
                p = subprocess.run(
                    [sys.executable, "-c", PROBE, order], env=env, capture_output=True, text=True
                )
            print(f"{kind:<6} {order:<12} {' '.join(p.stdout.split(chr(10)))}")
    with tempfile.TemporaryDirectory() as cold:
        cmd = [sys.executable, "-c", PROBE, NO_CHILD, "no-child"]
        p = subprocess.run(cmd, env=env_with(cold), capture_output=True, text=True)
    print(f"{'cold':<6} {NO_CHILD + ', no child':<12} {' '.join(p.stdout.split(chr(10)))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jit", action="store_true", help="only the JIT allowance probe")
    ap.add_argument("--case", action="append", choices=[c[0] for c in CASES])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        warm = str(tmp / "numba-cache")
        peak([sys.executable, "-c", PROBE, "fill"], env_with(warm))  # fill the warm cache
        if args.jit:
            jit_probe(warm)
            return
        paths = specs(tmp)
        print(f"{'case':<20} {'limit':>8} {'peak RSS':>9} {'within':>6} exit  message")
        for name, spec, limit, cache in CASES:
            if args.case and name not in args.case:
                continue
            with tempfile.TemporaryDirectory() as cold:
                env = env_with(warm if cache == "warm" else cold)
                out = tmp / f"out-{name}"
                cmd = [PLAN, "sweep", str(paths[spec]), "--out", str(out)]
                code, rss, last = peak([*cmd, "--memory-limit", limit], env)
            lim = int(limit[:-3]) * (MiB if limit.endswith("MiB") else 2**30)
            ok = "yes" if rss <= lim else "NO"
            msg = last if code else f"{'wrote' if out.exists() else 'nothing written'}"
            print(f"{name:<20} {limit:>8} {rss / MiB:>7.0f} M {ok:>6} {code:>4}  {msg}")


if __name__ == "__main__":
    main()
