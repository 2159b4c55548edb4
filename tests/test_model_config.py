"""Models from config.json, the catalog, --quantization and --kv-cache-dtype
(issue 16, items 1, 2, 6 and 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_cli
from planner.models import catalog, hardware, quantization
from planner.models import config_json as model_config
from planner.models.config_json import ModelConfigError

CONFIGS = Path(__file__).parent / "data" / "configs"

# Parameter counts stated on each model card (independent of the config.json
# formula in planner.models.config_json), in billions.
MODEL_CARD_PARAMS = {
    "meta-llama/Llama-3.1-8B-Instruct": 8.03,
    "meta-llama/Llama-3.1-70B-Instruct": 70.6,
    "meta-llama/Llama-3.2-1B-Instruct": 1.24,
    "meta-llama/Llama-3.2-3B-Instruct": 3.21,
    "Qwen/Qwen2.5-7B-Instruct": 7.61,
    "Qwen/Qwen2.5-72B-Instruct": 72.7,
    "Qwen/Qwen3-8B": 8.2,
    "Qwen/Qwen3-32B": 32.8,
    "Qwen/Qwen3-30B-A3B": 30.5,
    "mistralai/Mistral-7B-Instruct-v0.3": 7.25,
    "mistralai/Mixtral-8x7B-Instruct-v0.1": 46.7,
    "deepseek-ai/DeepSeek-V3": 671,
    "deepseek-ai/DeepSeek-V2-Lite-Chat": 15.7,
    "google/gemma-2-9b-it": 9.24,
    "openai/gpt-oss-20b": 21,
    "openai/gpt-oss-120b": 117,
    "bigcode/starcoder2-3b": 3.03,
    "microsoft/Phi-3-mini-4k-instruct": 3.8,
}


@pytest.mark.parametrize("model_id", sorted(MODEL_CARD_PARAMS))
def test_parameter_count_from_config_matches_the_model_card(model_id):
    m = catalog.spec(model_id)
    assert m.params / 1e9 == pytest.approx(MODEL_CARD_PARAMS[model_id], rel=0.015)


def test_catalog_breadth_and_sources():
    entries = catalog.entries()
    assert len(entries) >= 20
    families = {e["family"] for e in entries.values()}
    assert {"dense", "moe", "mla", "sliding-window", "hybrid"} <= families
    for e in entries.values():
        assert e["source"].startswith("https://huggingface.co/") and e["recorded"]
        catalog.spec(e["id"])  # every entry sizes
    assert len(hardware.GPUS) >= 8
    assert set(hardware.GPUS) == set(hardware.GPU_SOURCES)
    assert {"RTX-4090", "MI300X"} <= set(hardware.GPUS)  # a consumer card, an AMD one


def test_presets_are_catalog_aliases():
    for name in hardware.PRESETS:
        assert hardware.model(name) == catalog.lookup(name)
    assert hardware.model("meta-llama/Llama-3.1-8B-Instruct").name == "llama-3.1-8b"
    assert hardware.model("META-LLAMA/llama-3.1-8b-instruct").head_dim == 128


def test_config_json_folder_and_file():
    folder = hardware.model(str(CONFIGS / "llama70b-fp8"))
    assert folder.quantization == "compressed-tensors" and folder.weight_bits == 8
    # fp8 linear layers, bf16 embeddings and lm_head: 68.45e9 x 1 B + 2.10e9 x 2 B
    assert folder.weight_bytes() / 2**30 == pytest.approx(67.66, abs=0.01)
    plain = hardware.model(str(CONFIGS / "llama-3.1-70b.json"))
    assert plain.weight_bytes() / 2**30 == pytest.approx(131.4, abs=0.1)
    assert plain.kv_bytes_per_token() == 2 * 80 * 8 * 128 * 2


def test_per_layer_attention_types():
    sc = hardware.model(str(CONFIGS / "starcoder2-3b.json"))
    assert set(sc.layer_types) == {"sliding"} and sc.sliding_window == 4096
    assert sc.dtype_bytes == 2  # float32 checkpoint runs in bf16
    g3 = hardware.model("gemma-3-27b")
    assert g3.layer_types.count("full") == 10 and g3.layer_types[5] == "full"
    # Mistral-7B-v0.1: a bare sliding_window windows every layer (CacheConfig.sliding_window)
    assert set(hardware.model("mistral-7b-v0.1").layer_types) == {"sliding"}
    assert set(hardware.model("qwen2.5-7b").layer_types) == {"full"}  # use_sliding_window false


def test_gated_deltanet_hybrid_layers_and_state():
    """qwen3_next without layer_types: every 4th layer full (transformers'
    full_attention_interval default); the SSM state in the model dtype (no
    mamba_ssm_dtype rule for qwen3_next): 32 x 128 x 128 x 2 B, plus the conv
    state 3 x (2 x 16 x 128 + 32 x 128) x 2 B."""
    m = hardware.model(str(CONFIGS / "qwen3-next-like.json"))
    assert m.layer_types == ("linear",) * 3 + ("full",) + ("linear",) * 3 + ("full",)
    assert m.ssm_state_bytes == 2
    assert m.linear_state_bytes() == 32 * 128 * 128 * 2 + 3 * (2 * 16 * 128 + 32 * 128) * 2
    assert m.linear_state_bytes(2) == m.linear_state_bytes() // 2
    q = hardware.model("qwen3.5-27b")  # qwen3_5: mamba_ssm_dtype float32 from the config
    assert q.ssm_state_bytes == 4 and q.layer_types.count("full") == 16
    # the Gated DeltaNet layers replace attention in the parameter count: about 27B
    assert q.params / 1e9 == pytest.approx(26.9, abs=0.05)
    q.check_tensor_parallel(8)  # 4 KV heads replicated, 48 / 8 value heads, 10,240 / 8 conv
    with pytest.raises(ModelConfigError, match="conv dim .* 10240"):
        q.check_tensor_parallel(12)  # divides 24 heads and 48 value heads, not 10,240


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_hidden_layers": None}, "num_hidden_layers"),
        ({"hidden_size": None, "head_dim": None}, "hidden_size"),
        ({"torch_dtype": "float8"}, "torch_dtype"),
        ({"model_type": "exotic", "sliding_window": 512}, "layer_types"),
        ({"layer_types": ["mamba"] * 80}, "layer_types has 'mamba'"),
        ({"layer_types": ["linear_attention"] * 80}, "model_type 'llama' is not one"),
        ({"model_type": "nemotron_h"}, "hybrid_override_pattern"),
        ({"model_type": "jamba"}, "attn_layer_period"),
        ({"model_type": "granitemoehybrid"}, "layer_types is missing"),
        ({"model_type": "zamba2"}, "layers_block_type"),
        ({"model_type": "bamba"}, "attn_layer_indices"),
        ({"intermediate_size": None}, "intermediate_size"),
    ],
)
def test_unsizable_configs_name_the_field(change, field):
    cfg = json.loads((CONFIGS / "llama-3.1-70b.json").read_text())
    cfg.update(change)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(ModelConfigError, match=field):
        model_config.from_config(cfg, "x")


def test_quantization_bits():
    bits = quantization.weight_bits
    assert bits("fp8", None, 2) == 8
    assert bits("modelopt_fp4", None, 2) == 4.5  # fp8 scale per 16 elements
    assert bits("awq", {"quant_method": "awq", "bits": 4, "group_size": 128}, 2) == 4 + 20 / 128
    assert bits("gptq", {"quant_method": "gptq", "bits": 8, "group_size": -1}, 2) == 8
    assert bits("bitsandbytes", {"load_in_8bit": True}, 2) == 8
    assert bits(None, None, 2) == 16
    with pytest.raises(quantization.QuantizationError, match="bits"):
        bits("gptq", {"quant_method": "gptq"}, 2)
    with pytest.raises(quantization.QuantizationError, match="fp8, fbgemm_fp8"):
        quantization.resolve_method("int3", None)
    with pytest.raises(quantization.QuantizationError, match="quant_method"):
        quantization.resolve_method("awq", {"quant_method": "gptq"})
    assert quantization.resolve_method("gptq_marlin", {"quant_method": "gptq"}) == "gptq_marlin"
    assert quantization.kv_dtype_bytes("fp8_e5m2", 2) == 1
    assert quantization.kv_dtype_bytes("auto", 2) == 2
    with pytest.raises(quantization.QuantizationError, match="auto, float16"):
        quantization.kv_dtype_bytes("nvfp4", 2)


def test_modelopt_checkpoint_kv_cache_algo_sets_auto():
    """vLLM's resolve_kv_cache_dtype_string: --kv-cache-dtype auto follows a ModelOpt
    checkpoint's kv_cache_quant_algo."""
    cfg = json.loads((CONFIGS / "llama-3.1-70b.json").read_text())
    q = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}
    m = model_config.from_config({**cfg, "quantization_config": q}, "x")
    assert (m.kv_cache_dtype, m.kv_bytes, m.weight_bits) == ("fp8_e4m3", 1, 8)
    assert m.with_options(None, "bfloat16").kv_bytes == 2  # an explicit flag wins
    q4 = {**q, "kv_cache_quant_algo": "NVFP4"}
    with pytest.raises(ModelConfigError, match="kv_cache_quant_algo"):
        model_config.from_config({**cfg, "quantization_config": q4}, "x")


def test_tensor_parallel_must_split_the_heads():
    m = hardware.model("llama-3.1-70b")
    m.check_tensor_parallel(8)
    with pytest.raises(ModelConfigError, match="num_attention_heads 64"):
        m.check_tensor_parallel(3)
    hardware.model("starcoder2-3b").check_tensor_parallel(12)  # 2 KV heads, replicated
    with pytest.raises(ModelConfigError, match="num_key_value_heads 4"):
        hardware.model("qwen2.5-7b").check_tensor_parallel(14)  # 28 heads, 4 KV heads


def test_plan_check_with_a_config_json_tp4_fp8(capsys):
    code, out, err = run_cli(
        capsys, "check", "--model", str(CONFIGS / "llama-3.1-70b.json"), "--gpu", "H100",
        "--tensor-parallel-size", "4", "--kv-cache-dtype", "fp8", "--quantization", "fp8",
    )  # fmt: skip
    assert code == 0, err
    text = " ".join(out.split())
    assert "weights 8 bit (quantization fp8), KV 1 B/element (fp8)" in text
    assert "weights 16.92" in text  # (68.45e9 x 1 B + 2.10e9 x 2 B) / 4 / 2**30
    assert "Maximum concurrency (vLLM 0.33 log)" in text
    assert "start-up check" in text and "passes" in text
    assert "verdict: SAFE" in text
    code, js, _ = run_cli(
        capsys, "check", "--model", str(CONFIGS / "llama-3.1-70b.json"), "--gpu", "H100",
        "--tensor-parallel-size", "4", "--kv-cache-dtype", "fp8", "--quantization", "fp8", "--json",
    )  # fmt: skip
    o = json.loads(js)
    # KV per block: 16 tokens x 80 layers x 2 KV heads x 2 x 128 x 1 B
    assert o["kv_bytes_per_block"] == 16 * 80 * 2 * 2 * 128
    # max_model_len: vLLM's default, the config.json's max_position_embeddings
    assert o["kv_max_concurrency"] == o["num_gpu_blocks"] / (o["max_model_len"] // 16)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", str(CONFIGS / "missing-layers.json"), "--gpu", "H100"], "num_hidden_layers"),
        (["--model", str(CONFIGS / "linear-hybrid.json"), "--gpu", "H100"], "linear_num_key_heads"),
        (["--model", "llama-3.1-8b", "--gpu", "H100", "--quantization", "int3"], "fp8, fbgemm_fp8"),
        (["--model", "llama-3.1-8b", "--gpu", "H100", "--kv-cache-dtype", "fp4"], "auto, float16"),
        (
            ["--model", "llama-3.1-70b", "--gpu", "H100", "--tensor-parallel-size", "3"],
            "num_attention_heads 64",
        ),
        (["--quantization", "fp8", "--num-gpu-blocks", "100"], "needs --model"),
        (["--num-gpu-blocks", "100", "--async-scheduling"], "needs --model"),
        (
            ["--model", "starcoder2-3b", "--num-gpu-blocks", "2000", "--tokens-per-request", "9"],
            "full-attention models",
        ),
        (["--model", "llama-3.1-8b", "--num-gpu-blocks", "100", "--async-scheduling"], "no effect"),
        (["--model", "no/such-model", "--gpu", "H100"], "unknown model"),
        (
            ["--model", str(CONFIGS / "llama70b-fp8"), "--gpu", "H100", "--quantization", "awq"],
            "quant_method",
        ),
    ],
)
def test_bad_model_input_is_one_line_exit_2(capsys, args, needle):
    code, _, err = run_cli(capsys, "check", *args)
    assert code == 2
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_plan_models_lists_the_catalog_and_gpus_with_sources(capsys):
    code, out, _ = run_cli(capsys, "models", "--json")
    assert code == 0
    o = json.loads(out)
    assert {m["id"] for m in o["models"]} == set(catalog.entries())
    assert {g["name"] for g in o["gpus"]} == set(hardware.GPUS)
    assert all(x["source"] and x["recorded"] for x in o["models"] + o["gpus"])
    code, out, _ = run_cli(capsys, "models")
    assert "bigcode/starcoder2-3b (starcoder2-3b): sliding-window" in out and "None" not in out


def test_check_on_a_sliding_window_model_gives_no_full_attention_claims(capsys):
    args = ["check", "--model", "gemma-3-27b", "--max-model-len", "32768"]
    code, out, _ = run_cli(capsys, *args, "--num-gpu-blocks", "100", "--json")
    o = json.loads(out)
    assert code == 1 and o["verdict"] == "unsafe" and o["kv_starts"] is False
    assert "min_safe_num_gpu_blocks" not in o and "livelock_gap_tokens" not in o
    code, out, _ = run_cli(capsys, *args, "--gpu", "H100", "--tensor-parallel-size", "2")
    text = " ".join(out.split())
    assert code == 0 and "verdict: STARTS" in text and "verdict: SAFE" not in text
    assert "sliding 1,024: 6 groups (52 layers), full: 1 group (10 layers)" in text


def test_simulator_refuses_chunked_models_and_safe_limit_sliding_ones(capsys):
    """plan run simulates sliding-window models and hybrids with full
    attention (tests/test_sliding_window.py) but not chunked local attention,
    which it meets only with the hybrid KV cache manager on (vLLM's default
    stores Llama 4's chunked layers as full attention)."""
    llama4_tp8 = ["--tensor-parallel-size", "8", "--no-disable-hybrid-kv-cache-manager"]
    for cmd, model, message in (
        (["run", *llama4_tp8], "llama-4-scout", "the simulator runs full-attention, sliding"),
    ):
        code, _, err = run_cli(
            capsys, *cmd, "--num-requests", "2", "--model", model, "--gpu", "H100", "--latency",
            "roofline",
        )  # fmt: skip
        assert code == 2 and message in err and err.count("\n") == 1


def test_run_and_safe_limit_take_the_dtypes(capsys):
    base = ["--model", "llama-3.1-70b", "--gpu", "H100", "--gpu-memory-utilization", "0.95"]
    code, _, err = run_cli(capsys, "run", *base, "--num-requests", "2", "--latency", "roofline")
    assert code == 2 and "no room" in err  # bf16 weights: 131 GiB on one GPU
    code, out, _ = run_cli(
        capsys, "run", *base, "--quantization", "fp8", "--latency", "roofline",
        "--num-requests", "2", "--json",
    )  # fmt: skip
    o = json.loads(out)
    m, g = hardware.model("llama-3.1-70b", "fp8"), hardware.gpu("H100")
    # sized at vLLM 0.33's H100 defaults (8,192 tokens, 1,024 sequences)
    assert code == 0 and o["num_gpu_blocks"] == hardware.num_gpu_blocks(
        m, g, 0.95, 16, 1, 8192, 1024
    )
    assert "quantization fp8" in o["latency_model"]
    code, _, err = run_cli(
        capsys, "run", "--num-gpu-blocks", "1000", "--model", "llama-3.1-8b", "--quantization",
        "fp8", "--num-requests", "2",
    )  # fmt: skip
    assert code == 2 and "--quantization only sizes the pool" in err


NEMOTRON = json.loads(
    (Path(__file__).parents[1] / "planner/data/models/nemotron-h-8b-base-8k.json").read_text()
)["config"]


def test_nemotron_h_layers_and_mamba2_state():
    """24 "M", 4 "*", 24 "-" layers. Independent arithmetic for the state
    (mamba_utils.mamba2_state_shape): I = 128 x 64 = 8,192; conv 3 x (8,192 +
    2 x 8 x 128) x 2 B; SSM 128 x 64 x 128 x 4 B (float32, NemotronH's default)."""
    m = model_config.from_config(NEMOTRON, "nh")
    assert [m.layer_types.count(k) for k in ("linear", "full", "mlp")] == [24, 4, 24]
    assert m.state_kind == "mamba2" and m.ssm_state_bytes == 4
    assert m.linear_state_bytes() == 3 * 10240 * 2 + 128 * 64 * 128 * 4
    assert m.linear_state_bytes(2) == 3 * 5120 * 2 + 64 * 64 * 128 * 4
    # the name's "8B" (no model-card figure was checked): within 1.5%, as the catalog test
    assert m.params / 1e9 == pytest.approx(8.0, rel=0.015)
    bf16 = model_config.from_config({**NEMOTRON, "mamba_ssm_cache_dtype": "bfloat16"}, "nh")
    assert bf16.ssm_state_bytes == 2
    m.check_tensor_parallel(8)  # 8 groups, 128 heads, 32 heads, 8 KV heads
    with pytest.raises(ModelConfigError, match="Mamba2 groups"):
        m.check_tensor_parallel(16)  # 16 divides the heads but not the 8 groups


def test_granite_groups_raised_to_tp():
    """One group is replicated to tp (extra_groups_for_head_shards): conv dim
    4,096 + 2 x 2 x 128 at tp 2; the SSM state in the model dtype."""
    g = hardware.model(str(CONFIGS / "granite-hybrid-invented.json"))
    assert g.head_dim == 2048 // 16 and g.ssm_state_bytes == 2
    assert g.linear_state_bytes(1) == 3 * (4096 + 2 * 128) * 2 + 64 * 64 * 128 * 2
    assert g.linear_state_bytes(2) == 3 * (4608 // 2) * 2 + 32 * 64 * 128 * 2
    g.check_tensor_parallel(4)
    with pytest.raises(ModelConfigError, match="Mamba2 heads 64"):
        model_config.ModelSpec(**{**g.__dict__, "num_heads": 48, "num_kv_heads": 3}
                               ).check_tensor_parallel(3)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"mamba_num_heads": None}, "mamba_num_heads"),
        ({"ssm_state_size": None}, "ssm_state_size"),
        ({"n_groups": None}, "n_groups"),
        ({"conv_kernel": None}, "conv_kernel"),
        ({"hybrid_override_pattern": "M*"}, "must list 52"),
        ({"hybrid_override_pattern": "M" * 52}, "both Mamba2 and attention"),
        ({"hybrid_override_pattern": "X" * 52}, "'X'"),
        ({"mamba_ssm_cache_dtype": "float8"}, "mamba_ssm_cache_dtype"),
    ],
)
def test_mamba2_fields_are_named_when_missing(change, field):
    cfg = {k: v for k, v in {**NEMOTRON, **change}.items() if v is not None}
    with pytest.raises(ModelConfigError, match=field):
        model_config.from_config(cfg, "x")


def test_a_config_without_a_dtype_is_sized_as_vllm_serves_it(capsys, tmp_path):
    """Issue 32, item 7: gpt-oss-20b's own config.json names no torch_dtype;
    vLLM reads float32 and serves it in bfloat16 under --dtype auto, so it is
    sized as the same config with bfloat16, with the note saying so."""
    cfg = catalog.entries()["openai/gpt-oss-20b"]["config"]
    assert "torch_dtype" not in cfg and "dtype" not in cfg  # as published
    plain = model_config.from_config(dict(cfg), "x")
    named = model_config.from_config({**cfg, "torch_dtype": "bfloat16"}, "x")
    assert plain.params == named.params and plain.kv_bytes == named.kv_bytes == 2
    assert plain.weight_bits == named.weight_bits
    assert model_config.NO_DTYPE_NOTE in plain.note and named.note == ""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, err = run_cli(capsys, "check", "--model", str(path), "--gpu", "H100", "--json")
    assert code in (0, 1), err
    assert "names no torch_dtype" in json.loads(out)["model_source"]


def test_a_binary_config_file_is_one_line(capsys, tmp_path):
    """A --model file that is not UTF-8 text: one line naming it, exit 2."""
    p = tmp_path / "config.json"
    p.write_bytes(bytes(range(256)))
    code, _, err = run_cli(capsys, "check", "--model", str(p), "--gpu", "H100")
    assert code == 2 and "is not JSON (not UTF-8 text)" in err
    assert len(err.strip().splitlines()) == 1


def test_gpu_help_lists_every_preset(capsys):
    code, out, _ = run_cli(capsys, "run", "--help")
    flat = "".join(out.split())
    assert code == 0 and all(name in flat for name in hardware.GPUS)
