"""Node snapshots captured from real nodes and containers (tests/fixtures/runtime/README.md), by name
(shared by the node_facts and limits unit tests)."""

from __future__ import annotations

import json

from helpers import REPO

RT = REPO / "tests" / "fixtures" / "runtime"

HEALTHY = "podman-node1-healthy"
LOWLIM = "podman-node2-memlock64k-nofile1024"
SHM64 = "podman-shm64m"
IPC_HOST = "podman-ipc-host"
IPC_PID_HOST = "podman-ipc-host-pid-host"
VM = "controller-firecracker-vm"


def snap(name):
    return json.loads((RT / f"{name}.json").read_text())
