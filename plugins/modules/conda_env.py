#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: conda_env
short_description: Install Miniforge/Miniconda to a prefix and create an environment with a pinned Python
description:
  - Verifies the installer's sha256 against O(installer_sha256), runs it in batch mode
    (C(bash installer -b -p PREFIX)) when C(PREFIX/bin/conda) is missing, then creates
    C(PREFIX/envs/NAME) with C(python=O(python_version)) and pip when that environment is missing
    or has another Python.
  - Never runs C(conda init) and never touches C(~/.bashrc); the environment is exported through
    C(provision_env_python_env) (CONDA_PREFIX, PATH) for the shell_env block.
  - Packages (torch, extras) are installed afterwards by C(python_venv) with C(create=false).
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  installer:
    description: The installer on the node (copied or downloaded there by the role).
    type: path
    required: true
  installer_sha256:
    description: Expected sha256 of the installer (hex).
    type: str
    required: true
  prefix:
    description: Where conda goes.
    type: path
    default: /opt/conda
  name:
    description: The environment's name (C(PREFIX/envs/NAME)).
    type: str
    default: provision
  python_version:
    description: The Python to pin (C(3.11)).
    type: str
    default: "3.11"
  channels:
    description: Channels for C(conda create) (with C(--override-channels)); empty means the installer's defaults.
    type: list
    elements: str
    default: []
  offline:
    description: C(conda create --offline) (air-gapped; the installer's package cache must hold that Python).
    type: bool
    default: false
  owner:
    description: User that owns the prefix.
    type: str
  timeout:
    description: Seconds each step may take.
    type: int
    default: 1800
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
    details: Reports the commands it would run (RV(commands)) and runs none.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Miniforge with a Python 3.11 env
  provision.cluster.conda_env:
    installer: /var/cache/provision/Miniforge3-Linux-x86_64.sh
    installer_sha256: "{{ python_env_conda_installer_sha256 }}"
    prefix: /opt/conda
    name: provision
    python_version: "3.11"
"""

RETURN = r"""
env_prefix:
  description: The environment's directory.
  returned: always
  type: str
commands:
  description: The commands run (argv lists).
  returned: always
  type: list
ansible_facts:
  description: C(provision_env_python_env) (CONDA_PREFIX, CONDA_DEFAULT_ENV, CONDA_EXE, PATH).
  returned: always
  type: dict
"""

import os
import pwd
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common import python_env as P


def env_python_version(python):
    if not os.access(python, os.X_OK):
        return None
    try:
        proc = subprocess.run([python, "-I", "-c", "import platform; print(platform.python_version())"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            installer=dict(type="path", required=True),
            installer_sha256=dict(type="str", required=True),
            prefix=dict(type="path", default="/opt/conda"),
            name=dict(type="str", default="provision"),
            python_version=dict(type="str", default="3.11"),
            channels=dict(type="list", elements="str", default=[]),
            offline=dict(type="bool", default=False),
            owner=dict(type="str"),
            timeout=dict(type="int", default=1800),
        ),
        supports_check_mode=True,
    )
    p = module.params
    env_prefix, env = P.conda_env_facts(p["prefix"], p["name"])
    if p["owner"] and os.geteuid() == 0 and pwd.getpwnam(p["owner"]).pw_uid != 0:
        module.fail_json(msg=f"conda_env: owner {p['owner']}: root runs conda and the environment, so they stay "
                             "root's; fix: leave owner unset")
    reasons = P.untrusted(p["prefix"]) if os.geteuid() == 0 and os.path.lexists(p["prefix"]) else []
    if reasons:
        # root runs conda and the environment's python: nothing in them may be another user's (issue 31)
        module.fail_json(msg=f"root does not run conda in {p['prefix']}: {'; '.join(reasons)}; fix: chown -R root: "
                             f"{p['prefix']} && chmod -R go-w {p['prefix']} once you checked what is in it, or remove "
                             "it (python_env installs it again)", reasons=reasons)
    plan = []
    if not os.access(os.path.join(p["prefix"], "bin", "conda"), os.X_OK):
        if not os.path.isfile(p["installer"]):
            module.fail_json(msg=f"conda installer {p['installer']} is not on the node: set "
                                 "python_env_conda_installer_url or python_env_conda_installer_file")
        digest = P.sha256_file(p["installer"])
        if digest != p["installer_sha256"].lower().strip():
            module.fail_json(msg=f"{p['installer']} sha256 {digest} != python_env_conda_installer_sha256 "
                                 f"{p['installer_sha256']}: wrong or corrupt installer")
        plan.append(P.conda_install_argv(p["installer"], p["prefix"]))
    if not P.python_matches(env_python_version(os.path.join(env_prefix, "bin", "python")), p["python_version"]):
        plan.append(P.conda_create_argv(p["prefix"], env_prefix, p["python_version"],
                                        channels=p["channels"], offline=p["offline"]))
    if module.check_mode or not plan:
        module.exit_json(changed=bool(plan), env_prefix=env_prefix, commands=plan,
                         ansible_facts={"provision_env_python_env": env})
    for argv in plan:
        try:
            # no conda init, no auto-activation: keep the installer away from rc files
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=p["timeout"], check=False,
                                  env=dict(os.environ, CONDA_AUTO_UPDATE_CONDA="false"))
        except subprocess.TimeoutExpired:
            module.fail_json(msg=f"{' '.join(argv[:3])} took more than {p['timeout']}s", cmd=argv)
        if proc.returncode != 0:
            module.fail_json(msg=f"{' '.join(argv[:3])} failed: {P.last_line(proc.stderr, proc.stdout)}", cmd=argv, stderr=proc.stderr)
    if p["owner"]:
        pw = pwd.getpwnam(p["owner"])
        P.chown_tree(p["prefix"], pw.pw_uid, pw.pw_gid)
    module.exit_json(changed=True, env_prefix=env_prefix, commands=plan, ansible_facts={"provision_env_python_env": env})


if __name__ == "__main__":
    main()
