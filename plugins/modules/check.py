#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: check
short_description: Run one check of the verify catalog from a stage, with the arguments provision verify gives it
description:
  - An action plugin (plugins/action/check.py; this file only documents it). It takes the entry O(check) of
    the check catalog (plugins/module_utils/verify/catalog.py), builds the module's arguments from the cluster
    plan (C(cluster_plan)) and the node's variables exactly as C(provision verify) does, adds the stage's own
    arguments O(extra) (what the stage plans or configures with; each entry names the ones it accepts), and
    runs that module on the node. The task returns the module's result as it is.
  - It also keeps what verify needs of the call in the node's C(provision_checks) fact under the check's
    name. Inside C(site.yml), the verify pass takes that record instead of running the check again when it
    was made in this run, with the arguments verify would pass now, by a call that failed nowhere and changed
    nothing. A stage that changes what a check reads after calling it calls it again.
  - With O(module), the stage's own module runs instead (the one that writes what the check reads, such as
    the env block, the launch files, the Python environment), with O(module_args) and the check's arguments
    as its option C(check). It does its work, then runs the check in the same process (one module run per
    node, not two). The task returns that module's result, with the check's under C(check_result).
version_added: "0.2.0"
author: provision developers (!UNKNOWN)
options:
  check:
    description: The catalog entry (C(provision verify --list-checks) names most; C(gpu), C(runtime), C(gcc), ...).
    type: str
    required: true
  extra:
    description:
      - Arguments the stage adds to the check's own (for example C(manage_limits) for the runtime check, the
        toolkit C(source) C(gpu_facts) plans an install from, the hostnames the ssh_mesh stage read in this run,
        with which the mesh check also judges who answers). Only those the entry accepts (its C(stage_keys));
        one that would change an argument verify gives is refused.
    type: dict
    default: {}
  matrix:
    description:
      - How far a check that logs in to other nodes reaches (the mesh, pdsh and NCCL checks) for this call -
        C(full) (every node) or C(ring) (itself, the next node and the one half the ring away) - instead of the
        run's C(verify_matrix). The ssh_mesh stage checks N x N after it changed something, a ring otherwise.
      - The record keeps the arguments it gave, so site.yml's verify pass runs the check again when its own
        matrix differs.
    type: str
    choices: [ring, full]
  module:
    description:
      - The stage's module (FQCN) that runs the check after its own work; only one the entry names (its
        C(writers)), e.g. M(provision.cluster.shell_env_block) for C(env), M(provision.cluster.launch_dir) for
        C(launchers), M(provision.cluster.python_venv) for C(versions).
    type: str
  module_args:
    description: The arguments of O(module) (its own; the check's are added as its option C(check)).
    type: dict
  fail:
    description: Fail the task, one line naming the node and each failed check with its fix, when a check fails.
    type: bool
    default: false
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.FLOW]
attributes:
  action:
    support: full
  async:
    support: none
  check_mode:
    support: full
    details: As the module it runs.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Plan the GCC toolchain (the gcc check, as provision verify runs it)
  provision.cluster.check:
    check: gcc
  register: __gcc_toolchain_plan

- name: Node runtime limits, managed as they are checked (arguments the runtime check accepts from its stage)
  provision.cluster.check:
    check: runtime
    extra:
      manage_limits: true
      manage_shm: true

- name: The launch files, written, then checked by the same module run
  provision.cluster.check:
    check: launchers
    module: provision.cluster.launch_dir
    module_args:
      path: "{{ launchers_dir }}"
      owner: "{{ cluster_plan.user }}"
      files: "{{ __launchers_files }}"

- name: The ports check, stopping on a held port
  provision.cluster.check:
    check: ports
    fail: true
"""

RETURN = r"""
checks:
  description: The module's Check records (its other return values come back as the module gives them).
  returned: without O(module) (with it, C(check_result.checks))
  type: list
  elements: dict
check_result:
  description: The check's result (its Check records as C(checks), and what the check returns beside them).
  returned: with O(module), when the module reached the check
  type: dict
check_module:
  description: The module that ran (FQCN), for what reads results by module.
  returned: when the module ran
  type: str
  sample: provision.cluster.gcc_facts
ansible_facts:
  description: The module's facts, and C(provision_checks), this run's record of each check a stage ran (check name -> run, arguments, the records).
  returned: always
  type: dict
"""
