# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Is the managed ~/.bashrc block what a non-interactive ssh session gets? (pure Python)

The block and guard parsing are the shell_env module's (module_utils/common/bashrc.py: split_block,
find_guard); this file reads the block's exports, builds the ssh command and decides the check. The
check `env` of the catalog: ARGS and run() are its arguments and its run, shared by the read-only
module shell_env_check and by shell_env_block, which runs it after writing the block (stage_check.py).
"""
from __future__ import annotations

import os
import pwd
import re
import shlex
import subprocess

from ansible_collections.provision.cluster.plugins.module_utils.common import bashrc as B
from ansible_collections.provision.cluster.plugins.module_utils.common.files import UnsafeFile, read_user_file
from ansible_collections.provision.cluster.plugins.module_utils.common.users import as_user

FIX = "ansible-playbook site.yml --tags shell_env"
# the check's arguments (the module shell_env_check's options)
ARGS = {
    "user": {"type": "str", "default": "root"},
    "bashrc": {"type": "path"},
    "ssh_host": {"type": "str", "required": True},
    "timeout": {"type": "int", "default": 10},
}
_PREPEND = re.compile(r"""^case ":\$\{(?P<var>\w+):-\}:" in \*:(?P<item>.+?):\*\)""")
_EXPORT = re.compile(r"^export\s+(?P<rest>\w+=.*)$")


def result(status, detail, fix=""):
    return {"check": "env block", "status": status, "detail": detail, "fix": fix}


def block_layout(text, split_block, find_guard):
    """Where the managed block and the first non-interactive guard are.

    -> {exists, block, block_line, guard_line, below_guard}; lines are 1-based in the file as it is.
    """
    if text is None:
        return {"exists": False, "block": None, "block_line": None, "guard_line": None, "below_guard": False}
    rest, block, at = split_block(text)
    rest_lines = [line.rstrip("\r\n") for line in rest.splitlines(keepends=True)]
    guard = find_guard(rest_lines)
    below = block is not None and guard is not None and at > guard
    guard_line = None
    if guard is not None:
        guard_line = guard + 1 + (len(block.splitlines()) if block is not None and at <= guard else 0)
    return {"exists": True, "block": block, "block_line": None if at is None else at + 1,
            "guard_line": guard_line, "below_guard": below}


def block_exports(block):
    """-> {"env": {NAME: value}, "path": {VAR: [dirs prepended]}} from the block's lines."""
    env, path = {}, {}
    for line in block.splitlines():
        line = line.strip()
        m = _EXPORT.match(line)
        if m:
            try:
                words = shlex.split(m.group("rest"))
            except ValueError:
                continue
            if len(words) == 1 and "=" in words[0]:
                name, value = words[0].split("=", 1)
                env[name] = value
            continue
        m = _PREPEND.match(line)
        if m:
            try:
                item = shlex.split(m.group("item"))
            except ValueError:
                continue
            if item:
                path.setdefault(m.group("var"), []).append(item[0])
    return {"env": env, "path": path}


def wanted_names(expected):
    return sorted(set(expected.get("env") or {}) | set(expected.get("path") or {}))


def ssh_argv(ssh, host, timeout):
    """Non-interactive ssh as launchers use it (the user's ssh config and known_hosts, no prompt)."""
    return [ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=%d" % timeout, host, "env -0"]


def parse_env0(stdout, names):
    """`env -0` output -> {name: value or None} for the names asked."""
    found = {}
    for item in (stdout or "").split("\0"):
        name, sep, value = item.partition("=")
        if sep:
            found[name.strip("\n")] = value
    return {n: found.get(n) for n in names}


def decide(path, layout, expected, seen, ssh_error, host):
    """The check: block present, above the guard, and every export/PATH entry seen over ssh."""
    if not layout["exists"]:
        return result("fail", "%s does not exist: there is no environment block" % path, FIX)
    if layout["block"] is None:
        return result("fail", "no provision environment block in %s" % path, FIX)
    if layout["below_guard"]:
        return result("fail", "the block is at line %d of %s, below the non-interactive guard at line %d: "
                      "ssh/pdsh/mpirun never read it" % (layout["block_line"], path, layout["guard_line"]),
                      FIX + " (moves the block above the guard)")
    names = wanted_names(expected)
    if not names:
        return result("pass", "the block in %s exports nothing" % path)
    if ssh_error:
        return result("fail", "`ssh %s` failed: %s" % (host, ssh_error),
                      "fix the SSH mesh first (see the ssh checks), then re-run")
    wrong = []
    for name, value in sorted((expected.get("env") or {}).items()):
        if seen.get(name) != value:
            wrong.append("%s=%s (block: %s)" % (name, "unset" if seen.get(name) is None else seen[name], value))
    for var, dirs in sorted((expected.get("path") or {}).items()):
        have = (seen.get(var) or "").split(":")
        missing = [d for d in dirs if d not in have]
        if missing:
            wrong.append("%s lacks %s" % (var, ":".join(missing)))
    if wrong:
        return result("fail", "`ssh %s` (non-interactive) sees %s" % (host, "; ".join(wrong)),
                      "something after the block in %s overrides it, or the login shell is not bash; %s"
                      % (path, FIX))
    return result("pass", "`ssh %s` sees the block's %d variable(s), above the guard at line %s of %s"
                  % (host, len(names), layout["guard_line"] or "-", path))


def check_env(user, bashrc, ssh_host, timeout, get_bin_path, split_block, find_guard):
    """The whole check on this node: read user's ~/.bashrc block, run `ssh ssh_host printenv -0` as
    that user, compare. get_bin_path(name) -> path or None. -> {expected, seen, where, checks}."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return {"expected": {}, "seen": {}, "where": {},
                "checks": [result("fail", "user %s does not exist" % user, "ansible-playbook site.yml --tags ssh_mesh")]}
    path = bashrc or os.path.join(pw.pw_dir, ".bashrc")
    try:
        # root reading the user's file: through the home's fds, never following a link planted there
        text = read_user_file(pw, path)
        layout = block_layout(text, split_block, find_guard)
    except (UnsafeFile, ValueError) as exc:  # UnsafeFile, or the block's markers do not pair (MarkerError)
        detail = str(exc) if isinstance(exc, UnsafeFile) else "%s %s" % (path, exc)
        return {"expected": {}, "seen": {}, "where": {},
                "checks": [result("fail", detail.split("; fix: ")[0],
                                  detail.split("; fix: ", 1)[1] if "; fix: " in detail else FIX)]}
    expected = block_exports(layout["block"] or "")
    names = wanted_names(expected)
    seen = {}
    ssh_error = None
    if layout["block"] and not layout["below_guard"] and names:
        ssh = get_bin_path("ssh")
        if not ssh:
            ssh_error = "ssh client not installed"
        else:
            popen_user, ssh_error = as_user(user)
            try:
                if ssh_error:
                    raise FileNotFoundError
                proc = subprocess.run(ssh_argv(ssh, ssh_host, timeout), capture_output=True, text=True,
                                      timeout=2 * timeout + 5, check=False, stdin=subprocess.DEVNULL, **popen_user)
                if proc.returncode == 255:
                    ssh_error = (proc.stderr.strip().splitlines() or ["ssh failed"])[-1]
                else:
                    seen = parse_env0(proc.stdout, names)
            except FileNotFoundError:
                pass
            except subprocess.TimeoutExpired:
                ssh_error = "ssh %s did not answer within %ds" % (ssh_host, 2 * timeout + 5)
    check = decide(path, layout, expected, seen, ssh_error, ssh_host)
    return {"expected": expected, "seen": seen, "where": {"block": layout["block_line"], "guard": layout["guard_line"]},
            "checks": [check]}


def run(params, module):
    """The check with ARGS's parameters, on this node (module: its get_bin_path) -> the module's result."""
    return check_env(params["user"], params["bashrc"], params["ssh_host"], params["timeout"], module.get_bin_path,
                     B.split_block, B.find_guard)
