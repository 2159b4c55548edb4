"""One way every command prints ``--json``: standard JSON, one object per line.

Python's ``json`` writes NaN and infinities as bare ``NaN``/``Infinity``, which
RFC 8259 does not allow and strict readers (``jq``, JavaScript) refuse; a
quantity the run cannot give (the offered rate of a batch sent at once, a
percentile of no request) is written as ``null`` instead.
"""

from __future__ import annotations

import json
import math

import numpy as np

from planner.install_check import provenance


def finite(obj: object) -> object:
    """``obj`` with every NaN or infinite float (Python or NumPy) replaced by
    None, recursively through dicts, lists and tuples; other values as given."""
    if isinstance(obj, float | np.floating):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return finite(obj.tolist())
    return obj


def _plain(v: object) -> object:
    """NumPy scalars as Python numbers; anything else JSON cannot hold as its text."""
    if isinstance(v, np.generic):
        return finite(v.item())
    return str(v)


def dumps(obj: object, indent: int | None = None) -> str:
    """Standard JSON text of ``obj`` (see the module docstring); never NaN."""
    return json.dumps(finite(obj), default=_plain, allow_nan=False, indent=indent)


def print_json(obj: dict) -> None:
    """Print ``dumps(obj)`` on stdout, led by the planner's version and the
    vLLM version it mirrors (``install_check.provenance``): every result
    the planner writes records who made it."""
    print(dumps({**provenance(), **obj}))
