"""pdsh output (plugins/module_utils/ssh/pdsh.py) on real captures under tests/fixtures/ssh (see its README)."""

from __future__ import annotations

import helpers
from ansible_collections.provision.cluster.plugins.module_utils.ssh import pdsh

OURS = helpers.REPO / "tests" / "fixtures" / "ssh"


# ------------------------------------------------------------------ pdsh

def test_pdsh_output_ok():
    ans, err, fixes = pdsh.parse_pdsh_output((OURS / "pdsh-out-ok.stdout").read_text(),
                                             (OURS / "pdsh-out-ok.stderr").read_text())
    assert ans == {"node1": "node1", "node2": "node2", "node3": "node3"} and err == {}
    assert pdsh.missing_answers(["node1", "node2", "node3"], ["node1", "node2", "node3"], ans, err) == []



def test_without_known_hostnames_an_alias_passes_and_another_nodes_name_fails():
    """provision verify knows each node's inventory name, not its hostname: a cluster whose inventory says
    gpu1..3 for the machines node1..3 answers (the landing check proves where each name lands), but
    a name that answers as another node of the cluster reaches the wrong machine."""
    ans, err, _ = pdsh.parse_pdsh_output((OURS / "pdsh-out-ok.stdout").read_text(),
                                         (OURS / "pdsh-out-ok.stderr").read_text())
    aliases = {"gpu%d" % i: ans["node%d" % i] for i in (1, 2, 3)}
    assert pdsh.missing_answers(["gpu1", "gpu2", "gpu3"], None, aliases, err) == []
    # node2 and node3 swapped in /etc/hosts of the node pdsh runs from
    swapped = dict(ans, node2="node3", node3="node2")
    assert pdsh.missing_answers(["node1", "node2", "node3"], None, swapped, err) == [
        "node2: answered node3, another node of the cluster (the name reaches the wrong machine)",
        "node3: answered node2, another node of the cluster (the name reaches the wrong machine)"]
    # a ring's targets are checked against every node of the hosts file
    assert pdsh.missing_answers(["node2"], None, swapped, err, cluster=["node1", "node2", "node3"]) == [
        "node2: answered node3, another node of the cluster (the name reaches the wrong machine)"]
    assert pdsh.missing_answers(["node2"], None, {}, {"node2": "no route"}) == ["node2: no route"]

def test_pdsh_output_one_unresolvable():
    ans, err, fixes = pdsh.parse_pdsh_output((OURS / "pdsh-out-one-unresolvable.stdout").read_text(),
                                             (OURS / "pdsh-out-one-unresolvable.stderr").read_text())
    hosts = ["node1", "node2", "node3", "nosuchnode"]
    assert pdsh.missing_answers(hosts, hosts, ans, err) == [
        "nosuchnode: ssh: Could not resolve hostname nosuchnode: Name or service not known"]
    assert pdsh.missing_answers(["node1"], ["gpu-a"], ans, err) == ["node1: answered node1, expected gpu-a"]


def test_pdsh_output_host_key_changed_names_ssh_message_not_banner():
    ans, err, fixes = pdsh.parse_pdsh_output((OURS / "pdsh-out-host-key-changed.stdout").read_text(),
                                             (OURS / "pdsh-out-host-key-changed.stderr").read_text())
    assert ans == {"node1": "node1"}
    assert pdsh.missing_answers(["node1", "node2"], ["node1", "node2"], ans, err) == [
        "node2: Host key for [10.89.224.12]:2222 has changed and you have requested strict checking."]
    assert list(fixes) == ["node2"] and fixes["node2"][0] == "host_key_changed"
    assert "known_hosts" in fixes["node2"][1]
    # an unresolvable name is classified too; the ok run has nothing to fix
    assert pdsh.parse_pdsh_output("", (OURS / "pdsh-out-one-unresolvable.stderr").read_text())[2]["nosuchnode"][0] \
        == "name_unresolvable"
    assert pdsh.parse_pdsh_output("", (OURS / "pdsh-out-ok.stderr").read_text())[2] == {}
