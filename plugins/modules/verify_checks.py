#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: verify_checks
short_description: Run several check modules on one host at the same time
description:
  - An action plugin (it runs on the controller) that executes each module of O(checks) on the
    host, all at once over the same connection, and returns every module's result by name. One
    task instead of a chain of tasks, so the checks of C(provision verify) take as long as the slowest
    one, not their sum.
  - Meant for read-only checks; run it with C(check_mode=true), which every module then inherits.
  - A module that fails, or cannot reach the host, gives its own failed/unreachable result; the
    others still run. The task itself never fails because of a check.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  checks:
    description:
      - name -> C({module, args, enabled}). C(module) is the module's name (FQCN), C(args) its
        arguments, C(enabled) (default true) whether to run it.
    type: dict
    required: true
  reuse:
    description:
      - name -> an earlier result of that very check on this host (as C(register) held it), returned
        as it is, with C(reused=true), instead of running the module again. C(site.yml) passes the
        results its stages produced in the same run. A name that is not in O(checks) (a check that
        needs every node, run later) is returned too.
    type: dict
    default: {}
  parallel:
    description: How many modules run at the same time on the host.
    type: int
    default: 8
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
    details: Passed on to every module it runs (C(provision verify) runs it in check mode).
  diff_mode:
    support: none
    details: Each module's result is returned as it is, under RV(results).
"""

EXAMPLES = r"""
- name: Port checks, at the same time
  provision.cluster.verify_checks:
    checks:
      sshd: {module: provision.cluster.port_facts, args: {ports: [2222], expect: listening}}
      rendezvous: {module: provision.cluster.port_facts, args: {ports: [29500], expect: free}}
  check_mode: true
  register: checks
"""

RETURN = r"""
results:
  description: name -> the module's own result (as C(register) would hold it), for every check run.
  returned: always
  type: dict
  sample: {"sshd": {"changed": false, "checks": [{"check": "port 2222", "status": "pass"}]}}
"""
