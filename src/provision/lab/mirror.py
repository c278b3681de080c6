"""The lab's package mirror: the .deb files the roles may install, served inside the lab.

Built once per release on the controller and cached under ~/.cache/provision/mirror/<release>/
as a flat apt repository (the .debs, Packages, Packages.gz, Release), then served by a small
container on the lab's internal network at 10.89.K.2:8080, so that package installs run for real
on nodes that reach nothing outside the lab:

    deb [trusted=yes] http://10.89.K.2:8080/<codename> ./

How the set is chosen, exactly: `apt-get install --download-only` of MIRROR_PACKAGES inside a
throwaway container of the node image the lab runs for that release (the bare one, python3 and
apt only, on a bare lab; a cached mirror grows by what another image lacks when a lab of
another flavour uses it), on podman's default network, which reaches deb.debian.org. apt resolves against the image's own dpkg status and apt sources (the
release with -updates and -security, as a fresh VM), so the mirror holds every package and
dependency that image lacks, at the version its apt would pick. It runs twice per image, with
and without Recommends, so that the roles get what they need either way. Chosen over apt on the
controller with a separate Dir:: root: that needs the image's dpkg status copied out and
apt's configuration reproduced, and the controller need not be the same release (or Debian).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from pathlib import Path

from provision.paths import cache_dir

from ._base import LABEL, LABEL_ROLE, LabError, _run, machine_lock, podman

# Everything the roles may install from the mirror, by name (the lead's roles read the mirror
# through `cluster_package_mirror`; extend this list when a role installs something new).
MIRROR_PACKAGES = [
    # python3-apt: Ansible's apt module installs it on first use (from this mirror on an air-gapped node)
    "python3-apt",
    "openssh-server", "openssh-client", "gcc", "g++", "make", "pdsh", "python3-venv",
    "iproute2", "iperf3", "procps", "sudo", "ca-certificates", "less", "rsync",
    "openmpi-bin", "libopenmpi-dev",
    "munge", "slurm-wlm", "slurmd", "slurmctld", "slurm-client",
]
MIRROR_VERSION = 3
MIRROR_PORT = 8080
MIRROR_ROLE = "mirror"
LABEL_MIRROR_URL = "provision.lab.mirror_url"
STAMP = ".provision-mirror.json"
# podman's default network (NAT to the host's uplink): only the throwaway download containers
# use it, never a node
DOWNLOAD_NETWORK = "podman"
DOWNLOAD_TIMEOUT = 1800


def mirror_root() -> Path:
    path = cache_dir() / "mirror"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _work_dir(release: str) -> Path:
    # apt lists and the download area: beside the served tree, never inside it
    path = cache_dir() / "mirror-work" / release
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_stamp(release: str) -> dict | None:
    try:
        return json.loads((mirror_root() / release / STAMP).read_text())
    except (OSError, ValueError):
        return None


def is_current(release: str, images: list[str]) -> bool:
    """The cached mirror of RELEASE was made for today's package list and for each of IMAGES."""
    stamp = read_stamp(release)
    return bool(stamp) and stamp.get("version") == MIRROR_VERSION and \
        stamp.get("packages") == sorted(MIRROR_PACKAGES) and set(images) <= set(stamp.get("images", []))


def _lock(release: str):
    """One build of a release at a time on this machine (several labs share the cache)."""
    return machine_lock(f"mirror-{release}", timeout=DOWNLOAD_TIMEOUT, what=f"the {release} mirror's build")


_DOWNLOAD_SCRIPT = """\
set -e
export DEBIAN_FRONTEND=noninteractive
o="-q -o APT::Sandbox::User=root -o Acquire::Languages=none -o Acquire::Retries=3 -o Acquire::http::Timeout=60"
if [ -n "$SOURCES" ]; then
    printf '%s\\n' "$SOURCES" > /tmp/sources.list
    o="$o -o Dir::Etc::SourceList=/tmp/sources.list -o Dir::Etc::SourceParts=/dev/null"
fi
apt-get $o update
apt-get $o install -y --download-only --no-install-recommends "$@"
apt-get $o install -y --download-only "$@"
"""


def _download(image: str, release: str, packages: list[str], archives: Path, lists: Path, *, log=print) -> None:
    """apt-get install --download-only in a throwaway container of IMAGE, with the image's own
    apt sources (a VM's: the release, -updates, -security). A release past its security support
    can list security updates whose files the archive no longer serves (bullseye-security here,
    2026: 404); then the download runs again without -security, and says so."""
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    base = os.environ.get("PROVISION_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    attempts = [("", "its own sources"),
                (f"deb {base} {release} main\ndeb {base} {release}-updates main", f"{release} and {release}-updates only")]
    why = ""
    for sources, label in attempts:
        # each attempt in a copy of the area: a failed one leaves none of its files behind (they
        # would mix versions of two source sets: libmunge2 from -security beside munge from main)
        attempt = archives.parent / "attempt"
        shutil.rmtree(attempt, ignore_errors=True)
        (attempt / "partial").mkdir(parents=True)
        for deb in archives.glob("*.deb"):
            os.link(deb, attempt / deb.name)
        proc = _run(["podman", "run", "--rm", "--network", DOWNLOAD_NETWORK, "-e", f"SOURCES={sources}",
                     "-v", f"{attempt}:/var/cache/apt/archives", "-v", f"{lists}:/var/lib/apt/lists",
                     image, "sh", "-c", _DOWNLOAD_SCRIPT, "sh", *packages],
                    check=False, timeout=DOWNLOAD_TIMEOUT)
        if proc.returncode == 0:
            for deb in attempt.glob("*.deb"):
                if not (archives / deb.name).exists():
                    os.link(deb, archives / deb.name)
            shutil.rmtree(attempt, ignore_errors=True)
            if sources:
                log(f"mirror {release}: {why}; downloaded from {label} instead")
            return
        shutil.rmtree(attempt, ignore_errors=True)
        lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.startswith(("E:", "Err:"))]
        why = lines[0] if lines else (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
        if "404" not in proc.stderr + proc.stdout:
            break
    raise LabError(f"the {release} package mirror could not be downloaded in a container of {image} "
                   f"({why}); check that this machine reaches deb.debian.org "
                   f"(or set PROVISION_DEBIAN_MIRROR) and run `provision lab up` again")


def _control(deb: Path) -> str:
    proc = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LabError(f"{deb.name} is not a readable .deb ({proc.stderr.strip()}); remove it and build again")
    return proc.stdout.rstrip("\n")


def _hashes(path: Path) -> dict[str, str]:
    md5, sha1, sha256 = hashlib.md5(), hashlib.sha1(), hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            md5.update(chunk)
            sha1.update(chunk)
            sha256.update(chunk)
    return {"MD5sum": md5.hexdigest(), "SHA1": sha1.hexdigest(), "SHA256": sha256.hexdigest()}


def index(repo: Path, release: str) -> int:
    """Write Packages, Packages.gz and Release for the flat repository REPO; returns the count."""
    debs = sorted(repo.glob("*.deb"))
    if shutil.which("dpkg-deb") is None:
        raise LabError("dpkg-deb is missing on this machine; install dpkg (apt-get install dpkg)")

    def entry(deb: Path) -> str:
        fields = {"Filename": f"./{deb.name}", "Size": str(deb.stat().st_size), **_hashes(deb)}
        return _control(deb) + "".join(f"\n{k}: {v}" for k, v in fields.items()) + "\n"

    with ThreadPoolExecutor(max_workers=4) as pool:
        entries = list(pool.map(entry, debs))
    packages = "\n".join(entries).encode()
    (repo / "Packages").write_bytes(packages)
    (repo / "Packages.gz").write_bytes(gzip.compress(packages, compresslevel=9, mtime=0))
    lines = ["Origin: provision-lab", "Label: provision lab mirror", f"Suite: {release}",
             f"Codename: {release}", f"Date: {formatdate(usegmt=True)}", "Architectures: amd64 all",
             f"Description: packages the provision roles may install on {release} (flat repository)"]
    for algo, name in (("md5", "MD5Sum"), ("sha1", "SHA1"), ("sha256", "SHA256")):
        lines.append(f"{name}:")
        for fname in ("Packages", "Packages.gz"):
            data = (repo / fname).read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data)} {fname}")
    (repo / "Release").write_text("\n".join(lines) + "\n")
    return len(debs)


def build(release: str, images: list[str], *, log=print) -> dict:
    """Make sure ~/.cache/provision/mirror/RELEASE serves MIRROR_PACKAGES for each of IMAGES.

    Cached: nothing is fetched when the stamp says it was made for this package list and these
    images; an image not seen before adds only what it lacks. Returns the stamp (size, time)."""
    with _lock(release):
        if is_current(release, images):
            return read_stamp(release) or {}
        t0 = time.monotonic()
        root = mirror_root()
        final = root / release
        stamp = read_stamp(release)
        same_list = bool(stamp) and stamp.get("packages") == sorted(MIRROR_PACKAGES) and \
            stamp.get("version") == MIRROR_VERSION
        done_images = set(stamp.get("images", [])) if same_list else set()
        work = _work_dir(release)
        archives = work / "archives"
        if not same_list:
            shutil.rmtree(archives, ignore_errors=True)
        archives.mkdir(parents=True, exist_ok=True)
        # what the cached mirror already holds is not fetched again
        if same_list and final.is_dir():
            for deb in final.glob("*.deb"):
                target = archives / deb.name
                if not target.exists():
                    os.link(deb, target)
        todo = [image for image in images if image not in done_images]
        log(f"building the {release} package mirror ({len(MIRROR_PACKAGES)} packages and their dependencies, "
            f"for {len(todo)} image(s); once, cached in {final})")
        for image in todo:
            _download(image, release, sorted(MIRROR_PACKAGES), archives, work / "lists", log=log)
        staging = root / f".{release}.new-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for deb in archives.glob("*.deb"):
            os.link(deb, staging / deb.name)
        count = index(staging, release)
        size = sum(p.stat().st_size for p in staging.glob("*.deb"))
        seconds = round(time.monotonic() - t0, 1)
        new_stamp = {"version": MIRROR_VERSION, "release": release, "packages": sorted(MIRROR_PACKAGES),
                     "images": sorted(done_images | set(images)), "debs": count, "bytes": size,
                     "seconds": seconds, "built": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (staging / STAMP).write_text(json.dumps(new_stamp, indent=1) + "\n")
        old = root / f".{release}.old-{os.getpid()}"
        if final.exists():
            os.rename(final, old)
        os.rename(staging, final)
        shutil.rmtree(old, ignore_errors=True)
        log(f"mirror {release}: {count} packages, {size / 1e6:.0f} MB, built in {seconds:.0f} s")
        return new_stamp


# ---------------------------------------------------------------- the server in the lab

def mirror_address(k: int) -> str:
    return f"10.89.{k}.2"


def mirror_url(k: int) -> str:
    return f"http://{mirror_address(k)}:{MIRROR_PORT}"


def container_name(lab: str) -> str:
    return f"{lab}-mirror"


def find(containers: list[dict]) -> dict | None:
    return next((c for c in containers if (c.get("Labels") or {}).get(LABEL_ROLE) == MIRROR_ROLE), None)


def serve(lab: str, k: int, image: str, *, existing: dict | None, log=print) -> str:
    """Run (or keep) the lab's mirror server: python3's http.server in a container of a lab image,
    the cache mounted read-only, on the lab network only, at a fixed address."""
    from . import node_mac

    name = container_name(lab)
    url = mirror_url(k)
    if existing is not None:
        labels = existing.get("Labels") or {}
        if labels.get(LABEL_MIRROR_URL) == url and existing.get("State") == "running":
            return url
        podman("rm", "-f", "-t", "0", name, check=False)
    address = mirror_address(k)
    podman("run", "-d", "--init", "--name", name, "--hostname", "mirror",
           "--label", f"{LABEL}={lab}", "--label", f"{LABEL_ROLE}={MIRROR_ROLE}",
           "--label", f"{LABEL_MIRROR_URL}={url}",
           "--network", f"{lab}:ip={address},mac={node_mac(address)},interface_name=eth0",
           "--no-hosts", "--dns", "none", "-v", f"{mirror_root()}:/srv/mirror:ro",
           image, "python3", "-m", "http.server", str(MIRROR_PORT), "--bind", address,
           "--directory", "/srv/mirror")
    wait_serving(url)
    log(f"package mirror: {url}/<release>/ (flat: deb [trusted=yes] {url}/<release> ./)")
    return url


def wait_serving(url: str, *, timeout: float = 30) -> None:
    """Until the server answers (the controller reaches the lab network through its bridge)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    why = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (OSError, urllib.error.URLError) as exc:
            why = str(exc)
        time.sleep(0.2)
    raise LabError(f"the lab's package mirror at {url} does not answer after {timeout:.0f} s ({why}); "
                   f"see `podman logs` of the lab's -mirror container")


def summary(releases: list[str]) -> dict[str, dict]:
    out = {}
    for release in releases:
        stamp = read_stamp(release) or {}
        out[release] = {k: stamp.get(k) for k in ("debs", "bytes", "seconds", "built")}
    return out
