#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: ssh_mesh_check
short_description: One row of the N x N SSH matrix - can this node ssh to every node (itself included)?
description:
  - From the host it runs on, as O(user), runs C(ssh -o BatchMode=yes -o ConnectTimeout=N <name> hostname)
    to every node of O(nodes), the host itself included, all in parallel, with an overall time limit.
  - Uses exactly what a launcher uses (the user's ~/.ssh/config, known_hosts and key); never
    overrides host key checking, so an unknown or changed host key is a failed cell.
  - Each failed cell carries the class of the error (C(host_key_missing), C(host_key_changed),
    C(permission_denied), C(connection_refused), C(timeout), C(name_unresolvable), C(no_route),
    C(wrong_host), C(other)), ssh's own line, and the fix.
  - Read-only; runs the same in check mode (C(provision verify) calls it so). Never fails because
    of a cell; assert on RV(failed_cells) (the ssh_mesh role asserts the whole matrix).
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  nodes:
    description:
      - Targets, in node order. Each is a name or a dict with C(name) (what ssh is given, as a
        launcher would) and optionally C(hostname) (what the target must answer).
    type: list
    elements: raw
    required: true
  hostnames:
    description:
      - The hostname each target must answer, by name (the ssh_mesh stage passes those its ssh_identity read in
        this run); a target given as a dict with C(hostname) says its own. A target without one passes with
        any answer.
    type: dict
    default: {}
  source:
    description: Name of this node in the matrix (default its hostname).
    type: str
  user:
    description: Run ssh as this user (the cluster user). Default the user running the module.
    type: str
  connect_timeout:
    description: ssh ConnectTimeout, seconds (the ssh_mesh role and C(provision verify) pass C(ssh_mesh_check_connect_timeout)).
    type: int
    required: true
  timeout:
    description:
      - Overall limit for the whole row, seconds; cells still running then are C(timeout) (the ssh_mesh role and
        C(provision verify) pass C(ssh_mesh_check_timeout)).
    type: int
    required: true
  retries:
    description:
      - How many more times a cell that timed out is tried (within O(timeout)); other errors are
        not retried (they do not go away by themselves).
    type: int
    default: 1
  command:
    description: Remote command; its output must be the target's hostname when that is known.
    type: str
    default: hostname
  landing:
    description:
      - Run the landing report of M(provision.cluster.ssh_landing) (node-id, hostname, boot id,
        local addresses) instead of O(command), check the hostname from it, and return each target's
        report in C(reports), so that the landing check can use these connections instead of its own.
    type: bool
    default: false
  landing_peers:
    description:
      - With O(landing), the identities of the nodes (C(node_runtime.identity) facts of an earlier run,
        from the fact cache). The landing check of M(provision.cluster.ssh_landing) is then decided from
        this row's reports for the peers this row logs in to, and returned as C(landing) when it covers each
        of them (their inventory names and hostnames are all in this row); otherwise C(landing) is null.
    type: list
    elements: dict
    default: []
  summary:
    description:
      - Also read this node's own identity (host public keys in O(host_keys_dir), O(user)'s public key
        O(key_file)) and its SSH files (known_hosts, authorized_keys, the O(block_name) block of
        ~/.ssh/config, O(hosts_file)) as fingerprints and names, returned as C(summary), so that the
        controller checks every pair against every node's real keys without logging in (provision verify).
    type: bool
    default: false
  block_name:
    description: The ssh_mesh role's managed block name (its C(ssh_mesh_block_name)).
    type: str
    default: cluster
  key_file:
    description: O(user)'s key file, relative to the home directory (the public key is C(KEY_FILE.pub)).
    type: str
    default: .ssh/id_ed25519
  hosts_file:
    description: The hosts file the ssh_mesh role writes its block into.
    type: path
    default: /etc/hosts
  host_keys_dir:
    description: Where sshd's host keys are.
    type: path
    default: /etc/ssh
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.INFO_MODULE]
"""

EXAMPLES = r"""
- name: This node's row of the SSH matrix
  provision.cluster.ssh_mesh_check:
    source: "{{ inventory_hostname }}"
    user: "{{ cluster_user }}"
    nodes: "{{ ansible_play_hosts }}"
    connect_timeout: "{{ lookup('provision.cluster.setting', 'ssh_mesh_check_connect_timeout') }}"
    timeout: "{{ lookup('provision.cluster.setting', 'ssh_mesh_check_timeout') }}"
  register: row

- name: Every cell green
  ansible.builtin.assert:
    that: row.failed_cells | length == 0
    fail_msg: "{{ row.failed_cells | map(attribute='line') | join('; ') }}"
"""

RETURN = r"""
row:
  description: One cell per target, in node order.
  returned: always
  type: list
  elements: dict
  contains:
    source: {description: This node., type: str, sample: node1}
    target: {description: The name ssh was given., type: str, sample: node2}
    ok: {description: Logged in and the right host answered., type: bool}
    error: {description: "Error class, empty when ok.", type: str, sample: permission_denied}
    detail:
      description: ssh's line for the error (or the answer).
      type: str
      sample: "root@10.89.77.12: Permission denied (publickey)."
    fix: {description: What to do., type: str}
    seconds: {description: How long the cell took (all attempts)., type: float}
    attempts: {description: How many ssh calls the cell took (more than 1 after a retried timeout)., type: int}
    line: {description: One line for a message., type: str, sample: "node1 -> node2: permission_denied: ..."}
cells:
  description: target -> C(ok) or the error class (a compact matrix row).
  returned: always
  type: dict
  sample: {node1: ok, node2: permission_denied}
failed_cells: {description: The cells that are not ok., returned: always, type: list, elements: dict}
checks:
  description:
    - One check per cell in the shape of C(provision verify) (C(check) is C(ssh SOURCE->TARGET)).
    - When this node's home, ~/.ssh or authorized_keys is writable by group or others, or owned by
      another user, one more check C(ssh files of USER on SOURCE) fails. sshd's StrictModes ignores
      the keys then, which the other nodes' cells only see as C(permission_denied).
  returned: always
  type: list
  elements: dict
reports:
  description: With O(landing), target -> the landing report it printed (for M(provision.cluster.ssh_landing)).
  returned: always
  type: dict
landing:
  description:
    - With O(landing) and O(landing_peers), the landing check's result (as M(provision.cluster.ssh_landing)
      returns it) when this row covers each of the peers it logs in to; else null.
  returned: always
  type: dict
summary:
  description:
    - With O(summary), C(identity) (host key and user key fingerprints, hostname), C(known_hosts)
      (pattern -> fingerprints), C(authorized_keys) (fingerprint -> options), C(ssh_config) (name ->
      hostname/port/user of the managed block), C(hosts) (name -> address), C(digest) (sha256 of those
      files as read; nodes with the same digest have the same files, compared with every node's keys once).
  returned: with summary
  type: dict
user:
  description: The user ssh ran as (O(user); empty for the module's own user).
  returned: always
  type: str
hostnames:
  description: O(hostnames) as given (the pdsh stage expects these hostnames from pdsh).
  returned: always
  type: dict
  sample: {node1: gpu-a01, node2: gpu-a02}
"""

import glob
import os
import pwd
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common.files import UnsafeFile, read_text, read_user_file
from ansible_collections.provision.cluster.plugins.module_utils.ssh.landing import (
    LANDING_SCRIPT, landing_checks, landing_pair, parse_landing_report)
from ansible_collections.provision.cluster.plugins.module_utils.ssh.mesh_audit import summarize
from ansible_collections.provision.cluster.plugins.module_utils.ssh.ssh_mesh import (
    classify_ssh_error, strict_modes_check, strict_modes_problems)
from ansible_collections.provision.cluster.plugins.module_utils.common.users import as_user


def run_cell(ssh, target, expect, p, deadline, popen_user):
    """One cell; a timeout (an overloaded node, a slow banner) is tried again while time is left."""
    cell = attempt(ssh, target, expect, p, deadline, popen_user)
    for n in range(p["retries"]):
        if cell["error"] != "timeout" or deadline - time.monotonic() <= p["connect_timeout"]:
            break
        spent = cell["seconds"]
        cell = attempt(ssh, target, expect, p, deadline, popen_user)
        cell.update(seconds=round(cell["seconds"] + spent, 3), attempts=n + 2)
    return cell


def attempt(ssh, target, expect, p, deadline, popen_user):
    start = time.monotonic()
    argv = [ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=%d" % p["connect_timeout"],
            "-o", "ConnectionAttempts=1", target, p["command"]]
    remaining = max(0.5, deadline - start)
    timed_out = False
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=remaining, check=False, **popen_user)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        timed_out, rc = True, -1
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    cell = {"source": p["source"], "target": target, "ok": False, "error": "", "detail": "", "fix": "",
            "seconds": round(time.monotonic() - start, 3), "attempts": 1}
    answer = out.strip().splitlines()[-1].strip() if out.strip() else ""
    if rc == 0 and not timed_out and p["landing"]:
        try:
            cell["report"] = out
            answer = parse_landing_report(out)["hostname"]
        except ValueError as exc:
            cell.update(error="other", detail="%s: %s" % (target, exc), fix="run `ssh %s` by hand" % target)
            rc = None
    if rc == 0 and not timed_out:
        if expect and (p["command"] == "hostname" or p["landing"]) and answer.split(".")[0] != expect.split(".")[0]:
            cell.update(error="wrong_host", detail="%s answered as %s, expected %s" % (target, answer, expect),
                        fix="two nodes share a name or address: fix cluster_address / /etc/hosts")
        else:
            cell.update(ok=True, detail=answer)
    elif rc is None:
        pass
    elif rc != 255 and not timed_out and not err.strip():
        cell.update(error="other", detail="remote command exited %d" % rc, fix="run `ssh %s` by hand" % target)
    else:
        cls, line, fix = classify_ssh_error(err, rc, timed_out)
        cell.update(error=cls, detail=line, fix=fix)
    cell["line"] = "%s -> %s: %s" % (p["source"], target, "ok" if cell["ok"] else "%s: %s" % (cell["error"], cell["detail"]))
    return cell


def landing_from_reports(source, peers, reports):
    """ssh_landing's result from this row's reports, when they cover every peer's names; else None."""
    if not peers:
        return None
    pairs = []
    for peer in peers:
        for alias in dict.fromkeys(a for a in (peer.get("name"), peer.get("hostname")) if a):
            if alias not in reports:
                return None
            try:
                pair = landing_pair(alias, peer, reports[alias])
            except ValueError:
                return None
            pairs.append(dict(pair, from_mesh=True))
    return {"changed": False, "checks": landing_checks(source, pairs), "pairs": pairs}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="list", elements="raw", required=True),
            source=dict(type="str"),
            user=dict(type="str"),
            connect_timeout=dict(type="int", required=True),
            timeout=dict(type="int", required=True),
            command=dict(type="str", default="hostname"),
            retries=dict(type="int", default=1),
            landing=dict(type="bool", default=False),
            landing_peers=dict(type="list", elements="dict", default=[]),
            hostnames=dict(type="dict", default={}),
            summary=dict(type="bool", default=False),
            block_name=dict(type="str", default="cluster"),
            key_file=dict(type="str", default=".ssh/id_ed25519"),
            hosts_file=dict(type="path", default="/etc/hosts"),
            host_keys_dir=dict(type="path", default="/etc/ssh"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    p["source"] = p["source"] or socket.gethostname()
    if p["landing"]:
        p["command"] = LANDING_SCRIPT
    targets = []
    hostnames = p["hostnames"] or {}
    for node in p["nodes"]:
        name = str(node.get("name")) if isinstance(node, dict) else str(node)
        given = node.get("hostname") if isinstance(node, dict) else None
        targets.append((name, str(given or hostnames.get(name) or "")))
    ssh = module.get_bin_path("ssh", required=True)
    popen_user, error = as_user(p["user"])
    if error:
        module.fail_json(msg=error)
    deadline = time.monotonic() + p["timeout"]
    with ThreadPoolExecutor(max_workers=max(1, min(64, len(targets)))) as pool:
        futures = [pool.submit(run_cell, ssh, name, expect, p, deadline, popen_user) for name, expect in targets]
        row = [f.result() for f in futures]
    reports = {c["target"]: c.pop("report") for c in row if "report" in c}
    # the peers of this row (a ring's reports cannot prove the nodes it does not log in to)
    names = {target[0] for target in targets}
    peers = [pe for pe in p["landing_peers"] if str(pe.get("name")) in names]
    landing = landing_from_reports(p["source"], peers, reports) if p["landing"] else None
    failed = [c for c in row if not c["ok"]]
    checks = [{"check": "ssh %s->%s" % (c["source"], c["target"]), "status": "pass" if c["ok"] else "fail",
               "detail": c["detail"], "fix": c["fix"]} for c in row]
    # the other half of a permission_denied cell: this node's own files, as its sshd judges them
    pw = pwd.getpwnam(p["user"]) if p["user"] else pwd.getpwuid(os.getuid())
    entries = []
    for path in (pw.pw_dir, os.path.join(pw.pw_dir, ".ssh"), os.path.join(pw.pw_dir, ".ssh", "authorized_keys")):
        try:
            st = os.stat(path)
        except OSError:
            continue
        entries.append((path, st.st_uid, st.st_mode))
    problems = strict_modes_problems(pw.pw_uid, entries)
    if problems:
        checks.append(strict_modes_check(p["source"], pw.pw_name, pw.pw_dir, problems))
    extra = {}
    if p["summary"]:
        ssh_dir = os.path.join(pw.pw_dir, ".ssh")
        key_file = p["key_file"] if os.path.isabs(p["key_file"]) else os.path.join(pw.pw_dir, p["key_file"])
        host_keys = [read_text(k, "").strip() for k in sorted(glob.glob(os.path.join(p["host_keys_dir"], "ssh_host_*_key.pub")))]

        def mine(path):
            # the user's files: root reads them through the home's fds, never through a link planted there
            try:
                return read_user_file(pw, path, "")
            except UnsafeFile as exc:
                checks.append({"check": "ssh files of %s on %s" % (pw.pw_name, p["source"]), "status": "fail",
                               "detail": str(exc).split("; fix: ", 1)[0],
                               "fix": str(exc).split("; fix: ", 1)[-1]})
                return ""

        extra["summary"] = summarize(host_keys, mine(key_file + ".pub").strip(), socket.gethostname(),
                                     mine(os.path.join(ssh_dir, "known_hosts")),
                                     mine(os.path.join(ssh_dir, "authorized_keys")),
                                     mine(os.path.join(ssh_dir, "config")),
                                     read_text(p["hosts_file"], ""), p["block_name"])
    module.exit_json(changed=False, row=row, cells={c["target"]: "ok" if c["ok"] else c["error"] for c in row},
                     failed_cells=failed, checks=checks, reports=reports, user=p["user"] or "", landing=landing,
                     hostnames=hostnames,
                     **extra)


if __name__ == "__main__":
    main()
