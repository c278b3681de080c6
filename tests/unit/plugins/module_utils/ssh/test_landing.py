"""The SSH landing check (plugins/module_utils/ssh/landing.py) on real landing reports (tests/fixtures/runtime)."""

from __future__ import annotations

import pytest

from helpers import REPO
from ansible_collections.provision.cluster.plugins.module_utils.ssh import landing as LD

RT = REPO / "tests" / "fixtures" / "runtime"


# ---------------------------------------------------------------- landing


def _expected(name, address, token):
    return {"name": name, "address": address, "hostname": name, "token": token}


def test_landing_ok_and_wrong_node():
    ok = LD.parse_landing_report((RT / "landing-node1-to-node2-ok.txt").read_text())
    assert ok["hostname"] == "node2" and "10.89.231.12" in ok["addresses"]
    node2 = _expected("node2", "10.89.231.12", ok["token"])
    assert LD.landing_verdict("node2", node2, ok) == (True, "")
    wrong = LD.parse_landing_report((RT / "landing-node1-to-node2-wrong-node1.txt").read_text())
    good, reason = LD.landing_verdict("node2", node2, wrong)
    assert not good
    assert reason.startswith("`ssh node2` landed on node1, not node2: node-id is node1")
    assert "10.89.231.12 is not on its interfaces" in reason
    # both are containers of one host: boot_id alone cannot tell them apart
    assert ok["boot_id"] == wrong["boot_id"]


def test_landing_pair_from_a_captured_report():
    """The one parse-and-judge step shared by ssh_landing (its own ssh) and ssh_mesh_check (its reports)."""
    text = (RT / "landing-node1-to-node2-ok.txt").read_text()
    node2 = _expected("node2", "10.89.231.12", LD.parse_landing_report(text)["token"])
    pair = LD.landing_pair("node2", node2, text)
    assert pair["ok"] and pair["peer"] == "node2" and pair["reason"] == "" and pair["reported"]["hostname"] == "node2"
    wrong = LD.landing_pair("node2", node2, (RT / "landing-node1-to-node2-wrong-node1.txt").read_text())
    assert not wrong["ok"] and wrong["reason"].startswith("`ssh node2` landed on node1")
    with pytest.raises(ValueError):
        LD.landing_pair("node2", node2, "node2\n")


def test_landing_with_inventory_only_peers():
    ok = LD.parse_landing_report((RT / "landing-node1-to-node2-ok.txt").read_text())
    wrong = LD.parse_landing_report((RT / "landing-node1-to-node2-wrong-node1.txt").read_text())
    peer = {"name": "node2", "address": "10.89.231.12"}
    assert LD.landing_verdict("node2", peer, ok) == (True, "")
    good, reason = LD.landing_verdict("node2", peer, wrong)
    assert not good and "node-id is node1" in reason and "10.89.231.12 is not on its interfaces" in reason
    copied = dict(ok, token="node2 0000")  # same name, other nonce: a sibling made from node2's image
    good, reason = LD.landing_verdict("node2", dict(peer, token=ok["token"]), copied)
    assert not good and "nonce differs" in reason


def test_landing_on_host_without_token():
    wrong = LD.parse_landing_report((RT / "landing-node1-to-node2-wrong-node1.txt").read_text())
    wrong = dict(wrong, token="", hostname="node2")
    ok, reason = LD.landing_verdict("node2", _expected("node2", "10.89.231.11", "node2 abc"), wrong)
    assert not ok and "without /etc/provision/node-id" in reason


def test_check_landing_names_pair():
    results = [{"alias": "node1", "peer": "node1", "ok": True, "reason": ""},
               {"alias": "node2", "peer": "node2", "ok": False, "reason": "`ssh node2` landed on node1, not node2"}]
    c = LD.check_landing("node1", results)
    assert c["status"] == "fail" and c["pairs"] == ["node1->node2"]
    assert c["detail"].startswith("node1: `ssh node2` landed on node1") and "~/.ssh/config" in c["fix"]
    down = LD.check_landing("node1", [{"alias": "node2", "peer": "node2", "ok": False,
                                       "reason": "`ssh node2` failed: Permission denied (publickey)."}])
    assert "ssh_mesh" in down["fix"]
    assert LD.check_landing("node1", results[:1])["status"] == "pass"
    assert LD.check_landing("node1", [])["status"] == "skip"


def test_shared_host_identity_is_what_nccl_hashes():
    fx = REPO / "tests" / "fixtures" / "runtime"
    node1 = LD.parse_landing_report((fx / "landing-node1-to-node2-wrong-node1.txt").read_text())  # node1's report
    node2 = LD.parse_landing_report((fx / "landing-node1-to-node2-ok.txt").read_text())
    assert node1["hostname"] == "node1" and node2["hostname"] == "node2"
    assert node1["boot_id"] == node2["boot_id"]  # containers of one machine: one kernel, one boot id
    pairs = [{"alias": "node1", "peer": "node1", "ok": True, "reason": "", "reported": node1},
             {"alias": "node2", "peer": "node2", "ok": True, "reason": "", "reported": node2}]
    assert LD.shared_host_check("node1", pairs) is None  # hostnames differ: two hosts to NCCL
    # the same two containers when both carry the host's hostname (--network host)
    twin = [dict(pairs[0]), dict(pairs[1], reported=dict(node2, hostname="node1"))]
    check = LD.shared_host_check("node2", twin)
    assert check["status"] == "warn" and check["check"] == "host identity"
    assert check["detail"].startswith("node1 and node2 report the same hostname (node1) and boot id")
    assert "NCCL_HOSTID" in check["fix"] and "--hostname" in check["fix"]
    # a node not in the group, or a failed landing, is not reported
    assert LD.shared_host_check("node3", twin) is None
    assert LD.shared_host_check("node2", [twin[0], dict(twin[1], ok=False)]) is None
