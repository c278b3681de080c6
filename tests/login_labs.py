"""What the login-shape lab tests share (issue 30): a lab of one shape per test module, site.yml and the
provision commands as a user runs them in that shape, and a proof that a refused run changed nothing."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import bounds
from helpers import REPO, ansible_env, lab_cmd, lab_name, node_exec, probe_lines, run_playbook, tool

# one rank's line: who ran it, with which python, and the all-reduce's sum (3 on 2 nodes)
PROBE = """\
import os, pwd, socket, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print("PROBE host=%s rank=%d world=%d user=%s python=%s sum=%d" % (socket.gethostname(), dist.get_rank(),
      dist.get_world_size(), pwd.getpwuid(os.getuid()).pw_name, sys.executable, int(t.item())), flush=True)
dist.destroy_process_group()
"""
# what site.yml writes (root's and the users' files, the venv, /etc): nothing there may be newer than the
# stamp a refused run started after; the admin's logging in aside (ansible's temporary files, the note sudo
# leaves after its first success: ~/.sudo_as_admin_successful, and so the home's own mtime)
CHANGED = ("find /etc /opt /usr/local /root /home -xdev -newer /tmp/lg-stamp -not -path '/home/ops' "
           "-not -path '/home/ops/.ansible*' -not -path /home/ops/.sudo_as_admin_successful -print 2>/dev/null | sort")

# the lab of conftest's bastion_lab (--bastion: the admin ops with NOPASSWD sudo behind NAME-bastion)
BASTION_LAB = lab_name("bast")


class ShapeLab:
    """A 2-node lab of one login shape, up for one test module (the password shape's) or for the session
    (conftest's bastion_lab, which two modules use)."""

    def __init__(self, name: str, options: list[str], password_file: Path | None = None):
        self.name = name
        self.options = options
        self.password_file = password_file
        self.first = None       # site.yml's fresh run
        self.first_seconds = 0.0

    # -- the lab
    def up(self) -> "ShapeLab":
        lab_cmd("down", lab_name=self.name, check=False, timeout=bounds.LAB_UP)
        lab_cmd("up", "--nodes", "2", *self.options, lab_name=self.name, timeout=bounds.LAB_UP)
        return self

    def down(self) -> None:
        if os.environ.get("PROVISION_KEEP_LABS") != "1":
            lab_cmd("down", lab_name=self.name, check=False, timeout=bounds.LAB_UP)

    def forget(self, snapshot: str) -> None:
        """Remove a snapshot saved of this lab (`lab forget` takes no --name: lab_cmd would add one)."""
        subprocess.run([tool("provision"), "lab", "forget", snapshot], cwd=REPO, env=ansible_env(),
                       capture_output=True, timeout=bounds.LAB_UP, check=False)

    def status(self) -> dict:
        return json.loads(lab_cmd("status", "--json", lab_name=self.name).stdout)

    def state_dir(self) -> Path:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "provision" / "labs" / self.name

    # -- as a user runs things
    def become_args(self) -> list[str]:
        return ["--become-password-file", str(self.password_file)] if self.password_file else []

    def site(self, *extra: str, timeout: float = bounds.STAGES, become: bool = True, extra_vars: dict | None = None,
             fresh_connections: bool = False):
        """site.yml on the lab; fresh_connections: no ssh master of an earlier run is reused (as from a new shell)."""
        t0 = time.monotonic()
        env = {"ANSIBLE_SSH_ARGS": "-o ControlMaster=no -o ConnectTimeout=5"} if fresh_connections else None
        res = run_playbook("site.yml", lab_name=self.name, extra_args=(self.become_args() if become else [])
                           + list(extra), extra_vars=extra_vars, timeout=timeout, env=env)
        res.seconds = time.monotonic() - t0
        return res

    def provision(self, *args: str, timeout: float = bounds.VERIFY, become: bool = True) -> subprocess.CompletedProcess:
        argv = [tool("provision"), *args[:1], *(self.become_args() if become else []), *args[1:]]
        return subprocess.run(argv, cwd=REPO, env=ansible_env(self.name), capture_output=True, text=True,
                              timeout=timeout, check=False)

    def verify(self, *args: str, become: bool = True) -> subprocess.CompletedProcess:
        return self.provision("verify", "-i", str(REPO / "inventory" / "lab"), "--json", *args, become=become)

    def launch_probe(self) -> tuple[subprocess.CompletedProcess, list[dict]]:
        """`provision launch` (torchrun, c10d) of the probe on both nodes; its records."""
        for n in (1, 2):
            node_exec(self.name, n, f"cat > /tmp/probe.py <<'EOF'\n{PROBE}EOF\nchmod 644 /tmp/probe.py")
        proc = self.provision("launch", "-i", str(REPO / "inventory" / "lab"), "--timeout", str(int(bounds.JOB_INNER)),
                              "--", "/tmp/probe.py", timeout=bounds.JOB)
        return proc, probe_lines(proc.stdout)

    # -- changes nothing
    def stamp(self) -> None:
        for n in (1, 2):
            node_exec(self.name, n, "touch /tmp/lg-stamp; sleep 0.01")

    def changed_since_stamp(self) -> dict[int, list[str]]:
        return {n: node_exec(self.name, n, CHANGED).stdout.split() for n in (1, 2)}


def fatal_messages(res) -> list[str]:
    """The msg of every `fatal:` line of a run (what the user reads)."""
    out = []
    for line in res.stdout.splitlines():
        if line.startswith("fatal: [") and "=> " in line:
            try:
                msg = json.loads(line.split("=> ", 1)[1]).get("msg", "")
            except ValueError:
                continue
            out.extend(msg if isinstance(msg, list) else [msg])
    return out


def our_lines(res, node: str) -> list[str]:
    """The one-line messages of ours about NODE (node: cause; fix: ...), Ansible's own raw ones left out."""
    return [m for m in fatal_messages(res) if m.startswith(f"{node}: ") and "; fix: " in m]
