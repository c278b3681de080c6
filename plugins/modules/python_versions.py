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

import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter
from ansible_collections.provision.cluster.plugins.module_utils.common import python_env as P


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            packages=dict(type="list", elements="str", default=[]),
            require_torch=dict(type="bool", default=True),
            timeout=dict(type="int", default=120),
            cache=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    p["packages"] = P.package_names(p["packages"])
    fix = "run the python_env stage (ansible-playbook playbooks/python_env.yml)"
    if not os.access(p["python"], os.X_OK):
        check = {"check": "python_env", "status": "fail", "detail": f"{p['python']} missing", "fix": fix}
        if p["require_torch"]:
            module.fail_json(msg=f"{p['python']} does not exist: {fix}", checks=[check])
        module.exit_json(changed=False, checks=[check], ansible_facts={"python_env_versions": P.normalize_versions({})})
    prefix = os.path.dirname(os.path.dirname(p["python"]))
    reasons = P.untrusted(prefix, walk=P.is_environment(prefix)) if os.geteuid() == 0 else []
    if reasons:
        # root runs nothing another user could have written (issue 31): the probe would import its code,
        # and its cache file would be another user's word
        detail = f"root does not run {p['python']}: {'; '.join(reasons)}"
        check = {"check": "python_env", "status": "fail", "detail": detail,
                 "fix": "run the python_env stage: it makes the environment again as root's"}
        if p["require_torch"]:
            module.fail_json(msg=f"{detail}; fix: {check['fix']}", checks=[check])
        module.exit_json(changed=False, checks=[check], ansible_facts={"python_env_versions": P.normalize_versions({})})
    key = P.probe_cache_key(p["python"]) if p["cache"] else None
    cached = P.cached_versions(p["cache"], key, p["python"], p["packages"]) if key else None
    if cached is not None:
        check = P.cached_check(cached)
        module.exit_json(changed=False, cached=True, checks=_checks(p, check, cached),
                         ansible_facts={"python_env_versions": cached})
    # -I: no PYTHON* variables, no user site, not the working directory on sys.path
    argv = [p["python"], "-I", "-c", P.VERSIONS_PROBE, json.dumps(p["packages"])]
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
                             checks=[check], ansible_facts={"python_env_versions": versions})
    else:
        check = {"check": "python_env", "status": "pass",
                 "detail": f"python {versions['python']} torch {versions['torch']}", "fix": ""}
        if key and not module.check_mode:
            _write_cache(module, p["cache"], key, versions)
    module.exit_json(changed=False, cached=False, checks=_checks(p, check, versions),
                     ansible_facts={"python_env_versions": versions})


def _checks(p, check, versions):
    """check, and DeepSpeed's build against this torch when DeepSpeed has compiled ops here."""
    ds = P.deepspeed_check(P.deepspeed_build(p["python"]), versions.get("torch"), versions.get("torch_cuda"),
                           p["python"])
    return [check] + ([ds] if ds else [])


def _write_cache(module, path, key, versions):
    try:
        FileWriter(module).write(path, json.dumps({"key": key, "versions": versions}))
    except OSError as exc:   # a cache that cannot be written only costs the next run a probe
        module.warn(f"could not write the versions cache {path}: {exc}")


if __name__ == "__main__":
    main()
