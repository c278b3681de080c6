"""The expected all-reduce busbw from the hardware, checked against the NCCL maintainers' published
figures and against busbw users measured and posted (each cited), and the verdicts on the two
fixture nodes (the H100 VM and the seed's InfiniBand node)."""

from __future__ import annotations

import pytest
from helpers import FIXTURES

from ansible_collections.provision.cluster.plugins.module_utils.allreduce import bandwidth as B
from ansible_collections.provision.cluster.plugins.module_utils.gpu import fabric_health as F
from ansible_collections.provision.cluster.plugins.module_utils.gpu import gpu_health as H

from unit.netenv_trees import seed_ib_tree

H100_LINK = 26.562   # nvidia-smi nvlink -s per link on H100 (bottlerocket-os/bottlerocket#4418)
A100_LINK = 25.0     # NVLink3: 12 links x 25 GB/s (sjeaugey, NVIDIA/nccl-tests#149)


def test_per_nic_figures_match_the_maintainers():
    assert B.nic_busbw(100) == pytest.approx(12.0)      # nccl-tests#119, #29 ("12.2 ... as good as you can get")
    assert B.nic_busbw(200) == pytest.approx(24.0)      # nccl-tests#119
    assert 46 <= B.nic_busbw(400) <= 48                 # nccl-tests#290 "46-48GB/s per NIC"


def test_intra_node_figures_match_the_maintainers():
    h100 = B.node_capability(8, 18 * H100_LINK, H100_LINK, nvswitch=True)
    assert h100["intra"]["busbw"] == pytest.approx(480, rel=0.02)   # nccl-tests#212 "~480GB/s", #290 476
    assert "NVLink SHARP" in h100["intra"]["basis"]
    a100 = B.node_capability(8, 12 * A100_LINK, A100_LINK, nvswitch=True)
    assert a100["intra"]["busbw"] == pytest.approx(230, rel=0.01)   # nccl-tests#149 "should reach 230 GB/s"
    assert "SHARP" not in a100["intra"]["basis"]
    pcie = B.node_capability(8, pcie=(4, 16))
    assert pcie["intra"]["busbw"] == 24.0                           # nccl#1206: Gen4 x16 = 24 GB/s
    assert B.pcie_busbw(5, 16) == 48.0 and B.pcie_busbw(3, 16) == 12.0 and B.pcie_busbw(None, 16) is None
    # NVLink that does not join every pair (no NVSwitch, 4 GPUs): rings cross PCIe
    part = B.node_capability(4, 12 * A100_LINK, A100_LINK, nvswitch=False, pcie=(4, 16))
    assert part["intra"]["busbw"] == 24.0 and "rings cross PCIe" in part["intra"]["basis"]


def test_nvlink_generation_from_link_speed():
    assert [B.nvlink_generation(s) for s in (53.125, 26.562, 25.781, 25.0, 20.0, None)] == [5, 4, 2, 3, 1, None]


def test_multi_node_is_bound_by_the_slowest_path():
    # DGX-A100: 8 GPUs, 8x 200G InfiniBand -> "we measure 192GB/s AllReduce BusBW" (AddyLaddy, quoted in nccl#1576)
    dgx = B.node_capability(8, 12 * A100_LINK, A100_LINK, nvswitch=True, nics=[200] * 8)
    exp = B.expected_busbw([dgx, dgx])
    assert exp["busbw"] == pytest.approx(192.0) and exp["bound"] == "inter-node"
    # one slow node sets the figure: a node that lost a NIC
    lost = B.node_capability(8, 12 * A100_LINK, A100_LINK, nvswitch=True, nics=[200] * 7)
    assert B.expected_busbw([dgx, lost, dgx])["busbw"] == pytest.approx(168.0)
    # no RDMA and no interface speed: no expectation, with the reason
    none = B.expected_busbw([B.node_capability(1, eth_gbps=-1), B.node_capability(1, eth_gbps=-1)])
    assert none["busbw"] is None and "reports no speed" in none["reason"]
    # TCP sockets on 100 GbE
    tcp = B.node_capability(1, eth_gbps=100)
    assert B.expected_busbw([tcp, tcp])["busbw"] == pytest.approx(7.5)


@pytest.mark.parametrize("measured,nics,gpus,status,source", [
    (95.74, [200] * 4, 8, "pass", "nccl-tests#119: 4x 200G, large sizes ~96 GB/s, 'perfect' per sjeaugey"),
    (9.84, [200] * 4, 8, "fail", "nccl-tests#112: 4x 200G RoCE, 9.84 GB/s with ACS enabled"),
    (48.0, [200] * 2, 8, "pass", "nccl#949: 48 GB/s on 2 nodes with 2x HDR after fixing ACS"),
    (216.5, [400] * 8, 8, "fail", "nccl#2409: 2x 8 H100, 8x 400G RoCE, 216.5 GB/s all-reduce busbw (~27 per rail)"),
])
def test_judge_on_busbw_users_measured(measured, nics, gpus, status, source):
    node = B.node_capability(gpus, nics=nics)
    verdict = B.judge(measured, B.expected_busbw([node, node]))
    assert verdict["status"] == status, source
    assert verdict["min_fraction"] == B.DEFAULT_MIN_FRACTION


def test_judge_thresholds_and_override():
    exp = {"busbw": 100.0, "basis": "test figure", "reason": None}
    assert B.judge(80.0, exp)["status"] == "pass"
    assert B.judge(79.9, exp)["status"] == "fail" and "below 80%" in B.judge(79.9, exp)["detail"]
    assert B.judge(79.9, exp, min_fraction=0.7)["status"] == "pass"
    assert "exceed" in B.judge(125.0, exp)["detail"]              # 2-node tree: above the ring model
    assert B.judge(None, exp)["status"] == "skip"
    assert B.judge(10.0, {"busbw": None, "reason": "why"})["detail"] == "no expected busbw: why"
    assert B.judge(476.0, B.expected_busbw([B.node_capability(8, 18 * H100_LINK, H100_LINK, True)]))["status"] == "pass"


# ---------------------------------------------------------------- the two fixture nodes

def h100_capability():
    smi = H.parse_smi_health((FIXTURES / "h100-node" / "nvidia-smi-q.xml").read_text())
    attrs = (FIXTURES / "h100-node" / "net" / "sys-class-net-attrs.txt").read_text()
    speed = int([kv.split("=")[1] for line in attrs.splitlines() if line.startswith("eth0 ")
                 for kv in line.split() if kv.startswith("speed=")][0])
    facts = {"gpus": smi["gpus"], "nvlink": {}, "pci": {"gpus": ["0000:00:06.0"], "nvswitches": []}}
    return B.capability_from_facts(facts, {"ports": []}, eth_gbps=speed), speed


def test_verdict_on_the_h100_fixture_node():
    cap, speed = h100_capability()
    assert speed == -1 and cap["gpus"] == 1 and cap["intra"] is None and cap["inter"] is None
    one = B.expected_busbw([cap])
    assert one["busbw"] is None and "one GPU on one node" in one["reason"]
    two = B.expected_busbw([cap, cap])
    assert two["busbw"] is None and "reports no speed" in two["reason"]
    assert B.judge(None, two)["status"] == "skip"
    # with the link speed given by hand (eth0 is virtio, speed -1), TCP sockets at 100 Gb/s
    smi = H.parse_smi_health((FIXTURES / "h100-node" / "nvidia-smi-q.xml").read_text())
    given = B.capability_from_facts({"gpus": smi["gpus"]}, None, eth_gbps=100)
    assert B.expected_busbw([given, given])["busbw"] == pytest.approx(7.5)


def test_verdict_on_the_seed_infiniband_node(tmp_path):
    ports = F.read_ports(str(seed_ib_tree(tmp_path)))
    # as the seed ran: 2 A800 nodes, one GPU requested per node -> one HDR NIC per GPU
    one_gpu = B.capability_from_facts({"gpus": [{}]}, {"ports": ports})
    exp = B.expected_busbw([one_gpu, one_gpu])
    assert exp["busbw"] == pytest.approx(24.0) and "200+200" in exp["basis"] and "1 used" in exp["basis"]
    # the RoCE port (mlx5_0, 100G) is not counted: NCCL uses the InfiniBand ports
    assert "100" not in exp["basis"]
    # all 8 GPUs of each node: both HDR ports -> 48 GB/s (nccl#949 measured 48 on 2x HDR)
    eight = B.capability_from_facts({"gpus": [{}] * 8}, {"ports": ports})
    assert B.expected_busbw([eight, eight])["busbw"] == pytest.approx(48.0)
    assert B.judge(38.5, B.expected_busbw([eight, eight]))["status"] == "pass"    # 80.2%
    assert B.judge(24.0, B.expected_busbw([eight, eight]))["status"] == "fail"    # one port's worth
