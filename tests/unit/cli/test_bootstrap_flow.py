"""provision.bootstrap.bootstrap() end to end against an SSH server on loopback (no podman).

The server is paramiko's server side: password and public-key auth, and `exec` channels that run
the command with this machine's real `sh` in a temporary HOME. So the whole flow (host key
verdicts, prompts, login, the probe and write scripts, the re-run) runs in CI without a lab;
tests/integration/test_bootstrap.py runs the same against OpenSSH in lab nodes.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import paramiko
import pytest

from helpers import REPO, ansible_env, tool
from provision import bootstrap as bs

PASSWORD = "correct horse"
FIX = REPO / "tests" / "fixtures" / "bootstrap"


def _keygen(path: Path) -> paramiko.PKey:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return paramiko.Ed25519Key.from_private_key_file(str(path))


class _Server(paramiko.ServerInterface):
    def __init__(self, home: Path):
        self.home = home

    def get_allowed_auths(self, username):
        return "publickey,password"

    def check_auth_password(self, username, password):
        return paramiko.AUTH_SUCCESSFUL if password == PASSWORD else paramiko.AUTH_FAILED

    def check_auth_publickey(self, username, key):
        try:
            text = (self.home / ".ssh" / "authorized_keys").read_text()
        except OSError:
            return paramiko.AUTH_FAILED
        return paramiko.AUTH_SUCCESSFUL if key.get_base64() in text else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        threading.Thread(target=self._run, args=(channel, command.decode()), daemon=True).start()
        return True

    def _run(self, channel, command):
        data = bytearray()
        while True:
            chunk = channel.recv(65536)
            if not chunk:
                break
            data += chunk
        proc = subprocess.run(["sh", "-c", command], input=bytes(data), capture_output=True, check=False,
                              env={"HOME": str(self.home), "PATH": os.environ["PATH"]}, timeout=30)
        channel.sendall(proc.stdout)
        channel.sendall_stderr(proc.stderr)
        channel.send_exit_status(proc.returncode)
        channel.close()


class SSHD:
    """A listener on 127.0.0.1 with a host key that a test can swap (a rebuilt node)."""

    def __init__(self, tmp: Path):
        self.home = tmp / "home"
        self.home.mkdir()
        self.host_key = _keygen(tmp / "host_key")
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.transports: list[paramiko.Transport] = []
        self.closing = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.closing:
                conn.close()
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(self.host_key)
            # with an event, start_server returns at once: negotiation runs in the transport's
            # own thread (a client that hangs up after reading the host key ends only that one)
            transport.start_server(event=threading.Event(), server=_Server(self.home))
            self.transports.append(transport)

    def close(self):
        # shutdown wakes the accept() the thread is blocked in; the thread is gone before the socket's
        # number is freed, so it can never accept on the next test's listener (which gets that number)
        self.closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the test sshd's accept thread did not end"
        self.sock.close()
        for transport in self.transports:
            transport.close()


@pytest.fixture
def sshd(tmp_path):
    server = SSHD(tmp_path)
    yield server
    server.close()


def run(sshd, tmp_path, *, password=PASSWORD, accept=False, confirm=None, known_hosts=None, replace=()):
    target = bs.Target(name="h1", address="127.0.0.1", port=sshd.port, user="root")
    keys = {None: bs.ensure_controller_key(tmp_path / "controller_ed25519", log=lambda _m: None)}
    opts = bs.Options(known_hosts=known_hosts or tmp_path / "inv" / bs.KNOWN_HOSTS_REL, password=password,
                      accept_host_keys=accept, confirm=confirm, forks=4, timeout=5,
                      replace_host_keys=frozenset(replace))
    seen: list[bs.HostResult] = []
    results = bs.bootstrap([target], keys, opts, on_result=seen.append)
    assert [r.host for r in seen] == ["h1"]
    return results[0], keys[None], opts.known_hosts


def test_first_contact_then_rerun_then_rebuilt_host(sshd, tmp_path):
    ak = sshd.home / ".ssh" / "authorized_keys"
    fp = bs.fingerprint(sshd.host_key.asbytes())

    # a person declines the unknown key: nothing recorded, nothing done on the host
    asked = []
    result, _key, kh = run(sshd, tmp_path, confirm=lambda t, label, f: asked.append((t.name, label, f)) or False)
    assert asked == [("h1", "ED25519", fp)]
    assert not result.ok and result.cause == f"host key {fp} (ED25519) not accepted"
    assert not kh.exists() and not (sshd.home / ".ssh").exists()

    # no terminal, no --accept-host-keys: refused with the fix
    result, _key, _kh = run(sshd, tmp_path)
    assert not result.ok and "no terminal to confirm it" in result.cause and "--accept-host-keys" in result.fix

    # wrong password: the accepted key is recorded, the host is left as it was
    result, _key, kh = run(sshd, tmp_path, password="wrong", accept=True)
    assert not result.ok and result.cause == "wrong password: the password was rejected for root"
    assert kh.read_text() == f"[127.0.0.1]:{sshd.port} ssh-ed25519 {sshd.host_key.get_base64()}\n"
    assert not (sshd.home / ".ssh").exists()

    # right password: key installed, modes right
    result, key, kh = run(sshd, tmp_path)
    assert result.ok and result.host_key_status == "known" and result.login == "password", result
    assert result.changes == ["created ~/.ssh (0700)", "created authorized_keys (0600) with the key"]
    assert ak.read_text() == key.public_line + "\n"
    assert oct(ak.stat().st_mode & 0o777) == "0o600" and oct(ak.parent.stat().st_mode & 0o777) == "0o700"
    assert result.python.startswith("python3 3.")

    # re-run without a password: logs in with the key, changes nothing
    before = kh.read_text()
    result, _key, kh = run(sshd, tmp_path, password=None)
    assert result.ok and result.login == "key" and result.changes == [] and not result.changed
    assert ak.read_text() == key.public_line + "\n" and kh.read_text() == before

    # the host is rebuilt (new host key): refused, naming both fingerprints and the fix
    sshd.host_key = _keygen(tmp_path / "host_key_new")
    new_fp = bs.fingerprint(sshd.host_key.asbytes())
    result, _key, kh = run(sshd, tmp_path, accept=True)
    assert not result.ok
    assert result.cause == (f"host key changed: {kh} has {fp} (ED25519) for [127.0.0.1]:{sshd.port}, "
                            f"the host now presents {new_fp} (ED25519)")
    assert f"ssh-keygen -R '[127.0.0.1]:{sshd.port}' -f {kh}" in result.fix
    assert f"--limit h1 --replace-host-key {new_fp}" in result.fix
    assert kh.read_text() == before

    # another fingerprint than the one it presents is not a licence: still refused, file unchanged
    result, _key, kh = run(sshd, tmp_path, replace=[fp])
    assert not result.ok and kh.read_text() == before

    # the fingerprint a person confirmed at the console: the new key replaces the old one, and the
    # host is bootstrapped again (reinstalled: password login, no key of ours)
    result, key, kh = run(sshd, tmp_path, replace=[new_fp])
    assert result.ok and result.host_key_status == "replaced" and result.changed, result
    assert kh.read_text() == f"[127.0.0.1]:{sshd.port} ssh-ed25519 {sshd.host_key.get_base64()}\n"
    again, _key, _kh = run(sshd, tmp_path, password=None)
    assert again.ok and again.host_key_status == "known" and not again.changed


def test_replace_host_key_keeps_other_hosts_and_shared_lines():
    text = ("# mine\n[10.0.0.1]:2222 ssh-ed25519 AAAAold\n[10.0.0.2]:2222 ssh-ed25519 AAAAkeep\n"
            "[10.0.0.1]:2222,node1 ssh-rsa AAAArsa\n")
    out = bs.replace_host_key(text, "[10.0.0.1]:2222", "[10.0.0.1]:2222 ssh-ed25519 AAAAnew")
    assert out == ("# mine\n[10.0.0.2]:2222 ssh-ed25519 AAAAkeep\nnode1 ssh-rsa AAAArsa\n"
                   "[10.0.0.1]:2222 ssh-ed25519 AAAAnew\n")


def test_existing_lines_kept_and_modes_fixed(sshd, tmp_path):
    ssh = sshd.home / ".ssh"
    ssh.mkdir(mode=0o755)
    ssh.chmod(0o755)
    # someone's key (a real public key from the fixtures), no newline at the end of the file
    other = (FIX / "keyscan_node1.txt").read_text().splitlines()[0].split(None, 1)[1] + " ops@laptop"
    (ssh / "authorized_keys").write_text("# ops\n" + other)
    (ssh / "authorized_keys").chmod(0o644)
    result, key, _kh = run(sshd, tmp_path, accept=True)
    assert result.ok, result
    assert result.changes == ["~/.ssh mode 755 -> 700", "key added to authorized_keys",
                              "authorized_keys mode 644 -> 600"]
    text = (ssh / "authorized_keys").read_text()
    assert text.startswith("# ops\n" + other + "\n")
    assert text.endswith(key.public_line + "\n") and text.count(key.public_line) == 1


def _on_tty(argv: list[str], env: dict[str, str], answers: list[tuple[bytes, bytes]], timeout: float = 60):
    """Run argv on a pseudo-terminal, typing each answer once its prompt appears."""
    pid, fd = pty.fork()
    if pid == 0:  # child: the pty is its controlling terminal, as in an ssh session
        os.chdir(str(REPO))
        os.execve(argv[0], argv, env)
    out, pos, deadline = b"", 0, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
            if answers and answers[0][0] in out[pos:]:
                pos = out.index(answers[0][0], pos) + len(answers[0][0])
                os.write(fd, answers.pop(0)[1])
        else:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"no exit within {timeout} s:\n{out.decode(errors='replace')}")
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_ask_pass_and_confirm_on_a_terminal(sshd, tmp_path):
    inv = tmp_path / "inv"
    inv.mkdir()
    # no .ini: ansible-core < 2.19 skips *.ini files in an inventory directory
    (inv / "hosts").write_text(f"h1 ansible_host=127.0.0.1 ansible_port={sshd.port} ansible_user=root\n")
    (tmp_path / "ctl").mkdir()
    env = ansible_env(HOME=str(tmp_path / "ctl"), TERM="dumb")
    fp = bs.fingerprint(sshd.host_key.asbytes())
    rc, out = _on_tty([tool("provision"), "bootstrap", "-i", f"{inv}/", "--ask-pass"], env,
                      [(b"SSH password for root: ", PASSWORD.encode() + b"\n"), (b"[y/N]: ", b"y\n")])
    assert rc == 0, out
    assert f"presents the ED25519 host key {fp}. Is that the host's key? [y/N]: y" in out
    assert f"ok     h1 (root@127.0.0.1:{sshd.port}): host key ED25519 {fp} confirmed;" in out
    assert PASSWORD not in out  # typed with echo off
    assert (sshd.home / ".ssh" / "authorized_keys").read_text() == \
        (tmp_path / "ctl" / ".ssh" / "id_ed25519.pub").read_text()
