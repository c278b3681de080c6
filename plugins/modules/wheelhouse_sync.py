#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: wheelhouse_sync
short_description: Copy to a node only the wheels its wheelhouse lacks (by size and sha256)
description:
  - One task. Compares the wheel files the controller's manifest lists (the C(wheelhouse)
    module's C(by_set)) with the node's copy in O(path) in one pass; the action plugin then
    transfers only the missing or different files from O(src) on the controller to a private
    staging directory, and the module checks each one's sha256 and moves it into place
    atomically. A node that has everything gets no transfer. Makes O(path) when it is missing.
  - Works over any connection (ssh, podman, local); needs no rsync on either side.
  - Each node-side file is hashed once; the node keeps its own record
    (C(.provision-wheelhouse-node.json)) of size, mtime and sha256, so a re-run reads no wheel.
  - A cache file is not a change; C(changed) is true when files were copied or the directory made.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  src:
    description:
      - The wheelhouse directory on the controller (the C(wheelhouse) module's C(path)).
      - The action plugin needs it; the node-side module reads O(staged) instead.
    type: path
  staged:
    description: Internal (set by the action plugin) the node directory holding the transferred files.
    type: path
  path:
    description: The wheelhouse directory on the node.
    type: path
    required: true
  files:
    description: Expected files, each a dict with C(name), C(size), C(sha256).
    type: list
    elements: dict
    required: true
  peer_url:
    description:
      - Fetch the missing wheels over HTTP from another node that has them (the python_env role serves
        the first node's wheelhouse on its cluster address), instead of from the controller. Each file
        is checked against the manifest's sha256 before it is moved into place; what the peer could not
        give (unreachable, a short or different file) is then transferred from the controller.
    type: str
  peer_timeout:
    description: Seconds to wait for the peer's server to answer, and per read.
    type: int
    default: 60
  fetch:
    description: Internal (set by the action plugin) fetch from O(peer_url) now.
    type: bool
    default: false
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
    details: Compares only (no directory is made, nothing is transferred); RV(missing) is what would be copied.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Give the node the wheels it lacks
  provision.cluster.wheelhouse_sync:
    src: "{{ __wheelhouse.path }}"
    path: /var/cache/provision/wheelhouse
    files: "{{ __wheelhouse.by_set['numpy==2.3.5 torch==2.13.0'] }}"
"""

RETURN = r"""
copied:
  description: File names transferred this run.
  returned: when files were copied
  type: list
  elements: str
missing:
  description: File names still to copy (after a copy, empty).
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
import shutil
import tempfile
import time
import urllib.error
import urllib.parse

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import ConnectionError as UrlConnectionError, open_url
from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter
from ansible_collections.provision.cluster.plugins.module_utils.common import python_env as P

NODE_MANIFEST = ".provision-wheelhouse-node.json"


def adopt(module, path, staged, want):
    """Move the transferred files into place, each only after its sha256 matches the manifest.
    Returns their node records (so they are not hashed again)."""
    done = {}
    for name in sorted(os.listdir(staged)):
        if name not in want:
            continue
        tmp = os.path.join(staged, name)
        digest = P.sha256_file(tmp)
        if digest != want[name]["sha256"]:
            module.fail_json(msg=f"{name}: sha256 {digest} after transfer != manifest {want[name]['sha256']}")
        os.chmod(tmp, 0o644)
        dest = os.path.join(path, name)
        module.atomic_move(tmp, dest)
        st = os.stat(dest)
        done[name] = {"size": st.st_size, "mtime": int(st.st_mtime), "sha256": digest}
    return done


def fetch(path, names, url, timeout):
    """Download ``names`` from ``url`` into a staging directory under ``path``.
    Returns (staging directory, bytes fetched, {name: error})."""
    staged = tempfile.mkdtemp(prefix=".incoming-", dir=path)
    got, errors = 0, {}
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            try:
                with open_url(url.rstrip("/") + "/" + urllib.parse.quote(name), timeout=timeout) as r, \
                        open(os.path.join(staged, name), "wb") as out:
                    shutil.copyfileobj(r, out, 1 << 20)
                got += os.path.getsize(os.path.join(staged, name))
                break
            except (urllib.error.URLError, UrlConnectionError, OSError) as exc:
                # the server may still be starting: connection refused is retried until the deadline
                refused = "refused" in str(exc).lower()
                if refused and time.monotonic() < deadline:
                    time.sleep(0.3)
                    continue
                errors[name] = str(getattr(exc, "reason", exc))
                try:
                    os.unlink(os.path.join(staged, name))
                except OSError:
                    pass
                break
    return staged, got, errors


def adopt_valid(path, staged, want, module):
    """adopt() the staged files whose sha256 matches; the others are left out (and reported)."""
    bad = {}
    for name in sorted(os.listdir(staged)):
        if name in want and P.sha256_file(os.path.join(staged, name)) != want[name]["sha256"]:
            bad[name] = "sha256 differs from the manifest"
            os.unlink(os.path.join(staged, name))
    return adopt(module, path, staged, want), bad


def main():
    module = AnsibleModule(
        argument_spec=dict(path=dict(type="path", required=True),
                           files=dict(type="list", elements="dict", required=True),
                           src=dict(type="path"),
                           staged=dict(type="path"),
                           peer_url=dict(type="str"),
                           peer_timeout=dict(type="int", default=60),
                           fetch=dict(type="bool", default=False)),
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
    original = P.load_json(cache_path)
    cache = dict(original)
    want = {f["name"]: f for f in expected}
    if module.params["staged"]:
        cache.update(adopt(module, path, module.params["staged"], want))

    def compare():
        # hash only files whose size already matches (a short or absent file is missing anyway)
        candidates = [n for n in want if os.path.isfile(os.path.join(path, n))
                      and os.path.getsize(os.path.join(path, n)) == want[n]["size"]]
        records = P.file_records(path, candidates, cache)
        cache.update(records)
        return P.wheelhouse_diff(expected, records)

    missing = compare()
    peer = {}
    if missing and module.params["fetch"] and module.params["peer_url"] and not module.check_mode:
        staged, got, errors = fetch(path, missing, module.params["peer_url"], module.params["peer_timeout"])
        try:
            done, bad = adopt_valid(path, staged, want, module)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
        cache.update(done)
        errors.update(bad)
        peer = {"fetched": sorted(done), "bytes_from_peer": got, "peer_errors": errors}
        missing = compare()
    if cache != original:
        FileWriter(module).write(cache_path, json.dumps(cache, indent=1, sort_keys=True))
    # in compare mode, files to copy are the change to come (check mode reports it)
    module.exit_json(changed=changed or bool(missing) or bool(peer.get("fetched")), missing=missing,
                     present=sorted(set(want) - set(missing)), **peer)


if __name__ == "__main__":
    main()
