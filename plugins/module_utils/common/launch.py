# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Plain-Python logic of the launch_dir and launch_job modules (no Ansible imports).

- plan_files(): which launch files must be (re)written, given what is on disk.
- launch_order(), launch_checks(): the node order every launcher file uses (the master first), and
  verify's check of a node's launch directory (the launch_files_info module): the files the launchers
  stage always writes are there, and they name the cluster the inventory has now.
- Job control for `provision launch`: start a command detached in its own session with its
  output in a log file, poll the log from an offset (bounded wait), stop the process group.
  A run lives in RUNS_DIR/<run_id>/ : out.log, pid, rc (written when the command ends).
"""

from __future__ import annotations

import os
import pwd
import shlex
import signal
import stat
import subprocess
import time

from ansible_collections.provision.cluster.plugins.module_utils.common.files import (
    UnsafeFile, confinement, file_differs, read_no_follow, read_text)
from ansible_collections.provision.cluster.plugins.module_utils.common.nodelist import NodeListError, parse_hostfile
from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C
from ansible_collections.provision.cluster.plugins.module_utils.verify.stage_check import Stop

# `sh -c` wrapper: run the command, then record its exit status atomically.
_WRAPPER = '"$@"; rc=$?; echo $rc > "$PROVISION_RUN_DIR/rc.tmp" && mv "$PROVISION_RUN_DIR/rc.tmp" ' \
           '"$PROVISION_RUN_DIR/rc"; exit $rc'


def file_mode(spec):
    """A launch file's mode as an int, from its spec's "0644"-style string (default 0644)."""
    return int(str(spec.get("mode", "0644")), 8)


def plan_files(directory, files):
    """Return [(name, reason)] for files whose content or mode differs from what is on disk.

    files: {name: {"content": str, "mode": "0644"}}; reason is "missing", "content" or "mode".
    """
    todo = []
    for name in sorted(files):
        reason = file_differs(os.path.join(directory, name), files[name]["content"], mode=file_mode(files[name]))
        if reason:
            todo.append((name, reason))
    return todo


def launch_order(names, master=None):
    """The launchers' node order: the master (default: the first) is rank 0, the others keep their order."""
    names = [str(n) for n in names]
    master = master if master in names else (names[0] if names else None)
    return [n for n in names if n == master] + [n for n in names if n != master]


# ---- verify's check of a launch directory ---------------------------------------------------

# what the launchers stage writes on every node whatever the cluster (launch_files in
# plugins/filter/launchers.py; a unit test holds the two together)
LAUNCH_ENV = "launch.env"
HOSTFILES = ("hostfile.deepspeed", "hostfile.mpi", "hostfile.colossalai")
SCRIPTS = ("torchrun-static.sh", "deepspeed.sh", "mpirun.sh", "horovodrun.sh", "accelerate.sh")
ALWAYS = (LAUNCH_ENV,) + HOSTFILES + ("accelerate.yaml",) + SCRIPTS
LAUNCH_CHECK = "launch files"
LAUNCH_FIX = "ansible-playbook site.yml --tags launchers"


def parse_env(text):
    """launch.env's KEY=value lines (values shell-quoted, as launch_env writes them) -> {KEY: value}."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        try:
            words = shlex.split(value)
        except ValueError:
            words = [value]
        out[key.strip()] = words[0] if words else ""
    return out


def _names(names, limit=6):
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (" and %d more" % (len(names) - limit) if len(names) > limit else "")


def _membership(written, nodes, whose="the inventory"):
    """One line when the nodes a file lists are not WHOSE nodes (None when they are)."""
    if written == nodes:
        return None
    have, want = set(written), set(nodes)     # sets: a 4,096-node list is compared on every node
    added = [n for n in nodes if n not in have]
    removed = [n for n in written if n not in want]
    if added or removed or len(written) != len(nodes):
        change = "; ".join(part for part in (
            "not listed: %s" % _names(added) if added else "",
            "listed but not in %s: %s" % (whose, _names(removed)) if removed else "",
            "a node listed twice" if not (added or removed) else "") if part)
        return "%d node%s, %s has %d (%s)" % (len(written), "" if len(written) == 1 else "s", whose, len(nodes), change)
    rank = next(i for i, (a, b) in enumerate(zip(written, nodes)) if a != b)
    return "the nodes in another order (rank %d: %s; in %s: %s)" % (rank, written[rank], whose, nodes[rank])


def launch_checks(node, directory, found, expect):
    """The check `launch files` of one node, from what its launch directory holds.

    found: {file name: {"content": str, "mode": int} | {"error": str (naming the file)} | None (missing)}, or None when the
    directory does not exist. expect: the cluster as the inventory has it now: {"nodes": [names, in
    launch_order], "master_addr", "master_port", "ssh_port"}. A directory that is not there is a warning
    (a cluster whose jobs start another way has none); files missing, unreadable, or naming another set
    of nodes, another rendezvous or another ssh port than the inventory's fail: a job started with them
    waits for a node that is gone, leaves out one that joined, or meets at the wrong address."""
    if found is None:
        return [C.warned(LAUNCH_CHECK, "no launch files in %s (the hostfiles and launch scripts of every launcher)"
                         % directory, "%s (writes them on every node)" % LAUNCH_FIX, node=node)]
    nodes = [str(n) for n in expect.get("nodes") or []]
    problems, missing = [], []
    for name in ALWAYS:
        entry = found.get(name)
        if entry is None:
            missing.append(name)
        elif entry.get("error"):
            problems.append(entry["error"] if name in entry["error"] else "%s: %s" % (name, entry["error"]))
        elif name in SCRIPTS and not entry.get("mode", 0o755) & 0o100:
            problems.append("%s is not executable (mode %04o)" % (name, entry["mode"]))
    if missing:
        problems.insert(0, "missing: %s" % ", ".join(missing))
    listed = nodes
    env_file = found.get(LAUNCH_ENV)
    if env_file and "content" in env_file:
        env = parse_env(env_file["content"])
        listed = [n for n in env.get("PROVISION_NODES", "").split(",") if n]
        stale = _membership(listed, nodes)
        if stale:
            problems.append("%s lists %s" % (LAUNCH_ENV, stale))
        rendezvous = "%s:%s" % (env.get("MASTER_ADDR", "?"), env.get("MASTER_PORT", "?"))
        want = "%s:%s" % (expect.get("master_addr"), expect.get("master_port"))
        if expect.get("master_addr") and rendezvous != want:
            problems.append("rendezvous %s, the inventory's is %s" % (rendezvous, want))
        if expect.get("ssh_port") and env.get("PROVISION_SSH_PORT") != str(expect["ssh_port"]):
            problems.append("ssh port %s, the inventory's is %s" % (env.get("PROVISION_SSH_PORT", "?"),
                                                                    expect["ssh_port"]))
        if node in listed and env.get("NODE_RANK") != str(listed.index(node)):
            problems.append("NODE_RANK=%s, %s is rank %d of the nodes listed"
                            % (env.get("NODE_RANK", "?"), node, listed.index(node)))
    for name in HOSTFILES:
        entry = found.get(name)
        if not entry or "content" not in entry:
            continue
        try:
            names = [n for n, _slots in parse_hostfile(entry["content"])]
        except NodeListError as exc:
            problems.append("%s: %s" % (name, exc))
            continue
        # against launch.env's list: a stale directory is said once above; this names a hand-edited file
        differs = _membership(names, listed, LAUNCH_ENV if listed is not nodes else "the inventory")
        if differs:
            problems.append("%s lists %s" % (name, differs))
    data = {"dir": directory, "nodes": len(listed)}
    if problems:
        return [C.failed(LAUNCH_CHECK, "%s: %s" % (directory, "; ".join(problems)),
                         "%s (rewrites them on every node from the inventory; your own launch files belong "
                         "elsewhere: this directory is rewritten)" % LAUNCH_FIX, node=node, data=data)]
    return [C.passed(LAUNCH_CHECK, "%d files in %s for %d nodes (rank 0 %s), rendezvous %s:%s"
                     % (len(ALWAYS), directory, len(listed), listed[0] if listed else "-",
                        expect.get("master_addr"), expect.get("master_port")), node=node, data=data)]


# ---- job control ---------------------------------------------------------------------------

def run_dir(runs_dir, run_id):
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise ValueError("bad run id %r" % run_id)
    return os.path.join(runs_dir, run_id)


def start_job(runs_dir, run_id, argv, chdir=None, env=None):
    """Start ARGV detached (own session: survives the Ansible connection, killable as a group)."""
    rdir = run_dir(runs_dir, run_id)
    os.makedirs(rdir, mode=0o700, exist_ok=False)
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PROVISION_RUN_DIR"] = rdir
    full_env["PYTHONUNBUFFERED"] = "1"
    with open(os.path.join(rdir, "out.log"), "wb") as log, open(os.devnull, "rb") as null:
        # default: the user's home (the module's own cwd is a temporary directory Ansible removes)
        proc = subprocess.Popen(["/bin/sh", "-c", _WRAPPER, "sh"] + list(argv), stdin=null, stdout=log,
                                stderr=subprocess.STDOUT, cwd=chdir or os.path.expanduser("~"), env=full_env,
                                start_new_session=True, close_fds=True)
    with open(os.path.join(rdir, "pid"), "w", encoding="ascii") as handle:
        handle.write("%d\n" % proc.pid)
    return {"run_dir": rdir, "pid": proc.pid}


def _pid(rdir):
    text = read_text(os.path.join(rdir, "pid"), "", errors="replace").strip()
    return int(text) if text else None


def _alive(pid):
    if pid is None:
        return False
    try:
        # reap it if it is our child (only in tests: the module's process is gone by then)
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not alive
    stat = read_text("/proc/%d/stat" % pid, "", errors="replace")
    return not (stat and stat.rsplit(")", 1)[-1].split()[0] == "Z")


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _rc(rdir):
    text = read_text(os.path.join(rdir, "rc"), "", errors="replace").strip()
    return int(text) if text else None


def poll_job(runs_dir, run_id, offset=0, wait=0.0, max_bytes=65536):
    """New output since OFFSET, waiting up to WAIT seconds for output or the end of the job.

    Returns {"output", "offset", "running", "exit_status"}; exit_status is None while running
    (not `rc`: Ansible would take a non-zero rc for a failed task). A job whose process is gone
    without an rc file (killed) reports -1."""
    rdir = run_dir(runs_dir, run_id)
    if not os.path.isdir(rdir):
        raise FileNotFoundError("no run %s in %s" % (run_id, runs_dir))
    log = os.path.join(rdir, "out.log")
    deadline = time.monotonic() + max(0.0, float(wait))
    while True:
        rc = _rc(rdir)
        running = rc is None and _alive(_pid(rdir))
        size = os.path.getsize(log) if os.path.exists(log) else 0
        if size > offset or not running or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    with open(log, "rb") as handle:
        handle.seek(offset)
        data = handle.read(max_bytes)
    new_offset = offset + len(data)
    if not running and rc is None:
        rc = _rc(rdir)
        if rc is None:
            rc = -1
    more = new_offset < (os.path.getsize(log) if os.path.exists(log) else 0)
    return {"output": data.decode("utf-8", errors="replace"), "offset": new_offset,
            "running": running or more, "exit_status": None if (running or more) else rc}


def stop_job(runs_dir, run_id, grace=5.0):
    """SIGTERM the job's process group, SIGKILL after GRACE seconds. Returns True if it was running."""
    rdir = run_dir(runs_dir, run_id)
    pid = _pid(rdir)
    if not _alive(pid) or _rc(rdir) is not None:
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _group_alive(pid):
        _alive(pid)  # reaps our own child in tests
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if _rc(rdir) is None:
        with open(os.path.join(rdir, "rc"), "w", encoding="ascii") as handle:
            handle.write("%d\n" % (128 + signal.SIGTERM))
    return True


# ---------------------------------------------------------------- the check `launchers` (launch_files_info, launch_dir)

READ_LIMIT = 1 << 20   # a launch file is a few KiB; a larger one is not ours
# the check's arguments (the module launch_files_info's options)
CHECK_ARGS = {
    "path": {"type": "path", "required": True},
    "user": {"type": "str"},
    "nodes": {"type": "list", "elements": "str", "required": True},
    "master": {"type": "str"},
    "master_addr": {"type": "str"},
    "master_port": {"type": "int"},
    "ssh_port": {"type": "int"},
    "node": {"type": "str"},
    "fail": {"type": "bool", "default": False},
}


def read_launch_dir(path, pw, names=ALWAYS):
    """{name: {"content", "mode"} | {"error"} | None} of the files NAMES in PATH, or None when PATH is not a
    directory. Root reading another user's directory goes through its fds (files.Confined), never a link."""
    confined = [c for c in confinement(pw) if c.covers(path)] if pw is not None else []
    c = confined[0] if confined else None
    if c is not None:
        kind = c.kind(path)   # a link on the way raises UnsafeFile
        if kind == "link":
            raise UnsafeFile("%s is a symbolic link (not followed)" % path)
        if kind != "dir":
            return None
    elif not os.path.isdir(path):
        return None
    found = {}
    for name in names:
        target = os.path.join(path, name)
        try:
            data, st = c.read(target, READ_LIMIT) if c is not None else read_no_follow(target, READ_LIMIT)
        except UnsafeFile as exc:
            # the check's own fix (site.yml --tags launchers) replaces the file: the refusal's fix is left out
            found[name] = {"error": str(exc).split("; fix: ", 1)[0]}
            continue
        except OSError as exc:
            found[name] = {"error": "cannot read %s: %s" % (target, exc.strerror or exc)}
            continue
        found[name] = None if data is None else {
            "content": data.decode("utf-8", errors="replace"), "mode": stat.S_IMODE(st.st_mode)}
    return found


def run_check(p, module=None):
    """The check with CHECK_ARGS's parameters on this node -> {path, checks}; Stop with p["fail"] when files
    the launchers stage wrote (launch.env is there) fail it."""
    path, node = p["path"], p["node"]
    if path.startswith("~"):   # type path expanded ~user already: that user does not exist here
        return {"path": path, "checks": [C.failed(
            LAUNCH_CHECK, "%s: its user does not exist on this node" % path,
            "create the cluster user (ansible-playbook site.yml) or set cluster_user", node=node)]}
    try:
        pw = pwd.getpwnam(p["user"]) if p["user"] else None
    except KeyError:
        pw = None
    expect = {"nodes": launch_order(p["nodes"], p["master"]), "master_addr": p["master_addr"], "master_port": p["master_port"],
              "ssh_port": p["ssh_port"]}
    found = None
    try:
        found = read_launch_dir(path, pw)
    except UnsafeFile as exc:
        detail, fix = (str(exc).split("; fix: ", 1) + [""])[:2]
        checks = [C.failed(LAUNCH_CHECK, detail, fix or "make %s a directory of %s, with no link on the way"
                           % (path, p["user"] or "the cluster user"), node=node)]
    else:
        checks = launch_checks(node, path, found, expect)
    bad = C.failures(checks)
    # refused: files written for a cluster (launch.env there) that is not this one, or changed since; a
    # directory without launch.env is not the launchers stage's: the launcher names what it misses itself
    written = isinstance(found, dict) and isinstance(found.get(LAUNCH_ENV), dict) and "content" in found[LAUNCH_ENV]
    if p["fail"] and bad and written:
        raise Stop("%s: %s; fix: %s" % (bad[0]["check"], bad[0]["detail"], bad[0]["fix"]), path=path, checks=checks)
    return {"path": path, "checks": checks}
