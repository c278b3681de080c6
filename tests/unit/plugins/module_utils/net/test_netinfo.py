"""nccl_net decision logic on real inputs: the H100 node's /proc + /sys, lab captures of both image
flavours, and the seed-ib InfiniBand/RoCE node (trees built in tmp dirs by netenv_trees)."""

from __future__ import annotations

import socket
import subprocess

import pytest
from unit.netenv_trees import H100_NET, NETENV, net_tree, seed_ib_tree

from ansible_collections.provision.cluster.plugins.module_utils.net import netinfo as ni
from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import DEFAULT_SSH_PORT
from ansible_collections.provision.cluster.plugins.module_utils.common.settings import default
import helpers
from helpers import REPO

LAB_FULL = NETENV / "lab-full"
LAB_MIN = NETENV / "lab-minimal"


def _net(tmp_path, capture, extra_attrs=""):
    sys_root, proc_root = net_tree(tmp_path, capture, extra_attrs)
    return ni.read_net(sys_root, proc_root), sys_root


def _lab_peers(capture_dir):
    """node1/node2 cluster addresses as the captures show them (the /32 LOCAL on the cluster /24)."""
    peers = []
    for idx in (1, 2):
        trie = ni.parse_fib_trie((capture_dir / f"node{idx}" / "proc-net-fib_trie.txt").read_text())
        addr = next(e["address"] for e in trie if e["type"] == "LOCAL" and e["address"].startswith("10.89."))
        peers.append({"name": f"node{idx}", "address": addr})
    return peers


# ---------------------------------------------------------------- parsers

def test_proc_route_h100():
    routes = ni.parse_proc_route((H100_NET / "proc-net-route.txt").read_text())
    assert [(r["iface"], r["network"], r["gateway"]) for r in routes] == [
        ("eth0", "0.0.0.0/0", "192.0.2.1"), ("eth0", "192.0.2.0/24", "0.0.0.0")]
    assert routes[0]["flags"] & ni.ROUTE_FLAG_GATEWAY


def test_fib_trie_h100_local_addresses():
    trie = ni.parse_fib_trie((H100_NET / "proc-net-fib_trie.txt").read_text())
    local = {(e["address"], e["prefix"]) for e in trie if e["type"] == "LOCAL"}
    assert ("192.0.2.2", 32) in local and ("127.0.0.1", 32) in local
    assert {"table": "Main", "address": "192.0.2.0", "prefix": 24, "scope": "link", "type": "UNICAST"} in trie


def test_if_inet6_lab():
    entries = ni.parse_if_inet6((LAB_FULL / "node1" / "proc-net-if_inet6.txt").read_text())
    assert {e["iface"] for e in entries} == {"eth0", "eth1", "lo"}
    assert any(e["address"] == "::1" and e["prefix"] == 128 for e in entries)


def test_read_net_h100(tmp_path):
    net, _ = _net(tmp_path, H100_NET)
    ifs = net["interfaces"]
    assert ifs["eth0"]["ipv4"] == ["192.0.2.2/24"] and ifs["eth0"]["mtu"] == 1400
    assert ifs["eth0"]["speed"] is None            # virtio reports -1
    assert ifs["lo"]["ipv4"] == ["127.0.0.1/8"]
    assert ifs["ifb0"]["operstate"] == "down" and ifs["ifb0"]["carrier"] is None


# ---------------------------------------------------------------- socket interface

def test_h100_peer_on_subnet_and_behind_gateway(tmp_path):
    net, _ = _net(tmp_path, H100_NET)
    on_link = ni.decide(net, {}, [{"name": "a", "address": "192.0.2.2"}, {"name": "b", "address": "192.0.2.3"}], "a")
    assert on_link["env"]["NCCL_SOCKET_IFNAME"] == "eth0" and on_link["peers"][0]["via"] == "connected"
    routed = ni.decide(net, {}, [{"name": "b", "address": "198.51.100.9"}], "a")
    assert routed["socket_ifname"] == "eth0" and routed["peers"][0]["via"] == "gateway 192.0.2.1"
    assert any("ifb0 (link down" in r and "lo (loopback)" in r for r in routed["reasons"])
    assert routed["env"]["NCCL_IB_DISABLE"] == "1"


@pytest.mark.parametrize("capture, expected", [(LAB_FULL, "eth1"), (LAB_MIN, "eth0")])
@pytest.mark.parametrize("node", [1, 2])
def test_lab_multi_homed_picks_the_cluster_network(tmp_path, capture, expected, node):
    """The lab's side network reaches nothing; which ethN carries the cluster network differs
    between the two captures (podman's attach order), so the name must come from the routes."""
    net, _ = _net(tmp_path, capture / f"node{node}")
    peers = _lab_peers(capture)
    decision = ni.decide(net, {}, peers, f"node{node}")
    assert decision["errors"] == []
    assert decision["env"]["NCCL_SOCKET_IFNAME"] == expected == decision["env"]["GLOO_SOCKET_IFNAME"]
    assert [p["name"] for p in decision["peers"]] == [f"node{3 - node}"]   # itself skipped
    side = "eth0" if expected == "eth1" else "eth1"
    assert any(f"{side} (reaches no peer)" in r for r in decision["reasons"])


def test_peer_only_on_the_side_network_fails_naming_it(tmp_path):
    net, _ = _net(tmp_path, LAB_FULL / "node1")
    decision = ni.decide(net, {}, [{"name": "node2", "address": "10.90.152.34"}], "node1")
    assert decision["socket_ifname"] is None
    assert decision["errors"] == ["cannot reach node2 (10.90.152.34): no route to 10.90.152.34"]


def test_bridge_is_never_chosen(tmp_path):
    """A docker0 bridge (bridge/ dir in sysfs) whose subnet holds the peer address: refused."""
    capture = tmp_path / "cap"
    capture.mkdir()
    for f in (LAB_FULL / "node1").iterdir():
        (capture / f.name).write_text(f.read_text())
    # docker0 172.17.0.0/16 in /proc/net/route's format (hex, host byte order)
    with open(capture / "proc-net-route.txt", "a") as fh:
        fh.write("docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n")
    net, _ = _net(tmp_path / "t", capture, "docker0 operstate=up carrier=1 mtu=1500 type=1 bridge=1\n")
    decision = ni.decide(net, {}, [{"name": "node2", "address": "172.17.0.3"}], "node1")
    assert decision["socket_ifname"] is None
    assert "goes through docker0, which is software bridge" in decision["errors"][0]


def test_peers_split_over_two_interfaces_fail(tmp_path):
    net, _ = _net(tmp_path, LAB_FULL / "node1")
    decision = ni.decide(net, {}, [{"name": "a", "address": "10.89.152.12"},
                                   {"name": "b", "address": "10.90.152.20"}], "node1")
    assert decision["socket_ifname"] is None
    assert "no single interface reaches every peer: b via eth0; a via eth1" in decision["errors"][0]


def test_no_peers_uses_default_route(tmp_path):
    net, _ = _net(tmp_path, H100_NET)
    decision = ni.decide(net, {}, [], "x")
    assert decision["socket_ifname"] == "eth0"
    assert "default route" in decision["reasons"][0]


def test_socket_overrides(tmp_path):
    net, _ = _net(tmp_path, LAB_FULL / "node1")
    peers = _lab_peers(LAB_FULL)
    forced = ni.decide(net, {}, peers, "node1", {"socket_ifname": "eth0"})
    assert forced["env"]["NCCL_SOCKET_IFNAME"] == "eth0" and forced["errors"] == []
    assert "from nccl_net_socket_ifname" in forced["reasons"][0]
    pattern = ni.decide(net, {}, peers, "node1", {"socket_ifname": "^docker,lo", "gloo": False})
    assert pattern["env"] == {"NCCL_SOCKET_IFNAME": "^docker,lo", "NCCL_IB_DISABLE": "1"}
    missing = ni.decide(net, {}, peers, "node1", {"socket_ifname": "ens5"})
    assert missing["errors"][0].startswith("nccl_net_socket_ifname=ens5: no such interface")


# ---------------------------------------------------------------- RDMA (seed-ib)

def test_seed_ib_infiniband_first_roce_second_never_down(tmp_path):
    sys_root = seed_ib_tree(tmp_path)
    ib = ni.choose_ib(ni.read_rdma(sys_root), ni.read_interfaces(sys_root))
    assert ib["ranked"] == ["mlx5_1:1", "mlx5_3:1", "mlx5_0:1"]
    assert ib["excluded"] == ["mlx5_2:1"]
    assert ib["hca"] == "=mlx5_1:1,mlx5_3:1" and ib["disable"] is False and ib["gid_index"] is None
    assert "never mlx5_2:1: port DOWN (Disabled)" in ib["reasons"]
    assert any("second choice" in r and "mlx5_0:1" in r for r in ib["reasons"])


def test_seed_ib_mixed_list_keeps_the_order(tmp_path):
    sys_root = seed_ib_tree(tmp_path)
    ib = ni.choose_ib(ni.read_rdma(sys_root), ni.read_interfaces(sys_root), {"ib_mix_link_layers": True})
    assert ib["hca"] == "=mlx5_1:1,mlx5_3:1,mlx5_0:1"
    assert "mlx5_2" not in ib["hca"]


def test_seed_ib_roce_only_gets_a_gid_index(tmp_path):
    sys_root = seed_ib_tree(tmp_path / "a", drop=("mlx5_1", "mlx5_3"))
    ib = ni.choose_ib(ni.read_rdma(sys_root), ni.read_interfaces(sys_root))
    assert ib["hca"] == "=mlx5_0:1" and ib["gid_index"] == 1          # RoCE v2 (link-local)
    sys_root = seed_ib_tree(tmp_path / "b", drop=("mlx5_1", "mlx5_3"),
                            roce_ipv4_gid="0000:0000:0000:0000:0000:ffff:0a0c:0540")
    ib = ni.choose_ib(ni.read_rdma(sys_root), ni.read_interfaces(sys_root))
    assert ib["gid_index"] == 3 and "IPv4-mapped" in ib["reasons"][-1]


def test_seed_ib_overrides(tmp_path):
    sys_root = seed_ib_tree(tmp_path)
    rdma, ifs = ni.read_rdma(sys_root), ni.read_interfaces(sys_root)
    down = ni.choose_ib(rdma, ifs, {"ib_hca": "mlx5_2:1"})
    assert down["errors"] == ["nccl_net_ib_hca names mlx5_2:1, which is not ACTIVE; NCCL would fall back to sockets"]
    assert ni.choose_ib(rdma, ifs, {"ib_hca": "mlx5_9"})["errors"][0].endswith("not under /sys/class/infiniband")
    ok = ni.choose_ib(rdma, ifs, {"ib_hca": "=mlx5_0:1", "ib_gid_index": 3})
    assert ok["errors"] == [] and ok["hca"] == "=mlx5_0:1" and ok["gid_index"] == 3
    off = ni.choose_ib(rdma, ifs, {"ib_disable": True})
    assert off["disable"] is True and off["hca"] is None


def test_seed_ib_full_decision_env(tmp_path):
    sys_root = seed_ib_tree(tmp_path)
    net = {"interfaces": ni.read_interfaces(sys_root), "routes": []}
    env = ni.decide(net, ni.read_rdma(sys_root), [], "a", {"socket_ifname": "ib0"})["env"]
    assert env == {"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "ib0", "NCCL_IB_DISABLE": "0",
                   "NCCL_IB_HCA": "=mlx5_1:1,mlx5_3:1"}


def test_h100_has_no_rdma(tmp_path):
    net, sys_root = _net(tmp_path, H100_NET)
    (sys_root / "class" / "infiniband").mkdir(parents=True)   # present and empty, as on that node
    ib = ni.choose_ib(ni.read_rdma(sys_root), net["interfaces"])
    assert ib["disable"] and ib["reasons"] == ["NCCL_IB_DISABLE=1: no RDMA device under /sys/class/infiniband"]


# ---------------------------------------------------------------- agreement

def _decision(env, disable=True, layer=None):
    return {"env": env, "socket_ifname": env.get("NCCL_SOCKET_IFNAME"),
            "ib": {"disable": disable, "link_layer": layer}}


def test_agree_disables_ib_when_one_node_has_none():
    out = ni.agree({
        "n1": _decision({"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_1:1"},
                        False, "InfiniBand"),
        "n2": _decision({"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_DISABLE": "1"}),
    })
    assert out["n1"]["env"] == {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_DISABLE": "1"} == out["n2"]["env"]
    assert "n1=InfiniBand, n2=none" in out["n1"]["reasons"][0]
    assert [c["status"] for c in out["n2"]["checks"]] == ["warn"]


def test_agree_reports_different_interface_names():
    out = ni.agree({"n1": _decision({"NCCL_SOCKET_IFNAME": "eth1"}), "n2": _decision({"NCCL_SOCKET_IFNAME": "eth0"})})
    warn = [c for c in out["n1"]["checks"] if c["status"] == "warn"]
    assert warn and "n1=eth1, n2=eth0" in warn[0]["detail"] and "nccl_net_socket_ifname" in warn[0]["fix"]
    same = ni.agree({"n1": _decision({"NCCL_SOCKET_IFNAME": "eth1"}), "n2": _decision({"NCCL_SOCKET_IFNAME": "eth1"})})
    assert all(c["status"] == "pass" for c in same["n1"]["checks"])


# ---------------------------------------------------------------- probe (loopback only)

def test_probe_listener_and_closed_port_count_as_reachable():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        ok, detail = ni.probe("127.0.0.1", None, "127.0.0.1", port, 2)
        assert ok and detail == f"connected to 127.0.0.1:{port}"
    ok, detail = ni.probe("127.0.0.1", None, "127.0.0.1", port, 2)   # now closed
    assert ok and "answered" in detail


def test_probe_failure_names_the_pair():
    decision = {"socket_ifname": "eth0"}
    peer = {"name": "node2", "ip": "10.89.152.12", "source": "10.90.152.18"}
    checks, errors = ni.probe_checks("node1", decision, [(peer, False, "Network is unreachable")])
    assert errors[0].startswith("node1 -> node2: node1 via eth0 (10.90.152.18) cannot reach node2 at 10.89.152.12")
    assert checks[0]["status"] == "fail" and "nccl_net_socket_ifname" in checks[0]["fix"]


# ---------------------------------------------------------------- the module itself

def test_module_on_a_constructed_tree(tmp_path):
    sys_root, proc_root = net_tree(tmp_path, LAB_FULL / "node1")
    # check_names off: the lab's names mean nothing on the machine running the tests
    args = {"peers": _lab_peers(LAB_FULL), "self_name": "node1", "probe": False, "check_names": False,
            "sys_root": str(sys_root), "proc_root": str(proc_root)}
    result = helpers.run_module("nccl_net_facts", args, env={})
    assert result["env"]["NCCL_SOCKET_IFNAME"] == "eth1" and result["changed"] is False
    assert {c["check"]: c["status"] for c in result["checks"]} == {"nccl_net.socket_ifname": "pass",
                                                                   "nccl_net.ib": "skip"}


# ---------------------------------------------------------------- filters and docs

def test_filters():
    from ansible_collections.provision.cluster.plugins.filter.netenv import FilterModule
    f = FilterModule().filters()
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="1 results for 2 hosts"):
        f["nccl_net_agree"]([{}], ["a", "b"])
    agreed = f["nccl_net_agree"]([_decision({"NCCL_SOCKET_IFNAME": "eth1"})] * 2, ["a", "b"])
    assert agreed["b"]["env"] == {"NCCL_SOCKET_IFNAME": "eth1"}
    envs = {"a": {"__shell_env": {"env": {"X": "1", "IF": "eth1"}}}, "b": {"__shell_env": {"env": {"X": "1", "IF": "eth0"}}},
            "c": {}}   # c never ran the role (e.g. outside --limit and not cached): left out
    assert f["shell_env_common"](["a", "b", "c", "d"], envs) == {"X": "1"}


@pytest.mark.parametrize("module", ["nccl_net_facts", "shell_env_block"])
def test_ansible_doc_renders(module):
    from helpers import ansible_env, tool
    proc = subprocess.run([tool("ansible-doc"), f"provision.cluster.{module}"], capture_output=True, text=True,
                          env=ansible_env(), cwd=REPO, check=False)
    assert proc.returncode == 0 and "EXAMPLES" in proc.stdout, proc.stderr


def test_module_read_only_report_for_verify(tmp_path):
    """fail_on_error=false (what verify uses): problems come back as checks, the module does not fail."""
    sys_root, proc_root = net_tree(tmp_path, LAB_FULL / "node1")
    args = {"peers": [{"name": "node2", "address": "10.90.152.34"}], "self_name": "node1",
            "fail_on_error": False, "_ansible_check_mode": True, "sys_root": str(sys_root), "proc_root": str(proc_root),
            # what verify and the nccl_net role pass: the plan's sshd port, the role's probe timeout
            "probe_port": DEFAULT_SSH_PORT, "probe_timeout": default("nccl_net_probe_timeout")}
    result = helpers.run_module("nccl_net_facts", args, env={})
    assert not result.get("failed")
    check = next(c for c in result["checks"] if c["check"] == "nccl_net.socket_ifname")
    assert check["status"] == "fail" and "node2" in check["detail"] and check["fix"]


def test_name_check_finds_wrong_node_loopback_and_unresolvable_names():
    peers = [{"name": "node1", "ip": "10.89.1.11"}, {"name": "node2", "ip": "10.89.1.12"},
             {"name": "node3", "ip": "10.89.1.13"}]
    good = {"node1": ["10.89.1.11"], "node2": ["10.89.1.12", "fe80::2"], "node3": ["10.89.1.13"]}
    assert ni.name_check("node1", peers, good)["status"] == "pass"
    # another network of the same node (names on the management network) is not an error
    assert ni.name_check("node1", peers, dict(good, node3=["192.168.0.13"]))["status"] == "pass"
    wrong = ni.name_check("node1", peers, dict(good, node2=["10.89.1.11"]))
    assert wrong["status"] == "fail"
    assert wrong["detail"] == "node1: node2 resolves to 10.89.1.11, the address of node1"
    assert "/etc/hosts" in wrong["fix"]
    loop = ni.name_check("node2", peers, dict(good, node2=["127.0.1.1"]))
    assert loop["status"] == "fail" and "127.0.1.1 (loopback)" in loop["detail"]
    unknown = ni.name_check("node1", peers, dict(good, node3=None))
    assert unknown["status"] == "warn" and "node3 does not resolve" in unknown["detail"]
    assert "~/.ssh/config" in unknown["fix"]
    # two nodes on one address (containers on one host, other ports): each name finds its address
    shared = [{"name": "c1", "ip": "10.0.0.5"}, {"name": "c2", "ip": "10.0.0.5"}]
    assert ni.name_check("c1", shared, {"c1": ["10.0.0.5"], "c2": ["10.0.0.5"]})["status"] == "pass"


def _released_port() -> int:
    """A loopback port just released: nothing listens, the kernel refuses (which is reachable)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rendezvous_check_from_a_real_probe_on_loopback():
    port = _released_port()
    ok, detail = ni.probe(None, None, "127.0.0.1", port, 2)
    check = ni.rendezvous_check("node2", "node1", "127.0.0.1", port, ok, detail)
    assert check["status"] == "pass" and "closed" in check["detail"]
    blocked = ni.rendezvous_check("node2", "node1", "10.89.1.11", 29500, False, "10.89.1.11:29500: Permission denied")
    assert blocked["status"] == "fail"
    assert blocked["detail"].startswith("node2 cannot reach node1's rendezvous port 10.89.1.11:29500")
    assert "open TCP 29500" in blocked["fix"] and "cluster_master_port" in blocked["fix"]


def test_a_probe_that_failed_once_is_tried_again():
    """32 lab nodes connecting to every node at once lost SYNs ("no answer from 10.89.216.24:2222
    within 3.0s" on 7 of 32 nodes, the same pairs fine a minute later); a firewall fails every try."""
    answers = [(False, "no answer from 10.89.216.24:2222 within 3.0s"), (True, "connected to 10.89.216.24:2222")]
    calls = []

    def fake(*args):
        calls.append(args)
        return answers.pop(0)

    assert ni.probe_tried("10.89.216.31", "eth1", "10.89.216.24", 2222, 3.0, pause=0, probe_fn=fake) == (
        True, "connected to 10.89.216.24:2222")
    assert calls == [("10.89.216.31", "eth1", "10.89.216.24", 2222, 3.0), ("10.89.216.31", "eth1", "10.89.216.24", 2222, 6.0)]
    blocked = ni.probe_tried("10.89.216.31", "eth1", "10.89.216.24", 2222, 3.0, pause=0,
                             probe_fn=lambda *a: (False, "10.89.216.24:2222: Permission denied"))
    assert blocked == (False, "10.89.216.24:2222: Permission denied (2 tries, 0 s apart)")


def test_probe_tried_on_loopback_answers_at_once():
    ok, detail = ni.probe_tried(None, None, "127.0.0.1", _released_port(), 2)
    assert ok and "closed" in detail


def test_module_probes_only_the_peers_named_in_probe_peers():
    """provision verify's ring: every peer decides the interface and is resolved, only probe_peers are
    probed (on loopback here: the interface is given, the port is one nothing listens on)."""
    peers = [{"name": n, "address": "127.0.0.%d" % i} for i, n in enumerate(("a", "b", "c", "d"), 1)]
    args = {"peers": peers, "self_name": "a", "socket_ifname": "lo", "probe_port": _released_port(),
            "probe_timeout": 2, "check_names": False, "fail_on_error": False}
    every = helpers.run_module("nccl_net_facts", args, env={})
    assert sorted(c["check"] for c in every["checks"] if ".reach." in c["check"]) == [
        "nccl_net.reach.b", "nccl_net.reach.c", "nccl_net.reach.d"]
    ring = helpers.run_module("nccl_net_facts", dict(args, probe_peers=["b", "d"]), env={})
    reach = {c["check"]: c["status"] for c in ring["checks"] if ".reach." in c["check"]}
    assert reach == {"nccl_net.reach.b": "pass", "nccl_net.reach.d": "pass"}
    assert [p["name"] for p in ring["peers"]] == ["b", "c", "d"]
    assert "probe" not in ring["peers"][1] and ring["peers"][0]["probe"]["ok"]


def test_tcp_state_tells_open_and_refused_apart():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert ni.tcp_state("127.0.0.1", port, 2) == "open"
    assert ni.tcp_state("127.0.0.1", port, 2) == "refused"          # the same port, closed now
