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
  - Run as O(owner) (the launchers role uses C(become_user)) it works with that user's rights. Run as
    root for another user, the directory in that user's home is reached through its fds without
    following a link (a link, e.g. C(~/.provision -> /etc), is refused in one line naming it and the
    fix), and only the directories made here are given to O(owner).
  - With O(check), it then runs the check C(launch files) of C(provision verify) (the options of
    M(provision.cluster.launch_files_info)) on what it wrote.
options:
  path:
    description: The directory; C(~user) is expanded on the node. Made (0755) when missing.
    type: path
    required: true
  owner:
    description: User owning the directory and files (its primary group too).
    type: str
  files:
    description:
      - "C({name: {content: str, mode: '0644'}}): the files to have."
      - "C(keep: true) in an entry: write that file only where it is missing (its content is a fallback)."
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
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.stage_check]
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
check_result:
  description: The result of M(provision.cluster.launch_files_info) with the arguments O(check) gave (C(checks), C(path)).
  returned: when O(check) is given
  type: dict
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
from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter, UnsafeFile, confinement
from ansible_collections.provision.cluster.plugins.module_utils.common import launch as L
from ansible_collections.provision.cluster.plugins.module_utils.verify.stage_check import CHECK_OPTION, stage_check


def _missing_dirs(path):
    """The directories of path that do not exist yet, outermost first (plain paths: no confinement)."""
    missing = []
    while path and not os.path.isdir(path):
        missing.insert(0, path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def _link_on_the_way(path):
    """(link, target) of the first symbolic link among path and the directories above it, or None."""
    parts = os.path.abspath(path).split(os.sep)
    for i in range(2, len(parts) + 1):
        here = os.sep.join(parts[:i])
        if os.path.islink(here):
            return here, os.readlink(here)
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            owner=dict(type="str"),
            files=dict(type="dict", required=True),
            absent=dict(type="list", elements="str", default=[]),
            path_fact=dict(type="str"),
            **CHECK_OPTION,
        ),
        supports_check_mode=True,
    )
    owner = module.params["owner"]
    path = module.params["path"]
    if path.startswith("~"):  # type path expanded ~ and ~user already: that user does not exist
        module.fail_json(msg="launch_dir: user of %s does not exist on this node; create it or set cluster_user"
                         % module.params["path"])
    try:
        pw = pwd.getpwnam(owner) if owner else pwd.getpwuid(os.getuid())
    except KeyError:
        module.fail_json(msg="launch_dir: user %s does not exist on this node; create it or set cluster_user" % owner)
    files = module.params["files"]
    for name, spec in files.items():
        if "/" in name or name in (".", "..") or not isinstance(spec, dict) or "content" not in spec:
            module.fail_json(msg="launch_dir: bad entry %r (needs a plain name and {content, mode})" % name)
    for name in module.params["absent"]:
        if "/" in name or name in (".", "..", ""):
            module.fail_json(msg="launch_dir: bad absent name %r (a plain file name)" % name)
    try:
        result = write_dir(module, path, pw, files)
    except UnsafeFile as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        link = _link_on_the_way(path)
        where = " (%s is a symbolic link to %s)" % link if link else ""
        module.fail_json(msg="launch_dir: cannot write %s: %s%s; fix: make %s a directory %s can write%s"
                         % (path, exc.strerror or exc, where, path, pw.pw_name,
                            ", with no link on the way (the link's target is left alone)" if link else ""))
    if module.params["path_fact"]:
        result["ansible_facts"] = {module.params["path_fact"]: path}
    module.exit_json(**stage_check(module, L.CHECK_ARGS, L.run_check, result))


def write_dir(module, path, pw, files):
    owner = (pw.pw_uid, pw.pw_gid)
    confine = [c for c in confinement(pw) if c.covers(path)]
    w = FileWriter(module, confine=confine)
    c = confine[0] if confine else None
    if c is not None:
        made_dir = c.kind(path) != "dir"   # a link on the way raises the one-line refusal
        if made_dir and not module.check_mode:
            c.makedirs(path, 0o755, owner)
    else:
        missing = _missing_dirs(path)
        made_dir = bool(missing)
        if missing and not module.check_mode:
            os.makedirs(path, mode=0o755)
            if os.geteuid() == 0:
                for d in missing:  # only what was made here (never an existing parent such as /opt)
                    os.chown(d, owner[0], owner[1])
    written = []
    for name in sorted(files):
        target = os.path.join(path, name)
        if made_dir and module.check_mode:
            written.append(name)
            continue
        if files[name].get("keep") and os.path.lexists(target):
            continue   # written only where it is missing: what the node has is not known better here
        if w.write(target, files[name]["content"], mode=L.file_mode(files[name]), owner=owner):
            written.append(name)
    removed = []
    for name in module.params["absent"]:
        target = os.path.join(path, name)
        there = (c.kind(target) is not None) if c is not None else os.path.lexists(target)
        if there:
            removed.append(name)
            if module.check_mode:
                continue
            if c is not None:
                c.unlink(target)
            else:
                os.unlink(target)
    return dict(changed=bool(made_dir or written or removed), path=path, written=written, removed=removed,
                diff=w.diffs)


if __name__ == "__main__":
    main()
