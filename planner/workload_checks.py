"""Checks that pair a workload with the configurations that run it.

They sit above both ``planner.workload`` and ``planner.config`` (stage 4), so
that neither of those imports the other: a workload knows nothing of
schedulers.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.config import SchedulerConfig
from planner.workload.arrays import Workload, WorkloadError, priorities_unread


def check_block_sizes(workload: Workload, configs: Sequence[SchedulerConfig]) -> None:
    """Raise WorkloadError (one line) when a config with prefix caching has a
    block_size that does not divide the workload's hash block size: a vLLM
    block must lie inside one trace block to take its identity."""
    hb = workload.hash_block_size
    if workload.hash_ids is None:
        return
    for c in configs:
        if c.enable_prefix_caching and hb % c.block_size:
            raise WorkloadError(
                f"--block-size {c.block_size} does not divide the trace's hash block size "
                f"{hb}: a vLLM block would span two trace blocks"
            )


def check_horizon(workload: Workload, configs: Sequence[SchedulerConfig], flag: str) -> None:
    """Raise WorkloadError (one line, naming ``flag``) when a config's horizon
    ends at or before the workload's first arrival: nothing would run, and no
    rate, latency or overload could be judged."""
    if workload.num_requests == 0:
        return
    first = float(workload.arrival_s.min())
    for c in configs:
        if c.horizon_s <= first:
            raise WorkloadError(
                f"{flag} {c.horizon_s:g} s ends before the first request arrives "
                f"({first:g} s): nothing would be simulated; give a longer horizon"
            )


def unused_field_warnings(wl: Workload, configs: Sequence[SchedulerConfig]) -> list[str]:
    """One-line warnings (without the ``plan: warning:`` prefix) for workload
    fields that no config in ``configs`` uses, so that they are not silent no-ops.

    Priorities matter only under policy ``priority`` or victim ``priority``
    (``SchedulerConfig.victim_rule``), and those only with distinct
    priorities (``priorities_unread``); shared prefixes only with prefix
    caching.
    """
    out = []
    if priorities_unread(wl) and any(
        c.policy == "priority" or c.victim_rule == "priority" for c in configs
    ):
        out.append(
            f"{wl.name}: policy or victim priority without distinct request priorities orders "
            "by arrival, as fcfs does (the same run unless arrivals tie)"
        )
    if wl.priority is not None and not any(
        c.policy == "priority" or c.victim_rule == "priority" for c in configs
    ):
        out.append(
            f"{wl.name}: request priorities have no effect under the fcfs policy "
            "(set policy priority, or victim priority)"
        )
    shared = wl.prefix_group is not None or wl.hash_ids is not None
    if shared and not any(c.enable_prefix_caching for c in configs):
        out.append(
            "shared prefixes change nothing without prefix caching "
            "(--enable-prefix-caching; in a spec, enable_prefix_caching)"
        )
    return out
