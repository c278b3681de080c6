#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to provision.cluster
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: allreduce_smoke
short_description: Start, collect and report a multi-node torch.distributed all-reduce smoke test
description:
  - C(state=port_free) checks on the master node that the rendezvous port is free and fails
    naming the process that holds it.
  - C(state=started) writes the worker (shipped inside this module) and its config into a run
    directory and starts it detached, in its own session, through C(bash -c) with the user's
    C(~/.bashrc) sourced in a clean environment, which is what a non-interactive ssh shell
    (and so a launcher) sees. Returns at once; run it on every node in one task.
  - The run is the cluster user's (O(user)). The module runs as that user (the role uses
    C(become_user)), so the workers get that user's C(~/.bashrc), never root's, and root runs nothing
    from the environment. Run as root for another O(user), C(started) refuses in one line.
  - C(state=finished) waits for that run with a bounded timeout, kills the whole process group
    when the timeout passes, makes sure no worker process is left, and returns what the ranks
    found plus the parsed NCCL log.
  - C(state=report) turns every node's C(finished) result into one verdict (table, busbw/TCP
    ratio, one line per failure cause with its fix) and writes it as JSON to O(path).
  - Never changes the node's configuration, so it reports C(changed=false). It starts processes and
    writes the run's files (config, the worker, rank logs, the result) in O(run_root), a directory
    private to the user the module runs as; in check mode it starts, waits for and kills nothing and
    writes nothing (C(started) and C(finished) are skipped, C(report) writes no file).
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  state:
    description: Which step to run.
    type: str
    required: true
    choices: [port_free, started, finished, report]
  port:
    description: Master port (C(port_free)).
    type: int
  config:
    description:
      - Worker configuration for C(started) (keys as in the role's defaults, e.g. C(master_addr),
        C(master_port), C(node_rank), C(nnodes), C(address), C(sizes), C(backend), C(rendezvous),
        C(timeout)).
    type: dict
  python:
    description: Interpreter with torch on the node (C(started)).
    type: str
    default: python3
  user:
    description:
      - The cluster user whose run this is (C(started)); the module must run as that user. Default the
        user the module runs as.
    type: str
  run_root:
    description:
      - Directory under which each run gets its own directory. It must be private to the user the module
        runs as (not a symlink, owned by that user, made with mode 0700 when missing, tightened to 0700
        when it is ours). The worker written there is then run, so a directory another user made first
        is refused.
    type: path
    default: ~/.cache/provision/allreduce
  run_id:
    description: Name of the run (C(started)); its directory is O(run_root)/O(run_id).
    type: str
  run_dir:
    description: Run directory returned by C(started) (C(finished)).
    type: path
  pid:
    description: Supervisor pid returned by C(started) (C(finished)); also its process group.
    type: int
  timeout:
    description:
      - Seconds C(finished) waits before killing the run (required with C(finished); the role passes
        C(allreduce_smoke_timeout) plus 10 s).
    type: float
  hosts:
    description: Per-host C(finished) results (C(report)), in the order of O(names); an empty
      dict for a host that produced none.
    type: list
    elements: dict
  names:
    description: Inventory names of the hosts in O(hosts) (C(report)).
    type: list
    elements: str
  holder:
    description: Who held the master port, if anyone (C(report)).
    type: str
  master_addr:
    description: Master address (C(report)).
    type: str
  master_port:
    description: Master port (C(report)).
    type: int
  min_busbw:
    description: Fail when busbw (GB/s) at the largest sizes is lower.
    type: float
  min_ratio:
    description: Fail when busbw / one-way TCP bandwidth is lower.
    type: float
  expected:
    description:
      - The all-reduce busbw the nodes' hardware should give (C(report)), as module_utils/allreduce/bandwidth.py's
        C(expected_busbw) returns it (the role computes it from the nodes' gpu_health, fabric_health and
        NCCL interface). The result reports busbw as a fraction of it and fails below O(min_fraction).
    type: dict
  min_fraction:
    description: Lowest acceptable fraction of O(expected) (default 0.8, see docs/health-checks.md).
    type: float
  path:
    description: Where C(report) writes the JSON result.
    type: path
  inputs:
    description:
      - What the run depended on (C(report)), that is the worker configuration and per node its address,
        versions, environment, GPUs and boot id. Stored with the result with their hash (C(fingerprint)), so
        that a later run can tell whether anything changed (filter C(provision.cluster.allreduce_smoke_reuse)).
    type: dict
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
    details: C(started) and C(finished) are skipped, C(port_free) kills no stale run, C(report) writes no file.
  diff_mode:
    support: N/A
    details: It changes no configuration.
"""

EXAMPLES = r"""
- name: Check the master port is free
  provision.cluster.allreduce_smoke:
    state: port_free
    port: 29500

- name: Start the workers on every node at once
  provision.cluster.allreduce_smoke:
    state: started
    run_id: smoke-1
    python: /opt/provision/venv/bin/python
    config: {master_addr: 10.0.0.1, master_port: 29500, node_rank: 0, nnodes: 2, address: 10.0.0.1}
  register: run

- name: Wait for them (bounded)
  provision.cluster.allreduce_smoke:
    state: finished
    run_dir: "{{ run.run_dir }}"
    pid: "{{ run.pid }}"
    timeout: 120
"""

RETURN = r"""
run_dir:
  description: The run directory on the node (C(started), C(finished)).
  returned: started, finished
  type: str
pid:
  description: Supervisor pid (= process group id) of the run.
  returned: started
  type: int
holders:
  description: Processes holding the port (C(port_free); from module_utils.net.ports, as port_facts).
  returned: port_free
  type: list
  elements: dict
status:
  description: The supervisor's status (state ok/failed/timeout, exit codes, environment seen).
  returned: finished
  type: dict
ranks:
  description: What each local rank found (rendezvous, sum check, sweep, TCP probe, error).
  returned: finished
  type: list
  elements: dict
nccl:
  description: The parsed NCCL_DEBUG log (network, interfaces, transports, warnings).
  returned: finished
  type: dict
leftover:
  description: Pids of the run still alive after it ended (killed); empty when clean.
  returned: finished
  type: list
  elements: int
result:
  description: The whole verdict (rows, tcp, ratio, failures, warnings, status, fingerprint, finished_at).
  returned: report
  type: dict
failure_lines:
  description: One line per failure cause (host, problem, fix); empty when the run passed.
  returned: report
  type: list
  elements: str
lines:
  description: The table as lines for the play output.
  returned: report
  type: list
  elements: str
"""

import inspect
import json
import os
import pwd
import shutil
import signal
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.provision.cluster.plugins.module_utils.allreduce import allreduce_worker
from ansible_collections.provision.cluster.plugins.module_utils.allreduce.allreduce_smoke import (
    fingerprint, parse_nccl_log, summarize, table_lines)
from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter, NotPrivate, private_dir, read_text
from ansible_collections.provision.cluster.plugins.module_utils.net.ports import port_facts
from ansible_collections.provision.cluster.plugins.module_utils.common.sizes import parse_size
from ansible_collections.provision.cluster.plugins.module_utils.common.spawn import start_process

LOG_KEEP = 200          # lines of each rank log returned to the controller
LOG_INTERESTING = ("WARN", "Error", "error", "Timeout", "timed out", "EADDRINUSE", "refused",
                   "Using network", "NET/", "Duplicate", "shared memory", "ibv_", "Exception")


def _run_root(module, p):
    """The private directory of the runs (a predictable /tmp path made by another user first would let
    that user swap the worker this module then runs as the cluster user)."""
    try:
        return private_dir(p["run_root"], create=not module.check_mode or os.path.isdir(p["run_root"]))
    except NotPrivate as exc:
        module.fail_json(msg="allreduce_smoke_run_root: %s" % exc)


def start(module, p):
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: the all-reduce is not started")
    me = pwd.getpwuid(os.getuid())
    if p.get("user") and p["user"] != me.pw_name:
        module.fail_json(msg=f"allreduce_smoke runs as the cluster user {p['user']}, not as {me.pw_name}: its workers "
                             f"would source {me.pw_name}'s ~/.bashrc and run as {me.pw_name}; fix: run the task as "
                             f"{p['user']} (become_user, as the allreduce_smoke role does)")
    run_root = _run_root(module, p)
    stale = _stale_kill(run_root)
    for name in os.listdir(run_root):  # keep only the newest runs' logs
        path = os.path.join(run_root, name)
        if os.path.isdir(path) and name != p["run_id"] and _older_than(path, 3600):
            shutil.rmtree(path, ignore_errors=True)
    run_dir = os.path.join(run_root, p["run_id"])
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir, mode=0o700)
    worker = os.path.join(run_dir, allreduce_worker.WORKER_NAME)
    with open(worker, "w", encoding="utf-8") as fh:
        fh.write(inspect.getsource(allreduce_worker))
    cfg = normalize_config(module, p["config"])
    cfg.update(run_dir=run_dir, run_id=p["run_id"])
    with open(os.path.join(run_dir, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(cfg, fh, indent=1)
    user = pwd.getpwuid(os.getuid())
    # A clean environment and ~/.bashrc sourced by a non-interactive bash: the part above the
    # "not interactive: return" guard applies, exactly what `ssh node cmd` gives a launcher.
    env = {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name, "SHELL": "/bin/bash",
           "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": os.environ.get("LANG", "C.UTF-8")}
    bash = module.get_bin_path("bash", required=True)
    argv = [bash, "-c", '[ -r "$HOME/.bashrc" ] && . "$HOME/.bashrc" >/dev/null 2>&1; exec "$@"',
            "allreduce_smoke", p["python"], worker, "supervise", os.path.join(run_dir, "config.json")]
    with open(os.path.join(run_dir, "supervisor.log"), "wb") as log:
        proc = start_process(argv, env=env, cwd=run_dir, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=log, start_new_session=True, close_fds=True)
    with open(os.path.join(run_root, "current.pid"), "w", encoding="ascii") as fh:
        fh.write(f"{proc.pid}\n")
    module.exit_json(changed=False, run_dir=run_dir, pid=proc.pid, stale_killed=stale)


_INTS = ("nproc_per_node", "master_port", "node_rank", "nnodes", "warmup", "iters", "gloo_devices",
         "chunk_bytes", "threads")
_FLOATS = ("tcp_probe_seconds", "rendezvous_timeout", "collective_timeout", "timeout")


def normalize_config(module, config):
    """Types fixed (templated values may arrive as strings) and sizes in bytes."""
    cfg = dict(config)
    try:
        for key in _INTS:
            if cfg.get(key) not in (None, ""):
                cfg[key] = int(cfg[key])
        for key in _FLOATS:
            if cfg.get(key) not in (None, ""):
                cfg[key] = float(cfg[key])
        cfg["sizes"] = [parse_size(s) for s in cfg.get("sizes") or ["64M"]]
    except (TypeError, ValueError) as exc:
        module.fail_json(msg=f"allreduce_smoke: bad setting: {exc}")
    for key in ("master_addr", "node_rank", "nnodes", "master_port"):
        if cfg.get(key) in (None, ""):
            module.fail_json(msg=f"allreduce_smoke: config.{key} is required")
    return cfg


def _older_than(path, seconds):
    try:
        return time.time() - os.stat(path).st_mtime > seconds
    except OSError:
        return False


def _group_pids(pgid):
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(name))
    return pids


def _kill_group(pgid):
    """SIGTERM then SIGKILL the process group; returns the pids that were alive."""
    alive = _group_pids(pgid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _group_pids(pgid):
            break
        try:
            os.killpg(pgid, sig)
        except OSError:
            break
        end = time.monotonic() + 2
        while time.monotonic() < end and _group_pids(pgid):
            time.sleep(0.05)
    return alive


def _stale_kill(run_root):
    """A previous run's supervisor still alive (controller died mid-run): kill its group."""
    try:
        with open(os.path.join(run_root, "current.pid"), encoding="ascii") as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        return []
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            ours = allreduce_worker.WORKER_NAME.encode() in fh.read()
    except OSError:
        return []
    return _kill_group(pid) if ours else []


def finish(module, p):
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no run to wait for")
    run_dir, pid = p["run_dir"], p["pid"]
    status_path = os.path.join(run_dir, "status.json")
    deadline = time.monotonic() + p["timeout"]
    killed = False
    while not os.path.exists(status_path):
        if time.monotonic() > deadline:
            killed = True
            break
        if not _group_pids(pid):  # the supervisor never got going (bad interpreter path, ...)
            time.sleep(0.2)
            break
        time.sleep(0.2)
    leftover = _kill_group(pid) if killed else []
    # the supervisor has written its status; give it a moment to exit, then sweep the group
    end = time.monotonic() + 3
    while not killed and _group_pids(pid) and time.monotonic() < end:
        time.sleep(0.05)
    leftover += _kill_group(pid)
    status = _load(status_path)
    if status is None and killed:
        status = {"state": "timeout", "timeout": p["timeout"]}
    elif status is None:
        log = read_text(os.path.join(run_dir, "supervisor.log"), "", errors="replace")
        status = {"state": "failed", "error": log.strip()[-400:]
                  or "the worker exited at once without a status"}
    ranks, logs = [], []
    for name in sorted(os.listdir(run_dir)):
        if name.startswith("rank") and name.endswith(".json"):
            ranks.append(_load(os.path.join(run_dir, name)) or {})
        elif name.endswith(".log"):
            logs.append(read_text(os.path.join(run_dir, name), "", errors="replace"))
    text = "\n".join(logs)
    nccl = parse_nccl_log(text)
    module.exit_json(changed=False, run_dir=run_dir, status=status, ranks=ranks,
                     nccl=nccl if nccl["lines"] else None, log=_excerpt(text),
                     leftover=sorted(set(leftover)))


def _excerpt(text):
    lines = text.splitlines()
    keep = [ln for ln in lines[:-LOG_KEEP] if any(k in ln for k in LOG_INTERESTING)][-LOG_KEEP:]
    return "\n".join(keep + lines[-LOG_KEEP:])


def _load(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def report(module, p):
    hosts = []
    for name, res in zip(p["names"], p["hosts"]):
        res = dict(res or {}, host=name)
        if not res.get("status"):
            res["missing"] = "no result: the host failed before the run or is unreachable"
        hosts.append(res)
    result = summarize(hosts, master_addr=p["master_addr"], master_port=p["master_port"],
                       holder=p.get("holder"), min_busbw=p.get("min_busbw"), min_ratio=p.get("min_ratio"),
                       expected=p.get("expected"), min_fraction=p.get("min_fraction"))
    if p.get("inputs") is not None:
        result.update(fingerprint=fingerprint(p["inputs"]), fingerprint_inputs=p["inputs"])
    result["finished_at"] = time.time()
    lines = table_lines(result)
    written = False
    if p.get("path") and not module.check_mode:
        FileWriter(module).write(p["path"], json.dumps(result, indent=1, sort_keys=True), dir_mode=0o700)
        written = True
    # the file is a report of this run, not configuration: no change to the node
    failure_lines = [f"{f['detail']} -- fix: {f['fix']}" for f in result["failures"]]
    module.exit_json(changed=False, result=result, lines=lines, failure_lines=failure_lines, written=written,
                     ansible_facts={"allreduce_smoke_result": result})


def port_free(module, p):
    if not module.check_mode:
        _stale_kill(p["run_root"])  # type path: ~ already expanded
    found = port_facts([p["port"]])[0]
    if found["held"]:
        who = "; ".join(f"pid {h['pid']}: {h['cmdline'][:100] or h['name']}" for h in found["processes"])
        kill = f"kill {' '.join(str(pid) for pid in found['pids'])}" if found["pids"] else "stop it"
        module.fail_json(msg=f"master port {found['summary']}{f' [{who}]' if who else ''}: {kill}, or set "
                             f"cluster_master_port to a free port", holders=found["processes"])
    module.exit_json(changed=False, holders=[])


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "required": True, "choices": ["port_free", "started", "finished", "report"]},
            "port": {"type": "int"},
            "config": {"type": "dict"},
            "python": {"type": "str", "default": "python3"},
            "user": {"type": "str"},
            "run_root": {"type": "path", "default": "~/.cache/provision/allreduce"},
            "run_id": {"type": "str"},
            "run_dir": {"type": "path"},
            "pid": {"type": "int"},
            "timeout": {"type": "float"},
            "hosts": {"type": "list", "elements": "dict"},
            "names": {"type": "list", "elements": "str"},
            "holder": {"type": "str"},
            "master_addr": {"type": "str"},
            "master_port": {"type": "int"},
            "min_busbw": {"type": "float"},
            "min_ratio": {"type": "float"},
            "expected": {"type": "dict"},
            "min_fraction": {"type": "float"},
            "path": {"type": "path"},
            "inputs": {"type": "dict"},
        },
        required_if=[("state", "port_free", ["port"]), ("state", "started", ["config", "run_id"]),
                     ("state", "finished", ["run_dir", "pid", "timeout"]),
                     ("state", "report", ["hosts", "names", "master_addr", "master_port"])],
        supports_check_mode=True,
    )
    p = module.params
    {"port_free": port_free, "started": start, "finished": finish, "report": report}[p["state"]](module, p)


if __name__ == "__main__":
    main()
