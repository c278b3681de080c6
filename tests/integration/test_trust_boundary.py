"""Root on the nodes trusts nothing the training user controls (issue 31), on a real 2-node lab.

The lab is conftest's bastion_lab, the cloud shape of test_login_bastion (which runs first, on the same
nodes): the non-root `trainer` is the cluster user, the admin `ops` logs in and becomes root with sudo, as
on a cloud VM. Its site.yml ran once, fresh and green: the trainer's files are the trainer's, the venv is
root's, the all-reduce ran as the trainer. Then the trainer plants what the issue found root following:
`~/.ssh/config -> /etc/shadow`, a dangling key path into /etc, a dangling `~/.bashrc -> /etc/profile.d/x.sh`,
`~/.provision -> /etc`, and tries a `.pth` file in the venv's site-packages (refused: the venv is root's).
The stages that write the home, `provision verify` and the SLURM health check (from a root-owned install of
its own) run; each refusal is one line naming the node, the file and the fix; nothing outside the trainer's
home changed owner, mode or content (a listing of /etc, /opt/provision and /usr/local on both nodes, before
and after).

Runs only the stages each step needs (--tags): four failing runs of one stage each, and one green re-run
of the four stages that write the home, which changes nothing. (Until 2026-11-28 this module made a lab of
its own, root logging in, and ran site.yml fresh on it: one converge more per suite run.)
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from helpers import REPO, ansible_env, install_wheels, node_exec, run_playbook, tool
from login_labs import BASTION_LAB

pytestmark = pytest.mark.lab

LAB = BASTION_LAB
USER = "trainer"
HOME = f"/home/{USER}"
VENV = "/opt/provision/venv"
HEALTH = "/opt/provision-health"
# owner, group, mode, type and size of everything; the content of every file but the venv's (its
# ~1 GB would take minutes to hash: a file changed there changes its size, mtime or ctime)
LISTING = (
    "find /etc /usr/local /opt/provision -xdev -printf '%p %u %g %m %y %s %T@ %C@\\n' 2>/dev/null | sort; "
    "find /etc /usr/local -xdev -type f -print0 2>/dev/null | sort -z | xargs -0 sha256sum"
)
VARS = {"cluster_user": USER}


def listing(node: int) -> str:
    return node_exec(LAB, node, LISTING, timeout=300).stdout


def stage(*tags: str):
    t0 = time.monotonic()
    res = run_playbook("site.yml", lab_name=LAB, extra_vars=VARS, extra_args=["--tags", ",".join(tags)], timeout=900)
    res.seconds = time.monotonic() - t0
    return res


def fatal_lines(res, node: str) -> list[str]:
    """The msg of each failed task of NODE (the one line the user reads)."""
    out = []
    for line in res.stdout.splitlines():
        if line.startswith(f"fatal: [{node}]"):
            payload = line.split("=> ", 1)[1] if "=> " in line else "{}"
            try:
                out.append(json.loads(payload).get("msg", payload))
            except ValueError:
                out.append(payload)
    return out


@pytest.fixture(scope="module")
def lab(bastion_lab, provision_wheels):
    assert bastion_lab.first.rc == 0, bastion_lab.first
    assert node_exec(LAB, 1, f"id -u {USER}").stdout.strip() == "2001"
    # the health check's own installation, root's (docs/slurm.md), on node1
    install_wheels(LAB, 1, provision_wheels, HEALTH, "provision")
    node_exec(LAB, 1, f"printf '#!/bin/sh\\nexec {HEALTH}/bin/provision verify --local -e cluster_user={USER} "
                      "--timeout 300\\n' > /usr/local/sbin/provision-healthcheck && "
                      "chmod 755 /usr/local/sbin/provision-healthcheck")
    yield bastion_lab
    node_exec(LAB, 1, f"rm -rf {HEALTH} /usr/local/sbin/provision-healthcheck", check=False)


def healthcheck() -> subprocess.CompletedProcess:
    """As slurmd runs HealthCheckProgram: as root, an almost empty environment, from /."""
    return subprocess.run(["podman", "exec", "-w", "/", f"{LAB}-node1", "env", "-i", "SLURMD_NODENAME=node1",
                           "/usr/local/sbin/provision-healthcheck"], capture_output=True, text=True, timeout=400)


def test_site_yml_for_a_non_root_user_gives_it_its_files_and_keeps_the_venv_roots(lab):
    for n in (1, 2):
        owners = node_exec(LAB, n, f"stat -c '%n %U %a' {HOME}/.ssh {HOME}/.ssh/id_ed25519 {HOME}/.ssh/config "
                                   f"{HOME}/.bashrc {HOME}/.provision/launch {VENV} {VENV}/bin/python3").stdout
        got = {line.split()[0]: line.split()[1:] for line in owners.splitlines()}
        assert got[f"{HOME}/.ssh"] == [USER, "700"] and got[f"{HOME}/.ssh/id_ed25519"] == [USER, "600"], got
        assert got[f"{HOME}/.ssh/config"][0] == USER and got[f"{HOME}/.bashrc"][0] == USER, got
        assert got[f"{HOME}/.provision/launch"][0] == USER and got[VENV][0] == "root", got
        # the venv root runs is not the trainer's to change
        assert node_exec(LAB, n, f"find {VENV} ! -user root | head -3").stdout == ""
    # the all-reduce ran as the trainer: its result is in the trainer's private directory on the master
    result = node_exec(LAB, 1, f"stat -c %U {HOME}/.cache/provision/allreduce/result.json && "
                               f"cat {HOME}/.cache/provision/allreduce/result.json").stdout
    owner, doc = result.split("\n", 1)
    assert owner == USER and json.loads(doc)["status"] in ("pass", "warn"), doc[:400]


def test_links_planted_by_the_user_are_refused_in_one_line_and_nothing_outside_its_home_changes(lab):
    before = {n: listing(n) for n in (1, 2)}
    as_trainer = {"user": USER}
    # the trainer cannot put code into the venv root runs
    pth = node_exec(LAB, 1, f"echo 'import os; os.system(\"touch /tmp/pwned\")' > "
                            f"$(echo {VENV}/lib/python3*/site-packages)/zz-planted.pth", check=False, **as_trainer)
    assert pth.returncode != 0 and "Permission denied" in pth.stderr, pth
    shadow = {n: node_exec(LAB, n, "sha256sum /etc/shadow").stdout for n in (1, 2)}

    # 1. ~/.ssh/config -> /etc/shadow on both nodes: the ssh_mesh stage reads it as the trainer
    for n in (1, 2):
        node_exec(LAB, n, "cp -p ~/.ssh/config ~/config.mine && ln -sf /etc/shadow ~/.ssh/config", **as_trainer)
    res = stage("ssh_mesh")
    assert res.rc != 0, res
    for n in (1, 2):
        lines = fatal_lines(res, f"node{n}")
        assert len(lines) == 1 and "\n" not in lines[0], (n, lines, res)
        assert lines[0].startswith(f"cannot read {HOME}/.ssh/config: Permission denied (it is a symbolic link to "
                                   "/etc/shadow); fix:"), lines
        # the link is still the user's, and it holds no copy of the shadow file
        assert node_exec(LAB, n, "readlink ~/.ssh/config", **as_trainer).stdout.strip() == "/etc/shadow"
        assert node_exec(LAB, n, f"grep -rl '^root:' {HOME} 2>/dev/null", check=False).stdout == ""

    # 2. a dangling key path into /etc: ssh-keygen runs as the trainer, nothing appears in /etc
    for n in (1, 2):
        node_exec(LAB, n, "mkdir -p ~/keys.mine && mv ~/.ssh/id_ed25519* ~/keys.mine/ && "
                          "ln -s /etc/provision-planted-key ~/.ssh/id_ed25519", **as_trainer)
    res = stage("ssh_mesh")
    assert res.rc != 0, res
    for n in (1, 2):
        lines = fatal_lines(res, f"node{n}")
        assert len(lines) == 1 and "\n" not in lines[0], (n, lines, res)
        assert f"{HOME}/.ssh/id_ed25519" in lines[0] and "/etc/provision-planted-key" in lines[0], lines
        assert "fix:" in lines[0] and "Permission denied" in lines[0], lines
        assert node_exec(LAB, n, "test -e /etc/provision-planted-key", check=False).returncode == 1

    # 3. ~/.bashrc -> /etc/profile.d/x.sh (dangling), then ~/.provision -> /etc, on both nodes
    for n in (1, 2):
        node_exec(LAB, n, "mv ~/.bashrc ~/bashrc.mine && ln -s /etc/profile.d/x.sh ~/.bashrc && "
                          "mv ~/.provision ~/provision.mine && ln -s /etc ~/.provision", **as_trainer)
    res = stage("shell_env")
    assert res.rc != 0, res
    for n in (1, 2):
        (line,) = fatal_lines(res, f"node{n}")
        assert line.startswith(f"{HOME}/.bashrc is a symbolic link to /etc/profile.d/x.sh: cannot write "
                               f"/etc/profile.d/x.sh: Permission denied; fix: make {HOME}/.bashrc a regular file"), line
    res = stage("launchers")
    assert res.rc != 0, res
    for n in (1, 2):
        (line,) = fatal_lines(res, f"node{n}")
        assert line.startswith(f"launch_dir: cannot write {HOME}/.provision/launch: Permission denied ({HOME}/.provision "
                               "is a symbolic link to /etc); fix:"), line
        assert node_exec(LAB, n, "test -e /etc/profile.d/x.sh || test -e /etc/launch", check=False).returncode == 1

    # 4. verify and the health check run as root beside the planted links; they change nothing
    proc = subprocess.run([tool("provision"), "verify", "-i", str(REPO / "inventory" / "lab"), "--json",
                           "-e", f"cluster_user={USER}"], cwd=REPO, env=ansible_env(LAB), capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    env = [c for c in doc["checks"] if c["check"] == "env block" and c["node"] == "node1"]
    assert env and env[0]["status"] == "fail" and "symbolic link" in env[0]["detail"], env
    # the launch files behind ~/.provision -> /etc: named, not read
    launch = [c for c in doc["checks"] if c["check"] == "launch files" and c["node"] == "node1"]
    assert launch and launch[0]["status"] == "fail", launch
    assert launch[0]["detail"].startswith(f"{HOME}/.provision is a symbolic link (to /etc)"), launch
    health = healthcheck()
    assert health.returncode in (0, 1), health.stdout[-2000:] + health.stderr[-2000:]

    for n in (1, 2):
        assert node_exec(LAB, n, "sha256sum /etc/shadow").stdout == shadow[n]
        assert node_exec(LAB, n, "test -e /tmp/pwned", check=False).returncode == 1
        after = listing(n)
        gone = sorted(set(before[n].splitlines()) - set(after.splitlines()))
        new = sorted(set(after.splitlines()) - set(before[n].splitlines()))
        assert (gone, new) == ([], []), f"node{n}: outside the trainer's home:\n-{gone[:20]}\n+{new[:20]}"

    # the trainer takes its files back; site.yml's stages are green again (nothing was lost)
    for n in (1, 2):
        node_exec(LAB, n, "rm ~/.ssh/config ~/.ssh/id_ed25519 && mv ~/config.mine ~/.ssh/config && "
                          "mv ~/keys.mine/* ~/.ssh/ && rmdir ~/keys.mine", **as_trainer)
        node_exec(LAB, n, "rm ~/.bashrc ~/.provision && mv ~/bashrc.mine ~/.bashrc && mv ~/provision.mine ~/.provision",
                  **as_trainer)
    # (pdsh too: its PDSH_RCMD_TYPE for the ~/.bashrc block is a fact of this run, not of the cache)
    again = stage("ssh_mesh", "pdsh", "shell_env", "launchers")
    assert again.rc == 0 and again.changed == 0, again


def test_the_health_check_refuses_an_installation_the_user_could_write(lab):
    """slurmd runs it as root every interval: one file of its install given to the trainer, and it checks
    nothing and exits 2 naming that file and the fix."""
    target = node_exec(LAB, 1, f"ls {HEALTH}/lib/python3*/site-packages/provision/__init__.py").stdout.strip()
    node_exec(LAB, 1, f"chown {USER} {target}")
    try:
        proc = healthcheck()
    finally:
        node_exec(LAB, 1, f"chown root {target}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    text = " ".join((proc.stdout + proc.stderr).split())
    assert f"{target} is owned by uid" in text and "fix: install provision in a root-owned venv" in text, text
    ok = healthcheck()
    assert ok.returncode in (0, 1), ok.stdout[-2000:] + ok.stderr[-2000:]
