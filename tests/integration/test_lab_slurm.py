"""A real SLURM in the lab (issue 23): `provision lab up --slurm` gives slurmctld on node1,
slurmd on every node and a partition of all nodes, on both node flavours: nodes without init
(daemons started directly) and systemd nodes (Debian's units, enabled). `sinfo` shows the nodes
idle and `srun -N2 hostname` runs on both.

Two 2-node labs: the default image (SLURM from the mirror built for it) and bare systemd.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import bounds
from helpers import ansible_env, lab_cmd, lab_name, node_exec, tool, REPO

from provision.lab import wait_booted

pytestmark = pytest.mark.lab

FLAVOURS = {"noinit": [], "systemd": ["--init", "systemd", "--image", "bare"]}


@pytest.fixture(scope="module", params=list(FLAVOURS))
def lab(request, lab_factory):
    t0 = time.monotonic()
    made = lab_factory(lab_name(f"slurm-{request.param}"), nodes=2, options=["--slurm", *FLAVOURS[request.param]])
    print(f"2-node {request.param} lab with SLURM up in {time.monotonic() - t0:.1f} s")
    made.flavour = request.param
    yield made
    made.down()


def _sinfo(lab) -> list[tuple[str, str]]:
    out = node_exec(lab.name, 1, "sinfo -h -N -p lab -o '%N %t'").stdout
    return [tuple(line.split()) for line in out.splitlines() if line.strip()]


def test_sinfo_shows_every_node_idle_and_srun_runs_on_both(lab):
    assert _sinfo(lab) == [("node1", "idle"), ("node2", "idle")]
    out = node_exec(lab.name, 1, "timeout 60 srun -N2 hostname", timeout=bounds.COMMAND).stdout.split()
    assert sorted(out) == ["node1", "node2"]
    doc = json.loads(lab_cmd("status", "--json", lab_name=lab.name).stdout)
    assert doc["slurm"] == {"controller": "node1", "partition": "lab", "nodes": ["node1", "node2"], "cluster": "lab"}
    inv = subprocess.run([tool("ansible-inventory"), "-i", str(REPO / "inventory/lab"), "--host", "node2"],
                         env=ansible_env(lab.name), capture_output=True, text=True, check=True, cwd=REPO)
    hv = json.loads(inv.stdout)
    assert (hv["lab_slurm_controller"], hv["lab_slurm_partition"]) == ("node1", "lab")
    # slurmctld only on node1; the lab wrote no apt source into the nodes
    assert node_exec(lab.name, 2, "pgrep -x slurmctld", check=False).returncode == 1
    assert node_exec(lab.name, 2, "grep -rl 10.89 /etc/apt/ 2>/dev/null", check=False).stdout == ""


def test_a_restarted_node_rejoins(lab):
    """systemd: slurmd and munge are enabled units, they come back with the node by themselves;
    no init: the restart loses them, `lab up --slurm` starts them again."""
    subprocess.run(["podman", "restart", f"{lab.name}-node2"], capture_output=True, check=True, timeout=bounds.COMMAND)
    if lab.flavour == "systemd":
        wait_booted([f"{lab.name}-node2"], timeout=bounds.POLL)
        assert node_exec(lab.name, 2, "systemctl is-active munge slurmd").stdout.split() == ["active", "active"]
    else:
        assert node_exec(lab.name, 2, "pgrep -x slurmd", check=False).returncode == 1
        t0 = time.monotonic()
        lab_cmd("up", "--nodes", "2", "--slurm", *FLAVOURS[lab.flavour], lab_name=lab.name)
        print(f"lab up --slurm after a restart: {time.monotonic() - t0:.1f} s")
    # a restarted slurmd registers at once; a node marked not responding (idle*) meanwhile is cleared by
    # slurmctld's next ping (every 30 s in the lab): two ping periods and more
    deadline = time.monotonic() + 2 * bounds.POLL
    while _sinfo(lab) != [("node1", "idle"), ("node2", "idle")] and time.monotonic() < deadline:
        time.sleep(1)
    assert _sinfo(lab) == [("node1", "idle"), ("node2", "idle")]
    assert sorted(node_exec(lab.name, 1, "timeout 60 srun -N2 hostname", timeout=bounds.COMMAND).stdout.split()) == ["node1", "node2"]
