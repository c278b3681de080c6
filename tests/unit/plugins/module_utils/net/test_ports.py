"""The /proc port parser (plugins/module_utils/net/ports.py) on real /proc/net/tcp captures."""

from __future__ import annotations

import os
import socket

from helpers import REPO
import pytest
from ansible_collections.provision.cluster.plugins.module_utils.net import ports

OURS = REPO / "tests" / "fixtures" / "ssh"


def test_decode_address_ipv4_and_ipv6():
    assert ports.decode_address("0100007F:1FA3") == ("127.0.0.1", 8099)
    assert ports.decode_address("0B85590A:08AE") == ("10.89.133.11", 2222)
    assert ports.decode_address("00000000000000000000000000000000:08AE") == ("::", 2222)
    assert ports.decode_address("00000000000000000000000001000000:0016") == ("::1", 22)


def test_h100_node_capture(fixtures_dir):
    text = (fixtures_dir / "h100-node" / "net" / "proc-net-tcp.txt").read_text()
    socks = ports.parse_proc_net_tcp(text)
    assert len(socks) == 3
    listen = [s for s in socks if s["state"] == "LISTEN"]
    assert [(s["local_address"], s["local_port"], s["inode"]) for s in listen] == [("0.0.0.0", 2024, 6177)]
    tw = [s for s in socks if s["state"] == "TIME_WAIT"]
    assert {s["local_port"] for s in tw} == {8099, 38518}
    assert all(s["inode"] == 0 for s in tw)
    # the tcp6 capture is a header only
    assert ports.parse_proc_net_tcp((fixtures_dir / "h100-node" / "net" / "proc-net-tcp6.txt").read_text()) == []


def test_h100_time_wait_does_not_hold_the_port(fixtures_dir):
    socks = ports.parse_proc_net_tcp((fixtures_dir / "h100-node" / "net" / "proc-net-tcp.txt").read_text())
    rep = ports.port_report(8099, socks, {}, {})
    assert not rep["held"] and not rep["listening"]
    assert rep["states"] == ["TIME_WAIT"]
    assert rep["summary"] == "8099 is free (only TIME_WAIT sockets without a process)"
    assert ports.check_port(rep, "free")["status"] == "pass"


def _lab_capture():
    socks = ports.parse_proc_net_tcp((OURS / "node1-proc-net-tcp.txt").read_text(), "tcp")
    socks += ports.parse_proc_net_tcp((OURS / "node1-proc-net-tcp6.txt").read_text(), "tcp6")
    owners, infos = {}, {}
    for line in (OURS / "node1-socket-owners.txt").read_text().splitlines():
        pid, comm, link = line.split()
        inode = int(link[len("socket:["):-1])
        owners.setdefault(inode, []).append(int(pid))
        infos[int(pid)] = {"pid": int(pid), "name": comm, "cmdline": ""}
    return socks, owners, infos


def test_lab_node_capture_sshd_and_python():
    socks, owners, infos = _lab_capture()
    sshd = ports.port_report(2222, socks, owners, infos)
    assert sshd["listening"] and sshd["held"]
    assert sshd["addresses"] == ["0.0.0.0:2222", "[::]:2222"]
    assert sshd["pids"] == [69]  # the listener, not the session sshd (350) of an accepted connection
    assert sshd["summary"] == "2222 is held by pid 69 (sshd)"
    rdzv = ports.port_report(29500, socks, owners, infos)
    assert rdzv["summary"] == "29500 is held by pid 560 (python3)"
    check = ports.check_port(rdzv, "free")
    assert check["status"] == "fail" and check["fix"] == "stop it: kill 560"
    assert ports.check_port(sshd, "free", ["sshd"])["status"] == "pass"
    assert ports.check_port(sshd, "listening", ["sshd"])["status"] == "pass"
    assert ports.check_port(rdzv, "listening", ["sshd"])["status"] == "fail"


def test_sshd_listening_on_another_port_is_named():
    # the seed's "sshd is running" with nothing on the cluster port: it listens on another one
    socks, owners, infos = _lab_capture()
    listening = sorted({s["local_port"] for s in socks if s["state"] == "LISTEN"})
    others = {r["port"]: sorted({x["name"] for x in r["processes"]})
              for r in (ports.port_report(p, socks, owners, infos) for p in listening)}
    assert others[2222] == ["sshd"] and others[29500] == ["python3"]
    cluster_port = ports.port_report(2200, socks, owners, infos)
    check = ports.check_port(cluster_port, "listening", ["sshd"], others)
    assert check["status"] == "fail"
    assert check["detail"] == "nothing listens on 2200; sshd listens on 2222"
    assert "set Port 2200" in check["fix"]
    # without the listeners, or when no allowed holder listens anywhere: the plain message
    assert ports.check_port(cluster_port, "listening", ["sshd"])["detail"] == "2200 is free"
    assert "set Port" not in ports.check_port(cluster_port, "listening", ["nginx"], others)["fix"]


def test_lab_node_capture_free_port_and_established():
    socks, owners, infos = _lab_capture()
    free = ports.port_report(29501, socks, owners, infos)
    assert free == {**free, "listening": False, "held": False, "pids": [], "summary": "29501 is free"}
    assert ports.check_port(free, "listening")["status"] == "fail"
    est = [s for s in socks if s["state"] == "ESTABLISHED"]
    assert ("10.89.133.11", "10.89.133.12", 2222) in {(s["local_address"], s["remote_address"], s["remote_port"])
                                                      for s in est}


def test_live_proc_finds_this_process():
    """port_facts on the real /proc of this machine: a loopback listener of the test itself."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        (rep,) = ports.port_facts([port])
        assert rep["listening"] and os.getpid() in rep["pids"]
        assert f"pid {os.getpid()} (" in rep["summary"]
        assert any(p["name"].startswith(("python", "pytest")) for p in rep["processes"])
    (after,) = ports.port_facts([port])
    assert not after["listening"]


@pytest.mark.parametrize("line", ["", "  sl  local_address rem_address", "   0: garbage"])
def test_unparsable_lines_are_skipped(line):
    assert ports.parse_proc_net_tcp(line) == []
