"""Issue 32, item 1: with a model or GPU, every server setting left out takes
vLLM 0.33's default for them (``planner.models.vllm_defaults``), printed with
its source; without either, a run says it simulates scenario S1's server."""

from __future__ import annotations

import json

import pytest

from helpers import SMALL_SYNTHETIC, run_cli
from planner.models import catalog, hardware, vllm_defaults
from planner.models.max_len import derived_max_model_len
from planner.sweep.spec import load_spec_text


@pytest.mark.parametrize(
    ("gpu", "serve", "llm"),
    [
        ("H100", (8192, 1024), (16384, 1024)),
        ("H200", (8192, 1024), (16384, 1024)),
        ("B200", (16384, 1024), (16384, 1024)),
        ("A100-80GB", (2048, 256), (8192, 256)),  # excluded by name (vLLM PR #17885)
        ("L40S", (2048, 256), (8192, 256)),
        (None, (2048, 256), (8192, 256)),  # a device vLLM cannot read
    ],
)
def test_batch_defaults_follow_get_batch_defaults(gpu, serve, llm):
    g = None if gpu is None else hardware.gpu(gpu)
    assert vllm_defaults.batch_defaults(g, vllm_defaults.SERVE)[:2] == serve
    assert vllm_defaults.batch_defaults(g, vllm_defaults.LLM_CLASS)[:2] == llm


def test_defaulted_batch_sizes_are_capped_as_vllm_caps_them():
    """max_num_batched_tokens <= max_num_seqs x max_model_len, then a defaulted
    max_num_seqs <= max_num_batched_tokens
    (``_set_default_max_num_seqs_and_batched_tokens_args``)."""
    m, g = hardware.model("llama-3.1-8b"), hardware.gpu("H100")
    s = vllm_defaults.settings({"max_model_len": 4, "max_num_seqs": 2}, m, g)
    assert s["max_num_batched_tokens"].value == 8 and s["max_num_seqs"].source == "given"
    s = vllm_defaults.settings({"max_model_len": 4}, m, g)
    assert (s["max_num_batched_tokens"].value, s["max_num_seqs"].value) == (4096, 1024)
    s = vllm_defaults.settings({"max_num_batched_tokens": 512}, m, g)
    assert s["max_num_seqs"].value == 512 and s["max_model_len"].value == 131072


@pytest.mark.parametrize(
    ("cfg", "tok", "want"),
    [
        (
            {
                "max_position_embeddings": 131072,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
            },
            None,
            131072,
        ),  # fmt: skip
        (
            {"max_position_embeddings": 4096, "rope_scaling": {"type": "dynamic", "factor": 2}},
            None,
            8192,
        ),  # fmt: skip
        (
            {
                "max_position_embeddings": 4096,
                "rope_parameters": {"rope_type": "linear", "factor": 4},
                "model_type": "gemma3",
            },
            None,
            4096,
        ),  # fmt: skip
        ({"max_position_embeddings": 8192, "n_positions": 2048}, None, 2048),
        ({"max_position_embeddings": 8192, "model_max_length": 16384}, None, 16384),
        ({"max_position_embeddings": 131072}, 4096, 4096),
        ({"hidden_size": 8}, None, 2048),
        (
            {
                "max_position_embeddings": 131072,
                "original_max_position_embeddings": 4096,
                "rope_scaling": {"type": "longrope", "factor": 32},
            },
            None,
            4096,
        ),  # fmt: skip
    ],
)
def test_max_model_len_is_derived_as_vllm_derives_it(cfg, tok, want):
    assert derived_max_model_len(cfg, tok)[0] == want


def test_plan_run_reports_vllms_defaults_for_the_model_and_gpu(capsys):
    code, out, err = run_cli(
        capsys, "run", "--model", "llama-3.1-8b", "--gpu", "H100", "--num-requests", "20",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    s = json.loads(out)["server_settings"]
    want = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "max_model_len": 131072,
            "enable_prefix_caching": True, "async_scheduling": True, "block_size": 16,
            "gpu_memory_utilization": 0.92}  # fmt: skip
    assert {k: v["value"] for k, v in s.items()} == want
    assert {v["source"] for v in s.values()} == {vllm_defaults.VLLM}
    assert "get_batch_defaults" in s["max_num_seqs"]["from"]
    code, out, _ = run_cli(
        capsys, "run", "--model", "llama-3.1-8b", "--gpu", "H100", "--num-requests", "20",
        "--max-num-seqs", "64", "--usage-context", "llm", "--json",
    )  # fmt: skip
    s = json.loads(out)["server_settings"]
    assert s["max_num_seqs"] == {"value": 64, "source": "given", "from": ""}
    assert s["max_num_batched_tokens"]["value"] == 16384  # the offline LLM class's


def test_a_run_without_model_or_gpu_names_s1s_server_and_step_time(capsys):
    code, out, _ = run_cli(capsys, "run", "--num-requests", "5")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("server:"))
    assert "scenario S1's" in line and "step time S1's fitted linear" in line
    assert "pool S1's 7,463 blocks" in line and "enable_prefix_caching false" in line


def test_the_planner_says_where_it_differs_from_vllms_default(capsys):
    """A named preemption mode other than recompute: vLLM's default prefix
    caching and async scheduling turn off (they are modelled with recompute
    only), each saying why; gemma-3's sliding-window layers keep vLLM's
    default prefix caching (simulated since the ``*_caching_*`` goldens)."""
    code, out, err = run_cli(
        capsys, "run", "--model", "llama-3.1-8b", "--gpu", "H100", "--latency", "roofline",
        "--num-requests", "5", "--preemption-mode", "swap", "--cpu-swap-blocks", "1000", "--json",
    )  # fmt: skip
    assert code == 0, err
    settings = json.loads(out)["server_settings"]
    for name in ("enable_prefix_caching", "async_scheduling"):
        s = settings[name]
        assert s["value"] is False and s["source"] == vllm_defaults.DIFFERS, name
        assert "recompute" in s["from"] and "vLLM's default is True" in s["from"]
    code, out, err = run_cli(
        capsys, "run", "--model", "gemma-3-27b", "--gpu", "H100", "--latency", "roofline",
        "--num-requests", "5", "--json",
    )  # fmt: skip
    assert code == 0, err
    cache = json.loads(out)["server_settings"]["enable_prefix_caching"]
    assert cache["value"] is True and cache["source"] == "vLLM default"


def test_usage_context_without_model_or_gpu_is_refused(capsys):
    code, _, err = run_cli(capsys, "run", "--usage-context", "llm", "--num-requests", "5")
    assert code == 2 and "--usage-context" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(
        capsys, "check", "--model", "llama-3.1-8b", "--gpu", "H100", "--usage-context", "x"
    )
    assert code == 2 and "--usage-context" in err and len(err.strip().splitlines()) == 1


def test_a_tokenizer_config_beside_the_config_lowers_max_model_len(tmp_path):
    cfg = json.loads((catalog.CATALOG_DIR / "qwen3-8b.json").read_text())["config"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert hardware.model(str(tmp_path)).max_model_len == 40960
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 8192}')
    assert hardware.model(str(tmp_path)).max_model_len == 8192


def test_a_length_field_of_the_wrong_type_is_one_line(capsys, tmp_path):
    cfg = json.loads((catalog.CATALOG_DIR / "qwen3-8b.json").read_text())["config"]
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": "4k"}))
    code, _, err = run_cli(capsys, "check", "--model", str(tmp_path), "--gpu", "H100")
    assert code == 2 and "max_position_embeddings" in err and err.count("\n") == 1


def test_a_sweep_with_hardware_takes_vllms_defaults_and_says_so(tmp_path):
    text = (
        'name = "d"\n'
        + SMALL_SYNTHETIC
        + (
            '[hardware]\nmodel = "llama-3.1-8b"\ngpu = "L40S"\n'
            '[latency]\nkind = "roofline"\n[axes]\nmax_num_seqs = [16, 32]\n'
        )
    )
    sweep = load_spec_text(text, tmp_path)
    c = sweep.configs[0]
    assert (c.max_num_batched_tokens, c.max_model_len) == (2048, 131072)
    assert c.enable_prefix_caching and c.async_scheduling
    notes = sweep.server_notes
    assert any(line.startswith("max_model_len 131,072 (vLLM default") for line in notes)
    assert sweep.gpu_memory_utilization == vllm_defaults.GPU_MEMORY_UTILIZATION


SCOUT = ["--model", "llama-4-scout", "--gpu", "H100", "--tensor-parallel-size", "8",
         "--max-model-len", "131072"]  # fmt: skip


def test_llama4_runs_with_the_hybrid_kv_cache_manager_off_by_default(capsys):
    """Issue 32, item 6: vLLM 0.33 turns the manager off for chunked local
    attention (``VllmConfig.__post_init__``), so its 36 chunked layers store
    every token, as full attention (``_promote_local_kv_cache_specs``); with
    it on (the --no- form) the chunked groups hold a window each."""
    code, out, err = run_cli(capsys, "check", *SCOUT, "--json")
    off = json.loads(out)
    setting = off["server_settings"]["disable_hybrid_kv_cache_manager"]
    assert (setting["value"], setting["source"]) == (True, vllm_defaults.VLLM)
    assert [(g["kind"], g["layers"]) for g in off["kv_groups"]] == [("full", 48)]
    code, out, err = run_cli(capsys, "check", *SCOUT, "--no-disable-hybrid-kv-cache-manager",
                             "--json")  # fmt: skip
    on = json.loads(out)
    assert on["server_settings"]["disable_hybrid_kv_cache_manager"]["source"] == "given"
    assert on["num_gpu_blocks"] > 3 * off["num_gpu_blocks"]  # smaller blocks, windowed groups
    code, out, err = run_cli(
        capsys, "run", *SCOUT, "--latency", "roofline", "--num-requests", "10", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["num_gpu_blocks"] == off["num_gpu_blocks"]


@pytest.mark.parametrize(
    ("model", "needle"),
    [
        ("llama-3.1-8b", "has no effect on llama-3.1-8b"),
        ("mistral-7b-v0.1", "has no effect"),  # every layer sliding: one type
        ("qwen3.5-27b", "recurrent-state layers need the hybrid KV cache manager"),
    ],
)
def test_disable_hybrid_kv_cache_manager_where_it_cannot_act_is_one_line(capsys, model, needle):
    code, _, err = run_cli(
        capsys, "check", "--model", model, "--gpu", "H100", "--disable-hybrid-kv-cache-manager"
    )
    assert code == 2 and needle in err and err.count("\n") == 1


def test_gemma3_with_the_manager_off_is_full_attention_with_prefix_caching(capsys):
    """Off, every gemma-3 layer stores every token: the simulator then runs it
    as full attention, and vLLM's default prefix caching stays on."""
    code, out, err = run_cli(
        capsys, "run", "--model", "google/gemma-3-27b-it", "--gpu", "H100",
        "--disable-hybrid-kv-cache-manager", "--latency", "roofline", "--num-requests", "10",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    o = json.loads(out)
    assert o["server_settings"]["enable_prefix_caching"]["value"] is True
    m = hardware.model("google/gemma-3-27b-it", disable_hybrid_kv_cache_manager=True)
    assert set(m.layer_types) == {"full"}
    want = hardware.num_gpu_blocks(m, hardware.gpu("H100"), 0.92, 16, 1, 8192, 1024)
    assert o["num_gpu_blocks"] == want


@pytest.mark.parametrize("method", ["awq", "gptq", "modelopt_fp4", "compressed-tensors"])
def test_a_method_that_needs_a_quantized_checkpoint_is_refused_on_a_bf16_one(capsys, method):
    """vLLM 0.33's ``get_quant_config`` raises "Cannot find the config file"
    for a method that reads the checkpoint's config when it has none; online
    methods (fp8, ...) quantize an unquantized checkpoint."""
    base = ["check", "--model", "llama-3.1-8b", "--gpu", "H100", "--quantization"]
    code, _, err = run_cli(capsys, *base, method)
    assert code == 2 and "no quantization_config" in err and err.count("\n") == 1
    code, out, err = run_cli(capsys, *base, "fp8", "--json")
    assert code == 0 and "weights 8 bit" in json.loads(out)["model"]


@pytest.mark.parametrize("value", ['"4096"', "-1", "0", "true", "1000.5"])
def test_a_bad_tokenizer_model_max_length_is_one_line(capsys, tmp_path, value):
    cfg = json.loads((catalog.CATALOG_DIR / "qwen3-8b.json").read_text())["config"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": ' + value + "}")
    code, _, err = run_cli(capsys, "check", "--model", str(tmp_path), "--gpu", "H100")
    assert code == 2 and "model_max_length" in err and err.count("\n") == 1


def test_usage_context_with_the_token_budget_given_is_refused(capsys):
    code, _, err = run_cli(
        capsys, "check", "--model", "llama-3.1-8b", "--gpu", "H100", "--usage-context", "llm",
        "--max-num-batched-tokens", "4096",
    )  # fmt: skip
    assert code == 2 and "--usage-context has no effect" in err and err.count("\n") == 1


def test_usage_context_on_a_steps_csv_fit_is_refused(capsys):
    """A steps CSV fit simulates no server, so vLLM's defaults pick nothing there."""
    csv = str(catalog.CATALOG_DIR.parents[2] / "docs" / "calibrate_example.csv")
    code, _, err = run_cli(capsys, "calibrate", csv, "--usage-context", "llm")
    assert code == 2 and "--usage-context" in err and err.count("\n") == 1


def test_a_max_model_len_above_the_models_is_refused_as_vllm_does(capsys, tmp_path):
    """Second tryout of issue 35: vLLM 0.33's _get_and_verify_max_len refuses a
    max_model_len above the config's (131,072 for Llama-3.1-8B) unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; plan run, plan check and specs took 200,000."""
    for cmd in (["run", "--num-requests", "5"], ["check"]):
        code, _, err = run_cli(
            capsys, *cmd, "--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "200000"
        )
        assert code == 2 and "max_model_len 200,000 is above llama-3.1-8b's 131,072" in err, err
        assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in err and err.count("\n") == 1
    code, _, err = run_cli(
        capsys, "check", "--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "131072"
    )
    assert code in (0, 1), err
