"""The measured step-time backend: tables of aiconfigurator-core estimates.

aiconfigurator-core (PyPI, Apache-2.0, NVIDIA) ships GEMM, attention and
communication timings collected on vLLM for several GPUs and composes them
into a forward-pass time per scheduled step
(``aiconfigurator_core.sdk.rust_engine_step.RustForwardPassPerfModel``, the
model the Dynamo mocker uses): inputs are a step's prefill tokens (and the
prefill's already-computed KV tokens), its decode requests and their summed
KV tokens. Its vLLM data are version 0.24.0 on most GPUs (0.14.0 on A100),
older than the vLLM 0.33 whose scheduler this planner mirrors; the version
used is printed.

``build`` evaluates that model once per point of a fixed grid (``GRID``:
prefill tokens x decode requests x mean decode context x prefill context)
outside the kernel; the kernel interpolates (``latency.measured_table_ns``).
It needs the optional extra ``pip install 'vllm-capacity-planner[aic]'``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
from functools import cache
from importlib import metadata
from pathlib import Path

import numpy as np

from planner.latency.aic_systems import AIC_SYSTEMS
from planner.latency.step_time import MeasuredLatency
from planner.models import hardware

# catalog id -> the aiconfigurator model config of the same architecture
# (aiconfigurator_core/model_configs; Instruct and base checkpoints share one).
AIC_MODELS: dict[str, str] = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen/Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "openai/gpt-oss-20b": "openai/gpt-oss-20b",
    "openai/gpt-oss-120b": "openai/gpt-oss-120b",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "deepseek-ai/DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
}

# model_type -> the "architectures" entry of the Hugging Face config.json of the
# catalog's models of that type (each catalog file names its source), which
# aiconfigurator needs to read a config.json folder; the catalog's trimmed copies
# leave the field out.
ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForConditionalGeneration",
    "llama4": "Llama4ForConditionalGeneration",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "starcoder2": "Starcoder2ForCausalLM",
    "nemotron_h": "NemotronHForCausalLM",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
}
# Where config.json folders for aiconfigurator are written (``aic_model``): a
# user cache (XDG_CACHE_HOME, else ~/.cache), kept between runs, one folder per
# distinct config.json; not the temp folder, which a run's caller may clean.
AIC_CONFIGS = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "vllm-capacity-planner"
    / "aic-configs"
)

# vLLM's --quantization / --kv-cache-dtype -> aiconfigurator dtypes it has data for.
AIC_WEIGHT_DTYPES: dict[str | None, str | None] = {None: None, "fp8": "fp8"}
AIC_KV_DTYPES: dict[str, str | None] = {"auto": None, "fp8": "fp8"}

# The table's grid (see latency.measured_table_ns): prefill tokens P, decode
# requests D, mean KV tokens per decode request a, prefill context Cp. 0 and 1
# are both points of P and D so no step interpolates across "no prefill" or
# "no decode"; beyond the last point the last segment is extended.
GRID: tuple[tuple[int, ...], ...] = (
    (0, 1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
    (1, 256, 1024, 2048, 4096, 8192, 16384, 32768, 131072),
    (0, 1024, 4096, 16384, 65536),
)
VLLM_MIRRORED = "0.33"


class MeasuredError(ValueError):
    """The measured backend cannot serve this request; one line."""


def aic_version() -> str:
    """The installed aiconfigurator-core version. Raises MeasuredError if absent."""
    try:
        return metadata.version("aiconfigurator-core")
    except metadata.PackageNotFoundError:
        raise MeasuredError(
            "--latency measured needs aiconfigurator-core: "
            "pip install 'vllm-capacity-planner[aic]' (or use --latency roofline)"
        ) from None


def resolve(
    model: str, gpu: str, quantization: str | None, kv_cache_dtype: str
) -> tuple[str, str, str, str]:
    """(planner model name, planner GPU name, aiconfigurator model id, system)
    for the measured backend. Raises MeasuredError (one line naming the
    alternatives) for a GPU, model or dtype it has no data for."""
    m, g = hardware.model(model), hardware.gpu(gpu)
    system = AIC_SYSTEMS.get(g.name)
    if system is None:
        raise MeasuredError(
            f"--latency measured: aiconfigurator has no vLLM data for GPU {g.name} "
            f"(GPUs with data: {', '.join(AIC_SYSTEMS)}); use --latency roofline"
        )
    if quantization not in AIC_WEIGHT_DTYPES:
        raise MeasuredError(
            f"--latency measured: no aiconfigurator data for --quantization {quantization} "
            "(with data: none, fp8)"
        )
    if kv_cache_dtype not in AIC_KV_DTYPES:
        raise MeasuredError(
            f"--latency measured: no aiconfigurator data for --kv-cache-dtype {kv_cache_dtype} "
            "(with data: auto, fp8)"
        )
    return m.name, g.name, aic_model(model), system


def aic_model(model: str) -> str:
    """What aiconfigurator reads for ``model``: its own config of the same
    architecture for the catalog models it ships (``AIC_MODELS``), else a
    folder holding the model's config.json (the catalog's copy or the user's
    file; aiconfigurator reads a local folder), written once per content
    under the system's temporary directory, with ``architectures`` added
    from ``ARCHITECTURES`` when the config has none. Raises MeasuredError
    (one line) for a model type it cannot name."""
    mid = hardware.catalog.aliases().get(model.lower())
    if mid in AIC_MODELS:
        return AIC_MODELS[mid]  # type: ignore[index]
    if mid is not None:
        cfg = dict(hardware.catalog.entries()[mid]["config"])
    else:
        p = Path(model)
        cfg = json.loads((p / "config.json" if p.is_dir() else p).read_text())
    if "architectures" not in cfg:
        kind = cfg.get("model_type")
        if kind not in ARCHITECTURES:
            raise MeasuredError(
                f"--latency measured: {model}'s config.json names no architectures and its "
                f"model_type {kind!r} is not one the planner can name "
                f'({", ".join(sorted(ARCHITECTURES))}); add "architectures" to it or use '
                "--latency roofline"
            )
        cfg["architectures"] = [ARCHITECTURES[kind]]
    text = json.dumps(cfg, sort_keys=True)
    folder = AIC_CONFIGS / hashlib.sha256(text.encode()).hexdigest()[:16]
    target = folder / "config.json"
    if not target.exists():
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:  # no writable user cache: the temp folder, as before
            folder = Path(tempfile.gettempdir()) / "planner-aic-configs" / folder.name
            target = folder / "config.json"
            folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"config.json.{os.getpid()}.tmp"
        tmp.write_text(text)
        tmp.replace(target)  # atomic: a concurrent writer writes the same bytes
    return str(folder)


def data_version(system: str) -> str:
    """The newest ("current") vLLM data version aiconfigurator holds for ``system``."""
    from aiconfigurator_core.sdk import perf_database

    return str(perf_database.resolve_query_version(system, "vllm", "current"))


class Estimator:
    """One aiconfigurator forward-pass model: ``ms(P, D, Xd, Cp)`` is a step's
    time in ms for P prefill tokens (one request, after Cp computed tokens),
    D decode requests holding Xd KV tokens in all."""

    def __init__(
        self,
        aic_model: str,
        system: str,
        tp: int,
        quantization: str | None,
        kv: str,
        label: str | None = None,
    ) -> None:
        aic_version()
        from aiconfigurator_core.sdk.rust_engine_step import RustForwardPassPerfModel

        self.version = data_version(system)
        cfg = {
            "schema_version": 1,
            "model_name": aic_model,
            "system_name": system,
            "backend": "vllm",
            "backend_version": self.version,
            "tp_size": tp,
            "pp_size": 1,
            "moe_tp_size": tp,
            "moe_ep_size": 1,
            "weight_dtype": AIC_WEIGHT_DTYPES[quantization],
            "kv_cache_dtype": AIC_KV_DTYPES[kv],
            "extra": {},
        }
        quiet = logging.getLogger("aiconfigurator_core")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # "low-fidelity fallback rows" of other backends
        try:
            self._m = RustForwardPassPerfModel.from_native(cfg)
        except (ValueError, RuntimeError) as e:
            first = str(e).splitlines()[0].split(" Supported architectures:")[0]
            what = label or aic_model
            raise MeasuredError(
                f"--latency measured: aiconfigurator cannot model {what} on {tp} x "
                f"{system}: {first[-240:]}; use --latency roofline"
            ) from None
        finally:
            quiet.setLevel(level)

    def ms(self, p: int, d: int, xd: int, cp: int) -> float:
        """The step time in ms (0 for an empty step)."""
        if p + d == 0:
            return 0.0
        s = {
            "num_prefill_requests": 1 if p else 0,
            "sum_prefill_tokens": int(p),
            "num_decode_requests": int(d),
            "sum_decode_kv_tokens": int(xd) if d else 0,
        }
        if p:
            s["sum_prefill_kv_tokens"] = int(cp)
        t = self._m.estimate_forward_pass_time_ms({"scheduled_requests": s})
        if t is None or not np.isfinite(t) or t <= 0:
            raise MeasuredError(f"--latency measured: aiconfigurator gave no estimate for {s}")
        return float(t)


def table(est: Estimator, grid: tuple[tuple[int, ...], ...] = GRID) -> np.ndarray:
    """The flat float64 table ``latency.measured_table_ns`` reads: sizes, grids,
    then step times in ns over the grid (C order). Points that differ only in
    an input the step does not have (Cp without prefill, a without decodes)
    are evaluated once."""
    gp, gd, ga, gc = grid
    vals = np.zeros((len(gp), len(gd), len(ga), len(gc)), dtype=np.float64)
    for i, p in enumerate(gp):
        for j, d in enumerate(gd):
            for k, a in enumerate(ga):
                if d == 0 and k > 0:
                    vals[i, j, k] = vals[i, j, 0]
                    continue
                for m, c in enumerate(gc):
                    if p == 0 and m > 0:
                        vals[i, j, k, m] = vals[i, j, k, 0]
                        continue
                    vals[i, j, k, m] = est.ms(p, d, d * a, c) * 1e6
    head = np.array([len(g) for g in grid], dtype=np.float64)
    return np.concatenate([head, *(np.asarray(g, dtype=np.float64) for g in grid), vals.ravel()])


@cache
def _cached_table(
    aic_model: str, system: str, tp: int, quantization: str | None, kv: str, label: str
) -> tuple[np.ndarray, str]:
    est = Estimator(aic_model, system, tp, quantization, kv, label)
    return table(est), est.version


def build(
    model: str,
    gpu: str,
    tp: int = 1,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    scale: float = 1.0,
    overhead_us: float = 0.0,
    alpha: tuple[float, float, float] = (0.0, 0.0, 0.0),
    quiet: bool = False,
) -> MeasuredLatency:
    """The measured step-time model of ``model`` on ``tp`` x ``gpu``: a table
    over ``GRID`` (6,480 points, under a second on one CPU core for
    Llama-3.1-8B; kept for the process, not on disk). Prints (stderr, unless
    ``quiet``) which aiconfigurator data version it uses and that it predates
    vLLM 0.33. Raises MeasuredError (one line)."""
    name, gname, aic_model, system = resolve(model, gpu, quantization, kv_cache_dtype)
    tab, version = _cached_table(aic_model, system, tp, quantization, kv_cache_dtype, model)
    source = f"aiconfigurator-core {aic_version()}, {system} vLLM {version} data"
    lat = MeasuredLatency(
        name,
        gname,
        tp,
        tab,
        source,
        scale=scale,
        overhead_us=overhead_us,
        alpha=alpha,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        data_version=version,
    )
    if not quiet:
        print(data_line(lat), file=sys.stderr)
    return lat


def data_line(lat: MeasuredLatency) -> str:
    """The line saying which aiconfigurator data ``lat`` uses and that it
    predates the vLLM this planner mirrors (``build`` prints it; the CLI says
    it as a note once the input is accepted)."""
    return (
        f"measured step times: {lat.source} (collected on vLLM {lat.data_version}, older "
        f"than the vLLM {VLLM_MIRRORED} this planner mirrors)"
    )
