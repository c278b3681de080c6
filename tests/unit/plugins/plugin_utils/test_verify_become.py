"""verify's all-at-once node checks under become (issue 30).

`run_modules` runs several modules on one host at once, in threads. ansible-core's
`_low_level_execute_command` has the become plugin make a new success marker for every command
(`become.success`), and the ssh connection waits for exactly that marker in the command's output.
On one shared connection the threads overwrite each other's marker, and the command whose marker was
replaced waits until ssh's timeout ("Timeout (22s) waiting for privilege escalation prompt:
BECOME-SUCCESS-..."): every check under `ansible_become: true` came back unreachable.

These tests drive the real ActionBase._low_level_execute_command and the real sudo become plugin; only
the connection is a stand-in that does what connection/ssh.py does with the marker (waits for
`self.become.success` in what the remote side prints, else the privilege-escalation timeout).
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from ansible.errors import AnsibleConnectionFailure
from ansible.playbook.play_context import PlayContext
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import become_loader, shell_loader

from ansible_collections.provision.cluster.plugins.plugin_utils import verify as V

MARKER = re.compile(r"BECOME-SUCCESS-[a-z]+")


class SshLikeConnection:
    """What connection/ssh.py does with become: the command carries the marker the plugin made; the
    remote side (sudo, then `echo MARKER`) prints it a moment later; the connection reads
    self.become.success then and waits for that one."""

    transport = "ssh"
    allow_executable = True
    has_pipelining = True

    def __init__(self, become, latency=0.05):
        self.become = become
        self._shell = shell_loader.get("sh")
        self.latency = latency
        self.ran = []

    def exec_command(self, cmd, in_data=None, sudoable=True):
        printed = MARKER.search(cmd).group(0)  # what sudo + echo print on the node
        time.sleep(self.latency)  # the round trip: other threads run meanwhile
        if not self.become.check_success(printed.encode() + b"\n"):
            raise AnsibleConnectionFailure("Timeout (22s) waiting for privilege escalation prompt: %s" % printed)
        self.ran.append(cmd)
        return 0, b"ok\n", b""


class Action(ActionBase):
    """An action whose modules are one become command each (the part of _execute_module at stake)."""

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, wrap_async=False, **_kw):
        res = self._low_level_execute_command("true", sudoable=True)
        return {"rc": res["rc"], "module": module_name, "changed": False}

    def run(self, tmp=None, task_vars=None):  # pragma: no cover - not used
        return {}


def _action(latency=0.05):
    sudo = become_loader.get("sudo")
    sudo.set_options(direct={"become_user": "root"})
    conn = SshLikeConnection(sudo, latency)
    task = type("Task", (), {"async_val": 0, "environment": [], "check_mode": True, "diff": False,
                             "become": True, "become_user": "root", "remote_user": "ops"})()
    action = Action(task, conn, PlayContext(), loader=None, templar=None, shared_loader_obj=None)
    action._get_remote_user = lambda: "ops"
    return action, conn


JOBS = [("check%d" % i, "provision.cluster.m%d" % i, {}) for i in range(6)]


def test_checks_at_once_under_become_all_succeed():
    action, conn = _action()
    out = V.run_modules(action, JOBS, task_vars={}, parallel=6)
    assert sorted(out) == sorted(n for n, _m, _a in JOBS)
    bad = {n: r for n, r in out.items() if r.get("unreachable") or r.get("failed")}
    assert not bad, bad
    assert len(conn.ran) == len(JOBS)


def test_one_shared_connection_loses_markers():
    """The cause, shown on the stand-in: the same jobs on ONE connection object, in threads, lose
    markers (what run_modules did before each thread had its own copy)."""
    action, _conn = _action()
    results = {}

    def one(i):
        try:
            action._low_level_execute_command("true", sudoable=True)
            results[i] = "ok"
        except AnsibleConnectionFailure as exc:
            results[i] = str(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert any("waiting for privilege escalation" in r for r in results.values()), results


def test_each_thread_has_its_own_become_and_shell():
    action, conn = _action()
    a, b = V.own_connection(action), V.own_connection(action)
    assert a._connection is not conn and a._connection is not b._connection
    assert a._connection.become is not b._connection.become is not conn.become
    assert a._connection._shell is not b._connection._shell
    # what is read-only stays shared: the options the plugin was given, the task
    assert a._connection.become.get_option("become_user") == "root"
    assert a._task is action._task


@pytest.mark.parametrize("jobs", [[], JOBS[:1]])
def test_no_or_one_job(jobs):
    action, conn = _action(latency=0)
    out = V.run_modules(action, jobs, task_vars={})
    assert len(out) == len(jobs) and all(r["rc"] == 0 for r in out.values())
