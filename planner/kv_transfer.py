"""The KV transfer of disaggregated prefill/decode, as the decode side sees it.

vLLM serves prefill and decode on separate instances through a KV connector
(``--kv-transfer-config``; NixlConnector in llm-d and NVIDIA Dynamo). A decode
instance receives a request whose prompt a prefill instance has already run
(``kv_transfer_params.do_remote_prefill``) and pulls the prompt's KV from it.
What vLLM 0.33 does there (``vllm/v1/core/sched/scheduler.py``), and the kernel
and the reference engine mirror:

- ``NixlConnectorScheduler.get_num_new_matched_tokens``
  (``distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py``): every
  prompt token past the local prefix-cache hit is external and loads
  asynchronously; the flag is cleared once the load is allocated
  (``update_state_after_alloc``), so a request preempted later recomputes
  locally.
- ``Scheduler.schedule``'s ``load_kv_async`` path: ``allocate_slots`` takes the
  prompt's blocks with no token to compute (``num_external_computed_tokens``,
  ``delay_cache_blocks``), leaving free the blocks that in-flight prefills
  still need to finish (``reserved_blocks = _inflight_prefill_reserved_blocks()``);
  the request waits in ``WAITING_FOR_REMOTE_KVS`` in ``kv_holding_waiting``,
  a queue drained before ``waiting``, and does not count against
  ``max_num_seqs`` until it runs.
- ``_update_from_kv_xfer_finished``: a step's output lists the loads that
  landed (``finished_recving``); at the next ``schedule()``
  ``_update_waiting_for_remote_kv`` caches the loaded blocks and sets
  ``num_computed_tokens`` to ``num_tokens - 1``, and the request is scheduled
  as a new one with its last prompt token to compute (its first output token).
- Async scheduling: a KV consumer with two batches in flight sets
  ``Scheduler.defer_block_free``. ``schedule()``'s running phase does not
  preempt a request scheduled in the step in flight
  (``_request_blocks_can_be_freed``) and stops there; a step's output, with
  the loads it reports, is applied after the next ``schedule()``.
- Speculative decoding (``--speculative-config``): a load also leaves free one
  speculative step's blocks, cdiv(1 + k + lookahead, block_size)
  (``_spec_decode_step_blocks``), and the in-flight prefills' reservations
  count that step past each sequence (``_request_remaining_blocks``); a load
  allocates no drafter lookahead (``limit_lookahead_tokens``); a loaded
  request's one remaining token is padded to 1 + k (``pad_spec_decode``);
  under async scheduling a request that ends while the step in flight holds
  it returns its blocks when that step lands (``_free_request_blocks``,
  ``_drain_deferred_frees``).

The transfer's time (the planner's model): a load started by a step lands
``latency + external tokens x bytes per token / bandwidth`` after that step
starts (the worker starts it as it runs the step). The output of the first
step that ends at or after that time reports it; a step that schedules no
tokens while loads are in flight runs no model and lasts until the next load
lands or the next request arrives, whichever is first (vLLM's engine polls
with empty steps). ``KVTransfer.from_link`` derives the per-token time from
the model's KV bytes and the link's bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Defaults of the link (``KVTransfer.from_link``): one 400 Gb/s NIC per GPU
# (NVIDIA ConnectX-7, the NIC of DGX H100 and HGX H100 systems: 8 per node,
# one per GPU), i.e. 50 GB/s each way; and the latency of one RDMA read of
# a request's blocks, taken as 20 us (NIXL's UCX transport over InfiniBand
# NDR: a few us per verb, plus the notification round trip). Both are
# stated defaults, not measurements; --kv-transfer-bandwidth and
# --kv-transfer-latency override them.
DEFAULT_BANDWIDTH_GBPS = 50.0
DEFAULT_LATENCY_US = 20.0
MAX_PS_PER_TOKEN = 2**40  # KVTransfer's field bound: about 1.1 s per token


@dataclass(frozen=True)
class KVTransfer:
    """A decode instance's KV link, in the kernel's integer units.

    Attributes:
        latency_ns: fixed time of one load, ns (>= 0).
        ps_per_token: transfer time per external token, picoseconds (>= 0).

    Raises:
        ValueError: a negative or non-integer field (one line).
    """

    latency_ns: int = 0
    ps_per_token: int = 0

    def __post_init__(self) -> None:
        for name in ("latency_ns", "ps_per_token"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v >= 2**40:
                raise ValueError(f"kv transfer {name} must be an integer in [0, 2^40), got {v!r}")

    def as_text(self) -> str:
        """One line for tables and reports: latency and per-token time."""
        return f"latency {self.latency_ns} ns, {self.ps_per_token} ps/token"

    def duration_ns(self, tokens: int | np.ndarray) -> int | np.ndarray:
        """Time to load ``tokens`` external tokens, ns (integer: the kernel's
        rule); an int64 array of token counts gives an array of times."""
        return self.latency_ns + tokens * self.ps_per_token // 1000

    @classmethod
    def from_link(
        cls,
        kv_bytes_per_token: float,
        bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS,
        latency_us: float = DEFAULT_LATENCY_US,
        gpus: int = 1,
    ) -> KVTransfer:
        """The link of ``gpus`` GPUs pulling in parallel, each over its own NIC
        of ``bandwidth_gbps`` GB/s (the decode instance's tensor-parallel
        ranks each pull their own shard of the KV), for a model whose KV takes
        ``kv_bytes_per_token`` bytes per token over all layers.

        Raises:
            ValueError: bandwidth <= 0, latency < 0, bytes <= 0 or gpus < 1 (one line).
        """
        if not (bandwidth_gbps > 0 and math.isfinite(bandwidth_gbps)):
            raise ValueError(f"--kv-transfer-bandwidth must be > 0 GB/s, got {bandwidth_gbps}")
        if not (latency_us >= 0 and math.isfinite(latency_us)):
            raise ValueError(f"--kv-transfer-latency must be >= 0 us, got {latency_us}")
        if not kv_bytes_per_token > 0:
            raise ValueError(f"KV bytes per token must be > 0, got {kv_bytes_per_token}")
        if gpus < 1:
            raise ValueError(f"gpus must be >= 1, got {gpus}")
        # bytes / (GB/s) = ns; x 1000 = ps
        ps = kv_bytes_per_token / (bandwidth_gbps * gpus) * 1000.0
        if ps >= MAX_PS_PER_TOKEN:
            raise ValueError(
                f"--kv-transfer-bandwidth {bandwidth_gbps:g} GB/s is too slow to simulate: "
                f"{kv_bytes_per_token:,.0f} bytes per token would take {ps / 1e12:.3g} s each "
                f"(at most {MAX_PS_PER_TOKEN / 1e12:.3g} s)"
            )
        if latency_us * 1000 >= MAX_PS_PER_TOKEN:
            raise ValueError(f"--kv-transfer-latency {latency_us:g} us is too long to simulate")
        return cls(int(round(latency_us * 1000)), int(math.ceil(ps)))
