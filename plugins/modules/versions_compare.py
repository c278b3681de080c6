#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: versions_compare
short_description: Compare the python_env_versions facts of all nodes
description:
  - Takes every node's C(python_env_versions) (from C(python_versions)) and finds the cells where
    nodes disagree (python, torch, torch.version.cuda, NCCL, gloo/nccl/mpi, each pinned extra).
  - Fails (when O(fail=true)) with a table of all nodes on the differing columns, the odd cells
    marked C(*), naming the nodes that differ. Run it once, on the controller.
  - Pure computation, done by its action plugin in the controller's own process (no module
    process is started); runs the same in check mode.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  versions:
    description: "C({node: python_env_versions})."
    type: dict
    required: true
  order:
    description: Node order for the table (inventory order); nodes listed here without versions are reported.
    type: list
    elements: str
    default: []
  fail:
    description: Fail when nodes differ.
    type: bool
    default: true
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.INFO_MODULE]
"""

EXAMPLES = r"""
- name: Same versions everywhere
  provision.cluster.versions_compare:
    versions: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'python_env_versions'))) }}"
    order: "{{ ansible_play_hosts }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
ok:
  description: All nodes agree.
  returned: always
  type: bool
differing_hosts:
  description: Nodes whose values differ from the majority.
  returned: always
  type: list
differing_columns:
  description: The columns where nodes disagree.
  returned: always
  type: list
table:
  description: The table (empty when ok).
  returned: always
  type: str
check:
  description: The verify contract (check, status, detail, fix).
  returned: always
  type: dict
"""

# The work is done by plugins/action/versions_compare.py (module_utils.common.python_env.compare_outcome);
# this file documents the module for ansible-doc.
