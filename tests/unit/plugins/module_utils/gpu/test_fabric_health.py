"""Fabric health on real captures laid out as sysfs trees (the seed's ibstatus, ibstat outputs users
pasted; see tests/fixtures/health/README.md): port state, rate against the port's own maximum,
error counters growing, MTU, GPUDirect RDMA, ACS, container access, memlock, the cluster-level
link-layer and rate comparisons, and the fabric_health_info module in-process."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import helpers
from helpers import REPO
from unit.netenv_trees import seed_ib_tree

from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C
from ansible_collections.provision.cluster.plugins.module_utils.gpu import fabric_health as F
from ansible_collections.provision.cluster.plugins.module_utils.common import node_facts as NF

HEALTH = REPO / "tests" / "fixtures" / "health"
RUNTIME = REPO / "tests" / "fixtures" / "runtime"

STATE = {"Active": "4: ACTIVE", "Down": "1: DOWN", "Initializing": "2: INIT", "Armed": "3: ARMED"}
PHYS = {"LinkUp": "5: LinkUp", "Polling": "2: Polling", "Disabled": "3: Disabled", "Sleep": "1: Sleep"}


def ibstat_tree(root: Path, text: str) -> Path:
    """/sys/class/infiniband from an `ibstat` capture: State/Physical state in the kernel's numbered
    form, `Rate: 200` as `200 Gb/sec` (ibstat drops the width/speed suffix), CA type as hca_type."""
    sys_root = root / "sys"
    dev = port = None
    fields: dict = {}

    def flush():
        if dev and port and fields:
            pdir = sys_root / "class" / "infiniband" / dev / "ports" / port
            pdir.mkdir(parents=True, exist_ok=True)
            (pdir / "state").write_text(STATE[fields["State"]] + "\n")
            (pdir / "phys_state").write_text(PHYS[fields["Physical state"]] + "\n")
            if "Rate" in fields:
                (pdir / "rate").write_text("%s Gb/sec\n" % fields["Rate"])
            if "Link layer" in fields:
                (pdir / "link_layer").write_text(fields["Link layer"] + "\n")

    for line in text.splitlines():
        m = re.match(r"^CA '(\S+)'", line)
        if m:
            flush()
            dev, port, fields = m.group(1), None, {}
            (sys_root / "class" / "infiniband" / dev).mkdir(parents=True, exist_ok=True)
            continue
        m = re.match(r"^\s+Port (\d+):", line)
        if m:
            flush()
            port, fields = m.group(1), {}
            continue
        m = re.match(r"^\s+([A-Za-z ]+):\s*(.*)$", line)
        if m and dev:
            key, value = m.group(1).strip(), m.group(2).strip()
            if key == "CA type" and port is None:
                (sys_root / "class" / "infiniband" / dev / "hca_type").write_text(value + "\n")
            elif port:
                fields[key] = value
    flush()
    return sys_root


def ports_of(sys_root):
    return F.read_ports(str(sys_root))


def by_dev(records):
    return {r["check"]: r for r in records}


# ---------------------------------------------------------------- reading

def test_seed_ports_read_from_sysfs(tmp_path):
    ports = ports_of(seed_ib_tree(tmp_path))
    summary = [(p["device"], p["link_layer"], p["state"], p["phys_state"], p["gbps"], p["width"], p["speed"])
               for p in ports]
    assert summary == [("mlx5_0", "Ethernet", "ACTIVE", "LinkUp", 100.0, 4, "EDR"),
                       ("mlx5_1", "InfiniBand", "ACTIVE", "LinkUp", 200.0, 4, "HDR"),
                       ("mlx5_2", "Ethernet", "DOWN", "Disabled", 100.0, 4, "EDR"),
                       ("mlx5_3", "InfiniBand", "ACTIVE", "LinkUp", 200.0, 4, "HDR")]
    assert ports[1]["netdevs"] == ["ib0"]


def test_rate_strings():
    assert F.parse_rate("200 Gb/sec (4X HDR)") == {"gbps": 200.0, "width": 4, "speed": "HDR"}
    assert F.parse_rate("50 Gb/sec (1X HDR)") == {"gbps": 50.0, "width": 1, "speed": "HDR"}
    assert F.parse_rate("10 Gb/sec") == {"gbps": 10.0, "width": None, "speed": None}
    assert F.parse_rate("") == {"gbps": None, "width": None, "speed": None}


def test_ibstat_trees(tmp_path):
    ports = ports_of(ibstat_tree(tmp_path, (HEALTH / "ibstat-mooncake-1999-cx7-roce200.txt").read_text()))
    assert [(p["device"], p["hca_type"], p["state"], p["phys_state"], p["gbps"]) for p in ports] == [
        ("mlx5_0", "MT4129", "ACTIVE", "LinkUp", 200.0), ("mlx5_1", "MT4129", "ACTIVE", "LinkUp", 200.0),
        ("mlx5_10", "MT4125", "DOWN", "Disabled", None)]


# ---------------------------------------------------------------- port state

def test_seed_disabled_port_warns_unless_required(tmp_path):
    ports = ports_of(seed_ib_tree(tmp_path))
    (rec,) = [r for r in F.check_port_state(ports, node="seed") if r["status"] != C.PASS]
    assert rec["status"] == C.WARN and rec["check"] == "ib_port_state mlx5_2/1"
    assert "mlx5_2 port 1 (ens17np0): port disabled" in rec["detail"] and "NCCL_IB_HCA" in rec["detail"]
    assert rec["data"]["value"] == "DOWN/Disabled" and rec["data"]["limit"] == "ACTIVE/LinkUp"
    assert rec["data"]["device"] == {"hca": "mlx5_2", "port": 1, "netdevs": ["ens17np0"], "hca_type": None}
    for required in (["mlx5_2"], ["mlx5_2/1"], ["=mlx5_2:1"]):
        (rec,) = [r for r in F.check_port_state(ports, required=required) if r["status"] != C.PASS]
        assert rec["status"] == C.FAIL


def test_polling_port_alone_fails(tmp_path):
    ports = ports_of(ibstat_tree(tmp_path, (HEALTH / "ibstat-gpud-482-cx7-polling.txt").read_text()))
    (rec,) = F.check_port_state(ports, node="n1")
    assert rec["status"] == C.FAIL and "no link (cable unplugged" in rec["detail"]
    assert rec["data"]["device"]["hca_type"] == "MT4129" and rec["node"] == "n1"


def test_link_up_but_not_active_means_no_subnet_manager(tmp_path):
    ports = ports_of(ibstat_tree(tmp_path, (HEALTH / "ibstat-network-operator-249-down-linkup.txt").read_text()))
    (rec,) = F.check_port_state(ports)
    assert rec["status"] == C.FAIL and "subnet manager" in rec["detail"] and "opensm" in rec["fix"]


def test_active_port_passes(tmp_path):
    ports = ports_of(ibstat_tree(tmp_path, (HEALTH / "ibstat-gpud-752-active.txt").read_text()))
    (rec,) = F.check_port_state(ports)
    assert rec["status"] == C.PASS and "mlx5_7 port 1" in rec["detail"]


# ---------------------------------------------------------------- rate

def _set_rate(sys_root, dev, text):
    (sys_root / "class" / "infiniband" / dev / "ports" / "1" / "rate").write_text(text + "\n")


def test_seed_rates_pass(tmp_path):
    (rec,) = F.check_port_rate(ports_of(seed_ib_tree(tmp_path)))
    assert rec["status"] == C.PASS and "mlx5_1 port 1 (ib0) 200 Gb/sec (4X HDR)" in rec["detail"]


def test_hdr_port_at_1x_or_at_edr_fails(tmp_path):
    # the seed tree with one field changed (documented in the fixtures README): mlx5_3's rate
    sys_root = seed_ib_tree(tmp_path)
    _set_rate(sys_root, "mlx5_3", "50 Gb/sec (1X HDR)")
    (rec,) = [r for r in F.check_port_rate(ports_of(sys_root), node="seed") if r["status"] != C.PASS]
    assert rec["status"] == C.FAIL and "1X width" in rec["detail"] and rec["data"]["limit"] == "4X"
    _set_rate(sys_root, "mlx5_3", "100 Gb/sec (4X EDR)")
    (rec,) = [r for r in F.check_port_rate(ports_of(sys_root)) if r["status"] != C.PASS]
    assert rec["status"] == C.FAIL and rec["check"] == "ib_port_rate mlx5_3/1"
    assert "while mlx5_1 port 1 (ib0)" in rec["detail"] and rec["data"]["value"] == 100.0 and rec["data"]["limit"] == 200.0


def test_port_below_its_models_top_rate_warns(tmp_path):
    # ConnectX-7 (MT4129, up to 400) ports running RoCE at 200 (Mooncake#1999)
    ports = ports_of(ibstat_tree(tmp_path, (HEALTH / "ibstat-mooncake-1999-cx7-roce200.txt").read_text()))
    recs = [r for r in F.check_port_rate(ports) if r["status"] != C.PASS]
    assert [(r["check"], r["status"], r["data"]["limit"]) for r in recs] == [
        ("ib_port_rate mlx5_0/1", "warn", 400), ("ib_port_rate mlx5_1/1", "warn", 400)]


# ---------------------------------------------------------------- counters

IBQUERY = dict((re.sub(r"Counter$", "", k), int(v)) for k, v in re.findall(
    r"\[(\w+) == (\d+)", (HEALTH / "ibqueryerrors-ucx-9590.txt").read_text()))
SYSFS_NAMES = {"LinkDowned": "link_downed", "PortRcvErrors": "port_rcv_errors", "PortXmitDiscards": "port_xmit_discards"}


def _counters(sys_root, dev, values):
    cdir = sys_root / "class" / "infiniband" / dev / "ports" / "1" / "counters"
    cdir.mkdir(parents=True, exist_ok=True)
    for name, value in values.items():
        (cdir / name).write_text("%d\n" % value)


def test_counter_growth_between_two_reads(tmp_path):
    sys_root = seed_ib_tree(tmp_path)
    first_values = {SYSFS_NAMES[k]: v for k, v in IBQUERY.items() if k in SYSFS_NAMES}
    assert first_values == {"link_downed": 25, "port_rcv_errors": 26, "port_xmit_discards": 2846}
    _counters(sys_root, "mlx5_1", first_values)
    first = F.read_counters(str(sys_root))
    assert first == {"mlx5_1/1": first_values}
    # second read: link_downed +1 (the documented edit that shows growth)
    _counters(sys_root, "mlx5_1", dict(first_values, link_downed=26))
    second = F.read_counters(str(sys_root))
    ports = ports_of(sys_root)
    (rec,) = F.check_counters(ports, first, second, 5, node="seed")
    assert rec["status"] == C.FAIL and "link_downed +1" in rec["detail"] and rec["check"] == "ib_counters mlx5_1/1"
    assert rec["data"]["value"] == {"link_downed": 1} and rec["data"]["interval_s"] == 5
    _counters(sys_root, "mlx5_1", dict(first_values, port_xmit_discards=2900))
    (rec,) = F.check_counters(ports, first, F.read_counters(str(sys_root)), 5)
    assert rec["status"] == C.WARN and "port_xmit_discards +54" in rec["detail"]
    # counters that are high but do not grow pass: only growth is judged
    assert F.check_counters(ports, first, first, 5)[0]["status"] == C.PASS
    assert F.check_counters(ports, first, None, 0)[0]["status"] == C.SKIP


# ---------------------------------------------------------------- MTU

def test_roce_mtu_from_netdev_mtu():
    assert [F.roce_mtu(m) for m in (1500, 4200, 4191, 9000, 0)] == [1024, 4096, 2048, 4096, None]


def test_ibv_devinfo_parse():
    assert F.parse_ibv_devinfo((HEALTH / "ibv_devinfo-deepep-60-mtu1024.txt").read_text()) == {
        "mlx5_12/1": {"max_mtu": 4096, "active_mtu": 1024}}
    assert F.parse_ibv_devinfo((HEALTH / "ibv_devinfo-deepep-38-mtu4096.txt").read_text()) == {
        "mlx5_2/1": {"max_mtu": 4096, "active_mtu": 4096}}


def test_mtu_checks(tmp_path):
    sys_root = seed_ib_tree(tmp_path)
    ports = ports_of(sys_root)
    assert F.check_mtu(ports)[0]["status"] == C.SKIP
    # an InfiniBand port at 1024 (the active MTU DeepEP#60 shows, put on the seed's mlx5_1)
    devinfo = {"mlx5_1/1": {"max_mtu": 4096, "active_mtu": 1024}, "mlx5_3/1": {"max_mtu": 4096, "active_mtu": 4096}}
    (rec,) = [r for r in F.check_mtu(ports, devinfo) if r["status"] != C.PASS]
    assert rec["status"] == C.WARN and rec["data"]["value"] == 1024 and rec["data"]["limit"] == 4096
    # the RoCE port's netdev at mtu 1500 (constructed: the seed did not capture MTUs)
    (sys_root / "class" / "net" / "ens13np0" / "mtu").write_text("1500\n")
    recs = [r for r in F.check_mtu(ports_of(sys_root)) if r["status"] != C.PASS]
    assert [(r["check"], r["data"]["value"]) for r in recs] == [("ib_mtu mlx5_0/1", 1024)]
    assert "mtu 9000" in recs[0]["fix"]


# ---------------------------------------------------------------- GPUDirect RDMA, ACS

def test_gdr_peermem():
    mods = F.parse_proc_modules("nvidia_peermem 16384 0 - Live 0x0000000000000000\nnvidia 56717312 188 - Live 0x0\n")
    assert mods == {"nvidia_peermem", "nvidia"}
    assert F.check_gdr(True, True, mods)[0]["status"] == C.PASS
    (rec,) = F.check_gdr(True, True, {"nvidia"}, node="n1")
    assert rec["status"] == C.WARN and "modprobe nvidia_peermem" in rec["fix"] and "DMA-BUF" in rec["detail"]
    assert F.check_gdr(True, True, set(), memory_peers=True)[0]["status"] == C.PASS
    assert F.check_gdr(False, True, set())[0]["status"] == C.SKIP


def test_acs_lines_parse():
    acs = F.parse_lspci_acs((HEALTH / "lspci-acsctl-nccl-523.txt").read_text())
    assert len(acs) == 11 and all(a["bdf"] is None for a in acs)
    assert sum(a["acsctl"]["SrcValid"] for a in acs) == 7 and sum(a["acsctl"]["ReqRedir"] for a in acs) == 5
    acs = F.parse_lspci_acs((HEALTH / "lspci-vvv-heymeco-6-plx.txt").read_text())
    assert acs == [{"bdf": None, "desc": None, "acsctl": {"SrcValid": True, "TransBlk": False, "ReqRedir": True,
                                                         "CmpltRedir": True, "UpstreamFwd": True, "EgressCtrl": False,
                                                         "DirectTrans": False}}]
    acs = F.parse_lspci_acs((HEALTH / "lspci-vvv-systeminformation-819-amd.txt").read_text())
    assert len(acs) == 1 and acs[0]["acsctl"]["SrcValid"] is True


def _pci_tree(root):
    """A constructed sysfs PCI tree: a switch (0000:01:00.0 up, 0000:02:08.0 / 0000:02:10.0 down)
    with a GPU (0000:03:00.0) and a NIC (0000:04:00.0) below it, plus a GPU on another root port."""
    devices = root / "sys" / "devices" / "pci0000:00"
    paths = {"0000:03:00.0": "0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0",
             "0000:04:00.0": "0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0",
             "0000:81:00.0": "0000:00:03.0/0000:81:00.0"}
    links = root / "sys" / "bus" / "pci" / "devices"
    links.mkdir(parents=True)
    for bdf, rel in paths.items():
        (devices / rel).mkdir(parents=True, exist_ok=True)
        os.symlink(devices / rel, links / bdf)
    return root / "sys"


def test_bridges_between_gpu_and_nic(tmp_path):
    sys_root = str(_pci_tree(tmp_path))
    gpu, nic, far = (F.pci_path(sys_root, b) for b in ("0000:03:00.0", "0000:04:00.0", "0000:81:00.0"))
    assert gpu == ["0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:03:00.0"]
    assert F.bridges_between(gpu, nic) == ["0000:01:00.0", "0000:02:08.0", "0000:02:10.0"]
    assert F.bridges_between(far, nic) == []
    assert F.pci_path(sys_root, "0000:ff:00.0") is None


def test_acs_on_a_bridge_between_gpu_and_nic_warns():
    pairs = [["0000:03:00.0", "0000:04:00.0", ["0000:01:00.0", "0000:02:08.0", "0000:02:10.0"]]]
    # ACSCtl flags of the real PLX port (HeyMeco#6), attributed to a bridge of the constructed tree
    flags = F.parse_lspci_acs((HEALTH / "lspci-vvv-heymeco-6-plx.txt").read_text())[0]["acsctl"]
    acs = [{"bdf": "0000:02:08.0", "desc": "PCI bridge", "acsctl": flags},
           {"bdf": "0000:02:10.0", "desc": "PCI bridge", "acsctl": {k: False for k in flags}}]
    (rec,) = F.check_acs(acs, pairs, node="n1")
    assert rec["status"] == C.WARN and rec["check"] == "pcie_acs 0000:02:08.0"
    assert "SrcValid+ReqRedir+CmpltRedir on bridge 0000:02:08.0 between GPU 0000:03:00.0 and NIC 0000:04:00.0" in rec["detail"]
    assert "setpci -s 0000:02:08.0" in rec["fix"]
    assert F.check_acs(acs[1:], pairs)[0]["status"] == C.PASS
    headerless = F.parse_lspci_acs((HEALTH / "lspci-acsctl-nccl-523.txt").read_text())
    assert F.check_acs(headerless, pairs)[0]["status"] == C.WARN
    assert F.check_acs([], [])[0]["status"] == C.SKIP
    assert F.check_acs([], pairs, access_denied=True)[0]["status"] == C.SKIP


# ---------------------------------------------------------------- containers, memlock

def test_rdma_devices_visible():
    ports = [{"device": "mlx5_1", "port": 1}]
    assert F.check_rdma_devices(ports, ["rdma_cm", "uverbs0"], True)[0]["status"] == C.PASS
    (rec,) = F.check_rdma_devices(ports, [], True, node="n1")
    assert rec["status"] == C.FAIL and "--device=/dev/infiniband" in rec["fix"] and "TCP" in rec["detail"]
    assert "modprobe ib_uverbs" in F.check_rdma_devices(ports, [], False)[0]["fix"]


def test_memlock_uses_node_runtime_rule_on_a_real_container_snapshot():
    snap = json.loads((RUNTIME / "podman-node2-memlock64k-nofile1024.json").read_text())
    limits = NF.parse_limits(snap["files"]["/proc/self/limits"])
    runtime = NF.detect_container(snap)
    (rec,) = F.check_memlock(limits, ["mlx5_1"], runtime["container"], runtime["runtime"], node="node2")
    assert rec["status"] == C.FAIL and rec["check"] == "rdma_memlock"
    assert "--ulimit memlock=-1:-1" in rec["fix"] and rec["data"]["value"] == 65536
    assert F.check_memlock({"memlock": (None, None)}, ["mlx5_1"], False, None)[0]["status"] == C.PASS


# ---------------------------------------------------------------- everything, cluster level

def test_no_rdma_device_is_all_skips():
    recs = F.fabric_checks([], node="h100")
    assert {r["status"] for r in recs} == {C.SKIP} and [r["check"] for r in recs] == list(F.CATEGORIES)
    assert all("no RDMA device" in r["detail"] for r in recs)


def test_link_layer_mix_across_nodes(tmp_path):
    seed = ports_of(seed_ib_tree(tmp_path / "a"))
    roce_only = ports_of(seed_ib_tree(tmp_path / "b", drop=("mlx5_1", "mlx5_3")))
    recs = F.cluster_link_layers({"node1": seed, "node2": roce_only, "node3": []})
    assert [(r["node"], r["status"]) for r in recs] == [("node1", "pass"), ("node2", "fail"), ("node3", "fail")]
    assert "RoCE (Ethernet) while 1 other node(s) use InfiniBand" in recs[1]["detail"]
    assert recs[2]["data"] == {"category": "ib_link_layer", "value": None, "limit": "InfiniBand"}
    recs = F.cluster_link_layers({"node1": seed, "node2": seed})
    assert {r["status"] for r in recs} == {C.PASS} and "InfiniBand, as on 2 of 2" in recs[0]["detail"]
    recs = F.cluster_link_layers({"node1": roce_only, "node2": roce_only, "node3": seed})
    assert [r["status"] for r in recs] == ["pass", "pass", "fail"]
    assert {r["status"] for r in F.cluster_link_layers({"a": [], "b": []})} == {C.SKIP}


def test_rates_across_nodes(tmp_path):
    good = ports_of(seed_ib_tree(tmp_path / "a"))
    slow_root = seed_ib_tree(tmp_path / "b")
    _set_rate(slow_root, "mlx5_3", "100 Gb/sec (4X EDR)")   # the one documented edit
    recs = F.cluster_port_rates({"node1": good, "node2": ports_of(slow_root)})
    (bad,) = [r for r in recs if r["status"] == C.FAIL]
    assert bad["node"] == "node2" and "mlx5_3 port 1 (ib1)" in bad["detail"] and "on node1" in bad["detail"]
    # a node without an active RDMA port is skipped, never passed
    assert [r["status"] for r in F.cluster_port_rates({"a": [], "b": []})] == [C.SKIP, C.SKIP]


# ---------------------------------------------------------------- the module, in-process

def _module_run(root, args):
    return helpers.run_module("fabric_health_info", dict({"root": str(root), "node": "n1"}, **args),
                              env=dict(os.environ, PATH=str(root / "bin")))


def test_module_without_rdma_skips_everything(tmp_path):
    out = _module_run(tmp_path, {})
    assert {c["status"] for c in out["checks"]} == {"skip"} and len(out["checks"]) == len(F.CATEGORIES)
    assert out["fabric_health"]["ports"] == [] and out["changed"] is False


def test_module_on_the_seed_tree(tmp_path):
    seed_ib_tree(tmp_path)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "modules").write_text("mlx5_ib 1 0 - Live 0x0\n")
    _counters(tmp_path / "sys", "mlx5_1", {"symbol_error": 0, "link_downed": 25})
    out = _module_run(tmp_path, {"counter_interval": 1})
    by = by_dev(out["checks"])
    assert by["ib_port_state mlx5_2/1"]["status"] == "warn" and by["ib_port_rate"]["status"] == "pass"
    assert by["ib_counters"]["status"] == "pass" and "1s" in by["ib_counters"]["detail"]
    assert by["gdr_peermem"]["status"] == "skip"          # no GPU in this tree
    assert by["rdma_devices"]["status"] == "fail"         # the tree has no /dev/infiniband
    assert by["rdma_memlock"]["status"] == "skip"         # no /proc/self/limits in the tree
    assert all(c["node"] == "n1" for c in out["checks"])
    assert out["fabric_health"]["counters"] == {"mlx5_1/1": {"symbol_error": 0, "link_downed": 25}}


def test_ansible_doc_renders_and_module_runs_through_ansible_on_this_machine():
    import subprocess
    import sys

    proc = subprocess.run([helpers.tool("ansible-doc"), "provision.cluster.fabric_health_info"], cwd=REPO,
                          env=helpers.ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "RETURN VALUES" in proc.stdout and "ATTRIBUTES" in proc.stdout
    if F.read_ports("/sys"):
        pytest.skip("this machine has RDMA devices: the no-RDMA path is covered in-process")
    line, out = helpers.adhoc("fabric_health_info", {"node": "ctl"}, "--check", "-i", "localhost,", "-e",
                              "ansible_python_interpreter=%s" % sys.executable)
    assert line.startswith("localhost | SUCCESS") and out["changed"] is False
    assert {c["status"] for c in out["checks"]} == {"skip"} and len(out["checks"]) == len(F.CATEGORIES)
