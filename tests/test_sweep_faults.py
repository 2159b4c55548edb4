"""Sweeps under faults (issue 19, items 2 and 3): the output folder's lock,
per-chunk checksums, resume after SIGKILL at any moment, damaged chunks.

One tiny spec (36 configs, chunks of 4: nine chunk files) keeps the suite quick.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from filelock import FileLock, Timeout

from helpers import run_cli
from planner.sweep import executors, store

SPEC = """
name = "tiny"
horizon_s = 10.0

[workload]
kind = "synthetic"
num_requests = 30
arrival = "poisson"
rate = 4.0
prompt = { kind = "lognormal", mean = 200, stdev = 100, min = 10, max = 1000 }
output = { kind = "lognormal", mean = 100, stdev = 100, min = 5, max = 1000 }

[axes]
max_num_seqs = [2, 4, 8, 16, 32, 64]
num_gpu_blocks = [60, 100, 200, 400, 800, 1600]
"""
CHUNK = ["--chunk-size", "4"]
NUM_CHUNKS = 9
# The fault-injection hook (store.WRITE_DELAY_ENV): seconds between writing a
# temp file and renaming it into place.
WRITE_DELAY_ENV = "PLANNER_TEST_WRITE_DELAY"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "None" not in lines[0], err
    return lines[0]


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("spec") / "tiny.toml"
    p.write_text(SPEC)
    return p


@pytest.fixture(scope="module")
def other_spec(spec) -> Path:
    """Same grid, another horizon: another spec."""
    p = spec.with_name("other.toml")
    p.write_text(SPEC.replace("horizon_s = 10.0", "horizon_s = 5.0"))
    return p


@pytest.fixture(scope="module")
def reference(spec) -> str:
    """sha256 of data.parquet from an uninterrupted run."""
    out = spec.parent / "ref"
    from planner.cli.commands import main

    main(["sweep", str(spec), "--out", str(out), *CHUNK])
    return sha(out / store.DATA)


@pytest.fixture
def interrupted(capsys, spec, tmp_path, monkeypatch, reference) -> Path:
    """A sweep interrupted (Ctrl-C) just before its merge: every chunk file and
    the manifest on disk, no data.parquet."""
    out = tmp_path / "interrupted"

    def stop(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(store, "consolidate", stop)
        code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(out), *CHUNK)
    assert code == 130, err
    assert len(list((out / store.CHUNKS).glob("chunk-*.parquet"))) == NUM_CHUNKS
    assert not (out / store.DATA).exists()
    assert f"{NUM_CHUNKS} finished chunks in {out}; rerun with --resume" in err, err
    return out


def test_an_interrupt_before_any_chunk_says_there_is_nothing_to_resume(
    capsys, spec, tmp_path, monkeypatch
):
    def stop(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "write_chunk", stop)
    out = tmp_path / "early"
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(out), *CHUNK)
    assert code == 130 and "before any chunk was written" in err and "--resume" not in err, err


def sweep_cmd(spec: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "planner.cli", "sweep", str(spec), "--out", str(out), *extra]


def wait_until_holding(proc: subprocess.Popen, out: Path, timeout: float = 60.0) -> bool:
    """True once ``proc`` holds ``out``'s lock (the holder file names its pid);
    False if it exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError, ValueError, KeyError):
            if json.loads((out / store.HOLDER).read_text())["pid"] == proc.pid:
                return True
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    raise AssertionError(f"the sweep never took the lock of {out}")


def wait_for_chunk_write(proc: object, out: Path, timeout: float = 10.0) -> None:
    """Return as soon as a chunk's temp file exists (a chunk write is under
    way), or ``proc`` has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if any((out / store.CHUNKS).glob(".chunk-*.tmp")):
            return
        time.sleep(0.002)


def assert_finished(out: Path, reference: str) -> None:
    assert sha(out / store.DATA) == reference
    assert sorted(p.name for p in out.iterdir()) == sorted([store.DATA, store.MANIFEST, store.LOCK])
    assert json.loads((out / store.MANIFEST).read_text())["complete"] is True


# A process that imports planner.cli.commands once, then forks one child per request to
# run the CLI's entry point (what ``python -m planner.cli`` runs), its output
# in a log file: kills then cost no interpreter start-up. It imports but runs
# nothing before forking (no kernel threads yet). Requests and replies are
# JSON lines: ["run", [argv, log]] -> pid; ["poll", pid] -> exit code or null;
# ["wait", pid] -> exit code.
LAUNCHER = r"""
import json, os, sys, traceback
import planner.cli.commands
for line in sys.stdin:
    op, arg = json.loads(line)
    if op == "run":
        reply = os.fork()
        if reply == 0:
            fd = os.open(arg[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            code = 1
            try:
                planner.cli.commands.main(arg[0])
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
    elif op == "poll":
        pid, status = os.waitpid(arg, os.WNOHANG)
        reply = None if pid == 0 else os.waitstatus_to_exitcode(status)
    else:
        reply = os.waitstatus_to_exitcode(os.waitpid(arg, 0)[1])
    print(json.dumps(reply), flush=True)
"""


class Forked:
    """A CLI run forked by the launcher, with Popen's pid/poll/kill/wait."""

    def __init__(self, launcher: subprocess.Popen, argv: list[str], log: Path) -> None:
        self.launcher = launcher
        self.returncode: int | None = None
        self.pid = self._ask("run", [argv, str(log)])

    def _ask(self, op: str, arg: object) -> object:
        self.launcher.stdin.write(json.dumps([op, arg]) + "\n")
        self.launcher.stdin.flush()
        return json.loads(self.launcher.stdout.readline())

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._ask("poll", self.pid)
        return self.returncode

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = self._ask("wait", self.pid)
        return self.returncode


class Real(subprocess.Popen):
    """``python -m planner.cli ARGV`` in a fresh interpreter, output in a log."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str]) -> None:
        with log.open("w") as f:
            cmd = [sys.executable, "-m", "planner.cli", *argv]
            super().__init__(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_gives_the_same_bytes(spec, tmp_path, reference):
    """24 SIGKILLs, each at a random moment after the sweep took its folder;
    every run after the first is a --resume of the killed one, until one
    finishes; then again in a new folder. Writes sleep between temp file and
    rename, so many kills land inside a write (and every third kill waits for
    a chunk's temp file to show before it strikes). The first four runs are fresh
    ``python -m planner.cli`` processes, the rest forked by LAUNCHER."""
    rng = random.Random(20261130)
    env = {**os.environ, WRITE_DELAY_ENV: "0.02"}
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    log = tmp_path / "log.txt"
    kills = chunk_write_kills = runs = folder = 0
    out = tmp_path / f"k{folder}"
    try:
        while kills < 24:
            argv = ["sweep", str(spec), "--out", str(out), *CHUNK, "--workers", "1", "--resume"]
            proc = Real(argv, log, env) if runs < 4 else Forked(launcher, argv, log)
            runs += 1
            if wait_until_holding(proc, out):
                if runs % 3 == 0:  # every third: the moment a chunk's temp file shows
                    wait_for_chunk_write(proc, out)
                else:
                    time.sleep(rng.uniform(0.0, 0.6))
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                kills += 1
                chunk_write_kills += any((out / store.CHUNKS).glob(".chunk-*.tmp"))
                continue
            assert proc.wait() == 0, log.read_text()
            assert_finished(out, reference)
            folder += 1
            out = tmp_path / f"k{folder}"
        proc = Forked(launcher, ["sweep", str(spec), "--out", str(out), "--resume"], log)
        assert proc.wait() == 0, log.read_text()
        assert_finished(out, reference)
    finally:
        launcher.stdin.close()
        launcher.wait(timeout=60)
    assert chunk_write_kills >= 4, (kills, chunk_write_kills, runs, folder)


def test_stale_temp_file_from_a_killed_chunk_write_is_removed_on_resume(
    capsys, spec, interrupted, reference
):
    """The reported loop: a temp file left in _chunks made every --resume
    recompute everything and fail removing _chunks ("Directory not empty")."""
    chunks = interrupted / store.CHUNKS
    (chunks / ".chunk-00003.parquet.k1ll3d.tmp").write_bytes(b"PAR1 partial")
    (interrupted / f".{store.MANIFEST}.k1ll3d.tmp").write_text("{")
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(interrupted), "--resume")
    assert code == 0, err
    assert "recomputing" not in err  # every chunk file verified: nothing rerun
    assert_finished(interrupted, reference)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_flipped_byte_in_a_chunk_never_changes_the_dataset_silently(
    capsys, spec, interrupted, reference, tmp_path, seed
):
    """Flip one byte at sampled offsets of sampled chunk files (first and last
    bytes included): resume recomputes that chunk, saying so, or refuses (exit 2)."""
    rng = random.Random(seed)
    for trial in range(10):
        out = tmp_path / f"flip{trial}"
        shutil.copytree(interrupted, out)
        index = rng.randrange(NUM_CHUNKS)
        path = store.chunk_path(out, index)
        data = bytearray(path.read_bytes())
        offset = [0, len(data) - 1][trial] if trial < 2 else rng.randrange(len(data))
        data[offset] ^= rng.randrange(1, 256)
        path.write_bytes(bytes(data))
        code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(out), "--resume")
        if code == 2:
            one_line(err)
            continue
        assert code == 0, (index, offset, err)
        assert "recomputing 1 chunk(s)" in err and f"chunk {index} (checksum mismatch)" in err
        assert_finished(out, reference)


def test_flipped_byte_in_the_manifest_is_recomputed_or_refused(
    capsys, spec, interrupted, reference, tmp_path
):
    """The manifest holds the checksums: damage to it must not slip through
    either (resume completes with the same bytes, or exits 2 with one line)."""
    rng = random.Random(7)
    size = (interrupted / store.MANIFEST).stat().st_size
    for trial, offset in enumerate(sorted(rng.sample(range(size), 12))):
        out = tmp_path / f"m{trial}"
        shutil.copytree(interrupted, out)
        data = bytearray((out / store.MANIFEST).read_bytes())
        data[offset] ^= rng.randrange(1, 256)
        (out / store.MANIFEST).write_bytes(bytes(data))
        code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(out), "--resume")
        if code == 2:
            one_line(err)
        else:
            assert code == 0, (offset, err)
            assert_finished(out, reference)


def test_truncated_missing_or_unrecorded_chunks_are_recomputed(
    capsys, spec, interrupted, reference
):
    manifest = json.loads((interrupted / store.MANIFEST).read_text())
    del manifest["chunks"]["2"]  # killed between the chunk's rename and the manifest update
    (interrupted / store.MANIFEST).write_text(json.dumps(manifest))
    path = store.chunk_path(interrupted, 5)
    path.write_bytes(path.read_bytes()[:-100])
    store.chunk_path(interrupted, 7).unlink()
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(interrupted), "--resume")
    assert code == 0, err
    line = next(x for x in err.splitlines() if "recomputing" in x)
    assert "chunk 2 (no checksum in the manifest)" in line
    assert "chunk 5 (checksum mismatch)" in line and "chunk 7" not in line
    assert_finished(interrupted, reference)


def test_chunk_damaged_before_the_merge_is_recomputed(
    capsys, spec, tmp_path, reference, monkeypatch
):
    """The merge verifies too: a chunk damaged after it was written and
    checked is recomputed, never merged."""
    out = tmp_path / "o"
    real = store.consolidate

    def damage_then_merge(out_: Path, *args: object) -> object:
        if not hasattr(damage_then_merge, "done"):
            damage_then_merge.done = True
            p = store.chunk_path(out_, 4)
            p.write_bytes(p.read_bytes().replace(b"PAR1", b"PAR2", 1))
        return real(out_, *args)

    monkeypatch.setattr(store, "consolidate", damage_then_merge)
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(out), *CHUNK)
    assert code == 0, err
    assert "recomputing 1 chunk(s)" in err and "chunk 4 (checksum mismatch)" in err
    assert_finished(out, reference)


def test_damaged_dataset_of_a_finished_sweep_is_refused(capsys, spec, tmp_path, reference):
    out = tmp_path / "o"
    assert run_cli(capsys, "sweep", str(spec), "--out", str(out), *CHUNK)[0] == 0
    data = bytearray((out / store.DATA).read_bytes())
    data[1000] ^= 1
    (out / store.DATA).write_bytes(bytes(data))
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(out), "--resume")
    assert code == 2 and "checksum" in one_line(err) and "--overwrite" in err


@pytest.mark.slow
def test_second_sweep_into_a_busy_folder_refuses_naming_the_holder(
    capsys, spec, other_spec, tmp_path, reference
):
    """A runs (slowed down); B, with another spec or the same, plain, --resume
    or --overwrite, exits 2 with one line naming A; A's dataset is A's alone."""
    out = tmp_path / "shared"
    env = {**os.environ, WRITE_DELAY_ENV: "0.12"}
    a = subprocess.Popen(
        sweep_cmd(spec, out, *CHUNK), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    try:
        assert wait_until_holding(a, out), a.communicate()[1]
        for b_spec, flags in [
            (other_spec, []),
            (other_spec, ["--overwrite"]),
            (other_spec, ["--resume"]),
            (spec, []),
            (spec, ["--resume"]),
        ]:
            code, _, err = run_cli(capsys, "sweep", str(b_spec), "--out", str(out), *flags)
            line = one_line(err)
            assert code == 2, err
            assert f"pid {a.pid} on host {socket.gethostname()}" in line, line
            assert "in use by another sweep" in line
        assert a.poll() is None, "A finished before B tried: the test proves nothing"
    finally:
        _, a_err = a.communicate(timeout=120)
    assert a.returncode == 0, a_err
    assert_finished(out, reference)
    assert pq.read_metadata(out / store.DATA).num_rows == 36


def test_lock_is_released_and_the_holder_file_removed_after_a_sweep(capsys, spec, tmp_path):
    out = tmp_path / "o"
    assert run_cli(capsys, "sweep", str(spec), "--out", str(out), *CHUNK)[0] == 0
    assert not (out / store.HOLDER).exists()
    lock = FileLock(out / store.LOCK, timeout=0)
    lock.acquire()
    lock.release()


def test_dask_path_runs_under_the_folder_lock(capsys, spec, tmp_path, monkeypatch):
    """The driver holds the lock while it talks to the cluster (here a stand-in
    that checks the lock and stops)."""
    out = tmp_path / "o"
    seen = []

    @contextlib.contextmanager
    def fake_client(*args: object):
        try:
            FileLock(out / store.LOCK, timeout=0).acquire()
        except Timeout:
            seen.append("held")
        raise executors.ExecutorError("stand-in cluster stops here")
        yield

    monkeypatch.setattr(executors, "dask_client", fake_client)
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(out), "--executor", "dask")
    assert code == 2 and "stand-in" in one_line(err)
    assert seen == ["held"]
    assert not out.exists()  # nothing was written: the folder it made is gone


def test_resume_with_another_spec_or_version_refuses(capsys, spec, other_spec, interrupted):
    before = {p.name: p.read_bytes() for p in interrupted.rglob("*") if p.is_file()}
    code, _, err = run_cli(capsys, "sweep", str(other_spec), "--out", str(interrupted), "--resume")
    assert code == 2 and "spec or its workload changed" in one_line(err)
    manifest = json.loads((interrupted / store.MANIFEST).read_text())
    manifest["planner_version"] = "0.0.1"
    (interrupted / store.MANIFEST).write_text(json.dumps(manifest))
    before[store.MANIFEST] = (interrupted / store.MANIFEST).read_bytes()
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(interrupted), "--resume")
    assert code == 2 and "started by planner 0.0.1" in one_line(err)
    after = {p.name: p.read_bytes() for p in interrupted.rglob("*") if p.is_file()}
    assert after == before


def test_garbled_manifest_is_one_line(capsys, spec, interrupted):
    manifest = json.loads((interrupted / store.MANIFEST).read_text())
    manifest["chunks"]["1"] = {"sha256": 7}
    (interrupted / store.MANIFEST).write_text(json.dumps(manifest))
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(interrupted), "--resume")
    assert code == 2 and "not a planner manifest" in one_line(err)


def test_os_error_without_strerror_is_a_real_line(capsys, spec, tmp_path, monkeypatch):
    """pyarrow raises OSErrors with a message and no errno: once printed as
    'plan: error: None: None'."""

    def fail(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("simulated: the bucket went away")

    monkeypatch.setattr(pq, "write_table", fail)
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "o"))
    assert code == 2 and "Traceback" not in err and "None" not in err, err
    # (the progress bar, already drawn, stays above the error)
    assert err.strip().splitlines()[-1] == "plan: error: simulated: the bucket went away"
    trace = tmp_path / "trace.parquet"
    code, _, err = run_cli(capsys, "run", "--num-gpu-blocks", "200", "--trace", str(trace))
    assert code == 2
    assert one_line(err) == f"plan: error: cannot write {trace}: simulated: the bucket went away"
