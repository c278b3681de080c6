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

from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import (
    address_problem, shown, user_problem)

MARK = "provision.cluster"
# the key blob of a public key line: base64, nothing else (it is written into authorized_keys/known_hosts)
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,3}$")


def markers(name):
    return "# BEGIN %s %s" % (MARK, name), "# END %s %s" % (MARK, name)


class MarkerError(ValueError):
    """The managed block's markers do not pair (a BEGIN without its END, an END alone, two BEGINs):
    rewriting the file would drop the user's lines between them. ``line`` is 1-based; the message
    names the line and the fix, the caller adds the file."""

    def __init__(self, line, message):
        ValueError.__init__(self, "line %d: %s" % (line, message))
        self.line = line


def check_markers(lines, begin, end):
    """(start, stop) indexes of the one BEGIN and its END in lines, None when neither is there;
    MarkerError when they do not pair."""
    begins = [i for i, line in enumerate(lines) if line.rstrip("\r") == begin]
    ends = [i for i, line in enumerate(lines) if line.rstrip("\r") == end]
    fix = "remove the stray marker line (or add its partner) by hand, then re-run; nothing was changed"
    if not begins and not ends:
        return None
    if len(begins) > 1:
        raise MarkerError(begins[1] + 1, "a second %r (the first is at line %d); fix: %s" % (begin, begins[0] + 1, fix))
    if len(ends) > 1:
        raise MarkerError(ends[1] + 1, "a second %r; fix: %s" % (end, fix))
    if not ends:
        raise MarkerError(begins[0] + 1, "%r has no %r after it; fix: %s" % (begin, end, fix))
    if not begins:
        raise MarkerError(ends[0] + 1, "%r has no %r before it; fix: %s" % (end, begin, fix))
    if ends[0] < begins[0]:
        raise MarkerError(ends[0] + 1, "%r comes before its %r (line %d); fix: %s" % (end, begin, begins[0] + 1, fix))
    return begins[0], ends[0]


def split_block(text, name):
    """(before_lines, block_lines or None, after_lines) of the managed block ``name``.
    MarkerError when its markers do not pair (see check_markers)."""
    begin, end = markers(name)
    lines = text.splitlines()
    found = check_markers(lines, begin, end)
    if found is None:
        return lines, None, []
    start, stop = found
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


def node_problems(node):
    """What in a node record (ssh_identity's, partly reported by the node itself) cannot go into
    known_hosts, ~/.ssh/config or /etc/hosts: one phrase per field, naming the node and the value.
    A hostname with a space, a newline + ProxyCommand, or "10.0.0.3; reboot" is refused here."""
    who = shown(node.get("name"))
    problems = []
    for key in ("name", "hostname"):
        value = node.get(key)
        if value not in (None, "") and address_problem(value):
            problems.append("%s: %s %s" % (who, "inventory name" if key == "name" else "hostname (as the node reports "
                                           "it)", address_problem(value)))
    if node.get("address") not in (None, "") and address_problem(node["address"]):
        problems.append("%s: address %s" % (who, address_problem(node["address"])))
    try:
        port = int(node.get("port"))
        if not 1 <= port <= 65535:
            raise ValueError
    except (TypeError, ValueError):
        problems.append("%s: port %s is not a port number" % (who, shown(node.get("port"))))
    if node.get("user") not in (None, "") and user_problem(node["user"]):
        problems.append("%s: user %s" % (who, user_problem(node["user"])))
    for alias in node.get("aliases") or []:
        if not alias_ok(alias):
            problems.append("%s: alias %s is not a host name, an address or [name]:port" % (who, shown(alias)))
    return problems


def alias_ok(alias):
    """A known_hosts/ssh_config name: a host name, an address, or [host]:port."""
    text = str(alias)
    m = re.match(r"^\[([^\]]+)\]:(\d{1,5})$", text)
    return address_problem(m.group(1) if m else text) is None


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
    if len(fields) < 2 or not re.match(r"^(ssh-|ecdsa-|sk-)[A-Za-z0-9@._+-]+$", fields[0]) or not _BASE64.match(fields[1]):
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

def ensure_keypair(run_command, keygen, pw, key_file, key_type, comment, check_mode, confined=None):
    """Make ``pw``'s SSH key pair when missing (ssh-keygen, on this host; the private key is never
    read), fix ~/.ssh (0700) and the private key's mode (0600).

    run_command: AnsibleModule.run_command-like (argv -> rc, out, err); where root makes another
    user's key it must run ssh-keygen AS THAT USER (``user_runner``), so that a link planted at the
    key's path is followed, if at all, with that user's rights.
    confined: a files.Confined of pw's home when root acts for that user: directories, modes and the
    .pub file then go through its fds, and a link at the key's path is refused (UnsafeFile).
    Returns (absolute key_file, changed, generated). Raises RuntimeError with a one-line message.
    """
    import os

    key_file = key_file if os.path.isabs(key_file) else os.path.join(pw.pw_dir, key_file)
    try:
        return _ensure_keypair(run_command, keygen, pw, key_file, key_type, comment, check_mode, confined)
    except OSError as exc:
        raise RuntimeError("%s's key pair %s: %s (%s); fix: make %s a directory %s can write, with no link at the "
                           "key's path" % (pw.pw_name, key_file, exc.strerror or exc, exc.filename or key_file,
                                           os.path.dirname(key_file), pw.pw_name)) from None


def _ensure_keypair(run_command, keygen, pw, key_file, key_type, comment, check_mode, confined):
    import os

    ssh_dir = os.path.dirname(key_file)
    if confined is not None and not confined.covers(key_file):
        raise RuntimeError("%s is outside %s's home %s: root does not make another user's key elsewhere; fix: a "
                           "key_file under the home" % (key_file, pw.pw_name, pw.pw_dir))
    fs = _ConfinedKeyFiles(confined) if confined is not None else _KeyFiles(os.getuid() != pw.pw_uid, pw)
    changed = generated = False
    mode = fs.dir_mode(ssh_dir)
    if mode is None:
        changed = True
        if not check_mode:
            fs.makedirs(ssh_dir)
    elif mode & 0o077 and ssh_dir == os.path.join(pw.pw_dir, ".ssh"):
        changed = True  # sshd's StrictModes refuses a group/world-writable ~/.ssh
        if not check_mode:
            fs.chmod_dir(ssh_dir, 0o700)
    if not fs.exists(key_file):
        changed = generated = True
        if not check_mode:
            if fs.exists(key_file + ".pub"):
                fs.unlink(key_file + ".pub")
            rc, out, err = run_command([keygen, "-q", "-t", key_type, "-N", "", "-C", comment, "-f", key_file])
            if rc != 0:
                raise RuntimeError("ssh-keygen failed: %s%s" % ((err or out).strip(), fs.link_note(key_file)))
    elif not fs.exists(key_file + ".pub"):
        changed = True
        if not check_mode:
            rc, out, err = run_command([keygen, "-y", "-f", key_file])
            if rc != 0:
                raise RuntimeError("cannot derive %s.pub: %s" % (key_file, (err or out).strip()))
            fs.write(key_file + ".pub", out.strip() + "\n")
    if changed and not check_mode:
        for path in (key_file, key_file + ".pub"):
            fs.give(path)
    if (fs.file_mode(key_file) or 0) & 0o077:
        changed = True
        if not check_mode:
            fs.chmod(key_file, 0o600)
    return key_file, changed, generated


class _KeyFiles:
    """ensure_keypair's file operations by path: the process runs as the key's user (or root for root)."""

    def __init__(self, give, pw):
        self._give, self.pw = give, pw

    @staticmethod
    def dir_mode(path):
        import os
        return os.stat(path).st_mode if os.path.isdir(path) else None

    def makedirs(self, path):
        import os
        os.makedirs(path, 0o700)
        if self._give:
            os.chown(path, self.pw.pw_uid, self.pw.pw_gid)

    @staticmethod
    def chmod_dir(path, mode):
        import os
        os.chmod(path, mode)

    @staticmethod
    def exists(path):
        import os
        return os.path.exists(path)

    @staticmethod
    def unlink(path):
        import os
        os.unlink(path)

    @staticmethod
    def write(path, text):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)

    def give(self, path):
        import os
        if self._give and os.path.exists(path):
            os.chown(path, self.pw.pw_uid, self.pw.pw_gid)

    @staticmethod
    def file_mode(path):
        import os
        return os.stat(path).st_mode if os.path.exists(path) else None

    @staticmethod
    def chmod(path, mode):
        import os
        os.chmod(path, mode)

    @staticmethod
    def link_note(path):
        import os
        return " (%s is a symbolic link to %s; fix: remove it)" % (path, os.readlink(path)) if os.path.islink(path) else ""


class _ConfinedKeyFiles:
    """The same through a files.Confined home: no name is followed, a link at the key's path is refused."""

    def __init__(self, confined):
        self.c = confined

    def dir_mode(self, path):
        st = self.c.dir_stat(path)  # a link or a file there raises the one-line refusal
        return None if st is None else st.st_mode

    def makedirs(self, path):
        self.c.makedirs(path, 0o700)

    def chmod_dir(self, path, mode):
        self.c.chmod_dir(path, mode)

    def exists(self, path):
        return self.c.stat(path) is not None  # a link (dangling or not) raises UnsafeFile

    def unlink(self, path):
        self.c.unlink(path)

    def write(self, path, text):
        self.c.replace(path, text.encode("utf-8"), 0o644)

    def give(self, path):
        if self.c.stat(path) is not None:
            self.c.set_attrs(path, owner=(self.c.uid, self.c.gid))

    def file_mode(self, path):
        st = self.c.stat(path)
        return None if st is None else st.st_mode

    def chmod(self, path, mode):
        self.c.set_attrs(path, mode=mode)

    @staticmethod
    def link_note(_path):
        return ""


def user_runner(pw):
    """A run_command for ensure_keypair that runs its argv as ``pw``'s user (in the user's home, with a
    login's environment): root making another user's key writes nothing with root's rights."""
    import subprocess

    from ansible_collections.provision.cluster.plugins.module_utils.common.users import as_user

    kwargs, error = as_user(pw.pw_name)
    if error:
        raise RuntimeError(error)

    def run(argv):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL, **kwargs)
        return proc.returncode, proc.stdout, proc.stderr

    return run
