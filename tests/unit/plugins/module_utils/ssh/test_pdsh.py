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
