# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Filters of the nccl_net and shell_env roles (logic in module_utils/net/netinfo.py and bashrc.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: nccl_net_agree
short_description: Make the nodes' NCCL network choices consistent
description:
  - Takes the per-node results of M(provision.cluster.nccl_net_facts) (in node order) and returns, per
    node, the environment to export after cluster-wide agreement (one RDMA transport on every rank),
    the reasons and the checks (disagreements NCCL cannot live with are warnings naming the nodes).
  - Also provides C(shell_env_merge) and C(shell_env_common).
positional: hosts
options:
  _input:
    description: The registered module results, one per host, in the order of O(hosts).
    type: list
    elements: dict
    required: true
  hosts:
    description: The inventory names, same order.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
agreed: "{{ ansible_play_hosts | map('extract', hostvars, 'nccl_net_facts') | list
            | provision.cluster.nccl_net_agree(ansible_play_hosts) }}"
"""

RETURN = r"""
_value:
  description: "{host: {env, reasons, checks}}"
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.provision.cluster.plugins.module_utils.common.bashrc import common_env, merge_env
from ansible_collections.provision.cluster.plugins.module_utils.net.netinfo import agree


def nccl_net_agree(results, hosts):
    results = list(results)
    hosts = list(hosts)
    if len(results) != len(hosts):
        raise AnsibleFilterError("nccl_net_agree: %d results for %d hosts" % (len(results), len(hosts)))
    return agree({h: r for h, r in zip(hosts, results) if r and "env" in r})


def shell_env_merge(facts, extra_vars=None):
    """Merge provision_env_* facts (sorted by name, then the user's extra vars) into one environment."""
    return merge_env(facts, extra_vars or {})


def shell_env_common(hosts, hostvars):
    """Variables whose value is the same on every node (what may go into ~/.deepspeed_env).

    Each node's merged environment is its __shell_env fact of this run, else (a node this run does not
    reach: --limit) what its stages exported (the cached __shell_env_exports) with its inventory's
    shell_env_extra_vars; nodes that never ran the role are left out.
    """
    envs = []
    for host in hosts:
        hv = hostvars[host] if host in hostvars else {}
        merged = hv.get("__shell_env")
        if not merged and hv.get("__shell_env_exports"):
            merged = merge_env([("exports", hv.get("__shell_env_exports"))], hv.get("shell_env_extra_vars") or {})
        if merged:
            envs.append(merged.get("env") or {})
    return common_env(envs)


class FilterModule:
    def filters(self):
        return {
            "nccl_net_agree": nccl_net_agree,
            "shell_env_merge": shell_env_merge,
            "shell_env_common": shell_env_common,
        }
