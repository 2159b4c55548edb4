"""The disaggregated decode side's inputs: ``KVTransfer`` and its limits."""

from __future__ import annotations

import dataclasses

import pytest

from planner.config import SchedulerConfig
from planner.kv_transfer import KVTransfer


def test_duration_is_latency_plus_tokens_at_the_link_rate():
    x = KVTransfer.from_link(131_072, bandwidth_gbps=50.0, latency_us=20.0)
    # Llama-3.1-8B: 128 KiB per token over 50 GB/s is 2,621.44 ns per token.
    assert x.latency_ns == 20_000
    assert x.ps_per_token == 2_621_440
    assert x.duration_ns(1_000) == 20_000 + 2_621_440
    two = KVTransfer.from_link(131_072, bandwidth_gbps=50.0, latency_us=20.0, gpus=2)
    assert two.duration_ns(1_000) == 20_000 + 1_310_720


@pytest.mark.parametrize(
    "kw,flag",
    [
        ({"bandwidth_gbps": 0.0}, "--kv-transfer-bandwidth"),
        ({"bandwidth_gbps": -3.0}, "--kv-transfer-bandwidth"),
        ({"bandwidth_gbps": float("nan")}, "--kv-transfer-bandwidth"),
        ({"latency_us": -1.0}, "--kv-transfer-latency"),
        ({"latency_us": float("inf")}, "--kv-transfer-latency"),
    ],
)
def test_bad_link_is_one_line(kw, flag):
    with pytest.raises(ValueError, match=flag) as e:
        KVTransfer.from_link(131_072, **kw)
    assert "\n" not in str(e.value)


def test_bad_fields_are_refused():
    for bad in (-1, 1.5, True, 2**41):
        with pytest.raises(ValueError):
            KVTransfer(latency_ns=bad)
        with pytest.raises(ValueError):
            KVTransfer(ps_per_token=bad)


@pytest.mark.parametrize(
    "kw",
    [
        {"preemption_mode": "swap", "cpu_swap_blocks": 10},
        {"sliding_window": 64, "full_attention_groups": 0, "sliding_window_groups": 1},
        {"max_concurrency": 4},
        {"admission": "projected_oracle"},
    ],
)
def test_decode_side_refuses_what_it_does_not_simulate(kw):
    base = SchedulerConfig(async_scheduling=False)
    with pytest.raises(ValueError, match="disaggregated decode side") as e:
        dataclasses.replace(base, kv_transfer=KVTransfer(1_000, 1_000), **kw)
    assert "\n" not in str(e.value)
