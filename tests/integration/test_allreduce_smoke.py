"""The allreduce_smoke stage on a real 2-node lab: a correct, timed all-reduce, and the failures it
must name, each well before the bound that would otherwise end it, without leaving a worker behind.

The lab is the session's converged 2-node lab (site.yml green: torch 2.13.0 in /opt/provision/venv,
the environment block, the mesh), reset to its snapshot before the next module that uses it.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

import bounds
from helpers import node_exec, run_playbook, tool

pytestmark = pytest.mark.lab

PLAYBOOK = "playbooks/allreduce_smoke.yml"
# small and quick: the lab shares 2 cores with everything else
QUICK = {"allreduce_smoke_sizes": ["64K", "4M"], "allreduce_smoke_iters": 5,
         "allreduce_smoke_tcp_probe_seconds": 0.5}


@pytest.fixture(scope="module")
def lab(scratch_lab):
    status = json.loads(subprocess.run([tool("provision"), "lab", "status", "--name", scratch_lab.name, "--json"],
                                       capture_output=True, text=True, check=True, timeout=bounds.COMMAND).stdout)
    scratch_lab.nodes_info = {n["name"]: n for n in status["nodes"]}
    return scratch_lab


def smoke(lab, **extra_vars):
    start = time.monotonic()
    res = run_playbook(PLAYBOOK, lab_name=lab.name, extra_vars={**QUICK, **extra_vars},
                       timeout=bounds.STAGES)
    res.wall = time.monotonic() - start
    return res


def workers_left(lab) -> list[str]:
    left = []
    for node in (1, 2):
        ps = node_exec(lab.name, node, "ps -eo pid,pgid,args", check=False).stdout
        left += [f"node{node}: {ln.strip()}" for ln in ps.splitlines() if "allreduce_worker" in ln]
    return left


def result_file(lab) -> dict:
    return json.loads(node_exec(lab.name, 1, "cat /root/.cache/provision/allreduce/result.json").stdout)


def test_gloo_static_all_reduce_is_correct_timed_and_clean(lab):
    res = smoke(lab)
    assert res.rc == 0, res
    assert "sum correct" in res.stdout, res
    assert "busbw/TCP ratio:" in res.stdout and "TCP one-way node1 -> node2" in res.stdout, res
    assert res.changed == 0, res
    data = result_file(lab)
    assert data["correct"] and data["world_size"] == 2 and data["backend"] == "gloo"
    assert [row["bytes"] for row in data["rows"]] == [64 << 10, 4 << 20]
    assert all(row["busbw"] == row["algbw"] > 0 for row in data["rows"])   # n=2: busbw == algbw
    assert data["tcp_gbps"] > 0 and data["ratio"] > 0
    # the ring probe: both directions at once, each link measured, and busbw read against it
    assert sorted((p["src"], p["dst"]) for p in data["tcp_ring"]) == [("node1", "node2"), ("node2", "node1")]
    assert data["tcp_ring_gbps"] > 0 and data["ratio_ring"] > 0 and "TCP ring (all links at once)" in res.stdout
    # the workers used the cluster interface (eth1), four gloo devices on it (the role default)
    assert data["interfaces"] == {"node1": "eth1,eth1,eth1,eth1", "node2": "eth1,eth1,eth1,eth1"}
    assert workers_left(lab) == []


def test_c10d_rendezvous_and_busbw_threshold(lab):
    res = smoke(lab, allreduce_smoke_rendezvous="c10d", allreduce_smoke_min_busbw=1000)
    assert res.rc != 0, res
    assert "sum correct" in res.stdout, res   # c10d worked: the all-reduce ran and was right
    assert "is below allreduce_smoke_min_busbw 1000" in res.stdout, res
    assert workers_left(lab) == []


def test_master_port_held_fails_fast_naming_the_holder(lab):
    marker = "held-by-smoke-test"
    subprocess.run(["podman", "exec", "-d", f"{lab.name}-node1", "python3", "-c",
                    # SO_REUSEADDR: the previous tests' connections leave port 29500 in TIME_WAIT
                    "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                    "s.bind(('0.0.0.0', 29500)); s.listen(); time.sleep(300)",
                    marker], check=True, timeout=bounds.COMMAND)
    holder = ""
    deadline = time.monotonic() + bounds.POLL
    while not holder and time.monotonic() < deadline:
        ps = node_exec(lab.name, 1, "ps -eo pid,args").stdout
        holder = next((ln.split()[0] for ln in ps.splitlines() if marker in ln), "")
        time.sleep(bounds.POLL_STEP)
    assert holder, "the listener did not start"
    # until it listens (29500 = 0x733C, LISTEN = 0A)
    node_exec(lab.name, 1, f"i=0; until grep -q ':733C .* 0A ' /proc/net/tcp || [ $i -ge {int(bounds.POLL / bounds.POLL_STEP)} ]; "
                           f"do sleep {bounds.POLL_STEP}; i=$((i+1)); done; grep -q ':733C .* 0A ' /proc/net/tcp")
    try:
        outer = 600
        res = smoke(lab, allreduce_smoke_timeout=outer)
        assert res.rc != 0, res
        assert f"master port 29500 is held by pid {holder} (python3)" in res.output, res
        assert "Start the workers" not in res.stdout   # failed before any worker started
        assert bounds.well_before(res.wall, outer), res.wall   # named, not waited out
        assert workers_left(lab) == []
    finally:
        node_exec(lab.name, 1, f"kill {holder}", check=False)


def test_unreachable_master_is_named_at_once_and_nothing_is_left(lab):
    side = lab.nodes_info["node1"]["side_address"]   # node1's eth0: node2 has no route to it
    outer = 300
    res = smoke(lab, cluster_master_addr=side, allreduce_smoke_rendezvous_timeout=20, allreduce_smoke_timeout=outer)
    assert res.rc != 0, res
    assert f"node2: cannot reach the master {side}:29500: no route" in res.output, res
    assert [f["check"] for f in result_file(lab)["failures"]] == ["peer_unreachable"]
    for node in (1, 2):
        status = json.loads(node_exec(lab.name, node, "cat /root/.cache/provision/allreduce/run/status.json").stdout)
        # time to diagnosis on the node: the rendezvous bound (20 s) ends it, not the outer one
        assert status["state"] == "failed" and bounds.well_before(status["elapsed"], outer), (node, status)
    assert workers_left(lab) == []


def test_outer_timeout_kills_every_worker(lab):
    side = lab.nodes_info["node1"]["side_address"]
    # node2 cannot reach the master (no route: it fails at once); the master's rendezvous would wait
    # 300 s for it: the outer timeout (20 s) must end that wait and kill the master's whole group
    res = smoke(lab, cluster_master_addr=side, allreduce_smoke_rendezvous_timeout=300, allreduce_smoke_timeout=20)
    assert res.rc != 0, res
    # both waits (the master for node2, node2's connect retries) were ended by the outer timeout, not by
    # the rendezvous bound
    for node in (1, 2):
        status = json.loads(node_exec(lab.name, node, "cat /root/.cache/provision/allreduce/run/status.json").stdout)
        assert status["state"] == "timeout" and status["timeout"] == 20 and status["elapsed"] < 300, (node, status)
    # the report names the cause (node2 cannot reach the master), not the master's wait
    assert f"node2: cannot reach the master {side}:29500: no route" in res.output, res
    assert [f["check"] for f in result_file(lab)["failures"]] == ["peer_unreachable"]
    assert workers_left(lab) == []
