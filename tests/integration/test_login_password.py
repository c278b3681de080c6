"""A cluster as an HPC admin logs into it (issue 30): `provision lab up --login sudo-password --init systemd`,
2 nodes with systemd as PID 1.
The admin `ops` is in group sudo with a password; the password is given to each command (never to the
inventory): ansible-playbook `--become-password-file`, `provision verify/launch --become-password-file`.

Bad input first, on the fresh nodes (so that "changes nothing" is plain to see): a wrong password, no
password, each refused in one line per node before anything changed. Then: fresh site.yml green with the
password, a re-run changes nothing, `provision verify` green, a torchrun job runs as trainer; an admin
taken out of group sudo is named as such (with the right password given).
"""

from __future__ import annotations

import pytest

import bounds
from helpers import lab_name, node_exec
from login_labs import ShapeLab, our_lines

pytestmark = pytest.mark.lab

PASSWORD = "lab-sudo-S3cret"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sudo-pw")
    right, wrong = folder / "pw", folder / "wrong"
    for path, text in ((right, PASSWORD), (wrong, "not-" + PASSWORD)):
        path.write_text(text + "\n")
        path.chmod(0o600)
    # systemd as PID 1, as on an HPC admin's bare-metal nodes: the suite's full site.yml (python_env, the
    # all-reduce, a torchrun job) on systemd nodes (molecule's releases scenario skips those two stages)
    made = ShapeLab(lab_name("sudopw"), ["--login", "sudo-password", "--sudo-password-file", str(right),
                                         "--init", "systemd"], password_file=right).up()
    made.wrong = wrong
    try:
        yield made
    finally:
        made.down()


def _fresh(lab):
    """Nothing of site.yml's on the node yet: no venv, no sshd drop-in, no cluster block in /etc/hosts."""
    out = node_exec(lab.name, 1, "ls -d /opt/provision /etc/ssh/sshd_config.d/10-provision.conf 2>/dev/null; "
                                 "grep -c 'BEGIN provision' /etc/hosts || true").stdout.split()
    return out == ["0"]


def test_a_wrong_password_is_named_and_nothing_changes(lab):
    assert _fresh(lab)
    lab.stamp()
    res = lab.site("--become-password-file", str(lab.wrong), become=False)
    assert res.rc != 0
    for node in ("node1", "node2"):
        (line,) = our_lines(res, node)
        assert line == (f"{node}: sudo on {node} rejected the become password given for ops; fix: give ops's sudo "
                        "password (-K / --ask-become-pass, or --become-password-file FILE); nothing was changed")
    assert "lab-sudo" not in res.output  # the password is not echoed, right or wrong
    assert lab.changed_since_stamp() == {1: [], 2: []} and _fresh(lab)


def test_no_password_is_named_and_nothing_changes(lab):
    lab.stamp()
    res = lab.site(become=False)
    assert res.rc != 0
    for node in ("node1", "node2"):
        (line,) = our_lines(res, node)
        assert f"sudo on {node} asks ops for a password and none was given" in line and "-K" in line
    assert lab.changed_since_stamp() == {1: [], 2: []} and _fresh(lab)
    # provision verify without the password: the same cause, exit 1
    proc = lab.verify(become=False)
    assert proc.returncode == 1 and "asks ops for a password" in proc.stdout and "reachable and re-run" not in proc.stdout


def test_fresh_site_with_the_password_then_a_rerun_changes_nothing(lab):
    first = lab.site(timeout=bounds.SITE_FRESH)
    assert first.rc == 0, first
    again = lab.site()
    assert again.rc == 0 and again.changed == 0, again
    assert PASSWORD not in first.output + again.output
    print(f"--login sudo-password: fresh site.yml {first.seconds:.0f} s, re-run {again.seconds:.0f} s (changed=0)")


def test_verify_and_launch_with_the_password(lab):
    proc = lab.verify()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert PASSWORD not in proc.stdout + proc.stderr
    proc, seen = lab.launch_probe()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert sorted((p["host"], p["rank"], p["world"], p["user"], p["sum"]) for p in seen) == [
        ("node1", "0", "2", "trainer", "3"), ("node2", "1", "2", "trainer", "3")], proc.stdout[-3000:]


def test_an_admin_out_of_group_sudo_is_named_and_nothing_changes(lab):
    node_exec(lab.name, 2, "gpasswd -d ops sudo")
    try:
        lab.stamp()
        # a new login: an ssh session made before keeps the groups it logged in with (and sudo reads those)
        res = lab.site(fresh_connections=True)
        assert res.rc != 0
        (line,) = our_lines(res, "node2")
        assert line.startswith("node2: ops may not use sudo on node2 (not in the sudoers file") and "sudoers.d" in line
        assert lab.changed_since_stamp() == {1: [], 2: []}
    finally:
        node_exec(lab.name, 2, "gpasswd -a ops sudo")
