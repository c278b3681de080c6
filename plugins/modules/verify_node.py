#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: verify_node
short_description: Run one node's checks of the verify catalog, all at once
description:
  - An action plugin (plugins/action/verify_node.py; this file only documents it). For the checks
    selected by O(select), it takes each check's entry in the check catalog
    (plugins/module_utils/verify/catalog.py), builds the read-only module's arguments from the cluster plan
    (C(cluster_plan)) and the node's variables (each role's own defaults), and runs those modules on
    the node at the same time over its connection. The task takes as long as the slowest check.
  - Returns the checks as Check records (node, check, status, detail, fix). A module that fails or
    cannot reach the node is a failed record of that check, never a failed task.
  - C(playbooks/verify.yml) runs it once per node with O(phase=node), then once more with
    O(phase=peers) for the checks that read every node's results (ssh to every node lands in that
    node); M(provision.cluster.verify_report) then builds the document on the controller. It is
    meant for that playbook (C(provision verify)); run it with C(check_mode=true).
version_added: "0.2.0"
author: provision developers (!UNKNOWN)
options:
  select:
    description:
      - The check names (C(provision verify --list-checks)); C(reach) is always added. Default every
        check but C(smoke).
    type: list
    elements: str
  smoke:
    description: Also select the all-reduce check C(smoke) (run by the playbook, reported here).
    type: bool
    default: false
  phase:
    description:
      - C(node) runs the node's own checks; C(peers) the checks that need every node's C(node) result
        (registered as C(verify_node_result)).
    type: str
    choices: [node, peers]
    default: node
  reuse:
    description:
      - Inside C(site.yml), take a check's record from the stage that ran it through M(provision.cluster.check)
        in this run, with the arguments this task would pass, failing nowhere and changing nothing (the
        node's C(provision_checks) fact), instead of running it again.
    type: bool
    default: false
  in_site:
    description: Run as site.yml's verify pass (the checks of stages that this run skipped are left out).
    type: bool
    default: false
  parallel:
    description: How many check modules run at the same time on the node.
    type: int
    default: 8
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.FLOW]
attributes:
  action:
    support: full
  async:
    support: none
  check_mode:
    support: full
    details: Every check module runs read-only; the task changes nothing on the node.
  diff_mode:
    support: N/A
    details: It changes nothing on the node.
"""

EXAMPLES = r"""
- name: Run this node's checks, all at once
  provision.cluster.verify_node:
    select: [sshd, mesh, runtime]
  check_mode: true
  register: verify_node_result

- name: Checks that need every node's results
  provision.cluster.verify_node:
    phase: peers
    select: [runtime]
  check_mode: true
  register: verify_peers_result
"""

RETURN = r"""
checks:
  description: The node's Check records, in catalog order.
  returned: always
  type: list
  elements: dict
  sample: [{"node": "node1", "check": "sshd listening", "status": "pass", "detail": "port 2222 held by sshd", "fix": ""}]
data:
  description: What the cluster-wide checks need from this node (check name -> a small dict), for verify_report.
  returned: with O(phase=node)
  type: dict
ran:
  description: The catalog entries whose modules ran on the node.
  returned: always
  type: list
  elements: str
reused:
  description:
    - The catalog entries not run here, taken from a stage's record of this run (O(reuse)), or decided by
      another check's result (no GPU read, the GPU health skips).
  returned: always
  type: list
  elements: str
ansible_facts:
  description: C(gpu_health) and C(fabric_health), the hardware the health modules read (for the all-reduce's expected bandwidth).
  returned: when the GPU or fabric health check ran
  type: dict
"""
