# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The collection's module payloads, kept between runs (the callback provision.cluster.payload_cache).

ansible-core builds a module's payload (AnsiballZ: the module and every module_util it imports, parsed
and zipped) once per run, in its own temporary directory (C.DEFAULT_LOCAL_TMP/ansiballz_cache), and
throws it away when the run ends. Each build is 0.15-0.5 s of controller time, one process at a time per
module; a re-run of site.yml or `provision verify` builds 11-15 of ours, the same bytes every time.

Here a payload of this collection's modules is kept under a key that names everything its bytes come
from: ansible-core's version and the files it builds payloads with (module_common, _ansiballz, every
module_util it ships), the Python that pickles them, and every module and module_util of this collection,
by content. A run restores the entries of its key into its own cache directory before the first task
(ansible-core then finds them as if it had built them in this run) and keeps what it built at the end.
A changed file is a new key: a payload is never used for code other than its own. Our modules import
only ansible.module_utils and this collection's module_utils (tests/unit/plugins/plugin_utils/
test_payload_cache.py holds them to it), so the key covers every byte of their payloads.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

# the file names ansible-core gives our payloads in its cache: <module fqn>-<compression>-<extensions>
PREFIX = "ansible_collections.provision.cluster."
COLLECTION = Path(__file__).resolve().parents[2]


def _ansible_sources() -> list[Path]:
    """What ansible-core builds a payload of ours from, besides our files: its module_utils (every
    payload carries some), and the code that assembles the payload."""
    import ansible
    import ansible.module_utils

    root = Path(ansible.__file__).parent
    found = [Path(ansible.module_utils.__file__).parent, root / "executor" / "module_common.py",
             root / "_internal" / "_ansiballz"]  # the last is ansible-core 2.19's; older ones have none
    return [p for p in found if p.exists()]


def _files(root: Path) -> list[Path]:
    return [root] if root.is_file() else sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def fingerprint(sources: list[Path] | None = None, collection: Path = COLLECTION) -> str:
    """The key of this code's payloads: a digest of ansible-core's version, the Python, and the content
    of every source file a payload of ours is built from (ours: plugins/modules, plugins/module_utils)."""
    from ansible.release import __version__

    roots = (sources if sources is not None else _ansible_sources()) + [
        collection / "plugins" / "modules", collection / "plugins" / "module_utils"]
    digest = hashlib.sha256(f"{__version__}\0{sys.version}\0{collection}\0".encode())
    for root in roots:
        for path in _files(root):
            digest.update(f"{path}\0".encode())
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()[:32]


def _copy(src: Path, dest_dir: Path) -> None:
    """src into dest_dir under its name, whole or not at all (a reader never sees half a payload)."""
    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out, src.open("rb") as data:
            shutil.copyfileobj(data, out)
        os.chmod(tmp, 0o600)
        os.replace(tmp, dest_dir / src.name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def ours(run_cache: Path) -> list[Path]:
    """The payloads of this collection's modules in a run's cache directory (not ansible-core's locks)."""
    if not run_cache.is_dir():
        return []
    return sorted(p for p in run_cache.iterdir()
                  if p.name.startswith(PREFIX) and not p.name.endswith(".lock") and p.is_file())


class UntrustedCache(ValueError):
    """The kept payloads are not this user's alone: not used (they run on every node, as root where it escalates)."""


def _own(path: Path) -> None:
    """path is this user's, not a link, and nobody else may write it; else UntrustedCache."""
    found = path.lstat()
    if stat.S_ISLNK(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o022:
        raise UntrustedCache("%s is not this user's alone (owner uid %d, mode %o): the kept module payloads are not "
                             "used; fix: rm -rf %s" % (path, found.st_uid, stat.S_IMODE(found.st_mode), path))


def restore(store: Path, key: str, run_cache: Path) -> list[str]:
    """Copy the payloads kept under key into a run's cache directory; -> their names. UntrustedCache
    where the store, the key's directory or a payload could have been written by another user."""
    kept = store / key
    if not kept.is_dir():
        return []
    for path in (store, kept):
        _own(path)
    run_cache.mkdir(parents=True, exist_ok=True)
    names = []
    for entry in ours(kept):
        _own(entry)
        if not (run_cache / entry.name).exists():
            _copy(entry, run_cache)
            names.append(entry.name)
    os.utime(kept)  # in use: pruned last
    return names


def save(store: Path, key: str, run_cache: Path, keep: int = 4) -> list[str]:
    """Keep the payloads a run built (those the key does not hold yet) under key; -> their names.
    The oldest keys beyond `keep` are removed."""
    built = [p for p in ours(run_cache) if not (store / key / p.name).exists()]
    if not built:
        return []
    store.mkdir(mode=0o700, parents=True, exist_ok=True)
    (store / key).mkdir(mode=0o700, exist_ok=True)
    for entry in built:
        _copy(entry, store / key)
    prune(store, keep)
    return [p.name for p in built]


def prune(store: Path, keep: int) -> list[str]:
    """Remove all but the `keep` most recently used keys; -> the keys removed."""
    keys = sorted((p for p in store.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in keys[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return [p.name for p in keys[keep:]]
