#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: verify_report
short_description: Build the verify document from every node's checks, on the controller
description:
  - An action plugin (plugins/action/verify_report.py; this file only documents it), run once on the
    controller (C(delegate_to=localhost), C(run_once=true)) at the end of C(playbooks/verify.yml). It
    reads every node's M(provision.cluster.verify_node) results (C(verify_node_result),
    C(verify_peers_result)), names the nodes that could not be reached with the cause and the fix,
    adds the inventory's problems as failed C(inventory) checks, runs the cluster-wide checks of the
    check catalog (versions equal, GPU counts, RDMA link layers and rates, the same platform on every
    node, every pair's SSH files), compares the all-reduce with the cluster's baseline, and returns
    the document that C(provision verify --json) prints (schema 1).
  - It changes nothing on any node. With O(save_baseline) it writes the baseline file on the controller.
version_added: "0.2.0"
author: provision developers (!UNKNOWN)
options:
  select:
    description: The check names, as given to M(provision.cluster.verify_node).
    type: list
    elements: str
  smoke:
    description: The all-reduce ran (its result, C(allreduce_smoke_result) of the first node, goes into the document).
    type: bool
    default: false
  in_site:
    description: As M(provision.cluster.verify_node)'s O(provision.cluster.verify_node#module:in_site).
    type: bool
    default: false
  stats:
    description: Also hand the document to Ansible's custom stats as C(provision_verify) (how the CLI reads it).
    type: bool
    default: true
  baseline:
    description: The baseline file on the controller; the all-reduce's figures are compared with it when it exists.
    type: path
  save_baseline:
    description: Add this run's all-reduce figures to O(baseline) (a failed run is never saved).
    type: bool
    default: false
  baseline_tolerance:
    description:
      - How far (a fraction) busbw may fall below the baseline at a bandwidth-bound size before it fails;
        unset, C(verify_baseline_tolerance) (the verify role's defaults).
    type: float
  baseline_link_tolerance:
    description:
      - How far (a fraction) one link's TCP figure may fall below the baseline before it fails; unset,
        C(verify_baseline_link_tolerance).
    type: float
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.FLOW]
attributes:
  action:
    support: full
  async:
    support: none
  check_mode:
    support: full
    details: Reads the other tasks' results; changes nothing on the nodes.
  diff_mode:
    support: N/A
    details: It changes nothing on the nodes.
"""

EXAMPLES = r"""
- name: Build the report
  provision.cluster.verify_report:
    select: "{{ verify_select | default(omit) }}"
    smoke: "{{ lookup('provision.cluster.setting', 'verify_smoke') }}"
  delegate_to: localhost
  run_once: true
  register: verify_report_result
"""

RETURN = r"""
document:
  description:
    - The verify document (schema 1) without the inventory, limit and duration the CLI adds - ok, selected,
      summary, nodes, checks, mesh, versions, allreduce (docs/verify.md).
  returned: always
  type: dict
fail_lines:
  description: One line per failed check (node, check, cause, fix), as the playbook fails with them.
  returned: always
  type: list
  elements: str
"""
