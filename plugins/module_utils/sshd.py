# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Decisions of the sshd_service module, as plain functions of what it read (no Ansible)."""

from __future__ import annotations

import hashlib


def parse_sshd_T(text):
    """`sshd -T` output -> {keyword: [values]} (keywords lower-case, as sshd prints them)."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if parts:
            out.setdefault(parts[0].lower(), []).append(parts[1] if len(parts) > 1 else "")
    return out


def config_digest(text):
    """Digest of the effective configuration: a change means sshd must re-read it."""
    return hashlib.sha256(text.encode()).hexdigest()


def effective_problems(effective, ports, expect):
    """What in the effective config differs from what we asked: list of one-line strings.

    ``expect`` maps sshd -T keywords (lower-case) to the value we set; ports must all appear.
    """
    problems = []
    have_ports = {int(p) for p in effective.get("port", []) if p.isdigit()}
    missing = sorted(set(ports) - have_ports)
    if missing:
        problems.append("effective config does not listen on %s (ports: %s): the drop-in is not read; "
                        "add `Include /etc/ssh/sshd_config.d/*.conf` at the top of sshd_config"
                        % (", ".join(map(str, missing)), ", ".join(map(str, sorted(have_ports))) or "none"))
    for key, want in sorted(expect.items()):
        got = effective.get(key.lower(), [""])[0]
        if got.lower() != str(want).lower():
            problems.append("%s is %s, not %s: an earlier file under sshd_config.d or sshd_config sets it "
                            "(first match wins)" % (key, got or "unset", want))
    return problems


def plan_direct(reports, state, digest, sshd_names=("sshd",)):
    """What to do with an sshd we run ourselves (no systemd).

    reports: port reports (plugins.module_utils.ports.port_report) for our ports.
    state: what we recorded when we last started it ({"pid", "digest"}) or {}.
    Returns {"action": "none"|"start"|"restart"|"blocked", "kill": [pids], "reason": str}.
    """
    foreign = [r for r in reports if r["held"] and r["processes"]
               and not any(p["name"] in sshd_names for p in r["processes"])]
    if foreign:
        return {"action": "blocked", "kill": [],
                "reason": "; ".join(r["summary"] for r in foreign)}
    ours = sorted({p["pid"] for r in reports for p in r["processes"] if p["name"] in sshd_names})
    listening = all(r["listening"] for r in reports)
    if not ours and not any(r["listening"] for r in reports):
        return {"action": "start", "kill": [], "reason": "sshd is not running on %s"
                % ", ".join(str(r["port"]) for r in reports)}
    if not listening:
        return {"action": "restart", "kill": ours, "reason": "sshd does not listen on every port"}
    if state.get("pid") not in ours:
        return {"action": "restart", "kill": ours,
                "reason": "sshd pid %s was not started with this configuration" % ",".join(map(str, ours))}
    if state.get("digest") != digest:
        return {"action": "restart", "kill": ours, "reason": "configuration changed"}
    return {"action": "none", "kill": [], "reason": "running with the current configuration"}


def plan_systemd(unit, active, enabled, socket_active, config_changed):
    """systemctl commands (argv lists) for the systemd path.

    socket_active: the distribution starts sshd from ssh.socket (Ubuntu >= 22.10): the listening
    ports come from a generator reading sshd_config, so a port change needs daemon-reload and a
    restart of the socket.
    """
    cmds = []
    if socket_active:
        if config_changed:
            cmds += [["systemctl", "daemon-reload"], ["systemctl", "restart", "ssh.socket"]]
        return cmds
    if not enabled:
        cmds.append(["systemctl", "enable", unit])
    if not active:
        cmds.append(["systemctl", "start", unit])
    elif config_changed:
        # sshd re-executes itself on SIGHUP and binds the new ports; sessions stay up
        cmds.append(["systemctl", "reload", unit])
    return cmds
