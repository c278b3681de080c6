"""The same platform on every node (plugins/module_utils/verify/consistency.py)."""

from __future__ import annotations

import helpers  # noqa: F401
from ansible_collections.provision.cluster.plugins.module_utils.verify.consistency import compare

SAME = {"mtu": 1500, "speed": 10000, "nic_driver": "veth", "kernel": "6.1.0-27-amd64"}


def test_an_mtu_that_differs_fails_naming_node_and_value():
    values = {"n1": dict(SAME), "n2": dict(SAME), "n3": dict(SAME, mtu=9000), "n4": dict(SAME)}
    out = {c["node"]: c for c in compare(values)}
    assert out["n3"]["status"] == "fail"
    assert out["n3"]["detail"] == "MTU of the NCCL interface 9000 while 3 other node(s) have 1500"
    assert out["n3"]["fix"].startswith("set the same MTU on every node's cluster interface")
    assert {out[n]["status"] for n in ("n1", "n2", "n4")} == {"pass"}


def test_other_differences_warn_and_several_are_listed_worst_first():
    values = {"n1": dict(SAME), "n2": dict(SAME, kernel="6.1.0-28-amd64", mtu=9000), "n3": dict(SAME)}
    (c,) = [c for c in compare(values) if c["node"] == "n2"]
    assert c["status"] == "fail" and c["detail"].startswith("MTU of the NCCL interface 9000")
    assert "kernel release 6.1.0-28-amd64 while 2 other node(s) have 6.1.0-27-amd64" in c["detail"]
    warn = compare({"a": dict(SAME), "b": dict(SAME, nvidia_driver="550.54"), "c": dict(SAME, nvidia_driver="535.1"),
                    "d": dict(SAME, nvidia_driver="550.54")})
    assert [x["status"] for x in warn] == ["pass", "pass", "warn", "pass"]


def test_fields_read_on_one_node_only_and_empty_nodes():
    out = compare({"a": {"mtu": 1500}, "b": {}})
    assert [c["status"] for c in out] == ["pass", "skip"]
