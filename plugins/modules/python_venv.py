#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: python_venv
short_description: A Python environment with exact pins, installed offline from a wheelhouse
description:
  - Makes a venv at O(path) when missing (or when its interpreter no longer runs), reads the
    installed distributions with one subprocess, and runs
    C(pip install --no-index --find-links O(find_links)) only for the pins that are not met.
    A re-run with everything in place runs no pip at all.
  - With O(create=false), O(path) is an existing environment (a conda env) that only gets the pins.
  - With O(install=false), O(path) is an existing environment adopted as it is (say, the PyTorch a GPU
    image already has) - nothing is made, installed or re-owned, and the module fails, naming the unmet
    pins and what the environment has, when it does not already meet them (run as root, also when
    another user could write it).
  - The environment is root's (O(owner) root, the default). Root runs it (pip, the versions probe,
    the health check), so nothing in it may be writable by another user. An existing environment that
    another user could have written (owned by another uid, or writable by group or others, e.g. made
    by an earlier version for the cluster user) is never run; it is renamed aside, removed without
    following a link, and made again as root's from the wheelhouse, with a warning naming the
    distributions it held beyond the pins. A directory above it that another user could write is
    refused in one line. The cluster user reads and runs the environment; it installs its own
    packages in a venv of its own (C(python3 -m venv --system-site-packages ~/venv)).
  - Sets C(provision_env_python_env) (VIRTUAL_ENV, PATH prepend) for the shell_env block.
  - With O(check), it then runs the check C(python_env) of C(provision verify) (the options of
    M(provision.cluster.python_versions), which reads the versions from its cache while nothing changed)
    on the environment as this call leaves it; in check mode not when the environment is still to be made
    or completed. A check that stops (C(require_torch) and torch does not import) fails the module.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  path:
    description: The environment's directory.
    type: path
    required: true
  requirements:
    description: Exact pins (C(name==version)).
    type: list
    elements: str
    default: []
  find_links:
    description: The node's wheelhouse directory (pip never reaches an index).
    type: path
    required: true
  python:
    description: The interpreter that makes the venv.
    type: str
    default: python3
  create:
    description: Make the venv when missing (false for an existing conda env).
    type: bool
    default: true
  install:
    description:
      - Make the environment and install the pins that are not met (the default). false adopts the
        environment at O(path) as it is; O(python), O(find_links), O(owner), O(group) and O(timeout) are
        then not used.
    type: bool
    default: true
    version_added: "0.2.0"
  system_site_packages:
    description: Give the venv access to the system site-packages.
    type: bool
    default: false
  owner:
    description: User that owns the environment; root (the default when the module runs as root). Another user is refused.
    type: str
  group:
    description: Group that owns the environment (default the owner's primary group).
    type: str
  export:
    description: Set C(provision_env_python_env) to activate this environment.
    type: bool
    default: true
  timeout:
    description: Seconds the pip install may take.
    type: int
    default: 1800
  python_version:
    description:
      - The python version the wheelhouse was made for (C(3.11)). When the node's interpreter is another one,
        creating the environment fails at once, in one line naming the node, its python and the fix (pip would
        find no pinned wheel for it).
    type: str
  node:
    description: The node's inventory name, for that line.
    type: str
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.stage_check]
attributes:
  check_mode:
    support: full
    details: Reports the environment it would make and the pins it would install; runs neither.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Torch venv from the wheelhouse
  provision.cluster.python_venv:
    path: /opt/provision/venv
    requirements: [torch==2.13.0, numpy==2.3.5]
    find_links: /var/cache/provision/wheelhouse
    owner: root

- name: Adopt the PyTorch a GPU image already has (nothing downloaded, installed or re-owned)
  provision.cluster.python_venv:
    path: /opt/torch/.venv
    requirements: [torch==2.11.0]
    find_links: /var/cache/provision/wheelhouse
    install: false
"""

RETURN = r"""
installed:
  description: The pins that were installed this run.
  returned: always
  type: list
created:
  description: Whether the venv was (re)made.
  returned: always
  type: bool
python:
  description: The environment's interpreter.
  returned: always
  type: str
ansible_facts:
  description:
    - C(provision_env_python_env) (env VIRTUAL_ENV or CONDA_PREFIX, path) when O(export).
  returned: when export
  type: dict
check_result:
  description:
    - The result of M(provision.cluster.python_versions) with the arguments O(check) gave (C(checks), C(cached),
      C(ansible_facts.python_env_versions), which M(provision.cluster.check) sets on the host).
  returned: when O(check) is given and the check ran
  type: dict
adopted:
  description: O(install=false) - the existing environment met the pins and was used as it is.
  returned: when install is false and the environment met the pins
  type: bool
venv_missing:
  description: The interpreter lacks venv/ensurepip (Debian's python3-venv package); nothing was created.
  returned: when the interpreter cannot make a venv
  type: bool
rebuilt_untrusted:
  description: Why an existing environment was not run but made again (another user could write it); empty when it was not.
  returned: always
  type: list
  elements: str
"""

import grp
import os
import pwd
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common import python_env as P
from ansible_collections.provision.cluster.plugins.module_utils.verify.stage_check import CHECK_OPTION, stage_check


def run(module, argv, timeout, what):
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PYTHONNOUSERSITE="1", PIP_NO_INPUT="1")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        module.fail_json(msg=f"{what} took more than {timeout}s", cmd=argv)
    except OSError as exc:
        module.fail_json(msg=f"{what}: {exc}", cmd=argv)
    return proc


def probe(module, python):
    if not os.access(python, os.X_OK):
        return None
    proc = run(module, [python, "-I", "-c", P.DISTS_PROBE], 120, "probing the environment")
    if proc.returncode != 0:
        return None
    try:
        data = P.parse_probe(proc.stdout)
    except ValueError:
        return None
    data["dists"] = {P.normalize(k): v for k, v in data["dists"].items()}
    return data


def base_python_problem(module, base, p):
    """None, "venv_missing", or a failure naming the node, its python and the fix when the wheelhouse
    was made for another python (pip would find no pinned wheel for this one)."""
    proc = run(module, [base, "-I", "-c", "import sys, platform; print(platform.python_version()); import ensurepip, venv"],
               60, "probing %s" % base)
    found = (proc.stdout.strip().splitlines() or [""])[0]
    wanted = p["python_version"]
    if wanted and found and not P.python_matches(found, wanted):
        pins = " ".join(r for r in p["requirements"] if r.lower().startswith("torch")) or "the pinned packages"
        module.fail_json(msg=(
            "%s: python %s here (%s), the wheelhouse holds wheels for python %s (python_env_python_version): "
            "no %s for this python; fix: a wheelhouse for %s (python_env_python_version: '%s' for this node, with "
            "such wheels on the index) or python_env_backend: conda (it brings its own python)"
            % (p["node"] or "this node", found, base, wanted, pins, ".".join(found.split(".")[:2]),
               ".".join(found.split(".")[:2]))))
    if proc.returncode != 0:
        return "venv_missing"
    return None


def adopt(module, p, env_python, state, facts):
    """install=false: the environment at path is used as it is. Fails in one line when it does not run
    or does not meet the pins; otherwise exits unchanged (after the versions check, with check)."""
    node = p["node"] or "this node"
    if state is None:
        module.fail_json(msg=f"{node}: {env_python} does not run, and python_env_install is false (an existing "
                             f"environment is adopted, none is made); fix: set python_env_path to the environment "
                             f"that holds torch, or python_env_install: true")
    unmet = P.unmet_pins(p["requirements"], state["dists"])
    if unmet:
        have = ", ".join("%s %s" % (P.parse_pin(s)[0], state["dists"].get(P.parse_pin(s)[0]) or "absent") for s in unmet)
        module.fail_json(msg=f"{node}: {' '.join(unmet)} not met in {p['path']} ({have}), and python_env_install is "
                             f"false: nothing is installed; fix: pin what the environment has, or python_env_install: true")
    finish(module, dict(changed=False, created=False, installed=[], python=env_python, ansible_facts=facts, adopted=True),
           p["path"])


def distrust(module, p, env_python):
    """[] when root may run the environment at path (or there is none), else why not: then it is set
    aside and removed here (not in check mode), so that it is made again as root's. A directory above
    it that another user could write, or an existing environment not made here (create=false), fails."""
    path = p["path"]
    if os.geteuid() != 0 or not os.path.lexists(path):
        return []
    reasons = P.untrusted(path)
    if not reasons:
        return []
    inside = [r for r in reasons if r.startswith(path + " ") or r.startswith(path + "/")]
    above = [r for r in reasons if r not in inside]
    if above:
        top = above[0].split(" is ", 1)[0]
        module.fail_json(msg=f"{p['node'] or 'this node'}: {above[0]}: another user could replace the environment "
                             f"at {path} that root runs; fix: chown root: {top} && chmod go-w {top}", reasons=reasons)
    if not p["create"]:
        module.fail_json(msg=f"{p['node'] or 'this node'}: root does not run {env_python}: {'; '.join(reasons)}; fix: "
                             f"chown -R root: {path} && chmod -R go-w {path} once you checked what is in it, or "
                             "make the environment again", reasons=reasons)
    pinned = {P.normalize(P.parse_pin(r)[0]) for r in p["requirements"]}
    extra = sorted(set(P.dist_names(path)) - pinned - {"pip", "setuptools", "wheel"})
    lost = ("; it also held %s (not pinned): install them in a venv of the user's own "
            "(python3 -m venv --system-site-packages ~/venv)" % ", ".join(extra)) if extra else ""
    module.warn(f"{path} could be written by another user ({'; '.join(reasons)}): root does not run it, so it is "
                f"made again as root's from the wheelhouse{lost}")
    if not module.check_mode:
        aside = "%s.untrusted-%s" % (path, os.urandom(4).hex())
        os.rename(path, aside)  # the parent is root's: the user cannot swap the name back in
        shutil.rmtree(aside)    # fd-based on Linux: never follows a link planted in the tree
    return reasons


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            requirements=dict(type="list", elements="str", default=[]),
            find_links=dict(type="path", required=True),
            python=dict(type="str", default="python3"),
            create=dict(type="bool", default=True),
            install=dict(type="bool", default=True),
            system_site_packages=dict(type="bool", default=False),
            owner=dict(type="str"),
            group=dict(type="str"),
            export=dict(type="bool", default=True),
            timeout=dict(type="int", default=1800),
            python_version=dict(type="str"),
            node=dict(type="str"),
            **CHECK_OPTION,
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    try:
        for spec in p["requirements"]:
            P.parse_pin(spec)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    env_python = os.path.join(path, "bin", "python")
    facts = {"provision_env_python_env": P.venv_env(path)} if p["export"] and p["create"] else {}
    if p["export"] and not p["create"]:
        facts = {"provision_env_python_env": {"env": {"CONDA_PREFIX": path}, "path": [f"{path}/bin"],
                                              "ld_library_path": [], "source": []}}
    if not p["install"]:
        untrusted = P.untrusted(path) if os.geteuid() == 0 and os.path.lexists(path) else []
        if untrusted:
            module.fail_json(msg=f"{p['node'] or 'this node'}: root does not run {env_python}: {'; '.join(untrusted)}; "
                                 f"fix: adopt an environment only root can write (chown -R root: {path} && chmod -R go-w "
                                 f"{path} once you checked what is in it)", reasons=untrusted)
        adopt(module, p, env_python, probe(module, env_python), facts)
    uid = gid = None
    if p["owner"]:
        try:
            pw = pwd.getpwnam(p["owner"])
        except KeyError:
            module.fail_json(msg=f"user {p['owner']} does not exist (cluster_user): create it first")
        uid, gid = pw.pw_uid, pw.pw_gid
        if p["group"]:
            gid = grp.getgrnam(p["group"]).gr_gid
        if os.geteuid() == 0 and uid != 0:
            module.fail_json(msg=f"python_venv: owner {p['owner']}: root runs this environment (pip, the versions probe, "
                                 "the health check), so it stays root's; fix: leave owner unset (the cluster user "
                                 "reads and runs it, and installs its own packages in a venv of its own)")
    rebuilt = distrust(module, p, env_python)
    state = None if rebuilt else probe(module, env_python)
    created = False
    if state is None:
        if not p["create"]:
            module.fail_json(msg=f"{env_python} does not run: the environment at {path} is missing or broken")
        created = True
        base = module.get_bin_path(p["python"], required=True) if not os.path.isabs(p["python"]) else p["python"]
        problem = base_python_problem(module, base, p)
        if problem == "venv_missing":
            # the distribution splits venv/ensurepip out (Debian's python3-venv): the role installs it, calls again
            module.exit_json(changed=False, created=False, installed=[], python=env_python, venv_missing=True,
                             rebuilt_untrusted=rebuilt)
        if module.check_mode:
            module.exit_json(changed=True, created=True, installed=list(p["requirements"]), python=env_python,
                             ansible_facts=facts, rebuilt_untrusted=rebuilt)
        argv = P.venv_create_argv(base, path, p["system_site_packages"])
        if os.path.exists(path):
            argv.insert(3, "--clear")
        proc = run(module, argv, 600, "python -m venv")
        if proc.returncode != 0:
            module.fail_json(msg=f"python -m venv {path} failed: {P.last_line(proc.stderr, proc.stdout)}"
                                 " (fix: install python3-venv)", cmd=argv, stderr=proc.stderr)
        state = probe(module, env_python) or {"dists": {}}
    todo = P.unmet_pins(p["requirements"], state["dists"])
    if todo and module.check_mode:
        module.exit_json(changed=True, created=created, installed=todo, python=env_python, ansible_facts=facts,
                         rebuilt_untrusted=rebuilt)
    if todo:
        argv = P.pip_install_argv(env_python, todo, p["find_links"])
        proc = run(module, argv, p["timeout"], "pip install")
        if proc.returncode != 0:
            module.fail_json(msg=f"pip install {' '.join(todo)} from {p['find_links']} failed: "
                                 f"{P.last_line(proc.stderr, proc.stdout)}",
                             cmd=argv, stdout=proc.stdout, stderr=proc.stderr)
        after = probe(module, env_python) or {"dists": {}}
        still = P.unmet_pins(p["requirements"], after["dists"])
        if still:
            module.fail_json(msg=f"after pip install, {' '.join(still)} still not met in {path}", cmd=argv)
    changed = created or bool(todo)
    if uid is not None:
        st = os.lstat(path)
        if changed or st.st_uid != uid or st.st_gid != gid:
            if module.check_mode:
                changed = True
            else:
                P.chown_tree(path, uid, gid)
                changed = True
    finish(module, dict(changed=changed, created=created, installed=todo, python=env_python, ansible_facts=facts,
                        rebuilt_untrusted=rebuilt), path)


def finish(module, result, path):
    """Exit with RESULT, after the versions check (option check) on the environment as this call leaves it:
    not in check mode where it is still to be made or completed (there is nothing to read yet). PATH's trust
    was established here (distrust() walked it, or it was made here, or adopted after its walk): the check
    does not walk it again."""
    if not (module.check_mode and result.get("changed")):
        result = stage_check(module, P.VERSIONS_ARGS,
                             lambda params, m: P.run_versions(params, m, trusted=path), result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
