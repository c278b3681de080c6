# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Plain-Python logic of the launch_dir and launch_job modules (no Ansible imports).

- plan_files(): which launch files must be (re)written, given what is on disk.
- Job control for `provision launch`: start a command detached in its own session with its
  output in a log file, poll the log from an offset (bounded wait), stop the process group.
  A run lives in RUNS_DIR/<run_id>/ : out.log, pid, rc (written when the command ends).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from ansible_collections.provision.cluster.plugins.module_utils.common.files import file_differs, read_text

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
