#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: launch_dir
short_description: Write a directory of launcher files (hostfiles, scripts, configs) in one task
description:
  - Writes every file given in O(files) into O(path), owned by O(owner), each atomically and only
    when its content or mode differs. Files of O(absent) are removed.
  - The contents come from the C(provision.cluster.launch_files) filter (see the launchers role).
options:
  path:
    description: The directory; C(~user) is expanded on the node. Made (0755) when missing.
    type: path
    required: true
  owner:
    description: User owning the directory and files (its primary group too).
    type: str
  files:
    description: "C({name: {content: str, mode: '0644'}}): the files to have."
    type: dict
    required: true
  absent:
    description: File names in O(path) that must not exist (e.g. a rank table no longer wanted).
    type: list
    elements: str
    default: []
  path_fact:
    description:
      - Name of a fact to set to the expanded directory (the launchers role sets C(launchers_path)),
        so that no extra task is needed to record it.
    type: str
author: provision developers (!UNKNOWN)
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
  diff_mode:
    support: partial
    details: The content of the files written; files removed (O(absent)), mode-only fixes and the directory made show in RV(written) and RV(removed).
"""

EXAMPLES = r"""
- name: Write the launch files
  provision.cluster.launch_dir:
    path: "~root/.provision/launch"
    owner: root
    files:
      hostfile.deepspeed: {content: "node1 slots=8\nnode2 slots=8\n", mode: "0644"}
"""

RETURN = r"""
path:
  description: The directory, expanded.
  returned: always
  type: str
written:
  description: Names of the files written (or that would be, in check mode).
  returned: always
  type: list
  elements: str
removed:
  description: Names of the files removed.
  returned: always
  type: list
  elements: str
ansible_facts:
  description: O(path_fact) set to the expanded directory.
  returned: when O(path_fact) is set
  type: dict
  sample: {"launchers_path": "/root/.provision/launch"}
"""

import os
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.files import FileWriter
from ansible_collections.provision.cluster.plugins.module_utils.launch import file_mode, plan_files


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            owner=dict(type="str"),
            files=dict(type="dict", required=True),
            absent=dict(type="list", elements="str", default=[]),
            path_fact=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    owner = module.params["owner"]
    path = module.params["path"]
    if path.startswith("~"):  # type path expanded ~ and ~user already: that user does not exist
        module.fail_json(msg="launch_dir: user of %s does not exist on this node; create it or set cluster_user"
                         % module.params["path"])
    try:
        uid, gid = (pwd.getpwnam(owner)[2:4]) if owner else (os.getuid(), os.getgid())
    except KeyError:
        module.fail_json(msg="launch_dir: user %s does not exist on this node; create it or set cluster_user" % owner)
    files = module.params["files"]
    for name, spec in files.items():
        if "/" in name or not isinstance(spec, dict) or "content" not in spec:
            module.fail_json(msg="launch_dir: bad entry %r (needs a plain name and {content, mode})" % name)

    facts = {"ansible_facts": {module.params["path_fact"]: path}} if module.params["path_fact"] else {}
    made_dir = not os.path.isdir(path)
    todo = plan_files(path, files) if not made_dir else [(n, "missing") for n in sorted(files)]
    removed = [n for n in module.params["absent"] if os.path.lexists(os.path.join(path, n))]
    if made_dir and not module.check_mode:
        os.makedirs(path, mode=0o755)
        parent = os.path.dirname(path)
        for d in (parent, path):  # ~/.provision and ~/.provision/launch belong to the user
            os.chown(d, uid, gid)
    w = FileWriter(module)
    for name, _reason in todo:
        w.write(os.path.join(path, name), files[name]["content"], mode=file_mode(files[name]), owner=(uid, gid))
    if not module.check_mode:
        for name in removed:
            os.unlink(os.path.join(path, name))
    module.exit_json(changed=bool(made_dir or todo or removed), path=path, written=[n for n, _unused in todo],
                     removed=removed, diff=w.diffs, **facts)


if __name__ == "__main__":
    main()
