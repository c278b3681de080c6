"""The cluster plan and its validation: the inventory problems a user can make, each one line with host and fix."""

from __future__ import annotations

import helpers  # noqa: F401  (puts collections/ on sys.path)
import pytest
from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import (
    node_address,
    plan_from_hostvars,
    python_problem,
    validate_inventory,
)


def hosts(*addrs, **kw):
    return [dict({"name": f"node{i + 1}", "address": a}, **kw) for i, a in enumerate(addrs)]


def test_healthy_inventory_gives_plan_with_first_host_as_master():
    problems, plan = validate_inventory(hosts("10.0.0.1", "10.0.0.2"))
    assert problems == []
    assert plan["master"] == "node1"
    assert plan["master_addr"] == "10.0.0.1"
    assert plan["master_port"] == 29500
    assert plan["ssh_port"] == 2222
    assert [n["rank"] for n in plan["nodes"]] == [0, 1]


def test_duplicate_address_names_both_hosts_and_the_fix():
    problems, _ = validate_inventory(hosts("10.0.0.1", "10.0.0.1"))
    assert len(problems) == 1
    line = problems[0]
    assert line.startswith("node2: address 10.0.0.1 is also used by node1")
    assert "fix:" in line and "\n" not in line


def test_duplicate_address_spelled_differently_is_still_a_duplicate():
    problems, _ = validate_inventory(hosts("NODE-a.example", "node-a.example."))
    assert any("also used by node1" in p for p in problems)


def test_names_differing_only_in_case_are_duplicates():
    problems, _ = validate_inventory([{"name": "gpu1", "address": "a"}, {"name": "GPU1", "address": "b"}])
    assert problems and problems[0].startswith("GPU1: name duplicates gpu1")


@pytest.mark.parametrize("port", [70000, 0, -1, "abc"])
def test_port_out_of_range(port):
    problems, _ = validate_inventory(hosts("10.0.0.1", "10.0.0.2", ssh_port=port))
    assert any(p.startswith("cluster (all 2 nodes): sshd_port") and "fix: set sshd_port to a port between 1 and 65535" in p
               for p in problems)


def test_ssh_port_equal_to_master_port():
    problems, _ = validate_inventory(hosts("10.0.0.1", "10.0.0.2", ssh_port=29500, master_port=29500))
    assert any(p.startswith("cluster (all 2 nodes): sshd_port and cluster_master_port are both 29500") for p in problems)


def test_ports_must_agree_across_nodes():
    h = hosts("10.0.0.1", "10.0.0.2")
    h[1]["ssh_port"] = 2200
    problems, _ = validate_inventory(h)
    assert any("sshd_port differs between nodes (2200, 2222)" in p for p in problems)


def test_one_node_for_a_two_node_stage():
    problems, _ = validate_inventory(hosts("10.0.0.1"))
    assert problems == ["cluster: stage allreduce_smoke needs at least 2 nodes, the inventory has 1; "
                        "fix: add nodes to the cluster group or skip the stage (--skip-tags allreduce_smoke)"]


def test_one_node_is_fine_when_the_stage_does_not_run():
    problems, _ = validate_inventory(hosts("10.0.0.1"), stages=["preflight", "sshd"])
    assert problems == []


def test_master_must_be_a_node():
    problems, plan = validate_inventory(hosts("10.0.0.1", "10.0.0.2"), master="node9")
    assert problems[0].startswith("cluster: cluster_master 'node9' is not a host of the cluster group")
    problems, plan = validate_inventory(hosts("10.0.0.1", "10.0.0.2"), master="node2")
    assert problems == [] and plan["master_addr"] == "10.0.0.2"


def test_loopback_address_in_multi_node_cluster():
    problems, _ = validate_inventory(hosts("127.0.0.1", "10.0.0.2"))
    assert any("loopback" in p for p in problems)


def test_empty_group():
    problems, plan = validate_inventory([])
    assert plan == {} and "no hosts in the cluster group" in problems[0]


def test_filter_reads_hostvars_with_defaults_and_tags():
    hv = {
        "a": {"ansible_host": "10.1.0.1"},
        "b": {"cluster_address": "10.2.0.2", "ansible_host": "mgmt-b", "sshd_port": 2222},
    }
    out = plan_from_hostvars(hv, ["a", "b"], stages=["preflight", "allreduce_smoke"], run_tags=["all"])
    assert out["problems"] == []
    assert out["plan"]["ranks"] == {"a": 0, "b": 1}
    assert out["plan"]["nodes"][1]["address"] == "10.2.0.2"
    assert out["plan"]["address_of"] == {"a": "10.1.0.1", "b": "10.2.0.2"}
    assert out["plan"]["hosts"] == ["a", "b"]
    assert (out["plan"]["user"], out["plan"]["group"], out["plan"]["ssh_port"]) == ("root", "cluster", 2222)
    single = plan_from_hostvars({"a": {}}, ["a"], stages=["preflight", "allreduce_smoke"],
                            skip_tags=["allreduce_smoke"])
    assert single["problems"] == []


@pytest.mark.parametrize("text,expect", [
    (None, "no python3 on the node"),
    ("", "no python3 on the node"),
    ("Python 2.7.18", "too old"),
    ("Python 3.11.2", None),
    ("garbage", "cannot read the python version"),
])
def test_python_problem(text, expect):
    got = python_problem("node3", text)
    if expect is None:
        assert got is None
    else:
        assert got.startswith("node3: ") and expect in got and "fix:" in got


def test_same_problem_on_every_node_is_one_line():
    problems, _ = validate_inventory(hosts("10.0.0.1", "10.0.0.2", "10.0.0.3", ssh_port=70000))
    assert problems == ["cluster (all 3 nodes): sshd_port 70000 is out of range; "
                        "fix: set sshd_port to a port between 1 and 65535"]
    h = hosts("10.0.0.1", "10.0.0.2", "10.0.0.3")
    h[0]["ssh_port"] = h[2]["ssh_port"] = 0
    problems, _ = validate_inventory(h)
    assert problems[0].startswith("node1, node3: sshd_port 0 is out of range")


def test_node_address_rule():
    assert node_address({"cluster_address": "10.0.0.9", "ansible_host": "mgmt"}, "n") == "10.0.0.9"
    assert node_address({"ansible_host": "mgmt"}, "n") == "mgmt"
    assert node_address({}, "n") == "n"


def test_cluster_master_addr_overrides_the_masters_cluster_address():
    """cluster_master_addr is the rendezvous address every rank dials (a VIP, another interface):
    the plan carries it; without it, the master's own cluster address."""
    hostvars = {"a": {"ansible_host": "10.0.0.1"}, "b": {"ansible_host": "10.0.0.2"}}
    plain = plan_from_hostvars(hostvars, ["a", "b"])["plan"]
    assert plain["master_addr"] == "10.0.0.1"
    override = plan_from_hostvars(hostvars, ["a", "b"], master_addr="192.168.7.1")["plan"]
    assert (override["master"], override["master_addr"]) == ("a", "192.168.7.1")


@pytest.mark.parametrize("address, expect", [
    ("10.0.0.3; reboot", "node2: cluster address 10.0.0.3; reboot is neither an IP address nor an RFC 1123 host name"),
    ("node2\n    ProxyCommand touch /tmp/x",
     "node2: cluster address 'node2\\n    ProxyCommand touch /tmp/x' is neither an IP address nor"),
    ("$(reboot)", "node2: cluster address $(reboot) is neither"),
    ("[fd00::2]", "node2: cluster address [fd00::2] is an address in brackets: write it without them"),
    ("-oProxyCommand=x", "node2: cluster address -oProxyCommand=x is neither"),
])
def test_an_address_that_is_not_one_is_refused_in_one_line(address, expect):
    """issue 31 item 7: what reaches ~/.ssh/config, /etc/hosts and a shell task is an address or a name."""
    problems, _ = validate_inventory(hosts("10.0.0.1", address))
    assert len(problems) == 1 and problems[0].startswith(expect) and "fix:" in problems[0], problems
    assert "\n" not in problems[0]


def test_names_addresses_and_users_that_are_fine():
    ok = [{"name": "gpu-a100-01.example.com", "address": "fd00::2"}, {"name": "n2", "address": "10.0.0.2"},
          {"name": "10.0.0.3", "address": "10.0.0.3"}, {"name": "node4", "address": "node4.cluster.local."}]
    assert validate_inventory(ok, master_addr="10.0.0.9", user="trainer_1")[0] == []


def test_an_inventory_name_a_master_address_or_a_user_that_is_not_one_is_refused():
    problems, _ = validate_inventory([{"name": "bad name", "address": "10.0.0.1"}, {"name": "n_2", "address": "10.0.0.2"}],
                                     master_addr="1.2.3.4 -x", user="x;reboot")
    assert problems[0].startswith("bad name: the inventory name is not an RFC 1123 host name")
    assert problems[1].startswith("n_2: the inventory name is not an RFC 1123 host name")
    assert "cluster: cluster_master_addr 1.2.3.4 -x is neither" in problems[2]
    assert problems[3].startswith("cluster: cluster_user x;reboot is not a user name") and "fix:" in problems[3]
    hostvars = {"a": {"ansible_host": "10.0.0.1"}}
    assert plan_from_hostvars(hostvars, ["a"], user="$(id)")["problems"][0].startswith("cluster: cluster_user $(id)")


def test_a_package_mirror_needs_a_keyring_or_an_explicit_insecure_flag_that_is_warned_about():
    """issue 31 item 5: a mirror outside the lab defaulted to [trusted=yes] over plain HTTP."""
    base = {"ansible_host": "10.0.0.1", "cluster_package_mirror": "http://10.0.0.5/debian"}
    unsigned = plan_from_hostvars({"a": dict(base), "b": dict(base, ansible_host="10.0.0.2")}, ["a", "b"])
    assert unsigned["problems"] == [
        "cluster (all 2 nodes): the package mirror http://10.0.0.5/debian has no packages_mirror_keyring: apt would "
        "install unsigned packages from it as root; fix: set packages_mirror_keyring to the keyring that signs its "
        "Release file, or cluster_package_mirror_insecure: true for a mirror on a network you control"]
    signed = plan_from_hostvars({"a": dict(base, packages_mirror_keyring="files/m.gpg")}, ["a"], stages=["packages"])
    assert signed["problems"] == [] and signed["warnings"] == []
    insecure = plan_from_hostvars({"a": dict(base, cluster_package_mirror_insecure=True)}, ["a"], stages=["packages"])
    assert insecure["problems"] == [] and insecure["warnings"][0].startswith(
        "a: the package mirror http://10.0.0.5/debian is trusted unsigned (cluster_package_mirror_insecure: true)")
    bad = plan_from_hostvars({"a": dict(base, cluster_package_mirror="http://x/ ./\ndeb [trusted=yes] http://evil")},
                             ["a"], stages=["packages"])
    assert bad["problems"][0].startswith("a: cluster_package_mirror 'http://x/ ./\\ndeb [trusted=yes] http://evil' is not")
    assert plan_from_hostvars({"a": {"ansible_host": "10.0.0.1"}}, ["a"])["warnings"] == []
