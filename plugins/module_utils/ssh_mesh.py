# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Pure logic of the SSH fabric: managed blocks, known_hosts/authorized_keys/ssh_config/hosts
rendering, and the classification of ssh client errors. No Ansible imports.

A *node record* is the dict the ssh_identity module returns as ``node``::

    {"name": "node1", "hostname": "node1", "address": "10.89.77.11", "port": 2222,
     "user": "root", "user_key": "ssh-ed25519 AAAA... root@node1",
     "host_keys": ["ssh-ed25519 AAAA...", "ecdsa-sha2-nistp256 AAAA...", "ssh-rsa AAAA..."]}
"""

from __future__ import annotations

import re

MARK = "provision.cluster"


def markers(name):
    return "# BEGIN %s %s" % (MARK, name), "# END %s %s" % (MARK, name)


def split_block(text, name):
    """(before_lines, block_lines or None, after_lines) of the managed block ``name``."""
    begin, end = markers(name)
    lines = text.splitlines()
    try:
        start = lines.index(begin)
        stop = lines.index(end, start + 1)
    except ValueError:
        return lines, None, []
    return lines[:start], lines[start + 1:stop], lines[stop + 1:]


def merge_block(text, name, body, position="end"):
    """Return ``text`` with the managed block ``name`` holding exactly ``body`` (list of lines).

    Lines outside the block are kept as they are. A new block goes at the end of the file or,
    with position='start', at its top (for /etc/hosts, where the first match wins).
    An empty body removes the block.
    """
    before, block, after = split_block(text, name)
    begin, end = markers(name)
    new_block = [begin] + list(body) + [end] if body else []
    if block is None:
        if position == "start":
            lines = new_block + before
        else:
            lines = before + new_block
    else:
        lines = before + new_block + after
    return "\n".join(lines) + "\n" if lines else ""


def port_pattern(name, port):
    """known_hosts host pattern: plain on port 22, [name]:port otherwise."""
    return name if int(port) == 22 else "[%s]:%d" % (name, int(port))


def node_names(node):
    """Every name a launcher may use for a node, address last, without duplicates."""
    names = []
    for n in (node.get("name"), node.get("hostname"), node.get("address")):
        if n and n not in names:
            names.append(n)
    return names


def normalize_key(line):
    """'type base64 [comment]' -> 'type base64' (None when it is not a public key line)."""
    fields = (line or "").split()
    if len(fields) < 2 or not re.match(r"^(ssh-|ecdsa-|sk-)", fields[0]):
        return None
    return "%s %s" % (fields[0], fields[1])


def known_hosts_lines(nodes, extra_names=None):
    """One line per (node, host key): 'pat1,pat2,[addr]:port type key', address pattern last.

    extra_names maps a node name to more names (e.g. how the controller reaches it).
    """
    out = []
    for node in nodes:
        names = node_names(node)
        pats = [port_pattern(n, node["port"]) for n in names]
        for extra in list(node.get("aliases") or []) + list((extra_names or {}).get(node["name"], [])):
            if extra not in pats:
                pats.insert(0, extra)
        for key in node.get("host_keys") or []:
            k = normalize_key(key)
            if k:
                out.append("%s %s" % (",".join(pats), k))
    return out


def _hostfield_patterns(line):
    s = line.strip()
    if not s or s.startswith("#"):
        return []
    fields = s.split()
    if fields[0].startswith("@"):  # @cert-authority / @revoked
        return []
    return fields[0].split(",")


def drop_stale_known_hosts(lines, patterns):
    """Remove lines (outside our block) that name any of ``patterns`` (like ssh-keygen -R).

    Returns (kept_lines, removed_lines). Hashed entries (|1|...) cannot be matched and stay.
    """
    wanted = set(patterns)
    kept, removed = [], []
    for line in lines:
        if wanted.intersection(_hostfield_patterns(line)):
            removed.append(line)
        else:
            kept.append(line)
    return kept, removed


def render_known_hosts(text, name, nodes, extra_names=None):
    """New known_hosts content: our block replaced, stale entries for our names removed."""
    body = known_hosts_lines(nodes, extra_names)
    ours = set()
    for line in body:
        ours.update(_hostfield_patterns(line))
    before, block, after = split_block(text, name)
    before, removed_b = drop_stale_known_hosts(before, ours)
    after, removed_a = drop_stale_known_hosts(after, ours)
    begin, end = markers(name)
    rebuilt = "\n".join(before + ([begin] + (block or []) + [end] if block is not None else []) + after)
    return merge_block(rebuilt + "\n" if rebuilt else "", name, body), removed_b + removed_a


def authorized_keys_lines(keys):
    """Distinct public keys in order (comments kept from the first occurrence)."""
    seen, out = set(), []
    for key in keys:
        k = normalize_key(key)
        if k and k not in seen:
            seen.add(k)
            out.append(" ".join(key.split()[:3]))
    return out


def ssh_config_lines(nodes, user, identity_file, kex_algorithms=None):
    """Host entries so that plain `ssh <name>` reaches the node on the right port and key.

    kex_algorithms: the KexAlgorithms line's list (see kex_preference), or nothing for ssh's own.
    """
    out = []
    for node in nodes:
        out += [
            "Host %s" % " ".join(node_names(node)),
            "    HostName %s" % node["address"],
            "    Port %d" % int(node["port"]),
            "    User %s" % (node.get("user") or user),
            "    IdentityFile %s" % identity_file,
            "    IdentitiesOnly yes",
            "    BatchMode yes",
            # known_hosts is ours (the managed block holds every key each node has): ssh must not
            # rewrite it after login (OpenSSH >= 8.5 drops keys it would not use, e.g. a bullseye
            # node's ssh-dss key seen from bookworm, and the next site.yml puts them back)
            "    UpdateHostKeys no",
        ]
        if kex_algorithms:
            out.append("    KexAlgorithms %s" % ",".join(kex_algorithms))
    return out


def effective_kex(ssh_g_output):
    """The key exchange algorithms of `ssh -G HOST` output, in ssh's order ([] when absent)."""
    for line in ssh_g_output.splitlines():
        key, _unused, value = line.strip().partition(" ")
        if key.lower() == "kexalgorithms":
            return [a for a in value.strip().split(",") if a]
    return []


def kex_preference(preferred, effective):
    """ssh's own list (system policy included) with the preferred algorithms it allows moved to the
    front, in the preferred order; [] (leave ssh's default alone) when it allows none of them.

    Nothing ssh does not already allow is added: a crypto policy that removed an algorithm wins.
    """
    first = [a for a in preferred if a in effective]
    if not first:
        return []
    return first + [a for a in effective if a not in first]


def etc_hosts_lines(nodes):
    """'address name hostname' per node (names other than the address)."""
    return ["%s %s" % (n["address"], " ".join(x for x in node_names(n) if x != n["address"])) for n in nodes
            if len(node_names(n)) > 1]


# ---------------------------------------------------------------- ssh client errors

SSH_ERRORS = [
    # (class, regex on stderr, fix)
    ("host_key_changed", r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key for .* has changed",
     "the node's host key changed (rebuilt?): re-run the ssh_mesh stage, it replaces stale known_hosts entries"),
    ("host_key_missing", r"No \S+ host key is known for|Host key verification failed",
     "its host key is not in known_hosts: run the ssh_mesh stage (collects the real host keys)"),
    ("permission_denied", r"Permission denied \(",
     "the source's public key is not authorized on the target (or the target's sshd ignores its "
     "authorized_keys for their modes: see its 'ssh files' check): run the ssh_mesh stage"),
    ("connection_refused", r"Connection refused",
     "nothing listens on the ssh port: run the sshd stage (it starts sshd on sshd_port)"),
    ("name_unresolvable", r"Could not resolve hostname|Name or service not known|"
                          r"Temporary failure in name resolution|nodename nor servname",
     "the name does not resolve: run the ssh_mesh stage (~/.ssh/config and /etc/hosts entries)"),
    ("no_route", r"No route to host|Network is unreachable",
     "no route to the target: check cluster_address and the network between the nodes"),
    ("timeout", r"timed out|Connection timed out|Operation timed out",
     "the connection timed out: check that cluster_address is reachable on the ssh port (firewall)"),
]


def classify_ssh_error(stderr, rc=255, timed_out=False):
    """(error_class, one-line message, fix) for a failed ssh call."""
    text = stderr or ""
    if timed_out:
        return "timeout", "no answer within the time limit", SSH_ERRORS[-1][2]
    for cls, pattern, fix in SSH_ERRORS:
        if re.search(pattern, text):
            line = next((ln.strip() for ln in text.splitlines() if re.search(pattern, ln)), "")
            if cls in ("host_key_changed", "host_key_missing"):
                # the useful line for host keys is the one naming the key, not the banner
                for pat in (r"Host key for .* has changed", r"host key is known for", r"Offending"):
                    named = [ln.strip() for ln in text.splitlines() if re.search(pat, ln)]
                    if named:
                        line = named[0]
                        break
            return cls, line.strip(" @") or cls, fix
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Warning:")]
    return "other", (lines[-1] if lines else "ssh exited %s" % rc), "run `ssh -v` by hand to see why"


# ---------------------------------------------------------------- sshd StrictModes

def strict_modes_problems(uid, entries):
    """What makes sshd (StrictModes, the default) ignore a user's authorized_keys.

    uid: the user's uid. entries: [(path, st_uid, st_mode)] for the home directory, ~/.ssh and
    ~/.ssh/authorized_keys (a missing one left out). sshd refuses a file, or a directory on its way,
    that is writable by group or others or owned by another user than the user or root.
    Returns one line per problem (empty when sshd accepts them).
    """
    problems = []
    for path, owner, mode in entries:
        if owner not in (0, uid):
            problems.append("%s is owned by uid %d, not by the user" % (path, owner))
        elif mode & 0o022:
            problems.append("%s is mode %04o (writable by %s)" % (
                path, mode & 0o7777, " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if mode & bit)))
    return problems


def strict_modes_check(source, user, home, problems):
    """The verify check for ``strict_modes_problems``' lines on ``source``."""
    return {"check": "ssh files of %s on %s" % (user, source), "status": "fail" if problems else "pass",
            "detail": ("; ".join(problems) + ": sshd (StrictModes) ignores authorized_keys, no key logs in here")
            if problems else "home, ~/.ssh and authorized_keys are private",
            "fix": "chmod go-w %s; chmod 700 %s/.ssh; chmod 600 %s/.ssh/authorized_keys; chown %s on them "
                   "(the ssh_mesh stage sets ~/.ssh)" % (home, home, home, user) if problems else ""}


# ---------------------------------------------------------------- a key pair made where it is used

def ensure_keypair(run_command, keygen, pw, key_file, key_type, comment, check_mode):
    """Make ``pw``'s SSH key pair when missing (ssh-keygen, on this host; the private key is never
    read), fix ~/.ssh (0700) and the private key's mode (0600).

    run_command: AnsibleModule.run_command-like (argv -> rc, out, err).
    Returns (absolute key_file, changed, generated). Raises RuntimeError with a one-line message.
    """
    import os

    key_file = key_file if os.path.isabs(key_file) else os.path.join(pw.pw_dir, key_file)
    ssh_dir = os.path.dirname(key_file)
    as_other = os.getuid() != pw.pw_uid
    changed = generated = False
    if not os.path.isdir(ssh_dir):
        changed = True
        if not check_mode:
            os.makedirs(ssh_dir, 0o700)
            if as_other:
                os.chown(ssh_dir, pw.pw_uid, pw.pw_gid)
    elif os.stat(ssh_dir).st_mode & 0o077 and ssh_dir == os.path.join(pw.pw_dir, ".ssh"):
        changed = True  # sshd's StrictModes refuses a group/world-writable ~/.ssh
        if not check_mode:
            os.chmod(ssh_dir, 0o700)
    if not os.path.exists(key_file):
        changed = generated = True
        if not check_mode:
            if os.path.exists(key_file + ".pub"):
                os.unlink(key_file + ".pub")
            rc, out, err = run_command([keygen, "-q", "-t", key_type, "-N", "", "-C", comment, "-f", key_file])
            if rc != 0:
                raise RuntimeError("ssh-keygen failed: %s" % (err or out).strip())
    elif not os.path.exists(key_file + ".pub"):
        changed = True
        if not check_mode:
            rc, out, err = run_command([keygen, "-y", "-f", key_file])
            if rc != 0:
                raise RuntimeError("cannot derive %s.pub: %s" % (key_file, (err or out).strip()))
            with open(key_file + ".pub", "w", encoding="utf-8") as handle:
                handle.write(out.strip() + "\n")
    if changed and not check_mode and as_other:
        for path in (key_file, key_file + ".pub"):
            if os.path.exists(path):
                os.chown(path, pw.pw_uid, pw.pw_gid)
    if os.path.exists(key_file) and os.stat(key_file).st_mode & 0o077:
        changed = True
        if not check_mode:
            os.chmod(key_file, 0o600)
    return key_file, changed, generated
