"""A local multi-node lab: podman containers on an --internal network stand in for nodes.

Every node starts "bare", like the seeds' fresh machines: openssh-server installed but not
running, no keys, no venv, no environment settings, no systemd (catatonit is PID 1).

Layout of a lab called NAME with N nodes:
- network NAME (internal, 10.89.K.0/24): the cluster network, node i at 10.89.K.(10+i).
- network NAME-sideI per node (internal, a /28 of its own: 10.(90+I//16).K.(16*(I%16))/28, node
  at .2 of it; nodes 1-15 in 10.90.K.0/24, 16-31 in 10.91.K.0/24, ... up to MAX_NODES): a second
  interface that reaches nothing but the node itself, attached FIRST so that it is eth0 (the
  interface a naive NCCL or a guessed NCCL_SOCKET_IFNAME would take) while the cluster network
  is eth1.
- containers NAME-node1..N, hostnames node1..N, labelled provision.lab=NAME.

Podman is the only thing we drive; the Ansible inventory plugin provision.cluster.lab reads
the same labels, so `ansible-playbook site.yml -i inventory/lab/` works for any N.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from provision.paths import cache_dir

LABEL = "provision.lab"
LABEL_INDEX = "provision.lab.index"
LABEL_RECIPE = "provision.recipe"
LABEL_ADDRESS = "provision.lab.address"
LABEL_SIDE = "provision.lab.side_address"
DEFAULT_NAME = "provlab"
DEFAULT_NODES = 2
# 64: the side networks of one lab fill 10.90.K.0/24 .. 10.94.K.0/24 (16 per /24); the cluster
# network has room for 244. Memory is the real limit: an idle node is ~10 MB, a provisioned one
# running the smoke test a few hundred.
MAX_NODES = 64
_SIDE_FIRST_OCTET = 90
_OUR_SECOND_OCTETS = {str(o) for o in range(89, _SIDE_FIRST_OCTET + MAX_NODES // 16 + 1)}
SUITE = "bookworm"
RECIPE_VERSION = 3

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
}

CONTAINERS_CONF = """\
# written by `provision lab` (see README: the lab)
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""

HOST_PACKAGES = {"podman": "podman", "runc": "runc", "debootstrap": "debootstrap"}


class LabError(RuntimeError):
    """A lab operation failed; the message is one line naming the problem and the fix."""


@dataclass
class Node:
    name: str
    container: str
    index: int
    address: str
    side_address: str
    state: str = "missing"
    addresses: dict[str, str] = field(default_factory=dict)


@dataclass
class LabSpec:
    name: str = DEFAULT_NAME
    nodes: int = DEFAULT_NODES
    flavour: str = "full"
    shm_size: str = "1g"
    # per-node overrides, index (1-based) -> podman run options, e.g. {2: ["--ulimit", "memlock=64:64"]}
    node_options: dict[int, list[str]] = field(default_factory=dict)
    password: str | None = None  # enables root password login in sshd (bootstrap tests)


# ---------------------------------------------------------------- subprocess helpers

def _run(argv: list[str], *, check: bool = True, input_text: str | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, input=input_text,
                              timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise LabError(f"{argv[0]} is not installed: run `provision lab setup`") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"`{' '.join(argv[:4])} ...` did not finish within {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise LabError(f"`{' '.join(argv[:5])}` failed: {err[-1] if err else proc.returncode}")
    return proc


def podman(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    return _run(["podman", *args], check=check, timeout=timeout)


# ---------------------------------------------------------------- host prerequisites

def missing_host_tools() -> list[str]:
    return [pkg for tool, pkg in HOST_PACKAGES.items() if shutil.which(tool) is None
            and not Path(f"/usr/sbin/{tool}").exists()]


def setup_host(*, install: bool = True, conf_path: Path = Path("/etc/containers/containers.conf"),
               log=print) -> list[str]:
    """Install podman/runc/debootstrap and the containers.conf the lab needs.

    Returns what was done. Raises LabError with the exact command when it cannot do it.
    """
    done: list[str] = []
    missing = missing_host_tools()
    if missing:
        cmd = "apt-get update && apt-get install -y " + " ".join(missing)
        if not install or os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise LabError(f"missing on this machine: {', '.join(missing)}; install them: {cmd}")
        log(f"installing {' '.join(missing)} (apt-get)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0:
                raise LabError(f"`{' '.join(argv)}` failed: {proc.stderr.strip()[-300:]}")
        done.append("installed " + " ".join(missing))
    if not _containers_conf_ok(conf_path):
        if os.geteuid() != 0:
            raise LabError(f"{conf_path} lacks the lab settings (runtime runc, cgroupfs, "
                           "nofile 16384); run `sudo provision lab setup`")
        conf_path.parent.mkdir(parents=True, exist_ok=True)
        if conf_path.exists():
            backup = conf_path.with_suffix(".conf.provision-backup")
            if not backup.exists():
                shutil.copy2(conf_path, backup)
                done.append(f"saved {conf_path} as {backup}")
        tmp = conf_path.with_name(conf_path.name + ".tmp")
        tmp.write_text(CONTAINERS_CONF)
        os.replace(tmp, conf_path)
        done.append(f"wrote {conf_path}")
    return done


def _containers_conf_ok(path: Path) -> bool:
    try:
        text = path.read_text()
    except OSError:
        return False
    return 'runtime = "runc"' in text and "nofile=16384" in text and "cgroupfs" in text


# ---------------------------------------------------------------- image

def recipe(flavour: str) -> dict:
    if flavour not in FLAVOURS:
        raise LabError(f"unknown image flavour {flavour!r}; choose one of {', '.join(FLAVOURS)}")
    return {"version": RECIPE_VERSION, "suite": SUITE, "packages": sorted(FLAVOURS[flavour])}


def image_tag(flavour: str) -> str:
    digest = hashlib.sha256(json.dumps(recipe(flavour), sort_keys=True).encode()).hexdigest()[:12]
    return f"localhost/provision-node:{flavour}-{digest}"


def image_exists(tag: str) -> bool:
    return podman("image", "exists", tag, check=False).returncode == 0


def _debian_mirror() -> str:
    return os.environ.get("PROVISION_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def build_image(flavour: str = "full", *, log=print, force: bool = False) -> str:
    """Build the node image once with debootstrap; reuse it while the recipe is unchanged."""
    tag = image_tag(flavour)
    if image_exists(tag) and not force:
        return tag
    if shutil.which("debootstrap") is None and not Path("/usr/sbin/debootstrap").exists():
        raise LabError("debootstrap is missing; run `provision lab setup`")
    rec = recipe(flavour)
    t0 = time.monotonic()
    log(f"building node image {tag} with debootstrap (once; about a minute)")
    work = Path(tempfile.mkdtemp(prefix="provision-rootfs-", dir=str(cache_dir())))
    rootfs = work / "rootfs"
    try:
        _run(["debootstrap", "--variant=minbase", "--include=" + ",".join(rec["packages"]),
              SUITE, str(rootfs), _debian_mirror()], timeout=1800)
        _prepare_rootfs(rootfs)
        tar = subprocess.Popen(
            ["tar", "-C", str(rootfs), "--exclude=./var/cache/apt/archives/*.deb",
             "--exclude=./var/lib/apt/lists/*_*", "--exclude=./etc/ssh/ssh_host_*", "-c", "."],
            stdout=subprocess.PIPE)
        imp = subprocess.run(
            ["podman", "import", "--change", f"LABEL {LABEL_RECIPE}={tag}",
             "--change", 'CMD ["sleep", "infinity"]', "-", tag],
            stdin=tar.stdout, capture_output=True, text=True, check=False)
        tar.stdout.close()
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise LabError(f"podman import failed: {imp.stderr.strip()[-300:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"built {tag} in {time.monotonic() - t0:.0f} s")
    return tag


def _prepare_rootfs(rootfs: Path) -> None:
    """Make the image look like a fresh node: no host keys, sshd not running, no systemd."""
    for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (rootfs / "etc/hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    # policy-rc.d: no service starts inside the image build or later by dpkg triggers
    prc = rootfs / "usr/sbin/policy-rc.d"
    prc.write_text("#!/bin/sh\nexit 101\n")
    prc.chmod(0o755)
    # apt: no registry is reachable from the lab network; keep apt quiet and fast about it
    (rootfs / "etc/apt/apt.conf.d/99provision-lab").write_text(
        'Acquire::Retries "0";\nAcquire::http::Timeout "5";\n')


# ---------------------------------------------------------------- lab state

def _preferred_index(name: str) -> int:
    if name == DEFAULT_NAME:
        return 77
    return 100 + int(hashlib.sha256(name.encode()).hexdigest(), 16) % 150


def _networks() -> list[dict]:
    return json.loads(podman("network", "ls", "--format", "json").stdout or "[]")


def subnet_index(name: str) -> int:
    """The /24 index K of this lab (10.89.K.0/24 cluster, 10.90.K.x/28 side networks).

    A lab keeps the index its cluster network has; a new lab takes its preferred index (a hash
    of the name) or the next one no other podman network uses, so several labs coexist.
    """
    nets = _networks()
    used = set()
    for net in nets:
        for sub in net.get("subnets") or []:
            parts = str(sub.get("subnet", "")).split(".")
            if len(parts) == 4 and parts[0] == "10" and parts[1] in _OUR_SECOND_OCTETS:
                if net.get("name") == name and parts[1] == "89":
                    return int(parts[2])
                used.add(int(parts[2]))
    k = _preferred_index(name)
    for _ in range(250):
        if k not in used:
            return k
        k = 2 + (k - 1) % 253
    raise LabError("no free 10.89.K.0/24 subnet for a new lab; remove old labs with `provision lab down --name ...`")


def side_subnet(k: int, index: int) -> str:
    """Node INDEX's side network: a /28 of its own, 16 of them per 10.(90+n).K.0/24."""
    return f"10.{_SIDE_FIRST_OCTET + index // 16}.{k}.{16 * (index % 16)}/28"


def node_addresses(k: int, index: int) -> tuple[str, str]:
    """(cluster address, side address) of node INDEX in the lab with subnet index K."""
    if not 1 <= index <= MAX_NODES:
        raise LabError(f"node index {index} is outside 1..{MAX_NODES}")
    side = ipaddress.ip_network(side_subnet(k, index))
    return f"10.89.{k}.{10 + index}", str(side.network_address + 2)


def list_containers(name: str) -> list[dict]:
    proc = podman("ps", "-a", "--filter", f"label={LABEL}={name}", "--format", "json")
    return json.loads(proc.stdout or "[]")


def list_networks(name: str) -> list[str]:
    proc = podman("network", "ls", "--filter", f"label={LABEL}={name}", "--format", "{{.Name}}")
    return [line for line in proc.stdout.split() if line]


def status(name: str = DEFAULT_NAME) -> dict:
    nodes = []
    for c in list_containers(name):
        labels = c.get("Labels") or {}
        idx = int(labels.get(LABEL_INDEX, "0"))
        addr, side = labels.get(LABEL_ADDRESS, ""), labels.get(LABEL_SIDE, "")
        nodes.append(Node(name=f"node{idx}", container=c["Names"][0], index=idx, address=addr,
                          side_address=side, state=c.get("State", "unknown"),
                          addresses={name: addr, f"{name}-side{idx}": side}))
    nodes.sort(key=lambda n: n.index)
    return {"lab": name, "networks": list_networks(name), "nodes": [asdict(n) for n in nodes],
            "up": bool(nodes) and all(n.state == "running" for n in nodes)}


# ---------------------------------------------------------------- up / down

def _ensure_network(net: str, subnet: str, lab: str) -> None:
    if podman("network", "exists", net, check=False).returncode == 0:
        return
    podman("network", "create", "--internal", "--subnet", subnet, "--label", f"{LABEL}={lab}", net)


_SSHD_PASSWORD_SETUP = (
    "set -e; chpasswd; "
    "printf 'PermitRootLogin yes\\nPasswordAuthentication yes\\nKbdInteractiveAuthentication no\\n' "
    "> /etc/ssh/sshd_config.d/00-lab-password.conf; ssh-keygen -A >/dev/null; mkdir -p /run/sshd; "
    "/usr/sbin/sshd -p 2222")


def _plan(spec: LabSpec, k: int) -> list[tuple[int, str, str, str, str]]:
    """(index, container, cluster address, side network, side subnet) of every node, checked
    before anything starts: a lab that cannot be addressed fails here, with nothing started."""
    cluster = ipaddress.ip_network(f"10.89.{k}.0/24")
    plan = []
    for idx in range(1, spec.nodes + 1):
        addr, side = node_addresses(k, idx)
        subnet = side_subnet(k, idx)
        if ipaddress.ip_address(addr) not in cluster or ipaddress.ip_address(side) not in ipaddress.ip_network(subnet):
            raise LabError(f"node{idx}: no address for it in lab {spec.name}; use --nodes {MAX_NODES} or fewer")
        plan.append((idx, f"{spec.name}-node{idx}", addr, f"{spec.name}-side{idx}", subnet))
    return plan


def up(spec: LabSpec, *, log=print, setup: bool = True) -> dict:
    """Bring the lab to spec. Idempotent: running nodes of the right image are kept.

    Every node's addresses are computed and checked before anything starts; if starting a node
    fails anyway, the nodes and networks this call created are removed again (nodes that were
    there before are left as they were) and the error says so.
    """
    if not 1 <= spec.nodes <= MAX_NODES:
        raise LabError(f"--nodes must be between 1 and {MAX_NODES}, got {spec.nodes}")
    if setup:
        for line in setup_host(log=log):
            log(line)
    tag = build_image(spec.flavour, log=log)
    k = subnet_index(spec.name)
    plan = _plan(spec, k)
    _ensure_network(spec.name, f"10.89.{k}.0/24", spec.name)
    existing = {int((c.get("Labels") or {}).get(LABEL_INDEX, "0")): c for c in list_containers(spec.name)}
    # nodes beyond the requested count go away (lab up --nodes 2 after --nodes 8)
    for idx, c in sorted(existing.items()):
        if idx > spec.nodes:
            _remove_node(spec.name, idx, c["Names"][0], log=log)
    started: list[str] = []
    created: list[tuple[int, str]] = []
    try:
        for idx, cname, addr, side_net, subnet in plan:
            side = node_addresses(k, idx)[1]
            c = existing.get(idx)
            if c is not None:
                same_image = (c.get("Labels") or {}).get(LABEL_RECIPE) == tag
                if same_image and c.get("State") == "running":
                    continue
                if same_image:
                    podman("start", cname)
                    started.append(cname)
                    continue
                log(f"{cname}: image changed, re-creating")
                podman("rm", "-f", "-t", "0", cname)
            if podman("network", "exists", side_net, check=False).returncode != 0:
                _ensure_network(side_net, subnet, spec.name)
            created.append((idx, cname))
            argv = [
                "run", "-d", "--init", "--name", cname, "--hostname", f"node{idx}",
                "--label", f"{LABEL}={spec.name}", "--label", f"{LABEL_INDEX}={idx}",
                "--label", f"{LABEL_RECIPE}={tag}",
                "--label", f"{LABEL_ADDRESS}={addr}", "--label", f"{LABEL_SIDE}={side}",
                # the side network is eth0, the cluster network eth1 (named: podman attaches the
                # networks in no fixed order)
                "--network", f"{side_net}:ip={side},interface_name=eth0",
                "--network", f"{spec.name}:ip={addr},interface_name=eth1",
                "--no-hosts", "--shm-size", spec.shm_size,
                "--cap-add", "AUDIT_WRITE", "--cap-add", "SYS_CHROOT", "--cap-add", "NET_RAW",
                "--cap-add", "SYS_PTRACE",
                *spec.node_options.get(idx, []),
                tag, "sleep", "infinity",
            ]
            podman(*argv)
            started.append(cname)
            if spec.password:
                # the password goes through stdin: never on a command line
                _run(["podman", "exec", "-i", cname, "sh", "-c", _SSHD_PASSWORD_SETUP],
                     input_text=f"root:{spec.password}\n")
    except LabError as exc:
        for idx, cname in created:
            _remove_node(spec.name, idx, cname, log=lambda _m: None)
        undo = f"; removed the {len(created)} node(s) this run had created" if created else ""
        raise LabError(f"{exc}{undo}") from exc
    if started:
        log(f"started {', '.join(started)}")
    return status(spec.name)


def _remove_node(lab: str, idx: int, cname: str, *, log=print) -> None:
    podman("rm", "-f", "-t", "0", cname, check=False)
    podman("network", "rm", "-f", f"{lab}-side{idx}", check=False)
    log(f"removed {cname}")


def down(name: str = DEFAULT_NAME, *, log=print) -> dict:
    """Remove every container and network this lab made, and nothing else."""
    removed = {"containers": [], "networks": []}
    containers = [c["Names"][0] for c in list_containers(name)]
    if containers:
        podman("rm", "-f", "-t", "0", *containers)
        removed["containers"] = containers
    for net in list_networks(name):
        podman("network", "rm", "-f", net, check=False)
        removed["networks"].append(net)
    for line in (f"removed {len(containers)} container(s)", ):
        log(line)
    known = cache_dir() / "labs" / name
    shutil.rmtree(known, ignore_errors=True)
    return removed


def lab_state_dir(name: str) -> Path:
    """Per-lab controller-side state (known_hosts of the nodes)."""
    path = cache_dir() / "labs" / name
    path.mkdir(parents=True, exist_ok=True)
    return path
