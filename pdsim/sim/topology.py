"""Placement of instances onto nodes and the network paths between them.

Instances are packed onto nodes in order (prefill instances first, then decode), each taking
`tp` GPUs. Per instance: egress/ingress NIC ports with one NIC's bandwidth per GPU share of the
node's NICs; per node: egress/ingress for all its NICs together (so instances sharing a node share
its NICs). Two instances in the same NVLink domain (the same node, or `nvlink_domain_gpus` GPUs over
several nodes: GB200/GB300 NVL72) talk over NVLink (per-GPU nvlink_gbps x tp) when the hardware
has it; `transfer_backend=nvlink` puts every pair on NVLink (one NVLink domain).
Bandwidths: nic_gbps and tcp_gbps are Gb/s; nvlink_gbps is GB/s (hardware config units).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdsim.config import ClusterConfig, HardwareConfig
from pdsim.sim.network import Network, Resource

BACKENDS = ("rdma", "tcp", "nvlink", "none")  # none: KV moves instantly (Simulation.send_kv, cluster.py)


@dataclass(frozen=True, slots=True)
class Placement:
    name: str  # "prefill:0"
    node: int
    tp: int
    nic_out: Resource
    nic_in: Resource
    node_out: Resource
    node_in: Resource
    nvl_out: Resource | None
    nvl_in: Resource | None


class Topology:
    """Builds the network resources for a list of (name, tp) instances and answers paths."""

    def __init__(self, network: Network, cluster: ClusterConfig, hw: HardwareConfig) -> None:
        if cluster.transfer_backend not in BACKENDS:
            raise ValueError(
                f"cluster: field 'transfer_backend' has unknown value {cluster.transfer_backend!r} (choose from {BACKENDS})"
            )
        self.network = network
        self.cluster = cluster
        self.hw = hw
        self.placements: dict[str, Placement] = {}
        self._gpu_cursor = 0
        self._nodes: dict[int, tuple[Resource, Resource]] = {}
        self._paths: dict[tuple[str, str], tuple[Resource, ...]] = {}  # answered paths (emptied by `place`)

    def _nic_bytes_per_s(self) -> float:
        gbps = self.cluster.tcp_gbps if self.cluster.transfer_backend == "tcp" else self.hw.nic_gbps
        return gbps * 1e9 / 8

    def place(self, name: str, tp: int) -> Placement:
        per_node = max(1, self.hw.gpus_per_node)
        if tp > per_node and self._gpu_cursor % per_node:
            self._gpu_cursor += per_node - self._gpu_cursor % per_node  # multi-node instances start a node
        node = self._gpu_cursor // per_node
        self._gpu_cursor += tp
        nic = self._nic_bytes_per_s()
        node_nics = max(1, self.hw.nics_per_node) * max(1, -(-tp // per_node))
        if node not in self._nodes:
            self._nodes[node] = (
                self.network.add_resource(f"node{node}:out", node_nics * nic),
                self.network.add_resource(f"node{node}:in", node_nics * nic),
            )
        nics = max(1, round(tp * self.hw.nics_per_node / per_node))
        nvl = self.hw.nvlink_gbps * 1e9 * tp
        placement = Placement(
            name=name,
            node=node,
            tp=tp,
            nic_out=self.network.add_resource(f"{name}:nic_out", nics * nic),
            nic_in=self.network.add_resource(f"{name}:nic_in", nics * nic),
            node_out=self._nodes[node][0],
            node_in=self._nodes[node][1],
            nvl_out=self.network.add_resource(f"{name}:nvl_out", nvl) if nvl > 0 else None,
            nvl_in=self.network.add_resource(f"{name}:nvl_in", nvl) if nvl > 0 else None,
        )
        self.placements[name] = placement
        self._paths.clear()
        return placement

    def path(self, src: str, dst: str) -> tuple[Resource, ...]:
        path = self._paths.get((src, dst))
        if path is None:
            path = self._paths[(src, dst)] = self._path(src, dst)
        return path

    def _path(self, src: str, dst: str) -> tuple[Resource, ...]:
        a, b = self.placements[src], self.placements[dst]
        per_node = max(1, self.hw.gpus_per_node)
        nodes_per_domain = max(1, self.hw.nvlink_domain_gpus // per_node)  # NVL72: 18 nodes of 4
        same_domain = a.node // nodes_per_domain == b.node // nodes_per_domain
        nvlink = self.cluster.transfer_backend == "nvlink" or same_domain
        if nvlink and a.nvl_out is not None and b.nvl_in is not None:
            return (a.nvl_out, b.nvl_in)
        if self.cluster.transfer_backend == "nvlink":
            raise ValueError(f"transfer_backend=nvlink but hardware {self.hw.name} has nvlink_gbps=0")
        if a.node == b.node:
            return (a.nic_out, b.nic_in)
        return (a.nic_out, a.node_out, b.node_in, b.nic_in)
