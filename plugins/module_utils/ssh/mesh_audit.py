# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The SSH fabric checked without N x N logins (provision verify's default pattern).

What an all-pairs SSH matrix proves is split in two:

- **logins on a ring** (``ring_targets``): each node logs in to itself, its successor in inventory
  order and the node half the ring away. Every sshd then accepts a login from another node, every
  client (its key, ~/.ssh/config, known_hosts, ssh binary) completes one to another node, and the
  two halves of the cluster reach each other. That is what only a login proves.
- **the all-pairs properties as local files** (``audit``): every node's authorized_keys holds every
  node's user key, its known_hosts holds every node's real host keys under every name (and no other
  key under those names), its ~/.ssh/config entry and /etc/hosts block point every name at that
  node's address and port. Read on each node (``summarize``, in the mesh module), compared on the
  controller with the keys each node reported of itself; no login needed.

Given both, a login from any node to any other would succeed: the ring showed each mechanism works
on every node, the files show every pair is configured. What neither shows (source-specific sshd
rules: ``Match Address``, ``from=`` options, a firewall between two particular nodes on the SSH
port; the NCCL check probes that port from every node) is what ``verify_matrix: full`` is for.
No Ansible imports (unit-tested directly).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

from ansible_collections.provision.cluster.plugins.module_utils.ssh.ssh_mesh import (
    MarkerError, markers, normalize_key, port_pattern, split_block)


def ring_targets(hosts, host, full=False):
    """The nodes ``host`` logs in to: every node with ``full``, else itself, its successor and the
    node half the ring away (fewer when the ring is short), in that order."""
    hosts = hosts if isinstance(hosts, list) else list(hosts)
    if full:
        return list(hosts)
    try:
        i = hosts.index(host)
    except ValueError:
        return list(hosts)
    n = len(hosts)
    out = []
    for step in (0, 1, n // 2):
        name = hosts[(i + step) % n]
        if name not in out:
            out.append(name)
    return out


def fingerprint(key):
    """'SHA256:...' of a public key line, as ssh-keygen -l prints it (None for a non-key)."""
    k = normalize_key(key)
    if not k:
        return None
    try:
        blob = base64.b64decode(k.split()[1].encode(), validate=True)
    except ValueError:
        return None
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# ---------------------------------------------------------------- reading the files (on the node)

def parse_known_hosts(text):
    """{host pattern: [fingerprints]} of plain known_hosts lines (hashed ones and markers left out)."""
    out = {}
    for line in (text or "").splitlines():
        fields = line.strip().split()
        if len(fields) < 3 or fields[0].startswith(("#", "@", "|")):
            continue
        fp = fingerprint(" ".join(fields[1:3]))
        if not fp:
            continue
        for pat in fields[0].split(","):
            out.setdefault(pat, [])
            if fp not in out[pat]:
                out[pat].append(fp)
    return out


_KEY_START = re.compile(r"(^|\s)((ssh-|ecdsa-|sk-)\S+\s+\S+)")


def parse_authorized_keys(text):
    """{fingerprint: options ('' for none)} of an authorized_keys file."""
    out = {}
    for line in (text or "").splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _KEY_START.search(s)
        if not m:
            continue
        fp = fingerprint(m.group(2))
        if fp and fp not in out:
            out[fp] = s[:m.start(2)].strip()
    return out


def parse_ssh_config_block(text, block):
    """{name: {hostname, port, user}} of the Host entries in our managed block ``block`` ({} when its
    markers do not pair: the ssh_mesh stage refuses such a file, naming the line)."""
    try:
        body = split_block(text or "", block)[1]
    except MarkerError:
        body = None
    out, current = {}, []
    for line in body or []:
        key, _sep, value = line.strip().partition(" ")
        key, value = key.lower(), value.strip()
        if key == "host":
            current = value.split()
            for name in current:
                out[name] = {}
        elif current and key in ("hostname", "port", "user"):
            for name in current:
                out[name][key] = value
    return out


def parse_hosts(text):
    """{name: address} as the resolver reads /etc/hosts (the first line naming a name wins)."""
    out = {}
    for line in (text or "").splitlines():
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            out.setdefault(name, fields[0])
    return out


def summarize(host_keys, user_key, hostname, known_hosts, authorized_keys, ssh_config, hosts, block):
    """What the controller needs of one node: its own identity, and its files as fingerprints."""
    begin = markers(block)[0]
    files = {
        "known_hosts": parse_known_hosts(known_hosts),
        "authorized_keys": parse_authorized_keys(authorized_keys),
        "ssh_config": parse_ssh_config_block(ssh_config, block),
        "ssh_config_block": begin in (ssh_config or ""),
        "hosts": parse_hosts(hosts),
    }
    return dict({"identity": {"host_keys": [fp for fp in (fingerprint(k) for k in host_keys) if fp],
                              "user_key": fingerprint(user_key or ""), "hostname": hostname}},
                digest=files_digest(files), **files)


FILE_FIELDS = ("known_hosts", "authorized_keys", "ssh_config", "ssh_config_block", "hosts")


def files_digest(summary):
    """sha256 of a summary's files (its FILE_FIELDS, canonical JSON): nodes whose files read the same
    have the same digest, and the controller compares their files with every node's keys once."""
    files = {k: summary.get(k) for k in FILE_FIELDS}
    return hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ---------------------------------------------------------------- comparing (on the controller)

STAGE_FIX = "run the ssh_mesh stage: ansible-playbook site.yml --tags ssh_mesh"


def _names(name, address, hostname):
    out = []
    for n in (name, hostname, address):
        if n and n not in out:
            out.append(n)
    return out


def expectations(peers, port):
    """What every node's files must say of each peer, computed once for all nodes: per usable peer its
    user key, real host keys, the known_hosts pattern of each of its names and the names ~/.ssh/config
    and /etc/hosts must point at its address; the peers without an identity apart."""
    port = int(port)
    unknown = [p["name"] for p in peers if not (p.get("identity") or {}).get("host_keys")]
    skip = set(unknown)
    usable = []
    for p in peers:
        if p["name"] in skip:
            continue
        ident = p["identity"]
        address = p.get("address")
        names = _names(p["name"], address, ident.get("hostname"))
        real = set(ident["host_keys"])
        usable.append({"name": p["name"], "address": address, "user_key": ident.get("user_key"), "real": real,
                       "real_text": ", ".join(sorted(real)), "patterns": [port_pattern(n, port) for n in names],
                       "aliases": [n for n in names if n != address]})
    return {"port": port, "unknown": unknown, "usable": usable}


def findings(summary, expected):
    """What one node's files get wrong against every peer (expectations()): the problem lists of the
    checks audit() reports. They depend on the files alone: nodes with the same files share them."""
    port = expected["port"]
    known, auth = summary.get("known_hosts") or {}, summary.get("authorized_keys") or {}
    config, hosts = summary.get("ssh_config") or {}, summary.get("hosts") or {}
    missing_key, optioned, kh_missing, kh_stale, cfg_bad, hosts_bad = [], [], [], [], [], []
    for p in expected["usable"]:
        fp = p["user_key"]
        if fp and fp not in auth:
            missing_key.append("%s (%s)" % (p["name"], fp))
        elif fp and auth.get(fp):
            optioned.append("%s (%s)" % (p["name"], auth[fp]))
        real = p["real"]
        for pat in p["patterns"]:
            listed = known.get(pat) or []
            if real.isdisjoint(listed):
                kh_missing.append("%s under %s" % (p["name"], pat))
            stale = [fp for fp in listed if fp not in real]
            if stale:
                kh_stale.append("%s under %s: %s (the node's keys: %s)"
                                % (p["name"], pat, ", ".join(stale), p["real_text"]))
        address = p["address"]
        for n in p["aliases"]:
            entry = config.get(n)
            if not entry:
                cfg_bad.append("%s: no Host entry" % n)
            elif entry.get("hostname") != address or str(entry.get("port")) != str(port):
                cfg_bad.append("%s -> %s:%s, expected %s:%d" % (n, entry.get("hostname"), entry.get("port"),
                                                                address, port))
            if n in hosts and hosts[n] != address:
                hosts_bad.append("%s -> %s, expected %s" % (n, hosts[n], address))
    if not summary.get("ssh_config_block") and not config:
        cfg_bad = ["no provision block in ~/.ssh/config"]
    return {"missing_key": missing_key, "optioned": optioned, "known_hosts": kh_missing + kh_stale,
            "config": cfg_bad + hosts_bad}


def records(node, found, expected, user=""):
    """The check records of one node from its findings()."""
    out = []
    unknown = expected["unknown"]
    suffix = "; not compared for %s (no identity: unreachable?)" % ", ".join(unknown) if unknown else ""
    who = "%s's " % user if user else ""

    def add(check, problems, ok_detail, fix, what):
        if problems:
            shown = "; ".join(problems[:8]) + (" (and %d more)" % (len(problems) - 8) if len(problems) > 8 else "")
            out.append({"check": check, "status": "fail", "detail": "%s: %s%s" % (what, shown, suffix), "fix": fix})
        else:
            out.append({"check": check, "status": "pass", "detail": ok_detail + suffix, "fix": ""})

    n = len(expected["usable"])
    add("authorized_keys on %s" % node, found["missing_key"], "%sauthorized_keys holds the keys of all %d nodes" % (who, n),
        "%s --limit %s (it authorizes every node's key)" % (STAGE_FIX, node), "keys not authorized")
    if found["optioned"]:
        out.append({"check": "authorized_keys options on %s" % node, "status": "warn",
                    "detail": "keys with options (from=, command=, ...: a login may still be refused from some nodes): "
                              + "; ".join(found["optioned"][:8]),
                    "fix": "provision verify --full logs in from every node"})
    add("known_hosts on %s" % node, found["known_hosts"],
        "every node's real host keys under each of its names (%d nodes)" % n,
        "%s --limit %s (it records the real host keys and drops stale ones)" % (STAGE_FIX, node),
        "host keys missing or not the node's")
    add("ssh config on %s" % node, found["config"],
        "~/.ssh/config and /etc/hosts point every node name at its address and port",
        "%s --limit %s (Host entries and the /etc/hosts block)" % (STAGE_FIX, node), "names pointing elsewhere")
    return out


def audit(node, summary, peers, port, user=""):
    """Check records of ``node``'s SSH files against every peer's real keys.

    summary: ``summarize`` of node. peers: [{name, address, identity}] (identity: the peer's own
    ``summarize()["identity"]``; a peer without one is left out and named in the detail).
    port: the cluster sshd port. Returns [check dict].
    """
    expected = expectations(peers, port)
    return records(node, findings(summary, expected), expected, user)


def audit_all(summaries, peers, port, user=""):
    """audit() of every node in summaries ({node: summary}, in order) -> {node: [check dict]}.

    Every node's files against every node's keys is N x N by its nature; what makes it cheap at fleet
    size: the peers' expectations are computed once, and the files of nodes whose summaries carry the
    same digest (files_digest, computed on the node: the ssh_mesh role writes the same blocks
    everywhere) are compared once. A summary without a digest is compared on its own."""
    expected = expectations(peers, port)
    by_digest = {}
    out = {}
    for node, summary in summaries.items():
        digest = summary.get("digest")
        found = by_digest.get(digest) if digest else None
        if found is None:
            found = findings(summary, expected)
            if digest:
                by_digest[digest] = found
        out[node] = records(node, found, expected, user)
    return out
