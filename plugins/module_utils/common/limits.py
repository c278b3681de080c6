# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The runtime rules of multi-node training: the /dev/shm a node needs, the memlock and nofile
limits, the pam_limits lines that lower them at login, the limits drop-in we write and the
/dev/shm line of /etc/fstab.

Plain Python (no Ansible imports). check_* are the decision rules; each returns
{"check","status","detail","fix", "measured", "required"} from facts that node_facts.py reads.
"""

from __future__ import annotations

import re

from ansible_collections.provision.cluster.plugins.module_utils.common.sizes import GIB, docker_size, human

CAP_IPC_LOCK = 14


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
