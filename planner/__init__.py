"""planner: capacity planning for LLM servers running the vLLM v1 scheduler.

The sweep API (``load_spec``, ``Spec``, ``run_sweep``, ``estimate``; ``planner.sweep.api``)
is exported lazily: ``import planner`` does not import numba or pandas.

Installed as the distribution ``vllm-capacity-planner``; the import name
stays ``planner`` (see ``planner.install_check`` for the clash this marks).
"""

from planner import install_check as _distribution
from planner import numba_cache as _numba_cache

_numba_cache.configure()  # before any jitted module loads (planner.numba_cache)

__distribution__ = _distribution.NAME  # the marker planner.install_check.check() looks for
__version__ = _distribution.VERSION

_LAZY = ("Spec", "estimate", "load_spec", "run_sweep")


def __getattr__(name: str) -> object:
    """Import the sweep API on first use (PEP 562)."""
    if name in _LAZY:
        from planner.sweep import api as sweep_api

        return getattr(sweep_api, name)
    raise AttributeError(f"module 'planner' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
