"""Turn user choices (model, GPU, latency kind, ...) into simulator inputs.

Shared by ``plan run`` and sweep specs, so both resolve the same way.
"""

from __future__ import annotations

from typing import Any

from planner.latency.step_time import LINEAR_PRESETS, Latency, LinearLatency, RooflineLatency
from planner.models import hardware, kv_cache, vllm_defaults
from planner.models.vllm_defaults import Setting
from planner.speculative import DRAFTER_METHODS, Speculation

LATENCY_KINDS = ("linear", "roofline", "measured")


def latency(
    kind: str,
    model: str | None,
    gpu: str | None,
    tp: int = 1,
    alpha: tuple[float, float, float] | None = None,
    beta: tuple[float, float, float] | None = None,
    mfu: float | None = None,
    mbu: float | None = None,
    overhead_us: float = 0.0,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    quiet: bool = False,
) -> Latency:
    """Pick the step-time model.

    ``linear``: explicit alpha/beta if given, else the preset for (model, GPU),
    else (no model or GPU named) the S1 seed coefficients. ``roofline``: needs
    a model and a GPU. ``measured``: aiconfigurator-core tables
    (``planner.latency.measured``; the optional extra ``aic``), a model and a GPU it
    has data for; its data-version line goes to stderr unless ``quiet`` (a
    caller that printed it for the same GPU already). Raises ValueError (one
    line) otherwise.
    """
    if kind not in LATENCY_KINDS:
        raise ValueError(f"--latency must be one of {LATENCY_KINDS}, got {kind!r}")
    if tp < 1:
        raise ValueError(f"--tensor-parallel-size must be >= 1, got {tp}")
    if model is not None:
        check_tensor_parallel(model, tp)
    if kind == "measured":
        if model is None or gpu is None:
            raise ValueError("--latency measured needs --model and --gpu")
        if beta is not None or mfu is not None or mbu is not None:
            raise ValueError("--latency measured takes no --beta-coeffs, --mfu or --mbu")
        from planner.latency import measured

        return measured.build(
            model,
            gpu,
            tp,
            quantization,
            kv_cache_dtype,
            overhead_us=overhead_us,
            alpha=alpha or (0.0, 0.0, 0.0),
            quiet=quiet,
        )
    if kind == "roofline":
        if model is None or gpu is None:
            raise ValueError("--latency roofline needs --model and --gpu")
        kw = {k: v for k, v in (("mfu", mfu), ("mbu", mbu)) if v is not None}
        simulated_model(hardware.model(model, quantization, kv_cache_dtype))
        return RooflineLatency(
            hardware.model(model).name,
            hardware.gpu(gpu).name,
            tp=tp,
            overhead_us=overhead_us,
            alpha=alpha or (0.0, 0.0, 0.0),
            quantization=quantization,
            kv_cache_dtype=kv_cache_dtype,
            **kw,
        )
    if beta is not None:
        return LinearLatency(alpha or (0.0, 0.0, 0.0), beta)
    if model is None and gpu is None:
        return LinearLatency(alpha) if alpha else LinearLatency()
    if model is None or gpu is None:
        given, missing = ("--model", "--gpu") if gpu is None else ("--gpu", "--model")
        raise ValueError(
            f"the linear step time for {given} needs {missing} too (their preset coefficients), "
            "or pass --beta-coeffs (and --alpha-coeffs)"
        )
    key = (hardware.model(model).name, hardware.gpu(gpu).name)
    if key not in LINEAR_PRESETS or tp != 1:
        raise ValueError(
            f"no linear coefficients for {key[0]} on {tp} x {key[1]}; "
            "pass --beta-coeffs (and --alpha-coeffs) or use --latency roofline"
        )
    a, b = LINEAR_PRESETS[key]
    return LinearLatency(alpha or a, b)  # type: ignore[arg-type]


def has_linear_preset(model: str, gpu: str, tp: int = 1) -> bool:
    """Whether fitted linear coefficients exist for ``model`` on ``tp`` x ``gpu``
    (``LINEAR_PRESETS``: BLIS's fit for Llama-3.1-8B on one H100)."""
    return tp == 1 and (hardware.model(model).name, hardware.gpu(gpu).name) in LINEAR_PRESETS


def unchosen_latency(
    model: str,
    gpu: str,
    tp: int = 1,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    overhead_us: float = 0.0,
) -> tuple[Latency, str] | None:
    """The step time of a run that chose none (no ``--latency``, no linear
    coefficients): None where a linear preset exists (``resolve.latency``
    takes it), else ``best_available_latency`` and one note saying which and
    why, in the CLI's flag names (a spec spells them with ``spec_names``)."""
    if has_linear_preset(model, gpu, tp):
        return None
    lat, why = best_available_latency(model, gpu, tp, quantization, kv_cache_dtype, overhead_us)
    return lat, (
        f"no --latency given and no linear preset for {model} on {tp} x {gpu}, "
        f"so {why}: {lat.describe()}"
    )


def best_available_latency(
    model: str,
    gpu: str,
    tp: int = 1,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    overhead_us: float = 0.0,
) -> tuple[Latency, str]:
    """The step-time model to use when none was chosen and no linear preset
    exists (issue 33, item 3: the most accurate one the planner has): the
    measured tables where aiconfigurator-core is installed and has data for
    the model and GPU, else the roofline at its default efficiencies; with
    the reason, one clause. Raises ValueError (one line) where neither can
    serve (a model the roofline cannot price)."""
    from planner.latency import measured

    try:
        lat = measured.build(model, gpu, tp, quantization, kv_cache_dtype, overhead_us=overhead_us)
        return lat, "measured, since aiconfigurator-core has data for them"
    except measured.MeasuredError as e:
        why = str(e).split(";")[0].split(": unsupported")[0].removeprefix("--latency measured: ")
        if "needs aiconfigurator-core" in why:
            why = "aiconfigurator-core is not installed (pip install 'vllm-capacity-planner[aic]')"
    rf = latency("roofline", model, gpu, tp, None, None, None, None, overhead_us, quantization,
                 kv_cache_dtype)  # fmt: skip
    return rf, f"roofline, since {why}"


def kv_block_bytes(
    explicit: int | None,
    model: str | None,
    block_size: int,
    tp: int = 1,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    disable_hybrid_kv_cache_manager: bool | None = None,
    speculation: Speculation | None = None,
) -> int:
    """Bytes of one KV block over every layer, what swap preemption moves per
    block and a KV connector transfers (NixlConnector registers every KV cache
    tensor, ``GPUModelRunner.initialize_kv_cache`` -> ``register_kv_caches``):
    ``explicit`` if given, else the model's under its KV cache dtype and
    tensor parallelism (``hardware.kv_page_bytes``), an EAGLE, EAGLE-3 or MTP
    drafter's KV layer included (``ModelSpec.with_drafter``), else
    ``SchedulerConfig``'s default, 2 MiB (Llama-3.1-8B at block size 16).
    Raises ValueError for an unknown model."""
    if explicit is not None:
        return explicit
    if model is None:
        return 2 * 2**20
    m = hardware.model(model, quantization, kv_cache_dtype, disable_hybrid_kv_cache_manager)
    if speculation is not None and speculation.method in DRAFTER_METHODS:
        m = m.with_drafter(speculation.method)
    return hardware.kv_page_bytes(m, block_size, tp)


def num_gpu_blocks(
    explicit: int | None,
    model: str | None,
    gpu: str | None,
    gpu_memory_utilization: float,
    block_size: int,
    tp: int,
    default: int,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    full_attention_only: bool = True,
    simulated: bool = False,
    disable_hybrid_kv_cache_manager: bool | None = None,
    data_parallel_size: int = 1,
    speculation: Speculation | None = None,
) -> tuple[int, bool]:
    """(num_gpu_blocks, derived?): the explicit value wins; else sized from the
    model (under --quantization, --kv-cache-dtype) and GPU presets
    (``hardware.num_gpu_blocks``); else ``default``.

    The one definition of a derived pool: vLLM's start-up profile
    (``GPUModelRunner.profile_run``) runs the configuration's own
    max_num_batched_tokens and max_num_seqs, so the pool is sized at the
    values the configuration runs with; every command and sweep row passes
    its own (``sized_at`` says them). ``full_attention_only``: refuse a model
    with any layer that is not full attention (``full_attention_model``), as
    an analysis for full attention needs; ``simulated`` (with
    ``full_attention_only`` off): refuse only what the simulator cannot run
    (``simulated_model``). ``data_parallel_size``: the ranks of a
    data-parallel deployment, which split a mixture of experts' routed experts
    (``ModelSpec.expert_weight_bytes``); the pool is one rank's.
    ``speculation``: an EAGLE, EAGLE-3 or MTP drafter is loaded beside the
    model, its weights and KV layer taken from the pool as vLLM does
    (``ModelSpec.with_drafter``); n-gram loads nothing.

    Raises:
        ValueError: one of --model/--gpu without the other; a model the
            analysis cannot take. ``hardware.HardwareError`` for sizes that
            leave no KV cache.
    """
    if explicit is not None:
        return explicit, False
    if model is None and gpu is None:
        return default, False
    if model is None or gpu is None:
        given, missing = ("--model", "--gpu") if gpu is None else ("--gpu", "--model")
        raise ValueError(
            f"sizing the pool from {given} needs {missing} too, or give --num-gpu-blocks"
        )
    g = hardware.gpu(gpu)
    m = hardware.model(model, quantization, kv_cache_dtype, disable_hybrid_kv_cache_manager)
    if full_attention_only:
        full_attention_model(m)
    elif simulated:
        simulated_model(m)
    if speculation is not None and speculation.method in DRAFTER_METHODS:
        m = m.with_drafter(speculation.method)
    n = hardware.num_gpu_blocks(
        m, g, gpu_memory_utilization, block_size, tp, max_num_batched_tokens, max_num_seqs,
        dp=data_parallel_size,
    )  # fmt: skip
    return n, True


def sized_at(max_num_seqs: int, max_num_batched_tokens: int) -> str:
    """The words naming the values a derived pool was sized at (``num_gpu_blocks``)."""
    return (
        f"start-up profile at max_num_seqs {max_num_seqs:,}, "
        f"max_num_batched_tokens {max_num_batched_tokens:,}"
    )


def sized_at_json(
    max_num_seqs: int, max_num_batched_tokens: int, derived: bool
) -> dict[str, int] | None:
    """The ``num_gpu_blocks_sized_at`` field of a command's ``--json``: the
    values a derived pool was sized at (``sized_at``), None for a given pool."""
    if not derived:
        return None
    return {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens}


def simulated_model(m: hardware.ModelSpec) -> dict[str, int]:
    """The attention fields the scheduler simulation runs ``m`` with
    (``SchedulerConfig.sliding_window``, ``full_attention_groups``,
    ``sliding_window_groups``, ``mamba_groups``): vLLM 0.33's KV cache groups
    (``kv_cache.groups``, ``get_kv_cache_groups``), each with its own block
    table in one pool; sliding-window groups free blocks outside the window
    as ``SlidingWindowManager.remove_skipped_blocks`` does; linear-attention
    (Mamba) groups hold one block per request (``MambaManager``, mode "none").
    Full attention: window 0, one full group. Raises ValueError (one line) for
    what it would misrepresent: chunked local attention
    (``ChunkedLocalAttentionManager``), sliding and linear layers together.
    """
    kinds = set(m.layer_types) - {"mlp"}  # MLP-only layers (nemotron_h) hold no KV
    if kinds == {"full"}:
        return {"sliding_window": 0, "full_attention_groups": 1, "sliding_window_groups": 0}
    gs = kv_cache.groups(m, 16)  # the groups' make-up does not depend on the block size
    if kinds <= {"full", "sliding"} and m.sliding_window:
        return {
            "sliding_window": int(m.sliding_window),
            "full_attention_groups": sum(g.kind == "full" for g in gs),
            "sliding_window_groups": sum(g.kind == "sliding" for g in gs),
        }
    if kinds == {"full", "linear"}:  # Mamba-style state layers beside full attention
        return {
            "sliding_window": 0,
            "full_attention_groups": sum(g.kind == "full" for g in gs),
            "sliding_window_groups": 0,
            "mamba_groups": sum(g.kind == "linear" for g in gs),
        }
    what = " and ".join(sorted(kinds))
    raise ValueError(
        f"--model {m.name}: has {what} attention layers; the simulator runs full-attention, "
        "sliding-window and full + linear (Mamba) hybrids only (plan check sizes this model "
        "per attention type)"
    )


def simulated_block_size(
    block_size: int,
    model: str | None,
    tp: int = 1,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    disable_hybrid_kv_cache_manager: bool | None = None,
) -> int:
    """The block size the scheduler runs with, in tokens: ``block_size``, except
    for a model with linear-attention (Mamba) layers, where vLLM raises it so
    one attention page holds a layer's state (``kv_cache.aligned_block_size``,
    ``vllm/platforms/interface.py`` ``_align_hybrid_block_size``) in
    ``mamba_cache_mode`` "none", the mode the simulator runs them in (prefix
    caching off). Raises ValueError for an unknown model."""
    if model is None:
        return block_size
    m = hardware.model(model, quantization, kv_cache_dtype, disable_hybrid_kv_cache_manager)
    return kv_cache.aligned_block_size(m, block_size, tp, "none")  # as given without state


def full_attention_model(m: hardware.ModelSpec) -> None:
    """Refuse (ValueError, one line) a model with any layer that is not full
    attention, for analyses that hold for full attention only (the
    null-block livelock gap and the analytic KV-safe max_num_seqs assume one
    block table holding every token)."""
    other = sorted(set(m.layer_types) - {"full", "mlp"})  # MLP-only layers hold no KV
    if other:
        raise ValueError(
            f"--model {m.name}: has {' and '.join(other)} attention layers; this analysis "
            "holds for full attention only (plan run simulates sliding-window models; "
            "plan check sizes this model per attention type)"
        )


def attention(
    explicit: int | None,
    model: str | None,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    groups: tuple[int | None, int | None] = (None, None),
    disable_hybrid_kv_cache_manager: bool | None = None,
) -> dict[str, int]:
    """The attention fields of a run's ``SchedulerConfig``: the model's
    (``simulated_model``) when ``--model`` is given, else ``sliding_window``
    = ``explicit`` (0 = full attention) and the KV cache group counts
    ``groups`` = (full-attention, sliding-window), None for the default (the
    model's one group).

    A linear-attention (Mamba) hybrid runs at its ``simulated_block_size``,
    which every caller sets.

    Raises:
        ValueError: one line, when ``explicit`` or ``groups`` contradicts the
            model or the model cannot be simulated.
    """
    names = ("full_attention_groups", "sliding_window_groups")
    if model is None:
        given = {k: v for k, v in zip(names, groups, strict=True) if v is not None}
        return {"sliding_window": 0 if explicit is None else explicit, **given}
    m = hardware.model(model, quantization, kv_cache_dtype, disable_hybrid_kv_cache_manager)
    fields = simulated_model(m)
    window = fields["sliding_window"]
    if explicit is not None and explicit != window:
        has = f"a {window:,}-token sliding window" if window else "full attention"
        raise ValueError(f"--sliding-window {explicit} contradicts --model {m.name} ({has})")
    for name, v in zip(names, groups, strict=True):
        if v is not None and v != fields[name]:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} {v} contradicts --model {m.name} (it has {fields[name]})")
    return fields


def check_tensor_parallel(model: str, tp: int) -> None:
    """vLLM's rule that ``tp`` splits ``model``'s heads
    (``ModelSpec.check_tensor_parallel``), for every command that names a
    model, a pool given or not. Raises ValueError (one line) for a ``tp``
    that does not split them; HardwareError (a ValueError too) for an unknown
    or unreadable model."""
    try:
        hardware.model(model).check_tensor_parallel(tp)
    except hardware.ModelConfigError as e:
        raise ValueError(str(e)) from None


def server(
    given: dict[str, Any],
    model: str | None,
    gpu: str | None,
    *,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    usage: str = vllm_defaults.SERVE,
    preemption_mode: str = "recompute",
    compat: str = "vllm",
) -> dict[str, Setting]:
    """The server settings a command runs (``vllm_defaults.settings``: given,
    else vLLM 0.33's default for the model and GPU, else scenario S1's), with
    the planner's deliberate differences applied to defaults only, each
    marked ``vllm_defaults.DIFFERS`` with its reason:

    - prefix caching and async scheduling off under a named preemption mode
      other than recompute (they are modelled with recompute only);
    - async scheduling off under ``--compat blis`` (BLIS schedules in sync).

    ``given``: field -> value or None (not given), for ``vllm_defaults.FIELDS``.
    Raises ValueError (one line) for an unknown model, GPU or usage context.
    """
    hybrid = given.get("disable_hybrid_kv_cache_manager")
    m = None if model is None else hardware.model(model, quantization, kv_cache_dtype, hybrid)
    g = None if gpu is None else hardware.gpu(gpu)
    out = vllm_defaults.settings(given, m, g, usage)
    cache, run_async = "enable_prefix_caching", "async_scheduling"
    if preemption_mode != "recompute" and compat == "vllm":
        why = f"modelled with recompute preemption only, not {preemption_mode}"
        out[cache] = vllm_defaults.differs(out[cache], False, why)
        out[run_async] = vllm_defaults.differs(out[run_async], False, why)
    if compat == "blis":
        out[run_async] = vllm_defaults.differs(
            out[run_async], False, "--compat blis schedules in sync"
        )
    return out


def server_lines(settings: dict[str, Setting]) -> list[str]:
    """One line per setting that was not given: ``name value (source: why)``."""
    return [
        f"{name} {_shown(s.value)} {s.text()}"
        for name, s in settings.items()
        if s.source != vllm_defaults.GIVEN
    ]


def server_json(settings: dict[str, Setting]) -> dict[str, dict[str, Any]]:
    """The ``server_settings`` field of a command's ``--json``."""
    return {
        name: {"value": s.value, "source": s.source, "from": s.why} for name, s in settings.items()
    }


def _shown(v: Any) -> str:
    """A setting's value as printed: on/off, thousands separators."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"
