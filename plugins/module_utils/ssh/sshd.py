# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Decisions of the sshd_service module, as plain functions of what it read (no Ansible)."""

from __future__ import annotations

import hashlib
import re


def parse_sshd_T(text):
    """`sshd -T` output -> {keyword: [values]} (keywords lower-case, as sshd prints them)."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if parts:
            out.setdefault(parts[0].lower(), []).append(parts[1] if len(parts) > 1 else "")
    return out


def configured_ports(texts):
    """Port directives of sshd config texts (global section: before the first Match) -> [ports]."""
    ports = []
    for text in texts:
        for line in (text or "").splitlines():
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0].lower() == "match":
                break
            if words[0].lower() == "port" and len(words) > 1 and words[1].isdigit():
                ports.append(int(words[1]))
    return ports


def include_patterns(text, base="/etc/ssh"):
    """The files an sshd_config's Include lines name (globs, relative to base)."""
    out = []
    for line in (text or "").splitlines():
        words = line.split("#", 1)[0].split()
        if words and words[0].lower() == "include":
            out += [w if w.startswith("/") else base.rstrip("/") + "/" + w for w in words[1:]]
    return out


def with_port_lines(content, ports):
    """The drop-in text with a `Port N` line for each of ports it lacks, after its last Port line
    (or after its leading comments)."""
    lines = content.splitlines()
    have = set(configured_ports([content]))
    extra = ["Port %d" % p for p in ports if p not in have]
    if not extra:
        return content
    at = max((i + 1 for i, ln in enumerate(lines) if ln.split()[:1] == ["Port"]), default=None)
    if at is None:
        at = next((i for i, ln in enumerate(lines) if ln.strip() and not ln.startswith("#")), len(lines))
    out = lines[:at] + extra + lines[at:]
    return "\n".join(out) + ("\n" if content.endswith("\n") else "")


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

    reports: port reports (plugins.module_utils.net.ports.port_report) for our ports.
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


PAM_LOGINUID = re.compile(r"^(\s*session\s+)required(\s+pam_loginuid\.so\b.*)$", re.M)


def pam_loginuid_optional(text):
    """/etc/pam.d/sshd with pam_loginuid made optional (None when nothing to change).

    Without systemd we start sshd ourselves, and when that happens from an SSH session the new
    sshd inherits that session's loginuid (0). A container lacks CAP_AUDIT_CONTROL, so
    pam_loginuid then cannot set another user's loginuid and, being `required`, ends every
    non-root session (exit 254). Root keeps working, which hides it.
    """
    new = PAM_LOGINUID.sub(r"\1optional\2", text)
    return None if new == text else new
