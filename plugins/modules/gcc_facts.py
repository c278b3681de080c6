#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: gcc_facts
short_description: Plan and check the GCC toolchain of a node
description:
  - Reads C(/etc/os-release) and decides how the node gets a GCC of at least O(min_version)
    (distribution packages on the Debian family; on the EL family the system GCC when new enough,
    else C(gcc-toolset-N) (EL8/9) or C(devtoolset-N) (EL7)), with the environment that
    C(/opt/rh/<name>/enable) would set exported explicitly (never C(scl enable)).
  - Lists the plan's packages that are not installed (C(dpkg-query)/C(rpm -q)), so the role's
    package task runs only when something is missing (no package cache, no network, no
    C(python3-apt) needed on a node that already has its compiler).
  - Runs that GCC's C(--version) and records the version. With O(fail_below=true) a GCC older than
    O(min_version) (or none) fails with one line naming the fix.
  - Read-only; runs the same in check mode.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  min_version:
    description: The lowest acceptable GCC version (C(9), C(11.2)).
    type: str
    required: true
  toolset:
    description: Force this gcc-toolset/devtoolset number on EL hosts (default is the oldest one that is new enough).
    type: int
  debian_packages:
    description: Packages that give the compiler on Debian/Ubuntu.
    type: list
    elements: str
    default: [gcc, g++, make]
  fail_below:
    description: Fail when the GCC found is older than O(min_version) or missing.
    type: bool
    default: false
  node:
    description: The node's inventory name, for the fix line of RV(checks).
    type: str
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.INFO_MODULE]
"""

EXAMPLES = r"""
- name: Plan the toolchain
  provision.cluster.gcc_facts:
    min_version: "9"
  register: __gcc

- name: Install what the plan says
  ansible.builtin.package:
    name: "{{ __gcc.plan.packages }}"

- name: Check the result
  provision.cluster.gcc_facts:
    min_version: "9"
    fail_below: true
"""

RETURN = r"""
checks:
  description: The check C(gcc) (pass when a GCC of at least O(min_version) is found), as C(provision verify) reports it.
  returned: always
  type: list
  elements: dict
  sample:
    - {"check": "gcc", "status": "fail", "detail": "GCC 8.5.0 at /usr/bin/gcc, need >= 9",
       "fix": "ansible-playbook site.yml --tags gcc_toolchain --limit node1 (gcc_toolchain_min_version=9)"}
plan:
  description: kind (system|scl), packages, pre_packages, missing (those not installed), scl, enable, gcc, env, reason.
  returned: always
  type: dict
ansible_facts:
  description: Facts set on the host.
  returned: always
  type: dict
  contains:
    gcc_toolchain_facts:
      description: version (empty when no gcc), path, meets_min, min_version, os_family, os_major, scl, enable.
      type: dict
    provision_env_gcc_toolchain:
      description: The shell_env contract; the toolset's PATH/LD_LIBRARY_PATH/CC/CXX on EL with a toolset, empty otherwise.
      type: dict
"""

import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common import gcc as C


def main():
    module = AnsibleModule(
        argument_spec=dict(
            min_version=dict(type="str", required=True),
            toolset=dict(type="int"),
            debian_packages=dict(type="list", elements="str", default=["gcc", "g++", "make"]),
            fail_below=dict(type="bool", default=False),
            node=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        with open("/etc/os-release", encoding="utf-8") as fh:
            family, major, pretty = C.parse_os_release(fh.read())
    except OSError:
        family, major, pretty = "unknown", "", ""
    try:
        plan = C.plan(family, major, p["min_version"], toolset=p["toolset"], debian_packages=p["debian_packages"])
    except ValueError as exc:
        module.fail_json(msg=f"{pretty or family}: {exc}")
    gcc = plan["gcc"] if os.path.isabs(plan["gcc"]) else module.get_bin_path(plan["gcc"])
    version = None
    if gcc and os.access(gcc, os.X_OK):
        try:
            out = subprocess.run([gcc, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        version = C.parse_gcc_version(out)
    ok = C.meets(version, p["min_version"])
    wanted = plan["pre_packages"] + plan["packages"]
    query = (C.dpkg_query_argv(module.get_bin_path("dpkg-query") or "dpkg-query", wanted) if family == "Debian"
             else C.rpm_query_argv(module.get_bin_path("rpm") or "rpm", wanted))
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    plan["missing"] = C.missing_packages(family, wanted, out)
    facts = {"version": version or "", "path": gcc or "", "meets_min": ok, "min_version": p["min_version"],
             "os_family": family, "os_major": major, "scl": plan["scl"] or "", "enable": plan["enable"] or ""}
    env = plan["env"] if (plan["kind"] == "scl" and version) else {"env": {}, "path": [], "ld_library_path": [], "source": []}
    checks = [C.gcc_check(facts, p["node"])]
    if p["fail_below"] and not ok:
        found = f"GCC {version} at {gcc}" if version else f"no GCC ({plan['gcc']})"
        fix = ("set gcc_toolchain_toolset to a newer toolset" if plan["kind"] == "scl"
               else "set gcc_toolchain_debian_packages to a newer gcc-N/g++-N")
        module.fail_json(msg=f"{found} is below gcc_toolchain_min_version {p['min_version']}: {fix}",
                         plan=plan, checks=checks, ansible_facts={"gcc_toolchain_facts": facts})
    module.exit_json(changed=False, plan=plan, checks=checks,
                     ansible_facts={"gcc_toolchain_facts": facts, "provision_env_gcc_toolchain": env})


if __name__ == "__main__":
    main()
