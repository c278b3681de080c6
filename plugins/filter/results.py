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


from ansible_collections.provision.cluster.plugins.module_utils.ssh.become import become_problem
from ansible_collections.provision.cluster.plugins.module_utils.verify.checks import fail_line
from ansible_collections.provision.cluster.plugins.module_utils.ssh.known_hosts import proxy_of
from ansible_collections.provision.cluster.plugins.module_utils.verify.verify_report import unreachable


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


def unreachable_line(result, host, hostvars=None):
    """One line for a node a task could not reach: why (a key refused by a node that answers, nothing
    listening, no answer, a frozen node, a changed host key) and how to get it back."""
    hv = hostvars or {}
    conn = {"connection": hv.get("ansible_connection"), "host": hv.get("ansible_host") or host,
            "port": hv.get("ansible_port"), "user": hv.get("ansible_user"),
            "proxy": proxy_of(hv.get("ansible_ssh_common_args"), hv.get("ansible_ssh_extra_args"))}
    cause, fix = unreachable(host, conn, (result or {}).get("msg") or "")
    head = cause if cause.startswith(host + " ") else "%s: %s" % (host, cause)
    return "%s; fix: %s (or leave it out for now: --limit '!%s')" % (head, fix, host)


def become_line(result, host, hostvars=None):
    """One line for a task that failed because become (sudo) did, naming what is wrong with it and the fix;
    '' when the failure is not become's."""
    res = result or {}
    message = " ".join(str(res.get(k) or "") for k in ("msg", "module_stderr", "module_stdout", "stderr"))
    hv = hostvars or {}
    found = become_problem(host, message, hv.get("ansible_user"), hv.get("ansible_become_method") or "sudo")
    if found is None:
        return ""
    return "%s: %s; fix: %s" % (host, found[0], found[1])


class FilterModule:
    def filters(self):
        return {"any_changed": any_changed, "failed_lines": failed_lines, "unreachable_line": unreachable_line,
                "become_line": become_line}
