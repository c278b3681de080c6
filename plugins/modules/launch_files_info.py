#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: launch_files_info
short_description: Check a node's launch directory against the cluster the inventory has now
description:
  - Reads the launch directory the launchers role writes (O(path)). The files it writes on every node
    (C(launch.env), the DeepSpeed, MPI and Colossal-AI hostfiles, C(accelerate.yaml) and the launch
    scripts) must be there, the scripts executable.
  - Compares the nodes C(launch.env) lists (C(PROVISION_NODES)), its rendezvous (C(MASTER_ADDR),
    C(MASTER_PORT)) and ssh port with O(nodes), O(master_addr), O(master_port) and O(ssh_port); files
    written before a node joined or left, or before the master moved, fail with the command that rewrites
    them. Each hostfile must list the nodes C(launch.env) lists (a hand-edited one fails).
  - A node without the directory gives a warning (a cluster whose jobs start another way has none).
  - Root reading another user's directory (O(user)) reads through file descriptors and never follows a
    symbolic link the user could have planted; file contents are never returned.
  - The check C(launch files) of C(provision verify) (plugins/module_utils/common/launch.py).
version_added: "0.5.0"
author: provision developers (!UNKNOWN)
options:
  path:
    description: The launch directory (C(launchers_dir)); C(~user) is expanded on the node.
    type: path
    required: true
  user:
    description: The user the directory belongs to (the cluster user).
    type: str
  nodes:
    description: The cluster's node names, in inventory order.
    type: list
    elements: str
    required: true
  master:
    description: The master's name (rank 0 in every launch file; default the first of O(nodes)).
    type: str
  master_addr:
    description: The rendezvous address the inventory gives (cluster_plan.master_addr).
    type: str
  master_port:
    description: The rendezvous port (cluster_master_port).
    type: int
  ssh_port:
    description: The cluster's sshd port (sshd_port).
    type: int
  node:
    description: This node's inventory name (its rank and the records' node).
    type: str
  fail:
    description:
      - Fail, with the check's detail and fix as the message, when the check fails on files the launchers
        stage wrote (C(launch.env) is there); C(provision launch) does, before it starts a job. A
        directory without C(launch.env) (or none) does not fail here; the launcher names the file it misses.
    type: bool
    default: false
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.INFO_MODULE]
"""

EXAMPLES = r"""
- name: Check the launch files against the inventory
  provision.cluster.launch_files_info:
    path: "~train/.provision/launch"
    user: train
    nodes: [node1, node2, node3]
    master: node1
    master_addr: 10.0.0.11
    master_port: 29500
    ssh_port: 2222
    node: "{{ inventory_hostname }}"
  register: launch

- name: Refuse to start a job with a stale launch directory (one line with the fix)
  provision.cluster.launch_files_info:
    path: "~train/.provision/launch"
    nodes: "{{ cluster_plan.hosts }}"
    master: "{{ cluster_plan.master }}"
    master_addr: "{{ cluster_plan.master_addr }}"
    master_port: "{{ cluster_plan.master_port }}"
    ssh_port: "{{ cluster_plan.ssh_port }}"
    node: "{{ inventory_hostname }}"
    fail: true
"""

RETURN = r"""
checks:
  description: The check C(launch files), as C(provision verify) reports it.
  returned: always
  type: list
  elements: dict
  sample:
    - {"check": "launch files", "status": "fail", "node": "node1",
       "detail": "/home/train/.provision/launch: launch.env lists 2 nodes, the inventory has 3 (not listed: node3)",
       "fix": "ansible-playbook site.yml --tags launchers (rewrites them on every node from the inventory; ...)"}
path:
  description: The directory, expanded.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common import launch as L
from ansible_collections.provision.cluster.plugins.module_utils.verify.stage_check import exit_check


def main():
    exit_check(AnsibleModule(argument_spec=L.CHECK_ARGS, supports_check_mode=True), L.run_check)


if __name__ == "__main__":
    main()
