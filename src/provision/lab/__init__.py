"""A local multi-node lab: podman containers on an --internal network stand in for nodes.

Every node starts "bare", like the seeds' fresh machines: openssh-server installed but not
running, no keys, no venv, no environment settings, no systemd (catatonit is PID 1). Options
give nodes like users' machines (images.py): another Debian release per node (`--os`), systemd
as PID 1 with sshd on port 22 (`--init systemd`), and only what a fresh minimal server image has
(`--image bare`).

Layout of a lab called NAME with N nodes:
- network NAME (internal, 10.89.K.0/24): the cluster network, node i at 10.89.K.(10+i).
- network NAME-sideI per node (internal, a /28 of its own: 10.(90+I//16).K.(16*(I%16))/28, node
  at .2 of it; nodes 1-15 in 10.90.K.0/24, 16-31 in 10.91.K.0/24, ... up to MAX_NODES): a second
  interface that reaches nothing but the node itself, attached FIRST so that it is eth0 (the
  interface a naive NCCL or a guessed NCCL_SOCKET_IFNAME would take) while the cluster network
  is eth1.
- containers NAME-node1..N, hostnames node1..N, labelled provision.lab=NAME (and with their
  index, addresses, release, init and flavour: the inventory plugin reads them).

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
from dataclasses import asdict, dataclass, field
from pathlib import Path

from provision.paths import cache_dir

from ._base import (LABEL, LABEL_ADDRESS, LABEL_FLAVOUR, LABEL_INDEX, LABEL_INIT, LABEL_OS, LABEL_RECIPE,
                    LABEL_ROLE, LABEL_RUN, LABEL_SIDE, LABEL_SNAPSHOT, NAME_RULE, LabError, _run, check_name,
                    machine_lock, podman)
from . import faults as faults_mod
from . import login as login_mod
from . import mirror as mirror_mod
from . import slurm as slurm_mod
from .images import (FLAVOURS, INITS, RECIPE_VERSION, RELEASES, SUITE, build_image, check_image_args,
                     image_exists, image_tag, recipe)

__all__ = [
    "LABEL", "LABEL_ADDRESS", "LABEL_FLAVOUR", "LABEL_INDEX", "LABEL_INIT", "LABEL_OS", "LABEL_RECIPE",
    "LABEL_ROLE", "LABEL_SIDE", "FLAVOURS", "INITS", "NAME_RULE", "RECIPE_VERSION", "RELEASES", "SUITE", "LabError",
    "LabSpec", "Node", "build_image", "check_image_args", "check_name", "down", "image_exists", "image_tag", "podman",
    "fault", "recipe", "setup_host", "status", "up", "wait_booted",
]

DEFAULT_NAME = "provlab"
DEFAULT_NODES = 2
# 64: the side networks of one lab fill 10.90.K.0/24 .. 10.94.K.0/24 (16 per /24); the cluster
# network has room for 244. Memory is the real limit: an idle node is ~10 MB, a provisioned one
# running the smoke test a few hundred.
MAX_NODES = 64
_SIDE_FIRST_OCTET = 90
_OUR_SECOND_OCTETS = {str(o) for o in range(89, _SIDE_FIRST_OCTET + MAX_NODES // 16 + 1)}

CONTAINERS_CONF = """\
# written by `provision lab` (see docs/lab.md)
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""

HOST_PACKAGES = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap"}


@dataclass
class Node:
    name: str
    container: str
    index: int
    address: str
    side_address: str
    state: str = "missing"
    addresses: dict[str, str] = field(default_factory=dict)
    os: str = SUITE
    init: str = "none"
    flavour: str = "full"
    bare: bool = False
    faults: dict = field(default_factory=dict)


@dataclass
class LabSpec:
    name: str = DEFAULT_NAME
    nodes: int = DEFAULT_NODES
    flavour: str = "full"  # full, minimal or bare
    shm_size: str = "1g"
    # per-node overrides, index (1-based) -> podman run options, e.g. {2: ["--ulimit", "memlock=64:64"]}
    node_options: dict[int, list[str]] = field(default_factory=dict)
    password: str | None = None  # enables root password login in sshd (bootstrap tests)
    # one release for every node, or one per node (node i gets os[i-1])
    os: tuple[str, ...] = (SUITE,)
    init: str = "none"  # none (catatonit, no sshd running) or systemd (PID 1, sshd on 22)
    # serve the package mirror in the lab (always when the nodes are bare, or with SLURM)
    mirror: bool = False
    # a real SLURM: slurmctld on node1, slurmd everywhere (packages from the mirror)
    slurm: bool = False
    # restoring a snapshot (snapshot.py): the image of each node (index -> tag), the snapshot's name,
    # and the /24 index its nodes' files were written for (addresses are in /etc/hosts, known_hosts...)
    images: dict[int, str] = field(default_factory=dict)
    snapshot: str | None = None
    subnet: int | None = None
    # how the lab is logged into (login.py): root (the controller as root, podman then ssh), or an admin
    # with sudo (sudo, sudo-password: the admin's password, for sudo); a bastion in front of the nodes
    login: str = "root"
    sudo_password: str | None = field(default=None, repr=False)
    bastion: bool = False

    def wants_mirror(self) -> bool:
        return self.mirror or self.slurm or self.flavour == "bare"

    def release(self, idx: int) -> str:
        return self.os[0] if len(self.os) == 1 else self.os[idx - 1]

    def check(self) -> None:
        """Everything that can be wrong with the spec, before anything starts."""
        check_name(self.name)
        if not 1 <= self.nodes <= MAX_NODES:
            raise LabError(f"--nodes must be between 1 and {MAX_NODES}, got {self.nodes}")
        if len(self.os) not in (1, self.nodes):
            raise LabError(f"--os names {len(self.os)} releases for {self.nodes} nodes; give one release "
                           f"for all nodes or one per node (e.g. --nodes 3 --os bullseye,bookworm,trixie)")
        for release in self.os:
            check_image_args(self.flavour, release, self.init)
        # a restore brings the nodes as they were made (their password included): none is asked for
        restored = self.snapshot and self.login == "sudo-password"
        login_mod.check(self.login, self.sudo_password or ("(in the snapshot)" if restored else None), self.bastion,
                        self.flavour)


# ---------------------------------------------------------------- host prerequisites

def missing_host_tools() -> list[str]:
    return [pkg for tool, pkg in HOST_PACKAGES.items() if shutil.which(tool) is None
            and not Path(f"/usr/sbin/{tool}").exists()]


def setup_host(*, install: bool = True, conf_path: Path = Path("/etc/containers/containers.conf"),
               log=print) -> list[str]:
    """Install podman/runc/mmdebstrap and the containers.conf the lab needs.

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
    done += _ensure_sysctls()
    return done


# Raised, never lowered:
# - each systemd node holds a few inotify instances; the usual default of 128 per user stops the
#   25th or so systemd node from booting (its path units fail, then it hangs);
# - the kernel's neighbour (ARP/ND) table is one for every network namespace of the machine, and a
#   lab of N nodes that all talk to each other holds N x N entries (32 nodes: 1,024, the default hard
#   limit gc_thresh3): past it the kernel logs "neighbor table overflow!" and drops the packets that
#   wait for an entry, which on a 32-node lab failed TCP connects between pairs of nodes for seconds
#   (the NCCL reach probe, ssh). 16,384 holds a 64-node lab and a few small ones beside it.
SYSCTLS = {"fs.inotify.max_user_instances": 8192, "fs.inotify.max_user_watches": 524288,
           "net.ipv4.neigh.default.gc_thresh2": 8192, "net.ipv4.neigh.default.gc_thresh3": 16384,
           "net.ipv6.neigh.default.gc_thresh2": 8192, "net.ipv6.neigh.default.gc_thresh3": 16384}
SYSCTL_FILE = Path("/etc/sysctl.d/90-provision-lab.conf")


def _ensure_sysctls(proc_sys: Path = Path("/proc/sys"), conf: Path | None = None) -> list[str]:
    conf = conf or SYSCTL_FILE
    low, keep = {}, {}
    for key, want in SYSCTLS.items():
        try:
            have = int((proc_sys / key.replace(".", "/")).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # not on this kernel (no IPv6)
        keep[key] = max(have, want)
        if have < want:
            low[key] = (have, want)
    if not low:
        return []
    if os.geteuid() != 0:
        now = ", ".join(f"{k} is {h}" for k, (h, _w) in low.items())
        fix = "run `sudo provision lab setup` (or sysctl -w " + " ".join(f"{k}={w}" for k, (_h, w) in low.items()) + ")"
        if any(k.startswith("fs.inotify.") for k in low):
            raise LabError(f"{now}: too low for the lab's systemd nodes; {fix}")
        # the neighbour table matters from ~30 nodes on: a warning, not a refusal, for a user's small lab
        return [f"{now}: labs of ~30 nodes and more lose packets (the kernel's neighbour table is full); {fix}"]
    done = []
    for key, (have, want) in low.items():
        try:
            (proc_sys / key.replace(".", "/")).write_text(f"{want}\n")
            done.append(f"raised {key} from {have} to {want}")
        except OSError as exc:  # a read-only /proc/sys (this "machine" is itself a container): say it, go on
            keep[key] = have
            done.append(f"could not raise {key} from {have} to {want} ({exc.strerror or exc}); "
                        f"labs of many nodes may fail: sysctl -w {key}={want} on the host")
    try:
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text("# written by `provision lab setup`: many systemd containers need more inotify instances, and\n"
                        "# a lab of N nodes N x N entries in the kernel's neighbour table (one for all namespaces)\n"
                        + "".join(f"{k} = {w}\n" for k, w in keep.items()))
    except OSError:
        pass  # applied now; only not kept across a reboot of this machine
    return done


def _containers_conf_ok(path: Path) -> bool:
    try:
        text = path.read_text()
    except OSError:
        return False
    return 'runtime = "runc"' in text and "nofile=16384" in text and "cgroupfs" in text


# ---------------------------------------------------------------- lab state

def _preferred_index(name: str) -> int:
    if name == DEFAULT_NAME:
        return 77
    return 100 + int(hashlib.sha256(name.encode()).hexdigest(), 16) % 150


def _networks() -> list[dict]:
    return json.loads(podman("network", "ls", "--format", "json").stdout or "[]")


def subnet_index(name: str, want: int | None = None) -> int:
    """The /24 index K of this lab (10.89.K.0/24 cluster, 10.90.K.x/28 side networks).

    A lab keeps the index its cluster network has; a new lab takes its preferred index (a hash
    of the name) or the next one no other podman network uses, so several labs coexist. WANT: the
    index a snapshot's nodes were made for; it must be free (or this lab's already).
    """
    nets = _networks()
    used: dict[int, str] = {}
    for net in nets:
        for sub in net.get("subnets") or []:
            parts = str(sub.get("subnet", "")).split(".")
            if len(parts) == 4 and parts[0] == "10" and parts[1] in _OUR_SECOND_OCTETS:
                if net.get("name") == name and parts[1] == "89" and want in (None, int(parts[2])):
                    return int(parts[2])
                used.setdefault(int(parts[2]), str(net.get("name")))
    if want is not None:
        if want in used:
            raise LabError(f"the snapshot's nodes live in 10.89.{want}.0/24, which network {used[want]} uses; "
                           f"remove that lab first (`provision lab down --name <lab>`)")
        return want
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


def node_mac(address: str) -> str:
    """A fixed, locally administered unicast MAC for an interface: 02:00 and the IPv4 address
    (unique per lab network, since the addresses are)."""
    return "02:00:" + ":".join(f"{int(o):02x}" for o in address.split("."))


def list_containers(name: str) -> list[dict]:
    proc = podman("ps", "-a", "--filter", f"label={LABEL}={name}", "--format", "json")
    return json.loads(proc.stdout or "[]")


def list_networks(name: str) -> list[str]:
    proc = podman("network", "ls", "--filter", f"label={LABEL}={name}", "--format", "{{.Name}}")
    return [line for line in proc.stdout.split() if line]


def node_kind(labels: dict) -> dict:
    """A node's release, init and flavour from its labels (nodes made before they were
    labelled are today's bookworm nodes without init; the flavour is in their image tag)."""
    flavour = labels.get(LABEL_FLAVOUR)
    if not flavour:
        tail = labels.get(LABEL_RECIPE, "").rpartition(":")[2]
        flavour = tail.split("-", 1)[0] if tail.split("-", 1)[0] in FLAVOURS else "full"
    return {"os": labels.get(LABEL_OS) or SUITE, "init": labels.get(LABEL_INIT) or "none",
            "flavour": flavour, "bare": flavour == "bare"}


def _nodes_of(containers: list[dict]) -> list[dict]:
    """The lab's node containers (not its mirror or other helpers)."""
    return [c for c in containers if not (c.get("Labels") or {}).get(LABEL_ROLE)]


def status(name: str = DEFAULT_NAME) -> dict:
    check_name(name)
    nodes = []
    containers = list_containers(name)
    active = faults_mod.active(name, _nodes_of(containers))
    for c in _nodes_of(containers):
        labels = c.get("Labels") or {}
        idx = int(labels.get(LABEL_INDEX, "0"))
        addr, side = labels.get(LABEL_ADDRESS, ""), labels.get(LABEL_SIDE, "")
        nodes.append(Node(name=f"node{idx}", container=c["Names"][0], index=idx, address=addr,
                          side_address=side, state=c.get("State", "unknown"),
                          addresses={name: addr, f"{name}-side{idx}": side}, **node_kind(labels),
                          faults=active.get(f"node{idx}", {})))
    nodes.sort(key=lambda n: n.index)
    doc = {"lab": name, "networks": list_networks(name), "nodes": [asdict(n) for n in nodes],
           "up": bool(nodes) and all(n.state == "running" for n in nodes)}
    logins = {(c.get("Labels") or {}).get(login_mod.LABEL_LOGIN, "root") for c in _nodes_of(containers)}
    if logins and logins != {"root"}:
        state_dir = cache_dir() / "labs" / name
        doc["login"] = {"login": sorted(logins)[0], "admin": login_mod.ADMIN, "trainer": login_mod.TRAINER,
                        "key": str(state_dir / login_mod.KEY_NAME), "known_hosts": str(state_dir / "known_hosts")}
        bastion = next((c for c in containers if (c.get("Labels") or {}).get(LABEL_ROLE) == login_mod.BASTION_ROLE), None)
        if bastion is not None:
            doc["login"]["bastion"] = {"container": bastion["Names"][0], "state": bastion.get("State", "unknown"),
                                       "address": (bastion.get("Labels") or {}).get(LABEL_ADDRESS, "")}
    slurm_state = cache_dir() / "labs" / name / "slurm.json"
    if nodes and slurm_state.is_file():
        doc["slurm"] = json.loads(slurm_state.read_text())
    server = mirror_mod.find(containers)
    if server is not None:
        doc["mirror"] = {"url": (server.get("Labels") or {}).get(mirror_mod.LABEL_MIRROR_URL, ""),
                         "layout": "flat", "container": server["Names"][0], "state": server.get("State", "unknown"),
                         "releases": mirror_mod.summary(sorted({n.os for n in nodes}))}
    return doc


# ---------------------------------------------------------------- up / down

def _ensure_network(net: str, subnet: str, lab: str) -> None:
    if podman("network", "exists", net, check=False).returncode == 0:
        return
    # --internal: no route out of the lab. Its DNS stays on: netavark gives an internal network's bridge
    # the gateway address (through which this machine reaches the nodes) only for its name server. The
    # nodes do not use that server (`--dns none` in _run_argv): it would forward what it cannot answer
    # to this machine's resolver, out of the lab.
    podman("network", "create", "--internal", "--subnet", subnet, "--label", f"{LABEL}={lab}", net)


_SSHD_PASSWORD_SETUP = (
    "set -e; chpasswd; "
    "printf 'PermitRootLogin yes\\nPasswordAuthentication yes\\nKbdInteractiveAuthentication no\\n' "
    "> /etc/ssh/sshd_config.d/00-lab-password.conf; ssh-keygen -A >/dev/null; mkdir -p /run/sshd; "
    "/usr/sbin/sshd -p %d")


def _cluster_ssh_port() -> int:
    """The sshd role's port (sshd_port's default, cluster_plan.DEFAULTS): where the lab inventory reaches
    a node over ssh."""
    from provision.ansible import collection_module

    return int(collection_module("common.cluster_plan").DEFAULT_SSH_PORT)


# systemd nodes: the VM's own sshd (port 22, run by systemd) takes the password login
_SSHD_PASSWORD_SETUP_SYSTEMD = (
    "set -e; chpasswd; "
    "printf 'PermitRootLogin yes\\nPasswordAuthentication yes\\nKbdInteractiveAuthentication no\\n' "
    "> /etc/ssh/sshd_config.d/00-lab-password.conf; systemctl reload-or-restart ssh.service")
BOOT_TIMEOUT = 180  # seconds a batch of systemd nodes may take to finish booting
BOOT_BATCH = 8


def host_routes(text: str) -> list[tuple[str, ipaddress.IPv4Network]]:
    """(interface, network) of every route in /proc/net/route text but the default one."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        dest, mask = (ipaddress.IPv4Address(int(x, 16).to_bytes(4, "little")) for x in (fields[1], fields[7]))
        if int(mask):
            out.append((fields[0], ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)))
    return out


def check_reachable(subnet: str, routes_text: str | None = None) -> None:
    """This machine reaches SUBNET through a lab bridge, not through its default route: a lab address
    sent out of the machine would be traffic to somebody else's network."""
    if routes_text is None:
        try:
            routes_text = Path("/proc/net/route").read_text()
        except OSError:
            return
    net = ipaddress.ip_network(subnet)
    if not any(net.subnet_of(route) for _iface, route in host_routes(routes_text)):
        raise LabError(f"this machine has no route to the lab network {subnet} (its bridge has no address): "
                       "lab traffic would leave through the default route; remove the lab "
                       "(`provision lab down`) and bring it up again")


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


def _run_options(spec: LabSpec, idx: int) -> dict:
    """What of a node's podman run options a snapshot must give it again (and how it is logged into)."""
    return {"shm_size": spec.shm_size, "node_options": spec.node_options.get(idx, []), "login": spec.login,
            "bastion": spec.bastion}


def _run_argv(spec: LabSpec, idx: int, cname: str, tag: str, addr: str, side: str, side_net: str) -> list[str]:
    release = spec.release(idx)
    if spec.init == "systemd":
        # systemd as PID 1 (podman mounts /run, /tmp and the cgroup tree as systemd needs them and
        # stops it with SIGRTMIN+3); no catatonit
        init_args, command = ["--systemd=always"], ["/sbin/init"]
    else:
        # catatonit as PID 1: stops take no 10 s and exited sshd children are reaped
        init_args, command = ["--init"], ["sleep", "infinity"]
    return [
        "run", "-d", *init_args, "--name", cname, "--hostname", f"node{idx}",
        "--label", f"{LABEL}={spec.name}", "--label", f"{LABEL_INDEX}={idx}",
        "--label", f"{LABEL_RECIPE}={tag}",
        "--label", f"{LABEL_ADDRESS}={addr}", "--label", f"{LABEL_SIDE}={side}",
        "--label", f"{LABEL_OS}={release}", "--label", f"{LABEL_INIT}={spec.init}",
        "--label", f"{LABEL_FLAVOUR}={spec.flavour}",
        "--label", f"{login_mod.LABEL_LOGIN}={spec.login}",
        "--label", f"{login_mod.LABEL_BASTION}={'1' if spec.bastion else '0'}",
        "--label", f"{LABEL_RUN}={json.dumps(_run_options(spec, idx), separators=(',', ':'))}",
        *(["--label", f"{LABEL_SNAPSHOT}={spec.snapshot}"] if spec.snapshot else []),
        # the side network is eth0, the cluster network eth1 (named: podman attaches the
        # networks in no fixed order); fixed MACs, as a machine's NICs keep theirs across reboots
        # (with podman's random ones, a restarted node was unreachable from the others for ~40 s,
        # until their ARP entries for the old MAC expired)
        "--network", f"{side_net}:ip={side},mac={node_mac(side)},interface_name=eth0",
        "--network", f"{spec.name}:ip={addr},mac={node_mac(addr)},interface_name=eth1",
        # names are the nodes' /etc/hosts (the ssh_mesh role's); no name server: nothing resolves out of the lab
        "--no-hosts", "--dns", "none", "--shm-size", spec.shm_size,
        "--cap-add", "AUDIT_WRITE", "--cap-add", "SYS_CHROOT", "--cap-add", "NET_RAW",
        "--cap-add", "SYS_PTRACE",
        *spec.node_options.get(idx, []),
        tag, *command,
    ]


def wait_booted(containers: list[str], *, timeout: float = BOOT_TIMEOUT, log=print) -> None:
    """Wait until systemd finished booting in each container (sshd on 22 is up then)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(cname: str) -> tuple[str, str]:
        # systemctl needs systemd's socket, which appears a moment after the container starts
        script = (f"i=0; while [ ! -S /run/systemd/private ] && [ $i -lt {int(timeout) * 5} ]; do sleep 0.2; i=$((i+1)); done; "
                  f"timeout {int(timeout)} systemctl is-system-running --wait")
        proc = podman("exec", cname, "sh", "-c", script, check=False, timeout=2 * timeout + 15)
        return cname, (proc.stdout.strip() or proc.stderr.strip() or "unknown").splitlines()[-1]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, containers))
    for cname, state in results:
        if state == "degraded":
            failed = podman("exec", cname, "systemctl", "--failed", "--plain", "--no-legend", check=False).stdout
            log(f"{cname}: systemd is degraded: {' '.join(line.split()[0] for line in failed.splitlines() if line.split())}")
        elif state != "running":
            raise LabError(f"{cname}: systemd did not finish booting within {timeout:.0f} s (state: {state}); "
                           f"see `podman exec {cname} systemctl list-jobs`")


def up(spec: LabSpec, *, log=print, setup: bool = True) -> dict:
    """Bring the lab to spec. Idempotent: running nodes of the right image are kept.

    Every node's addresses are computed and checked before anything starts; if starting a node
    fails anyway, the nodes and networks this call created are removed again (nodes that were
    there before are left as they were) and the error says so.
    """
    spec.check()
    if setup:
        for line in setup_host(log=log):
            log(line)
        from provision import deps  # the podman connection the lab inventory uses (`provision setup --lab`)

        for name in deps.ensure_collections(log=log, lab=True):
            log(f"installed the collection {name}")
    tags = {release: build_image(spec.flavour, release=release, init=spec.init, log=log)
            for release in dict.fromkeys(spec.os)}
    # the /24 is chosen and taken in one step: another lab (a test worker, a second checkout) may be
    # choosing one at the same moment
    with machine_lock("lab-networks", timeout=300, what="choosing a lab's network"):
        k = subnet_index(spec.name, spec.subnet)
        plan = _plan(spec, k)
        _ensure_network(spec.name, f"10.89.{k}.0/24", spec.name)
    containers = list_containers(spec.name)
    server = mirror_mod.find(containers)
    if spec.wants_mirror() or server is not None:
        build_mirrors(spec, tags, log=log)
    existing = {int((c.get("Labels") or {}).get(LABEL_INDEX, "0")): c for c in _nodes_of(containers)}
    # nodes beyond the requested count go away (lab up --nodes 2 after --nodes 8)
    for idx, c in sorted(existing.items()):
        if idx > spec.nodes:
            _remove_node(spec.name, idx, c["Names"][0], log=log)
    started: list[str] = []
    created: list[tuple[int, str]] = []
    booted = 0  # started systemd nodes known to have booted
    try:
        for idx, cname, addr, side_net, subnet in plan:
            side = node_addresses(k, idx)[1]
            tag = spec.images.get(idx) or tags[spec.release(idx)]
            c = existing.get(idx)
            if c is not None:
                labels = c.get("Labels") or {}
                same_image = labels.get(LABEL_RECIPE) == tag
                same_login = (labels.get(login_mod.LABEL_LOGIN, "root") == spec.login
                              and labels.get(login_mod.LABEL_BASTION, "0") == ("1" if spec.bastion else "0"))
                if same_image and same_login and c.get("State") == "running":
                    continue
                if same_image and same_login:
                    podman("start", cname)
                    started.append(cname)
                    continue
                log(f"{cname}: {'image' if not same_image else 'login'} changed, re-creating")
                podman("rm", "-f", "-t", "0", cname)
            if podman("network", "exists", side_net, check=False).returncode != 0:
                _ensure_network(side_net, subnet, spec.name)
            created.append((idx, cname))
            podman(*_run_argv(spec, idx, cname, tag, addr, side, side_net))
            started.append(cname)
            if spec.init == "systemd" and len(started) - booted >= BOOT_BATCH:
                # systemd nodes boot in batches: 32 at once on 2 busy cores (each makes its host
                # keys) took over 2 minutes for the last of them
                wait_booted(started[booted:], log=log)
                booted = len(started)
            if spec.password and spec.init != "systemd":
                # the password goes through stdin: never on a command line
                _run(["podman", "exec", "-i", cname, "sh", "-c", _SSHD_PASSWORD_SETUP % _cluster_ssh_port()],
                     input_text=f"root:{spec.password}\n")
        if spec.init == "systemd" and started[booted:]:
            wait_booted(started[booted:], log=log)
            for idx, cname in created:
                if spec.password:
                    _run(["podman", "exec", "-i", cname, "sh", "-c", _SSHD_PASSWORD_SETUP_SYSTEMD],
                         input_text=f"root:{spec.password}\n")
    except LabError as exc:
        for idx, cname in created:
            _remove_node(spec.name, idx, cname, log=lambda _m: None)
        undo = f"; removed the {len(created)} node(s) this run had created" if created else ""
        raise LabError(f"{exc}{undo}") from exc
    # the bridge has its address once a container is attached: before anything talks to the lab
    check_reachable(f"10.89.{k}.0/24")
    if spec.login != "root":
        _login_shape(spec, k, plan, tags, created, log=log)
    elif not spec.snapshot:
        # a machine-id for each new node without systemd (systemd makes its own): what tells a machine
        # from another one of the same name (the fact cache, playbooks/identity.yml)
        for _idx, cname in created:
            if spec.init != "systemd":
                podman("exec", cname, "sh", "-c", login_mod.MACHINE_ID, timeout=60)
    url = None
    if spec.wants_mirror() or server is not None:
        url = mirror_mod.serve(spec.name, k, tags[spec.release(1)], existing=server, log=log)
    if started:
        log(f"started {', '.join(started)}")
    if created and not spec.slurm:
        # new nodes have no SLURM: the lab's record of it no longer holds
        (cache_dir() / "labs" / spec.name / "slurm.json").unlink(missing_ok=True)
    if spec.slurm:
        nodes = [{"name": f"node{idx}", "container": cname, "address": addr, "os": spec.release(idx),
                  "init": spec.init} for idx, cname, addr, _net, _sub in plan]
        slurm_mod.setup(spec.name, nodes, url, lab_state_dir(spec.name), log=log)
    return status(spec.name)


def _login_shape(spec: LabSpec, k: int, plan: list, tags: dict[str, str], created: list[tuple[int, str]],
                 *, log=print) -> None:
    """The admin, the training user, sshd on 22 and the lab's key on new nodes (at their console: podman
    exec); the nodes' and the bastion's host keys in the lab's known_hosts; with a bastion, the nodes drop
    what this machine sends them directly."""
    state = lab_state_dir(spec.name)
    _key, public = login_mod.lab_key(state, spec.name)
    known = state / "known_hosts"
    fresh = {cname for _idx, cname in created}
    for idx, cname, addr, _net, _sub in plan:
        if cname in fresh and not spec.snapshot:
            login_mod.setup_machine(cname, spec.login, spec.init, public, spec.sudo_password)
        # sshd on 22 as a boot starts it (a restored node's daemons: the snapshot restarts them)
        keys = login_mod.boot_machine(cname, spec.init) if not spec.snapshot else login_mod.host_keys(cname)
        login_mod.record_host_keys(known, addr, keys)
    if spec.bastion:
        address, keys = login_mod.ensure_bastion(spec.name, k, tags[spec.release(1)], spec.init, public, log=log)
        login_mod.record_host_keys(known, address, keys)
        login_mod.write_ssh_config(state, spec.name, address)
        sources = login_mod.gateways([f"10.89.{k}.0/24"] + [sub for *_x, sub in plan])
        for _idx, cname, *_rest in plan:
            login_mod.drop_direct(cname, sources)
    log(f"login: {login_mod.ADMIN} with {spec.login}{' through the bastion' if spec.bastion else ''}; "
        f"training user {login_mod.TRAINER}; key and known_hosts in {state}")


def build_mirrors(spec: LabSpec, tags: dict[str, str], *, log=print) -> dict[str, dict]:
    """The package mirror of every release in the lab, relative to the image the lab's nodes of
    that release run (the bare image on a bare lab; see mirror.py). The cache of a release grows
    by what another image lacks when a lab of another flavour uses it."""
    return {release: mirror_mod.build(release, [tags[release]], log=log) for release in dict.fromkeys(spec.os)}


def _remove_node(lab: str, idx: int, cname: str, *, log=print) -> None:
    podman("rm", "-f", "-t", "0", cname, check=False)
    podman("network", "rm", "-f", f"{lab}-side{idx}", check=False)
    log(f"removed {cname}")


def down(name: str = DEFAULT_NAME, *, log=print) -> dict:
    """Remove every container and network this lab made, and nothing else."""
    check_name(name)  # the name is also a directory under ~/.cache/provision/labs/, removed below
    removed = {"containers": [], "networks": []}
    faults_mod.stop_all(name)
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
    path = cache_dir() / "labs" / check_name(name)
    path.mkdir(parents=True, exist_ok=True)
    return path


def fault(name: str, node: str, *, log=print, **kw) -> dict:
    """Apply or clear faults on one node of lab NAME (see faults.py); NODE is node2 or 2."""
    check_name(name)
    idx = node[4:] if node.startswith("node") else node
    if not idx.isdigit():
        raise LabError(f"{node!r} is not a node; name it as node2 or 2")
    containers = {int((c.get("Labels") or {}).get(LABEL_INDEX, "0")): c for c in _nodes_of(list_containers(name))}
    c = containers.get(int(idx))
    if c is None:
        have = ", ".join(f"node{i}" for i in sorted(containers)) or "none"
        raise LabError(f"lab {name} has no node{idx} (nodes: {have}); `provision lab status --name {name}`")
    return faults_mod.apply(name, f"node{idx}", c["Names"][0], log=log, **kw)
