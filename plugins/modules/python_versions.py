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
author: provision developers (!UNKNOWN)
options:
  python:
    description: The environment's interpreter (C(/opt/provision/venv/bin/python)).
    type: path
    required: true
  packages:
    description:
      - Distributions whose versions are recorded (the pinned extras), as names or as requirement specs
        (C(numpy==2.3.5) records C(numpy)); each name once.
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
  cache:
    description:
      - File that keeps the last answer with a key of what it depends on (interpreter, installed
        distributions and their mtimes, torch's files and library directory, NVIDIA driver); while
        the key is the same the answer is read from it instead of importing torch again (seconds); the
        extras' versions are then read from the dist-info names.
        Written only outside check mode and only for an answer in which torch imported. Unset means no cache.
    type: path
notes:
  - The cache file is a record of a read, not configuration, so writing it reports no change.
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
    details: The probe runs (it only reads); the versions cache is not written.
  diff_mode:
    support: N/A
    details: It changes no configuration (the cache is a record of a read).
"""

EXAMPLES = r"""
- name: Record the versions
  provision.cluster.python_versions:
    python: /opt/provision/venv/bin/python
    packages: [numpy, deepspeed]
"""

RETURN = r"""
cached:
  description: Whether the answer came from O(cache).
  returned: success
  type: bool
checks:
  description:
    - The check C(python_env) (the interpreter exists and torch imports), then, when DeepSpeed is installed
      with ops compiled at install time, the check C(deepspeed build). It fails when those ops were compiled
      for another torch (major.minor) or CUDA than the environment has, which makes them fail to load at
      run time.
  returned: always
  type: list
  elements: dict
ansible_facts:
  description: Facts set on the host.
  returned: always
  type: dict
  contains:
    python_env_versions:
      description: python, torch, torch_cuda, nccl, cuda_available, device_count, backends (gloo/nccl/mpi), packages.
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common import python_env as P
from ansible_collections.provision.cluster.plugins.module_utils.verify.stage_check import exit_check


def main():
    exit_check(AnsibleModule(argument_spec=P.VERSIONS_ARGS, supports_check_mode=True), P.run_versions)


if __name__ == "__main__":
    main()
