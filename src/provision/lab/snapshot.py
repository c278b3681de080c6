"""Lab snapshots: a lab's nodes saved as images, and labs brought up from them.

`provision lab save SNAPSHOT` commits every node of a lab (`podman commit`) to
localhost/provision-snapshot:SNAPSHOT-nodeI and records what a restore needs in
~/.cache/provision/snapshots/SNAPSHOT.json: each node's release, init, flavour and run options, the
cluster network's /24 (the nodes' files hold their addresses: /etc/hosts, known_hosts, the SSH
config), the lab's controller-side state (the known_hosts the lab inventory checks host keys
with), and the daemons our roles started by hand on nodes without init (sshd on the cluster port).

`provision lab up --from SNAPSHOT` removes the lab, starts its nodes from those images at the same
addresses, puts the controller-side state back, and starts those daemons again, as a node's boot
would: the lab is where it was when it was saved. The test suite saves a lab once after a green
site.yml and starts every test that needs converged nodes from it (tests/conftest.py).

What is not saved: faults (they live in the node's network namespace, outside the image), a paused
node, and SLURM (its daemons and state belong to `lab up --slurm`): saving such a lab is refused.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from provision.paths import cache_dir

from ._base import LABEL_INDEX, LABEL_RUN, LabError, podman

REPOSITORY = "localhost/provision-snapshot"
LABEL_OF = "provision.snapshot"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,100}$")
BOOT_TIMEOUT = 60  # seconds for a restored node's sshd to listen again
# sshd started by the sshd role on a node without init (sshd_service's direct mode): `sshd -f CONFIG`;
# OpenSSH >= 8.3 retitles its listener "sshd: /usr/sbin/sshd -f CONFIG [listener] 0 of 10-100 startups"
_SSHD_DIRECT = re.compile(r"^/usr/sbin/sshd(?: -f /[\w./-]+)?$")
_LISTENER = re.compile(r"^sshd: (/usr/sbin/sshd(?: -f /[\w./-]+)?) \[listener\]")


def sshd_listeners(ps_args: str) -> list[str]:
    """The command lines of the listening sshd processes in `ps -eo args=` output (sessions left out)."""
    out = []
    for line in ps_args.splitlines():
        line = line.strip()
        m = _LISTENER.match(line)
        cmd = m.group(1) if m else (line if _SSHD_DIRECT.match(line) else None)
        if cmd and cmd not in out:
            out.append(cmd)
    return out


# /run/provision-sshd.json {"pid", "digest"}: the pid becomes the running listener's
_REPID = """\
import json, os
path = "/run/provision-sshd.json"
try:
    state = json.load(open(path))
except (OSError, ValueError):
    raise SystemExit(0)
pids = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        args = open("/proc/%s/cmdline" % pid, "rb").read().replace(b"\\0", b" ").decode().strip()
    except OSError:
        continue
    if args.startswith("/usr/sbin/sshd") or (args.startswith("sshd: /usr/sbin/sshd") and "[listener]" in args):
        pids.append(int(pid))
if len(pids) == 1:
    state["pid"] = pids[0]
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(state, fh)
    os.replace(tmp, path)
"""


def check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise LabError(f"snapshot name {name!r}: use lower-case letters, digits, '.', '_' and '-' "
                       "(at most 101), starting with a letter or digit")
    return name


def image(name: str, index: int) -> str:
    return f"{REPOSITORY}:{name}-node{index}"


def record_path(name: str) -> Path:
    return cache_dir() / "snapshots" / f"{check_name(name)}.json"


def load(name: str) -> dict | None:
    """The snapshot's record, or None when it does not exist (or one of its images is gone)."""
    try:
        record = json.loads(record_path(name).read_text())
    except (OSError, ValueError):
        return None
    for node in record.get("nodes", []):
        if podman("image", "exists", node["image"], check=False).returncode != 0:
            return None
    return record


def listing() -> list[dict]:
    folder = cache_dir() / "snapshots"
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        record = load(path.stem)
        if record is not None:
            out.append({k: record[k] for k in ("snapshot", "lab", "nodes", "created", "subnet")})
    return out


def _sshd_commands(container: str) -> list[str]:
    """The listening sshd processes of a node without init (the sshd role started them by hand)."""
    return sshd_listeners(podman("exec", container, "ps", "-eo", "args=", check=False, timeout=60).stdout)


def save(lab: str, name: str, *, log=print) -> dict:
    """Commit every node of LAB as snapshot NAME (replacing a snapshot of that name)."""
    from . import _nodes_of, faults as faults_mod, list_containers, node_kind, subnet_index

    check_name(name)
    containers = list_containers(lab)
    nodes = sorted(_nodes_of(containers), key=lambda c: int((c.get("Labels") or {}).get(LABEL_INDEX, "0")))
    if not nodes:
        raise LabError(f"lab {lab} has no node to save; `provision lab up --name {lab}` first")
    if (cache_dir() / "labs" / lab / "slurm.json").is_file():
        raise LabError(f"lab {lab} runs SLURM, which a snapshot does not restore; save a lab without --slurm")
    not_running = [c["Names"][0] for c in nodes if c.get("State") != "running"]
    if not_running:
        raise LabError(f"{', '.join(not_running)} not running; a snapshot saves running nodes "
                       f"(`provision lab up --name {lab}` starts them)")
    active = faults_mod.active(lab, nodes)
    if active:
        raise LabError(f"lab {lab} has faults ({', '.join(sorted(active))}), which live outside the nodes' images; "
                       f"clear them first (`provision lab fault {lab} NODE --clear`)")
    record_nodes = []
    started = time.monotonic()
    for c in nodes:
        labels = c.get("Labels") or {}
        index, cname = int(labels.get(LABEL_INDEX, "0")), c["Names"][0]
        kind = node_kind(labels)
        tag = image(name, index)
        daemons = _sshd_commands(cname) if kind["init"] == "none" else []
        # paused while committed: files written at that moment are whole in the image
        podman("commit", "--quiet", "--pause=true", "--change", f"LABEL {LABEL_OF}={name}", cname, tag, timeout=900)
        run = json.loads(labels.get(LABEL_RUN) or "{}")
        record_nodes.append({"index": index, "image": tag, "os": kind["os"], "init": kind["init"],
                             "flavour": kind["flavour"], "shm_size": run.get("shm_size", "1g"),
                             "node_options": run.get("node_options", []), "daemons": daemons,
                             "login": run.get("login", "root"), "bastion": bool(run.get("bastion", False))})
    from . import mirror as mirror_mod

    state_dir = cache_dir() / "labs" / lab
    # the lab's controller-side files (known_hosts), with their modes
    state = {p.name: {"text": p.read_text(), "mode": p.stat().st_mode & 0o777}
             for p in sorted(state_dir.glob("*")) if p.is_file()} if state_dir.is_dir() else {}
    record = {"snapshot": name, "lab": lab, "subnet": subnet_index(lab), "created": time.strftime("%Y-%m-%d %H:%M:%S"),
              "mirror": mirror_mod.find(containers) is not None, "nodes": record_nodes, "state": state}
    path = record_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # 0600: the record holds the lab's state files (a login lab's private key among them)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(record, indent=1))
    os.replace(tmp, path)
    log(f"saved lab {lab} as snapshot {name}: {len(record_nodes)} node(s) in {time.monotonic() - started:.0f} s")
    return record


def restore(lab: str, name: str, *, mirror: bool = False, log=print) -> dict:
    """Lab LAB as snapshot NAME left it: its nodes re-created from the snapshot's images (MIRROR: serve
    the lab's package mirror too, also when the saved lab had none)."""
    from . import LabSpec, down, lab_state_dir, up

    record = load(name)
    if record is None:
        raise LabError(f"no snapshot {name} (or one of its images is gone); `provision lab snapshots` lists them")
    nodes = sorted(record["nodes"], key=lambda n: n["index"])
    if [n["index"] for n in nodes] != list(range(1, len(nodes) + 1)):
        raise LabError(f"snapshot {name} does not hold nodes 1..{len(nodes)}; save it again")
    inits = {n["init"] for n in nodes}
    flavours = {n["flavour"] for n in nodes}
    shm = {n["shm_size"] for n in nodes}
    logins = {(n.get("login", "root"), bool(n.get("bastion", False))) for n in nodes}
    if len(inits) != 1 or len(flavours) != 1 or len(shm) != 1 or len(logins) != 1:
        raise LabError(f"snapshot {name} mixes init systems, flavours, /dev/shm sizes or logins, which one lab cannot")
    login, bastion = logins.pop()
    started = time.monotonic()
    spec = LabSpec(name=lab, nodes=len(nodes), flavour=flavours.pop(), shm_size=shm.pop(), init=inits.pop(),
                   os=tuple(n["os"] for n in nodes), mirror=mirror or bool(record.get("mirror")),
                   node_options={n["index"]: list(n["node_options"]) for n in nodes if n["node_options"]},
                   images={n["index"]: n["image"] for n in nodes}, snapshot=name, subnet=int(record["subnet"]),
                   login=login, bastion=bastion)
    spec.check()  # before the lab is removed: a snapshot this provision cannot bring back leaves it as it is
    down(lab, log=lambda _m: None)
    # the lab's controller-side files first: a login lab's key is the one its nodes authorize (a new
    # bastion gets it too), and up() records the host keys of this run in its known_hosts
    folder = lab_state_dir(lab)
    for fname, saved in (record.get("state") or {}).items():
        path = folder / Path(fname).name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, saved["mode"])
        with os.fdopen(fd, "w") as fh:
            fh.write(saved["text"])
        os.chmod(path, saved["mode"])
    # systemd nodes: up() waits until they booted, and systemd starts sshd with the role's drop-in
    state = up(spec, log=log)
    containers = {n["index"]: f"{lab}-node{n['index']}" for n in nodes}
    for node in nodes:
        for cmd in node["daemons"]:
            if _SSHD_DIRECT.match(cmd):  # nothing but sshd and a path reach the shell
                # sshd daemonizes itself; /run/sshd is its privilege-separation directory
                podman("exec", containers[node["index"]], "sh", "-c", f"mkdir -p /run/sshd && {cmd}", timeout=60)
    _wait_listening(record, containers)
    for node in nodes:
        if node["daemons"]:
            # the sshd role records the pid of the sshd it started (sshd_service's state file): the
            # restarted listener is that sshd, as after the role's own start
            podman("exec", containers[node["index"]], "python3", "-c", _REPID, check=False, timeout=60)
    log(f"lab {lab} restored from snapshot {name} in {time.monotonic() - started:.0f} s")
    return state


def _wait_listening(record: dict, containers: dict[int, str]) -> None:
    """Until every sshd the nodes ran when saved listens again (bounded)."""
    deadline = time.monotonic() + BOOT_TIMEOUT
    for node in record["nodes"]:
        if not node["daemons"]:
            continue
        cname = containers[node["index"]]
        while True:
            ps = podman("exec", cname, "ps", "-eo", "args=", check=False, timeout=30).stdout
            if set(node["daemons"]) <= set(sshd_listeners(ps)):
                break
            if time.monotonic() > deadline:
                raise LabError(f"{cname}: sshd did not come back within {BOOT_TIMEOUT} s after the restore; "
                               f"`podman exec {cname} ps -ef`")
            time.sleep(0.3)


def forget(name: str, *, log=print) -> bool:
    """Remove snapshot NAME's images and record."""
    path = record_path(name)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        record = {}
    images = [n["image"] for n in record.get("nodes", [])]
    if not images:
        listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", f"label={LABEL_OF}={name}",
                        check=False).stdout.split()
        images = listed
    for tag in images:
        podman("rmi", "-f", tag, check=False)
    existed = path.exists() or bool(images)
    path.unlink(missing_ok=True)
    if existed:
        log(f"removed snapshot {name} ({len(images)} image(s))")
    return existed
