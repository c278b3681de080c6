# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
name: preflight_plan
short_description: Validate the cluster inventory and compute the cluster plan
description:
  - Reads, for every host of the cluster group, C(cluster_address) (default C(ansible_host), then the
    inventory name), C(sshd_port) (default 2222) and C(cluster_master_port) (default 29500) and returns
    C({problems, plan}); each problem is one line naming the host, the problem and the fix.
positional: groups
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  groups:
    description: The inventory names of the cluster group, in order.
    type: list
    required: true
  master:
    description: Inventory name of the master; empty picks the first host.
    type: str
  stages:
    description: All stage names; with run_tags/skip_tags decides which stages run.
    type: list
"""

EXAMPLES = r"""
result: "{{ hostvars | provision.cluster.preflight_plan(groups['cluster'], master='') }}"
"""

RETURN = r"""
_value:
  description: C(problems) (list of one-line strings) and C(plan) (nodes, master, master_addr, master_port, ssh_port, ranks).
  type: dict
"""

from ansible_collections.provision.cluster.plugins.module_utils.preflight import (
    DEFAULT_MASTER_PORT,
    DEFAULT_SSH_PORT,
    python_problem,
    validate_inventory,
)


def _running_stages(stages, run_tags, skip_tags):
    run = set(run_tags or ["all"])
    skip = set(skip_tags or [])
    out = []
    for stage in stages or []:
        if stage in skip:
            continue
        if "all" in run or stage in run:
            out.append(stage)
    return out


def preflight_plan(hostvars, groups, master="", master_port=None, stages=None, run_tags=None,
                   skip_tags=None, stage_min_nodes=None):
    hosts = []
    for name in groups or []:
        hv = hostvars[name]
        address = hv.get("cluster_address") or hv.get("ansible_host") or name
        hosts.append({
            "name": name,
            "address": address,
            "ssh_port": hv.get("sshd_port", DEFAULT_SSH_PORT),
            "master_port": hv.get("cluster_master_port", master_port or DEFAULT_MASTER_PORT),
        })
    problems, plan = validate_inventory(
        hosts, master=master or None,
        stages=_running_stages(stages, run_tags, skip_tags) if stages else None,
        stage_min_nodes=stage_min_nodes)
    if plan:
        plan["ranks"] = {n["name"]: n["rank"] for n in plan["nodes"]}
    return {"problems": problems, "plan": plan}


def preflight_python_problem(host, version_text):
    return python_problem(host, version_text) or ""


class FilterModule:
    def filters(self):
        return {
            "preflight_plan": preflight_plan,
            "preflight_python_problem": preflight_python_problem,
        }
