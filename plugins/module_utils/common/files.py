# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Files on the node, the ways every module of this collection needs them (plain Python).

- read_text / read_attr: a file's text, or a default when it cannot be read.
- file_differs / FileWriter: write-if-changed with check mode, --diff, an atomic replace through
  the module's atomic_move, mode/owner (or mode/owner only for a new file) and validation.
- private_dir: a directory nobody else can write into.
- Confined / confinement: root working in a directory another user controls (the training user's
  home) without following a link or trusting a name there; UnsafeFile: the one-line refusal.
"""

from __future__ import annotations

import errno
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


class UnsafeFile(ValueError):
    """A file this module will not read or write: a symbolic link or another user's file where root
    works in a user's directory, or a file that cannot be read or written. The message is one line
    naming the file and the fix; nothing was changed."""


def _why(path, exc):
    """A one-line reason for an OSError on path, naming the link's target when path is a link."""
    reason = exc.strerror or str(exc)
    try:
        if os.path.islink(path):
            reason += " (it is a symbolic link to %s)" % os.readlink(path)
    except OSError:
        pass
    return reason


class FileWriter:
    """Write-if-changed for one module run.

    write() compares a file with the content it should have (and its mode/owner when given),
    records a --diff entry for a content change, writes nothing in check mode, and otherwise
    replaces the file atomically: a temporary file in the same directory, validate(temp path)
    when given, module.atomic_move, then the mode and owner. new_only: mode/owner are set on a
    file this write creates and neither compared nor changed on an existing one (atomic_move keeps
    its attributes). ``files`` lists every file looked at ({path, changed}), ``diffs`` the entries
    for the result's ``diff``.

    confine: Confined directories (see ``confinement``): a path inside one is read, written, chmodded
    and chowned only through that directory's fds, never following a link (root in a user's home).
    Elsewhere a file the module cannot read or write raises UnsafeFile (one line), not a traceback.
    """

    def __init__(self, module, confine=()):
        self.module = module
        self.files = []
        self.diffs = []
        self.confine = list(confine or ())

    def _confined(self, path):
        return next((c for c in self.confine if c.covers(path)), None)

    def _diff(self, path, before, after):
        self.diffs.append({"before_header": path, "after_header": path, "before": before, "after": after})

    def read_text(self, path, default=""):
        """The current text of a file this writer rewrites (default when missing), read as write() reads it."""
        current, _st = self._current(path)
        return default if current is None else current.decode("utf-8", errors="surrogateescape")

    def _current(self, path):
        c = self._confined(path)
        if c is not None:
            return c.read(path)
        try:
            return _current(path)
        except OSError as exc:
            raise UnsafeFile("cannot read %s: %s; fix: make it a regular file this user (uid %d) can read and "
                             "write, or remove it" % (path, _why(path, exc), os.geteuid()))

    def write(self, path, content, mode=None, owner=None, new_only=False, validate=None, unsafe_writes=False,
              dir_mode=None):
        """-> True when path changed (in check mode: would change). validate(tmp_path) raises to refuse
        the new content (the temporary file is removed, the file left as it was). dir_mode: make a
        missing parent directory with this mode (and owner) first."""
        data = _data(content)
        current, st = self._current(path)
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
        set_mode = mode is not None and (reason == "missing" or not new_only)
        set_owner = owner is not None and (reason == "missing" or not new_only)
        c = self._confined(path)
        if c is not None:
            if reason in ("missing", "content"):
                # the new file gets its final mode and owner through its fd before it is renamed in
                c.replace(path, data,
                          mode if set_mode else (stat.S_IMODE(st.st_mode) if st is not None else 0o644),
                          tuple(owner) if set_owner else ((st.st_uid, st.st_gid) if st is not None else None),
                          validate)
            else:
                c.set_attrs(path, mode if set_mode else None, owner if set_owner else None)
            return True
        try:
            if reason in ("missing", "content"):
                self._replace(path, data, validate, unsafe_writes)
            if set_mode:
                os.chmod(path, mode)
            if set_owner:
                now = os.stat(path)
                if (now.st_uid, now.st_gid) != tuple(owner):
                    os.chown(path, owner[0], owner[1])
        except OSError as exc:
            raise UnsafeFile("cannot write %s: %s; fix: make it (and its directory) writable by this user (uid %d), "
                             "or remove it" % (path, _why(path, exc), os.geteuid()))
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
        current, _st = self._current(path)
        self.files.append({"path": path, "changed": current is not None})
        if current is None:
            return False
        self._diff(path, current.decode("utf-8", errors="surrogateescape"), "")
        if not self.module.check_mode:
            c = self._confined(path)
            if c is not None:
                c.unlink(path)
            else:
                os.unlink(path)
        return True

    def ensure_dir(self, path, mode=0o755, owner=None):
        """Make a missing directory (not in check mode), with owner ((uid, gid)) when given."""
        c = self._confined(path)
        if c is not None:
            if c.kind(path) == "dir":
                return False
            if not self.module.check_mode:
                c.makedirs(path, mode, owner)
            return True
        if os.path.isdir(path):
            return False
        if not self.module.check_mode:
            os.makedirs(path, mode)
            now = os.stat(path)
            if owner is not None and (now.st_uid, now.st_gid) != tuple(owner):
                os.chown(path, owner[0], owner[1])
        return True


# open flags of the confined walk: never follow a link, never block on a FIFO, never become a tty's
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# a dotfile bigger than this is not read into memory by root (a planted sparse file)
CONFINED_READ_LIMIT = 16 << 20


def _read_fd(fd, st, shown, limit):
    """The bytes of an open regular file, at most LIMIT: a larger one (or one that grows while read) raises."""
    if st.st_size > limit:
        raise UnsafeFile("%s is %d bytes, more than the %d this module reads; fix: shorten it" % (shown, st.st_size, limit))
    chunks, size = [], 0
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise UnsafeFile("%s grew beyond %d bytes while read; fix: shorten it" % (shown, limit))


def read_no_follow(path, limit=CONFINED_READ_LIMIT):
    """(bytes, stat) of the regular file PATH, or (None, None) when it does not exist, for a process reading
    files of its own user: a link at PATH is not followed, a FIFO not waited on (UnsafeFile names either),
    and no more than LIMIT bytes are read. Root reading another user's files uses Confined.read."""
    try:
        fd = os.open(path, _FILE_FLAGS)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFile("%s is a symbolic link (not followed); fix: remove it" % path) from None
        raise UnsafeFile("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile("%s is not a regular file (a %s); fix: remove it" % (
                path, "directory" if stat.S_ISDIR(st.st_mode) else "FIFO, socket or device"))
        return _read_fd(fd, st, path, limit), st
    finally:
        os.close(fd)


class Confined:
    """Root working inside a directory another user controls, e.g. the training user's home.

    That user can replace any name in it between two system calls, so no path below ``top`` is
    looked up by name: ``top`` is opened once and each path below it is reached one component at a
    time from a directory fd, with O_NOFOLLOW (openat). Refused, with UnsafeFile naming the file and
    the fix: a symbolic link anywhere below ``top``; a directory or file owned by a third user; a
    root-owned file with more than one link (a hard link planted to a system file); anything but a
    directory or a regular file; a file over CONFINED_READ_LIMIT. A file is replaced by writing a
    temporary name made with O_EXCL in the same directory fd, fchown/fchmod through its fd, fsync,
    and renameat over the old name (a link there is replaced, never followed). Nothing is realpath'ed.
    """

    def __init__(self, top, uid, gid, user=None):
        self.top = os.path.normpath(os.path.abspath(top))
        self.uid, self.gid = uid, gid
        self.user = user or "uid %d" % uid

    def covers(self, path):
        path = os.path.normpath(os.path.abspath(path))
        return path == self.top or path.startswith(self.top.rstrip("/") + "/")

    def _names(self, path):
        rel = os.path.relpath(os.path.normpath(os.path.abspath(path)), self.top)
        return [] if rel == "." else rel.split(os.sep)

    # ------------------------------------------------------------------ refusals
    def _refusal(self, shown, exc, dfd=None, name=None):
        target = None
        if dfd is not None and exc.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                target = os.readlink(name, dir_fd=dfd)  # O_NOFOLLOW|O_DIRECTORY on a link: ENOTDIR
            except OSError:
                target = None
        if exc.errno == errno.ELOOP or target is not None:
            return UnsafeFile("%s is a symbolic link%s: root does not follow links in %s's files; fix: replace it "
                              "with a regular file or directory of %s (the link's target is left alone), or run this "
                              "task as %s (become_user)" % (shown, " (to %s)" % target if target else "", self.user,
                                                            self.user, self.user))
        if exc.errno == errno.ENOTDIR:
            return UnsafeFile("%s is not a directory; fix: move it away so that it can be made" % shown)
        return UnsafeFile("cannot open %s: %s" % (shown, exc.strerror or exc))

    def _check_owner(self, st, shown, what):
        if st.st_uid not in (self.uid, 0):
            raise UnsafeFile("%s belongs to uid %d, neither %s nor root: root does not work in another user's %s; "
                             "fix: chown %s %s, or remove it" % (shown, st.st_uid, self.user, what, self.user, shown))

    # ------------------------------------------------------------------ walking
    def _dir_fd(self, names, create=None):
        """An fd of top/names (None when a component is missing and create is None).
        create: (mode, (uid, gid) or None) for the directories made on the way."""
        try:
            fd = os.open(self.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if create is None:
                return None
            raise UnsafeFile("%s (the home of %s) does not exist; fix: create it (useradd -m %s)"
                             % (self.top, self.user, self.user))
        shown = self.top
        try:
            self._check_owner(os.fstat(fd), shown, "directory")
            for name in names:
                shown = os.path.join(shown, name)
                try:
                    nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if create is None:
                        os.close(fd)
                        return None
                    mode, owner = create
                    os.mkdir(name, 0o700, dir_fd=fd)
                    try:
                        nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        raise self._refusal(shown, exc, fd, name) from None
                    if owner is not None:
                        os.fchown(nfd, owner[0], owner[1])
                    os.fchmod(nfd, mode)
                except OSError as exc:
                    raise self._refusal(shown, exc, fd, name) from None
                os.close(fd)
                fd = nfd
                self._check_owner(os.fstat(fd), shown, "directory")
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _split(self, path):
        names = self._names(path)
        if not names:
            raise UnsafeFile("%s is a directory, not a file" % path)
        return names[:-1], names[-1]

    def _open_file(self, dfd, name, shown):
        """(fd, stat) of the regular file name in dfd, checked; None when it does not exist."""
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._refusal(shown, exc, dfd, name) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeFile("%s is not a regular file (a %s); fix: remove it" % (
                    shown, "directory" if stat.S_ISDIR(st.st_mode) else "FIFO, socket or device"))
            self._check_owner(st, shown, "file")
            if st.st_uid != self.uid and st.st_nlink > 1:
                raise UnsafeFile("%s is root's and has %d hard links (one may be a system file): root does not read "
                                 "or change it; fix: remove it (rm %s)" % (shown, st.st_nlink, shown))
            return fd, st
        except BaseException:
            os.close(fd)
            raise

    # ------------------------------------------------------------------ operations
    def kind(self, path):
        """'dir', 'file', 'link', 'other' or None (missing), without following a link."""
        names = self._names(path)
        if not names:
            return "dir" if os.path.isdir(self.top) else None
        dfd = self._dir_fd(names[:-1])
        if dfd is None:
            return None
        try:
            st = os.stat(names[-1], dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(dfd)
        for test, name in ((stat.S_ISDIR, "dir"), (stat.S_ISREG, "file"), (stat.S_ISLNK, "link")):
            if test(st.st_mode):
                return name
        return "other"

    def dir_stat(self, path):
        """The stat of a directory (None when missing); a link there or a stranger's directory raises."""
        dfd = self._dir_fd(self._names(path))
        if dfd is None:
            return None
        try:
            return os.fstat(dfd)
        finally:
            os.close(dfd)

    def stat(self, path):
        """The checked stat of a regular file (None when missing); a link or a stranger's file raises."""
        dirs, name = self._split(path)
        dfd = self._dir_fd(dirs)
        if dfd is None:
            return None
        try:
            got = self._open_file(dfd, name, path)
            if got is None:
                return None
            os.close(got[0])
            return got[1]
        finally:
            os.close(dfd)

    def read(self, path, limit=CONFINED_READ_LIMIT):
        """(bytes, stat) of a regular file, or (None, None) when it (or its directory) does not exist."""
        dirs, name = self._split(path)
        dfd = self._dir_fd(dirs)
        if dfd is None:
            return None, None
        try:
            got = self._open_file(dfd, name, path)
            if got is None:
                return None, None
            fd, st = got
            try:
                return _read_fd(fd, st, path, limit), st
            finally:
                os.close(fd)
        finally:
            os.close(dfd)

    def replace(self, path, data, mode, owner=None, validate=None, dir_create=None):
        """Write data to path atomically: the new file has mode and owner ((uid, gid); default the user)
        before it takes the name. validate(a path of the new file) may raise to refuse it."""
        owner = tuple(owner) if owner is not None else (self.uid, self.gid)
        dirs, name = self._split(path)
        dfd = self._dir_fd(dirs, create=dir_create)
        if dfd is None:
            raise UnsafeFile("the directory of %s does not exist" % path)
        tmp = None
        try:
            for _attempt in range(100):
                candidate = ".%s.%s" % (name, os.urandom(6).hex())
                try:
                    fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                                 dir_fd=dfd)
                except FileExistsError:
                    continue
                tmp = candidate
                break
            else:
                raise UnsafeFile("cannot make a temporary file beside %s" % path)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchown(fd, owner[0], owner[1])
                os.fchmod(fd, mode)
                os.fsync(fd)
                if validate is not None:
                    validate("/proc/self/fd/%d" % fd)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            tmp = None
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except OSError:
                    pass
            os.close(dfd)

    def set_attrs(self, path, mode=None, owner=None):
        """chmod/chown a regular file through its fd (a link or a stranger's file is refused)."""
        dirs, name = self._split(path)
        dfd = self._dir_fd(dirs)
        if dfd is None:
            raise UnsafeFile("%s does not exist" % path)
        try:
            got = self._open_file(dfd, name, path)
            if got is None:
                raise UnsafeFile("%s does not exist" % path)
            fd, st = got
            try:
                if owner is not None and (st.st_uid, st.st_gid) != tuple(owner):
                    os.fchown(fd, owner[0], owner[1])
                if mode is not None and stat.S_IMODE(st.st_mode) != mode:
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)
        finally:
            os.close(dfd)

    def unlink(self, path):
        """Remove a name (a link is removed, not followed); True when it existed."""
        dirs, name = self._split(path)
        dfd = self._dir_fd(dirs)
        if dfd is None:
            return False
        try:
            os.unlink(name, dir_fd=dfd)
            return True
        except FileNotFoundError:
            return False
        except IsADirectoryError:
            raise UnsafeFile("%s is a directory; fix: remove it" % path) from None
        finally:
            os.close(dfd)

    def makedirs(self, path, mode=0o700, owner=None):
        """Make the missing directories of path (mode, owner (uid, gid); default the user)."""
        dfd = self._dir_fd(self._names(path), create=(mode, tuple(owner) if owner else (self.uid, self.gid)))
        os.close(dfd)

    def chmod_dir(self, path, mode):
        """chmod a directory through its fd (a link is refused)."""
        dfd = self._dir_fd(self._names(path))
        if dfd is None:
            raise UnsafeFile("%s does not exist" % path)
        try:
            os.fchmod(dfd, mode)
        finally:
            os.close(dfd)


def confinement(pw):
    """[Confined(pw's home)] when this process is root acting for another user (pw: a pwd entry), else
    []: a process running as that user works with its own rights and needs no confinement."""
    if os.geteuid() == 0 and pw is not None and pw.pw_uid != 0:
        return [Confined(pw.pw_dir, pw.pw_uid, pw.pw_gid, pw.pw_name)]
    return []


def read_user_file(pw, path, default=None):
    """A file in pw's home as text, read the way write() would (confined when root reads another
    user's file); default when missing. UnsafeFile when it is a link root would follow, or unreadable."""
    for c in confinement(pw):
        if c.covers(path):
            data, _st = c.read(path)
            return default if data is None else data.decode("utf-8", errors="surrogateescape")
    try:
        return read_text(path, default=default, only_missing=True)
    except OSError as exc:
        raise UnsafeFile("cannot read %s: %s; fix: make it a regular file %s can read" % (path, _why(path, exc),
                                                                                          pw.pw_name if pw else "the user"))


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
