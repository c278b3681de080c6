# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""What a node is, read from /proc and /sys: container runtime, namespaces, /dev/shm, GPUs, RDMA
devices, process limits and the identity that tells a node from its host and its siblings.

Plain Python, standard library only (no Ansible, no other module_utils): tests/fixtures/runtime/capture.py
pipes this file alone into ``python3 -`` on a node to capture a snapshot. The node_runtime,
fabric_health_info and gpu_health_info modules, the rules in limits.py and landing.py and the unit
tests all use these functions.

Shape:
- collect_snapshot() reads the raw files (verbatim text) into one dict; the unit tests feed
  snapshots captured from real nodes (tests/fixtures/runtime/) to the same parsers.
- parse_* turn one file's text into values; detect_* combine them into facts; runtime_facts()
  is every fact the node_runtime module returns.
"""

from __future__ import annotations

import os
import re

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
    # not files.read_text: this file runs alone on a node (capture.py), and the error is recorded
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
            key, _unused, value = item.partition("=")
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
        runtime = runtime or rootfs_hit.split("/", maxsplit=1)[0]
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
