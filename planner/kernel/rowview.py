"""``row(record, c)``: config c's view of every array in a state record, in jitted code.

The fleet kernel (``fleet.py``) hands each replica the c-th row of every
(C, ...) array of a ``state`` record. Numba cannot loop over a heterogeneous named tuple, so
``row`` is an ``overload`` that writes the constructor call from the record's
field names at compile time: a new field in a record needs no change here.
"""

from __future__ import annotations

from numba import types
from numba.core.errors import TypingError
from numba.extending import overload


def row(record: tuple, c: int) -> tuple:
    """Pure-Python form (``state.rows``); the jitted form is the overload below."""
    return type(record)(*(a[c] for a in record))


@overload(row)
def _row_overload(record, c):  # noqa: ANN001, ANN202 (Numba types, not values)
    """Build ``impl(record, c) = Record(record.f0[c], record.f1[c], ...)``."""
    if not isinstance(record, types.BaseNamedTuple):
        raise TypingError("row() takes a named tuple of arrays")
    cls = record.instance_class
    args = ", ".join(f"record[{i}][c]" for i in range(len(record.fields)))
    namespace = {"cls": cls}
    exec(f"def impl(record, c):\n    return cls({args})\n", namespace)  # noqa: S102
    return namespace["impl"]
