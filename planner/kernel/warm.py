"""Compile the step loop's phases in two processes when Numba's cache is cold.

Why: a first run on a new machine spends almost all its time compiling. On
2026-12-01 (2-core machine, cold cache), 26.9 CPU-s went to the first
``simulate``; with every phase function already in the cache, ``run_steps``
itself compiled in 2.6 CPU-s. The phases are independent of one another, so
they can be compiled at the same time.

How: Numba compiles a jitted function once per signature and, with
``cache=True``, writes it to its on-disk cache; a caller compiled later loads
its callees from that cache instead of compiling them (``Dispatcher.compile``
tries ``self._cache.load_overload`` first, ``numba/core/dispatcher.py``). So
before the first ``run_steps``, ``compile_ahead`` compiles ``run_steps``'
phase functions with the signatures ``run_steps`` calls them with (the Numba
types of the very arguments ``step.simulate_one`` passes): the ``CHILD`` part
in a child process (``python -m planner.kernel.warm``, the signatures pickled
on its stdin), the ``HERE`` part in this one. It then waits for the child;
``run_steps`` compiles next and finds every phase compiled.

Nothing here changes what is computed: it only decides where the same
functions are compiled. If the child fails or cannot start, the phases it
had are compiled on demand as before (slower, never wrong).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numba
import numpy as np

from planner.kernel import cycle as CY
from planner.kernel import step as ST

CHILD_TIMEOUT_S = 600.0  # a child still compiling after this is abandoned
_LOCK = threading.Lock()
_DONE: set[tuple] = set()  # argument types compiled ahead in this process
_ALLOWED = [True]  # off while a caller's memory budget has no room for the child
# The child's peak RSS (``resource.getrusage(RUSAGE_CHILDREN)``, 2026-12-01,
# Linux x86-64, Python 3.11, Numba 0.68): 270 MiB, plus 12.5%. The parent's
# own cold compile peaks lower than a whole compile in one process.
CHILD_BYTES = 304 * 2**20


@contextlib.contextmanager
def allowed(on: bool) -> Iterator[None]:
    """Within the block, compile ahead only if ``on`` (a sweep whose memory
    limit has no room for the child's ``CHILD_BYTES`` turns it off)."""
    before = _ALLOWED[0]
    _ALLOWED[0] = on
    try:
        yield
    finally:
        _ALLOWED[0] = before


@contextlib.contextmanager
def variant_lock(key: str) -> Iterator[None]:
    """Within the block, hold an exclusive advisory lock (``fcntl.flock``) on
    a file named after ``key`` in the step loop's Numba cache folder, so that
    processes on one machine that would compile the same kernel variant at
    once (pytest-xdist or Dask workers, two plan commands) take turns: the
    second finds the first's compile in the cache and loads it. Without
    ``fcntl`` or a writable cache folder there is no lock (never fail a run
    over it); the lock ends with the process if it dies."""
    try:
        import fcntl

        folder = Path(ST.run_steps._cache._cache_path)  # numba/core/caching.py
        folder.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        fd = os.open(folder / f"compile-{digest}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    except (ImportError, AttributeError, OSError):
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def phase_signatures(types: tuple, made: tuple | None = None) -> tuple[list, list]:
    """(child part, here part): (dispatcher, signature) of every phase call
    ``run_steps`` makes, for the Numba ``types`` of (cfg, cfgf, rq, st, q, o,
    check, caching) as ``step.simulate_one`` gets them (``caching`` a
    boolean's type or None's: ``step.prefix_cache_of``). The scratch and
    prefix-cache types are those ``_init`` and ``new_prefix_cache`` return
    (compiled here for them; never run).
    The parts are balanced by measured compile time (module docstring): the
    decode fast path and the livelock detector against the scheduler's
    phases."""
    cfg, cfgf, rq, st, q, o, x, check, caching = types
    k = _field(o, "counters")
    sc, p = made if made is not None else _scratch_and_cache(types)
    s, cyc, dt = _field(sc, "step"), _field(sc, "cycle"), numba.types.int64
    child = [
        (ST._decode_fast_path, (cfg, cfgf, rq, st, q, o, sc, p, check)),
        (CY.livelock_proven, (cfg, st, q, k, p, cyc)),
        (CY.after_fast_path, (cfg, k, cyc)),
    ]
    extras = _field(rq, "features").types[0] != numba.types.none  # variant.Features.extras
    if extras:  # async scheduling's output path
        child.append((ST._update_from_output_async, (cfg, rq, st, q, o, s, p, x)))
    here = [
        (ST._schedule_running, (cfg, rq, st, q, o, s, p)),
        (ST._schedule_waiting, (cfg, rq, st, q, o, sc, p)),
        (ST._arrivals, (cfg, rq, st, q, k)),
        (ST._update_from_output, (cfg, rq, st, q, o, s, p, x)),
        (ST._end_step, (cfg, st, q, o, s, p, check, dt)),  # dt: int64, as `mamba`
        (ST._update_after_schedule, (cfg, dt, rq, st, q, o, s)),
        (ST._step_time, (cfg, cfgf, rq, k, s)),
        (ST._begin_step, (cfg, k, s)),
    ]
    if extras:  # the adaptive cap
        here.append((ST._adapt_cap, (cfg, k)))
    return child, here


def _scratch_and_cache(types: tuple) -> tuple[numba.types.Type, numba.types.Type]:
    """The Numba types of ``run_steps``' scratch and prefix-cache arguments
    for ``types`` (as ``phase_signatures`` takes them): what ``_init`` and
    ``new_prefix_cache`` return (compiled here for them; never run), or
    None's type without prefix caching (``step.prefix_cache_of``)."""
    cfg, _, rq, _, _, o, _, _, caching = types
    a32, a64 = (numba.typeof(np.empty(1, dtype=t)) for t in (np.int32, np.int64))
    sc = _returns(ST._init, (cfg, rq, _field(o, "counters"), a32))
    p = caching
    if caching != numba.types.none:
        p = _returns(ST.new_prefix_cache, (cfg, rq, a32, a64))
    return sc, p


def compile_loop(args: tuple) -> None:
    """Compile (or load from Numba's cache) ``run_steps`` for ``args`` (as
    ``compile_ahead`` takes them) with the signature ``step.simulate_one``
    calls it with, so that a caller can time the compile apart from the run."""
    types = tuple(numba.typeof(a) for a in args)
    cfg, cfgf, rq, st, q, o, x, check, _ = types
    sc, p = _scratch_and_cache(types)
    ctl = numba.typeof(np.zeros(1, dtype=np.int64))
    ST.run_steps.compile((cfg, cfgf, rq, st, q, o, x, sc, p, ctl, numba.types.boolean, check))


def _returns(fn: object, sig: tuple) -> numba.types.Type:
    """The Numba type ``fn`` returns for argument types ``sig`` (compiled)."""
    fn.compile(sig)  # type: ignore[attr-defined]
    return fn.overloads[sig].signature.return_type  # type: ignore[attr-defined]


def _field(tuple_type: numba.types.Type, name: str) -> numba.types.Type:
    """The Numba type of field ``name`` of a named-tuple type."""
    return tuple_type.types[tuple_type.fields.index(name)]


def compile_ahead(args: tuple) -> bool:
    """Compile ``run_steps``' phases for ``args`` (cfg, cfgf, rq, st, q, o,
    check, ``step.caching_marker``) in two processes, once per signature set
    per process. Returns whether a child process compiled its part (False:
    none was started, or it failed; its phases then compile on demand)."""
    types = tuple(numba.typeof(a) for a in args)
    with _LOCK:
        if types in _DONE or not _ALLOWED[0]:
            return False
        _DONE.add(types)
        # The scratch and cache types first (compiling _init): the child gets
        # them rather than compiling _init again (1.1 CPU-s, 2026-12-04).
        made = _scratch_and_cache(types)
        proc = _start_child((types, made))
        try:
            for fn, sig in phase_signatures(types, made)[1]:
                fn.compile(sig)
            return _wait(proc)
        finally:  # Ctrl-C or an error here: the child's work is no longer wanted
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def _start_child(payload: tuple) -> subprocess.Popen | None:
    """``python -m planner.kernel.warm`` with ``payload`` (the argument types
    and ``_scratch_and_cache``'s) pickled on its stdin; None if it cannot
    start."""
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "planner.kernel.warm"],
            cwd=package_root(),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdin is not None
        proc.stdin.write(pickle.dumps(payload))
        proc.stdin.close()
        return proc
    except (OSError, pickle.PicklingError):
        return None


def package_root() -> str:
    """The folder holding the ``planner`` package this process runs. The
    child starts there: ``python -m`` puts its working directory first on
    ``sys.path``, so started from a checkout's root while the parent runs an
    installed copy, the child would compile the checkout's kernel into the
    checkout's cache, which the parent never reads (the README's main job,
    run from a fresh clone, compiled everything twice this way: 27 CPU-s and
    20 s wall, 2026-12-04)."""
    return str(Path(ST.__file__).resolve().parents[2])


def _wait(proc: subprocess.Popen | None) -> bool:
    if proc is None:
        return False
    try:
        return proc.wait(timeout=CHILD_TIMEOUT_S) == 0
    except subprocess.TimeoutExpired:
        proc.kill()
        return False


def _compile_child_part(payload: tuple) -> None:
    """The child's work: compile the child part of ``phase_signatures``."""
    types, made = payload
    for fn, sig in phase_signatures(types, made)[0]:
        fn.compile(sig)


def _exit_with_parent(interval_s: float = 0.5) -> None:
    """In the child: exit as soon as the parent is gone (killed without
    killing its process group), instead of compiling on for nobody. A daemon
    thread; Numba's compile releases the GIL in LLVM, so it gets to run."""
    import os
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="warm-parent-watch").start()


if __name__ == "__main__":
    _exit_with_parent()
    _compile_child_part(pickle.loads(sys.stdin.buffer.read()))
