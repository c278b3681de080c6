# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Node runtime limits that break multi-node training, read from /proc and /sys, and the rules.

Plain Python (no Ansible imports): the modules node_runtime and ssh_landing, the verify
playbook, the smoke test's diagnosis and the unit tests all use these functions.

Shape:
- collect_snapshot() reads the raw files (verbatim text) into one dict; the unit tests feed
  snapshots captured from real nodes (tests/fixtures/runtime/) to the same parsers.
- parse_* turn one file's text into values; detect_* combine them into facts.
- check_* are the decision rules; each returns {"check","status","detail","fix"}.
"""

from __future__ import annotations

import os
import re

from ansible_collections.provision.cluster.plugins.module_utils.diagnose import explain_resource_error

GIB = 1024 ** 3
MIB = 1024 ** 2
KIB = 1024

# Linux gives the initial ("host") namespaces fixed inode numbers (include/linux/proc_ns.h,
# stable since 3.8): seeing one of these from /proc/self/ns/<type> means the process shares
# that namespace with the host. The net namespace has no fixed number.
INIT_NS_INODES = {
    "ipc": 0xEFFFFFFF,
    "uts": 0xEFFFFFFE,
    "user": 0xEFFFFFFD,
    "pid": 0xEFFFFFFC,
    "cgroup": 0xEFFFFFFB,
    "time": 0xEFFFFFFA,
}
CAP_IPC_LOCK = 14

# What the snapshot reads. Paths relative to the node's root.
SNAPSHOT_FILES = (
    "/proc/1/cgroup", "/proc/self/cgroup", "/proc/1/comm", "/proc/2/comm", "/proc/1/environ",
    "/proc/self/limits", "/proc/self/status", "/proc/self/mountinfo", "/run/.containerenv",
    "/proc/sys/fs/nr_open", "/etc/machine-id", "/proc/sys/kernel/random/boot_id",
    "/proc/sys/kernel/hostname", "/proc/net/fib_trie",
)
SNAPSHOT_LINKS = (
    "/proc/self/ns/ipc", "/proc/self/ns/pid", "/proc/self/ns/mnt", "/proc/self/ns/uts",
    "/proc/1/ns/ipc", "/proc/1/ns/pid", "/proc/1/ns/mnt",
)
SNAPSHOT_EXISTS = ("/.dockerenv", "/run/.containerenv", "/dev/nvidiactl", "/dev/nvidia-uvm",
                   "/dev/infiniband")
SNAPSHOT_DIRS = ("/dev", "/sys/class/infiniband", "/dev/infiniband")
# Where the NVIDIA driver's user-space libraries lie when ldconfig does not list them:
# distro multiarch dirs, the NVIDIA container toolkit / GKE device plugin dir (see the H100
# fixture's LD_LIBRARY_PATH=/usr/local/nvidia/lib64), WSL.
DRIVER_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                   "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/wsl/lib")
DRIVER_LIBS = ("libcuda.so", "libnvidia-ml.so")


# ---------------------------------------------------------------- reading


def _read(path, limit=1 << 20):
    with open(path, "rb") as handle:
        return handle.read(limit).decode("utf-8", "replace")


def collect_snapshot(ldconfig_output=None, lib_dirs=DRIVER_LIB_DIRS, root="/"):
    """Read everything the parsers need from a live node (no extra tools).

    Returns {"files": {path: text|None}, "errors": {path: str}, "links": {path: target|None},
    "exists": {path: bool}, "dirs": {path: [names]|None}, "statvfs": {"/dev/shm": {...}|None},
    "ldconfig": text|None, "lib_dirs": {dir: [driver lib names]}}. root: read another tree
    (a chroot, a mounted image). PID 1's environment is read for a few variables only
    (container, KUBERNETES_SERVICE_HOST, NVIDIA_VISIBLE_DEVICES); the snapshot is never returned.
    """
    def p(path):
        return os.path.join(root, path.lstrip("/"))

    snap = {"files": {}, "errors": {}, "links": {}, "exists": {}, "dirs": {}, "statvfs": {},
            "ldconfig": ldconfig_output, "lib_dirs": {}}
    for path in SNAPSHOT_FILES:
        try:
            snap["files"][path] = _read(p(path))
        except OSError as exc:
            snap["files"][path] = None
            snap["errors"][path] = exc.strerror or str(exc)
    for path in SNAPSHOT_LINKS:
        try:
            snap["links"][path] = os.readlink(p(path))
        except OSError as exc:
            snap["links"][path] = None
            snap["errors"][path] = exc.strerror or str(exc)
    for path in SNAPSHOT_EXISTS:
        snap["exists"][path] = os.path.exists(p(path))
    for path in SNAPSHOT_DIRS:
        try:
            names = sorted(os.listdir(p(path)))
        except OSError:
            names = None
        if path == "/dev" and names is not None:
            names = [n for n in names if n.startswith("nvidia")]
        snap["dirs"][path] = names
    try:
        st = os.statvfs(p("/dev/shm"))
        snap["statvfs"]["/dev/shm"] = {"f_frsize": st.f_frsize, "f_blocks": st.f_blocks,
                                       "f_bfree": st.f_bfree, "f_bavail": st.f_bavail}
    except OSError:
        snap["statvfs"]["/dev/shm"] = None
    for libdir in lib_dirs:
        try:
            found = sorted(n for n in os.listdir(p(libdir)) if n.startswith(DRIVER_LIBS))
        except OSError:
            continue
        if found:
            snap["lib_dirs"][libdir] = found
    return snap


# ---------------------------------------------------------------- sizes


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.I)


def parse_size(value):
    """'1g', '64m', '2GiB', '1073741824' -> bytes (binary units, as docker/podman --shm-size)."""
    if isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError("not a size: %r (use e.g. 64m, 1g, 2GiB or bytes)" % (value,))
    mult = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": GIB * 1024}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


def human(nbytes):
    """Bytes -> the shortest exact-ish binary form: 64 MiB, 1 GiB, 1.5 GiB, 8 KiB."""
    if nbytes is None:
        return "unlimited"
    for unit, size in (("TiB", GIB * 1024), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= size:
            val = nbytes / float(size)
            return ("%d %s" % (val, unit)) if val == int(val) else ("%.1f %s" % (val, unit))
    return "%d B" % nbytes


def docker_size(nbytes):
    """Bytes -> a --shm-size / sizeLimit argument rounded up to a whole unit: 2g, 512m."""
    if nbytes % GIB == 0 or nbytes >= GIB:
        return "%dg" % -(-nbytes // GIB)
    return "%dm" % -(-nbytes // MIB)


# ---------------------------------------------------------------- parsers


_LIMIT_KEYS = {
    "Max locked memory": "memlock",
    "Max open files": "nofile",
    "Max processes": "nproc",
    "Max stack size": "stack",
}


def parse_limits(text):
    """/proc/<pid>/limits -> {"memlock": (soft, hard), "nofile": ..., ...}; None = unlimited."""
    out = {}
    for line in (text or "").splitlines():
        for label, key in _LIMIT_KEYS.items():
            if line.startswith(label):
                fields = line[len(label):].split()
                if len(fields) < 2:
                    continue
                out[key] = tuple(None if f == "unlimited" else int(f) for f in fields[:2])
    return out


def parse_capeff(status_text):
    """/proc/<pid>/status -> the effective capability mask (int) or None."""
    m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status_text or "", re.M)
    return int(m.group(1), 16) if m else None


def parse_environ(data):
    """/proc/<pid>/environ (NUL-separated) or a VAR=value per line text -> dict."""
    if data is None:
        return {}
    sep = "\0" if "\0" in data else "\n"
    env = {}
    for item in data.split(sep):
        if "=" in item:
            key, _, value = item.partition("=")
            env[key] = value
    return env


def parse_mountinfo(text, mountpoint):
    """The last mount of mountpoint in /proc/<pid>/mountinfo -> {fstype, source, options, root}."""
    found = None
    for line in (text or "").splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        if len(fields) < 6 or fields[4] != mountpoint:
            continue
        rfields = right.split()
        found = {"root": fields[3], "mount_options": fields[5],
                 "fstype": rfields[0] if rfields else "",
                 "source": rfields[1] if len(rfields) > 1 else "",
                 "options": rfields[2] if len(rfields) > 2 else ""}
    return found


def ns_inode(link):
    """'ipc:[4026531839]' -> 4026531839, None when unreadable."""
    m = re.match(r"^\w+:\[(\d+)\]$", link or "")
    return int(m.group(1)) if m else None


def parse_fib_trie_local(text):
    """/proc/net/fib_trie -> sorted IPv4 addresses assigned to this namespace's interfaces.

    The trie lists each local address as a leaf followed by '/32 host LOCAL' (works where
    `ip` is missing, as in minimal images).
    """
    addrs = set()
    last = None
    for line in (text or "").splitlines():
        m = re.match(r"^\s*\|--\s+(\d+\.\d+\.\d+\.\d+)\s*$", line)
        if m:
            last = m.group(1)
            continue
        if "/32 host LOCAL" in line and last:
            addrs.add(last)
    return sorted(addrs, key=lambda a: tuple(int(x) for x in a.split(".")))


def parse_ldconfig(text):
    """`ldconfig -p` -> {libname: path} for the NVIDIA driver libraries only."""
    out = {}
    for line in (text or "").splitlines():
        m = re.match(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
        if m and m.group(1).startswith(DRIVER_LIBS):
            out.setdefault(m.group(1), m.group(3))
    return out


# ---------------------------------------------------------------- detection


_CGROUP_RUNTIMES = (
    (re.compile(r"kubepods"), "kubernetes"),
    (re.compile(r"libpod[-_]"), "podman"),
    (re.compile(r"/docker[-/]"), "docker"),
    (re.compile(r"cri-containerd|containerd"), "containerd"),
    (re.compile(r"crio-"), "cri-o"),
    (re.compile(r"/lxc[./]|lxc\.payload"), "lxc"),
    (re.compile(r"machine\.slice/.*nspawn|systemd-nspawn"), "systemd-nspawn"),
)


# The overlay root filesystem's lowerdir/upperdir name the runtime's image store. This holds when
# the container shares the host's pid namespace (--pid=host) and cgroup paths say nothing (cgroup v2
# with a private cgroup namespace shows "0::/").
_ROOTFS_RUNTIMES = (
    (re.compile(r"/var/lib/docker/"), "docker"),
    (re.compile(r"/containers/storage/"), "podman/cri-o"),
    (re.compile(r"containerd"), "containerd"),
)


def detect_container(snap):
    """Is this node a container, and of which runtime? -> {container, runtime, evidence}.

    Evidence, strongest first: podman's /run/.containerenv, Kubernetes' service env in PID 1's
    environment, the `container=` variable runtimes set for PID 1, the cgroup path of PID 1
    and of this process, the root filesystem being an overlay in a runtime's image store,
    docker's /.dockerenv. A marker file alone is not proof: a VM booted from an exported image
    keeps /.dockerenv (seen on this project's own controller, see tests/fixtures/runtime/README.md).
    When the process sees the host's pid namespace (kthreadd as PID 2, the initial pid
    namespace inode) and neither cgroup paths nor the root filesystem name a runtime, markers
    are reported as stale and the node counts as a VM/bare metal.
    """
    files, exists = snap.get("files", {}), snap.get("exists", {})
    evidence = []
    runtime = None
    env1 = parse_environ(files.get("/proc/1/environ"))
    if exists.get("/run/.containerenv"):
        evidence.append("/run/.containerenv")
        runtime = runtime or "podman"
    if env1.get("KUBERNETES_SERVICE_HOST"):
        evidence.append("KUBERNETES_SERVICE_HOST in PID 1's environment")
        runtime = "kubernetes"
    if env1.get("container"):
        evidence.append("container=%s in PID 1's environment" % env1["container"])
        runtime = runtime or env1["container"]
    cgroup_hit = None
    for path in ("/proc/1/cgroup", "/proc/self/cgroup"):
        for line in (files.get(path) or "").splitlines():
            for pattern, name in _CGROUP_RUNTIMES:
                if pattern.search(line.split(":", 2)[-1]):
                    cgroup_hit = cgroup_hit or name
        if cgroup_hit:
            evidence.append("cgroup path in %s names %s" % (path, cgroup_hit))
            if cgroup_hit == "kubernetes" or runtime is None:
                runtime = cgroup_hit
            break
    root = parse_mountinfo(files.get("/proc/self/mountinfo"), "/")
    rootfs_hit = None
    if root and root["fstype"] == "overlay":
        for pattern, name in _ROOTFS_RUNTIMES:
            if pattern.search(root["options"]):
                rootfs_hit = name
                break
    if rootfs_hit:
        evidence.append("root filesystem is an overlay in %s's storage" % rootfs_hit)
        runtime = runtime or rootfs_hit.split("/")[0]
    if exists.get("/.dockerenv"):
        evidence.append("/.dockerenv")
        runtime = runtime or "docker"
    ns = detect_namespaces(snap)
    stale = bool(evidence) and ns["host_pid"] is True and not cgroup_hit and not rootfs_hit and \
        not env1.get("container") and not env1.get("KUBERNETES_SERVICE_HOST")
    if stale:
        return {"container": False, "runtime": None,
                "evidence": ["%s present but the host's pid namespace and kernel threads are visible "
                             "and no cgroup names a runtime: treated as a VM/bare metal" % ", ".join(evidence)]}
    return {"container": bool(evidence), "runtime": runtime if evidence else None, "evidence": evidence}


def detect_namespaces(snap):
    """Host pid/ipc namespace? -> {host_pid, host_ipc, ipc_inode, method} (None = cannot tell).

    The initial namespaces have fixed inode numbers (INIT_NS_INODES): ipc:[4026531839] is the
    host's IPC namespace, pid:[4026531836] the host's pid namespace, from any process. Where
    the inode is not the fixed one but PID 1 is the host's (host pid namespace), comparing
    /proc/1/ns/ipc with our own tells whether we share the host's IPC too; inside a private
    pid namespace PID 1 is the container's init, so that comparison says nothing about the host.
    """
    files, links = snap.get("files", {}), snap.get("links", {})
    pid_ino = ns_inode(links.get("/proc/self/ns/pid"))
    ipc_ino = ns_inode(links.get("/proc/self/ns/ipc"))
    kthreadd = (files.get("/proc/2/comm") or "").strip() == "kthreadd"
    if pid_ino is not None:
        host_pid = pid_ino == INIT_NS_INODES["pid"] or kthreadd
    else:
        host_pid = True if kthreadd else None
    method = "fixed init-namespace inodes"
    if ipc_ino is None:
        host_ipc, method = None, "unreadable /proc/self/ns/ipc"
    elif ipc_ino == INIT_NS_INODES["ipc"]:
        host_ipc = True
    elif host_pid:
        pid1_ipc = ns_inode(links.get("/proc/1/ns/ipc"))
        host_ipc = None if pid1_ipc is None else pid1_ipc == ipc_ino
        method = "host pid namespace: compared with PID 1's ipc namespace"
    else:
        host_ipc = False
    return {"host_pid": host_pid, "host_ipc": host_ipc, "ipc_inode": ipc_ino, "method": method}


def detect_shm(snap):
    """/dev/shm -> {size, free, fstype, source, options} (bytes; None where unknown)."""
    st = (snap.get("statvfs") or {}).get("/dev/shm")
    mnt = parse_mountinfo(snap.get("files", {}).get("/proc/self/mountinfo"), "/dev/shm")
    out = {"size": None, "free": None, "mounted": mnt is not None,
           "fstype": mnt["fstype"] if mnt else None, "options": mnt["options"] if mnt else None}
    if st:
        out["size"] = st["f_blocks"] * st["f_frsize"]
        out["free"] = st["f_bavail"] * st["f_frsize"]
    return out


def detect_gpus(snap, env=None):
    """NVIDIA GPUs visible inside: device nodes, driver libraries, container toolkit variables."""
    devs = (snap.get("dirs") or {}).get("/dev") or []
    gpus = sorted((n for n in devs if re.match(r"^nvidia\d+$", n)), key=lambda n: int(n[6:]))
    libs = parse_ldconfig(snap.get("ldconfig"))
    for libdir, names in sorted((snap.get("lib_dirs") or {}).items()):
        for name in names:
            libs.setdefault(name, os.path.join(libdir, name))
    if env is None:
        env = parse_environ(snap.get("files", {}).get("/proc/1/environ"))
    visible = env.get("NVIDIA_VISIBLE_DEVICES")
    notes = []
    if visible and visible not in ("void", "none", "") and not gpus:
        notes.append("NVIDIA_VISIBLE_DEVICES=%s but no /dev/nvidiaN: the container was started without "
                     "the NVIDIA runtime (docker --gpus all / podman --device nvidia.com/gpu=all)" % visible)
    if gpus and not any(n.startswith("libcuda.so") for n in libs):
        notes.append("/dev/nvidia* present but libcuda.so is not in the ldconfig cache or %s"
                     % ", ".join(DRIVER_LIB_DIRS))
    return {"count": len(gpus), "devices": ["/dev/" + n for n in gpus],
            "nvidiactl": bool((snap.get("exists") or {}).get("/dev/nvidiactl")),
            "driver_libs": libs, "nvidia_visible_devices": visible, "notes": notes}


def detect_rdma(snap):
    """RDMA devices (InfiniBand/RoCE/EFA) from /sys/class/infiniband, and /dev/infiniband nodes."""
    names = (snap.get("dirs") or {}).get("/sys/class/infiniband") or []
    uverbs = [n for n in ((snap.get("dirs") or {}).get("/dev/infiniband") or []) if n.startswith("uverbs")]
    return {"devices": list(names), "uverbs": uverbs, "present": bool(names)}


def node_identity(snap, token_text=None):
    """What tells this node apart from its host and its sibling containers (see check_landing)."""
    files = snap.get("files", {})
    return {
        "hostname": (files.get("/proc/sys/kernel/hostname") or "").strip(),
        "boot_id": (files.get("/proc/sys/kernel/random/boot_id") or "").strip(),
        "machine_id": (files.get("/etc/machine-id") or "").strip(),
        "addresses": parse_fib_trie_local(files.get("/proc/net/fib_trie")),
        "token": (token_text or "").strip(),
    }


def runtime_facts(snap):
    """Every fact the node_runtime module returns, from one snapshot."""
    files = snap.get("files", {})
    env1 = parse_environ(files.get("/proc/1/environ"))
    pid1 = (files.get("/proc/1/comm") or "").strip() or None
    nr_open = (files.get("/proc/sys/fs/nr_open") or "").strip()
    return {
        "container": detect_container(snap),
        "pid1": pid1,
        "systemd": pid1 == "systemd",
        "namespaces": detect_namespaces(snap),
        "shm": detect_shm(snap),
        "gpus": detect_gpus(snap, env1),
        "rdma": detect_rdma(snap),
        "nr_open": int(nr_open) if nr_open.isdigit() else None,
        "process_limits": _limits_json(parse_limits(files.get("/proc/self/limits"))),
    }


def _limits_json(limits):
    return {k: {"soft": v[0], "hard": v[1]} for k, v in limits.items()}


# ---------------------------------------------------------------- rules


def required_shm(gpus, minimum=GIB, per_gpu=2 * GIB):
    """The /dev/shm size a node needs: max(minimum, per_gpu x GPUs).

    Why: NCCL puts its intra-node SHM transport buffers and proxy state in /dev/shm (segments
    of ~10 MiB per peer and channel, several channels per GPU pair; NCCL's troubleshooting guide
    asks for --shm-size=1g per container); PyTorch DataLoader workers hand every batch to the
    training process through /dev/shm, per GPU. Docker's 64 MiB default breaks both.
    """
    return max(int(minimum), int(per_gpu) * int(gpus or 0))


def _fmt_limit(value, unit_bytes=False):
    if value is None:
        return "unlimited"
    return human(value) if unit_bytes else str(value)


def container_fix(runtime, what, size=None, nofile=None):
    """The exact run options that fix `what` (shm|memlock|nofile) for that container runtime."""
    if runtime == "kubernetes":
        if what == "shm":
            return ("mount a memory-backed emptyDir on /dev/shm: volumes: [{name: dshm, emptyDir: "
                    "{medium: Memory, sizeLimit: %s}}] + volumeMounts: [{name: dshm, mountPath: /dev/shm}]"
                    % docker_size(size).replace("g", "Gi").replace("m", "Mi"))
        if what == "memlock":
            return ("securityContext: {capabilities: {add: [IPC_LOCK]}} on the container, and "
                    "LimitMEMLOCK=infinity for containerd/cri-o on the node (systemd unit drop-in)")
        return ("raise LimitNOFILE to >= %d for containerd/cri-o on the node (pods inherit the "
                "runtime's limits; Kubernetes has no per-pod ulimit)" % nofile)
    tool = {"podman": "podman", "docker": "docker"}.get(runtime)
    opts = {"shm": "--shm-size=%s (or --ipc=host to share the host's /dev/shm)" % docker_size(size or GIB),
            "memlock": "--ulimit memlock=-1:-1 --cap-add IPC_LOCK",
            "nofile": "--ulimit nofile=%d:%d" % (nofile or 0, nofile or 0)}[what]
    if tool:
        extra = ""
        if tool == "podman" and what in ("memlock", "nofile"):
            extra = " (a --ulimit replaces containers.conf default_ulimits: pass nofile and nproc too)"
        return "re-create the container with `%s run %s`%s" % (tool, opts, extra)
    return "re-create the container with the runtime's equivalent of `%s`" % opts


def _limit_fix(in_container, runtime, what, dropin, nofile=None, manage=False, soft_only=False):
    """The fix of a memlock/nofile shortfall: the run options where only the container runtime can
    raise the hard limit, else the pam_limits drop-in (written by the role when it manages limits)."""
    if in_container and not soft_only:
        return container_fix(runtime, what, nofile=nofile)
    what_file = ("the soft limit up to the hard one in %s" % dropin) if soft_only else dropin
    if manage:
        return "run the node_runtime stage (node_runtime_manage_limits writes %s), then log in again" % what_file
    return "set node_runtime_manage_limits: true (writes %s) and log in again" % what_file


def pam_limit_culprits(files, user, groups, item, minimum, ours=None):
    """The pam_limits lines that cap ``item`` below ``minimum`` for ``user`` at login.

    files: [(path, text)] in the order pam_limits reads them (limits.conf, then limits.d/*.conf
    sorted). groups: the user's group names. minimum: a number, or None for "unlimited" (memlock).
    Our own drop-in (``ours``) is left out: the role manages it. Returns ["path:N: line"].
    """
    out = []
    for path, text in files:
        if path == ours:
            continue
        for num, line in enumerate((text or "").splitlines(), 1):
            m = _DROPIN_LINE.match(line.split("#", 1)[0])
            if not m or m.group(3) != item:
                continue
            domain, value = m.group(1), m.group(4)
            # limits.conf(5): group and wildcard lines do not apply to root
            if user == "root":
                if domain != "root":
                    continue
            elif not (domain in (user, "*") or (domain[:1] in "@%" and domain[1:] in groups)):
                continue
            if value in ("unlimited", "infinity", "-1"):
                continue
            if minimum is None or (value.isdigit() and int(value) < minimum):
                out.append("%s:%d: %s" % (path, num, " ".join(line.split())))
    return out


def _culprit_fix(culprits):
    return ("pam_limits lowers it at every login: raise or remove %s, then log in again"
            % "; ".join("`%s`" % c for c in culprits))


def check_shm(shm, gpus, in_container, runtime, minimum=GIB, per_gpu=2 * GIB, manage=False,
              host_ipc=None):
    need = required_shm(gpus, minimum, per_gpu)
    size, free = shm.get("size"), shm.get("free")
    rule = "max(%s, %s x %d GPU)" % (human(minimum), human(per_gpu), gpus or 0)
    if size is None:
        return {"check": "shm", "status": "fail", "detail": "/dev/shm is not mounted (need %s = %s)" % (human(need), rule),
                "fix": container_fix(runtime, "shm", size=need) if in_container
                else "mount -t tmpfs -o size=%s tmpfs /dev/shm" % docker_size(need),
                "measured": None, "required": need}
    if size < need:
        if in_container:
            fix = container_fix(runtime, "shm", size=need)
        elif manage:
            fix = "run the node_runtime stage (node_runtime_manage_shm: true remounts it)"
        else:
            fix = ("set node_runtime_manage_shm: true, or `mount -o remount,size=%s /dev/shm` and "
                   "size=%s on the /dev/shm line of /etc/fstab" % (docker_size(need), docker_size(need)))
        return {"check": "shm", "status": "fail",
                "detail": "/dev/shm is %s, need >= %s (%s)" % (human(size), human(need), rule),
                "fix": fix, "measured": size, "required": need}
    if free is not None and free < need // 2:
        return {"check": "shm", "status": "warn",
                "detail": "/dev/shm is %s but only %s free (< half of the %s needed): stale segments of a dead run?"
                          % (human(size), human(free), human(need)),
                "fix": "remove stale files: ls -la /dev/shm; rm /dev/shm/nccl-* /dev/shm/torch_* of dead runs",
                "measured": free, "required": need}
    ipc = " (host IPC)" if host_ipc else ""
    return {"check": "shm", "status": "pass",
            "detail": "/dev/shm %s, %s free%s; need %s" % (human(size), human(free) if free is not None else "?",
                                                         ipc, human(need)),
            "fix": "", "measured": size, "required": need}


def check_memlock(limits, rdma, in_container, runtime, capeff=None, require="auto",
                  source="module", dropin="/etc/security/limits.d/90-provision.conf", manage=False,
                  culprits=None):
    """memlock must be unlimited where RDMA devices exist (ibv_reg_mr pins NCCL's buffers).

    require: auto (only where /sys/class/infiniband lists devices), true, false. A session
    with CAP_IPC_LOCK (capable(CAP_IPC_LOCK) in ib_umem_get) is not bound by the limit.
    """
    soft, hard = (limits.get("memlock") or (None, None)) if "memlock" in limits else ("?", "?")
    needed = rdma.get("present") if require == "auto" else bool(require in (True, "true", "yes"))
    shown = "%s soft / %s hard" % (_fmt_limit(soft, True), _fmt_limit(hard, True)) if soft != "?" else "unknown"
    why = ("RDMA devices %s" % ",".join(rdma.get("devices") or [])) if rdma.get("present") \
        else "node_runtime_require_memlock_unlimited"
    if soft == "?":
        return {"check": "memlock", "status": "warn" if needed else "skip",
                "detail": "memlock could not be measured (%s)" % source, "fix": "", "measured": None,
                "required": "unlimited" if needed else None}
    if not needed:
        return {"check": "memlock", "status": "pass",
                "detail": "memlock %s (%s); no RDMA device, unlimited not required" % (shown, source),
                "fix": "", "measured": soft, "required": None}
    if soft is None:
        return {"check": "memlock", "status": "pass", "detail": "memlock unlimited (%s; %s)" % (source, why),
                "fix": "", "measured": None, "required": "unlimited"}
    if capeff is not None and capeff & (1 << CAP_IPC_LOCK):
        return {"check": "memlock", "status": "pass",
                "detail": "memlock %s but the session has CAP_IPC_LOCK (%s; %s)" % (shown, source, why),
                "fix": "", "measured": soft, "required": "unlimited"}
    return {"check": "memlock", "status": "fail",
            "detail": "memlock is %s (%s), need unlimited (%s): RDMA memory registration (ibv_reg_mr) fails"
                      % (shown, source, why),
            "fix": _culprit_fix(culprits) if culprits else _limit_fix(
                in_container, runtime, "memlock", dropin, manage=manage, soft_only=in_container and hard is None),
            "measured": soft, "required": "unlimited"}


def check_nofile(limits, minimum, in_container, runtime, source="module",
                 dropin="/etc/security/limits.d/90-provision.conf", manage=False, culprits=None):
    if "nofile" not in limits:
        return {"check": "nofile", "status": "warn", "detail": "nofile could not be measured (%s)" % source,
                "fix": "", "measured": None, "required": minimum}
    soft, hard = limits["nofile"]
    shown = "%s soft / %s hard" % (_fmt_limit(soft), _fmt_limit(hard))
    if soft is None or soft >= minimum:
        return {"check": "nofile", "status": "pass", "detail": "nofile %s (%s); need >= %d" % (shown, source, minimum),
                "fix": "", "measured": soft, "required": minimum}
    fix = _culprit_fix(culprits) if culprits else _limit_fix(
        in_container, runtime, "nofile", dropin, nofile=minimum, manage=manage,
        soft_only=in_container and (hard is None or hard >= minimum))
    return {"check": "nofile", "status": "fail",
            "detail": "nofile is %s (%s), need >= %d: many-rank jobs and DataLoader workers fail with "
                      "'Too many open files'" % (shown, source, minimum),
            "fix": fix, "measured": soft, "required": minimum}


def apply_container_policy(checks, in_container, policy):
    """node_runtime_on_container_limit: warn turns the failures that only the container runtime can
    fix (its run options, not our drop-in) into warnings. Changes checks in place and returns them."""
    ours = ("run the node_runtime stage", "set node_runtime_", "pam_limits lowers it")
    for c in checks:
        if policy == "warn" and in_container and c["status"] == "fail" and not c["fix"].startswith(ours):
            c["status"] = "warn"
    return checks


def limits_dropin_lines(user, limits, in_container, min_nofile, memlock_unlimited, nr_open=None):
    """The pam_limits lines we may write, as [(domain, type, item, value)].

    The lines depend only on things the drop-in itself does not change (hard limits a container
    was started with, fs.nr_open, the settings), so a second run computes the same file.
    - Bare metal/VM: memlock unlimited soft+hard (when wanted); nofile soft = node_runtime_min_nofile,
      hard = fs.nr_open (the kernel's ceiling, what docker gives containers: 1048576 by default).
    - Containers: only what needs no privilege: the soft limits raised to the hard limit the
      container was started with (nofile when that hard limit reaches the minimum, memlock when
      it is unlimited). A pam_limits line above what the session may set makes pam_limits fail
      the login ("Could not set limit ... Operation not permitted"), so nothing else is written.
    """
    domain = "*" if user in (None, "", "*") else user
    lines = []
    hard_n = limits.get("nofile", (None, None))[1]
    hard_m = limits.get("memlock", (0, 0))[1]
    if min_nofile and nr_open is not None and min_nofile > nr_open:
        raise ValueError("node_runtime_min_nofile %d exceeds fs.nr_open %d: pam_limits cannot set it"
                         % (min_nofile, nr_open))
    if in_container:
        if memlock_unlimited and "memlock" in limits and hard_m is None:
            lines.append((domain, "soft", "memlock", "unlimited"))
        if min_nofile and "nofile" in limits and (hard_n is None or hard_n >= min_nofile):
            lines.append((domain, "soft", "nofile", "unlimited" if hard_n is None else str(hard_n)))
        return lines
    if memlock_unlimited:
        lines += [(domain, "soft", "memlock", "unlimited"), (domain, "hard", "memlock", "unlimited")]
    if min_nofile:
        lines += [(domain, "soft", "nofile", str(min_nofile)),
                  (domain, "hard", "nofile", str(max(min_nofile, nr_open or min_nofile)))]
    return lines


def render_dropin(lines, header):
    body = "".join("%-12s %-5s %-8s %s\n" % line for line in lines)
    return header + body


_DROPIN_LINE = re.compile(r"^\s*(\S+)\s+(soft|hard|-)\s+(\S+)\s+(\S+)\s*$")


def validate_dropin(text):
    """pam_limits syntax of every non-comment line; raises ValueError naming the bad line."""
    items = ("core", "data", "fsize", "memlock", "nofile", "rss", "stack", "cpu", "nproc", "as",
             "maxlogins", "maxsyslogins", "priority", "locks", "sigpending", "msgqueue", "nice", "rtprio")
    for num, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _DROPIN_LINE.match(line)
        if not m or m.group(3) not in items or not (m.group(4).isdigit() or m.group(4) in ("unlimited", "infinity", "-1")):
            raise ValueError("limits drop-in line %d is not `<domain> <soft|hard|-> <item> <value>`: %r" % (num, line))
    return True


def fstab_with_shm(text, size):
    """/etc/fstab text with /dev/shm mounted at size (e.g. '16g'): the existing line's size= is
    replaced (or added); without a /dev/shm line one is appended. Comments are kept."""
    out, done = [], False
    for line in (text or "").splitlines():
        fields = line.split()
        if not done and fields and not fields[0].startswith("#") and len(fields) >= 4 and fields[1] == "/dev/shm":
            opts = [o for o in fields[3].split(",") if not o.startswith("size=")] + ["size=%s" % size]
            fields[3] = ",".join(opts)
            line, done = "\t".join(fields), True
        out.append(line)
    if not done:
        out.append("tmpfs\t/dev/shm\ttmpfs\tdefaults,nosuid,nodev,size=%s\t0\t0" % size)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- landing


LANDING_SCRIPT = ("cat /etc/provision/node-id 2>/dev/null; echo '@@'; cat /proc/sys/kernel/hostname; "
                  "echo '@@'; cat /proc/sys/kernel/random/boot_id; echo '@@'; cat /proc/net/fib_trie")


def parse_landing_report(text):
    """The output of LANDING_SCRIPT run by `ssh <peer>` -> identity dict (as node_identity)."""
    parts = (text or "").split("@@\n")
    if len(parts) < 4:
        raise ValueError("unexpected landing report (%d parts)" % len(parts))
    return {"token": parts[0].strip(), "hostname": parts[1].strip(), "boot_id": parts[2].strip(),
            "addresses": parse_fib_trie_local(parts[3])}


def token_name(token):
    """'node2 3f2a...' -> 'node2'."""
    return (token or "").split()[0] if (token or "").split() else ""


def landing_pair(alias, expected, text):
    """One landing result from the output of LANDING_SCRIPT run through `ssh alias`:
    {alias, peer, ok, reason, reported}. Raises ValueError when the output is not a report."""
    reported = parse_landing_report(text)
    ok, reason = landing_verdict(alias, expected, reported)
    return {"alias": alias, "peer": expected.get("name"), "ok": ok, "reason": reason, "reported": reported}


def landing_verdict(alias, expected, reported):
    """Did `ssh alias` land in `expected` (identity of the inventory node)? -> (ok, reason)."""
    problems = []
    got = token_name(reported.get("token")) or "a machine without /etc/provision/node-id (the host?)"
    if expected.get("token"):
        if reported.get("token") != expected["token"]:
            problems.append("node-id is %s" % got if token_name(reported.get("token")) != expected.get("name")
                            else "node-id nonce differs (a copy of %s's image?)" % expected.get("name"))
    elif reported.get("token") and token_name(reported["token"]) != expected.get("name"):
        # no gathered token (verify without node_runtime facts): the name in the token still tells
        problems.append("node-id is %s" % got)
    addr = expected.get("address")
    if addr and addr not in (reported.get("addresses") or []):
        problems.append("%s is not on its interfaces (%s)" % (addr, ",".join(reported.get("addresses") or []) or "none"))
    if expected.get("hostname") and reported.get("hostname") != expected["hostname"]:
        problems.append("hostname %s" % (reported.get("hostname") or "?"))
    if not problems:
        return True, ""
    landed = token_name(reported.get("token")) or reported.get("hostname") or "?"
    return False, "`ssh %s` landed on %s, not %s: %s" % (alias, landed, expected.get("name"), "; ".join(problems))


def landing_from_report(alias, peer, text):
    """The verdict from a report the SSH mesh check already read through `ssh alias` in this run,
    when it proves the landing (same node-id token); None when it must be probed again."""
    if not text or not peer.get("token"):
        return None
    try:
        pair = landing_pair(alias, peer, text)
    except ValueError:
        return None
    return dict(pair, from_mesh=True) if pair["ok"] else None


def check_landing(node, results):
    """results: [{"alias","peer","ok","reason"}] for one source node -> one check dict."""
    bad = [r for r in results if not r["ok"]]
    if not results:
        return {"check": "landing", "status": "skip", "detail": "no peers to check", "fix": ""}
    if not bad:
        return {"check": "landing", "status": "pass",
                "detail": "%d ssh names land on the nodes the inventory means" % len(results), "fix": ""}
    detail = "%s: %s" % (node, "; ".join(r["reason"] for r in bad))
    if any("Permission denied" in r["reason"] or "Host key" in r["reason"] or "timed out" in r["reason"]
           or "Could not resolve" in r["reason"] or "refused" in r["reason"] for r in bad):
        fix = ("run the ssh_mesh stage (keys, known_hosts and ~/.ssh/config for every node name), then "
               "look at the entries named above in %s's ~/.ssh/config and /etc/hosts" % node)
    else:
        fix = ("on %s make each name resolve to its node: fix ~/.ssh/config (HostName/Port) and /etc/hosts "
               "for %s; a container on the host network needs its own sshd port (sshd_port)"
               % (node, ", ".join(sorted({r["alias"] for r in bad}))))
    return {"check": "landing", "status": "fail", "detail": detail, "fix": fix,
            "pairs": ["%s->%s" % (node, r["alias"]) for r in bad]}


def shared_host_check(node, results):
    """Nodes that answered with the same hostname and boot id, ``node`` among them, as seen through
    this node's landing connections (results of ``landing_pair``). NCCL hashes exactly these two
    (hostname + /proc/sys/kernel/random/boot_id, unless NCCL_HOSTID is set) to tell hosts apart:
    containers of one machine that share a hostname (``--network host`` gives them the host's) are
    one host to NCCL, which then uses shared memory and P2P between them. -> a warn check, or None."""
    groups = {}
    for r in results:
        rep = r.get("reported") or {}
        if r.get("ok") and rep.get("hostname") and rep.get("boot_id"):
            groups.setdefault((rep["hostname"], rep["boot_id"]), set()).add(r.get("peer"))
    shared = next(((key[0], sorted(p for p in peers if p)) for key, peers in groups.items()
                   if len(peers) > 1 and node in peers), None)
    if not shared:
        return None
    hostname, peers = shared
    return {"check": "host identity", "status": "warn",
            "detail": "%s report the same hostname (%s) and boot id: NCCL takes them for one host and uses shared "
                      "memory and P2P between them ('Duplicate GPU detected', 'Error while attaching to shared "
                      "memory segment')" % (" and ".join(peers), hostname),
            "fix": "give each node its own hostname (a container: --hostname NAME; with --network host it gets "
                   "the host's), or a distinct NCCL_HOSTID per node (nccl_net_extra_env)"}


def landing_checks(node, results):
    """This node's landing checks: ``check_landing``, then ``shared_host_check`` when it warns."""
    shared = shared_host_check(node, results)
    return [check_landing(node, results)] + ([shared] if shared else [])


# ---------------------------------------------------------------- NCCL diagnosis


def explain_nccl_resource_error(text):
    """Map an NCCL/torch log to a node runtime cause -> (cause, explanation, fix) or None.

    cause is one of shm, ipc, memlock, nofile (the check names of node_runtime); the patterns live in
    diagnose.py with every other log cause.
    """
    return explain_resource_error(text)
