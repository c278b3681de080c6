# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Files on the node, the ways every module of this collection needs them (plain Python).

- read_text / read_attr: a file's text, or a default when it cannot be read.
- file_differs / FileWriter: write-if-changed with check mode, --diff, an atomic replace through
  the module's atomic_move, mode/owner (or mode/owner only for a new file) and validation.
- private_dir: a directory nobody else can write into.
"""

from __future__ import annotations

import os
import stat
import tempfile


def read_text(path, default=None, limit=None, errors="surrogateescape", only_missing=False):
    """A file's text (UTF-8; undecodable bytes kept as surrogates, or as errors says), or default
    when it cannot be read. only_missing: only a missing file gives default, any other error
    (permission, a directory) is raised: for a file read to be rewritten, where taking an unreadable
    file for an empty one would drop its content."""
    try:
        with open(path, "rb") as handle:
            data = handle.read() if limit is None else handle.read(limit)
    except FileNotFoundError:
        return default
    except OSError:
        if only_missing:
            raise
        return default
    return data.decode("utf-8", errors=errors)


def read_attr(path):
    """A sysfs/procfs attribute, stripped; None when absent or unreadable (e.g. speed of a down link)."""
    text = read_text(path, errors="replace")
    return None if text is None else text.strip()


def _data(content):
    return content if isinstance(content, bytes) else content.encode("utf-8", errors="surrogateescape")


def _current(path):
    """(bytes, stat) of path, or (None, None) when it does not exist."""
    try:
        with open(path, "rb") as handle:
            return handle.read(), os.stat(path)
    except FileNotFoundError:
        return None, None


def _reason(current, st, data, mode, owner):
    if current is None:
        return "missing"
    if current != data:
        return "content"
    if mode is not None and stat.S_IMODE(st.st_mode) != mode:
        return "mode"
    if owner is not None and (st.st_uid, st.st_gid) != tuple(owner):
        return "owner"
    return None


def file_differs(path, content, mode=None, owner=None):
    """Why path does not hold content (str or bytes) with that mode (int) and owner ((uid, gid)):
    "missing", "content", "mode" or "owner"; None when it does. mode/owner None: not compared."""
    current, st = _current(path)
    return _reason(current, st, _data(content), mode, owner)


class FileWriter:
    """Write-if-changed for one module run.

    write() compares a file with the content it should have (and its mode/owner when given),
    records a --diff entry for a content change, writes nothing in check mode, and otherwise
    replaces the file atomically: a temporary file in the same directory, validate(temp path)
    when given, module.atomic_move, then the mode and owner. new_only: mode/owner are set on a
    file this write creates and neither compared nor changed on an existing one (atomic_move keeps
    its attributes). ``files`` lists every file looked at ({path, changed}), ``diffs`` the entries
    for the result's ``diff``.
    """

    def __init__(self, module):
        self.module = module
        self.files = []
        self.diffs = []

    def _diff(self, path, before, after):
        self.diffs.append({"before_header": path, "after_header": path, "before": before, "after": after})

    def write(self, path, content, mode=None, owner=None, new_only=False, validate=None, unsafe_writes=False,
              dir_mode=None):
        """-> True when path changed (in check mode: would change). validate(tmp_path) raises to refuse
        the new content (the temporary file is removed, the file left as it was). dir_mode: make a
        missing parent directory with this mode (and owner) first."""
        data = _data(content)
        current, st = _current(path)
        reason = _reason(current, st, data, None if new_only else mode, None if new_only else owner)
        self.files.append({"path": path, "changed": reason is not None})
        if reason is None:
            return False
        if reason in ("missing", "content"):
            before = "" if current is None else current.decode("utf-8", errors="surrogateescape")
            self._diff(path, before, data.decode("utf-8", errors="surrogateescape"))
        if self.module.check_mode:
            return True
        if dir_mode is not None:
            self.ensure_dir(os.path.dirname(path), dir_mode, owner)
        if reason in ("missing", "content"):
            self._replace(path, data, validate, unsafe_writes)
        if mode is not None and (reason == "missing" or not new_only):
            os.chmod(path, mode)
        if owner is not None and (reason == "missing" or not new_only):
            now = os.stat(path)
            if (now.st_uid, now.st_gid) != tuple(owner):
                os.chown(path, owner[0], owner[1])
        return True

    def _replace(self, path, data, validate, unsafe_writes):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".%s." % os.path.basename(path))
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            if validate is not None:
                validate(tmp)
            self.module.atomic_move(tmp, path, unsafe_writes=unsafe_writes)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)

    def remove(self, path):
        """Make sure path does not exist. -> True when it did (in check mode: would be removed)."""
        current, _st = _current(path)
        self.files.append({"path": path, "changed": current is not None})
        if current is None:
            return False
        self._diff(path, current.decode("utf-8", errors="surrogateescape"), "")
        if not self.module.check_mode:
            os.unlink(path)
        return True

    def ensure_dir(self, path, mode=0o755, owner=None):
        """Make a missing directory (not in check mode), with owner ((uid, gid)) when given."""
        if os.path.isdir(path):
            return False
        if not self.module.check_mode:
            os.makedirs(path, mode)
            now = os.stat(path)
            if owner is not None and (now.st_uid, now.st_gid) != tuple(owner):
                os.chown(path, owner[0], owner[1])
        return True


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
