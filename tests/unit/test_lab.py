"""The lab's addressing and `up` plan, without podman."""

from __future__ import annotations

import ipaddress
import subprocess

import helpers  # noqa: F401
import pytest

from provision import lab as lab_core


@pytest.mark.parametrize("k", [2, 77, 254])
def test_every_node_up_to_the_limit_has_valid_distinct_addresses(k):
    """Issue 24: node 16 got 10.90.77.256/28. Every index up to MAX_NODES must get a valid
    cluster address and a /28 side network of its own that overlaps nothing."""
    assert lab_core.MAX_NODES >= 32
    cluster = ipaddress.ip_network(f"10.89.{k}.0/24")
    nets, addrs = [], set()
    for idx in range(1, lab_core.MAX_NODES + 1):
        addr, side = lab_core.node_addresses(k, idx)
        net = ipaddress.ip_network(lab_core.side_subnet(k, idx))
        assert net.prefixlen == 28
        assert ipaddress.ip_address(addr) in cluster
        assert ipaddress.ip_address(side) in net and ipaddress.ip_address(side) != net.network_address + 1
        assert not net.overlaps(cluster)
        nets.append(net)
        addrs.update((addr, side))
    assert len(addrs) == 2 * lab_core.MAX_NODES
    for i, a in enumerate(nets):
        for b in nets[i + 1:]:
            assert not a.overlaps(b), (a, b)


def test_first_fifteen_nodes_keep_their_addresses():
    """Labs that exist keep their addressing: nodes 1-15 are where they always were."""
    for idx in range(1, 16):
        assert lab_core.node_addresses(42, idx) == (f"10.89.42.{10 + idx}", f"10.90.42.{16 * idx + 2}")
    assert lab_core.node_addresses(42, 16)[1] == "10.91.42.2"
    assert lab_core.node_addresses(42, 32)[1] == "10.92.42.2"


def test_subnet_index_sees_the_side_networks_of_big_labs(monkeypatch):
    name = "big"
    k = lab_core._preferred_index(name)
    monkeypatch.setattr(lab_core, "_networks", lambda: [{"name": "x-side20", "subnets": [{"subnet": f"10.91.{k}.64/28"}]}])
    assert lab_core.subnet_index(name) != k


def test_beyond_the_limit_nothing_starts(monkeypatch):
    monkeypatch.setattr(lab_core, "setup_host", lambda **kw: pytest.fail("must not touch the host"))
    monkeypatch.setattr(lab_core, "podman", lambda *a, **kw: pytest.fail("must not run podman"))
    with pytest.raises(lab_core.LabError, match=f"between 1 and {lab_core.MAX_NODES}"):
        lab_core.up(lab_core.LabSpec(name="x", nodes=lab_core.MAX_NODES + 1), setup=False)


def test_a_node_that_fails_to_start_takes_back_what_this_run_created(monkeypatch):
    """Issue 24: `up --nodes 16` left 15 nodes running after failing on the 16th."""
    calls: list[tuple[str, ...]] = []

    def fake_podman(*args, check=True, timeout=600):
        calls.append(args)
        if args[0] == "run" and "x-node3" in args:
            raise lab_core.LabError("`podman run` failed: boom")
        rc = 1 if args[:2] == ("network", "exists") else 0
        return subprocess.CompletedProcess(args, rc, "", "")

    monkeypatch.setattr(lab_core, "podman", fake_podman)
    monkeypatch.setattr(lab_core, "build_image", lambda flavour, **kw: "localhost/img:x")
    monkeypatch.setattr(lab_core, "subnet_index", lambda name: 50)
    monkeypatch.setattr(lab_core, "list_containers", lambda name: [])
    with pytest.raises(lab_core.LabError, match="removed the 3 node"):
        lab_core.up(lab_core.LabSpec(name="x", nodes=5), setup=False)
    removed = {a[-1] for a in calls if a[:2] == ("rm", "-f")}
    assert removed == {"x-node1", "x-node2", "x-node3"}
    assert not any(a[0] == "run" and "x-node4" in a for a in calls)
