# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
name: any_changed
short_description: Did any of these hosts' registered results change something?
description:
  - True when, on any host of O(hosts), one of the variables O(names) (registered results or a stage's
    published C(<role>_result)) says C(changed). Hosts or variables that are absent count as unchanged.
positional: hosts
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  hosts:
    description: Inventory names.
    type: list
    elements: str
    required: true
  names:
    description: Variable names to look at on each host.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
fabric_changed: "{{ hostvars | provision.cluster.any_changed(ansible_play_hosts, ['sshd_result']) }}"
"""

RETURN = r"""
_value:
  description: Whether anything changed.
  type: bool
"""


from ansible_collections.provision.cluster.plugins.module_utils.checks import fail_line


def any_changed(hostvars, hosts, names):
    for host in hosts or []:
        if host not in hostvars:
            continue
        hv = hostvars[host]
        for name in names or []:
            value = hv.get(name)
            if isinstance(value, dict) and value.get("changed"):
                return True
    return False


def failed_lines(checks, node=None):
    """The failed Check records of a list, one line each: node: check: detail | fix: fix."""
    return [fail_line(dict(c, node=c.get("node") or node)) for c in checks or [] if c.get("status") == "fail"]


class FilterModule:
    def filters(self):
        return {"any_changed": any_changed, "failed_lines": failed_lines}
