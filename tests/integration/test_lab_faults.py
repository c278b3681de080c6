"""`provision lab fault` (issue 21, "testing for real"): each fault, made from the controller,
has its effect on the node's cluster link, and --clear takes it back. Measured with plain
Python sockets between the lab's own containers.

One 3-node lab (the default image) serves the module. Every figure is judged against one taken in
the same test without the fault (a ratio), or against a floor the fault sets (a delay only adds): the
machine's load moves both alike.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import bounds
from helpers import ansible_env, lab_cmd, lab_name, node_exec, tool, REPO

from provision.lab import faults

pytestmark = pytest.mark.lab

PROBE = r'''
import socket, statistics, sys, time
mode = sys.argv[1]
if mode == "rtt":  # TCP handshake time to a closed port (SYN -> RST), median of 10
    out = []
    for _ in range(10):
        t0 = time.perf_counter()
        try:
            socket.create_connection((sys.argv[2], 9), timeout=3).close()
        except OSError:
            pass
        out.append((time.perf_counter() - t0) * 1000)
    print("%.2f" % statistics.median(out))
elif mode == "sink":  # TCP: read and drop
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 5001)); srv.listen(8)
    while True:
        c, _ = srv.accept()
        while c.recv(1 << 20):
            pass
        c.close()
elif mode == "send":  # TCP throughput for N seconds, Mbit/s
    s = socket.create_connection((sys.argv[2], 5001), timeout=5); buf = b"x" * (1 << 20); n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < float(sys.argv[3]):
        n += s.send(buf)
    s.close()
    print("%.0f" % (n * 8 / (time.perf_counter() - t0) / 1e6))
elif mode == "udpcount":  # count datagrams for N seconds
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 5002)); u.settimeout(0.2)
    n, end = 0, time.time() + float(sys.argv[2])
    while time.time() < end:
        try:
            u.recv(2048); n += 1
        except OSError:
            pass
    print(n)
elif mode == "udpsend":  # N datagrams, paced (10 every 5 ms: the receiver's buffer never fills)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(int(sys.argv[3])):
        u.sendto(b"y" * 200, (sys.argv[2], 5002))
        if i % 10 == 0:
            time.sleep(0.005)
'''


@pytest.fixture(scope="module")
def lab(lab_factory):
    made = lab_factory(lab_name("faults"), nodes=3)
    made.status = json.loads(lab_cmd("status", "--json", lab_name=made.name).stdout)
    made.addr = {n["index"]: n["address"] for n in made.status["nodes"]}
    for i in (1, 2, 3):
        subprocess.run(["podman", "exec", "-i", f"{made.name}-node{i}", "sh", "-c", "cat > /tmp/probe.py"],
                       input=PROBE, text=True, check=True, capture_output=True)
    for i in (2, 3):
        subprocess.run(["podman", "exec", "-d", f"{made.name}-node{i}", "python3", "/tmp/probe.py", "sink"],
                       check=True, capture_output=True)
        # until the sink listens (5001 = 0x1389, LISTEN = 0A)
        node_exec(made.name, i, f"i=0; until grep -q ':1389 .* 0A ' /proc/net/tcp || [ $i -ge {int(bounds.POLL / bounds.POLL_STEP)} ]; "
                                f"do sleep {bounds.POLL_STEP}; i=$((i+1)); done; grep -q ':1389 .* 0A ' /proc/net/tcp")
    yield made
    made.down()


def _probe(lab, node: int, *args) -> float:
    return float(node_exec(lab.name, node, "python3 /tmp/probe.py " + " ".join(map(str, args)),
                           timeout=bounds.COMMAND).stdout.strip())


def _fault(lab, *args, check=True):
    return lab_cmd("fault", *args, lab_name=lab.name, check=check)


def _faults(lab) -> dict:
    doc = json.loads(lab_cmd("status", "--json", lab_name=lab.name, check=False).stdout)
    return {n["name"]: n["faults"] for n in doc["nodes"]}


def test_rate_limits_the_nodes_link_both_ways_and_no_other(lab):
    before = _probe(lab, 1, "send", lab.addr[2], 1)
    _fault(lab, "node2", "--rate", "50mbit")
    assert _faults(lab)["node2"] == {"rate": "50mbit", "rate_direction": "both"}
    into, out_of = _probe(lab, 1, "send", lab.addr[2], 2), _probe(lab, 2, "send", lab.addr[3], 2)
    other = _probe(lab, 1, "send", lab.addr[3], 1)
    _fault(lab, "node2", "--clear")
    after = _probe(lab, 1, "send", lab.addr[2], 1)
    print(f"node1->node2 Mbit/s: {before:.0f} before, {into:.0f} limited (node2->node3 {out_of:.0f}, "
          f"node1->node3 {other:.0f}), {after:.0f} cleared")
    # a limit is a ceiling (load cannot lift it); the links it does not limit carry several times more
    assert into < 65 and out_of < 65
    assert min(before, other, after) > 4 * max(into, out_of)
    assert _faults(lab)["node2"] == {}


def test_delay_adds_to_every_round_trip_of_that_node_only(lab):
    before = _probe(lab, 1, "rtt", lab.addr[2])
    _fault(lab, "node2", "--delay", "10ms")
    helper = faults.load(lab.name)["node2"]["delayer_pid"]
    assert faults._delayer_alive(helper)
    delayed, other = _probe(lab, 1, "rtt", lab.addr[2]), _probe(lab, 1, "rtt", lab.addr[3])
    _fault(lab, "node2", "--clear")
    after = _probe(lab, 1, "rtt", lab.addr[2])
    print(f"node1->node2 handshake ms: {before} before, {delayed} with 10ms each way, {after} cleared")
    # a delay only adds (20 ms per round trip: a floor load cannot lower); the other link and the
    # cleared one lack those 20 ms (medians of 10 handshakes each)
    assert delayed >= 18
    assert max(before, other, after) < delayed - 10
    assert not faults._delayer_alive(helper), "--clear stops the delay helper"


def _udp_received(lab, count: int) -> int:
    """Datagrams node2 received of COUNT that node1 sent (the counter listens before the sender starts)."""
    counter = subprocess.Popen(["podman", "exec", f"{lab.name}-node2", "python3", "/tmp/probe.py", "udpcount", "8"],
                               stdout=subprocess.PIPE, text=True)
    try:
        # until the counter's socket is bound (5002 = 0x138A in /proc/net/udp)
        node_exec(lab.name, 2, f"i=0; until grep -q ':138A ' /proc/net/udp || [ $i -ge {int(bounds.POLL / bounds.POLL_STEP)} ]; "
                               f"do sleep {bounds.POLL_STEP}; i=$((i+1)); done")
        node_exec(lab.name, 1, f"python3 /tmp/probe.py udpsend {lab.addr[2]} {count}")
        return int(counter.communicate(timeout=bounds.COMMAND)[0].strip())
    finally:
        counter.kill()


def test_loss_drops_that_share_of_the_packets(lab):
    clean = _udp_received(lab, 2000)
    _fault(lab, "node2", "--loss", "30%", "--direction", "in")
    try:
        received = _udp_received(lab, 2000)
    finally:
        _fault(lab, "node2", "--clear")
    print(f"30% loss: {received} of 2000 datagrams arrived ({clean} without the fault)")
    # against the same count without the fault (what the machine's load drops is in both):
    # 70% expected; 2,000 datagrams put the binomial spread near 1%
    assert clean >= 1000 and 0.55 <= received / clean <= 0.85


def test_mtu_of_one_node(lab):
    _fault(lab, "node2", "--mtu", "1280")
    mtus = [node_exec(lab.name, i, "cat /sys/class/net/eth1/mtu").stdout.strip() for i in (1, 2, 3)]
    assert mtus == ["1500", "1280", "1500"]
    assert _faults(lab)["node2"] == {"mtu": 1280}
    _fault(lab, "node2", "--clear")
    assert node_exec(lab.name, 2, "cat /sys/class/net/eth1/mtu").stdout.strip() == "1500"


def test_a_frozen_node_answers_nothing_within_a_bound_and_thaws(lab):
    before = _probe(lab, 1, "send", lab.addr[2], 1)
    _fault(lab, "node2", "--freeze")
    try:
        proc = node_exec(lab.name, 1, f"timeout 20 python3 /tmp/probe.py send {lab.addr[2]} 3", check=False,
                         timeout=bounds.COMMAND)
        # the handshake completes (the kernel answers), then nothing: the send blocks until `timeout` ends it,
        # or, once the frozen peer's buffers are full (sooner on a loaded host), the probe's own 5 s send bound
        stalled = proc.returncode == 124 or (proc.returncode == 1 and "TimeoutError" in proc.stderr)
        assert stalled, (proc.returncode, proc.stdout, proc.stderr)
        assert _faults(lab)["node2"] == {"frozen": True}
        doc = json.loads(lab_cmd("status", "--json", lab_name=lab.name, check=False).stdout)
        assert doc["nodes"][1]["state"] == "paused" and doc["up"] is False
        inv = subprocess.run([tool("ansible-inventory"), "-i", str(REPO / "inventory/lab"), "--host", "node2"],
                             env=ansible_env(lab.name), capture_output=True, text=True, check=True, cwd=REPO)
        assert json.loads(inv.stdout)["lab_state"] == "paused"
    finally:
        _fault(lab, "node2", "--thaw")
    assert _probe(lab, 1, "send", lab.addr[2], 1) > before / 4   # carries again, as before the freeze
    assert _faults(lab)["node2"] == {}


def test_a_restart_ends_the_faults_and_errors_name_the_fix(lab):
    _fault(lab, "node3", "--rate", "50mbit")
    subprocess.run(["podman", "restart", f"{lab.name}-node3"], capture_output=True, check=True, timeout=bounds.COMMAND)
    assert _faults(lab)["node3"] == {}  # a new network namespace: nothing of it is left
    bad = _fault(lab, "node9", "--rate", "1mbit", check=False)
    assert bad.returncode == 1 and "has no node9" in bad.stdout + bad.stderr
    bad = _fault(lab, "node2", "--rate", "fast", check=False)
    assert bad.returncode == 1 and "e.g. 100mbit" in bad.stdout + bad.stderr
