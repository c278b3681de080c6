"""`provision bootstrap` as a user runs it: usage errors (exit 2) and unreachable hosts (exit 1).

Only loopback is contacted: a closed port, and a listener that never speaks SSH.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers import REPO, ansible_env, tool


def run_bootstrap(tmp_path: Path, *args: str, stdin: str | None = None, timeout: float = 60):
    env = ansible_env(HOME=str(tmp_path / "home"))
    (tmp_path / "home").mkdir(exist_ok=True)
    t0 = time.monotonic()
    proc = subprocess.run([tool("provision"), "bootstrap", *args], cwd=REPO, env=env, input=stdin,
                          capture_output=True, text=True, timeout=timeout, check=False)
    return proc, time.monotonic() - t0


def write_inventory(tmp_path: Path, hosts: dict[str, tuple[str, int]]) -> Path:
    inv = tmp_path / "inv"
    inv.mkdir()
    lines = ["[cluster]"] + [f"{name} ansible_host={addr} ansible_port={port} ansible_user=root"
                             for name, (addr, port) in hosts.items()]
    (inv / "hosts.ini").write_text("\n".join(lines) + "\n")
    return inv / "hosts.ini"


def password_file(tmp_path: Path, mode: int = 0o600, text: str = "not-the-password-7Qx\n") -> Path:
    path = tmp_path / "pw"
    path.write_text(text)
    path.chmod(mode)
    return path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_loose_password_file_refused_with_the_chmod(tmp_path):
    inv = write_inventory(tmp_path, {"h1": ("127.0.0.1", closed_port())})
    pw = password_file(tmp_path, 0o644)
    proc, _ = run_bootstrap(tmp_path, "-i", str(inv), "--password-file", str(pw))
    assert proc.returncode == 2, proc
    assert f"chmod 600 {pw}" in proc.stderr
    assert not (tmp_path / "home" / ".ssh").exists()  # refused before doing anything


@pytest.mark.parametrize("args, message", [
    (["--ask-pass"], "--ask-pass needs a terminal"),
    (["--ask-pass", "--password-file", "PW"], "not both"),
])
def test_password_usage_errors(tmp_path, args, message):
    inv = write_inventory(tmp_path, {"h1": ("127.0.0.1", closed_port())})
    pw = password_file(tmp_path)
    proc, _ = run_bootstrap(tmp_path, "-i", str(inv), *[str(pw) if a == "PW" else a for a in args], stdin="")
    assert proc.returncode == 2, proc
    assert message in proc.stderr


def test_missing_or_broken_inventory_is_a_usage_error(tmp_path):
    proc, _ = run_bootstrap(tmp_path, "-i", str(tmp_path / "nope.ini"))
    assert proc.returncode == 2, proc
    assert f"inventory {tmp_path / 'nope.ini'} does not exist" in proc.stderr
    broken = tmp_path / "hosts.yml"
    broken.write_text("all:\n  hosts:\n    a: [\n")
    proc, _ = run_bootstrap(tmp_path, "-i", str(broken))
    assert proc.returncode == 2, proc
    # the parser's own complaint, on one line, and the command that shows all of it
    assert f"inventory {broken}: " in proc.stderr and f"(all of it: ansible-inventory -i {broken} --list)" in proc.stderr


def test_unreachable_hosts_one_line_each(tmp_path):
    port = closed_port()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    silent = listener.getsockname()[1]
    accepted = []
    waiter = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
    waiter.start()
    inv = write_inventory(tmp_path, {"refused": ("127.0.0.1", port), "silent": ("127.0.0.1", silent),
                                     "alias": ("127.0.0.1", port)})
    pw = password_file(tmp_path)
    try:
        proc, seconds = run_bootstrap(tmp_path, "-i", str(inv), "--password-file", str(pw),
                                      "--accept-host-keys", "-T", "2")
    finally:
        # wake and end the accept() first: a thread still in it when the socket's number is reused
        # would accept on the next test's listener
        try:
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        waiter.join(timeout=10)
        listener.close()
        for conn, _addr in accepted:
            conn.close()
    assert proc.returncode == 3, proc  # refused, silent, its alias: none reached
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 3, proc
    assert failed[0].startswith(f"FAILED refused (root@127.0.0.1:{port}): connection refused on 127.0.0.1:{port}; "
                                "fix: start sshd on refused")
    assert failed[1].startswith(f"FAILED silent (root@127.0.0.1:{silent}): timeout: no SSH banner")
    # another inventory name of the same machine is contacted once, under the first name
    assert failed[2] == f"FAILED alias (root@127.0.0.1:{port}): the same machine as refused, handled under that name"
    assert seconds < 20
    assert "not-the-password" not in proc.stdout + proc.stderr
    # the controller key pair was made (private key 0600) in the (test) home
    key = tmp_path / "home" / ".ssh" / "id_ed25519"
    assert key.is_file() and oct(key.stat().st_mode & 0o777) == "0o600"
    # the inventory now tells Ansible to check host keys against the inventory's known_hosts
    ssh_vars = (inv.parent / "group_vars" / "all" / "provision_ssh.yml").read_text()
    assert "UserKnownHostsFile={{ inventory_dir }}/.provision/known_hosts -o StrictHostKeyChecking=yes" in ssh_vars
    assert not (inv.parent / ".provision" / "known_hosts").exists()  # nothing accepted: nothing recorded


def test_no_ssh_hosts_is_a_usage_error(tmp_path):
    inv = tmp_path / "local.ini"
    inv.write_text("localhost ansible_connection=local\n")
    proc, _ = run_bootstrap(tmp_path, "-i", str(inv))
    assert proc.returncode == 2, proc
    assert "no SSH host to bootstrap" in proc.stderr and "ansible_connection=local" in proc.stderr


def test_help_lists_the_options(tmp_path):
    proc, _ = run_bootstrap(tmp_path, "--help")
    assert proc.returncode == 0
    for opt in ("--ask-pass", "--password-file", "--accept-host-keys", "--known-hosts", "--forks", "--connect-timeout"):
        assert opt in proc.stdout


def test_an_inventory_that_already_checks_host_keys_gets_no_group_vars(tmp_path):
    """Hosts that already name the known_hosts with checking on (the lab inventory does, per host):
    bootstrap writes nothing into the inventory (it once wrote group_vars into the checkout's
    inventory/lab, pointing every later lab at one lab's known_hosts)."""
    known = tmp_path / "kh"
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.ini").write_text(
        f"[cluster]\nh1 ansible_host=127.0.0.1 ansible_port={closed_port()} ansible_user=root\n\n[cluster:vars]\n"
        f"ansible_ssh_common_args='-o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes'\n")
    proc, _ = run_bootstrap(tmp_path, "-i", str(inv / "hosts.ini"), "--known-hosts", str(known),
                            "--password-file", str(password_file(tmp_path)), "--connect-timeout", "2")
    assert proc.returncode == 3, proc   # nothing listens: the host is unreachable, the inventory is left alone
    assert not (inv / "group_vars").exists()
    assert "wrote" not in proc.stdout + proc.stderr
