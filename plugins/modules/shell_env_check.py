#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: shell_env_check
short_description: Prove that non-interactive ssh sees the managed ~/.bashrc environment block
description:
  - Reads the user's C(~/.bashrc), finds the block the C(shell_env) role manages and the first
    "return unless interactive" guard (the parsing of M(provision.cluster.shell_env_block)), and
    fails when the block is missing or sits below the guard, where C(ssh node cmd), pdsh, mpirun
    and DeepSpeed never read it.
  - Then, as O(user), runs C(ssh -o BatchMode=yes O(ssh_host) printenv ...) the way launchers do
    and compares every variable the block exports (and every directory it prepends to C(PATH) or
    C(LD_LIBRARY_PATH)) with what that non-interactive session really has.
  - Returns what the session saw (RV(seen)), so that other checks can use the values in effect
    (e.g. the C(NCCL_SOCKET_IFNAME) that NCCL will really get).
  - Read-only; runs the same in check mode. Bounded by O(timeout).
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  user:
    description: The user whose C(~/.bashrc) is checked and who runs ssh (the cluster user).
    type: str
    default: root
  bashrc:
    description: The file to read; default C(~user/.bashrc).
    type: path
  ssh_host:
    description: The name under which this node reaches itself over ssh (its C(~/.ssh/config) entry).
    type: str
    required: true
  timeout:
    description: ssh ConnectTimeout, seconds; the whole ssh call is bounded by twice that.
    type: int
    default: 10
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.INFO_MODULE]
"""

EXAMPLES = r"""
- name: The env block is what non-interactive ssh sees
  provision.cluster.shell_env_check:
    user: "{{ cluster_user }}"
    ssh_host: "{{ inventory_hostname }}"
  check_mode: true
  register: env_check
"""

RETURN = r"""
checks:
  description: One C(env block) check in the shape of C(provision verify) (check, status, detail, fix).
  returned: always
  type: list
  elements: dict
  sample: [{"check": "env block", "status": "fail",
            "detail": "the block is at line 120 of /root/.bashrc, below the non-interactive guard at line 7: ssh/pdsh never read it",
            "fix": "ansible-playbook site.yml --tags shell_env (moves the block above the guard)"}]
expected:
  description: What the block sets, C(env) (name -> value) and C(path) (variable -> directories prepended).
  returned: always
  type: dict
seen:
  description: The same variables as the non-interactive ssh session has them (absent ones are null).
  returned: always
  type: dict
  sample: {"NCCL_SOCKET_IFNAME": "eth1"}
where:
  description: Line of the block and of the guard (1-based, null when absent).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common import shell_env_check as E
from ansible_collections.provision.cluster.plugins.module_utils.verify.stage_check import exit_check


def main():
    exit_check(AnsibleModule(argument_spec=E.ARGS, supports_check_mode=True), E.run)


if __name__ == "__main__":
    main()
