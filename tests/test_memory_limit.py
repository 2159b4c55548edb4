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
    """A stand-in for a Dask client whose workers each hold ``held`` bytes."""

    def __init__(self, held: int) -> None:
        self.held = held

    def run(self, fn):  # noqa: ANN001, ANN201 (distributed.Client.run's shape)
        return {"tcp://w1": self.held, "tcp://w2": self.held // 2}


def test_dask_workers_are_checked_against_the_limit_before_any_chunk():
    """Issue 38 item 6: each Dask worker is a process under the same limit;
    one that would pass it (here: 440 MiB held after loading the kernel, plus
    the spec's configs and a chunk, under 450 MiB) is refused in one line."""
    from planner.sweep import driver
    from planner.sweep.spec import load_spec

    sweep = load_spec(Path(__file__).parents[1] / "sweeps" / "quick.toml")
    plan = driver.plan_chunks(sweep, None, 2**30)
    limit = 450 * 2**20
    with pytest.raises(driver.SweepError, match="a Dask worker would need about") as e:
        driver.check_workers(sweep, plan, limit, _Workers(440 * 2**20))
    assert "\n" not in str(e.value)
    driver.check_workers(sweep, plan, limit, _Workers(100 * 2**20))  # fits: no error


def _worker_peak() -> int:
    """A Dask worker's own peak RSS (VmHWM, bytes), run on the worker."""
    hwm = Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]
    return int(hwm) * 1024


@pytest.mark.slow
def test_dask_workers_stay_under_the_limit_or_are_refused(tmp_path: Path):
    """On a real LocalCluster: a limit below what a worker holds once it has
    loaded the kernel is refused before any chunk; under a limit the check
    passes, the sweep runs and every worker's measured peak RSS stays under it."""
    from planner.sweep import driver, executors
    from planner.sweep.report import Silent
    from planner.sweep.spec import load_spec

    sweep = load_spec(Path(__file__).parents[1] / "tests" / "data" / "size_small.toml")
    plan = driver.plan_chunks(sweep, None, 2**30)
    # One limit for the driver (this test process, which may already hold a
    # lot under pytest-xdist) and each worker: at least 1 GiB.
    limit = max(2**30, driver.process_bytes() + 256 * 2**20)
    with executors.dask_client(None, 1) as client:
        held = max(client.run(driver.process_bytes).values())
        with pytest.raises(driver.SweepError, match="a Dask worker would need about"):
            driver.check_workers(sweep, plan, held, client)
        driver.check_workers(sweep, plan, limit, client)  # fits
        address = client.scheduler.address  # the sweep runs on these very workers
        df, ran = driver.run_sweep(
            sweep, tmp_path / "out", None, limit, 1, False, False, Silent(), "dask", address
        )
        assert ran and len(df) == len(sweep.configs)
        peaks = client.run(_worker_peak).values()
    assert max(peaks) < limit, f"a worker peaked at {max(peaks) / 2**20:.0f} MiB"
