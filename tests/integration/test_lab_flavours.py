"""Nodes like users' machines (issue 19): three Debian releases, systemd as PID 1 with sshd on
port 22, and bare images; what `podman restart` keeps on each kind of node.

One 3-node lab (bullseye, bookworm, trixie; systemd; bare) serves the whole module: conftest's
release_lab, which test_lab_mirror uses next.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import bounds
from helpers import RELEASES, ansible_env, lab_cmd, node_exec, tool, REPO

from provision.lab import wait_booted

pytestmark = pytest.mark.lab

# the OpenSSH each release ships (8.4 has neither sntrup761 nor mlkem768; 10.0 dropped DSA)
OPENSSH = {"bullseye": "OpenSSH_8.4", "bookworm": "OpenSSH_9.2", "trixie": "OpenSSH_10.0"}
PYTHON = {"bullseye": "3.9", "bookworm": "3.11", "trixie": "3.13"}


@pytest.fixture(scope="module")
def lab(release_lab):
    return release_lab


def _banner(lab, from_node: int, address: str, port: int) -> str:
    script = ("python3 - <<'EOF'\nimport socket\ntry:\n"
              f"    s = socket.create_connection(('{address}', {port}), timeout=5)\n"
              "    s.settimeout(5)\n    print(s.recv(200).decode().strip())\n"
              "except OSError as exc:\n    print('ERR', type(exc).__name__)\nEOF")
    return node_exec(lab.name, from_node, script).stdout.strip()


def _unsafe(value):
    return value.get("__ansible_unsafe", value) if isinstance(value, dict) else value


def test_status_and_inventory_name_each_nodes_kind(lab):
    nodes = lab.status["nodes"]
    assert [(n["os"], n["init"], n["bare"], n["flavour"]) for n in nodes] == \
        [(r, "systemd", True, "bare") for r in RELEASES]
    inv = subprocess.run([tool("ansible-inventory"), "-i", str(REPO / "inventory/lab"), "--list"],
                         env=ansible_env(lab.name), capture_output=True, text=True, check=True, cwd=REPO)
    hostvars = json.loads(inv.stdout)["_meta"]["hostvars"]
    for i, release in enumerate(RELEASES, start=1):
        hv = {k: _unsafe(v) for k, v in hostvars[f"node{i}"].items()}
        assert (hv["lab_os"], hv["lab_init"], hv["lab_bare"], hv["lab_state"]) == (release, "systemd", True, "running")
        codename = node_exec(lab.name, i, ". /etc/os-release; echo $VERSION_CODENAME").stdout.strip()
        assert codename == release
    # a second `up` with the same options is a no-op: the same containers, not restarted
    def started():
        return subprocess.run(["podman", "ps", "--filter", f"label=provision.lab={lab.name}", "--format",
                               "{{.Names}} {{.ID}} {{.StartedAt}}"], capture_output=True, text=True, check=True,
                              timeout=bounds.COMMAND).stdout
    before = started()
    again = lab_cmd("up", "--nodes", "3", "--os", ",".join(RELEASES), "--init", "systemd", "--image", "bare", lab_name=lab.name)
    assert started() == before and "started " not in again.stdout + again.stderr


def test_a_bare_systemd_node_is_a_fresh_vm(lab):
    nodes = lab.status["nodes"]
    host_keys = set()
    for i, release in enumerate(RELEASES, start=1):
        out = node_exec(lab.name, i, """
            echo "pid1=$(cat /proc/1/comm)"
            echo "state=$(systemctl is-system-running)"
            echo "ssh=$(systemctl is-enabled ssh.service)/$(systemctl is-active ssh.service)"
            for t in gcc g++ make pdsh iperf3 ip sudo; do command -v $t >/dev/null && echo "has=$t"; done
            python3 -c 'import ensurepip' 2>/dev/null && echo has=ensurepip
            echo "python=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
            command -v apt-get >/dev/null && echo apt=yes
            test -e /usr/sbin/policy-rc.d && echo has=policy-rc.d
            grep -rhs '^deb \\|^URIs:' /etc/apt/sources.list /etc/apt/sources.list.d/ | sort -u | sed 's/^/source=/'
            echo "hostkey=$(cut -d' ' -f2 /etc/ssh/ssh_host_ed25519_key.pub)"
        """).stdout
        lines = out.splitlines()
        assert "pid1=systemd" in lines and "state=running" in lines, out
        assert "ssh=enabled/active" in lines, out
        assert not [line for line in lines if line.startswith("has=")], out  # nothing a fresh image lacks
        assert f"python={PYTHON[release]}" in lines and "apt=yes" in lines
        sources = [line for line in lines if line.startswith("source=")]
        assert sources and all("deb.debian.org" in line for line in sources), out
        host_keys.add(next(line for line in lines if line.startswith("hostkey=")))
        # sshd answers on port 22 with the release's own OpenSSH; nothing on the cluster port yet
        other = 1 + i % 3
        assert OPENSSH[release] in _banner(lab, other, nodes[i - 1]["address"], 22)
        assert _banner(lab, other, nodes[i - 1]["address"], 2222) == "ERR ConnectionRefusedError"
    assert len(host_keys) == 3, "every node has its own host keys"


def test_first_contact_is_the_podman_connection(lab):
    """sshd on 22 has no key of ours yet: the inventory reaches the nodes with podman exec, as
    site.yml's first stages expect, on each release's Python."""
    proc = subprocess.run([tool("ansible"), "-i", str(REPO / "inventory/lab"), "cluster", "-m", "ping"],
                          env=ansible_env(lab.name), capture_output=True, text=True, cwd=REPO, timeout=bounds.COMMAND)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == 3


def test_podman_restart_keeps_systemd_units_and_sshd_on_22(lab):
    """A reboot of a systemd node: sshd comes back on 22 with the same host keys, and units that
    were enabled start again; a unit that was only started does not."""
    node = 2
    address = lab.status["nodes"][node - 1]["address"]
    node_exec(lab.name, node, """
        printf '[Service]\\nExecStart=/bin/sleep infinity\\n[Install]\\nWantedBy=multi-user.target\\n' \
            > /etc/systemd/system/lab-enabled.service
        printf '[Service]\\nExecStart=/bin/sleep infinity\\n' > /etc/systemd/system/lab-started.service
        systemctl daemon-reload && systemctl enable --now lab-enabled.service && systemctl start lab-started.service
    """)
    key_before = node_exec(lab.name, node, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout
    # PID 1's start time (the boot id is the host kernel's: the same in every container)
    pid1_start = node_exec(lab.name, node, "cut -d' ' -f22 /proc/1/stat").stdout.strip()
    t0 = time.monotonic()
    subprocess.run(["podman", "restart", f"{lab.name}-node{node}"], capture_output=True, check=True, timeout=bounds.COMMAND)
    wait_booted([f"{lab.name}-node{node}"], timeout=bounds.POLL)  # raises unless systemd reaches "running"
    print(f"systemd node restarted and booted in {time.monotonic() - t0:.1f} s")
    out = node_exec(lab.name, node, "systemctl is-active lab-enabled.service lab-started.service ssh.service; "
                                    "cut -d' ' -f22 /proc/1/stat", check=False).stdout
    assert out.split()[:3] == ["active", "inactive", "active"], out
    assert out.split()[3] != pid1_start, "PID 1 is a new systemd"
    assert node_exec(lab.name, node, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout == key_before
    assert "OpenSSH_9.2" in _banner(lab, 1, address, 22)
