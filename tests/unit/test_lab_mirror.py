"""The lab mirror's apt index and cache bookkeeping, on real .deb files (dpkg-deb), no podman."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess

import helpers  # noqa: F401
import pytest

from provision.lab import mirror

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")


def _deb(tmp_path, name: str, version: str, depends: str = "") -> None:
    root = tmp_path / "src" / name
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/share/doc" / name).mkdir(parents=True)
    (root / "usr/share/doc" / name / "README").write_text(f"{name} {version}\n")
    control = (f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: lab <lab@example.org>\n"
               + (f"Depends: {depends}\n" if depends else "")
               + "Description: test package\n a longer description\n .\n over lines\n")
    (root / "DEBIAN/control").write_text(control)
    subprocess.run(["dpkg-deb", "-Zgzip", "--build", str(root), str(tmp_path / "repo" / f"{name}_{version}_all.deb")],
                   check=True, capture_output=True)


def test_index_writes_a_flat_repository_apt_can_read(tmp_path):
    (tmp_path / "repo").mkdir()
    _deb(tmp_path, "alpha", "1.0", depends="beta (>= 2)")
    _deb(tmp_path, "beta", "2.1")
    repo = tmp_path / "repo"
    assert mirror.index(repo, "bookworm") == 2
    text = (repo / "Packages").read_text()
    assert gzip.decompress((repo / "Packages.gz").read_bytes()).decode() == text
    stanzas = [dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(" "))
               for block in text.strip().split("\n\n")]
    by_name = {s["Package"]: s for s in stanzas}
    assert set(by_name) == {"alpha", "beta"}
    alpha = by_name["alpha"]
    deb = repo / "alpha_1.0_all.deb"
    assert alpha["Filename"] == "./alpha_1.0_all.deb" and alpha["Depends"] == "beta (>= 2)"
    assert alpha["Size"] == str(deb.stat().st_size)
    assert alpha["SHA256"] == hashlib.sha256(deb.read_bytes()).hexdigest()
    assert " over lines" in text  # multi-line descriptions kept
    release = (repo / "Release").read_text()
    assert "Codename: bookworm" in release
    for fname in ("Packages", "Packages.gz"):
        data = (repo / fname).read_bytes()
        assert f" {hashlib.sha256(data).hexdigest()} {len(data)} {fname}" in release


def test_the_cache_is_current_only_for_the_same_list_and_images(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert not mirror.is_current("bookworm", ["img:a"])
    (mirror.mirror_root() / "bookworm").mkdir()
    stamp = {"version": mirror.MIRROR_VERSION, "packages": sorted(mirror.MIRROR_PACKAGES), "images": ["img:a"]}
    (mirror.mirror_root() / "bookworm" / mirror.STAMP).write_text(json.dumps(stamp))
    assert mirror.is_current("bookworm", ["img:a"])
    assert not mirror.is_current("bookworm", ["img:a", "img:b"])  # another image: what it lacks is fetched
    monkeypatch.setattr(mirror, "MIRROR_PACKAGES", mirror.MIRROR_PACKAGES + ["vim"])
    assert not mirror.is_current("bookworm", ["img:a"])  # the list grew: rebuilt


def test_the_package_list_is_what_the_roles_install():
    for pkg in ("openssh-server", "gcc", "g++", "make", "pdsh", "python3-venv", "iproute2", "iperf3",
                "openmpi-bin", "libopenmpi-dev", "munge", "slurmd", "slurmctld", "slurm-client"):
        assert pkg in mirror.MIRROR_PACKAGES
    assert "python3-pip" not in mirror.MIRROR_PACKAGES  # wheels come from the controller
    assert mirror.mirror_url(77) == "http://10.89.77.2:8080"
