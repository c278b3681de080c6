"""A bad inventory fails in preflight with one clear line and changes nothing."""

from __future__ import annotations

import pytest
from helpers import lab_name, node_exec, run_playbook

pytestmark = pytest.mark.lab

LAB = lab_name("pre")
PLAYBOOK = "site.yml"


@pytest.fixture(scope="module")
def lab(lab_factory):
    return lab_factory(LAB, nodes=2)


def inventory(tmp_path, hosts: dict, extra: str = "") -> str:
    lines = ["cluster:", "  hosts:"]
    for name, hv in hosts.items():
        lines.append(f"    {name}:")
        for key, val in hv.items():
            lines.append(f"      {key}: {val}")
    lines += ["  vars:", "    ansible_connection: containers.podman.podman", "    ansible_user: root"]
    lines += [f"    {line}" for line in extra.splitlines() if line]
    path = tmp_path / "hosts.yml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def node(i, addr):
    return {"ansible_host": f"{LAB}-node{i}", "cluster_address": addr}


@pytest.mark.parametrize("case,hosts,extra,expect", [
    ("duplicate address", {"node1": node(1, "10.89.1.11"), "node2": node(2, "10.89.1.11")}, "",
     "node2: address 10.89.1.11 is also used by node1; fix: give each host its own cluster_address/ansible_host"),
    ("port out of range", {"node1": node(1, "10.89.1.11"), "node2": node(2, "10.89.1.12")}, "sshd_port: 70000",
     "cluster (all 2 nodes): sshd_port 70000 is out of range; fix: set sshd_port to a port between 1 and 65535"),
    ("one node for a two-node stage", {"node1": node(1, "10.89.1.11")}, "",
     "cluster: stage allreduce_smoke needs at least 2 nodes, the inventory has 1"),
    ("ssh port equals rendezvous port", {"node1": node(1, "10.89.1.11"), "node2": node(2, "10.89.1.12")},
     "sshd_port: 29500", "sshd_port and cluster_master_port are both 29500"),
])
def test_bad_inventory_fails_in_preflight(lab, tmp_path, case, hosts, extra, expect):
    result = run_playbook(PLAYBOOK, inventory=inventory(tmp_path, hosts, extra), lab_name=LAB)
    assert result.rc != 0, result
    assert expect in result.output, result
    # nothing after the validation ran: no gathered facts, no other stage, nothing changed
    assert result.changed == 0, result
    assert "TASK [provision.cluster.gcc_toolchain" not in result.output
    assert "Gather min and hardware facts" not in result.output.split("Stop on an inventory problem")[-1]
    # and the nodes were not touched: nothing of any stage on them
    for i in (1, 2):
        left = node_exec(LAB, i, "ls -d /etc/provision /opt/provision /root/.ssh/id_ed25519 /root/.provision "
                                 "2>/dev/null; grep -l 'BEGIN provision' /root/.bashrc 2>/dev/null; true").stdout
        assert left.strip() == "", (f"node{i}", left)


def test_good_inventory_passes_preflight_and_records_the_plan(lab, tmp_path):
    hosts = {"node1": node(1, "10.89.1.11"), "node2": node(2, "10.89.1.12")}
    result = run_playbook("playbooks/preflight.yml", inventory=inventory(tmp_path, hosts), lab_name=LAB)
    assert result.rc == 0, result
    assert result.changed == 0
