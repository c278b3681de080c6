#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: ssh_mesh
short_description: authorized_keys, known_hosts, ~/.ssh/config and /etc/hosts for a set of nodes
description:
  - Takes the node records that M(provision.cluster.ssh_identity) returned on every node and
    writes, each as one managed block (C(# BEGIN provision.cluster NAME) ... C(# END ...)) that
    keeps every line outside it, written atomically and only when it changed
    - C(~/.ssh/authorized_keys) of O(user) with every node's user key (the node itself included)
    - C(~/.ssh/known_hosts) with every node's real host keys under its inventory name, hostname and
      address, in the C([name]:port) form for ports other than 22. Entries outside the block that
      name one of our nodes are removed (like C(ssh-keygen -R)), so a rebuilt node's old key goes.
    - C(~/.ssh/config) with a C(Host) entry per node (HostName, Port, User, IdentityFile,
      IdentitiesOnly, BatchMode) so that plain C(ssh node2) works for pdsh, DeepSpeed, mpirun
    - O(hosts_file) (C(/etc/hosts)) with C(address name hostname) per node, at the top of the file
      so that these names win over other lines (e.g. C(127.0.1.1 node1)).
  - O(authorize) adds more keys for more users (the controller's key for C(ansible_user)).
  - Run on the controller with only O(known_hosts_path) it records the nodes' host keys there.
  - Never sets StrictHostKeyChecking or any other host key override.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  nodes:
    description:
      - Node records (C(name), C(hostname), C(address), C(port), C(user), C(user_key), C(host_keys)),
        in node order, see M(provision.cluster.ssh_identity).
    type: list
    elements: dict
    required: true
  user:
    description: The account whose ~/.ssh files are written. Default the user running the module.
    type: str
  block_name:
    description: Name in the block markers; one block per cluster in shared files.
    type: str
    default: cluster
  identity_file:
    description: IdentityFile written into ~/.ssh/config (expanded by ssh on the node).
    type: str
    default: ~/.ssh/id_ed25519
  authorized_keys:
    description: Write the nodes' user keys into O(user)'s authorized_keys.
    type: bool
    default: true
  known_hosts:
    description: Write the nodes' host keys into O(user)'s known_hosts.
    type: bool
    default: true
  known_hosts_path:
    description: Write the host keys to this file instead (the controller's known_hosts).
    type: path
  known_hosts_extra_names:
    description: More host patterns per node name (e.g. how the controller reaches it).
    type: dict
    default: {}
  ssh_config:
    description: Write Host entries into O(user)'s ~/.ssh/config.
    type: bool
    default: true
  kex_algorithms:
    description:
      - Key exchange algorithms to prefer for the cluster's Host entries, in order. Those that the
        node's ssh allows (C(ssh -G) with the system configuration, so a crypto policy still applies)
        are put first in a C(KexAlgorithms) line, followed by the rest of ssh's own list; nothing
        else is added. Empty keeps ssh's default order (no line).
      - The ssh_mesh role prefers C(mlkem768x25519-sha256), then C(curve25519-sha256); on OpenSSH
        9.0-9.8 the default C(sntrup761x25519-sha512@openssh.com) costs about 90 ms of client CPU per
        login (measured on the lab's nodes, 100 ms against 12 ms), which every pdsh/mpirun fan-out,
        mesh check and landing check pays.
    type: list
    elements: str
    default: []
  hosts_file:
    description: Also write the names into this hosts file (usually C(/etc/hosts)); empty to skip.
    type: str
    default: ""
  identity_key_file:
    description:
      - Also make sure O(user) (default the user running the module) has this key pair, made here
        when missing, and return its public key as RV(public_key). Relative to the home.
      - The ssh_mesh role uses it on the controller (one task for its key and its known_hosts).
    type: str
  authorize:
    description:
      - More authorized keys, each C({user, keys, name}); written as their own block C(NAME-<name>)
        in that user's authorized_keys (e.g. the controller's key for C(ansible_user)).
    type: list
    elements: dict
    default: []
notes:
  - C(/etc/hosts) is replaced by rename; where it is a bind mount (Docker), it is rewritten in place.
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
  diff_mode:
    support: partial
    details: The content of every managed file; a key pair made for O(identity_key_file) and mode or owner fixes show only in RV(files).
"""

EXAMPLES = r"""
- name: Mesh files on every node
  provision.cluster.ssh_mesh:
    user: "{{ cluster_user }}"
    nodes: "{{ ansible_play_hosts | map('extract', hostvars, ['__ssh_mesh_identity', 'node']) | list }}"
    hosts_file: /etc/hosts
    authorize:
      - {user: root, name: controller, keys: ["ssh-ed25519 AAAA... me@laptop"]}

- name: The controller learns the nodes' host keys
  provision.cluster.ssh_mesh:
    nodes: "{{ nodes }}"
    known_hosts_path: ~/.cache/provision/labs/provlab/known_hosts
    authorized_keys: false
    known_hosts: false
    ssh_config: false
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
files:
  description: Every file looked at, with C(path) and C(changed).
  returned: always
  type: list
  elements: dict
  sample: [{path: /root/.ssh/known_hosts, changed: true}]
public_key:
  description: The public key of O(identity_key_file) (empty in check mode when it would be made).
  returned: when O(identity_key_file) is set
  type: str
removed_known_hosts:
  description: Stale known_hosts lines (outside the block) that named one of the nodes and were removed.
  returned: always
  type: list
  elements: str
"""

import os
import pwd
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter, UnsafeFile, confinement
from ansible_collections.provision.cluster.plugins.module_utils.ssh.ssh_mesh import (
    MarkerError,
    alias_ok,
    authorized_keys_lines,
    ensure_keypair,
    etc_hosts_lines,
    merge_block,
    node_problems,
    render_known_hosts,
    effective_kex,
    kex_preference,
    ssh_config_lines,
    user_runner,
)


def _owner(pw):
    return (pw.pw_uid, pw.pw_gid) if pw else None


def _pw(module, user):
    try:
        return pwd.getpwnam(user) if user else pwd.getpwuid(os.getuid())
    except KeyError:
        module.fail_json(msg="user %s does not exist" % user)


def _kex(module, preferred):
    """KexAlgorithms for the Host entries: ssh's own list (read with the system configuration only,
    not the user's, so the result does not depend on what an earlier run wrote) with the preferred
    ones first; [] when nothing is preferred, ssh is missing, or it allows none of them."""
    ssh = module.get_bin_path("ssh") if preferred else None
    if not ssh:
        return []
    system = "/etc/ssh/ssh_config" if os.path.exists("/etc/ssh/ssh_config") else "/dev/null"
    rc, out, _unused = module.run_command([ssh, "-G", "-F", system, "provision-kex-probe"])
    return kex_preference(preferred, effective_kex(out)) if rc == 0 else []


def _merged(w, path, merge):
    """merge(old text) for the file at path, read as the writer reads it; a stray marker raises with the file."""
    try:
        return merge(w.read_text(path))
    except MarkerError as exc:
        raise UnsafeFile("%s %s" % (path, exc)) from None


def _check_inputs(module, p):
    problems = []
    for node in p["nodes"]:
        missing = [k for k in ("name", "address", "port") if not node.get(k)]
        if missing:
            module.fail_json(msg="node record %r lacks %s" % (node.get("name"), ", ".join(missing)))
        problems += node_problems(node)
    for node_name, extra in (p["known_hosts_extra_names"] or {}).items():
        problems += ["%s: known_hosts name %r is not a host name, an address or [name]:port" % (node_name, e)
                     for e in extra or [] if not alias_ok(e)]
    identity = p["identity_file"]
    if not identity or any(c.isspace() or not c.isprintable() for c in identity):
        problems.append("identity_file %r has a space or a control character" % identity)
    if problems:
        module.fail_json(msg="; ".join(problems) + "; fix: correct the inventory (or the node's hostname), nothing "
                         "was written", problems=problems)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="list", elements="dict", required=True),
            user=dict(type="str"),
            block_name=dict(type="str", default="cluster"),
            identity_file=dict(type="str", default="~/.ssh/id_ed25519"),
            authorized_keys=dict(type="bool", default=True),
            known_hosts=dict(type="bool", default=True),
            known_hosts_path=dict(type="path"),
            known_hosts_extra_names=dict(type="dict", default={}),
            ssh_config=dict(type="bool", default=True),
            kex_algorithms=dict(type="list", elements="str", default=[], no_log=False),
            hosts_file=dict(type="str", default=""),
            authorize=dict(type="list", elements="dict", default=[]),
            identity_key_file=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    _check_inputs(module, p)
    try:
        result = run(module, p)
    except UnsafeFile as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


def run(module, p):
    nodes = p["nodes"]
    name = p["block_name"]
    pw = _pw(module, p["user"])
    # root writing another user's files: through that home's fds only, never following a link
    w = FileWriter(module, confine=confinement(pw))
    ssh_dir = os.path.join(pw.pw_dir, ".ssh")
    removed = []
    identity = {}
    if p["identity_key_file"]:
        confined = (confinement(pw) or [None])[0]
        try:
            key_file, key_changed, _unused = ensure_keypair(
                user_runner(pw) if confined else module.run_command, module.get_bin_path("ssh-keygen", required=True),
                pw, p["identity_key_file"], "ed25519", "%s@%s" % (pw.pw_name, socket.gethostname()), module.check_mode,
                confined=confined)
        except RuntimeError as exc:
            module.fail_json(msg=str(exc))
        w.files.append({"path": key_file, "changed": key_changed})
        identity["public_key"] = w.read_text(key_file + ".pub").strip()

    if p["authorized_keys"]:
        path = os.path.join(ssh_dir, "authorized_keys")
        body = authorized_keys_lines([n.get("user_key") for n in nodes])
        w.write(path, _merged(w, path, lambda old: merge_block(old, name, body)), 0o600, _owner(pw), dir_mode=0o700)
    for extra in p["authorize"]:
        epw = _pw(module, extra.get("user"))
        ew = FileWriter(module, confine=confinement(epw))
        path = os.path.join(epw.pw_dir, ".ssh", "authorized_keys")
        ew.ensure_dir(os.path.dirname(path), 0o700, _owner(epw))
        body = authorized_keys_lines(extra.get("keys") or [])
        block = "%s-%s" % (name, extra.get("name") or "extra")
        ew.write(path, _merged(ew, path, lambda old, b=block, k=body: merge_block(old, b, k)), 0o600, _owner(epw),
                 dir_mode=0o700)
        w.files += ew.files
        w.diffs += ew.diffs
    if p["known_hosts"] or p["known_hosts_path"]:
        path = p["known_hosts_path"] or os.path.join(ssh_dir, "known_hosts")
        text, gone = _merged(w, path, lambda old: render_known_hosts(old, name, nodes, p["known_hosts_extra_names"]))
        removed += gone
        w.write(path, text, 0o600 if p["known_hosts_path"] else 0o644, _owner(pw), dir_mode=0o700)
    if p["ssh_config"]:
        path = os.path.join(ssh_dir, "config")
        body = ssh_config_lines(nodes, pw.pw_name, p["identity_file"], _kex(module, p["kex_algorithms"]))
        w.write(path, _merged(w, path, lambda old: merge_block(old, name, body)), 0o600, _owner(pw), dir_mode=0o700)
    if p["hosts_file"]:
        path = p["hosts_file"]
        hosts_pw = pwd.getpwuid(0) if os.getuid() == 0 else None
        hw = FileWriter(module)
        hw.write(path, _merged(hw, path, lambda old: merge_block(old, name, etc_hosts_lines(nodes), position="start")),
                 0o644, _owner(hosts_pw), unsafe_writes=True, dir_mode=0o700)
        w.files += hw.files
        w.diffs += hw.diffs

    result = dict(changed=any(f["changed"] for f in w.files), files=w.files, removed_known_hosts=removed, **identity)
    if module._diff and w.diffs:
        result["diff"] = w.diffs
    return result


if __name__ == "__main__":
    main()
