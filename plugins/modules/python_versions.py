#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: python_versions
short_description: Python, torch, CUDA, NCCL, distributed backends and pinned extras of an environment
description:
  - Runs one Python subprocess in the environment (bounded by O(timeout)) that reports the Python
    version, C(torch.__version__), C(torch.version.cuda), the NCCL version torch was built with,
    whether the gloo/nccl/mpi backends of C(torch.distributed) are available, and the installed
    version of each package in O(packages).
  - Sets the fact C(python_env_versions); the C(versions_compare) module compares it across nodes.
    C(provision verify) calls the same module.
  - Read-only; runs the same in check mode.
version_added: "0.1.0"
author: provision developers
options:
  python:
    description: The environment's interpreter (C(/opt/provision/venv/bin/python)).
    type: path
    required: true
  packages:
    description: Distribution names whose versions are recorded (the pinned extras).
    type: list
    elements: str
    default: []
  require_torch:
    description: Fail with one line when torch does not import.
    type: bool
    default: true
  timeout:
    description: Seconds the probe may take (importing torch takes a few).
    type: int
    default: 120
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Record the versions
  provision.cluster.python_versions:
    python: /opt/provision/venv/bin/python
    packages: [numpy, deepspeed]
"""

RETURN = r"""
check:
  description: The verify contract (check, status, detail, fix).
  returned: always
  type: dict
ansible_facts:
  description: Facts set on the host.
  returned: always
  type: dict
  contains:
    python_env_versions:
      description: python, torch, torch_cuda, nccl, cuda_available, device_count, backends (gloo/nccl/mpi), packages.
      type: dict
"""

import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils import python_env as P


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            packages=dict(type="list", elements="str", default=[]),
            require_torch=dict(type="bool", default=True),
            timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    p = module.params
    fix = "run the python_env stage (ansible-playbook playbooks/python_env.yml)"
    if not os.access(p["python"], os.X_OK):
        check = {"check": "python_env", "status": "fail", "detail": f"{p['python']} missing", "fix": fix}
        if p["require_torch"]:
            module.fail_json(msg=f"{p['python']} does not exist: {fix}", check=check)
        module.exit_json(changed=False, check=check, ansible_facts={"python_env_versions": P.normalize_versions({})})
    argv = [p["python"], "-c", P.VERSIONS_PROBE, json.dumps(p["packages"])]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=p["timeout"], check=False)
    except subprocess.TimeoutExpired:
        module.fail_json(msg=f"{p['python']}: version probe took more than {p['timeout']}s (import torch hangs?)")
    try:
        raw = P.parse_probe(proc.stdout)
    except ValueError:
        module.fail_json(msg=f"{p['python']}: version probe failed: {P.last_line(proc.stderr)}", stderr=proc.stderr)
    versions = P.normalize_versions(raw)
    if versions["torch"] is None:
        check = {"check": "python_env", "status": "fail",
                 "detail": f"torch does not import: {raw.get('torch_error')}", "fix": fix}
        if p["require_torch"]:
            module.fail_json(msg=f"torch does not import in {p['python']}: {raw.get('torch_error')}; fix: {fix}",
                             check=check, ansible_facts={"python_env_versions": versions})
    else:
        check = {"check": "python_env", "status": "pass",
                 "detail": f"python {versions['python']} torch {versions['torch']}", "fix": ""}
    module.exit_json(changed=False, check=check, ansible_facts={"python_env_versions": versions})


if __name__ == "__main__":
    main()
