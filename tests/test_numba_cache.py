"""The compiled kernel's cache is keyed by every source the kernel can reach
(``planner.numba_cache``): an edit to a callee module starts a new cache, a
user's NUMBA_CACHE_DIR stands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from planner import numba_cache


def _tree(root: Path) -> None:
    for rel in ("config.py", "kernel/step.py", "kernel/prefix_cache.py", "cli/run.py"):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# {rel}\n")


def test_a_callee_edit_changes_the_key_and_a_cli_edit_does_not(tmp_path):
    _tree(tmp_path)
    key = numba_cache.source_key(tmp_path)
    (tmp_path / "cli/run.py").write_text("# edited\n")
    assert numba_cache.source_key(tmp_path) == key  # after the kernel's stage
    for rel in ("kernel/prefix_cache.py", "config.py"):
        (tmp_path / rel).write_text("# edited\n")
        assert numba_cache.source_key(tmp_path) != key, rel
        key = numba_cache.source_key(tmp_path)
    (tmp_path / "kernel/new_module.py").write_text("")
    assert numba_cache.source_key(tmp_path) != key


def test_every_kernel_module_is_hashed():
    names = {p.relative_to(numba_cache.PKG).as_posix() for p in numba_cache.kernel_sources()}
    assert {"kernel/step.py", "kernel/prefix_cache.py", "config.py", "speculative.py"} <= names
    assert not any(n.startswith(("cli/", "plots/", "report/")) for n in names)


def test_configure_sets_a_keyed_folder_unless_the_user_set_one(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    folder = numba_cache.configure(env)
    assert folder == env["NUMBA_CACHE_DIR"]
    assert Path(folder) == tmp_path / "vllm-capacity-planner/numba" / numba_cache.source_key()
    env = {"PLANNER_NUMBA_CACHE": str(tmp_path / "mine")}
    assert numba_cache.configure(env) == str(tmp_path / "mine" / numba_cache.source_key())
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "user"), "XDG_CACHE_HOME": str(tmp_path)}
    assert numba_cache.configure(env) is None
    assert env["NUMBA_CACHE_DIR"] == str(tmp_path / "user")


def test_the_kernel_loads_with_the_keyed_folder(tmp_path):
    # the suite's own cache base (tests/conftest.py) aside
    env = {
        k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PLANNER_NUMBA_CACHE")
    }
    env["XDG_CACHE_HOME"] = str(tmp_path)
    code = "import planner.kernel.step, numba; print(numba.config.CACHE_DIR)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    expected = tmp_path / "vllm-capacity-planner/numba" / numba_cache.source_key()
    assert out.stdout.strip() == str(expected)


def test_a_thread_count_numba_cannot_use_is_named_before_numba_loads():
    assert numba_cache.threads_problem({}) is None
    assert numba_cache.threads_problem({"NUMBA_NUM_THREADS": "3"}) is None
    for bad in ("0", "-1", "abc", "", "2.5"):
        assert "NUMBA_NUM_THREADS" in numba_cache.threads_problem({"NUMBA_NUM_THREADS": bad})
    # Numba raises with a traceback at import for 0 (and only warns for text): the
    # command says one line, exit 2, before Numba loads.
    env = {**os.environ, "NUMBA_NUM_THREADS": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "planner.cli", "models"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("plan: error: NUMBA_NUM_THREADS='0'")
    assert done.stderr.count("\n") == 1 and not done.stdout


def test_keyed_folders_unused_for_the_stale_period_are_pruned(tmp_path):
    """An import marks its own keyed folder as used and deletes only the other
    keyed folders whose mark is older than STALE_DAYS; other names stay."""
    now = 2_000_000_000.0
    day = 86400
    old, recent, current = (tmp_path / k for k in ("0" * 16, "a" * 16, "b" * 16))
    mine, file_like = tmp_path / "not-a-key", tmp_path / ("c" * 16)
    for folder in (old, recent, current, mine):
        (folder / "kernel").mkdir(parents=True)
    file_like.write_text("")
    os.utime(old, (now - (numba_cache.STALE_DAYS + 1) * day,) * 2)
    os.utime(recent, (now - (numba_cache.STALE_DAYS - 1) * day,) * 2)
    os.utime(current, (now - 400 * day,) * 2)
    os.utime(mine, (now - 400 * day,) * 2)
    assert numba_cache.prune(current, now=now) == [old]
    assert not old.exists()
    assert recent.exists() and mine.exists() and file_like.exists()
    assert current.stat().st_mtime == now  # marked as used


def test_configure_prunes_under_its_base_and_never_raises(tmp_path):
    stale = tmp_path / "numba" / ("d" * 16)
    stale.mkdir(parents=True)
    os.utime(stale, (1.0, 1.0))
    folder = numba_cache.configure({"PLANNER_NUMBA_CACHE": str(tmp_path / "numba")})
    assert folder is not None and Path(folder).is_dir() and not stale.exists()
    blocked = tmp_path / "file"
    blocked.write_text("")  # a base that is a file: nothing to mark, no error
    assert numba_cache.prune(blocked / ("e" * 16)) == []
