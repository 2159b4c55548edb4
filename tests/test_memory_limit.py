"""Issue 38 item 6: --memory-limit is honoured before any work. A grid whose
expansion would pass it is refused in one line before it is built, by
plan sweep (local or Dask) and by plan size over several candidates; the
process's peak RSS, measured, stays under the limit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOFLINE_H100, SMALL_SYNTHETIC

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)"
)

SPEC = 'name = "huge"\n' + SMALL_SYNTHETIC + "{hardware}\n[axes]\n{axis}\n"
MILLION = (
    "num_gpu_blocks = {start = 1000, stop = 2000000, num = 100000}\n"
    "max_model_len = [1024, 1536, 2048, 2560, 3072, 3584, 4096, 4608, 5120, 5632]"
)
LIMIT = "1GiB"


# Runs the CLI and, at exit, writes its own peak RSS (VmHWM, per address
# space: reset by exec, unlike getrusage's maxrss, which a child inherits from
# a large parent) to the file named by argv[1].
PEAK = (
    "import atexit, runpy, sys\n"
    "out = sys.argv.pop(1)\n"
    "def peak():\n"
    "    hwm = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
    "    open(out, 'w').write(hwm)\n"
    "atexit.register(peak)\n"
    "runpy.run_module('planner.cli', run_name='__main__')\n"
)


def _plan(tmp_path: Path, *args: str) -> tuple[int, str, int]:
    """(exit code, stderr, the child's own peak RSS in bytes) of ``plan ARGS``."""
    out = tmp_path / "peak.txt"
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, str(out), *args], capture_output=True, text=True, timeout=300
    )
    return proc.returncode, proc.stderr, int(out.read_text()) * 1024


@pytest.mark.parametrize("extra", [("--dry-run",), ("--executor", "dask")], ids=["dry", "dask"])
def test_a_million_config_axis_is_refused_before_it_is_built(tmp_path: Path, extra):
    spec = tmp_path / "huge.toml"
    spec.write_text(SPEC.format(hardware="", axis=MILLION))
    code, err, peak = _plan(tmp_path, "sweep", str(spec), "--memory-limit", LIMIT, *extra)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "1,000,000 configs" in err and "--memory-limit" in err
    assert peak < 2**30, f"peak RSS {peak / 2**20:.0f} MiB over the 1 GiB limit"


@pytest.mark.slow  # 4 s; the fast subset runs plan size elsewhere
def test_plan_size_refuses_candidates_that_do_not_fit(tmp_path: Path):
    """12,000 configs per candidate x 8 replicas x 4 candidates: about 1.5 GiB
    of configs, refused before the second candidate (or the first's replicas)
    is built."""
    spec = tmp_path / "wide.toml"
    axis = (
        "max_num_seqs = {start = 1, stop = 8000, num = 1500}\n"
        "max_model_len = [1024, 1536, 2048, 2560, 3072, 3584, 4096, 4608]"
    )
    spec.write_text(SPEC.format(hardware=ROOFLINE_H100, axis=axis))
    code, err, peak = _plan(
        tmp_path, "size", str(spec), "--gpus", "H100,A100-80GB", "--tensor-parallel-sizes", "1,2",
        "--memory-limit", LIMIT, "--dry-run",
    )  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "plan size's 4 candidates" in err
    assert peak < 2**30, f"peak RSS {peak / 2**20:.0f} MiB over the 1 GiB limit"


class _Workers:
    """A stand-in for a Dask client whose workers each hold ``held`` bytes
    once they have parsed the spec."""

    def __init__(self, held: int) -> None:
        self.held = held

    def run(self, fn, *args):  # noqa: ANN001, ANN002, ANN201 (distributed.Client.run's shape)
        return {"tcp://w1": self.held, "tcp://w2": self.held // 2}


def test_dask_chunks_are_sized_by_what_a_worker_holds():
    """Issue 38 item 6: each Dask worker is a process under the same limit;
    the chunks are planned for the worker that holds the most, so a worker
    holding more gets smaller chunks, and one with no room for a config (half
    a MiB left under 450 MiB) is refused in one line before any chunk."""
    from planner.sweep import driver
    from planner.sweep.spec import load_spec

    sweep = load_spec(Path(__file__).parents[1] / "sweeps" / "quick.toml")
    limit = 450 * 2**20

    def plan(held: int) -> driver.ChunkPlan:
        return driver.plan_chunks(
            sweep, None, driver.worker_budget(sweep, limit, _Workers(held), 1)
        )

    with pytest.raises(driver.SweepError, match="a Dask worker's planner 450 MiB") as e:
        plan(limit - 2**19)
    assert "\n" not in str(e.value) and "too small" in str(e.value)
    roomy, tight = plan(100 * 2**20), plan(limit - 10 * 2**20)
    assert tight.chunk_size < roomy.chunk_size and len(tight.chunks) > len(roomy.chunks)
    assert tight.peak_bytes <= limit and roomy.peak_bytes <= limit


def _worker_peak() -> int:
    """A Dask worker's own peak RSS (VmHWM, bytes), run on the worker."""
    hwm = Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]
    return int(hwm) * 1024


@pytest.mark.slow
def test_dask_workers_stay_under_the_limit_or_are_refused(tmp_path: Path):
    """On a real LocalCluster: a limit below what a worker holds once it has
    loaded the kernel and the spec is refused before any chunk; under a limit
    the sweep runs in chunks sized for the worker and every worker's measured
    peak RSS stays under it."""
    from planner.sweep import driver, executors
    from planner.sweep.memory import resident_bytes
    from planner.sweep.report import Silent
    from planner.sweep.spec import load_spec

    sweep = load_spec(Path(__file__).parents[1] / "tests" / "data" / "size_small.toml")
    # One limit for the driver (this test process, which may already hold a
    # lot under pytest-xdist) and each worker: at least 1 GiB.
    limit = max(2**30, resident_bytes() + 256 * 2**20)
    with executors.dask_client(None, 1) as client:
        budget = driver.worker_budget(sweep, limit, client, 1)
        assert 0 < budget.process < limit and budget.jit == 0
        with pytest.raises(driver.SweepError, match="a Dask worker's planner"):
            driver.plan_chunks(sweep, None, driver.worker_budget(sweep, budget.process, client, 1))
        address = client.scheduler.address  # the sweep runs on these very workers
        df, ran = driver.run_sweep(
            sweep, tmp_path / "out", None, limit, 1, False, False, Silent(), "dask", address
        )
        assert ran and len(df) == len(sweep.configs)
        peaks = client.run(_worker_peak).values()
    assert max(peaks) < limit, f"a worker peaked at {max(peaks) / 2**20:.0f} MiB"


@pytest.mark.slow
def test_plan_size_runs_every_candidate_under_the_limit_or_none(tmp_path: Path):
    """Issue 38 item 6: at 320 MiB the second candidate was refused after the
    first ran. Now, from the need a refusal states upward, each limit either
    refuses before any candidate runs (no progress line, no result) or runs
    all four, and the process's measured peak RSS stays under the limit."""
    import re

    spec = Path(__file__).parent / "data" / "size_small.toml"
    args = [
        "size", str(spec), "--gpus", "H100,A100-80GB", "--tensor-parallel-sizes", "1,2",
        "--max-replicas", "2", "--out", str(tmp_path / "out"), "--overwrite",
    ]  # fmt: skip
    code, err, _ = _plan(tmp_path, *args, "--memory-limit", "200MiB")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    need = int(re.search(r"needs? (?:at least|about) ([\d,]+) MiB", err).group(1).replace(",", ""))
    for _ in range(4):
        limit = need + 8
        code, err, peak = _plan(tmp_path, *args, "--memory-limit", f"{limit}MiB")
        if code == 0:
            break
        assert code == 2 and len(err.strip().splitlines()) == 1, err  # refused before any work
        assert not (tmp_path / "out" / "size.parquet").exists()
        need = int(
            re.search(r"needs? (?:at least|about) ([\d,]+) MiB", err).group(1).replace(",", "")
        )
        assert need >= limit, err  # each refusal names a need above its limit
    assert code == 0, err
    assert (tmp_path / "out" / "size.parquet").exists()
    assert peak < limit * 2**20, f"peak RSS {peak / 2**20:.0f} MiB over the {limit} MiB limit"
