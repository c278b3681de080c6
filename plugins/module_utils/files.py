# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Files on the node, the ways every module of this collection needs them (plain Python)."""

from __future__ import annotations

import os
import stat


def read_text(path, default=None, limit=None):
    """A file's text (UTF-8, undecodable bytes kept as surrogates), or default when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            data = handle.read() if limit is None else handle.read(limit)
    except OSError:
        return default
    return data.decode("utf-8", errors="surrogateescape")


class NotPrivate(ValueError):
    """A directory that another user could write into or replace (the message says which and the fix)."""


def private_dir(path, create=True):
    """Make sure path is a directory only this process's user can use: not a symlink, owned by us,
    mode 0700 (tightened when it is ours). Code and data written there cannot be swapped by another
    local user before we run or read them. Returns the path; NotPrivate otherwise."""
    path = os.path.abspath(os.path.expanduser(path))
    uid = os.geteuid()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            raise NotPrivate("%s does not exist" % path)
        parent = os.path.dirname(path)
        os.makedirs(parent, mode=0o700, exist_ok=True)
        os.mkdir(path, 0o700)
        st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise NotPrivate("%s is not a plain directory (a symlink or a file): remove it, or choose another "
                         "directory" % path)
    if st.st_uid != uid:
        raise NotPrivate("%s belongs to uid %d, not to us (uid %d): another user made it first; remove it, "
                         "or choose another directory" % (path, st.st_uid, uid))
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path
