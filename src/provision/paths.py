"""Where the Ansible content lives: a checkout or the copy shipped inside the wheel."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

_PKG_DIR = Path(__file__).resolve().parent
_PACKAGED_COLLECTIONS = _PKG_DIR / "_collection"
_PACKAGED_ROOT = _PACKAGED_COLLECTIONS / "ansible_collections" / "provision" / "cluster"


@lru_cache(maxsize=1)
def content_root() -> Path:
    """The directory holding site.yml, playbooks/, roles/, plugins/ and ansible.cfg.

    A checkout (src/provision/../../galaxy.yml) wins over the packaged copy, so that
    `pip install -e .` and a plain checkout use the files being edited.
    """
    override = os.environ.get("PROVISION_CONTENT_ROOT")
    if override:
        return Path(override).resolve()
    checkout = _PKG_DIR.parent.parent
    if (checkout / "galaxy.yml").is_file() and (checkout / "site.yml").is_file():
        return checkout
    if (_PACKAGED_ROOT / "site.yml").is_file():
        return _PACKAGED_ROOT
    raise FileNotFoundError(
        "cannot find the provision Ansible content (site.yml); reinstall the package"
    )


def collections_dir() -> Path:
    """A directory that contains ansible_collections/provision/cluster."""
    root = content_root()
    if root == _PACKAGED_ROOT:
        return _PACKAGED_COLLECTIONS
    return root / "collections"


def user_collections_dir() -> Path:
    return Path(os.path.expanduser("~/.ansible/collections"))


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    path = Path(base) / "provision"
    path.mkdir(parents=True, exist_ok=True)
    return path


def ansible_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for ansible-* children: our config, our collections first."""
    root = content_root()
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = str(root / "ansible.cfg")
    paths = [str(collections_dir()), str(root / ".collections"), str(user_collections_dir()),
             "/usr/share/ansible/collections"]
    env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join(paths)
    env["ANSIBLE_ROLES_PATH"] = str(root / "roles")
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    if extra:
        env.update(extra)
    return env
