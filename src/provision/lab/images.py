"""Node images: built with mmdebstrap, one per release, init and flavour, cached by recipe hash.

A recipe is the release, the package list and (for every image but today's two) the init system
and the apt layout; its hash is in the tag, so an image is rebuilt exactly when its recipe
changes, and `localhost/provision-node:full-<hash>` / `minimal-<hash>` (bookworm, no init) keep
the tags they always had.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from provision.paths import cache_dir

from ._base import LABEL_RECIPE, LabError, _run, machine_lock, podman

SUITE = "bookworm"  # the default release
RELEASES = ("bullseye", "bookworm", "trixie")
INITS = ("none", "systemd")
# the builder is not part of the recipe: mmdebstrap (since 2026-11-27) and debootstrap before it make the
# same minbase with the same packages and /usr merged, so the images built before keep their tags
RECIPE_VERSION = 3
# mmdebstrap's hooks that give a merged /usr like debootstrap's (bookworm on: usr-is-merged)
MERGED_USR_HOOKS = Path("/usr/share/mmdebstrap/hooks/merged-usr")

# What a fresh node has. The nodes reach no package registry (internal network), so the
# distro packages that the roles ensure (gcc toolchain, pdsh) are part of the image; the
# roles' package tasks find them present. Everything else (sshd running, keys, venv, torch,
# env block) is the roles' job.
_BASE_PACKAGES = [
    "openssh-server", "openssh-client", "python3", "python3-venv", "sudo", "procps",
    "gcc", "g++", "make", "pdsh", "ca-certificates", "less",
]
FLAVOURS: dict[str, list[str]] = {
    # a typical cloud/bare-metal Debian node
    "full": _BASE_PACKAGES + ["iproute2"],
    # a minimal container image: no iproute2 (no `ip`), as real minimal images ship
    "minimal": list(_BASE_PACKAGES),
    # only what a fresh minimal server image has (the minbase variant: apt, dpkg, the
    # essential set) and python3 for Ansible; openssh-server comes with the systemd flavour
    # (a VM is reached over ssh), everything else the roles install from a package mirror
    "bare": ["python3"],
}
# systemd as PID 1, as on a VM: openssh-server enabled on port 22, dbus as every server has it
SYSTEMD_PACKAGES = ["systemd", "systemd-sysv", "dbus", "openssh-server"]

# first boot of a systemd node: host keys, as cloud-init or Debian's raspi images make them
# (the image carries none: every node must have its own)
HOSTKEYS_UNIT = "regenerate-ssh-host-keys.service"
_HOSTKEYS_UNIT_TEXT = """\
[Unit]
Description=Generate the SSH host keys on first boot (provision lab)
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""


def _legacy(flavour: str, release: str, init: str, extras: tuple[str, ...]) -> bool:
    """Today's two images (bookworm, no init, full or minimal): their recipe stays byte for byte."""
    return flavour in ("full", "minimal") and release == SUITE and init == "none" and not extras


def check_image_args(flavour: str, release: str, init: str) -> None:
    if flavour not in FLAVOURS:
        raise LabError(f"unknown image flavour {flavour!r}; choose one of {', '.join(FLAVOURS)}")
    if release not in RELEASES:
        raise LabError(f"unknown Debian release {release!r}; choose one of {', '.join(RELEASES)}")
    if init not in INITS:
        raise LabError(f"unknown init {init!r}; choose one of {', '.join(INITS)}")


def packages(flavour: str, init: str = "none", extras: tuple[str, ...] = ()) -> list[str]:
    pkgs = set(FLAVOURS[flavour]) | set(extras)
    if init == "systemd":
        pkgs |= set(SYSTEMD_PACKAGES)
    return sorted(pkgs)


def recipe(flavour: str, release: str = SUITE, init: str = "none", extras: tuple[str, ...] = ()) -> dict:
    check_image_args(flavour, release, init)
    rec: dict = {"version": RECIPE_VERSION, "suite": release, "packages": packages(flavour, init, extras)}
    if not _legacy(flavour, release, init, tuple(extras)):
        rec.update({"flavour": flavour, "init": init, "apt_sources": "vm", "layout": 1})
    return rec


def image_tag(flavour: str, release: str = SUITE, init: str = "none", extras: tuple[str, ...] = ()) -> str:
    rec = recipe(flavour, release, init, extras)
    digest = hashlib.sha256(json.dumps(rec, sort_keys=True).encode()).hexdigest()[:12]
    if _legacy(flavour, release, init, tuple(extras)):
        return f"localhost/provision-node:{flavour}-{digest}"
    return f"localhost/provision-node:{release}-{flavour}-{init}-{digest}"


def image_exists(tag: str) -> bool:
    return podman("image", "exists", tag, check=False).returncode == 0


def _debian_mirror() -> str:
    return os.environ.get("PROVISION_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def build_image(flavour: str = "full", *, release: str = SUITE, init: str = "none",
                extras: tuple[str, ...] = (), log=print, force: bool = False) -> str:
    """Build the node image once with mmdebstrap; reuse it while the recipe is unchanged."""
    tag = image_tag(flavour, release, init, extras)
    if image_exists(tag) and not force:
        return tag
    # one build of an image at a time: another lab (or test worker) may be building it right now
    with machine_lock(f"image-{tag.rpartition(':')[2]}", timeout=1800, what=f"the build of {tag}"):
        if image_exists(tag) and not force:
            return tag
        return _build_image(tag, flavour, release=release, init=init, extras=extras, log=log)


def bootstrap_argv(rec: dict, release: str, rootfs: Path) -> list[str]:
    """mmdebstrap of a recipe's minbase + packages into the directory ROOTFS, /usr merged as a
    fresh install of that release has it (bullseye: the symlinks alone; it has no usr-is-merged).
    mmdebstrap installs everything with one apt run: 30-35 s a bookworm image here, where
    debootstrap took 55 s (2026-11-27, downloads included; docs/lab.md)."""
    hooks: list[str] = []
    if MERGED_USR_HOOKS.is_dir():
        hooks = ([f"--setup-hook={MERGED_USR_HOOKS / 'setup00.sh'}"] if release == "bullseye"
                 else [f"--hook-dir={MERGED_USR_HOOKS}"])
    return ["mmdebstrap", "--variant=minbase", "--mode=root", "--format=directory",
            "--include=" + ",".join(rec["packages"]), *hooks, release, str(rootfs), _debian_mirror()]


def _build_image(tag: str, flavour: str, *, release: str, init: str, extras: tuple[str, ...], log) -> str:
    if shutil.which("mmdebstrap") is None:
        raise LabError("mmdebstrap is missing; run `provision lab setup`")
    rec = recipe(flavour, release, init, extras)
    t0 = time.monotonic()
    log(f"building node image {tag} with mmdebstrap (once; about a minute)")
    work = Path(tempfile.mkdtemp(prefix="provision-rootfs-", dir=str(cache_dir())))
    rootfs = work / "rootfs"
    cmd = '["/sbin/init"]' if init == "systemd" else '["sleep", "infinity"]'
    try:
        _run(bootstrap_argv(rec, release, rootfs), timeout=1800)
        _prepare_rootfs(rootfs, release=release, init=init, legacy="apt_sources" not in rec)
        tar = subprocess.Popen(
            ["tar", "-C", str(rootfs), "--exclude=./var/cache/apt/archives/*.deb",
             "--exclude=./var/lib/apt/lists/*_*", "--exclude=./etc/ssh/ssh_host_*", "-c", "."],
            stdout=subprocess.PIPE)
        imp = subprocess.run(
            ["podman", "import", "--change", f"LABEL {LABEL_RECIPE}={tag}",
             "--change", f"CMD {cmd}", "-", tag],
            stdin=tar.stdout, capture_output=True, text=True, check=False)
        tar.stdout.close()
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise LabError(f"podman import failed: {imp.stderr.strip()[-300:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"built {tag} in {time.monotonic() - t0:.0f} s")
    return tag


def _vm_apt_sources(rootfs: Path, release: str) -> None:
    """The apt sources a fresh Debian VM of that release has (deb.debian.org: unreachable from
    the lab network, as on an air-gapped cluster; the roles must cope)."""
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    lst = rootfs / "etc/apt/sources.list"
    if release == "trixie":
        # trixie's installer and cloud images use a deb822 file and no sources.list
        lst.unlink(missing_ok=True)
        (rootfs / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
        (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(
            f"Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {release} {release}-updates\n"
            f"Components: main\nSigned-By: {keyring}\n\n"
            f"Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: {release}-security\n"
            f"Components: main\nSigned-By: {keyring}\n")
    else:
        lst.write_text(f"deb http://deb.debian.org/debian {release} main\n"
                       f"deb http://deb.debian.org/debian-security {release}-security main\n"
                       f"deb http://deb.debian.org/debian {release}-updates main\n")


def _prepare_rootfs(rootfs: Path, *, release: str = SUITE, init: str = "none", legacy: bool = True) -> None:
    """Make the image look like a fresh node: no host keys, sshd not running (no init) or
    started by systemd on port 22 (systemd)."""
    for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (rootfs / "etc/hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    prc = rootfs / "usr/sbin/policy-rc.d"
    if init == "systemd":
        # a VM: packages installed later start their services, as on any Debian host
        prc.unlink(missing_ok=True)
        unit = rootfs / "etc/systemd/system" / HOSTKEYS_UNIT
        unit.write_text(_HOSTKEYS_UNIT_TEXT)
        wants = rootfs / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        for name, target in ((HOSTKEYS_UNIT, f"/etc/systemd/system/{HOSTKEYS_UNIT}"),
                             ("ssh.service", "/lib/systemd/system/ssh.service")):
            link = wants / name
            if not link.is_symlink() and not link.exists():
                link.symlink_to(target)
        # an empty machine-id: systemd makes one per container at boot (podman's container uuid)
        (rootfs / "etc/machine-id").write_text("")
        dbus_id = rootfs / "var/lib/dbus/machine-id"
        if dbus_id.is_file() and not dbus_id.is_symlink():
            dbus_id.unlink()
    else:
        # policy-rc.d: no service starts inside the image build or later by dpkg triggers
        prc.write_text("#!/bin/sh\nexit 101\n")
        prc.chmod(0o755)
    if legacy:
        # apt: no registry is reachable from the lab network; keep apt quiet and fast about it
        (rootfs / "etc/apt/apt.conf.d/99provision-lab").write_text(
            'Acquire::Retries "0";\nAcquire::http::Timeout "5";\n')
    else:
        _vm_apt_sources(rootfs, release)
