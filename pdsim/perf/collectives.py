"""Collectives past what the NCCL tables measured: more GPUs than a table's largest count, and
GPUs that span more than one NVLink domain (the NIC then carries the bytes that leave it).

The operator tables (optables.py) time NCCL's collectives inside one node; beyond_table_s adds
what a wider group costs on top (the extra latency steps of extra_steps and the bytes at the
slowest link), keeping the measured latency. dp_attention.py (the MoE exchange of attention-DP
ranks), measured.py (a TP all-reduce wider than the table) and deepep.py (dispatch past the
NVLink domain) read it.
"""

from __future__ import annotations

import math

from pdsim.config import HardwareConfig

RING_HOP_S = 5e-6  # one more step of a ring collective (a NIC or NVLink hop, launch included)


def beyond_table_s(hw: HardwareConfig, measured_gpus: int, gpus: int, message_bytes: float, passes: int) -> float:
    """What a collective over `gpus` GPUs costs beyond the same over the `measured_gpus` a table
    has (s): the extra latency steps (extra_steps), and the bytes each GPU moves (passes x
    (g-1)/g x message: all-gather / reduce-scatter 1 pass, all-reduce 2) at the slowest link
    instead of NVLink. Once the GPUs span more than one NVLink domain (hardware.nvlink_domain_gpus,
    else a node) that link is a NIC: nic_gbps x nics_per_node shared by the node's GPUs. The
    measured time keeps its latency; only the difference is added."""
    if gpus <= measured_gpus:
        return 0.0
    domain = nvlink_domain_gpus(hw)
    nvlink = (hw.nvlink_gbps or hw.pcie_gbps) * 1e9
    nic = nic_bytes_per_s_per_gpu(hw)
    link = nvlink if gpus <= domain or nic <= 0 else min(nic, nvlink)
    moved = passes * message_bytes
    extra_bytes_s = moved * (gpus - 1) / gpus / link - moved * (measured_gpus - 1) / measured_gpus / nvlink
    return extra_steps(measured_gpus, gpus, domain, passes) * RING_HOP_S + max(extra_bytes_s, 0.0)


def nvlink_domain_gpus(hw: HardwareConfig) -> int:
    """GPUs one NVLink domain joins (hardware.nvlink_domain_gpus, else a node)."""
    return hw.nvlink_domain_gpus or hw.gpus_per_node


def nic_bytes_per_s_per_gpu(hw: HardwareConfig) -> float:
    """A GPU's share of its node's NICs (bytes/s): nic_gbps x nics_per_node over the node's GPUs."""
    return hw.nic_gbps * hw.nics_per_node / hw.gpus_per_node / 8 * 1e9


def extra_steps(measured_gpus: int, gpus: int, domain_gpus: int, passes: int) -> int:
    """Latency steps a collective over `gpus` GPUs takes beyond one over `measured_gpus`.
    Inside one NVLink domain none: its NVSwitches reduce and multicast in the switch (NCCL's
    NVLS algorithms), so the latency does not grow with the GPUs (only the bytes term of
    beyond_table_s does). Across domains a ring (all-gather, reduce-scatter) takes one step per
    GPU past the domain; an all-reduce runs NCCL's trees between the domains (NCCL 2.4's double
    binary trees: latency logarithmic in the nodes): up and down ceil(log2(domains)) levels."""
    if gpus <= domain_gpus:
        return 0
    if passes < 2:
        return gpus - max(measured_gpus, domain_gpus)
    return 2 * math.ceil(math.log2(-(-gpus // domain_gpus)))
