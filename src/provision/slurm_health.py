"""`provision verify --local --slurm-drain`: SLURM's node health check (HealthCheckProgram or a prolog).

It checks the node it runs on (`verify.verify_local`: the catalog's node-local checks, Ansible's
local connection, read-only), then drains that node when a check failed and resumes it when every
check passes, but only a drain it made itself: its reasons start with REASON_PREFIX, and a node an
admin drained (any other reason) is never resumed nor relabelled.

`decide()` and `format_reason()` are pure (unit-tested); `run()` reads the node with scontrol and
applies the decision.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from provision.exits import ExitCode

REASON_PREFIX = "provision: "
# slurmctld keeps reasons of any length, but sinfo -R shows the first 20 characters by default and
# `%E`/`-O Reason` shows what fits; one line, and short enough to read whole in `sinfo -R -o '%100E'`
REASON_MAX = 200
SCONTROL_TIMEOUT = 20

DRAIN, RESUME, NOTHING = "drain", "resume", "nothing"
# exit codes of --slurm-drain (docs/slurm.md: Node health check)
EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_ERROR = ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE  # provision.exits


class SlurmError(Exception):
    """scontrol could not read or change the node (exit 2 of --slurm-drain): one line."""


@dataclass
class NodeState:
    """What slurmctld says of the node: its state flags and the reason set with them."""

    name: str
    state: str = ""            # scontrol's State=, e.g. IDLE, IDLE+DRAIN, MIXED+DRAIN, DOWN*+DRAIN
    reason: str = ""           # the reason text, without the " [user@time]" slurmctld appends
    reason_user: str = ""
    address: str = ""          # NodeAddr: where the other nodes reach it (its cluster address)

    @property
    def flags(self) -> set[str]:
        return {part.rstrip("*~#!%$@^-") for part in self.state.upper().split("+") if part}

    @property
    def drained(self) -> bool:
        """DRAIN set (slurmctld shows it as DRAINING while jobs still run, DRAINED once idle)."""
        return bool(self.flags & {"DRAIN", "DRAINING", "DRAINED"})

    @property
    def ours(self) -> bool:
        """Drained by this health check (the reason carries our prefix), not by an admin."""
        return self.reason.startswith(REASON_PREFIX)


@dataclass
class Action:
    kind: str                  # drain, resume or nothing
    reason: str = ""           # the reason given to scontrol (drain)
    why: str = ""              # one line for the log: why this action
    failures: list[dict[str, Any]] = field(default_factory=list)


_NODE_STATE = re.compile(r"(?:^|\s)State=(\S+)")
_REASON = re.compile(r"(?:^|\s)Reason=(.*?)(?:\s+\[([^@\]\s]+)@[^\]]*\])?\s*$")


def parse_node(text: str, name: str) -> NodeState:
    """`scontrol show node -o NAME` (one line; Reason= is its last field) -> NodeState."""
    line = next((ln for ln in text.splitlines() if f"NodeName={name} " in ln + " "), text.strip())
    state = _NODE_STATE.search(line)
    addr = re.search(r"(?:^|\s)NodeAddr=(\S+)", line)
    out = NodeState(name, state.group(1) if state else "", address=addr.group(1) if addr else "")
    m = _REASON.search(line)
    if m and m.group(1).strip() not in ("", "(null)"):
        out.reason, out.reason_user = m.group(1).strip(), m.group(2) or ""
    return out


def _clean(text: Any) -> str:
    """One line, no double quotes (the reason is one scontrol argument), spaces squeezed."""
    return " ".join(str(text or "").replace('"', "'").split())


def failures_of(doc: dict[str, Any], node: str | None = None) -> list[dict[str, Any]]:
    """The failed checks of a verify document (of NODE when given), in document order."""
    return [c for c in doc.get("checks") or [] if c.get("status") == "fail" and (node is None or c.get("node") == node)]


def format_reason(failures: list[dict[str, Any]], limit: int = REASON_MAX) -> str:
    """'provision: <check>: <cause>' for the first failed check, '(+N more)' when there are others,
    one line, at most LIMIT characters (the cause is cut with '...')."""
    if not failures:
        return ""
    first = failures[0]
    more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
    head = f"{REASON_PREFIX}{_clean(first.get('check')) or 'check'}: "
    cause = _clean(first.get("detail")) or "failed"
    room = limit - len(head) - len(more)
    if len(cause) > room:
        cause = cause[: max(room - 3, 0)].rstrip() + "..."
    return head + cause + more


def decide(failures: list[dict[str, Any]], node: NodeState) -> Action:
    """What the health check does with the node, from its failed checks and slurmctld's view of it.

    - a check failed: drain with the reason; unless the node is drained already by someone else
      (an admin's drain is kept as it is) or by us with the same reason (nothing to change)
    - every check passed: resume the node when it is drained by us; an admin's drain stays
    """
    if failures:
        reason = format_reason(failures)
        if node.drained and not node.ours:
            return Action(NOTHING, why=f"{node.name} is drained by {node.reason_user or 'an admin'} "
                                       f"({node.reason!r}): left as it is", failures=failures)
        if node.drained and node.reason == reason:
            return Action(NOTHING, reason, why=f"{node.name} is already drained for this reason", failures=failures)
        return Action(DRAIN, reason, why=f"{len(failures)} check(s) failed", failures=failures)
    if node.drained and node.ours:
        return Action(RESUME, why=f"every check passes; {node.name} was drained by this check ({node.reason!r})")
    if node.drained:
        return Action(NOTHING, why=f"every check passes; {node.name} is drained by {node.reason_user or 'an admin'} "
                                   f"({node.reason!r}): not ours to resume")
    return Action(NOTHING, why="every check passes")


def scontrol_argv(action: Action, node: str) -> list[str] | None:
    """The scontrol command that applies ACTION to NODE (None: nothing to do)."""
    if action.kind == DRAIN:
        return ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={action.reason}"]
    if action.kind == RESUME:
        return ["scontrol", "update", f"nodename={node}", "state=resume"]
    return None


def exit_code(action: Action) -> int:
    return EXIT_UNHEALTHY if action.failures else EXIT_HEALTHY


# ---------------------------------------------------------------- on the node

def node_name(given: str | None = None) -> str:
    """This node's SLURM name: --node-name, else SLURMD_NODENAME (slurmd sets it for its health check,
    prolog and epilog), else the short host name (SLURM's default NodeName)."""
    return given or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".", 1)[0]


def health_environment() -> None:
    """slurmd runs HealthCheckProgram with an almost empty environment: give this process (and the
    ansible-playbook it starts) a PATH with scontrol and a HOME for Ansible's temporary files."""
    path = os.environ.get("PATH") or ""
    for extra in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if extra not in path.split(os.pathsep):
            path = f"{path}{os.pathsep}{extra}" if path else extra
    os.environ["PATH"] = path
    if not os.environ.get("HOME"):
        import pwd

        os.environ["HOME"] = pwd.getpwuid(os.getuid()).pw_dir or "/root"
    os.environ.setdefault("LANG", "C.UTF-8")


def install_problems(prefix: str | None = None, packages: list[str] | None = None) -> list[str]:
    """Why root must not run this installation of provision (issue 31): slurmd runs the health check as
    root every HealthCheckInterval, so nothing it runs may be writable by another user (the training
    venv of an earlier version was the cluster user's). A venv or conda prefix is checked whole; a
    system-wide install, the packages' own directories. [] when only root could have written it."""
    import sys

    from provision.ansible import collection_module
    from provision.paths import collections_dir

    env = collection_module("common.python_env")
    prefix = prefix or sys.prefix
    if env.is_environment(prefix):
        return env.untrusted(prefix)
    if packages is None:
        import ansible

        import provision

        packages = [os.path.dirname(provision.__file__), os.path.dirname(ansible.__file__), str(collections_dir())]
    found: list[str] = []
    for path in [os.path.realpath(sys.executable)] + packages:
        found += [r for r in env.untrusted(path, walk=path in packages) if r not in found]
    return found[:3]


def _scontrol(argv: list[str]) -> str:
    exe = shutil.which(argv[0])
    if not exe:
        raise SlurmError("scontrol is not on PATH: --slurm-drain runs on a SLURM node (slurm-client)")
    try:
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"`{' '.join(argv[:3])}` did not answer within {SCONTROL_TIMEOUT} s (slurmctld down?)") from exc
    if proc.returncode != 0:
        raise SlurmError(f"`{' '.join(argv[:3])}` failed: {_clean(proc.stderr or proc.stdout) or proc.returncode}")
    return proc.stdout


def read_node(name: str) -> NodeState:
    out = _scontrol(["scontrol", "show", "node", "-o", name])
    if f"NodeName={name} " not in out + " ":
        raise SlurmError(f"slurmctld knows no node {name!r} (give --node-name as slurm.conf names it)")
    return parse_node(out, name)


def run(doc_of: Callable[[str, str | None], dict[str, Any]], name: str | None = None, *,
        apply: bool = True) -> dict[str, Any]:
    """Check this node (DOC_OF(node, its NodeAddr) -> verify document), decide, and drain/resume it with scontrol
    (APPLY false: only say what would be done). Returns {node, action, reason, why, state_before,
    failures, document, exit_code}."""
    node = node_name(name)
    before = read_node(node)
    try:
        doc = doc_of(node, before.address or None)
    except TimeoutError as exc:
        # no cause to name: on a node busy with jobs the checks can be slow without anything being
        # wrong, and a drain "timed out" would take healthy nodes out; nothing is changed (exit 2)
        raise SlurmError(f"{exc}; {node} left as it is ({before.state}"
                         + (f", {before.reason!r}" if before.reason else "") + ")") from exc
    fails = failures_of(doc)
    action = decide(fails, before)
    argv = scontrol_argv(action, node)
    if argv and apply:
        _scontrol(argv)
    return {"node": node, "action": action.kind, "applied": bool(argv and apply), "reason": action.reason,
            "why": action.why, "state_before": before.state, "reason_before": before.reason,
            "failures": [{"check": c.get("check"), "detail": c.get("detail"), "fix": c.get("fix")} for c in fails],
            "document": doc, "exit_code": exit_code(action)}
