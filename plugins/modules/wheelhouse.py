#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: wheelhouse
short_description: Build and keep an offline wheelhouse on the controller
description:
  - Runs C(pip download --only-binary=:all:) for the nodes' platform (not the controller's) for
    every distinct set of pins, into O(path), and keeps a manifest
    (C(.provision-wheelhouse.json)); per set of pins its wheel files, per file its size and sha256.
  - A set of pins already in the manifest with all its files present costs no pip call; files are
    hashed once (size and mtime unchanged means the recorded sha256 still holds).
  - Two runs filling one wheelhouse at once (two clusters from one controller) take turns; the second
    waits for the first (a lock file beside the manifest, at most O(timeout) seconds) and finds its work
    done. A set is recorded only with a wheel of each of its own pins (taken from the directory when pip
    did not name it); a manifest whose set lacks one is downloaded again.
  - Meant for C(delegate_to=localhost) + C(run_once); the result (RV(by_set)) is what the
    C(wheelhouse_state) module compares on each node.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  path:
    description: The wheelhouse directory on the controller (made if missing).
    type: path
    required: true
  requirements:
    description: One list of exact pins (C(name==version)) per distinct set the nodes need.
    type: list
    elements: list
    required: true
  platform:
    description: pip C(--platform) of the nodes.
    type: str
    default: manylinux_2_28_x86_64
  python_version:
    description: pip C(--python-version) of the nodes' Python.
    type: str
    default: "3.11"
  implementation:
    description: pip C(--implementation).
    type: str
    default: cp
  abi:
    description: pip C(--abi); default C(cp) + the python version without the dot.
    type: str
  find_links:
    description: Local directories/URLs pip looks in first (e.g. C(/opt/wheels)); missing directories are left out.
    type: list
    elements: str
    default: []
  index_url:
    description: Index to download from (default pip's configuration).
    type: str
  python:
    description: The Python whose pip downloads (default the one running this module).
    type: path
  timeout:
    description: Seconds one pip download may take.
    type: int
    default: 1800
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
    details: Reports what would be downloaded, downloads nothing.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Wheelhouse for torch and numpy, CPython 3.11 nodes
  provision.cluster.wheelhouse:
    path: ~/.cache/provision/wheelhouse
    requirements: [[torch==2.13.0, numpy==2.3.5]]
    find_links: [/opt/wheels]
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
by_set:
  description: For each set of pins (key = the sorted pins joined by spaces), its files with name, size, sha256.
  returned: always
  type: dict
downloaded:
  description: The sets of pins pip was run for.
  returned: always
  type: list
path:
  description: The wheelhouse directory (expanded).
  returned: always
  type: str
"""

import fcntl
import json
import os
import subprocess
import sys
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter
from ansible_collections.provision.cluster.plugins.module_utils.common import python_env as P

LOCK = ".provision-wheelhouse.lock"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            requirements=dict(type="list", elements="list", required=True),
            platform=dict(type="str", default="manylinux_2_28_x86_64"),
            python_version=dict(type="str", default="3.11"),
            implementation=dict(type="str", default="cp"),
            abi=dict(type="str"),
            find_links=dict(type="list", elements="str", default=[]),
            index_url=dict(type="str"),
            python=dict(type="path"),
            timeout=dict(type="int", default=1800),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    try:
        state = P.wheelhouse_state(path, p["requirements"], p["platform"], p["python_version"],
                                   p["implementation"], p["abi"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if state["todo"] and module.check_mode:
        module.exit_json(changed=True, downloaded=state["todo"], by_set={}, path=path)
    lock = None
    if state["todo"]:
        os.makedirs(path, exist_ok=True)
        lock = take_lock(module, path, p["timeout"])
        # what another run finished while this one waited is not downloaded again
        state = P.wheelhouse_state(path, p["requirements"], p["platform"], p["python_version"],
                                   p["implementation"], p["abi"])
    try:
        fill(module, path, state)  # exits the module
    finally:
        if lock is not None:
            lock.close()


def take_lock(module, path, timeout):
    """The wheelhouse's lock (flock on a file beside the manifest), waited for at most `timeout` s."""
    handle = open(os.path.join(path, LOCK), "a")
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except OSError:
            if time.monotonic() >= deadline:
                handle.close()
                module.fail_json(msg="the wheelhouse %s stayed locked by another run for %ds (fix: let that "
                                     "run end, or give this cluster another python_env_wheelhouse)" % (path, timeout))
            time.sleep(0.5)


def fill(module, path, state):
    """Download the sets the manifest lacks, write the manifest, exit."""
    p = module.params
    todo = state["todo"]
    links = [lk for lk in p["find_links"] if "://" in lk or os.path.isdir(lk)]
    set_files = {}
    for pins in todo:
        argv = P.pip_download_argv(p["python"] or sys.executable, path, pins, platform=p["platform"],
                                   python_version=p["python_version"], implementation=p["implementation"],
                                   abi=state["abi"], find_links=links, index_url=p["index_url"])
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=p["timeout"], check=False)
        except subprocess.TimeoutExpired:
            module.fail_json(msg=f"pip download {' '.join(pins)} took more than {p['timeout']}s", cmd=argv)
        if proc.returncode != 0:
            module.fail_json(msg=f"pip download {' '.join(pins)} failed: {P.last_line(proc.stderr, proc.stdout)} (fix: the pins, "
                                 "python_env_wheelhouse_find_links or python_env_index_url)",
                             cmd=argv, stdout=proc.stdout, stderr=proc.stderr)
        files = P.downloaded_files(proc.stdout)
        if not files:
            module.fail_json(msg=f"pip download {' '.join(pins)} reported no wheel", cmd=argv, stdout=proc.stdout)
        # a pin pip did not name (its file already there, said in a way this pip words otherwise): its
        # wheel in the directory, else a failure naming it (never a set recorded without it)
        for spec in P.pins_without_wheel(pins, files):
            files += [f for f in sorted(os.listdir(path)) if not P.pins_without_wheel([spec], [f])][:1]
        lacking = P.pins_without_wheel(pins, files)
        if lacking:
            module.fail_json(msg=f"pip download {' '.join(pins)} left no wheel of {', '.join(lacking)} in {path} "
                                 "(fix: the pins, python_env_wheelhouse_find_links or python_env_index_url)",
                             cmd=argv, stdout=proc.stdout)
        set_files[P.requirement_key(pins)] = sorted(files)
    if todo:
        state["present"] = set(os.listdir(path))
    new = P.wheelhouse_records(path, state, set_files)
    if new != state["manifest"]:
        FileWriter(module).write(os.path.join(path, P.MANIFEST), json.dumps(new, indent=1, sort_keys=True))
    module.exit_json(changed=bool(todo), downloaded=todo, by_set=P.wheelhouse_by_set(state, new), path=path)


if __name__ == "__main__":
    main()
