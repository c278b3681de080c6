#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: ssh_identity
short_description: A user's SSH key pair made on the host, plus the host's public host keys
description:
  - Creates C(~/.ssh) (0700) and, when missing, an SSH key pair for O(user) with C(ssh-keygen),
    on the host itself, owned by the user (private key 0600). The private key is never read.
  - When only the public half is missing it is derived again with C(ssh-keygen -y).
  - Returns the user's public key, the host's public host keys (C(/etc/ssh/ssh_host_*_key.pub))
    and its hostname, as one node record (RV(node)) that M(provision.cluster.ssh_mesh) takes for
    every node. O(name), O(address) and O(port) are passed through into that record.
  - Used for the nodes and, run locally, for the controller's own key.
  - Run as the user (the ssh_mesh role uses C(become_user)) it works with the user's own rights. Run
    as root for another user, C(ssh-keygen) runs as that user, and C(~/.ssh) and the key files are
    reached through the home's directory fds without following a link; a link at the key's path is
    refused in one line naming the file and the fix.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  user:
    description: The account owning the key. Default is the user the module runs as.
    type: str
  key_file:
    description: Private key path, relative to the user's home unless absolute.
    type: str
    default: .ssh/id_ed25519
  key_type:
    description: Key type for a new key.
    type: str
    choices: [ed25519, ecdsa, rsa]
    default: ed25519
  comment:
    description: Comment of a new key. Default C(user@hostname).
    type: str
  name:
    description: The node's inventory name, copied into RV(node).
    type: str
  address:
    description: Where peers reach the node (cluster_address), copied into RV(node).
    type: str
  port:
    description: The node's cluster sshd port, copied into RV(node).
    type: int
  aliases:
    description: More known_hosts host patterns for this node (e.g. C([public-ip]:22)), copied into RV(node).
    type: list
    elements: str
    default: []
  host_keys_dir:
    description: Where the host's public host keys are.
    type: path
    default: /etc/ssh
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
    details: Reports a key pair that would be made (RV(public_key) is empty then) and makes none.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Key pair of the cluster user, made on the node
  provision.cluster.ssh_identity:
    user: "{{ cluster_user }}"
    name: "{{ inventory_hostname }}"
    address: "{{ cluster_address }}"
    port: "{{ sshd_port }}"
  register: identity

- name: The controller's key (made on the controller when missing)
  provision.cluster.ssh_identity:
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
public_key: {description: The user's public key line., returned: always, type: str, sample: "ssh-ed25519 AAAAC3... root@node1"}
key_file: {description: Absolute path of the private key (never read)., returned: always, type: str}
home: {description: The user's home., returned: always, type: str, sample: /home/train}
generated: {description: A new key pair was made., returned: always, type: bool}
node:
  description: The node record for M(provision.cluster.ssh_mesh).
  returned: always
  type: dict
  contains:
    name: {description: O(name) (or the hostname)., type: str}
    hostname: {description: The host's hostname., type: str}
    address: {description: O(address) (or the hostname)., type: str}
    port: {description: O(port)., type: int}
    user: {description: The key's owner., type: str}
    user_key: {description: RV(public_key)., type: str}
    host_keys: {description: The host's public host keys (type and base64)., type: list, elements: str}
    aliases: {description: O(aliases)., type: list, elements: str}
"""

import glob
import os
import pwd
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter, UnsafeFile, confinement, read_text
from ansible_collections.provision.cluster.plugins.module_utils.ssh.ssh_mesh import ensure_keypair, normalize_key, user_runner


def host_public_keys(directory):
    keys = []
    for path in sorted(glob.glob(os.path.join(directory, "ssh_host_*_key.pub"))):
        key = normalize_key(read_text(path, "").strip())
        if key:
            keys.append(key)
    return keys


def main():
    module = AnsibleModule(
        argument_spec=dict(
            user=dict(type="str"),
            key_file=dict(type="str", default=".ssh/id_ed25519"),
            key_type=dict(type="str", choices=["ed25519", "ecdsa", "rsa"], default="ed25519"),
            comment=dict(type="str"),
            name=dict(type="str"),
            address=dict(type="str"),
            port=dict(type="int"),
            aliases=dict(type="list", elements="str", default=[]),
            host_keys_dir=dict(type="path", default="/etc/ssh"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        pw = pwd.getpwnam(p["user"]) if p["user"] else pwd.getpwuid(os.getuid())
    except KeyError:
        module.fail_json(msg="user %s does not exist: create it (ssh_mesh_create_user: true)" % p["user"])
    hostname = socket.gethostname()
    keygen = module.get_bin_path("ssh-keygen", required=True)
    # root making another user's key: ssh-keygen runs as that user, the files go through the home's fds
    confined = (confinement(pw) or [None])[0]
    try:
        key_file, changed, generated = ensure_keypair(user_runner(pw) if confined else module.run_command, keygen, pw,
                                                      p["key_file"], p["key_type"],
                                                      p["comment"] or "%s@%s" % (pw.pw_name, hostname),
                                                      module.check_mode, confined=confined)
        public_key = FileWriter(module, confine=[confined] if confined else []).read_text(key_file + ".pub").strip()
    except (RuntimeError, UnsafeFile) as exc:
        module.fail_json(msg=str(exc))

    node = {
        "name": p["name"] or hostname,
        "hostname": hostname,
        "address": p["address"] or hostname,
        "port": p["port"],
        "user": pw.pw_name,
        "user_key": public_key,
        "host_keys": host_public_keys(p["host_keys_dir"]),
        "aliases": p["aliases"],
    }
    module.exit_json(changed=changed, generated=generated, public_key=public_key, key_file=key_file,
                     home=pw.pw_dir, node=node)


if __name__ == "__main__":
    main()
