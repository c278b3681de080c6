# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
name: cluster_plan
short_description: Validate the cluster inventory and compute the cluster plan
description:
  - Reads, for every host of the cluster group, C(cluster_address) (default C(ansible_host), then the
    inventory name), C(sshd_port) (default 2222) and C(cluster_master_port) (default 29500) and returns
    C({problems, plan}); each problem is one line naming the host, the problem and the fix.
  - The preflight stage publishes RV(_value.plan) as the fact C(cluster_plan) that every stage reads.
positional: hosts
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  hosts:
    description: The inventory names of the cluster group, in order.
    type: list
    required: true
  master:
    description: Inventory name of the master; empty picks the first host.
    type: str
  user:
    description: The training user (C(cluster_user)).
    type: str
  group:
    description: The inventory group of the nodes (C(cluster_group)).
    type: str
  stages:
    description: All stage names; with run_tags/skip_tags decides which stages run.
    type: list
"""

EXAMPLES = r"""
result: "{{ hostvars | provision.cluster.cluster_plan(groups['cluster'], master='') }}"
"""

RETURN = r"""
_value:
  description: C(problems) (list of one-line strings) and C(plan) (nodes, hosts, address_of, ranks, master,
    master_addr, master_port, ssh_port, user, group).
  type: dict
"""

from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import (
    is_ssh_connection, plan_from_hostvars, python_problem)
from ansible_collections.provision.cluster.plugins.module_utils.common.machine import (
    interpreter_gone, machine_verdict, parse_identity, probe)
from ansible_collections.provision.cluster.plugins.module_utils.common.users import training_user_report


def preflight_python_problem(host, version_text):
    return python_problem(host, version_text) or ""


def preflight_training_user(hostvars, hosts, user, create=False):
    """{"errors", "warnings"} about the training user from each host's getent result (__preflight_user)."""
    entries = {}
    for host in hosts:
        res = (hostvars.get(host) or {}).get("__preflight_user") or {}
        if res.get("skipped") or res.get("unreachable") or not res:
            continue
        entries[host] = ((res.get("ansible_facts") or {}).get("getent_passwd") or {}).get(user)
    return training_user_report(entries, user, str(create).lower() in ("1", "true", "yes", "on"))


def machine_identity(raw_result):
    """provision_machine from the identity probe's raw result (None when it did not run or answer)."""
    res = raw_result or {}
    if res.get("unreachable") or res.get("skipped") or res.get("rc", 1) != 0:
        return None
    return parse_identity(res.get("stdout"))


def machine_probe(interpreter=None):
    """The sh command identity.yml runs with raw (module_utils/common/machine.py); INTERPRETER: the one the
    node's cached facts name (quoted here), whose presence it also reports."""
    return probe(interpreter)


def machine_interpreter_gone(raw_result):
    """True when the identity probe's raw result says the cached interpreter is gone from the node."""
    res = raw_result or {}
    return res.get("rc", 1) == 0 and interpreter_gone(res.get("stdout"))


class FilterModule:
    def filters(self):
        return {
            "cluster_plan": plan_from_hostvars,
            "preflight_python_problem": preflight_python_problem,
            "preflight_training_user": preflight_training_user,
            "machine_identity": machine_identity,
            "machine_verdict": machine_verdict,
            "machine_probe": machine_probe,
            "machine_interpreter_gone": machine_interpreter_gone,
            # ansible_connection -> logs in over SSH? (cluster_plan.SSH_CONNECTIONS: the one list)
            "is_ssh_connection": is_ssh_connection,
        }
