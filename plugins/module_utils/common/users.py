# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Running a command as a local user (the cluster user), the one way this collection does it.

Plain Python (no Ansible imports, Python 3.9+). ``as_user`` gives subprocess keyword arguments:
the process switches to the user only when that user is not the one running the module (root
drops to its uid, gid and groups; no runuser/su needed), and always gets the environment a login
of that user starts with (HOME, USER, LOGNAME, the PATH login(1) sets from /etc/login.defs,
LANG=C) in its home directory, so what it does does not depend on how Ansible was invoked.

Not for a PAM login session: where pam_limits and the rest of the session stack must apply (the
node_runtime module's ``login`` limits source), ``runuser -l`` is run on purpose.
"""

from __future__ import annotations

import os
import pwd
import sys

from ansible_collections.provision.cluster.plugins.module_utils.common.files import read_text

# login(1)'s defaults when /etc/login.defs does not set ENV_PATH / ENV_SUPATH (shadow-utils)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_SUPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def login_path(uid, login_defs="/etc/login.defs"):
    """The PATH a login of this uid gets: ENV_SUPATH for root, ENV_PATH for the others."""
    key = "ENV_SUPATH" if uid == 0 else "ENV_PATH"
    for line in (read_text(login_defs) or "").splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == key:
            value = fields[1]
            return value[len("PATH="):] if value.startswith("PATH=") else value
    return DEFAULT_SUPATH if uid == 0 else DEFAULT_PATH


def as_user(user, extra_env=None):
    """subprocess keyword arguments that run a command as ``user`` (name) the way its login would.

    Returns (kwargs, error): error is a one-line message when that is not possible (no such user;
    another user without root). user empty: the module's own user and environment (LANG=C, plus extra_env).
    """
    if not user:
        env = dict(os.environ, LANG="C")
        env.update(extra_env or {})
        return {"env": env}, None
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return None, "user %s does not exist" % user
    env = {"PATH": login_path(pw.pw_uid), "LANG": "C", "HOME": pw.pw_dir, "USER": pw.pw_name,
           "LOGNAME": pw.pw_name}
    env.update(extra_env or {})
    # login(1) without the home directory: "No directory, logging in with HOME=/"
    kwargs = {"env": env, "cwd": pw.pw_dir if os.path.isdir(pw.pw_dir) else "/"}
    if pw.pw_uid != os.getuid():
        if os.getuid() != 0:
            return None, "cannot run as %s without root (use become)" % user
        groups = os.getgrouplist(pw.pw_name, pw.pw_gid)
        if sys.version_info >= (3, 9):  # done in the child by C code: safe with threads
            kwargs.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=groups)
        else:

            def drop():
                os.setgroups(groups)
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)

            kwargs["preexec_fn"] = drop
    return kwargs, None


def training_user_report(entries, user, create=False):
    """What preflight says about the training user on every node.

    entries: {node: the user's passwd entry there as getent gives it ([password, uid, gid, gecos,
    home, shell]) or None when the node has no such user}, in inventory order. create: the inventory
    lets site.yml create a local user (cluster_user_create: true).
    Returns {"errors": [one line per node], "warnings": [one line]}: a missing user is an error (a
    site whose users come from LDAP must not get a local one silently) unless create is set; uids or
    gids that differ between nodes are a warning (files the user writes on a shared filesystem
    belong to someone else on the other nodes).
    """
    errors, warnings = [], []
    missing = [n for n, e in entries.items() if not e]
    if missing and not create:
        for node in missing:
            errors.append("%s: the training user %s does not exist there; fix: create %s the way this site makes "
                          "its users (LDAP/sssd, or useradd with the same uid and gid on every node), or set "
                          "cluster_user_create: true to let site.yml create a local one" % (node, user, user))
    ids = {}
    for node, entry in entries.items():
        if entry and len(entry) >= 3:
            ids.setdefault((str(entry[1]), str(entry[2])), []).append(node)
    if len(ids) > 1:
        where = "; ".join("uid %s gid %s on %s" % (uid, gid, ", ".join(nodes))
                          for (uid, gid), nodes in sorted(ids.items(), key=lambda kv: kv[1][0]))
        warnings.append("the training user %s has different ids on different nodes (%s): a file it writes on a "
                        "shared filesystem belongs to another user on the other nodes; fix: give %s one uid and "
                        "gid everywhere (usermod -u UID %s; groupmod -g GID GROUP)" % (user, where, user, user))
    return {"errors": errors, "warnings": warnings}
