"""Placement of instances onto nodes and the network paths between them.

Instances are packed onto nodes in order (prefill instances first, then decode), each taking
`tp` GPUs. Per instance: egress/ingress NIC ports with one NIC's bandwidth per GPU share of the
node's NICs; per node: egress/ingress for all its NICs together (so instances sharing a node share
its NICs). Two instances in the same NVLink domain (the same node, or `nvlink_domain_gpus` GPUs over
several nodes: GB200/GB300 NVL72) talk over NVLink (per-GPU nvlink_gbps x tp) when the hardware
has it; `transfer_backend=nvlink` puts every pair on NVLink (one NVLink domain).
An attention-DP instance's KV lives on its ranks' GPUs, so one request's transfer leaves (or
enters) through its rank's share of the links, not the whole instance's: per rank, ports of the
rank's GPUs' NICs and NVLink, on the path besides the instance's (the rank: path's src_rank /
dst_rank; instances without DP have none).
Bandwidths: nic_gbps and tcp_gbps are Gb/s; nvlink_gbps is GB/s (hardware config units).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdsim.config import ClusterConfig, HardwareConfig
from pdsim.sim.network import Network, Resource

BACKENDS = ("rdma", "tcp", "nvlink", "none")  # none: KV moves instantly (Simulation.send_kv, cluster.py)


@dataclass(frozen=True, slots=True)
class Ports:
    """The NIC ports and NVLink of a group of GPUs: an instance's, or one attention-DP rank's."""

    nic_out: Resource
    nic_in: Resource
    nvl_out: Resource | None
    nvl_in: Resource | None


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
    ranks: tuple[Ports, ...] = ()  # per attention-DP rank (none without DP)


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
        self._paths: dict[tuple[str, str, int, int], tuple[Resource, ...]] = {}  # answered paths (emptied by `place`)

    def _nic_bytes_per_s(self) -> float:
        gbps = self.cluster.tcp_gbps if self.cluster.transfer_backend == "tcp" else self.hw.nic_gbps
        return gbps * 1e9 / 8

    def place(self, name: str, tp: int, dp: int = 1) -> Placement:
        """Place an instance of `tp` GPUs (all its DP ranks') with `dp` attention-DP ranks."""
        if dp < 1 or tp % dp:
            raise ValueError(f"topology: instance {name} of {tp} GPUs cannot hold {dp} DP ranks")
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
        own = self._ports(name, tp)
        placement = Placement(
            name=name,
            node=node,
            tp=tp,
            nic_out=own.nic_out,
            nic_in=own.nic_in,
            node_out=self._nodes[node][0],
            node_in=self._nodes[node][1],
            nvl_out=own.nvl_out,
            nvl_in=own.nvl_in,
            ranks=tuple(self._ports(f"{name}:dp{r}", tp // dp) for r in range(dp)) if dp > 1 else (),
        )
        self.placements[name] = placement
        self._paths.clear()
        return placement

    def _nics(self, gpus: int) -> int:
        """NIC ports of `gpus` GPUs: their share of the node's NICs, at least one."""
        return max(1, round(gpus * self.hw.nics_per_node / max(1, self.hw.gpus_per_node)))

    def _ports(self, name: str, gpus: int) -> Ports:
        """New links for `gpus` GPUs named `name`: their NICs' share out and in, their NVLink
        out and in (none without NVLink), created in that order."""
        nic = self._nics(gpus) * self._nic_bytes_per_s()
        nvl = self.hw.nvlink_gbps * 1e9 * gpus
        add = self.network.add_resource
        return Ports(add(f"{name}:nic_out", nic), add(f"{name}:nic_in", nic),
                     add(f"{name}:nvl_out", nvl) if nvl > 0 else None,
                     add(f"{name}:nvl_in", nvl) if nvl > 0 else None)

    def path(self, src: str, dst: str, src_rank: int = 0, dst_rank: int = 0) -> tuple[Resource, ...]:
        """The links a flow from `src` (its DP rank `src_rank`) to `dst` (rank `dst_rank`) crosses."""
        key = (src, dst, src_rank, dst_rank)
        path = self._paths.get(key)
        if path is None:
            base = self._path(src, dst)
            path = self._paths[key] = base + self._rank_links(src, dst, base, src_rank, dst_rank)
        return path

    def _rank_links(self, src: str, dst: str, base: tuple[Resource, ...], src_rank: int,
                    dst_rank: int) -> tuple[Resource, ...]:
        """The ports of the ranks at either end (instances with DP ranks only), on the medium of
        the instances' path `base`."""
        a, b = self.placements[src], self.placements[dst]
        nvlink = base[0] is a.nvl_out
        links: list[Resource | None] = []
        if a.ranks:
            out = a.ranks[src_rank % len(a.ranks)]
            links.append(out.nvl_out if nvlink else out.nic_out)
        if b.ranks:
            into = b.ranks[dst_rank % len(b.ranks)]
            links.append(into.nvl_in if nvlink else into.nic_in)
        return tuple(link for link in links if link is not None)

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
