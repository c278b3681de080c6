"""A real SLURM in the lab (`provision lab up --slurm`): lab infrastructure, not a product
feature (users' clusters have their SLURM; installing it is not this project's job).

- Debian's own packages (munge, slurmd, slurmctld, slurm-client: slurm-wlm's parts), installed
  on every node from the lab's package mirror with apt options pointing at it for that one
  command (no apt source is written into the nodes).
- One munge key for the lab (random, made on the controller), munged on every node.
- slurmctld on node1, slurmd on every node, one partition `lab` of all nodes (Default=YES).
  Nodes are named node1..N as their hostnames and reached at their cluster addresses
  (NodeAddr, and SlurmctldHost=node1(address)): no name resolution needed.
- Started as the flavour has it: on systemd nodes the Debian units, enabled (they come back
  after a restart, as on a VM); on nodes without init the daemons directly (a restart loses
  them; `provision lab up --slurm` starts them again).
- No cgroups: proctrack/linuxproc, task/none (containers share the host's cgroup tree).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from ._base import LabError, _run, podman

SLURM_PACKAGES = ["munge", "slurmd", "slurmctld", "slurm-client"]
PARTITION = "lab"
CLUSTER_NAME = "lab"
READY_TIMEOUT = 90


def slurm_conf(nodes: list[dict], *, cpus: int = 2, memory_mb: int = 1000) -> str:
    """slurm.conf for NODES ([{name, address}], node1 first: the controller)."""
    ctl = nodes[0]
    lines = [
        "# written by `provision lab up --slurm` (src/provision/lab/slurm.py)",
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={ctl['name']}({ctl['address']})",
        "SlurmUser=slurm",
        "AuthType=auth/munge",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        # the lab's nodes share the machine's cores with everything else: a ping slurmd answers late on a
        # busy machine marks the node "not responding" (idle*) until the next ping, which comes every
        # SlurmdTimeout/3: a longer message timeout, and pings every 30 s rather than every 100
        "MessageTimeout=30",
        "SlurmdTimeout=90",
        "MpiDefault=none",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
    ]
    for node in nodes:
        lines.append(f"NodeName={node['name']} NodeAddr={node['address']} CPUs={cpus} "
                     f"RealMemory={memory_mb} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _exec(container: str, script: str, *, stdin: bytes | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["podman", "exec", "-i", container, "sh", "-c", script], input=stdin,
                              capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"{container}: `{script[:60]}...` did not finish within {timeout:.0f} s") from exc


def _install(container: str, release: str, mirror_url: str) -> None:
    script = f"""
set -e
command -v slurmd >/dev/null && command -v slurmctld >/dev/null && command -v munged >/dev/null \
  && command -v sinfo >/dev/null && exit 0
echo 'deb [trusted=yes] {mirror_url}/{release} ./' > /tmp/provision-lab-slurm.list
o="-q -o Dir::Etc::SourceList=/tmp/provision-lab-slurm.list -o Dir::Etc::SourceParts=/dev/null"
o="$o -o Acquire::http::Timeout=20 -o Acquire::Retries=1 -o Dir::State::Lists=/tmp/provision-lab-slurm-lists"
mkdir -p /tmp/provision-lab-slurm-lists/partial
export DEBIAN_FRONTEND=noninteractive
apt-get $o update
# apt-get update exits 0 when a source fails to download: check that the mirror's index came
ls /tmp/provision-lab-slurm-lists | grep -q _Packages || {{ echo "E: no package index from {mirror_url}/{release}"; exit 1; }}
apt-get $o install -y --no-install-recommends {' '.join(SLURM_PACKAGES)}
rm -rf /tmp/provision-lab-slurm.list /tmp/provision-lab-slurm-lists
"""
    proc = _exec(container, script)
    if proc.returncode != 0:
        err = [line for line in proc.stdout.decode(errors="replace").splitlines()
               + proc.stderr.decode(errors="replace").splitlines() if line.startswith(("E:", "Err:"))]
        raise LabError(f"{container}: installing {', '.join(SLURM_PACKAGES)} from the lab mirror {mirror_url}/{release} "
                       f"failed ({err[-1] if err else 'exit %d' % proc.returncode}); run `provision lab up --slurm` again")


_CONFIGURE = """
set -e
cat > /etc/slurm/slurm.conf
mkdir -p /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
chown slurm:slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
"""

_KEY = """
set -e
umask 077
cat > /etc/munge/munge.key.new
chown munge:munge /etc/munge/munge.key.new
chmod 0400 /etc/munge/munge.key.new
if cmp -s /etc/munge/munge.key.new /etc/munge/munge.key; then rm /etc/munge/munge.key.new; echo same; \
else mv /etc/munge/munge.key.new /etc/munge/munge.key; echo changed; fi
"""


def _start(container: str, init: str, *, controller: bool, restart: bool) -> None:
    if init == "systemd":
        units = "munge slurmd" + (" slurmctld" if controller else "")
        verb = "restart" if restart else "start"
        script = f"set -e; systemctl enable -q {units}; systemctl {verb} {units}"
    else:
        # no init system: the daemons directly (munged as its user, as its unit would run it)
        kill = ("pkill -x slurmd || true; pkill -x slurmctld || true; pkill -x munged || true; "
                "i=0; while pgrep -x 'slurmd|slurmctld|munged' >/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; "
                if restart else "")
        script = (f"set -e; {kill}mkdir -p /run/munge; chown munge:munge /run/munge; "
                  "pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged; "
                  + ("pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld; " if controller else "")
                  + "pgrep -x slurmd >/dev/null || /usr/sbin/slurmd")
    proc = _exec(container, script, timeout=120)
    if proc.returncode != 0:
        raise LabError(f"{container}: starting SLURM failed ({proc.stderr.decode(errors='replace').strip()[-200:]}); "
                       f"see /var/log/slurm in the node")


def _key(state_dir) -> bytes:
    """The lab's munge key: made once, kept in the lab's state directory (mode 0600)."""
    path = state_dir / "munge.key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(1024))
    return path.read_bytes()


def setup(lab: str, nodes: list[dict], mirror_url: str, state_dir, *, log=print) -> dict:
    """Install, configure and start SLURM on NODES ([{name, container, address, os, init}],
    node1 first). Idempotent: installed packages, an unchanged config and running daemons stay."""
    if not nodes or nodes[0]["name"] != "node1":
        raise LabError("SLURM in the lab needs node1 (its controller)")
    t0 = time.monotonic()
    conf = slurm_conf(nodes).encode()
    key = _key(state_dir)

    def prepare(node: dict) -> bool:
        _install(node["container"], node["os"], mirror_url)
        old = _exec(node["container"], "cat /etc/slurm/slurm.conf 2>/dev/null").stdout
        changed = old != conf
        if changed:
            proc = _exec(node["container"], _CONFIGURE, stdin=conf)
            if proc.returncode != 0:
                raise LabError(f"{node['container']}: writing slurm.conf failed: {proc.stderr.decode().strip()[-200:]}")
        proc = _exec(node["container"], _KEY, stdin=key)
        if proc.returncode != 0:
            raise LabError(f"{node['container']}: writing the munge key failed: {proc.stderr.decode().strip()[-200:]}")
        return changed or proc.stdout.decode().strip() == "changed"

    with ThreadPoolExecutor(max_workers=8) as pool:
        changed = list(pool.map(prepare, nodes))
    restart = any(changed)
    # the controller first: the slurmds register with it
    _start(nodes[0]["container"], nodes[0]["init"], controller=True, restart=restart)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda n: _start(n["container"], n["init"], controller=False, restart=restart), nodes[1:]))
    wait_idle(nodes[0]["container"], len(nodes))
    info = {"controller": nodes[0]["name"], "partition": PARTITION, "nodes": [n["name"] for n in nodes],
            "cluster": CLUSTER_NAME}
    (state_dir / "slurm.json").write_text(json.dumps(info, indent=1) + "\n")
    log(f"SLURM: slurmctld on node1, slurmd on {len(nodes)} node(s), partition {PARTITION} "
        f"(ready in {time.monotonic() - t0:.0f} s)")
    return info


def wait_idle(controller: str, count: int, *, timeout: float = READY_TIMEOUT) -> None:
    """Until sinfo shows COUNT nodes idle in the partition (bounded)."""
    start = time.monotonic()
    last, resumed = "", False
    while time.monotonic() - start < timeout:
        proc = podman("exec", controller, "sinfo", "-h", "-p", PARTITION, "-N", "-o", "%N %t", check=False, timeout=30)
        last = proc.stdout.strip() or proc.stderr.strip()
        states = [line.split()[1] for line in proc.stdout.splitlines() if len(line.split()) == 2]
        if len(states) == count and all(s == "idle" for s in states):
            return
        if not resumed and time.monotonic() - start > timeout / 3 and any(s.startswith("down") for s in states):
            # a node restarted behind slurmctld's back stays down ("Not responding"): resume once
            _run(["podman", "exec", controller, "scontrol", "update", "nodename=ALL", "state=resume"], check=False)
            resumed = True
        time.sleep(1)
    raise LabError(f"SLURM: the {count} node(s) are not all idle after {timeout:.0f} s (sinfo: {last!r}); "
                   f"see /var/log/slurm/ in the nodes")
