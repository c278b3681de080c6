#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: shell_env_block
short_description: One managed environment block in ~/.bashrc, above the non-interactive guard, and ~/.deepspeed_env
description:
  - Writes one block (BEGIN/END marker lines) into the user's C(~/.bashrc) holding C(source) lines,
    C(PATH)/C(LD_LIBRARY_PATH) prepends and C(export) lines, in a deterministic order, values shell-quoted.
  - The block is placed ABOVE the first "return unless interactive" guard (C(case $- in *i*) ;; *) return;; esac),
    C([ -z "$PS1" ] && return), C([[ $- != *i* ]] && return), C(if [ -z "$PS1" ]; then return; fi), ...),
    with the comment lines that introduce the guard, or at the top when there is none; a block found
    below a guard is moved. Non-interactive shells (C(ssh node cmd), pdsh, mpirun, DeepSpeed) return
    at that guard, so anything below it is never seen by launchers.
  - User content outside the block is kept byte for byte. Files are replaced atomically and only when
    their content changes. A file whose block markers do not pair (a BEGIN without its END) is refused,
    naming the file and the line, and left as it is.
  - Run as O(user) (the shell_env role uses C(become_user)), a symlinked dotfile is followed with the
    user's own rights. Run as root for another user, nothing in that home is followed or resolved; the
    files are reached through the home's directory fds (C(O_NOFOLLOW)), a link is refused in one line
    naming the file and the fix, and new files are given to the user through their fd.
  - Also keeps C(~/.deepspeed_env) (C(NAME=value) lines, which DeepSpeed's runner exports to every
    node). It sets O(deepspeed_vars), removes the ones it wrote last time and no longer manages, and keeps the user's.
  - With O(check), it then runs the check C(env block) of C(provision verify) (the options of
    M(provision.cluster.shell_env_check)), which says whether C(ssh <self>) sees the block.
version_added: 1.0.0
author: provision developers (!UNKNOWN)
options:
  user:
    description: The user whose files are managed (owner of new files; home from the password database).
    type: str
    default: root
  bashrc:
    description: The file to manage; default C(~user/.bashrc).
    type: path
  env:
    description: Variables to export (name -> value).
    type: dict
    default: {}
  path:
    description: Directories to prepend to C(PATH), first listed first.
    type: list
    elements: path
    default: []
  ld_library_path:
    description: Directories to prepend to C(LD_LIBRARY_PATH), first listed first.
    type: list
    elements: path
    default: []
  source:
    description: Files to source (when readable), e.g. a devtoolset C(enable) script.
    type: list
    elements: path
    default: []
  deepspeed_env:
    description: Path of the DeepSpeed environment file; default C(~user/.deepspeed_env); empty to leave it alone.
    type: str
  deepspeed_vars:
    description: The variables for O(deepspeed_env) (values must not need shell quoting; others are skipped and reported).
    type: dict
    default: {}
  state:
    description: C(present) writes the block, C(absent) removes it (and the variables it wrote to O(deepspeed_env)).
    type: str
    choices: [present, absent]
    default: present
  stages:
    description:
      - The stages whose exports make up the block (the shell_env role passes the C(provision_env_<stage>) facts
        that set something); recorded in the block on a line of its own.
      - A later run that does not know one of the recorded stages (see O(known_stages)) fails, naming the stage
        and the fix, and changes nothing, instead of writing a block without that stage's lines.
    type: list
    elements: str
  known_stages:
    description:
      - The stages whose C(provision_env_<stage>) fact this run has (set by the stage, or from the fact cache),
        whether or not it exports anything. Only read with O(stages).
    type: list
    elements: str
    default: []
  node:
    description: This node's inventory name, for the messages.
    type: str
  conflicts:
    description:
      - Variables two sources set to different values (the C(conflicts) of the shell_env role's merge); each is
        shown as an Ansible warning. The block holds the value that was kept either way.
    type: list
    elements: str
    default: []
  exports:
    description:
      - What the stages exported, merged without the user's extra variables; returned as the fact
        C(__shell_env_exports) (cached, for runs limited to other nodes). Nothing is returned when it is not given.
    type: dict
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.stage_check]
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Environment for non-interactive shells
  provision.cluster.shell_env_block:
    user: train
    env:
      NCCL_SOCKET_IFNAME: eth1
    path: [/opt/venv/bin]
    deepspeed_vars:
      NCCL_SOCKET_IFNAME: eth1
"""

RETURN = r"""
check_result:
  description: The result of M(provision.cluster.shell_env_check) with the arguments O(check) gave (C(checks), C(seen), ...).
  returned: when O(check) is given
  type: dict
ansible_facts:
  description: C(__shell_env_exports), the O(exports) given (cached with the facts).
  returned: when O(exports) is given
  type: dict
block:
  description: The managed block as written.
  returned: always
  type: str
bashrc:
  description: The file managed.
  returned: always
  type: str
where:
  description: Where the block is (above the guard at line N, top, kept at line N).
  returned: always
  type: str
deepspeed_env:
  description: The DeepSpeed environment file managed (empty when not managed).
  returned: always
  type: str
deepspeed_skipped:
  description: Variables left out of ~/.deepspeed_env because their value would need quoting.
  returned: always
  type: list
  elements: str
checks:
  description: Structured results for provision verify (check, status, detail, fix).
  returned: always
  type: list
  elements: dict
"""

import os
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter, UnsafeFile, confinement
from ansible_collections.provision.cluster.plugins.module_utils.common.bashrc import MarkerError
from ansible_collections.provision.cluster.plugins.module_utils.common.spawn import home_path
from ansible_collections.provision.cluster.plugins.module_utils.common import shell_env_check as E
from ansible_collections.provision.cluster.plugins.module_utils.verify.stage_check import CHECK_OPTION, stage_check
from ansible_collections.provision.cluster.plugins.module_utils.common.bashrc import (
    deepspeed_keys_of, deepspeed_safe, lost_exports, place_block, remove_block, render_block,
    update_deepspeed_env)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            user=dict(type="str", default="root"),
            bashrc=dict(type="path"),
            env=dict(type="dict", default={}),
            path=dict(type="list", elements="path", default=[]),
            ld_library_path=dict(type="list", elements="path", default=[]),
            source=dict(type="list", elements="path", default=[]),
            deepspeed_env=dict(type="str"),
            deepspeed_vars=dict(type="dict", default={}),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            stages=dict(type="list", elements="str"),
            known_stages=dict(type="list", elements="str", default=[]),
            node=dict(type="str"),
            conflicts=dict(type="list", elements="str", default=[]),
            exports=dict(type="dict"),
            **CHECK_OPTION,
        ),
        supports_check_mode=True,
    )
    p = module.params
    for line in p["conflicts"]:
        module.warn("%s%s (the later one was kept)" % ((p["node"] + ": ") if p["node"] else "", line))
    try:
        pw = pwd.getpwnam(p["user"])
    except KeyError:
        module.fail_json(msg="shell_env: user %s does not exist on this node; set cluster_user" % p["user"])
    # root for another user: that home is reached through its fds only, nothing there is resolved
    confine = confinement(pw)
    w = FileWriter(module, confine=confine)
    bashrc = p["bashrc"] or os.path.join(pw.pw_dir, ".bashrc")
    ds_path = p["deepspeed_env"]
    if ds_path is None:
        ds_path = os.path.join(pw.pw_dir, ".deepspeed_env")
    ds_path = home_path(ds_path) if ds_path else ""
    links = []
    if not confine:
        # the user's own rights: a symlinked dotfile (stow, a dotfiles repository) is edited where it is
        links = [(x, os.path.realpath(x)) for x in (bashrc, ds_path) if x and os.path.islink(x)]
        bashrc = os.path.realpath(bashrc)
        ds_path = os.path.realpath(ds_path) if ds_path else ""
    try:
        result = manage(module, p, w, bashrc, ds_path)
    except UnsafeFile as exc:
        via = [(x, real) for x, real in links if real in str(exc)]
        if via:  # the user's link points where the user cannot write: the fix is the link, not the target
            x, real = via[0]
            module.fail_json(msg="%s is a symbolic link to %s: %s; fix: make %s a regular file of %s's (or a link to "
                                 "a file %s can write); the link's target is left alone"
                                 % (x, real, str(exc).split("; fix: ", 1)[0], x, p["user"], p["user"]))
        module.fail_json(msg=str(exc))
    if p["exports"] is not None:
        result["ansible_facts"] = {"__shell_env_exports": p["exports"]}
    module.exit_json(**stage_check(module, E.ARGS, E.run, result))


def manage(module, p, w, bashrc, ds_path):
    before = w.read_text(bashrc, None)
    old_text = before or ""
    try:
        previous_ds_keys = deepspeed_keys_of(old_text)
        ds_vars, skipped = deepspeed_safe({k: str(v) for k, v in p["deepspeed_vars"].items()})
        if p["state"] == "present":
            lost = lost_exports(old_text, list(p["known_stages"]) + list(p["stages"] or [])) \
                if p["stages"] is not None else []
            if lost:
                module.fail_json(
                    msg="%s: %s holds what %s exported, which this run does not know (the stage did not run and no "
                        "cached facts hold its result): writing the block now would drop those lines; nothing was "
                        "changed; fix: ansible-playbook site.yml --tags %s,shell_env (or the whole site.yml)"
                        % (p["node"] or "this node", bashrc, " and ".join(lost), ",".join(lost)), lost_stages=lost)
            merged = {"env": {k: "" if v is None else str(v) for k, v in p["env"].items()}, "path": p["path"],
                      "ld_library_path": p["ld_library_path"], "source": p["source"]}
            block = render_block(merged, sorted(ds_vars) if ds_path else None, p["stages"])
            after, where = place_block(old_text, block)
        else:
            block, where, ds_vars = "", "absent", {}
            after = remove_block(old_text)
    except MarkerError as exc:
        raise UnsafeFile("%s %s" % (bashrc, exc)) from None

    files = [(bashrc, after)]
    if ds_path:
        ds_before = w.read_text(ds_path, None)
        ds_after = update_deepspeed_env(ds_before or "", ds_vars, previous_ds_keys)
        if ds_before is None and not ds_after:
            ds_after = None  # nothing to write, do not create an empty file
        files.append((ds_path, ds_after))

    # a file made here gets the user as owner; an existing one keeps its mode and owner
    pw = pwd.getpwnam(p["user"])
    owner = (pw.pw_uid, pw.pw_gid) if os.geteuid() == 0 else None
    checks = []
    for path, new in files:
        same = new is None or not w.write(path, new, mode=0o644, owner=owner, new_only=True)
        checks.append({
            "check": "shell_env.%s" % os.path.basename(path).lstrip("."),
            "status": "pass" if same else "fail",
            "detail": "%s %s" % (path, "up to date (%s)" % where if same and path == bashrc else
                                 "up to date" if same else "missing or outdated"),
            "fix": "" if same else "ansible-playbook playbooks/shell_env.yml (cluster_user=%s)" % p["user"],
        })
    changed, diff = any(f["changed"] for f in w.files), w.diffs
    if skipped:
        module.warn("left out of %s (values need quoting, DeepSpeed exports them unquoted): %s"
                    % (ds_path, ", ".join(skipped)))
    return dict(changed=changed, diff=diff, block=block, bashrc=bashrc, where=where,
                deepspeed_env=ds_path, deepspeed_skipped=skipped, checks=checks)


if __name__ == "__main__":
    main()
