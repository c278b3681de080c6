"""A cluster as a cloud VM is logged into (issue 30): `provision lab up --login sudo`, 2 nodes. The admin
`ops` has passwordless sudo, root is refused over SSH, the training user is `trainer`; the lab inventory
logs in as ops over ssh with become.

Fresh site.yml green, a re-run changes nothing, `provision verify` green (its all-at-once checks under
become: no escalation timeout), a torchrun job through `provision launch` runs as trainer. Bad input gets
one line and changes nothing: a missing training user, an admin without sudo rights. The lab survives
`provision lab save` / `up --from` (sshd on 22 without systemd, started by the lab, comes back).
"""

from __future__ import annotations

import json
import subprocess

import pytest

import bounds
from helpers import REPO, ansible_env, lab_cmd, lab_name, node_exec, tool
from login_labs import ShapeLab, our_lines

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab():
    made = ShapeLab(lab_name("sudo"), ["--login", "sudo"]).up()
    try:
        made.first = made.site(timeout=bounds.SITE_FRESH)
        made.first_seconds = made.first.seconds
        yield made
    finally:
        made.down()
        # `lab forget` takes no --name (lab_cmd adds one)
        subprocess.run([tool("provision"), "lab", "forget", f"{made.name}-snap"], cwd=REPO, env=ansible_env(),
                       capture_output=True, timeout=bounds.LAB_UP, check=False)


def test_root_is_refused_over_ssh_and_the_admin_logs_in_with_the_labs_key(lab):
    state = lab.state_dir()
    key, known = state / "id_ed25519", state / "known_hosts"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    addr = lab.status()["nodes"][0]["address"]
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
           "-o", "ConnectTimeout=10", "-i", str(key)]
    root = subprocess.run(ssh + [f"root@{addr}", "true"], capture_output=True, text=True, timeout=bounds.COMMAND)
    assert root.returncode == 255 and "Permission denied" in root.stderr, root.stderr
    # the host key is the one read at the console (checked, not accepted on first use)
    ops = subprocess.run(ssh + [f"ops@{addr}", "id -un; sudo -n id -un"], capture_output=True, text=True,
                         timeout=bounds.COMMAND)
    assert ops.returncode == 0 and ops.stdout.split() == ["ops", "root"], ops.stderr
    # the lab inventory: ops over ssh on 22 with become, never podman; the training user trainer
    inv = json.loads(subprocess.run([tool("ansible-inventory"), "-i", str(REPO / "inventory" / "lab"), "--host", "node1"],
                                    env=ansible_env(lab.name), capture_output=True, text=True, timeout=bounds.COMMAND,
                                    check=True).stdout)
    assert {k: inv[k] for k in ("ansible_connection", "ansible_user", "ansible_port", "ansible_become",
                                "cluster_user")} == {"ansible_connection": "ssh", "ansible_user": "ops",
                                                     "ansible_port": 22, "ansible_become": True, "cluster_user": "trainer"}
    ids = [node_exec(lab.name, n, "id trainer").stdout.strip() for n in (1, 2)]
    assert ids[0] == ids[1] and "uid=2001(trainer)" in ids[0]


def test_fresh_site_is_green_and_a_rerun_changes_nothing(lab):
    assert lab.first.rc == 0, lab.first
    again = lab.site()
    assert again.rc == 0 and again.changed == 0, again
    print(f"--login sudo: fresh site.yml {lab.first_seconds:.0f} s, re-run {again.seconds:.0f} s (changed=0)")


def test_verify_is_green_under_become(lab):
    proc = lab.verify()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "privilege escalation" not in proc.stdout


def test_a_torchrun_job_runs_as_the_training_user(lab):
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


def test_save_and_restore_keep_the_login_shape(lab):
    lab_cmd("save", f"{lab.name}-snap", lab_name=lab.name, timeout=bounds.LAB_UP)
    lab_cmd("up", "--from", f"{lab.name}-snap", lab_name=lab.name, timeout=bounds.LAB_UP)
    # sshd on 22 (the lab's, then the sshd role's on 22 and 2222) is back; site.yml has nothing to do
    again = lab.site()
    assert again.rc == 0 and again.changed == 0, again
