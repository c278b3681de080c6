"""`provision bootstrap` against real password-only sshd nodes of a lab.

The lab's nodes run sshd on 2222 with root password login and no key
(`provision lab up --root-password-file`). The test inventory is a plain INI file, as a user
would write for two machines they only have a root password for.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import bounds
from helpers import REPO, ansible_env, lab_name, node_exec, tool
from provision.lab import status as lab_status

pytestmark = pytest.mark.lab

LAB = lab_name("bsit")
AK = "/root/.ssh/authorized_keys"
OPS_LINE = "# ops: keep this line"


@pytest.fixture(scope="module")
def env(lab_factory, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bootstrap")
    password = "pw-" + secrets.token_hex(8)
    good = tmp / "root-password"
    good.write_text(password + "\n")
    good.chmod(0o600)
    bad = tmp / "wrong-password"
    bad.write_text("not-" + password + "\n")
    bad.chmod(0o600)
    lab_factory(LAB, nodes=2, options=["--root-password-file", str(good)])
    addresses = {n["index"]: n["address"] for n in lab_status(LAB)["nodes"]}
    inv_dir = tmp / "inv"
    inv_dir.mkdir()
    key = tmp / "controller_ed25519"  # made by bootstrap; the real ~/.ssh is left alone
    hosts = "\n".join(f"node{i} ansible_host={addresses[i]}" for i in (1, 2))
    (inv_dir / "hosts.ini").write_text(
        f"[cluster]\n{hosts}\n\n[cluster:vars]\nansible_port=2222\nansible_user=root\n"
        f"ansible_ssh_private_key_file={key}\n")
    # a line somebody put there before us: it must survive every run
    node_exec(LAB, 1, f"mkdir -p -m 700 /root/.ssh && echo '{OPS_LINE}' > {AK} && chmod 600 {AK}")
    return {"dir": inv_dir, "good": good, "bad": bad, "key": key,
            "password": password, "addresses": addresses}


def bootstrap(env, *args: str, timeout: float = 120):
    t0 = time.monotonic()
    proc = subprocess.run([tool("provision"), "bootstrap", "-i", f"{env['dir']}/", *args], cwd=REPO,
                          env=ansible_env(LAB), capture_output=True, text=True, timeout=timeout,
                          check=False, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    assert env["password"] not in proc.stdout + proc.stderr
    return proc, seconds


def ak_state(node: int) -> str:
    return node_exec(LAB, node, f"stat -c '%a %U' /root/.ssh {AK}; sha256sum {AK}; cat {AK}").stdout


def ansible_ping(env, fresh: str) -> subprocess.CompletedProcess:
    """`ansible all -m ping` through SSH connections of its own (a ControlPersist master of an
    earlier run would skip the host key check, as it would after a real node rebuild)."""
    cp_dir = tempfile.mkdtemp(prefix=f"bs-{fresh}-", dir="/tmp")  # unix socket paths are short
    return subprocess.run([tool("ansible"), "-i", f"{env['dir']}/", "all", "-m", "ping"], cwd=REPO,
                          env=ansible_env(LAB, ANSIBLE_HOST_KEY_CHECKING="True",
                                          ANSIBLE_SSH_CONTROL_PATH_DIR=cp_dir),
                          capture_output=True, text=True, timeout=bounds.COMMAND, check=False, stdin=subprocess.DEVNULL)


def test_wrong_password_fails_fast_and_leaves_the_host_alone(env):
    before = ak_state(1)
    proc, seconds = bootstrap(env, "--limit", "node1", "--password-file", str(env["bad"]), "--accept-host-keys")
    print(f"wrong password: {seconds:.1f} s")
    assert proc.returncode == 1, proc
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and failed[0].startswith("FAILED node1 (root@")
    assert "wrong password" in failed[0] and "fix: check the password for root@node1" in failed[0]
    assert bounds.well_before(seconds, bounds.COMMAND), seconds   # named, not waited out
    assert ak_state(1) == before


def test_bootstrap_then_ansible_with_key_and_host_key_checking(env):
    proc, seconds = bootstrap(env, "--password-file", str(env["good"]), "--accept-host-keys")
    print(f"first bootstrap, 2 nodes: {seconds:.1f} s\n{proc.stdout}")
    assert proc.returncode == 0, proc
    ok = [line for line in proc.stdout.splitlines() if line.startswith("ok")]
    assert len(ok) == 2
    assert all("python3 3." in line for line in ok)
    assert "key added to authorized_keys" in next(line for line in ok if "node1" in line)
    assert "created authorized_keys (0600) with the key" in next(line for line in ok if "node2" in line)
    pub = Path(str(env["key"]) + ".pub").read_text().strip()
    for node in (1, 2):
        state = ak_state(node)
        assert state.splitlines()[:2] == ["700 root", "600 root"]
        assert state.count(pub) == 1
    assert OPS_LINE in ak_state(1)
    known = (env["dir"] / ".provision" / "known_hosts").read_text().splitlines()
    assert sorted(line.split()[0] for line in known) == sorted(
        f"[{env['addresses'][i]}]:2222" for i in (1, 2))
    ping = ansible_ping(env, "first")
    assert ping.returncode == 0 and ping.stdout.count(" | SUCCESS") == 2, ping.stdout + ping.stderr
    assert "Unable to parse" not in ping.stderr  # known_hosts is not taken for an inventory source


def test_second_run_changes_nothing_and_needs_no_password(env):
    before = {n: ak_state(n) for n in (1, 2)}
    known = (env["dir"] / ".provision" / "known_hosts").read_text()
    proc, seconds = bootstrap(env, "--json")
    print(f"re-run, 2 nodes: {seconds:.1f} s")
    assert proc.returncode == 0, proc
    doc = json.loads(proc.stdout)
    assert (doc["ok"], doc["changed"], doc["failed"]) == (2, 0, 0)
    assert {h["host_key_status"] for h in doc["hosts"]} == {"known"}
    assert {h["login"] for h in doc["hosts"]} == {"key"}
    assert {n: ak_state(n) for n in (1, 2)} == before
    assert (env["dir"] / ".provision" / "known_hosts").read_text() == known


def test_regenerated_host_key_is_refused_with_both_fingerprints(env):
    addr = env["addresses"][2]
    old = next(line for line in (env["dir"] / ".provision" / "known_hosts").read_text().splitlines()
               if line.startswith(f"[{addr}]:2222 "))
    old_fp = subprocess.run(["ssh-keygen", "-lf", "-"], input=old, capture_output=True, text=True,
                            check=True).stdout.split()[1]
    node_exec(LAB, 2, "set -e; rm -f /etc/ssh/ssh_host_*; ssh-keygen -A >/dev/null; pid=$(cat /run/sshd.pid); "
                      "kill $pid; for i in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done; "
                      "/usr/sbin/sshd -p 2222")
    new_fp = node_exec(LAB, 2, "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]
    assert new_fp != old_fp
    proc, _ = bootstrap(env, "--password-file", str(env["good"]), "--accept-host-keys")
    assert proc.returncode == 1, proc
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and failed[0].startswith("FAILED node2"), proc.stdout
    assert "host key changed" in failed[0] and old_fp in failed[0] and new_fp in failed[0]
    known_hosts = env["dir"] / ".provision" / "known_hosts"
    remove = f"ssh-keygen -R '[{addr}]:2222' -f {known_hosts}"
    assert remove in failed[0]
    assert sum(line.startswith("ok") for line in proc.stdout.splitlines()) == 1
    # Ansible refuses it too: host-key checking is on
    ping = ansible_ping(env, "changed")
    assert ping.returncode != 0 and "node2 | UNREACHABLE" in ping.stdout, ping.stdout + ping.stderr
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in ping.stdout + ping.stderr
    # clearing the key on purpose, as the fix says, lets the next run record the new one
    subprocess.run(remove, shell=True, check=True, capture_output=True)
    proc, _ = bootstrap(env, "--limit", "node2", "--accept-host-keys")
    assert proc.returncode == 0, proc
    assert new_fp in proc.stdout and "accepted" in proc.stdout
    assert len(known_hosts.read_text().splitlines()) == 2
    ping = ansible_ping(env, "cleared")
    assert ping.returncode == 0 and ping.stdout.count(" | SUCCESS") == 2, ping.stdout + ping.stderr


def test_missing_python3_is_reported_with_the_install_command(env):
    node_exec(LAB, 1, "mv /usr/bin/python3 /usr/bin/python3.moved")
    try:
        proc, _ = bootstrap(env, "--limit", "node1")
    finally:
        node_exec(LAB, 1, "mv /usr/bin/python3.moved /usr/bin/python3")
    assert proc.returncode == 0, proc  # the key is in place: bootstrap's job is done
    line = next(line for line in proc.stdout.splitlines() if line.startswith("ok     node1"))
    assert line.endswith("python3 missing (fix: on the host: apt-get install -y python3)"), line
