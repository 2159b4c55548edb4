"""Stage 2, models and hardware: what a model and a GPU leave for the KV cache.

``config_json`` (a Hugging Face config.json -> ``ModelSpec``), ``catalog``
(the shipped configs), ``quantization``, ``kv_cache`` (vLLM's KV cache groups),
``memory_profile`` (vLLM's start-up memory terms), ``hardware`` (GPU presets and
num_gpu_blocks sizing), ``prices`` (GPU price tables).
"""
