"""Placement and paths: a DP rank's transfer leaves through its own GPUs' links (hand-computed)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from simkit import TINY_HW, make_config, make_requests

from pdsim.config import PerfConfig
from pdsim.perf import catalog
from pdsim.sim import simulate
from pdsim.sim.events import SimEnvironment
from pdsim.sim.network import Network
from pdsim.sim.topology import Topology

# 8 GPUs and 8 NICs of 1e9 B/s a node, NVLink 10e9 B/s a GPU
HGX = replace(TINY_HW, gpus_per_node=8, nics_per_node=8, nvlink_gbps=10.0)


def _deliveries(flows: list[tuple[str, str, int, int, float]], prefill_dp: int, decode_dp: int,
                hw=HGX) -> list[float]:
    """Place prefill:0 (8 GPUs, prefill_dp ranks) and decode:0 (8 GPUs, decode_dp ranks) on two
    nodes, start the flows (src, dst, src_rank, dst_rank, bytes) at 0; their delivery times."""
    env = SimEnvironment()
    net = Network(env)
    topo = Topology(net, make_config().cluster, hw)
    topo.place("prefill:0", 8, prefill_dp)
    topo.place("decode:0", 8, decode_dp)
    done: list[float] = [0.0] * len(flows)
    for i, (src, dst, src_rank, dst_rank, nbytes) in enumerate(flows):
        net.start_flow(topo.path(src, dst, src_rank, dst_rank), nbytes, 0.0,
                       lambda i=i: done.__setitem__(i, round(env.now, 12)))
    env.run()
    return done


def test_a_flow_between_tp_instances_uses_every_nic() -> None:
    # 8e9 B over the instances' 8 NICs (8e9 B/s): 1 s
    assert _deliveries([("prefill:0", "decode:0", 0, 0, 8e9)], 1, 1) == [1.0]


def test_a_dp_rank_sends_through_its_own_nic() -> None:
    # one GPU a rank: 8e9 B leave through rank 3's single 1e9 B/s NIC, into the TP8 decode's 8
    assert _deliveries([("prefill:0", "decode:0", 3, 0, 8e9)], 8, 1) == [8.0]


def test_two_ranks_send_side_by_side_and_one_rank_shares_its_nic() -> None:
    # ranks 0 and 1 each at 1e9 B/s; rank 0's second flow halves its share: 1e9 B at 5e8 B/s
    done = _deliveries([("prefill:0", "decode:0", 0, 0, 1e9), ("prefill:0", "decode:0", 1, 0, 1e9),
                        ("prefill:0", "decode:0", 0, 0, 1e9)], 8, 1)
    assert done == [2.0, 1.0, 2.0]


def test_a_dp_decode_rank_receives_through_its_own_nic() -> None:
    # decode DP4 (2 GPUs, 2 NICs a rank): 4e9 B into rank 1 at 2e9 B/s
    assert _deliveries([("prefill:0", "decode:0", 0, 1, 4e9)], 1, 4) == [2.0]


def test_inside_one_nvlink_domain_the_rank_has_its_gpus_nvlink() -> None:
    # one 16-GPU NVLink domain: rank 2 of the DP8 prefill sends over its GPU's 1e10 B/s NVLink
    nvl16 = replace(HGX, nvlink_domain_gpus=16)
    assert _deliveries([("prefill:0", "decode:0", 2, 0, 1e10)], 8, 1, nvl16) == [1.0]


def test_a_path_between_dp_instances_names_both_ranks_ports() -> None:
    # two nodes: the instances' NICs and nodes, then rank 3's NIC out and rank 1's NIC in; inside
    # one NVLink domain the instances' NVLink, then the two ranks' NVLink ports
    for hw, names in ((HGX, ["prefill:0:nic_out", "node0:out", "node1:in", "decode:0:nic_in",
                             "prefill:0:dp3:nic_out", "decode:0:dp1:nic_in"]),
                      (replace(HGX, nvlink_domain_gpus=16), ["prefill:0:nvl_out", "decode:0:nvl_in",
                                                             "prefill:0:dp3:nvl_out", "decode:0:dp1:nvl_in"])):
        topo = Topology(Network(SimEnvironment()), make_config().cluster, hw)
        topo.place("prefill:0", 8, 8)
        topo.place("decode:0", 8, 2)
        assert [link.name for link in topo.path("prefill:0", "decode:0", 3, 1)] == names
        assert topo.placements["prefill:0"].ranks[3].nic_out.name == "prefill:0:dp3:nic_out"


def test_an_instance_whose_gpus_do_not_split_into_its_ranks_is_refused() -> None:
    topo = Topology(Network(SimEnvironment()), make_config().cluster, HGX)
    with pytest.raises(ValueError, match="instance prefill:0 of 8 GPUs cannot hold 3 DP ranks"):
        topo.place("prefill:0", 8, 3)


def test_a_simulated_dp_prefill_sends_a_requests_kv_through_its_ranks_nic() -> None:
    """DeepSeek-V3 on H100 (8 x 400 Gb/s NICs a node): a DP8 prefill (one GPU a rank) sends one
    1,000-token prompt to a TP8 decode, which holds MLA's latent whole on each of its 8 ranks:
    8 x 1,000 x 61 layers x 1,152 bytes (bf16 latent 512 + rope 64) leave at one NIC, 5e10 B/s."""
    cfg = make_config(cluster=dict(prefill_tp=1, prefill_dp=8, prefill_moe_ep=8, decode_tp=8, kv_capacity_tokens=100_000,
                                   page_size_tokens=16, max_prefill_tokens=8192))
    cfg = replace(cfg, model=catalog.load_model("deepseek_v3"), hardware=catalog.load_hardware("h100"),
                  perf=PerfConfig(kind="measured", engine="sglang", overhead_s=0.0))
    row = simulate(cfg, make_requests([(0.0, 1000, 2)])).trace.iloc[0]
    assert row.transfer_bytes == 8 * 1008 * 61 * 1152  # 63 pages of 16 tokens
    assert row.transfer_end_s - row.transfer_start_s == pytest.approx(row.transfer_bytes / 5e10, rel=1e-6)
