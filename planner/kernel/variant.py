"""Kernel variants: a run compiles only the features its configurations use.

Why: Numba compiles a jitted function once per argument-type signature, and
every branch it types, whether or not a config ever takes it: the step loop
of a plain run compiled async scheduling's output path, closed-loop clients
and BLIS compatibility too (issue 34). Here those features sit behind
*markers* (``extras`` and ``heavy``, below), each ``True`` when some config
of the run uses one of its features and ``None`` when none does; they travel
as ``state.Requests.features``, so they are part of the argument types and
Numba compiles (and caches) one kernel per variant. A feature's code is
reached through ``gated``: with a ``None`` marker the call compiles to a
constant, and the feature's functions are never typed, compiled or loaded.

Why two markers and not one per feature: every variant is a whole compile of
the step loop (about 20 CPU-s on a 2-core machine, 2026-12-04), so a marker
per feature would make a user who tries async, then closed loop, then
compat blis wait for three compiles, and the test suite for dozens. The
plain variant (vLLM's sync scheduler, open loop) is the one sweeps and the
README main job run; ``extras`` holds the features with little code, which
vLLM's default async scheduling needs; ``heavy`` the few whose code is most
of a compile (below), and it implies ``extras``, so three variants.

The markers are the union over one ``api.simulate`` call (a sweep passes its
whole grid's, so all its chunks share one kernel). Inside the kernel each
config still reads its own flags (``cfg[K.ASYNC]`` ...), so a run with the
marker on computes exactly what it did before; the marker is off only when
no config of the run can take a gated branch, so the constant is never the
value a config sees (``tests/test_variants.py`` runs the reference
cross-check under every variant).

Prefix caching is the other compile-time choice, made per config: the prefix
cache argument is ``None`` without it (``step.prefix_cache_of``).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable

import numpy as np
from numba import typeof, types
from numba.extending import intrinsic

from planner import config as K
from planner.kernel.policies import VANILLA, YOUNGEST
from planner.latency.step_time import MEASURED

ON = True  # a marker: some config of the run uses the feature

# Two markers, so that vLLM's default server (prefix caching and async
# scheduling on) does not compile the largest features' code: on 2026-12-07
# the default ``plan run`` compiled 83 CPU-s, of which the disaggregated
# decode side (``_schedule_waiting_pd`` and ``remote_kv``), speculative
# decoding and the several-group prefix cache were about a third
# (docs/speed.md).
#
# ``extras``: some config uses async scheduling (cfg[K.ASYNC] != 0:
# ``step._update_from_output_async``), closed-loop clients or sessions
# (cfg[K.CONC] > 0 or a workload with next turns: ``arrivals.answered``,
# ``arrivals.release``), compat blis (cfg[K.COMPAT] != 0:
# ``latency.blis_step_ns``, ``step._blis_last_slot``), measured step-time
# tables (cfg[K.LAT_KIND] == MEASURED: ``step._measured_step_ns_if``),
# priority scheduling (cfg[K.POLICY] == 1) or a mitigation of
# ``policies.py`` (a victim other than vLLM's FCFS tail, anti-starvation,
# projected admission, the adaptive cap: ``step._pick_victim_if``,
# ``_projected_blocks_if``, ``_adapt_cap_if``).
# ``heavy``: some config uses speculative decoding (cfg[K.SPEC_K] != 0:
# ``step._update_from_output_spec``, ``step._drafts``, ``step._padded``), a
# KV transfer, either side of a disaggregated pair (cfg[K.XFER] != 0:
# ``step._schedule_waiting_pd``, ``kernel/remote_kv.py``,
# ``kernel/kv_send.py``), prefix caching with a sliding window or several KV
# cache groups (``prefix_cache._cache_groups``) or Mamba state groups
# (cfg[K.GROUPS_MAMBA] > 0: ``step._mamba_groups_if``). ``heavy`` implies
# ``extras`` (``features_of``), so there are three variants, not four: a run
# pays for the extras' small code whenever it needs the heavy code.
# None: no config does.
Features = namedtuple("Features", "extras heavy")

PLAIN = Features(None, None)
EXTRAS = Features(ON, None)
ALL = Features(ON, ON)
VARIANTS = (PLAIN, EXTRAS, ALL)  # every value ``features_of`` can return


def features_of(cfg: np.ndarray, next_turn: np.ndarray) -> Features:
    """The markers of a run of configs ``cfg`` ((C, NCOLS) int64,
    ``config.pack_configs``) on a workload whose sessions' next turns are
    ``next_turn`` ((R,) int32, -1 for none): one of ``VARIANTS``. Pure;
    raises nothing."""
    groups = (cfg[:, K.GROUPS_SW] > 0) | (cfg[:, K.GROUPS_FULL] > 1)
    heavy = (cfg[:, K.SPEC_K] != 0) | (cfg[:, K.XFER] != 0) | (cfg[:, K.GROUPS_MAMBA] > 0)
    if bool(np.any(heavy | ((cfg[:, K.CACHING] != 0) & groups))):
        return ALL
    used = bool(np.any(cfg[:, K.ASYNC] != 0) or np.any(cfg[:, K.CONC] != 0))
    used = used or bool(np.any(cfg[:, K.COMPAT] != 0) or np.any(next_turn >= 0))
    used = used or bool(np.any(cfg[:, K.LAT_KIND] == MEASURED))  # step._measured_step_ns_if
    # priority scheduling and the mitigations: step._pick_victim_if, _enqueue_sorted_if,
    # _projected_blocks_if, _adapt_cap_if
    mitigated = (cfg[:, K.VICTIM] != YOUNGEST) | (cfg[:, K.ANTI_STARVATION] > 0)
    mitigated |= (cfg[:, K.ADMISSION] != VANILLA) | (cfg[:, K.ADAPT_WINDOW] > 0)
    used = used or bool(np.any(mitigated | (cfg[:, K.POLICY] == 1)))
    return EXTRAS if used else PLAIN


def level(f: Features) -> int:
    """0, 1 or 2: the position of ``f`` in ``VARIANTS`` (how many markers are
    on; ``heavy`` implies ``extras``). Raises ValueError for a marker pair
    ``features_of`` never returns."""
    return VARIANTS.index(f)


def union(a: Features, b: Features) -> Features:
    """The markers on in ``a`` or ``b``."""
    pairs = zip(a, b, strict=True)
    return Features(*(ON if x is not None or y is not None else None for x, y in pairs))


def describe(f: Features, caching: bool = False) -> str:
    """What a variant compiles (with prefix caching when ``caching``), for
    messages: 'plain' or 'with ...'."""
    parts = ["prefix caching"] if caching else []
    if f.extras is not None:
        parts += [
            "async scheduling",
            "closed loop",
            "compat blis",
            "measured step-time tables",
            "priority scheduling",
            "the mitigation policies",
        ]
    if f.heavy is not None:
        parts += [
            "speculative decoding",
            "KV transfer (disaggregated prefill/decode)",
            "prefix caching over several KV cache groups",
            "Mamba state groups",
        ]
    if not parts:
        return "plain"
    return "with " + (parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1])


def gated(fn: Callable, off: object = None) -> Callable:
    """``fn`` behind a marker: jitted code calls ``g(marker, *args)``, which is
    ``fn(*args)`` when ``marker`` is not None and the constant ``off`` when it
    is (``fn`` is then never typed or compiled). ``off`` must have the type
    ``fn`` returns (None for a function returning nothing; a tuple of
    scalars for one returning a tuple); callers only
    reach ``g`` where a config's own flag says the feature is used, so with
    the marker off ``off`` is never a value a config sees. Jitted code only.

    ``g`` is a Numba intrinsic: typing picks the body by the marker's type
    at compile time, and lowering emits the constant, or the call to ``fn``
    that a plain call would emit, straight into the caller. An ``overload``
    did the same through a small function compiled per call site and
    signature: 18 of them in the plain variant, 1.2 CPU-s of its cold
    compile (2026-12-06). Raises TypeError for an ``inline="always"`` ``fn``
    (Numba inlines such a function in the caller's IR, which this call,
    made during lowering, skips)."""
    if getattr(fn, "targetoptions", {}).get("inline") == "always":
        raise TypeError(f"gated({fn.__name__}): compile it without inline='always'")
    fnty = types.Dispatcher(fn)

    def typer(typingctx, marker, *args):  # noqa: ANN001, ANN002, ANN202 (Numba typing)
        star = types.StarArgTuple(args)
        if isinstance(marker, types.NoneType):
            rtype = types.none if off is None else typeof(off)

            def constant(context, builder, sig, vals):  # noqa: ANN001, ANN202
                if off is None:
                    return context.get_dummy_value()
                return context.get_constant_generic(builder, rtype, off)

            return rtype(marker, star), constant
        inner = typingctx.resolve_function_type(fnty, args, {})

        def call(context, builder, sig, vals):  # noqa: ANN001, ANN202
            parts = [builder.extract_value(vals[1], i) for i in range(len(args))]
            return context.get_function(fnty, inner)(builder, parts)

        return inner.return_type(marker, star), call

    typer.__name__ = f"{fn.__name__}_if"
    g = intrinsic(typer)
    g.__doc__ = f"``{fn.__name__}(*args)`` unless ``marker`` is None, else {off!r} (``gated``)."
    return g
