"""Cloud VMs behind a login node (issue 30): `provision lab up --bastion`, 2 nodes behind NAME-bastion,
logged into as a cloud image is: the admin `ops` with passwordless sudo (`--login sudo`, what --bastion
implies), root refused over SSH, the training user `trainer`.

This machine reaches the nodes only through the bastion (a test proves its direct traffic is dropped,
while the nodes still reach each other directly); the lab inventory logs in as ops with become, through
ProxyJump with the bastion's host key checked. Fresh site.yml green, a re-run changes nothing, `provision
verify` green under become (its all-at-once checks: no escalation timeout), a torchrun job through
`provision launch` runs as trainer with the venv's python; `provision bootstrap` makes first contact (a
password, then our key) with a node through the bastion, host keys checked at the bastion and at the node.
Bad input gets one line and changes nothing: a missing training user, an admin without sudo rights, an
unreachable bastion, a bastion whose host key changed. save / restore keep the shape (sshd on 22 without
systemd, started by the lab, comes back).

The same shape without a bastion (`--login sudo` alone) was a module of its own with its own fresh
site.yml; everything it proved is proved here, the login as ops directly is the password shape's
(test_login_password.py), so the suite converges one lab fewer.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess

import pytest

import bounds
from helpers import REPO, ansible_env, lab_cmd, node_exec, tool
from login_labs import fatal_messages, our_lines

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab(bastion_lab):
    """conftest's bastion_lab (test_trust_boundary uses it after this module: every test here leaves it as
    it found it)."""
    return bastion_lab


def _tcp(address: str, port: int = 22, timeout: float = 3.0) -> str:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return "open"
    except (socket.timeout, TimeoutError):
        return "dropped"
    except OSError as exc:
        return type(exc).__name__


def test_this_machine_reaches_the_nodes_only_through_the_bastion(lab):
    st = lab.status()
    bastion = st["login"]["bastion"]["address"]
    assert _tcp(bastion) == "open"
    for node in st["nodes"]:
        # the cluster and the side address, sshd on 22 and 2222 listening there: dropped on the way
        for addr in (node["address"], node["side_address"]):
            assert _tcp(addr) == "dropped", (node["name"], addr)
    # the nodes reach each other directly (the mesh does not go through the bastion)
    node2 = st["nodes"][1]["address"]
    node_exec(lab.name, 1, f"timeout 5 bash -c 'exec 3<>/dev/tcp/{node2}/22'")


def test_root_is_refused_and_the_admin_logs_in_with_the_labs_key_through_the_bastion(lab):
    state = lab.state_dir()
    key, known = state / "id_ed25519", state / "known_hosts"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    # the lab inventory: ops over ssh on 22 with become, never podman; the training user trainer
    inv = json.loads(subprocess.run([tool("ansible-inventory"), "-i", str(REPO / "inventory" / "lab"), "--host", "node1"],
                                    env=ansible_env(lab.name), capture_output=True, text=True, timeout=bounds.COMMAND,
                                    check=True).stdout)
    assert {k: inv[k] for k in ("ansible_connection", "ansible_user", "ansible_port", "ansible_become",
                                "cluster_user")} == {"ansible_connection": "ssh", "ansible_user": "ops",
                                                     "ansible_port": 22, "ansible_become": True, "cluster_user": "trainer"}
    # ssh the way the inventory has Ansible log in: through the bastion (the lab's ssh_config, ProxyJump),
    # the host key the one read at the console (checked, not accepted on first use), the lab's key
    common = shlex.split(inv["ansible_ssh_common_args"])
    assert f"UserKnownHostsFile={known}" in common and "StrictHostKeyChecking=yes" in common, common
    assert f"ProxyJump={lab.name}-bastion" in common and inv["ansible_ssh_private_key_file"] == str(key), inv
    ssh = ["ssh", *common, "-i", str(key), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    addr = lab.status()["nodes"][0]["address"]
    root = subprocess.run(ssh + [f"root@{addr}", "true"], capture_output=True, text=True, timeout=bounds.COMMAND)
    assert root.returncode == 255 and "Permission denied" in root.stderr, root.stderr
    ops = subprocess.run(ssh + [f"ops@{addr}", "id -un; sudo -n id -un"], capture_output=True, text=True,
                         timeout=bounds.COMMAND)
    assert ops.returncode == 0 and ops.stdout.split() == ["ops", "root"], ops.stderr
    ids = [node_exec(lab.name, n, "id trainer").stdout.strip() for n in (1, 2)]
    assert ids[0] == ids[1] and "uid=2001(trainer)" in ids[0]


def test_fresh_site_verify_and_launch_through_the_bastion(lab):
    assert lab.first.rc == 0, lab.first
    again = lab.site()
    assert again.rc == 0 and again.changed == 0, again
    print(f"--bastion: fresh site.yml {lab.first.seconds:.0f} s, re-run {again.seconds:.0f} s (changed=0)")
    proc = lab.verify()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "privilege escalation" not in proc.stdout
    proc, seen = lab.launch_probe()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert sorted((p["host"], p["rank"], p["world"], p["user"], p["sum"]) for p in seen) == [
        ("node1", "0", "2", "trainer", "3"), ("node2", "1", "2", "trainer", "3")], proc.stdout[-3000:]
    assert all(p["python"] == "/opt/provision/venv/bin/python" for p in seen), seen


def test_a_missing_training_user_is_refused_and_nothing_changes(lab):
    lab.stamp()
    res = lab.site(extra_vars={"cluster_user": "ghost"})
    assert res.rc != 0
    for node in ("node1", "node2"):
        (line,) = [m for m in our_lines(res, node) if "ghost" in m]
        assert "the training user ghost does not exist there" in line and "cluster_user_create: true" in line
    assert lab.changed_since_stamp() == {1: [], 2: []}


def test_an_admin_without_sudo_rights_is_named_and_nothing_changes(lab):
    node_exec(lab.name, 2, "mv /etc/sudoers.d/90-lab-ops /root/90-lab-ops.away")
    try:
        lab.stamp()
        res = lab.site()
        assert res.rc != 0
        (line,) = our_lines(res, "node2")
        assert "sudo on node2 asks ops for a password" in line and "may not use sudo" in line, line
        assert "--ask-become-pass" in line and "reachable" not in line
        assert not our_lines(res, "node1")
        # node2 is untouched; node1 answered too (its become works) and was not changed either
        assert lab.changed_since_stamp() == {1: [], 2: []}
        # provision verify says the same for node2
        doc = lab.verify()
        assert doc.returncode == 1 and "sudo on node2 asks ops for a password" in doc.stdout
    finally:
        node_exec(lab.name, 2, "mv /root/90-lab-ops.away /etc/sudoers.d/90-lab-ops")


def _bootstrap(lab, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([tool("provision"), "bootstrap", "-i", str(REPO / "inventory" / "lab"), "--known-hosts",
                           str(lab.state_dir() / "known_hosts"), "--json", *args], cwd=REPO, env=ansible_env(lab.name),
                          capture_output=True, text=True, timeout=bounds.VERIFY, check=False)


def test_bootstrap_first_contact_through_the_bastion(lab, tmp_path):
    """node2 as a fresh VM would be: ops has a password and no key; bootstrap logs in with the password
    through the bastion, installs the lab's key; Ansible then reaches node2 with the key."""
    node_exec(lab.name, 2, "printf 'ops:first-contact-pw\\n' | chpasswd; rm -f /home/ops/.ssh/authorized_keys; "
                           "sed -i 's/^PasswordAuthentication no/PasswordAuthentication yes/' "
                           "/etc/ssh/sshd_config.d/00-lab-login.conf; pkill -HUP -f '^(sshd: )?/usr/sbin/sshd' || true")
    pw = tmp_path / "pw"
    pw.write_text("first-contact-pw\n")
    pw.chmod(0o600)
    try:
        proc = _bootstrap(lab, "--limit", "node2", "--password-file", str(pw))
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        (host,) = json.loads(proc.stdout)["hosts"]
        assert host["ok"] and host["login"] == "password" and host["host_key_status"] == "known", host
        assert "created authorized_keys (0600) with the key" in host["changes"]
        again = _bootstrap(lab, "--limit", "node2")
        assert again.returncode == 0 and json.loads(again.stdout)["hosts"][0]["login"] == "key", again.stdout
        ping = subprocess.run([tool("ansible"), "-i", str(REPO / "inventory" / "lab"), "node2", "-m", "ping"],
                              env=ansible_env(lab.name), capture_output=True, text=True, timeout=bounds.COMMAND)
        assert ping.returncode == 0, ping.stdout + ping.stderr
    finally:
        node_exec(lab.name, 2, "sed -i 's/^PasswordAuthentication yes/PasswordAuthentication no/' "
                               "/etc/ssh/sshd_config.d/00-lab-login.conf; usermod -p '*' ops; "
                               "pkill -HUP -f '^(sshd: )?/usr/sbin/sshd' || true")


def test_an_unreachable_bastion_is_named_and_nothing_changes(lab):
    bastion = lab.status()["login"]["bastion"]
    subprocess.run(["podman", "stop", "-t", "0", bastion["container"]], check=True, capture_output=True,
                   timeout=bounds.COMMAND)
    try:
        lab.stamp()
        # fresh ssh connections (not the run before's ControlPersist masters): as from a new shell
        res = lab.site(fresh_connections=True)
        assert res.rc != 0
        for node in ("node1", "node2"):
            line = next(m for m in fatal_messages(res) if m.startswith(f"{node}: "))
            # the run's own words with it: which login failed how, when the line names something else
            assert "bastion" in line and f"ProxyJump {lab.name}-bastion" in line, (line, res.stdout[-6000:])
        proc = _bootstrap(lab, "--limit", "node1")
        assert proc.returncode == 3   # unreachable, and nothing else failed (docs/cli.md)
        (host,) = json.loads(proc.stdout)["hosts"]
        assert f"the bastion ops@{bastion['address']}:22 in front of node1" in host["cause"], host
        assert lab.changed_since_stamp() == {1: [], 2: []}
    finally:
        lab_cmd("up", "--nodes", "2", "--bastion", lab_name=lab.name, timeout=bounds.LAB_UP)
    assert lab.site().rc == 0


def test_a_bastion_whose_host_key_changed_is_refused_in_one_line(lab):
    known = lab.state_dir() / "known_hosts"
    saved = known.read_text()
    address = lab.status()["login"]["bastion"]["address"]
    other = next(ln.split()[2] for ln in saved.splitlines() if ln.split()[1:2] == ["ssh-ed25519"]
                 and not ln.startswith(address + " "))
    known.write_text("".join(f"{address} ssh-ed25519 {other}\n" if ln.startswith(f"{address} ssh-ed25519 ") else ln + "\n"
                             for ln in saved.splitlines() if not ln.startswith(address + " ") or "ssh-ed25519" in ln))
    try:
        lab.stamp()
        res = lab.site(fresh_connections=True)
        assert res.rc != 0
        line = next(m for m in fatal_messages(res) if m.startswith("node1: "))
        assert f"the bastion {address} (ProxyJump {lab.name}-bastion) in front of node1 presents a host key" in line
        assert f"ssh-keygen -R {address} -f {known}" in line, line
        proc = _bootstrap(lab, "--limit", "node1")
        assert proc.returncode == 1
        (host,) = json.loads(proc.stdout)["hosts"]
        assert "in front of node1 presents host key" in host["cause"] and "not the one recorded" in host["cause"], host
        assert lab.changed_since_stamp() == {1: [], 2: []}
    finally:
        known.write_text(saved)


def test_save_and_restore_keep_the_bastion(lab):
    lab_cmd("save", f"{lab.name}-snap", lab_name=lab.name, timeout=bounds.LAB_UP)
    lab_cmd("up", "--from", f"{lab.name}-snap", lab_name=lab.name, timeout=bounds.LAB_UP)
    st = lab.status()
    assert st["login"]["bastion"]["state"] == "running"
    assert _tcp(st["nodes"][0]["address"]) == "dropped"
    again = lab.site()
    assert again.rc == 0 and again.changed == 0, again
