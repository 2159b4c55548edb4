"""The range and tolerance of the highest-rate search (``planner.maxrate.search``),
apart from the search itself so that sweep specs can validate a ``[search]``
table without importing the kernel."""

from __future__ import annotations

from dataclasses import dataclass

from planner import bounds

DEFAULT_REL_TOL = 0.02  # stop when smallest fail / largest pass <= 1.02
DEFAULT_MIN_SCALE = 1e-3
DEFAULT_MAX_SCALE = 1e3


class SearchError(ValueError):
    """A search that cannot run (bad range or workload); one line."""


@dataclass(frozen=True)
class SearchRange:
    """Rate scales searched, ``lo``..``hi`` (> 0, lo < hi), and the relative
    tolerance of the answer. Raises SearchError (one line, naming ``names``)."""

    lo: float = DEFAULT_MIN_SCALE
    hi: float = DEFAULT_MAX_SCALE
    rel_tol: float = DEFAULT_REL_TOL
    names: tuple[str, str, str] = ("--rate-scale-min", "--rate-scale-max", "--rate-tolerance")

    def __post_init__(self) -> None:
        lo_name, hi_name, tol_name = self.names
        for name, v in ((lo_name, self.lo), (hi_name, self.hi)):
            if not (bounds.MIN_RATE_SCALE <= v <= bounds.MAX_RATE_SCALE):
                raise SearchError(
                    f"{name} must be a rate scale in {bounds.MIN_RATE_SCALE:g}.."
                    f"{bounds.MAX_RATE_SCALE:g}, got {v:g}"
                )
        if not self.lo < self.hi:
            raise SearchError(
                f"{lo_name} {self.lo:g} must be below {hi_name} {self.hi:g}: the search "
                "range is empty or inverted"
            )
        if not (1e-4 <= self.rel_tol <= 1.0):
            raise SearchError(f"{tol_name} must be in 0.0001..1, got {self.rel_tol:g}")
