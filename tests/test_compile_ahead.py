"""A cold first run compiles the step loop's phases in two processes
(``planner.kernel.warm``; issue 18 case 8): the child's phases must be the
ones ``run_steps`` calls, with its signatures, so that ``run_steps`` loads them
from Numba's cache instead of compiling them again. A run without prefix
caching compiles none of the caching code (``step.prefix_cache_of``)."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest

from planner.kernel import step as ST
from planner.kernel import warm

SCRIPT = textwrap.dedent(
    """
    import json
    from planner import api
    from planner.config import SchedulerConfig
    from planner.kernel import warm
    from planner.latency.step_time import LinearLatency
    from planner.workload.traces import s1_exact

    assert api.kernel_status(1) == "cold"
    res = api.simulate([SchedulerConfig(num_gpu_blocks=7463)], s1_exact(), LinearLatency())
    types = next(iter(warm._DONE))
    child, here = warm.phase_signatures(types)
    stats = {f.py_func.__name__: [sum(f.stats.cache_hits.values()),
                                  sum(f.stats.cache_misses.values())] for f, _ in child}
    import os
    files = [f for _, _, fs in os.walk(os.environ["NUMBA_CACHE_DIR"]) for f in fs]
    caching_code = sorted({f.split("-")[0] for f in files if "prefix_cache" in f
                           or "cache_run" in f or "cache_events" in f})
    print(json.dumps({"completed": int(res.metrics().completed.iloc[0]), "child": stats,
                      "caching_code": caching_code}))
    """
)


@pytest.mark.slow
def test_run_steps_loads_every_child_phase_from_the_cache(tmp_path):
    """On an empty cache: the child compiled its phases; this process loaded
    each of them (a hit, no miss) and the run completed as usual."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    o = json.loads(out.stdout.strip().splitlines()[-1])
    assert o["completed"] > 0
    assert o["child"], "no phase compiled in the child"
    for name, (hits, misses) in o["child"].items():
        assert misses == 0 and hits >= 1, (name, hits, misses)
    # A run without prefix caching compiles none of the caching code (step.prefix_cache_of).
    assert o["caching_code"] == []


def _called_dispatchers(fn: object) -> set[str]:
    """Names of the non-inlined jitted functions ``fn``'s source calls."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn.py_func)))  # type: ignore[attr-defined]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else getattr(f, "attr", ""))
    out = set()
    for n in names:
        obj = getattr(ST, n, None)
        if hasattr(obj, "py_func") and obj.targetoptions.get("inline", "never") != "always":
            out.add(n)
    return out


def test_the_phases_are_every_jitted_call_of_run_steps(monkeypatch):
    """A phase added to run_steps and not to ``phase_signatures`` would
    compile serially again; this names it. The arguments are those
    ``simulate`` hands to ``compile_ahead`` on a cold cache (captured)."""
    from planner import api
    from planner.config import SchedulerConfig
    from planner.latency.step_time import LinearLatency
    from planner.workload.arrays import LengthDist, synthetic

    captured = []
    monkeypatch.setattr(api, "kernel_status", lambda *a, **k: "cold")
    monkeypatch.setattr(api, "compile_ahead", captured.append)
    d = LengthDist("constant", 8)
    api.simulate([SchedulerConfig(num_gpu_blocks=64)], synthetic(2, 1.0, d, d), LinearLatency())
    (args,) = captured
    child, here = warm.phase_signatures(tuple(numba.typeof(a) for a in args))
    listed = {f.py_func.__name__ for f, _ in child + here}
    # A small helper run_steps shares with a phase compiled here is compiled
    # by then (the same process; ``arrival_limit``).
    listed |= set().union(*(_called_dispatchers(f) for f, _ in here))
    assert _called_dispatchers(ST.run_steps) <= listed, _called_dispatchers(ST.run_steps) - listed
    assert not {f.py_func.__name__ for f, _ in child} & {f.py_func.__name__ for f, _ in here}


def test_no_child_when_not_allowed(monkeypatch):
    started = []
    monkeypatch.setattr(warm, "_start_child", lambda types: started.append(types))
    with warm.allowed(False):
        assert warm.compile_ahead((np.zeros(1),) * 7) is False
    assert started == []


def test_the_child_compiles_the_package_this_process_runs(monkeypatch, tmp_path):
    """Started from a folder holding another ``planner`` (a checkout's root,
    where the README's commands run an installed copy), ``python -m`` would
    import that one and compile into a cache the parent never reads: the
    child starts in the folder of the parent's own package."""
    import planner

    decoy = tmp_path / "planner"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy')\n")
    monkeypatch.chdir(tmp_path)
    seen = {}

    class FakePopen:
        def __init__(self, cmd, **kwargs):
            seen.update(kwargs, cmd=cmd)
            self.stdin = open(os.devnull, "wb")  # noqa: SIM115 (closed by _start_child)

    monkeypatch.setattr(warm.subprocess, "Popen", FakePopen)
    warm._start_child(((), ()))
    assert seen["cmd"][1:] == ["-m", "planner.kernel.warm"]
    root = Path(seen["cwd"])
    assert (root / "planner" / "__init__.py").resolve() == Path(planner.__file__).resolve()
    assert root != tmp_path


def test_one_process_at_a_time_holds_a_variants_compile_lock():
    """``variant_lock``: while one holder has a key's lock, another open of the
    same key waits (flock excludes separate opens even within one process),
    and gets it once released; a different key does not wait."""
    import threading

    from planner.kernel.warm import variant_lock

    got, other = threading.Event(), threading.Event()

    def second(key: str, event: threading.Event) -> None:
        with variant_lock(key):
            event.set()

    with variant_lock("a variant"):
        t = threading.Thread(target=second, args=("a variant", got))
        u = threading.Thread(target=second, args=("another variant", other))
        t.start()
        u.start()
        assert other.wait(30)  # a different key: not held up
        assert not got.wait(0.5)  # the same key: waits while it is held
    assert got.wait(30)
    t.join()
    u.join()
