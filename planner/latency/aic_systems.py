"""Planner GPU names -> aiconfigurator-core 0.12.0 system folders
(``aiconfigurator_core/systems/<system>.yaml``), one definition for the
measured step-time tables (``planner.latency.measured``) and the measured
all-reduce times (``planner.latency.allreduce``)."""

from __future__ import annotations

# GPUs whose system has vLLM step data (query_versions.yaml; SXM parts, as
# hardware.GPUS, and the RTX PRO 6000 Server Edition, as its preset): --latency
# measured runs on these.
AIC_SYSTEMS: dict[str, str] = {
    "H100": "h100_sxm",
    "H200": "h200_sxm",
    "A100-80GB": "a100_sxm",
    "L40S": "l40s",
    "B200": "b200_sxm",
    "RTX-PRO-6000": "rtx_pro_6000_server",
}

# GPUs with vLLM all-reduce measurements: the above, the A100 40 GB on the A100
# SXM's NVLink fabric (the same NVSwitch, measured on the 80 GB part), the
# RTX PRO 6000 Server Edition (PCIe only) and GB200 (tensor-parallel 2 and 4,
# within one 4-GPU compute tray). L4 and H100 PCIe ship no vLLM measurements.
ALLREDUCE_SYSTEMS: dict[str, str] = {
    **AIC_SYSTEMS,
    "A100-40GB": "a100_sxm",
    "RTX-PRO-6000": "rtx_pro_6000_server",
    "GB200": "gb200",
}
