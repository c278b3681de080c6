"""`provision verify` when no node answers: every node is named, with its cause and fix (exit 1).

Only loopback is contacted: closed ports. It used to end with "ansible gave no result" (exit 2):
the report is built once on the controller, in a play every node had left.
"""

from __future__ import annotations

import json
import socket
import subprocess

from helpers import REPO, ansible_env, tool


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_node_down_is_named(tmp_path):
    ports = [_closed_port(), _closed_port()]
    inv = tmp_path / "hosts.ini"
    inv.write_text("[cluster]\n" + "".join(f"n{i} ansible_host=127.0.0.1 ansible_port={p} ansible_user=root\n"
                                           for i, p in enumerate(ports, 1)))
    proc = subprocess.run([tool("provision"), "verify", "-i", str(inv), "--json"], cwd=REPO,
                          env=ansible_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    reach = [c for c in doc["checks"] if c["check"] == "node reachable"]
    assert [(c["node"], c["status"]) for c in reach] == [("n1", "fail"), ("n2", "fail")]
    for c, port in zip(reach, ports):
        assert f"nothing listens on 127.0.0.1 port {port}" in c["detail"] and c["fix"], c
    assert [n["reachable"] for n in doc["nodes"]] == [False, False]
