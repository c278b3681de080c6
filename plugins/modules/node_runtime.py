#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: node_runtime
short_description: Read and check the node runtime limits that break multi-node training
description:
  - Reads, from /proc and /sys only, whether the node is a container and of which runtime
    (podman, docker, containerd/Kubernetes), whether systemd is PID 1, the size and free space
    of /dev/shm, whether the IPC and pid namespaces are the host's, the NVIDIA GPUs and driver
    libraries visible inside, and the RDMA devices.
  - Measures RLIMIT_MEMLOCK and RLIMIT_NOFILE as the cluster user's non-interactive session gets
    them; O(limits_source) says how, and the result says which way was used.
  - Decides C(shm), C(memlock) and C(nofile) checks (C({check, status, detail, fix})) with the
    rules of the node_runtime role README.
  - Outside containers it can write a pam_limits drop-in (O(manage_limits)) and grow /dev/shm
    (O(manage_shm)); inside a container it only raises soft limits up to the container's hard
    limits and names the run options that fix the rest.
  - Writes a per-node identity token (O(node_id_file)) that M(provision.cluster.ssh_landing) compares.
  - Read-only in check mode (C(provision verify)).
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  cluster_user:
    description: The training user whose session limits are measured and set.
    type: str
    default: root
  limits_source:
    description:
      - How the limits are measured. C(ssh) runs C(ssh <ssh_host> cat /proc/self/limits) as
        O(cluster_user) (what pdsh, DeepSpeed and mpirun get). C(login) runs
        C(runuser -l <user>) (PAM session with pam_limits, like sshd). C(module) reads this
        module's own limits. C(auto) tries ssh (when O(ssh_host) is set), then login, then module.
    type: str
    choices: [auto, ssh, login, module]
    default: auto
  ssh_host:
    description: The name under which this node reaches itself over ssh (the mesh's name for it).
    type: str
  ssh_timeout:
    description: Seconds for each ssh connection.
    type: int
    default: 10
  min_nofile:
    description: The minimum soft RLIMIT_NOFILE.
    type: int
    default: 16384
  shm_min:
    description: The smallest /dev/shm any node needs (e.g. C(1g)).
    type: str
    default: 1g
  shm_per_gpu:
    description: /dev/shm needed per GPU; required size is max(O(shm_min), O(shm_per_gpu) x GPUs).
    type: str
    default: 2g
  gpus:
    description: GPUs per node for the /dev/shm rule; detected from /dev/nvidiaN when omitted.
    type: int
  require_memlock_unlimited:
    description: C(auto) requires unlimited memlock only where RDMA devices exist; C(true) always; C(false) never.
    type: str
    choices: [auto, "true", "false"]
    default: auto
  manage_limits:
    description: Write O(limits_file) (bare metal/VM memlock and nofile; in containers only soft limits up to the hard ones).
    type: bool
    default: false
  limits_file:
    description: The pam_limits drop-in this module owns.
    type: path
    default: /etc/security/limits.d/90-provision.conf
  manage_shm:
    description: Outside containers, remount /dev/shm to the required size and record it in /etc/fstab.
    type: bool
    default: false
  fstab:
    description: The fstab to record the /dev/shm size in.
    type: path
    default: /etc/fstab
  on_container_limit:
    description: Status of a failed check that only the container runtime can fix (C(fail) or C(warn)).
    type: str
    choices: [fail, warn]
    default: fail
  container:
    description: Override the container detection (C(auto) trusts the evidence).
    type: str
    choices: [auto, "true", "false"]
    default: auto
  node_id:
    description: This node's inventory name; written with a random nonce to O(node_id_file).
    type: str
  node_id_file:
    description: The per-node identity token file.
    type: path
    default: /etc/provision/node-id
  cluster_address:
    description: The node's cluster address (goes into the identity the landing check compares).
    type: str
  fail_on_check:
    description: Fail (one line per failed check, with its fix) instead of only returning the checks.
    type: bool
    default: false
  warn_on_check:
    description:
      - Also show each check whose status is C(warn) as an Ansible warning (one per check, with its fix), as the
        node_runtime stage does; the checks are returned either way.
    type: bool
    default: false
notes:
  - Limits written to a pam_limits drop-in apply to new sessions; the module re-measures after writing.
  - Containers cannot raise their hard limits or /dev/shm from inside; the fix names the run options.
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
    details: Measures and reports; writes no drop-in, fstab or node-id file and remounts nothing.
  diff_mode:
    support: partial
    details: The limits drop-in, /etc/fstab and the node-id file; a /dev/shm remount shows only as a change.
"""

EXAMPLES = r"""
- name: Runtime limits of the training user, fixed where the node allows
  provision.cluster.node_runtime:
    cluster_user: "{{ cluster_user | default('root') }}"
    ssh_host: "{{ inventory_hostname }}"
    node_id: "{{ inventory_hostname }}"
    cluster_address: "{{ cluster_address }}"
    manage_limits: true
    fail_on_check: true

- name: Read-only (verify)
  provision.cluster.node_runtime:
    ssh_host: "{{ inventory_hostname }}"
  check_mode: true
  register: verify_r_runtime
"""

RETURN = r"""
checks:
  description: One result per check (shm, memlock, nofile) with C(measured) and C(required) values.
  returned: always
  type: list
  elements: dict
  sample: [{"check": "shm", "status": "fail", "detail": "/dev/shm is 64 MiB, need >= 1 GiB (max(1 GiB, 2 GiB x 0 GPU))",
            "fix": "re-create the container with `podman run --shm-size=1g (or --ipc=host to share the host's /dev/shm)`"}]
limits:
  description: The measured limits (bytes for memlock, null = unlimited), how they were measured, and the session's CapEff.
  returned: always
  type: dict
  sample: {"source": "ssh", "memlock": {"soft": 65536, "hard": 65536}, "nofile": {"soft": 1024, "hard": 4096}}
ansible_facts:
  description: C(node_runtime) with container, pid1, systemd, namespaces, shm, gpus, rdma, nr_open, limits and identity.
  returned: always
  type: dict
dropin:
  description: The pam_limits lines the module manages (empty when none are needed).
  returned: always
  type: list
"""

import grp
import os
import pwd
import subprocess
import uuid

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter, read_text
from ansible_collections.provision.cluster.plugins.module_utils.common.limits import (
    apply_container_policy, check_memlock, check_nofile, check_shm, fstab_with_shm, limits_dropin_lines,
    pam_limit_culprits, render_dropin, validate_dropin,
)
from ansible_collections.provision.cluster.plugins.module_utils.common.node_facts import (
    collect_snapshot, node_identity, parse_capeff, parse_limits, runtime_facts,
)
from ansible_collections.provision.cluster.plugins.module_utils.common.sizes import docker_size, parse_size
from ansible_collections.provision.cluster.plugins.module_utils.common.users import as_user

MEASURE = "cat /proc/self/limits /proc/self/status"


def _run(argv, timeout, **popen):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL, **popen)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 255, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def measure_limits(module, p):
    """-> (limits dict, capeff, source, notes)."""
    notes = []
    want = p["limits_source"]
    order = [want] if want != "auto" else (["ssh"] if p["ssh_host"] else []) + ["login", "module"]
    for source in order:
        if source == "ssh":
            if not p["ssh_host"]:
                notes.append("ssh: no ssh_host given")
                continue
            ssh = module.get_bin_path("ssh")
            if not ssh:
                notes.append("ssh: no ssh client")
                continue
            popen, error = as_user(p["cluster_user"])
            if error:
                notes.append("ssh: %s" % error)
                continue
            argv = [ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=%d" % p["ssh_timeout"], p["ssh_host"], MEASURE]
            rc, out, err = _run(argv, p["ssh_timeout"] + 10, **popen)
        elif source == "login":
            # Not as_user: a PAM login session on purpose (pam_limits and the rest of the session
            # stack apply, as sshd's do), which is what this source measures.
            runuser = module.get_bin_path("runuser")
            if not runuser:
                notes.append("login: no runuser")
                continue
            rc, out, err = _run([runuser, "-l", p["cluster_user"], "-c", MEASURE], 30)
        else:
            with open("/proc/self/limits") as fh, open("/proc/self/status") as fs:
                rc, out, err = 0, fh.read() + fs.read(), ""
        limits = parse_limits(out)
        if rc == 0 and "nofile" in limits:
            return limits, parse_capeff(out), source, notes
        notes.append("%s: %s" % (source, (err or out).strip().splitlines()[-1] if (err or out).strip() else "rc %d" % rc))
    return {}, None, "none", notes


def write_file(w, path, content):
    """content (None: no file) at path, a file made here 0644 (check mode and --diff: see FileWriter)."""
    if content is None:
        return w.remove(path)
    return w.write(path, content, mode=0o644, new_only=True, dir_mode=0o755)


def node_token(w, p, result):
    """'<inventory name> <nonce>', kept while the name matches."""
    current = (read_text(p["node_id_file"]) or "").strip()
    if not p["node_id"]:
        return current
    if current.split()[:1] == [p["node_id"]]:
        return current
    token = "%s %s" % (p["node_id"], uuid.uuid4().hex)
    if write_file(w, p["node_id_file"], token + "\n"):
        result["changed"] = True
    return current if w.module.check_mode else token


def pam_files(ours):
    """[(path, text)] of pam_limits' configuration, in its reading order (ours included, marked by path)."""
    dropins = os.path.dirname(ours)  # /etc/security/limits.d
    paths = [os.path.join(os.path.dirname(dropins), "limits.conf")]
    try:
        paths += [os.path.join(dropins, n) for n in sorted(os.listdir(dropins)) if n.endswith(".conf")]
    except OSError:
        pass
    texts = [(path, read_text(path, errors="replace")) for path in paths]
    return [(path, text) for path, text in texts if text is not None]


def user_groups(user):
    try:
        pw = pwd.getpwnam(user)
        return {grp.getgrgid(g).gr_name for g in os.getgrouplist(user, pw.pw_gid)}
    except (KeyError, OSError):
        return set()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster_user=dict(type="str", default="root"),
            limits_source=dict(type="str", default="auto", choices=["auto", "ssh", "login", "module"]),
            ssh_host=dict(type="str"),
            ssh_timeout=dict(type="int", default=10),
            min_nofile=dict(type="int", default=16384),
            shm_min=dict(type="str", default="1g"),
            shm_per_gpu=dict(type="str", default="2g"),
            gpus=dict(type="int"),
            require_memlock_unlimited=dict(type="str", default="auto", choices=["auto", "true", "false"]),
            manage_limits=dict(type="bool", default=False),
            limits_file=dict(type="path", default="/etc/security/limits.d/90-provision.conf"),
            manage_shm=dict(type="bool", default=False),
            fstab=dict(type="path", default="/etc/fstab"),
            on_container_limit=dict(type="str", default="fail", choices=["fail", "warn"]),
            container=dict(type="str", default="auto", choices=["auto", "true", "false"]),
            node_id=dict(type="str"),
            node_id_file=dict(type="path", default="/etc/provision/node-id"),
            cluster_address=dict(type="str"),
            fail_on_check=dict(type="bool", default=False),
            warn_on_check=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = {"changed": False, "notes": []}
    w = FileWriter(module)
    try:
        shm_min, shm_per_gpu = parse_size(p["shm_min"]), parse_size(p["shm_per_gpu"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))

    ldconfig = module.get_bin_path("ldconfig", opt_dirs=["/sbin", "/usr/sbin"])
    ld_out = _run([ldconfig, "-p"], 30)[1] if ldconfig else None
    snap = collect_snapshot(ldconfig_output=ld_out)
    facts = runtime_facts(snap)
    if p["container"] != "auto":
        facts["container"]["container"] = p["container"] == "true"
        facts["container"]["evidence"].append("container=%s set by the play" % p["container"])
    in_container = facts["container"]["container"]
    runtime = facts["container"]["runtime"]
    gpus = p["gpus"] if p["gpus"] is not None else facts["gpus"]["count"]
    require = p["require_memlock_unlimited"]
    memlock_wanted = facts["rdma"]["present"] if require == "auto" else require == "true"
    token = node_token(w, p, result)

    limits, capeff, source, notes = measure_limits(module, p)
    result["notes"] += notes

    dropin = []
    if p["manage_limits"]:
        try:
            dropin = limits_dropin_lines(p["cluster_user"], limits, in_container, p["min_nofile"],
                                         memlock_wanted, facts["nr_open"])
        except ValueError as exc:
            module.fail_json(msg=str(exc), **result)
        header = ("# Managed by provision (role node_runtime, module provision.cluster.node_runtime).\n"
                  "# Limits for the training user's sessions (pam_limits). Changes here are overwritten.\n")
        content = render_dropin(dropin, header) if dropin else None
        try:
            if content:
                validate_dropin(content)
            wrote = write_file(w, p["limits_file"], content)
        except (ValueError, OSError) as exc:
            module.fail_json(msg="%s: %s" % (p["limits_file"], exc), changed=result["changed"])
        if wrote:
            result["changed"] = True
            if not module.check_mode:
                limits, capeff, source, notes = measure_limits(module, p)

    if p["manage_shm"] and not in_container:
        need = max(shm_min, shm_per_gpu * gpus)
        shm = facts["shm"]
        if shm["size"] is not None and shm["size"] < need:
            result["changed"] = True
            if not module.check_mode:
                mount = module.get_bin_path("mount", required=True)
                rc, out, err = module.run_command([mount, "-o", "remount,size=%s" % docker_size(need), "/dev/shm"])
                if rc != 0:
                    module.fail_json(msg="remount of /dev/shm to %s failed: %s" % (docker_size(need), err.strip()), **result)
                facts["shm"] = runtime_facts(collect_snapshot())["shm"]
            fstab = read_text(p["fstab"], "")
            write_file(w, p["fstab"], fstab_with_shm(fstab, docker_size(need)))

    lim_json = {k: {"soft": v[0], "hard": v[1]} for k, v in limits.items() if k in ("memlock", "nofile")}
    lim_json.update({"source": source, "capeff": "%x" % capeff if capeff is not None else None})
    facts["limits"] = lim_json
    facts["gpus_for_rules"] = gpus
    ident = node_identity(snap, token)
    ident.update({"name": p["node_id"], "address": p["cluster_address"]})
    facts["identity"] = ident

    pam = pam_files(p["limits_file"])
    groups = user_groups(p["cluster_user"])
    # where no source measured them, the checks say why each failed (runuser as a user other than root, ...)
    source = source if limits else "; ".join(notes) or source
    checks = [
        check_shm(facts["shm"], gpus, in_container, runtime, shm_min, shm_per_gpu, p["manage_shm"],
                  facts["namespaces"]["host_ipc"]),
        check_memlock(limits, facts["rdma"], in_container, runtime, capeff, require, source, p["limits_file"],
                      p["manage_limits"],
                      pam_limit_culprits(pam, p["cluster_user"], groups, "memlock", None, p["limits_file"])),
        check_nofile(limits, p["min_nofile"], in_container, runtime, source, p["limits_file"], p["manage_limits"],
                     pam_limit_culprits(pam, p["cluster_user"], groups, "nofile", p["min_nofile"], p["limits_file"])),
    ]
    apply_container_policy(checks, in_container, p["on_container_limit"])
    result.update(checks=checks, limits=lim_json, dropin=[" ".join(x) for x in dropin],
                  ansible_facts={"node_runtime": facts})
    if module._diff:
        result["diff"] = w.diffs
    who = (p["node_id"] + ": ") if p["node_id"] else ""
    if p["warn_on_check"]:
        for c in checks:
            if c["status"] == "warn":
                module.warn("%s%s | %s | fix: %s" % (who, c["check"], c["detail"], c["fix"]))
    failed = [c for c in checks if c["status"] == "fail"]
    if p["fail_on_check"] and failed:
        module.fail_json(msg="; ".join("%s%s | fix: %s" % (who, c["detail"], c["fix"]) for c in failed),
                         changed=result["changed"], checks=checks, limits=lim_json)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
