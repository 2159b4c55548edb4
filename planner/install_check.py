"""Which installed distribution this ``planner`` package belongs to.

The import name ``planner`` is also used by an unrelated PyPI distribution,
``planner`` (a best-first planning library, https://github.com/chrisspen/planner),
which installs its own top-level ``planner/__init__.py``. Installed into the
same environment, one package's files overwrite the other's. This
package's distribution is therefore named ``vllm-capacity-planner``, and its
``planner/__init__.py`` carries ``__distribution__`` naming it, so that the
``plan`` command can tell when the imported ``planner`` is not ours.
"""

from __future__ import annotations

from types import ModuleType

NAME = "vllm-capacity-planner"
VERSION = "0.1.0"  # the one definition: pyproject.toml reads it, planner.__version__ re-exports it
# The vLLM release whose v1 scheduler the kernel mirrors step for step (the
# golden traces in tests/golden were recorded from it).
VLLM_MIRRORED = "0.33.0"


def provenance() -> dict[str, str]:
    """What every result the planner writes records about its maker:
    ``planner_version`` and ``vllm_version_mirrored`` (str each)."""
    return {"planner_version": VERSION, "vllm_version_mirrored": VLLM_MIRRORED}


class DistributionClash(Exception):
    """The imported ``planner`` package is not this project's; one line."""


def check(package: ModuleType) -> None:
    """Raise DistributionClash unless ``package`` (the imported ``planner``)
    carries this project's marker ``__distribution__ == NAME``."""
    if getattr(package, "__distribution__", None) == NAME:
        return
    fix = f"(re)install {NAME} in a virtual environment of its own"
    where = getattr(package, "__file__", None)
    if where is None:  # a namespace package: our __init__.py was removed
        raise DistributionClash(
            "the imported 'planner' package has no __init__.py (uninstalling another "
            f"distribution that installs 'planner' removes it): {fix}"
        )
    from importlib.metadata import packages_distributions

    others = sorted(set(packages_distributions().get("planner", [])) - {NAME})
    found = f"distribution {', '.join(others)}" if others else "another distribution"
    raise DistributionClash(
        f"the imported 'planner' package ({where}) comes from {found}, not {NAME}: "
        f"both install a top-level 'planner' module; {fix}"
    )
