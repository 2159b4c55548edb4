"""Record golden scheduler traces from the real vLLM scheduler (not a runtime dependency).

Drives ``vllm.v1.core.sched.scheduler.Scheduler`` (and ``AsyncScheduler``) with
a fake model runner on the CPU, for the scenarios made by ``make_scenarios``,
and writes one ``tests/golden/<name>.json.gz`` per scenario. The conformance
tests (``tests/test_conformance.py``) replay each file in the kernel and the
reference engine and require identical traces.

Install (about 2 minutes, 2.2 GB), in a venv of its own::

    python3 -m venv /tmp/vllm-venv
    /tmp/vllm-venv/bin/pip install torch==2.13.0          # the local CPU wheel
    /tmp/vllm-venv/bin/pip install --no-deps vllm==0.33.0
    /tmp/vllm-venv/bin/pip install transformers tokenizers msgspec pyzmq \
        cloudpickle blake3 cbor2 pybase64 openai fastapi prometheus_client \
        llguidance einops apache-tvm-ffi openai-harmony uvloop pydantic \
        numpy psutil sentencepiece requests tqdm py-cpuinfo aiohttp pillow \
        regex cachetools pyyaml six setuptools watchfiles diskcache gguf \
        partial-json-parser lark typing_extensions filelock
    /tmp/vllm-venv/bin/pip install --no-deps xgrammar

Re-record (from the project root)::

    HF_HUB_OFFLINE=1 /tmp/vllm-venv/bin/python tools/record_vllm_traces.py

Conventions (also in ``tests/golden/README.md``):

- **Step mode.** A step that schedules tokens takes one unit of time, an
  empty one none; request i is added before the first step that starts at
  time ``>= arrival[i]``, and an idle clock jumps to the next arrival. Every
  ``schedule()`` call made while a request is unfinished is a step (numbered
  from 0), empty ones included. ``running``, ``waiting`` and ``free`` are read right after
  ``schedule()``; ``finished`` lists the requests that step's output ended.
- **Fake runner.** A scheduled request samples one token exactly when its
  chunk reached the end of its known tokens (``not request.is_prefill_chunk``
  right after ``schedule()``). Tokens are never EOS (``ignore_eos``).
- **Async** follows ``EngineCore.step_with_batch_queue`` with a queue of 2:
  step k+1 is scheduled before step k's output is applied.
- **Time mode** follows S1-exact in ``scenarios.md``: a request enters at
  ``arrival + alpha0 + alpha1*prompt`` us, a step lasts
  ``beta0 + beta1*prefill + beta2*decode`` us (an empty step none), a token
  or finish counts at the end of the step that produced it, an idle clock
  jumps to the next entry. Times are integer nanoseconds. With async, the
  output of step k is applied after step k+1 is scheduled.
- **Tokens.** Request i's prompt is its prefix group's shared tokens
  (``min(prefix_len, prompt_len)`` of them) followed by tokens unique to i;
  outputs are unique to i. Block hashes are vLLM's, with
  ``hash_block_size == block_size``.
- A run stops as ``stalled`` after 8 consecutive empty steps (a livelock).
- **Sliding window.** A scenario with ``sliding_window`` W > 0 gives its one
  KV cache group a ``SlidingWindowSpec`` of window W (every layer sliding):
  vLLM's ``SlidingWindowManager`` frees blocks outside the window, and the
  whole-sequence gate caps a request's blocks at
  ``max_admission_blocks_per_request``. A hybrid scenario also names
  ``full_attention_groups`` F and ``sliding_window_groups`` S: F groups with a
  ``FullAttentionSpec`` and S with the ``SlidingWindowSpec`` share the one
  pool (vLLM's per-group block tables, ``KVCacheCoordinatorNoPrefixCache``
  without prefix caching).
- **Mamba hybrids** (``mamba_*``, prefix caching off): ``mamba_groups`` M
  groups with a ``MambaSpec`` in ``mamba_cache_mode`` "none" (block_size
  max_model_len, as ``HybridAttentionMambaModelConfig`` sets it without
  prefix caching) listed before the full-attention group(s), one pool.
- **Speculative decoding** (``spec_*``, step mode, sync or async): a scenario with
  ``speculative`` {method, num_speculative_tokens, acceptance, seed} runs
  vLLM's ``SpeculativeConfig`` (ngram). After each step's output the fake
  drafter proposes k drafts for every scheduled request
  (``Scheduler.update_draft_token_ids``, as ``EngineCore.post_step`` does);
  the fake runner accepts a leading run of the real drafts scheduled (padded
  ``-1`` drafts never) by the draw rule of ``planner/speculative.py``
  (the request's number in it is its index in arrival order, ties by id),
  written out again here (``_accepted``) so that the recorder checks it
  rather than imports it, and returns accepted + 1 sampled tokens. With
  async scheduling the scheduler holds ``-1`` placeholders for the drafts
  (``AsyncScheduler._update_after_schedule``) and nothing is proposed to it;
  they count as real except for a request admitted in the step (padded).
- **Disaggregated decode side** (``pd_*``, step mode, sync): a scenario with
  ``kv_transfer`` {latency, per_kilotoken} runs the scheduler with a KV
  connector (``DecodeSideConnector`` below) that answers as vLLM's
  ``NixlConnectorScheduler`` (``nixl/pull_scheduler.py``) does on a decode
  instance: a request marked ``remote`` (``do_remote_prefill``) loads its
  prompt tokens past the local prefix-cache hit asynchronously, once. A load
  started by the ``schedule()`` of a step that starts at clock t ends at
  ``t + latency + external_tokens * per_kilotoken / 1000`` steps; the output
  of the first step that ends at or after it reports it in
  ``finished_recving``. The clock counts in thousandths of a step; a step that
  schedules no tokens while loads are in flight moves it to the next load's
  end or arrival, whichever is first (the engine polls until a transfer
  lands), and is not a stall. A step record adds ``loads`` (requests whose
  load started) and ``recv`` (loads its output reported).
- **Disaggregated prefill side** (``pd_prefill_*``, step mode, sync and
  async): a request with ``read_end`` (steps) is sent with
  ``do_remote_decode``; the connector's ``request_finished`` returns
  ``delay_free_blocks`` when it ends by ``check_stop``
  (``NixlConnectorScheduler.request_finished``), and the recorder lists it
  in ``finished_sending`` in the output of the first step that ends at or
  after its read end and after it finished (``sent`` in the step record).
  A step that schedules nothing while blocks are held lasts until the next
  read ends or a request arrives; an idle engine runs one empty step (not
  recorded) whose output reports the reads ended by the next arrival.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

VLLM_VERSION = "0.33.0"
STALL_STEPS = 8
MAX_STEPS = 30_000
S1_ALPHA = (232.46, 1.75, 3357.44)  # us: BLIS seed coefficients (scenarios.md)
S1_BETA = (5752.71, 17.25, 6.00)

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 65536,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


# ---------------------------------------------------------------- scenarios

_MASK = (1 << 64) - 1


def _accepted(spec: dict, rid: int, nout: int, drafts: int) -> int:
    """Drafts accepted: a leading run, each draft j accepted when
    splitmix64(seed, rid, nout, j) >> 11 is below its conditional threshold x
    2^53 (one rate alpha: alpha at every position; per-position rates a_j:
    a_j / a_(j-1))."""
    rates = spec["acceptance"]
    k = spec["num_speculative_tokens"]
    if len(rates) == 1:
        cond = [rates[0]] * k
    else:
        cond, prev = [], 1.0
        for a in rates:
            cond.append(0.0 if prev == 0.0 else min(a / prev, 1.0))
            prev = a
    thr = [1 << 53 if p >= 1.0 else int(p * (1 << 53) // 1) for p in cond]

    def mix(z: int) -> int:
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    base = (spec["seed"] * 0x9E3779B97F4A7C15 + rid * 0xBF58476D1CE4E5B9) & _MASK
    base = (base + nout * 0x94D049BB133111EB) & _MASK
    a = 0
    while a < drafts and (mix((base + a + 1) & _MASK) >> 11) < thr[a]:
        a += 1
    return a


def _base(name: str, **kw: object) -> dict:
    scn = {
        "name": name,
        "num_gpu_blocks": 200,
        "block_size": 16,
        "max_num_seqs": 32,
        "max_num_batched_tokens": 2048,
        "max_model_len": 900,
        "long_prefill_token_threshold": 0,
        "watermark": 0.0,
        "scheduler_reserve_full_isl": True,
        "policy": "fcfs",
        "enable_prefix_caching": False,
        "async_scheduling": False,
        "sliding_window": 0,
        "mode": "steps",
        "requests": [],
    }
    scn.update(kw)
    return scn


def _s1_time(name: str, num_gpu_blocks: int, **kw: object) -> dict:
    """S1-exact's server in simulated time (max_num_seqs 256, 2,048 batched
    tokens, max_model_len 4,096, a 60 s horizon, BLIS's seed alpha/beta) on
    ``num_gpu_blocks``, with ``kw`` on top."""
    return _base(
        name,
        mode="time",
        num_gpu_blocks=num_gpu_blocks,
        max_num_seqs=256,
        max_num_batched_tokens=2048,
        max_model_len=4096,
        horizon_s=60.0,
        alpha_us=list(S1_ALPHA),
        beta_us=list(S1_BETA),
        **kw,
    )


def _req(prompt: int, max_tokens: int, arrival: float = 0, **kw: object) -> dict:
    r = {"prompt_len": prompt, "max_tokens": max_tokens, "arrival": arrival}
    r.update(kw)
    return r


def _s2_requests() -> list[dict]:
    """S2's burst: 40 requests of 300 prompt and 600 output tokens at t = 0."""
    return [_req(300, 600) for _ in range(40)]


def _long_requests() -> list[dict]:
    """24 long prompts (500-796 tokens, 60-126 outputs), two arriving per second."""
    return [_req(500 + 37 * (i % 9), 60 + 11 * (i % 7), i // 2) for i in range(24)]


def _s1_requests() -> list[dict]:
    import csv

    root = Path(__file__).resolve().parent.parent
    path = root / "planner" / "data" / "s1_seed7.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return [
        _req(int(r["prompt_tokens"]), int(r["output_tokens"]), float(r["arrival_time_s"]))
        for r in rows
    ]


def _random_scenario(rng: random.Random, i: int) -> dict:
    caching = i % 2 == 1
    async_ = (i // 2) % 2 == 1
    bs = rng.choice([4, 8, 16, 16, 32])
    mml = rng.choice([256, 384, 512, 1024])
    min_blocks = -(-mml // bs) + 1
    tight = i % 3
    n_blocks = [min_blocks, min_blocks + rng.randint(2, 20), min_blocks * rng.randint(2, 6)][tight]
    policy = "priority" if i % 5 == 2 else "fcfs"
    n_req = rng.randint(6, 28)
    groups = []
    if caching and rng.random() < 0.8:
        for _ in range(rng.randint(1, 3)):
            groups.append(rng.randint(bs // 2, min(260, mml // 2)))
    reqs = []
    for _ in range(n_req):
        prompt = rng.randint(1, min(300, mml - 2))
        if rng.random() < 0.3:  # land on or next to a block boundary
            prompt = max(1, min(mml - 2, bs * rng.randint(1, 12) + rng.choice([-1, 0, 1])))
        max_tokens = rng.randint(1, min(160, mml))
        r = _req(prompt, max_tokens, rng.randint(0, 60) if rng.random() < 0.7 else 0)
        if policy == "priority":
            r["priority"] = rng.randint(0, 3)
        if groups and rng.random() < 0.6:
            g = rng.randrange(len(groups))
            r["prefix_group"] = g
            r["prefix_len"] = groups[g]
        reqs.append(r)
    return _base(
        f"rand{i:02d}",
        num_gpu_blocks=n_blocks,
        block_size=bs,
        max_num_seqs=rng.choice([1, 2, 4, 8, 16, 64]),
        max_num_batched_tokens=rng.choice([32, 64, 128, 256, 512, 2048]),
        max_model_len=mml,
        long_prefill_token_threshold=rng.choice([0, 0, 0, 16, 48]),
        watermark=rng.choice([0.0, 0.0, 0.0, 0.02, 0.05]),
        scheduler_reserve_full_isl=rng.random() < 0.8,
        policy=policy,
        enable_prefix_caching=caching,
        async_scheduling=async_,
        requests=reqs,
    )


def _random_window_scenario(rng: random.Random, i: int) -> dict:
    """A random sliding-window scenario (no prefix caching): a window of a
    few blocks, on or off a block boundary, and a pool from just above the
    gate's cap (``max_admission_blocks_per_request``) to a few times it."""
    async_ = i % 2 == 1
    bs = rng.choice([4, 8, 16, 16, 32])
    mml = rng.choice([256, 384, 512, 1024])
    window = max(2, bs * rng.randint(1, 6) + rng.choice([-1, 0, 0, 1, 3]))
    mnbt = rng.choice([32, 64, 128, 256, 512])
    in_flight = (2 if async_ else 1) * mnbt
    cap = -(-min(window - 1 + in_flight, mml) // bs) + 1
    n_blocks = [cap + 2, cap + rng.randint(3, 20), cap * rng.randint(2, 5)][i % 3]
    policy = "priority" if i % 5 == 2 else "fcfs"
    reqs = []
    for _ in range(rng.randint(6, 28)):
        prompt = rng.randint(1, min(600, mml - 2))
        if rng.random() < 0.3:  # land on or next to a block boundary
            prompt = max(1, min(mml - 2, bs * rng.randint(1, 12) + rng.choice([-1, 0, 1])))
        max_tokens = rng.randint(1, min(300, mml))
        r = _req(prompt, max_tokens, rng.randint(0, 60) if rng.random() < 0.7 else 0)
        if policy == "priority":
            r["priority"] = rng.randint(0, 3)
        reqs.append(r)
    return _base(
        f"swa_rand{i:02d}",
        num_gpu_blocks=n_blocks,
        block_size=bs,
        max_num_seqs=rng.choice([n for n in (1, 2, 4, 8, 16, 64) if n <= mnbt]),
        max_num_batched_tokens=mnbt,
        max_model_len=mml,
        long_prefill_token_threshold=rng.choice([0, 0, 0, 16, 48]),
        watermark=rng.choice([0.0, 0.0, 0.0, 0.02, 0.05]),
        scheduler_reserve_full_isl=rng.random() < 0.8,
        policy=policy,
        async_scheduling=async_,
        sliding_window=window,
        requests=reqs,
    )


def window_scenarios(seed: int = 20261201) -> list[dict]:
    """Sliding-window scenarios: S2 under a 128-token window (sync, async,
    a tight pool), chunked prefill longer than the window in a pool that
    preempts, a window off the block boundary with priority and the
    watermark, the gate off, S1 in time (sync and async) in a pool that only
    fits its load with the window, and random ones."""
    s2 = _s2_requests()
    long = _long_requests()
    fixed = [
        _base("swa_s2_base", sliding_window=128, requests=s2),
        _base("swa_s2_async", sliding_window=128, async_scheduling=True, requests=s2),
        _base("swa_s2_tight", num_gpu_blocks=60, sliding_window=128, requests=s2),
        _base(
            "swa_long_chunked",
            num_gpu_blocks=40,
            max_num_seqs=16,
            max_num_batched_tokens=128,
            max_model_len=1024,
            sliding_window=64,
            requests=long,
        ),
        _base(
            "swa_long_chunked_async",
            num_gpu_blocks=40,
            max_num_seqs=16,
            max_num_batched_tokens=128,
            max_model_len=1024,
            sliding_window=64,
            async_scheduling=True,
            requests=long,
        ),
        _base(
            "swa_off_boundary_priority",
            num_gpu_blocks=50,
            max_num_seqs=8,
            max_num_batched_tokens=96,
            max_model_len=1024,
            long_prefill_token_threshold=48,
            watermark=0.05,
            policy="priority",
            sliding_window=100,
            requests=[dict(r, priority=i % 3) for i, r in enumerate(long)],
        ),
        _base(
            "swa_gate_off",
            num_gpu_blocks=30,
            max_num_seqs=16,
            max_num_batched_tokens=128,
            max_model_len=1024,
            scheduler_reserve_full_isl=False,
            sliding_window=64,
            requests=long,
        ),
    ]
    s1 = _s1_requests()
    timed = [
        _s1_time(
            f"swa_s1_time{'_async' if a else ''}",
            900,
            async_scheduling=a,
            sliding_window=256,
            requests=s1,
        )
        for a in (False, True)
    ]
    rng = random.Random(seed)
    return fixed + timed + [_random_window_scenario(rng, i) for i in range(12)] + hybrid_scenarios()


def hybrid_scenarios(seed: int = 20261202) -> list[dict]:
    """Hybrid full + sliding-window scenarios (one pool, several KV cache
    groups): 1 full + 1 sliding and 1 full + 5 sliding (gemma-3's ratio) on
    S2 and on long chunked prompts, async, the gate off, S1 in time, and
    random ones."""
    s2 = _s2_requests()
    long = _long_requests()
    hyb = {"full_attention_groups": 1, "sliding_window_groups": 1}
    gemma = {"full_attention_groups": 1, "sliding_window_groups": 5}
    fixed = [
        _base("hyb_s2_1x1", num_gpu_blocks=400, sliding_window=128, **hyb, requests=s2),
        _base("hyb_s2_1x5", num_gpu_blocks=800, sliding_window=128, **gemma, requests=s2),
        _base(
            "hyb_s2_1x5_async",
            num_gpu_blocks=800,
            sliding_window=128,
            async_scheduling=True,
            **gemma,
            requests=s2,
        ),
        _base(
            "hyb_long_chunked",
            num_gpu_blocks=300,
            max_num_seqs=16,
            max_num_batched_tokens=128,
            max_model_len=1024,
            sliding_window=64,
            **gemma,
            requests=long,
        ),
        _base(
            "hyb_long_gate_off_async",
            num_gpu_blocks=200,
            max_num_seqs=16,
            max_num_batched_tokens=128,
            max_model_len=1024,
            scheduler_reserve_full_isl=False,
            async_scheduling=True,
            sliding_window=100,
            **hyb,
            requests=long,
        ),
    ]
    timed = [
        _s1_time(
            "hyb_s1_time",
            6000,
            sliding_window=512,
            **gemma,
            requests=_s1_requests(),
        )
    ]
    rng = random.Random(seed)
    rand = []
    for i in range(8):
        scn = _random_window_scenario(rng, i)
        n_full, n_window = rng.choice([(1, 1), (1, 2), (1, 5), (2, 1)])
        scn.update(
            name=f"hyb_rand{i:02d}",
            full_attention_groups=n_full,
            sliding_window_groups=n_window,
            num_gpu_blocks=scn["num_gpu_blocks"] * (n_full + n_window)
            + rng.choice([0, 0, 8, 40]) * n_full,
        )
        rand.append(scn)
    return fixed + timed + rand


def mamba_scenarios(seed: int = 20261211) -> list[dict]:
    """Mamba hybrids with prefix caching off (vLLM's ``mamba_cache_mode``
    "none"): ``mamba_groups`` ``MambaSpec`` groups (block_size max_model_len,
    one block per request each) beside full-attention groups in one pool, as
    Qwen3.5's 3 + 1 and Nemotron-H's 6 + 1; S2, long chunked prompts, async,
    the gate off, a pool that preempts, S1 in time, and random ones."""
    s2 = _s2_requests()
    long = _long_requests()
    qwen = {"mamba_groups": 3}
    nemo = {"mamba_groups": 6}
    fixed = [
        _base("mamba_s2_3x1", num_gpu_blocks=400, **qwen, requests=s2),
        _base("mamba_s2_6x1_async", num_gpu_blocks=500, async_scheduling=True, **nemo,
              requests=s2),
        _base("mamba_s2_tight", num_gpu_blocks=120, **qwen, requests=s2),
        _base("mamba_long_chunked", num_gpu_blocks=150, max_num_seqs=16,
              max_num_batched_tokens=128, max_model_len=1024, **qwen, requests=long),
        _base("mamba_long_gate_off_async", num_gpu_blocks=110, max_num_seqs=16,
              max_num_batched_tokens=128, max_model_len=1024, scheduler_reserve_full_isl=False,
              async_scheduling=True, **nemo, requests=long),
        _base("mamba_priority_watermark", num_gpu_blocks=160, policy="priority",
              watermark=0.05, **qwen,
              requests=[_req(200 + 13 * i, 90, i // 3, priority=i % 3) for i in range(30)]),
    ]  # fmt: skip
    timed = [_s1_time("mamba_s1_time", 6000, **qwen, requests=_s1_requests())]
    rng = random.Random(seed)
    rand = []
    for i in range(10):
        scn = _random_scenario(rng, 2 * i)  # even: prefix caching off
        m = rng.choice([1, 2, 3, 6])
        scn.update(
            name=f"mamba_rand{i:02d}",
            mamba_groups=m,
            async_scheduling=i % 2 == 1,
            num_gpu_blocks=scn["num_gpu_blocks"] + m * rng.choice([1, 4, 8, 16]),
        )
        rand.append(scn)
    return fixed + timed + rand


def _random_window_caching_scenario(rng: random.Random, i: int) -> dict:
    """A random sliding-window scenario with prefix caching: one sliding
    group (even i) or a hybrid (odd i), prefix groups shorter and longer than
    the window, prompts that repeat whole (a full hit), pools from just above
    the gate's cap to a few times it."""
    scn = _random_window_scenario(rng, i)
    bs, mml, window = scn["block_size"], scn["max_model_len"], scn["sliding_window"]
    top = min(mml // 2, 3 * window + bs)
    groups = [rng.randint(bs // 2, top) for _ in range(rng.randint(1, 3))]
    for r in scn["requests"]:
        if rng.random() < 0.7:
            g = rng.randrange(len(groups))
            r["prefix_group"] = g
            r["prefix_len"] = groups[g]
            if rng.random() < 0.3:  # the whole prompt is the shared prefix
                r["prompt_len"] = min(groups[g], mml - 2)
    scn.update(name=f"swa_caching_rand{i:02d}", enable_prefix_caching=True)
    if i % 2 == 1:
        n_full, n_window = rng.choice([(1, 1), (1, 2), (1, 5), (2, 1)])
        scn.update(
            name=f"hyb_caching_rand{i:02d}",
            full_attention_groups=n_full,
            sliding_window_groups=n_window,
            num_gpu_blocks=scn["num_gpu_blocks"] * (n_full + n_window)
            + rng.choice([0, 0, 8, 40]) * n_full,
        )
    return scn


def window_caching_scenarios(seed: int = 20261210) -> list[dict]:
    """Prefix caching with sliding-window layers (vLLM's
    ``SlidingWindowManager.find_longest_cache_hit`` and, with full-attention
    groups beside them, ``HybridKVCacheCoordinator.find_longest_cache_hit``):
    gpt-oss's layout (one full and one sliding group, a 128-token window,
    16-token blocks) on shared prefixes longer than the window, sync and
    async; gemma-3's 1 + 5 groups; a pool that evicts and preempts; chunked
    prompts; one sliding group alone; S1 in time; random ones."""
    hyb = {"full_attention_groups": 1, "sliding_window_groups": 1}
    gemma = {"full_attention_groups": 1, "sliding_window_groups": 5}
    shared = [
        _req(300 + 13 * (i % 5), 40 + 7 * (i % 6), i // 3, prefix_group=i % 2,
             prefix_len=[256, 200][i % 2])
        for i in range(36)
    ]  # fmt: skip
    long = [
        _req(500 + 37 * (i % 9), 60 + 11 * (i % 7), i // 2, prefix_group=i % 3,
             prefix_len=[400, 300, 130][i % 3])
        for i in range(24)
    ]  # fmt: skip
    fixed = [
        _base("hyb_caching_gptoss", enable_prefix_caching=True, num_gpu_blocks=400,
              sliding_window=128, **hyb, requests=shared),
        _base("hyb_caching_gptoss_async", enable_prefix_caching=True, num_gpu_blocks=400,
              sliding_window=128, async_scheduling=True, **hyb, requests=shared),
        _base("hyb_caching_gptoss_tight", enable_prefix_caching=True, num_gpu_blocks=90,
              sliding_window=128, **hyb, requests=shared),
        _base("hyb_caching_gemma", enable_prefix_caching=True, num_gpu_blocks=800,
              sliding_window=128, **gemma, requests=shared),
        _base("hyb_caching_long_preempt", enable_prefix_caching=True, num_gpu_blocks=160,
              max_num_seqs=16, max_num_batched_tokens=128, max_model_len=1024,
              sliding_window=64, **hyb, requests=long),
        _base("hyb_caching_long_preempt_async", enable_prefix_caching=True,
              num_gpu_blocks=160, max_num_seqs=16, max_num_batched_tokens=128,
              max_model_len=1024, sliding_window=100, async_scheduling=True, **hyb,
              requests=long),
        _base("swa_caching_shared", enable_prefix_caching=True, num_gpu_blocks=200,
              sliding_window=128, requests=shared),
        _base("swa_caching_long_async", enable_prefix_caching=True, num_gpu_blocks=60,
              max_num_seqs=16, max_num_batched_tokens=128, max_model_len=1024,
              sliding_window=64, async_scheduling=True, requests=long),
    ]  # fmt: skip
    timed = [
        _s1_time(
            "hyb_caching_s1_time",
            1500,
            enable_prefix_caching=True,
            sliding_window=128,
            **hyb,
            requests=[
                _req(
                    r["prompt_len"] + 300,
                    r["max_tokens"] // 8,
                    r["arrival"] / 4,
                    prefix_group=i % 2,
                    prefix_len=[256, 384][i % 2],
                )
                for i, r in enumerate(_s1_requests()[:120])
            ],  # fmt: skip
        )
    ]
    rng = random.Random(seed)
    return fixed + timed + [_random_window_caching_scenario(rng, i) for i in range(16)]


def make_scenarios(seed: int = 20261130) -> list[dict]:
    """The golden scenarios: S2 and its variants, S3, S1-exact in time, random
    ones, and the sliding-window ones (``window_scenarios``)."""
    s2 = _s2_requests()
    fixed = [
        _base("s2_base", requests=s2),
        _base("s2_watermark", watermark=0.05, requests=s2),
        _base("s2_long_prefill", long_prefill_token_threshold=128, requests=s2),
        _base("s2_priority", policy="priority", requests=s2),
        _base("s2_async", async_scheduling=True, requests=s2),
        _base("s2_caching", enable_prefix_caching=True, requests=s2),
        _base("s2_async_caching", enable_prefix_caching=True, async_scheduling=True, requests=s2),
        _base(
            "s2_single",
            num_gpu_blocks=69,
            max_num_batched_tokens=256,
            max_model_len=1024,
            requests=[_req(1000, 24)],
        ),
        _base(
            "s3_one_block_short",
            num_gpu_blocks=64,
            max_num_batched_tokens=256,
            max_model_len=1024,
            requests=[_req(1000, 24)],
        ),
        _base(
            "shared_prefix_burst",
            num_gpu_blocks=120,
            max_num_seqs=8,
            max_num_batched_tokens=256,
            max_model_len=512,
            enable_prefix_caching=True,
            requests=[
                _req(
                    100 + 7 * i, 40 + 3 * i, i // 3, prefix_group=i % 2, prefix_len=[64, 104][i % 2]
                )
                for i in range(14)
            ],
        ),
    ]
    s1 = _s1_requests()
    timed = [
        _base(
            f"s1_exact_seqs{seqs}",
            mode="time",
            num_gpu_blocks=7463,
            max_num_seqs=seqs,
            max_num_batched_tokens=2048,
            max_model_len=4096,
            horizon_s=120.0,
            alpha_us=list(S1_ALPHA),
            beta_us=list(S1_BETA),
            requests=s1,
        )
        for seqs in (32, 256)
    ]
    timed += [
        _base(
            "s1_exact_seqs256_async_caching",
            mode="time",
            num_gpu_blocks=7463,
            max_num_seqs=256,
            max_model_len=4096,
            horizon_s=120.0,
            alpha_us=list(S1_ALPHA),
            beta_us=list(S1_BETA),
            async_scheduling=True,
            enable_prefix_caching=True,
            requests=s1,
        ),
        _base(
            "shared_prefix_timed_async_caching",
            mode="time",
            num_gpu_blocks=900,
            max_num_seqs=64,
            max_num_batched_tokens=1024,
            max_model_len=2048,
            horizon_s=30.0,
            alpha_us=list(S1_ALPHA),
            beta_us=list(S1_BETA),
            async_scheduling=True,
            enable_prefix_caching=True,
            requests=[
                _req(
                    r["prompt_len"] + 400,
                    r["max_tokens"] // 8,
                    r["arrival"] / 4,
                    prefix_group=i % 3,
                    prefix_len=[256, 384, 512][i % 3],
                )
                for i, r in enumerate(s1[:150])
            ],  # fmt: skip
        ),
    ]
    rng = random.Random(seed)
    rand = [_random_scenario(rng, i) for i in range(28)]
    return (
        fixed + timed + rand + window_scenarios() + spec_scenarios() + pd_scenarios()
        + eagle_scenarios() + pd_spec_scenarios() + window_caching_scenarios()
        + mamba_scenarios() + eagle_caching_scenarios() + pd_prefill_scenarios()
    )  # fmt: skip


def _xfer(latency: int, per_kilotoken: int) -> dict:
    return {"latency": latency, "per_kilotoken": per_kilotoken}


def _random_server(rng: random.Random, watermark: bool = True) -> dict:
    """A random server's scheduler settings (the ``_base`` fields), drawn in
    this order: max_num_seqs, max_num_batched_tokens,
    long_prefill_token_threshold, the watermark (if ``watermark``), the
    whole-sequence gate. The seeded scenarios depend on the order."""
    seqs = rng.choice([1, 2, 4, 8, 32])
    out = {
        "max_num_seqs": seqs,
        "max_num_batched_tokens": max(seqs, rng.choice([16, 64, 256, 2048])),
        "long_prefill_token_threshold": rng.choice([0, 0, 16]),
    }
    if watermark:
        out["watermark"] = rng.choice([0.0, 0.0, 0.03])
    out["scheduler_reserve_full_isl"] = rng.random() < 0.8
    return out


def _random_pd_scenario(rng: random.Random, i: int) -> dict:
    """A random decode-side scenario: remote and local requests, transfers
    from instant to many steps, pools from the start-up minimum to ample,
    caching on in half."""
    bs = rng.choice([4, 8, 16])
    mml = rng.choice([128, 256, 512])
    min_blocks = -(-mml // bs) + 1
    n_blocks = [min_blocks, min_blocks + rng.randint(2, 12), min_blocks * rng.randint(2, 5)][i % 3]
    caching = i % 2 == 1
    reqs = []
    for _ in range(rng.randint(4, 18)):
        prompt = rng.randint(1, min(200, mml - 2))
        if rng.random() < 0.25:
            prompt = max(1, min(mml - 2, bs * rng.randint(1, 8) + rng.choice([-1, 0, 1])))
        r = _req(prompt, rng.randint(1, min(120, mml)), rng.randint(0, 40))
        r["remote"] = rng.random() < 0.75
        if caching and rng.random() < 0.5:
            r["prefix_group"] = 0
            r["prefix_len"] = bs * rng.randint(1, 4)
        reqs.append(r)
    return _base(
        f"pd_rand{i:02d}",
        num_gpu_blocks=n_blocks,
        block_size=bs,
        max_model_len=mml,
        **_random_server(rng),
        policy="priority" if i % 4 == 3 else "fcfs",
        enable_prefix_caching=caching,
        kv_transfer=_xfer(rng.choice([0, 1, 3, 10]), rng.choice([0, 5, 40])),
        requests=reqs,
    )


def pd_scenarios(seed: int = 20261206) -> list[dict]:
    """The decode side of disaggregated prefill/decode (sync): transfers that
    land while the pool is full, loads held back by in-flight prefills'
    reservations, preemption of a request whose KV arrived (it recomputes
    locally), local prefix hits shortening the load, seats full, priority,
    the watermark, instant transfers, the one-block-short pool, random ones;
    then ``pd_async_scenarios``."""
    rng = random.Random(seed)
    rand = [_random_pd_scenario(rng, i) for i in range(10)]
    return _pd_fixed() + rand + pd_async_scenarios()


def _pd_fixed() -> list[dict]:
    remote = [_req(200 + 17 * i, 60 + 5 * i, i, remote=True) for i in range(10)]
    return [
        _base("pd_basic", kv_transfer=_xfer(2, 10), requests=remote),
        _base("pd_instant", kv_transfer=_xfer(0, 0), requests=remote),
        _base(
            "pd_pool_full",
            num_gpu_blocks=60,
            max_num_batched_tokens=512,
            kv_transfer=_xfer(1, 20),
            requests=[_req(300 + 9 * i, 120, i // 2, remote=True) for i in range(10)],
        ),
        _base(
            "pd_reserved",
            num_gpu_blocks=70,
            max_num_batched_tokens=64,
            kv_transfer=_xfer(3, 5),
            requests=[_req(400, 40, 0)]
            + [_req(150 + 10 * i, 30, 1 + i, remote=True) for i in range(6)]
            + [_req(380, 20, 4)],
        ),
        _base(
            "pd_preempt",
            num_gpu_blocks=48,
            max_num_batched_tokens=256,
            kv_transfer=_xfer(1, 10),
            requests=[_req(120 + 13 * i, 200, i % 3, remote=i % 4 != 3) for i in range(10)],
        ),
        _base(
            "pd_caching",
            num_gpu_blocks=90,
            max_num_batched_tokens=256,
            enable_prefix_caching=True,
            kv_transfer=_xfer(2, 20),
            requests=[
                _req(96 + 16 * (i % 3), 50, i % 4, prefix_group=i % 2, prefix_len=64, remote=i > 1)
                for i in range(12)
            ],
        ),
        _base(
            "pd_caching_preempt",
            num_gpu_blocks=45,
            max_num_batched_tokens=256,
            enable_prefix_caching=True,
            kv_transfer=_xfer(1, 30),
            requests=[
                _req(96 + 16 * (i % 3), 120, i % 3, prefix_group=i % 2, prefix_len=64, remote=True)
                for i in range(10)
            ],
        ),
        _base(
            "pd_seats",
            max_num_seqs=3,
            kv_transfer=_xfer(4, 10),
            requests=[_req(100 + 20 * i, 40, i // 3, remote=True) for i in range(9)],
        ),
        _base(
            "pd_priority",
            policy="priority",
            num_gpu_blocks=60,
            max_num_batched_tokens=128,
            kv_transfer=_xfer(2, 25),
            requests=[
                _req(90 + 7 * i, 100, i // 2, priority=(i * 7) % 3, remote=i % 3 != 0)
                for i in range(10)
            ],
        ),
        _base(
            "pd_watermark",
            num_gpu_blocks=80,
            watermark=0.05,
            kv_transfer=_xfer(1, 15),
            requests=[_req(250, 150, i, remote=True) for i in range(8)],
        ),
        _base(
            "pd_long_prefill",
            long_prefill_token_threshold=32,
            max_num_batched_tokens=64,
            kv_transfer=_xfer(2, 10),
            requests=[_req(150 + 11 * i, 40, i, remote=i % 2 == 0) for i in range(8)],
        ),
        _base(
            "pd_one_block_short",
            num_gpu_blocks=64,
            max_num_batched_tokens=256,
            max_model_len=1024,
            kv_transfer=_xfer(2, 10),
            requests=[_req(1000, 24, remote=True)],
        ),
    ]


# Fixed decode-side scenarios also recorded with async scheduling.
PD_ASYNC = (
    "pd_basic",
    "pd_pool_full",
    "pd_reserved",
    "pd_preempt",
    "pd_caching_preempt",
    "pd_priority",
    "pd_seats",
    "pd_one_block_short",
)


def _held(prompt: int, arrival: float, read_after: float, **kw: object) -> dict:
    """A prefill instance's request (one output token, ``do_remote_decode``)
    whose blocks the decode side's read releases ``read_after`` steps after
    its arrival (``read_end``, in steps like ``arrival``)."""
    return _req(prompt, 1, arrival, read_end=arrival + read_after, **kw)


def _random_pd_prefill_scenario(rng: random.Random, i: int) -> dict:
    """A random prefill side: reads ending before their prefills end up to
    many steps after, some requests not read, pools from tight to ample,
    caching in half, async in half."""
    bs = rng.choice([4, 8, 16])
    mml = rng.choice([128, 256, 512])
    min_blocks = -(-mml // bs) + 1
    n_blocks = [min_blocks + rng.randint(0, 6), min_blocks * rng.randint(2, 4)][i % 2]
    caching = i % 4 >= 2
    reqs = []
    for _ in range(rng.randint(4, 16)):
        arrival = rng.randint(0, 30)
        r = _held(rng.randint(1, mml - 2), arrival, rng.choice([0, 1, 3, 8, 25]) + rng.random())
        if rng.random() < 0.15:
            r = _req(r["prompt_len"], rng.randint(1, 20), arrival)  # not read
        if caching and rng.random() < 0.5:
            r["prefix_group"] = 0
            r["prefix_len"] = bs * rng.randint(1, 4)
        reqs.append(r)
    return _base(
        f"pd_prefill_rand{i:02d}",
        num_gpu_blocks=n_blocks,
        block_size=bs,
        max_model_len=mml,
        **_random_server(rng, watermark=False),
        policy="priority" if i % 5 == 4 else "fcfs",
        enable_prefix_caching=caching,
        async_scheduling=i % 2 == 1,
        kv_transfer=_xfer(0, 0),
        requests=reqs,
    )


def pd_prefill_scenarios(seed: int = 20261208) -> list[dict]:
    """The prefill side of disaggregated prefill/decode: a request sent with
    ``do_remote_decode`` keeps its blocks after its one token until the
    decode side's read ends (``read_end``; the connector's
    ``request_finished`` returns ``delay_free_blocks``, and the recorder
    reports the request in ``finished_sending`` in the output of the first
    step that ends at or after its read end and after it finished). Reads
    ending while the pool is full (steps that wait for a read), while the
    server is idle, prefix hits on held blocks, sync and async, and random
    ones."""
    fixed = [
        _base(
            "pd_prefill_basic",
            kv_transfer=_xfer(0, 0),
            requests=[_held(200 + 17 * i, i, 4) for i in range(10)],
        ),
        _base(
            "pd_prefill_pool_full",
            num_gpu_blocks=60,
            max_num_batched_tokens=512,
            kv_transfer=_xfer(0, 0),
            requests=[_held(300 + 9 * i, i // 2, 12 + i) for i in range(10)],
        ),
        _base(
            "pd_prefill_idle",
            num_gpu_blocks=40,
            kv_transfer=_xfer(0, 0),
            requests=[_held(250, 30 * (i // 3), 9.5) for i in range(9)],
        ),
        _base(
            "pd_prefill_caching",
            num_gpu_blocks=50,
            enable_prefix_caching=True,
            kv_transfer=_xfer(0, 0),
            requests=[
                _held(96 + 16 * (i % 3), i, 6, prefix_group=i % 2, prefix_len=64) for i in range(10)
            ],
        ),
        _base(
            "pd_prefill_mixed",
            num_gpu_blocks=45,
            max_num_batched_tokens=256,
            kv_transfer=_xfer(0, 0),
            requests=[
                _held(120 + 13 * i, i // 2, 3 + i) if i % 3 else _req(120 + 13 * i, 30, i // 2)
                for i in range(10)
            ],
        ),
    ]
    fixed += [dict(scn, name=scn["name"] + "_async", async_scheduling=True) for scn in fixed]
    rng = random.Random(seed)
    return fixed + [_random_pd_prefill_scenario(rng, i) for i in range(10)]


def pd_async_scenarios(seed: int = 20261207) -> list[dict]:
    """The decode side under async scheduling (vLLM 0.33's default): a KV
    consumer with two batches in flight defers freeing the blocks an in-flight
    step may still write (``Scheduler.defer_block_free``) and does not preempt
    a request whose blocks it could not free at once. The fixed scenarios of
    ``PD_ASYNC``, two with pools so small that preemption is the rule, and
    random ones."""
    fixed = [s for s in _pd_fixed() if s["name"] in PD_ASYNC]
    out = [dict(scn, name=scn["name"] + "_async", async_scheduling=True) for scn in fixed]
    out += [
        _base(
            "pd_async_thrash",
            num_gpu_blocks=30,
            max_num_batched_tokens=128,
            kv_transfer=_xfer(1, 10),
            async_scheduling=True,
            requests=[_req(40 + 9 * i, 150, i % 4, remote=i % 3 != 2) for i in range(12)],
        ),
        _base(
            "pd_async_thrash_priority",
            policy="priority",
            num_gpu_blocks=30,
            max_num_batched_tokens=128,
            kv_transfer=_xfer(1, 10),
            async_scheduling=True,
            requests=[
                _req(40 + 9 * i, 150, i % 4, priority=i % 3, remote=i % 3 != 2) for i in range(12)
            ],
        ),
        _base(
            "pd_async_stop_len",
            num_gpu_blocks=40,
            max_model_len=128,
            max_num_batched_tokens=128,
            kv_transfer=_xfer(1, 10),
            async_scheduling=True,
            # prompt + max_tokens = max_model_len: each ends at the length cap
            requests=[_req(60 + 7 * i, 68 - 7 * i, i % 3, remote=i % 2 == 0) for i in range(8)],
        ),
    ]
    rng = random.Random(seed)
    for i in range(10):
        scn = _random_pd_scenario(rng, i)
        out.append(dict(scn, name=f"pd_async_rand{i:02d}", async_scheduling=True))
    return out


def _spec(k: int, acceptance: list[float], seed: int = 0, method: str = "ngram") -> dict:
    d = {"method": method, "num_speculative_tokens": k, "acceptance": acceptance, "seed": seed}
    if method == "eagle3":
        d["model"] = EAGLE3_DIR  # the tiny EAGLE-3 head the recorder writes (Driver)
    return d


EAGLE3_DIR = "eagle3"  # in the recorder's temporary model folder
EAGLE3_HEAD = dict(TINY_LLAMA, num_hidden_layers=1, architectures=["LlamaForCausalLMEagle3"])


def eagle_scenarios(seed: int = 20261208) -> list[dict]:
    """EAGLE-3 (sync and async, no prefix caching): the drafter's lookahead KV
    (``num_lookahead_tokens`` = k slots past the scheduled tokens in both
    phases) in pools where it decides admission and preemption, lookahead cut
    by max_model_len, random ones."""
    e = "eagle3"
    s2 = [_req(300, 200) for _ in range(12)]
    fixed = [
        _base("eagle_accept_all", speculative=_spec(3, [1.0], 0, e), requests=s2),
        _base("eagle_per_position", speculative=_spec(4, [0.8, 0.6, 0.3, 0.1], 1, e), requests=s2),
        _base(
            "eagle_preempt",
            num_gpu_blocks=40,
            max_num_batched_tokens=256,
            speculative=_spec(5, [0.8], 3, e),
            requests=[_req(120 + 13 * i, 150, i % 4) for i in range(10)],
        ),
        _base(
            "eagle_block_edge",  # prompts ending just before a block boundary
            num_gpu_blocks=30,
            block_size=8,
            max_num_batched_tokens=128,
            speculative=_spec(4, [0.5], 4, e),
            requests=[_req(8 * (i + 2) - 1 - i % 3, 60, i % 3) for i in range(10)],
        ),
        _base(
            "eagle_max_model_len",
            max_model_len=128,
            num_gpu_blocks=40,
            speculative=_spec(5, [1.0], 5, e),
            requests=[_req(100 + i, 60, i) for i in range(5)],
        ),
        _base(
            "eagle_priority",
            policy="priority",
            num_gpu_blocks=50,
            max_num_batched_tokens=128,
            speculative=_spec(3, [0.6], 6, e),
            requests=[_req(90 + 7 * i, 100, i // 2, priority=(i * 7) % 3) for i in range(10)],
        ),
    ]
    fixed += [dict(scn, name=scn["name"] + "_async", async_scheduling=True) for scn in fixed[:4]]
    rng = random.Random(seed)
    rand = []
    for i in range(8):
        scn = _random_spec_scenario(rng, i)
        scn["speculative"] = dict(scn["speculative"], method=e, model=EAGLE3_DIR)
        rand.append(
            dict(
                scn,
                name=f"eagle_rand{i:02d}",
                enable_prefix_caching=False,
                requests=[{k: v for k, v in r.items() if not k.startswith("prefix")}
                          for r in scn["requests"]],
            )
        )  # fmt: skip
    return fixed + rand


def eagle_caching_scenarios(seed: int = 20261212) -> list[dict]:
    """EAGLE-3 with prefix caching (vLLM's default): a block's hash covers
    the next token (``num_hash_lookahead_tokens`` 1), so a shared prefix
    ending on a block boundary shares one block less, the prompt's last full
    block is hashed only after its first output token, and no trailing block
    is dropped. Shared prefixes on and off block boundaries, preemption
    re-hitting its own blocks, sync and async, random ones."""
    e = "eagle3"

    def grouped(n: int, prompt: int, prefix: int, out: int, step: int = 1) -> list[dict]:
        return [
            _req(prompt + 3 * i, out, i // step, prefix_group=i % 2, prefix_len=prefix)
            for i in range(n)
        ]

    fixed = [
        # prefixes of whole blocks: the lookahead token lies past the prefix
        _base("eagle_cache_aligned", enable_prefix_caching=True,
              speculative=_spec(3, [0.7], 11, e), requests=grouped(10, 100, 64, 40)),
        # one token more: the last shared block's lookahead is shared too
        _base("eagle_cache_aligned_plus_one", enable_prefix_caching=True,
              speculative=_spec(3, [0.7], 12, e), requests=grouped(10, 100, 65, 40)),
        # whole prompts shared, ending on a block: the last block's lookahead
        # is each request's own first output token
        _base("eagle_cache_whole_prompt", enable_prefix_caching=True, block_size=8,
              speculative=_spec(2, [0.5], 13, e),
              requests=[_req(64, 30, i, prefix_group=0, prefix_len=64) for i in range(8)]),
        _base("eagle_cache_preempt", enable_prefix_caching=True, num_gpu_blocks=40,
              max_num_batched_tokens=256, speculative=_spec(5, [0.8], 14, e),
              requests=grouped(12, 120, 48, 150, step=3)),
        _base("eagle_cache_block_edge", enable_prefix_caching=True, num_gpu_blocks=30,
              block_size=8, max_num_batched_tokens=128, speculative=_spec(4, [0.5], 15, e),
              requests=[_req(8 * (i + 2) - i % 3, 60, i % 3, prefix_group=0,
                             prefix_len=8 * (1 + i % 2)) for i in range(10)]),
    ]  # fmt: skip
    fixed += [dict(scn, name=scn["name"] + "_async", async_scheduling=True) for scn in fixed]
    rng = random.Random(seed)
    rand = []
    for i in range(8):
        scn = _random_spec_scenario(rng, 2 * i + 1)  # odd: prefix caching on
        scn["speculative"] = dict(scn["speculative"], method=e, model=EAGLE3_DIR)
        rand.append(dict(scn, name=f"eagle_cache_rand{i:02d}", async_scheduling=i % 2 == 1))
    return fixed + rand


def _random_spec_scenario(rng: random.Random, i: int) -> dict:
    """A random speculative-decoding scenario: k 1..5, acceptance from none
    to all, pools from the start-up minimum to ample, caching on in half."""
    k = rng.randint(1, 5)
    bs = rng.choice([4, 8, 16])
    mml = rng.choice([128, 256, 512])
    min_blocks = -(-mml // bs) + 1
    n_blocks = [min_blocks, min_blocks + rng.randint(2, 12), min_blocks * rng.randint(2, 5)][i % 3]
    caching = i % 2 == 1
    rates = rng.choice([[0.0], [1.0], [0.6], [0.9, 0.7, 0.4, 0.2, 0.1][:k]])
    if len(rates) > 1:
        rates = (rates + [0.05] * k)[:k]
    reqs = []
    for _ in range(rng.randint(4, 18)):
        prompt = rng.randint(1, min(200, mml - 2))
        if rng.random() < 0.25:
            prompt = max(1, min(mml - 2, bs * rng.randint(1, 8) + rng.choice([-1, 0, 1])))
        r = _req(prompt, rng.randint(1, min(120, mml)), rng.randint(0, 40))
        if caching and rng.random() < 0.5:
            r["prefix_group"] = 0
            r["prefix_len"] = bs * rng.randint(1, 4)
        reqs.append(r)
    seqs = rng.choice([1, 2, 4, 8, 32])
    return _base(
        f"spec_rand{i:02d}",
        num_gpu_blocks=n_blocks,
        block_size=bs,
        max_num_seqs=seqs,
        max_num_batched_tokens=max(seqs, rng.choice([k + 1, 16, 64, 256, 2048])),
        max_model_len=mml,
        long_prefill_token_threshold=rng.choice([0, 0, 16]),
        watermark=rng.choice([0.0, 0.0, 0.03]),
        scheduler_reserve_full_isl=rng.random() < 0.8,
        policy="priority" if i % 4 == 3 else "fcfs",
        enable_prefix_caching=caching,
        async_scheduling=(i // 2) % 2 == 1,
        speculative=_spec(k, rates, seed=i),
        requests=reqs,
    )


def spec_scenarios(seed: int = 20261205) -> list[dict]:
    """Speculative decoding (ngram, sync): every draft accepted, none, per-
    position rates; drafts cut by the token budget and by max_model_len;
    preemption of requests holding drafts; prefix-cache re-admission with
    one token left (``pad_spec_decode``) and one-token prompts admitted
    beside running decodes; priority; random ones."""
    s2 = [_req(300, 200) for _ in range(12)]
    fixed = [
        _base("spec_accept_all", speculative=_spec(3, [1.0]), requests=s2),
        _base("spec_accept_none", speculative=_spec(3, [0.0]), requests=s2),
        _base("spec_per_position", speculative=_spec(4, [0.8, 0.6, 0.3, 0.1], 1), requests=s2),
        _base(
            "spec_budget_cut",
            max_num_seqs=4,
            max_num_batched_tokens=10,
            speculative=_spec(4, [0.7], 2),
            requests=[_req(40 + 9 * i, 30 + i, i) for i in range(6)],
        ),
        _base(
            "spec_max_model_len",
            max_model_len=128,
            num_gpu_blocks=40,
            speculative=_spec(5, [1.0]),
            requests=[_req(100 + i, 60, i) for i in range(5)],
        ),
        _base(
            "spec_preempt",
            num_gpu_blocks=40,
            max_num_batched_tokens=256,
            speculative=_spec(3, [0.8], 3),
            requests=[_req(120 + 13 * i, 150, i % 4) for i in range(10)],
        ),
        _base(
            "spec_caching_preempt",
            num_gpu_blocks=45,
            max_num_batched_tokens=256,
            enable_prefix_caching=True,
            speculative=_spec(3, [0.9, 0.7, 0.5], 4),
            requests=[
                _req(96 + 16 * (i % 3), 120, i % 3, prefix_group=i % 2, prefix_len=64)
                for i in range(10)
            ],
        ),
        _base(
            "spec_one_token_prompts",
            max_num_seqs=8,
            speculative=_spec(2, [0.5], 5),
            requests=[_req(1 if i % 2 else 50, 20, i) for i in range(10)],
        ),
        _base(
            "spec_priority",
            policy="priority",
            num_gpu_blocks=50,
            max_num_batched_tokens=128,
            speculative=_spec(3, [0.6], 6),
            requests=[_req(90 + 7 * i, 100, i // 2, priority=(i * 7) % 3) for i in range(10)],
        ),
        _base(
            "spec_long_prefill",
            long_prefill_token_threshold=32,
            max_num_batched_tokens=64,
            speculative=_spec(3, [0.75], 7),
            requests=[_req(150 + 11 * i, 40, i) for i in range(8)],
        ),
        _base(
            "spec_one_block_short",
            num_gpu_blocks=64,
            max_num_batched_tokens=256,
            max_model_len=1024,
            speculative=_spec(3, [0.8], 8),
            requests=[_req(1000, 24)],
        ),
    ]
    fixed += [
        dict(scn, name=scn["name"] + "_async", async_scheduling=True)
        for scn in fixed
        if scn["name"] in ASYNC_SPEC
    ]
    rng = random.Random(seed)
    return fixed + [_random_spec_scenario(rng, i) for i in range(12)]


def pd_spec_scenarios(seed: int = 20261209) -> list[dict]:
    """Speculative decoding on a disaggregated decode side (``pd_spec_*``):
    n-gram and EAGLE-3 drafts on requests whose prompt KV loads from a
    prefill instance, beside local ones; transfers landing while the pool is
    full, preemption of a request whose KV arrived and holds drafts, the
    drafter's lookahead on the first local step, priority, prefix caching
    (n-gram), sync and async; random ones."""
    e = "eagle3"
    remote = [_req(200 + 17 * i, 60 + 5 * i, i, remote=True) for i in range(10)]
    fixed = [
        _base("pd_spec_basic", kv_transfer=_xfer(2, 10), speculative=_spec(3, [0.7], 0),
              requests=remote),
        _base("pd_spec_eagle_basic", kv_transfer=_xfer(2, 10),
              speculative=_spec(3, [0.7], 1, e), requests=remote),
        _base(
            "pd_spec_pool_full",
            num_gpu_blocks=60,
            max_num_batched_tokens=512,
            kv_transfer=_xfer(1, 20),
            speculative=_spec(4, [0.8, 0.6, 0.3, 0.1], 2),
            requests=[_req(300 + 9 * i, 120, i // 2, remote=True) for i in range(10)],
        ),
        _base(
            "pd_spec_eagle_pool_full",
            num_gpu_blocks=60,
            max_num_batched_tokens=512,
            kv_transfer=_xfer(1, 20),
            speculative=_spec(4, [0.8], 3, e),
            requests=[_req(300 + 9 * i, 120, i // 2, remote=True) for i in range(10)],
        ),
        _base(
            "pd_spec_preempt",
            num_gpu_blocks=48,
            max_num_batched_tokens=256,
            kv_transfer=_xfer(1, 10),
            speculative=_spec(3, [0.8], 4),
            requests=[_req(120 + 13 * i, 200, i % 3, remote=i % 4 != 3) for i in range(10)],
        ),
        _base(
            "pd_spec_eagle_preempt",
            num_gpu_blocks=48,
            max_num_batched_tokens=256,
            kv_transfer=_xfer(1, 10),
            speculative=_spec(5, [0.8], 5, e),
            requests=[_req(120 + 13 * i, 200, i % 3, remote=i % 4 != 3) for i in range(10)],
        ),
        _base(
            "pd_spec_caching_preempt",
            num_gpu_blocks=45,
            max_num_batched_tokens=256,
            enable_prefix_caching=True,
            kv_transfer=_xfer(1, 30),
            speculative=_spec(3, [0.9, 0.7, 0.5], 6),
            requests=[
                _req(96 + 16 * (i % 3), 120, i % 3, prefix_group=i % 2, prefix_len=64, remote=True)
                for i in range(10)
            ],
        ),
        _base(
            "pd_spec_priority",
            policy="priority",
            num_gpu_blocks=60,
            max_num_batched_tokens=128,
            kv_transfer=_xfer(2, 25),
            speculative=_spec(3, [0.6], 7),
            requests=[
                _req(90 + 7 * i, 100, i // 2, priority=(i * 7) % 3, remote=i % 3 != 0)
                for i in range(10)
            ],
        ),
        _base(
            "pd_spec_one_block_short",
            num_gpu_blocks=64,
            max_num_batched_tokens=256,
            max_model_len=1024,
            kv_transfer=_xfer(2, 10),
            speculative=_spec(3, [0.8], 8),
            requests=[_req(1000, 24, remote=True)],
        ),
    ]  # fmt: skip
    fixed += [dict(scn, name=scn["name"] + "_async", async_scheduling=True) for scn in fixed]
    # One request at a time, every draft accepted: each ends while the step
    # in flight holds it, and the server is idle when that step lands.
    lone = [_req(60 + 7 * i, 12 + i, 40 * i, remote=True) for i in range(6)]
    fixed += [
        _base("pd_spec_idle_async", async_scheduling=True, num_gpu_blocks=40,
              kv_transfer=_xfer(2, 10), speculative=_spec(3, [1.0], 9), requests=lone),
        _base("pd_spec_eagle_idle_async", async_scheduling=True, num_gpu_blocks=40,
              kv_transfer=_xfer(2, 10), speculative=_spec(3, [1.0], 10, e), requests=lone),
    ]  # fmt: skip
    rng = random.Random(seed)
    rand = []
    for i in range(8):
        scn = _random_pd_scenario(rng, i)
        method = e if i % 2 else "ngram"
        scn["speculative"] = _spec(rng.randint(1, 5), [rng.choice([0.0, 0.5, 0.8, 1.0])], i, method)
        if method == e:  # EAGLE with prefix caching is refused (module docstring)
            scn["enable_prefix_caching"] = False
            scn["requests"] = [
                {k: v for k, v in r.items() if not k.startswith("prefix")} for r in scn["requests"]
            ]
        scn["max_num_batched_tokens"] = max(scn["max_num_batched_tokens"], 16)
        rand.append(dict(scn, name=f"pd_spec_rand{i:02d}", async_scheduling=i % 4 >= 2))
    return fixed + rand


# Fixed speculative-decoding scenarios also recorded with async scheduling.
ASYNC_SPEC = (
    "spec_accept_all",
    "spec_accept_none",
    "spec_per_position",
    "spec_budget_cut",
    "spec_max_model_len",
    "spec_preempt",
    "spec_caching_preempt",
    "spec_one_token_prompts",
    "spec_priority",
    "spec_one_block_short",
)


# ---------------------------------------------------------------- the driver


def _connector_class() -> type:
    """``DecodeSideConnector``: the scheduler side of a decode instance's KV
    connector, answering as ``NixlConnectorScheduler`` (``nixl/pull_scheduler.py``)
    does for ``do_remote_prefill``: every prompt token past the local hit is
    external and loads asynchronously; the flag is cleared after the first
    allocation, so a preempted request recomputes locally. Worker hooks are
    no-ops (the recorder reports ``finished_recving`` itself)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1,
        KVConnectorMetadata,
    )

    class DecodeSideConnector(KVConnectorBase_V1):
        started: list = []  # (request id, external tokens), drained by the driver
        held: list = []  # request ids whose blocks wait for a read, drained by the driver

        def get_num_new_matched_tokens(self, request, num_computed_tokens):  # noqa: ANN001, ANN201
            params = request.kv_transfer_params
            if params and params.get("do_remote_prefill"):
                count = len(request.prompt_token_ids) - num_computed_tokens
                if count > 0:
                    return count, True
            return 0, False

        def update_state_after_alloc(self, request, blocks, num_external_tokens):  # noqa: ANN001, ANN201
            params = request.kv_transfer_params
            if params and params.get("do_remote_prefill"):
                params["do_remote_prefill"] = False
                if num_external_tokens > 0:
                    DecodeSideConnector.started.append((request.request_id, num_external_tokens))

        def build_connector_meta(self, scheduler_output):  # noqa: ANN001, ANN201
            return KVConnectorMetadata()

        def request_finished(self, request, block_ids):  # noqa: ANN001, ANN201
            # ``NixlConnectorScheduler.request_finished`` on a prefill instance:
            # a do_remote_decode request that ended by check_stop keeps its
            # blocks until the decode side's read (``delay_free_blocks``)
            from vllm.v1.request import RequestStatus

            params = request.kv_transfer_params
            capped = (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED)
            if params and params.get("do_remote_decode") and request.status in capped:
                held = len(block_ids) > 0  # one group: a list of block ids
                if held:
                    DecodeSideConnector.held.append(request.request_id)
                return held, None
            return False, None

        def start_load_kv(self, forward_context, **kwargs):  # noqa: ANN001, ANN003, ANN201
            return None

        def wait_for_layer_load(self, layer_name):  # noqa: ANN001, ANN201
            return None

        def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):  # noqa: ANN001, ANN003, ANN201
            return None

        def wait_for_save(self):  # noqa: ANN201
            return None

    return DecodeSideConnector


DecodeSideConnector = None  # made on first use (imports vLLM)


def _ns(us: float) -> int:
    return int(round(us * 1000))


class Driver:
    """One scenario against the real scheduler."""

    def __init__(self, scn: dict, model_dir: str) -> None:
        import torch
        from vllm.config import (
            CacheConfig,
            DeviceConfig,
            ModelConfig,
            SchedulerConfig,
            VllmConfig,
        )
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
            MambaSpec,
            SlidingWindowSpec,
        )
        from vllm.v1.request import Request
        from vllm.v1.structured_output import StructuredOutputManager

        self.scn = scn
        bs = scn["block_size"]
        mml = scn["max_model_len"]
        sched_cfg = SchedulerConfig(
            max_num_seqs=scn["max_num_seqs"],
            max_num_batched_tokens=scn["max_num_batched_tokens"],
            max_model_len=mml,
            long_prefill_token_threshold=scn["long_prefill_token_threshold"],
            enable_chunked_prefill=True,
            policy=scn["policy"],
            watermark=scn["watermark"],
            scheduler_reserve_full_isl=scn["scheduler_reserve_full_isl"],
            async_scheduling=scn["async_scheduling"],
            is_encoder_decoder=False,
        )
        model_cfg = ModelConfig(
            model=model_dir,
            tokenizer=model_dir,
            skip_tokenizer_init=True,
            max_model_len=mml,
            dtype="float32",
            seed=0,
        )
        cache_cfg = CacheConfig(block_size=bs, enable_prefix_caching=scn["enable_prefix_caching"])
        self.spec = scn.get("speculative")
        # A request's number in the draws: its index in arrival order, the
        # planner's workload index (ties by request id).
        order = sorted(
            range(len(scn["requests"])), key=lambda i: (scn["requests"][i]["arrival"], i)
        )
        self.rank = {i: j for j, i in enumerate(order)}
        spec_cfg = None
        if self.spec:
            from vllm.config import ParallelConfig, SpeculativeConfig

            if self.spec["method"] == "eagle3":  # a tiny EAGLE-3 head beside the target
                head = Path(model_dir, EAGLE3_DIR)
                head.mkdir(exist_ok=True)
                (head / "config.json").write_text(json.dumps(EAGLE3_HEAD))
                kw: dict = {"model": str(head)}
            else:
                kw = {"prompt_lookup_max": 3, "prompt_lookup_min": 1}
            spec_cfg = SpeculativeConfig(
                method=self.spec["method"],
                num_speculative_tokens=self.spec["num_speculative_tokens"],
                target_model_config=model_cfg,
                target_parallel_config=ParallelConfig(),
                **kw,
            )
        self.xfer = scn.get("kv_transfer")
        # a prefill instance: request -> clock its read ends, once it finished (held)
        self.sends = {} if any("read_end" in r for r in scn["requests"]) else None
        kv_cfg_transfer = None
        if self.xfer:
            from vllm.config import KVTransferConfig

            global DecodeSideConnector
            if DecodeSideConnector is None:
                DecodeSideConnector = _connector_class()
            DecodeSideConnector.started = []
            kv_cfg_transfer = KVTransferConfig(
                kv_connector="DecodeSideConnector",
                kv_connector_module_path=__name__,
                kv_role="kv_consumer",
            )
        vcfg = VllmConfig(
            scheduler_config=sched_cfg,
            model_config=model_cfg,
            cache_config=cache_cfg,
            device_config=DeviceConfig(device="cpu"),
            speculative_config=spec_cfg,
            kv_transfer_config=kv_cfg_transfer,
        )
        window = scn.get("sliding_window", 0)
        layout = {"block_size": bs, "num_kv_heads": 1, "head_size": 1, "dtype": torch.float32}
        n_full = scn.get("full_attention_groups", 0 if window else 1)
        n_window = scn.get("sliding_window_groups", 1 if window else 0)
        groups = [
            KVCacheGroupSpec([f"window{i}"], SlidingWindowSpec(sliding_window=window, **layout))
            for i in range(n_window)
        ] + [KVCacheGroupSpec([f"full{i}"], FullAttentionSpec(**layout)) for i in range(n_full)]
        # Mamba groups first, as a hybrid whose layer 0 is a Mamba layer lists
        # them (Qwen3.5, Nemotron-H); "none" mode: block_size max_model_len
        # (``HybridAttentionMambaModelConfig``), one block per request each
        mamba = {"shapes": ((1,),), "dtypes": (torch.float32,), "mamba_cache_mode": "none"}
        groups = [
            KVCacheGroupSpec([f"mamba{i}"], MambaSpec(block_size=mml, **mamba))
            for i in range(scn.get("mamba_groups", 0))
        ] + groups
        kv_cfg = KVCacheConfig(
            num_blocks=scn["num_gpu_blocks"],
            kv_cache_tensors=[],
            kv_cache_groups=groups,
            # as vLLM's start-up copies it (``kv_cache_planning``): the
            # default 0 keeps a sliding-window group's cached blocks only at
            # the replay boundary and shared-prefix junctions
            prefix_cache_retention_interval=cache_cfg.prefix_cache_retention_interval,
        )
        cache_cfg.num_gpu_blocks = scn["num_gpu_blocks"]
        cls = AsyncScheduler if scn["async_scheduling"] else Scheduler
        # ``resolve_kv_cache_block_sizes``: several groups schedule on the lcm of
        # their block sizes, and hash on it too when a Mamba group is not in
        # "align" mode (only Mamba groups make it differ from bs here)
        sched_bs = math.lcm(*(g.kv_cache_spec.block_size for g in groups))
        self.sched = cls(
            vllm_config=vcfg,
            kv_cache_config=kv_cfg,
            structured_output_manager=StructuredOutputManager(vcfg),
            block_size=sched_bs,
            hash_block_size=sched_bs if sched_bs != bs else bs,
            log_stats=False,
        )
        init_none_hash(sha256)
        # as ``EngineCore`` builds it: an EAGLE drafter with prefix caching
        # hashes one token past each block (``num_hash_lookahead_tokens``)
        hasher = get_request_block_hasher(sched_bs, sha256, vcfg.num_hash_lookahead_tokens)
        self.reqs = []
        for i, r in enumerate(scn["requests"]):
            shared = min(r.get("prefix_len", 0), r["prompt_len"])
            g = r.get("prefix_group", -1)
            tokens = [10 + g] * shared + [100 + i] * (r["prompt_len"] - shared)
            extra = None
            if r.get("remote"):
                extra = {"kv_transfer_params": {"do_remote_prefill": True}}
            elif "read_end" in r:  # a prefill instance's request: the decode side reads it
                extra = {"kv_transfer_params": {"do_remote_decode": True}}
            sp = SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True, extra_args=extra)
            self.reqs.append(
                Request(
                    request_id=f"{i:06d}",  # string order = index order (priority ties)
                    prompt_token_ids=tokens,
                    sampling_params=sp,
                    pooling_params=None,
                    arrival_time=self._entry_s(r),
                    priority=r.get("priority", 0),
                    block_hasher=hasher,
                )
            )

    def _entry_s(self, r: dict) -> float:
        """``Request.arrival_time``: the entry time (steps, or seconds after the
        alpha delay), so the priority order is (priority, entry, index)."""
        if self.scn["mode"] != "time":
            return float(r["arrival"])
        a0, a1, _ = self.scn["alpha_us"]
        return (_ns(r["arrival"] * 1e6) + _ns(a0) + _ns(a1) * r["prompt_len"]) / 1e9

    # -- one step's observations

    def _observe(self, out: Any) -> dict:
        s = self.sched
        sched = {int(k): v for k, v in out.num_scheduled_tokens.items()}
        # With the V2 model runner vLLM reports resumed requests among the new
        # ones; a request admitted before (it has been preempted) is "resumed".
        admitted = [(int(d.req_id), d.num_computed_tokens) for d in out.scheduled_new_reqs]
        cached = out.scheduled_cached_reqs
        admitted += [
            (int(rid), cached.num_computed_tokens[j])
            for j, rid in enumerate(cached.req_ids)
            if rid in cached.resumed_req_ids
        ]
        new = [[i, c] for i, c in admitted if s.requests[f"{i:06d}"].num_preemptions == 0]
        resumed = [[i, c] for i, c in admitted if s.requests[f"{i:06d}"].num_preemptions > 0]
        n_run, n_wait = s.get_request_counts()
        samples = {
            int(rid): not s.requests[rid].is_prefill_chunk for rid in out.num_scheduled_tokens
        }
        return {
            "sched": sorted(sched.items()),
            "order": [int(k) for k in out.num_scheduled_tokens],
            "new": sorted(new),
            "resumed": sorted(resumed),
            "preempted": sorted(int(r) for r in (out.preempted_req_ids or ())),
            "finished": [],
            "running": n_run,
            "waiting": n_wait,
            "free": s.kv_cache_manager.block_pool.get_num_free_blocks(),
            "_samples": samples,
        }

    def _sampled(self, out: Any, rid: str, samples: bool) -> list[int]:
        """The tokens the fake runner samples for ``rid``: none for a prefill
        chunk, else one plus the accepted drafts (``_accepted``)."""
        if not samples:
            return []
        n = 1
        if self.spec and rid in self.sched.requests:  # else finished: output ignored
            drafts = out.scheduled_spec_decode_tokens.get(rid, [])
            real = sum(1 for t in drafts if t != -1)
            if self.scn["async_scheduling"]:
                # Async: the scheduler holds -1 placeholders; the runner's
                # drafts fill them, except a request admitted in this step
                # (padded: it has no drafts from a previous step).
                admitted = {d.req_id for d in out.scheduled_new_reqs}
                admitted |= set(out.scheduled_cached_reqs.resumed_req_ids)
                real = 0 if rid in admitted else len(drafts)
            nout = self.sched.requests[rid].num_output_tokens
            n += _accepted(self.spec, self.rank[int(rid)], nout, real)
        return [100 + int(rid)] * n

    def _runner_output(
        self, out: Any, samples: dict, recv: list[int] | None = None, sent: list[int] | None = None
    ) -> Any:
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

        ids = list(out.num_scheduled_tokens)
        xfer = None
        if recv or sent:
            xfer = KVConnectorOutput(
                finished_recving={f"{i:06d}" for i in recv or ()} or None,
                finished_sending={f"{i:06d}" for i in sent or ()} or None,
            )
        return ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: j for j, r in enumerate(ids)},
            sampled_token_ids=[self._sampled(out, r, samples[int(r)]) for r in ids],
            kv_connector_output=xfer,
        )

    def _propose(self, out: Any) -> None:
        """The drafter: k drafts for every request of the step
        (``Scheduler.update_draft_token_ids`` drops those of finished
        requests and prefill chunks)."""
        from vllm.v1.outputs import DraftTokenIds

        ids = list(out.num_scheduled_tokens)
        k = self.spec["num_speculative_tokens"]
        self.sched.update_draft_token_ids(DraftTokenIds(ids, [[7] * k for _ in ids]))

    def _apply(self, out: Any, rec: dict, now_ns: int | None) -> None:
        if self.sends is not None:  # a prefill instance: the reads that ended by the step's end
            end = rec.pop("_end")
            rec["sent"] = sorted(i for i, t in self.sends.items() if t <= end)
            for i in rec["sent"]:
                del self.sends[i]
        runner = self._runner_output(out, rec.pop("_samples"), rec.get("recv"), rec.get("sent"))
        eco = self.sched.update_from_output(out, runner)
        if self.spec and not self.scn["async_scheduling"]:
            self._propose(out)  # async: the runner keeps its drafts (placeholders)
        for outs in eco.values():
            for o in outs.outputs:
                i = int(o.request_id)
                if o.new_token_ids and self.first_token[i] is None:
                    self.first_token[i] = now_ns
                if o.finish_reason is not None:
                    rec["finished"].append([i, str(o.finish_reason)])
                    self.finish[i] = now_ns
        rec["finished"].sort()
        if self.sends is not None:  # held for a read: reported after the step that ended them
            for rid in DecodeSideConnector.held:
                i = int(rid)
                read_end = round(self.scn["requests"][i]["read_end"] * 1000)
                self.sends[i] = max(end + 1, read_end)
            DecodeSideConnector.held.clear()

    def _poll(self, until: int) -> None:
        """An idle engine with blocks held for reads keeps stepping
        (``Scheduler.has_requests``): one empty step whose output reports
        the reads ended by clock ``until`` (not a step of the trace)."""
        due = sorted(i for i, t in self.sends.items() if t <= until)
        if not due:
            return
        out = self.sched.schedule()
        self.sched.update_from_output(out, self._runner_output(out, {}, None, due))
        for i in due:
            del self.sends[i]

    # -- step mode

    def run_steps(self) -> dict:
        s = self.sched
        reqs = self.scn["requests"]
        # The clock in thousandths of a step (a step that runs the model: 1000).
        due = [round(r["arrival"] * 1000) for r in reqs]
        arrivals = sorted(range(len(self.reqs)), key=lambda i: (reqs[i]["arrival"], i))
        self.first_token = [None] * len(self.reqs)
        self.finish = [None] * len(self.reqs)
        steps: list[dict] = []
        queue: deque = deque()
        loads: dict[int, int] = {}  # request -> clock its load ends (not yet reported)
        nxt = 0
        clock = 0  # steps that ran the model: an empty step takes no time
        zero = 0
        outcome = "drained"
        asyn = self.scn["async_scheduling"]
        while True:
            while nxt < len(arrivals) and due[arrivals[nxt]] <= clock:
                s.add_request(self.reqs[arrivals[nxt]])
                nxt += 1
            busy = s.has_unfinished_requests()
            if not busy and not queue:
                if nxt >= len(arrivals):
                    break
                clock = due[arrivals[nxt]]
                if self.sends:  # the engine polls while blocks wait for reads
                    self._poll(clock)
                continue
            if len(steps) >= MAX_STEPS:
                outcome = "step_limit"
                break
            if busy:
                out = s.schedule()
                rec = self._observe(out)
                rec["step"] = len(steps)
                rec["clock"] = clock // 1000
                steps.append(rec)
                if self.xfer:
                    rec["loads"] = self._start_loads(loads, clock)
                executed = out.total_num_scheduled_tokens > 0
                held = list(self.sends.values()) if self.sends else []
                if executed:
                    clock += 1000
                elif loads or held:  # the engine polls until a transfer lands or a read ends
                    later = [due[arrivals[nxt]]] if nxt < len(arrivals) else []
                    clock = max(clock, min([*loads.values(), *held, *later]))
                rec["_end"] = clock
                zero = 0 if executed or loads or held else zero + 1
                if zero >= STALL_STEPS:
                    outcome = "stalled"
                    break
                if self.xfer:
                    rec["recv"] = sorted(i for i, end in loads.items() if end <= clock)
                    for i in rec["recv"]:
                        del loads[i]
                if not asyn:
                    self._apply(out, rec, rec["step"])
                    continue
                queue.appendleft((out, rec))
                if len(queue) < 2 and (executed or s.has_requests()):
                    continue
            out, rec = queue.pop()
            self._apply(out, rec, rec["step"])
        for rec in steps:
            rec.pop("_samples", None)
            rec.pop("_end", None)
        return {"outcome": outcome, "steps": steps, "requests": self._request_results()}

    def _start_loads(self, loads: dict[int, int], clock: int) -> list[int]:
        """The loads this ``schedule()`` started (the connector's
        ``update_state_after_alloc``), each with the clock it ends at."""
        lat, per_k = self.xfer["latency"], self.xfer["per_kilotoken"]
        started = sorted((int(rid), ext) for rid, ext in DecodeSideConnector.started)
        DecodeSideConnector.started.clear()
        for i, ext in started:
            loads[i] = clock + 1000 * lat + ext * per_k
        return [i for i, _ in started]

    # -- time mode (synchronous)

    def run_time(self) -> dict:
        s = self.sched
        a0, a1, a2 = self.scn["alpha_us"]
        b0, b1, b2 = self.scn["beta_us"]
        ns = _ns
        entry = [
            ns(r["arrival"] * 1e6) + ns(a0) + ns(a1) * r["prompt_len"] for r in self.scn["requests"]
        ]
        arrivals = sorted(range(len(entry)), key=lambda i: (entry[i], i))
        horizon = ns(self.scn["horizon_s"] * 1e6)
        self.first_token = [None] * len(self.reqs)
        self.finish = [None] * len(self.reqs)
        clock = 0
        nxt = 0
        n_steps = 0
        outcome = "drained"
        queue: deque = deque()
        asyn = self.scn["async_scheduling"]
        while True:
            while nxt < len(arrivals) and entry[arrivals[nxt]] <= clock:
                s.add_request(self.reqs[arrivals[nxt]])
                nxt += 1
            busy = s.has_unfinished_requests()
            if not busy and not queue:
                if nxt >= len(arrivals):
                    break
                clock = entry[arrivals[nxt]]
                continue
            if clock >= horizon:
                outcome = "horizon"
                break
            if busy:
                before = {
                    rid: (r.num_computed_tokens, r.num_tokens + r.num_output_placeholders)
                    for rid, r in s.requests.items()
                }
                out = s.schedule()
                prefill = decode = 0
                for rid, n in out.num_scheduled_tokens.items():
                    c0, known = before[rid]
                    if n == 1 and c0 == known - 1:
                        decode += 1
                    else:
                        prefill += n
                rec = self._observe(out)
                if prefill + decode:  # an empty step runs no model
                    clock += ns(b0) + ns(b1) * prefill + ns(b2) * decode
                n_steps += 1
                if not asyn:
                    self._apply(out, rec, clock)
                    continue
                queue.appendleft((out, rec, clock))
                if len(queue) < 2 and (prefill + decode > 0 or s.has_requests()):
                    continue
            # Async: step k's output lands after step k+1 is scheduled; its
            # tokens and finishes count at the end of step k.
            out, rec, end = queue.pop()
            self._apply(out, rec, end)
        return {
            "outcome": outcome,
            "num_steps": n_steps,
            "end_ns": clock,
            "requests": self._request_results(),
        }

    def _request_results(self) -> list[dict]:
        return [
            {
                "first_token": self.first_token[i],
                "finish": self.finish[i],
                "num_output_tokens": r.num_output_tokens,
                "num_preemptions": r.num_preemptions,
            }
            for i, r in enumerate(self.reqs)
        ]


def record(scn: dict, model_dir: str) -> dict:
    """Run one scenario; returns ``{"vllm": version, "scenario": scn, ...results}``."""
    d = Driver(scn, model_dir)
    res = d.run_time() if scn["mode"] == "time" else d.run_steps()
    return {"vllm": VLLM_VERSION, "scenario": scn, **res}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path(__file__).resolve().parent.parent / "tests" / "golden"
    ap.add_argument("--out", default=str(default_out))
    ap.add_argument("--only", nargs="*", help="scenario names to record")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import vllm

    if vllm.__version__ != VLLM_VERSION:
        print(f"error: vllm {vllm.__version__} installed, {VLLM_VERSION} expected", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as model_dir:
        Path(model_dir, "config.json").write_text(json.dumps(TINY_LLAMA))
        for scn in make_scenarios():
            if args.only and scn["name"] not in args.only:
                continue
            res = record(scn, model_dir)
            path = out / f"{scn['name']}.json.gz"
            with gzip.open(path, "wt", compresslevel=9) as f:
                json.dump(res, f, separators=(",", ":"))
            n = len(res.get("steps", ())) or res.get("num_steps")
            print(f"{scn['name']}: {res['outcome']}, {n} steps, {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
