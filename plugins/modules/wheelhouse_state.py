#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: wheelhouse_state
short_description: Which wheels a node's wheelhouse lacks, by size and sha256
description:
  - Compares the wheel files the controller's manifest lists (the C(wheelhouse) module's
    C(by_set)) with the node's copy in O(path) in one pass, and returns the names still to copy
    (missing, or a different size or sha256). Makes O(path) when it is missing.
  - Each node-side file is hashed once; the node keeps its own record
    (C(.provision-wheelhouse-node.json)) of size, mtime and sha256, so a re-run reads no wheel.
  - A cache file is not a change; C(changed) is true only when the directory had to be made.
version_added: "0.1.0"
author: provision developers
options:
  path:
    description: The wheelhouse directory on the node.
    type: path
    required: true
  files:
    description: Expected files, each a dict with C(name), C(size), C(sha256).
    type: list
    elements: dict
    required: true
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: What is missing on the node
  provision.cluster.wheelhouse_state:
    path: /var/cache/provision/wheelhouse
    files: "{{ __wheelhouse.by_set['numpy==2.3.5 torch==2.13.0'] }}"
  register: __state

- name: Copy only that
  ansible.builtin.copy:
    src: "~/.cache/provision/wheelhouse/{{ item }}"
    dest: "/var/cache/provision/wheelhouse/{{ item }}"
    mode: "0644"
  loop: "{{ __state.missing }}"
"""

RETURN = r"""
missing:
  description: File names to copy to the node.
  returned: always
  type: list
  elements: str
present:
  description: File names already right on the node.
  returned: always
  type: list
  elements: str
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils import python_env as P

NODE_MANIFEST = ".provision-wheelhouse-node.json"


def main():
    module = AnsibleModule(
        argument_spec=dict(path=dict(type="path", required=True),
                           files=dict(type="list", elements="dict", required=True)),
        supports_check_mode=True,
    )
    path, expected = module.params["path"], module.params["files"]
    changed = False
    if not os.path.isdir(path):
        changed = True
        if not module.check_mode:
            os.makedirs(path, mode=0o755, exist_ok=True)
        module.exit_json(changed=changed, missing=[f["name"] for f in expected], present=[])
    cache_path = os.path.join(path, NODE_MANIFEST)
    cache = P.load_json(cache_path)
    # hash only files whose size already matches (a short or absent file is missing anyway)
    want = {f["name"]: f for f in expected}
    candidates = [n for n in want if os.path.isfile(os.path.join(path, n))
                  and os.path.getsize(os.path.join(path, n)) == want[n]["size"]]
    records = P.file_records(path, candidates, cache)
    missing = P.wheelhouse_diff(expected, records)
    merged = dict(cache)
    merged.update(records)
    if merged != cache and not module.check_mode:
        fd, tmp = tempfile.mkstemp(dir=path, prefix=".node-manifest.")
        with os.fdopen(fd, "w") as fh:
            json.dump(merged, fh, indent=1, sort_keys=True)
        module.atomic_move(tmp, cache_path)
    module.exit_json(changed=changed, missing=missing, present=sorted(set(want) - set(missing)))


if __name__ == "__main__":
    main()
