"""Third-party collections the roles use, taken from the `ansible` wheel on PyPI.

Ansible Galaxy is often unreachable (air-gapped controllers, this project's CI); PyPI's
`ansible` package carries the same collections. We download that one wheel (cached), and copy
only the collections listed in requirements.yml into ~/.ansible/collections. Nothing of it is
committed to this repository.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from provision.paths import cache_dir, content_root, user_collections_dir

# the wheel whose collection versions requirements.yml pins (containers.podman 1.18.0, ansible.posix 2.1.0)
ANSIBLE_WHEEL_VERSION = "12.3.0"
ANSIBLE_WHEEL_SPEC = f"ansible=={ANSIBLE_WHEEL_VERSION}"


# What only the local lab needs: its nodes are reached with the podman connection at first contact.
# A controller that drives real machines never installs it (`provision setup --lab` does).
LAB_COLLECTIONS = ("containers.podman",)


def required_collections(lab: bool = True) -> list[str]:
    """The collections of requirements.yml (without the lab's when lab is false)."""
    data = yaml.safe_load((content_root() / "requirements.yml").read_text()) or {}
    names = [c["name"] if isinstance(c, dict) else str(c) for c in data.get("collections", [])]
    return [n for n in names if lab or n not in LAB_COLLECTIONS]


def _installed(name: str, dest: Path) -> bool:
    ns, coll = name.split(".", 1)
    return (dest / "ansible_collections" / ns / coll / "MANIFEST.json").is_file()


def missing_collections(dest: Path | None = None, lab: bool = True) -> list[str]:
    dest = dest or user_collections_dir()
    return [name for name in required_collections(lab) if not _installed(name, dest)]


def _ansible_wheel(log) -> Path:
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"ansible-{ANSIBLE_WHEEL_VERSION}-*.whl"))
    if found:
        return found[-1]
    log("downloading the `ansible` wheel once, to take its collections (Galaxy may be unreachable)")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           "-d", str(wheels), ANSIBLE_WHEEL_SPEC], capture_output=True, text=True, check=False)
    found = sorted(wheels.glob(f"ansible-{ANSIBLE_WHEEL_VERSION}-*.whl"))
    if proc.returncode != 0 or not found:
        raise RuntimeError("cannot download the ansible wheel from PyPI: "
                           + (proc.stderr.strip().splitlines() or ["?"])[-1]
                           + "; or install them with `ansible-galaxy collection install -r requirements.yml`")
    return found[-1]


def ensure_collections(dest: Path | None = None, log=print, lab: bool = False) -> list[str]:
    """Install the missing collections into dest (the lab's too when lab is true); returns the names installed."""
    dest = dest or user_collections_dir()
    missing = missing_collections(dest, lab)
    if not missing:
        return []
    wheel = _ansible_wheel(log)
    prefixes = {name: "ansible_collections/%s/%s/" % tuple(name.split(".", 1)) for name in missing}
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            for prefix in prefixes.values():
                if member.startswith(prefix):
                    zf.extract(member, dest)
                    break
    still = missing_collections(dest, lab)
    if still:
        raise RuntimeError(f"the ansible wheel {wheel.name} lacks {', '.join(still)}")
    return missing
