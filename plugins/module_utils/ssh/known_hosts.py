# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""known_hosts as OpenSSH reads it: fingerprints, host patterns (plain, hashed, wildcard, negated,
marked), what a presented key means against what is recorded, and the edits bootstrap makes.
Plain Python: `provision bootstrap` and `provision verify` (a changed host key named with both
fingerprints) use the same code.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import shlex
from dataclasses import dataclass

# key type as in known_hosts / authorized_keys -> the label `ssh-keygen -l` prints
KEY_LABELS = {
    "ssh-ed25519": "ED25519",
    "ssh-rsa": "RSA",
    "ssh-dss": "DSA",
    "ecdsa-sha2-nistp256": "ECDSA",
    "ecdsa-sha2-nistp384": "ECDSA",
    "ecdsa-sha2-nistp521": "ECDSA",
    "sk-ssh-ed25519@openssh.com": "ED25519-SK",
    "sk-ecdsa-sha2-nistp256@openssh.com": "ECDSA-SK",
}


def fingerprint(blob: bytes) -> str:
    """SHA256 fingerprint of a public key blob, as `ssh-keygen -l` prints it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def key_label(keytype: str) -> str:
    return KEY_LABELS.get(keytype, keytype)


def host_pattern(address: str, port: int) -> str:
    """The name OpenSSH looks up in known_hosts for address:port."""
    return address if int(port) == 22 else f"[{address}]:{int(port)}"


def _hashed_match(entry: str, name: str) -> bool:
    # |1|base64(salt)|base64(HMAC-SHA1(salt, name))
    parts = entry.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt = base64.b64decode(parts[2])
        want = base64.b64decode(parts[3])
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), want)


def _glob_match(name: str, pattern: str) -> bool:
    """OpenSSH's pattern match: only `*` and `?` are special (`[addr]:port` is literal)."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.S) is not None


def host_field_matches(field_: str, name: str) -> bool:
    """Does the host field of a known_hosts line (patterns, negations, hashes) match name?"""
    if field_.startswith("|"):
        return _hashed_match(field_, name)
    matched = False
    for pattern in field_.split(","):
        negate = pattern.startswith("!")
        pattern = pattern[1:] if negate else pattern
        if _glob_match(name.lower(), pattern.lower()):
            if negate:
                return False
            matched = True
    return matched


@dataclass(frozen=True)
class KnownKey:
    keytype: str
    blob: bytes
    marker: str = ""  # "", "@revoked" or "@cert-authority"
    line: int = 0

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.blob)


def known_keys_for(text: str, name: str) -> list[KnownKey]:
    """The known_hosts entries (plain, hashed, wildcard, marked) that apply to name."""
    found = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        marker = ""
        if fields[0].startswith("@"):
            marker, fields = fields[0], fields[1:]
        if len(fields) < 3 or not host_field_matches(fields[0], name):
            continue
        try:
            blob = base64.b64decode(fields[2], validate=True)
        except ValueError:
            continue
        found.append(KnownKey(fields[1], blob, marker, lineno))
    return found


@dataclass(frozen=True)
class HostKeyVerdict:
    status: str  # known | unknown | changed | revoked
    presented: str  # fingerprint of the presented key
    recorded: tuple[str, ...] = ()  # fingerprints recorded for this host (changed)


def judge_host_key(entries: list[KnownKey], keytype: str, blob: bytes) -> HostKeyVerdict:
    """OpenSSH's decision for a presented key given the entries recorded for the host."""
    presented = fingerprint(blob)
    if any(e.marker == "@revoked" and e.blob == blob for e in entries):
        return HostKeyVerdict("revoked", presented)
    plain = [e for e in entries if not e.marker]
    if any(e.keytype == keytype and e.blob == blob for e in plain):
        return HostKeyVerdict("known", presented)
    if not plain:
        return HostKeyVerdict("unknown", presented)
    # a different key of the same type, or only keys of other types recorded: both are what
    # OpenSSH refuses under StrictHostKeyChecking=yes
    same_type = [e for e in plain if e.keytype == keytype] or plain
    recorded = tuple(dict.fromkeys(f"{e.fingerprint} ({key_label(e.keytype)})" for e in same_type))
    return HostKeyVerdict("changed", presented, recorded)


# OpenSSH's (and paramiko's) default host key algorithm order
_ALG_ORDER = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
              "rsa-sha2-512", "rsa-sha2-256"]


def preferred_key_types(entries: list[KnownKey]) -> list[str]:
    """Host key algorithms to ask for first: the types recorded for this host, in the default
    order (as OpenSSH does), so a host with several recorded keys is checked against one of them."""
    out: list[str] = []
    for e in entries:
        if e.marker:
            continue
        algs = ["rsa-sha2-512", "rsa-sha2-256"] if e.keytype == "ssh-rsa" else [e.keytype]
        out.extend(a for a in algs if a not in out)
    return sorted(out, key=lambda a: _ALG_ORDER.index(a) if a in _ALG_ORDER else len(_ALG_ORDER))


def known_hosts_line(name: str, keytype: str, blob: bytes) -> str:
    return f"{name} {keytype} {base64.b64encode(blob).decode()}"


def remove_key_command(name: str, known_hosts) -> str:
    return f"ssh-keygen -R {shlex.quote(name)} -f {shlex.quote(str(known_hosts))}"


def replace_host_key(text: str, name: str, line: str) -> str:
    """known_hosts text without the plain entries that apply to name (only name on their line: a line
    naming other hosts too keeps them), plus line: a host key accepted on purpose in place of the old."""
    out = []
    for raw in text.splitlines():
        fields = raw.split()
        if fields and not raw.lstrip().startswith(("#", "@")) and len(fields) >= 3 and host_field_matches(fields[0], name):
            rest = [h for h in fields[0].split(",") if not host_field_matches(h, name)]
            if fields[0].startswith("|") or not rest:
                continue
            raw = " ".join([",".join(rest)] + fields[1:])
        out.append(raw)
    return "".join(ln + "\n" for ln in out) + line + "\n"


def append_lines(text: str, lines: list[str]) -> str | None:
    """text with lines appended (each once, not already present); None when nothing to add."""
    present = {line.strip() for line in text.splitlines()}
    new = [line for line in dict.fromkeys(lines) if line.strip() not in present]
    if not new:
        return None
    if text and not text.endswith("\n"):
        text += "\n"
    return text + "".join(line + "\n" for line in new)


_PRESENTED = re.compile(r"fingerprint for the (\S+) key sent by the remote host is\s+(SHA256:[A-Za-z0-9+/=]+)")


def presented_fingerprint(ssh_output):
    """(label, SHA256:...) of the key a host presented, from ssh's REMOTE HOST IDENTIFICATION HAS
    CHANGED message, or None."""
    m = _PRESENTED.search(ssh_output or "")
    return (m.group(1), m.group(2).rstrip(".")) if m else None


def recorded_fingerprints(text, name):
    """'SHA256:... (ED25519)' of the plain entries known_hosts text records for name."""
    return list(dict.fromkeys("%s (%s)" % (k.fingerprint, key_label(k.keytype))
                              for k in known_keys_for(text or "", name) if not k.marker))


_UKHF = re.compile(r"UserKnownHostsFile[= ]+(\"[^\"]+\"|'[^']+'|\S+)")


def user_known_hosts_files(*ssh_args):
    """The known_hosts files ssh reads given its -o options (ansible_ssh_common_args and friends):
    UserKnownHostsFile's files, else ~/.ssh/known_hosts and ~/.ssh/known_hosts2."""
    files = []
    for args in ssh_args:
        for m in _UKHF.finditer(str(args or "")):
            files.extend(m.group(1).strip("\"'").split())
    return files or ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"]


_PROXY = re.compile(r"(?:ProxyJump[= ]+|(?:^|\s)-J\s*)(\"[^\"]+\"|'[^']+'|\S+)|ProxyCommand[= ]+(\"[^\"]+\"|'[^']+')",
                    re.IGNORECASE)


def proxy_of(*ssh_args):
    """The bastion ssh goes through for a host, as its options name it (ProxyJump / -J value, or the
    ProxyCommand), else ''."""
    for args in ssh_args:
        m = _PROXY.search(str(args or ""))
        if m:
            return (m.group(1) or m.group(2) or "").strip("\"'")
    return ""


_NAMED_HOST = re.compile(r"connect to host (\S+) port (\d+)|Host key for (\S+) has changed|-R \"?([^\"\s]+)")


def failed_hop(ssh_output, node_addresses):
    """The host an ssh error names when it is not the node itself (the bastion a ProxyJump went
    through), else ''."""
    nodes = {str(a).strip("[]") for a in node_addresses if a}
    for m in _NAMED_HOST.finditer(ssh_output or ""):
        host = next(g for g in m.groups() if g).strip("[]").split("]:")[0]
        if host not in nodes:
            return host
    return ""
