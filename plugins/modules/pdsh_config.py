#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: pdsh_config
short_description: pdsh's hosts file and ssh as its rcmd, then proof that pdsh reaches every node
description:
  - Reports whether C(pdsh) is installed (RV(found)); when it is not, does nothing else (the pdsh
    role installs the package and calls it again, so a re-run does no package work).
  - Writes O(hosts_file) (one node name per line, in node order) and, where the distribution's
    C(pdsh) wrapper reads it (Debian/Ubuntu), C(/etc/pdsh/rcmd_default) = C(ssh); atomically and
    only when they differ.
  - With O(check), runs C(pdsh -w ^HOSTS_FILE hostname) as O(user) with C(PDSH_RCMD_TYPE=ssh),
    bounded by C(-t) (connect) and C(-u) (command) timeouts, and reports every node that did not
    answer or answered with another hostname. In check mode the check still runs (read-only)
    when the files are already right.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  hosts:
    description: Node names, as ssh resolves them through ~/.ssh/config (the inventory names).
    type: list
    elements: str
    required: true
  targets:
    description:
      - Run C(pdsh -w T1,T2 hostname) to these nodes only (of O(hosts)) instead of C(-w ^hosts_file)
        (provision verify's ring; the hosts file is still compared with O(hosts)).
    type: list
    elements: str
  hosts_file:
    description: The pdsh hosts file (C(pdsh -w ^FILE)); C(WCOLL) points at it too.
    type: path
    default: /etc/pdsh/hosts
  rcmd_default:
    description: Written to C(rcmd_default_path) when the pdsh wrapper reads that file; empty to leave it.
    type: str
    default: ssh
  rcmd_default_path:
    description: The file Debian's pdsh wrapper reads its default rcmd from.
    type: path
    default: /etc/pdsh/rcmd_default
  check:
    description: Run pdsh to every node and compare the answers with O(expect_hostnames).
    type: bool
    default: true
  check_if_changed:
    description: Run that check also when O(check=false) if this call changed the hosts file or rcmd.
    type: bool
    default: false
  expect_hostnames:
    description:
      - The hostname each node of O(hosts) must answer with, in that order (the ssh_mesh stage reads them).
      - Without it an inventory name need not be the hostname; only an answer that is another node's name
        of O(hosts) fails (that name reaches the wrong machine).
    type: list
    elements: str
  user:
    description: Run the check as this user (the cluster user).
    type: str
  connect_timeout:
    description: pdsh C(-t), seconds (the pdsh role and C(provision verify) pass C(pdsh_connect_timeout)).
    type: int
    required: true
  command_timeout:
    description:
      - pdsh C(-u), seconds; also the limit of the whole check (plus O(connect_timeout)) (the pdsh role and
        C(provision verify) pass C(pdsh_command_timeout)).
    type: int
    required: true
  node:
    description: The node's inventory name, for the fix lines of RV(checks).
    type: str
  fail_on_check:
    description:
      - Fail, in one line naming the node, every node pdsh did not reach and the fix, when the check ran and
        one was missing (the pdsh stage; C(provision verify) only reads RV(checks)).
    type: bool
    default: false
  fail_if_absent:
    description: Fail when pdsh is not installed, instead of returning RV(found=false) (the pdsh stage, after its install).
    type: bool
    default: false
  export_env:
    description:
      - Variables for the shell environment block (C(PDSH_RCMD_TYPE), C(WCOLL)); returned as the fact
        C(provision_env_pdsh), which the shell_env stage reads, as every stage's export. Nothing is returned without it.
    type: dict
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
    details: In check mode the files are compared, not written; a difference is a failed check C(pdsh).
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: pdsh hosts file and check
  provision.cluster.pdsh_config:
    hosts: "{{ ansible_play_hosts }}"
    user: "{{ cluster_user }}"
    connect_timeout: "{{ lookup('provision.cluster.setting', 'pdsh_connect_timeout') }}"
    command_timeout: "{{ lookup('provision.cluster.setting', 'pdsh_command_timeout') }}"
"""

RETURN = r"""
ansible_facts:
  description: C(provision_env_pdsh) (O(export_env) as the shell_env stage reads it).
  returned: when O(export_env) is given
  type: dict
  sample: {provision_env_pdsh: {env: {PDSH_RCMD_TYPE: ssh, WCOLL: /etc/pdsh/hosts}, path: [], ld_library_path: [], source: []}}
found: {description: pdsh is installed., returned: always, type: bool}
rcmd_default_supported: {description: The pdsh wrapper reads rcmd_default., returned: always, type: bool}
checked:
  description: pdsh was run from this node in this call (O(check), or O(check_if_changed) and the files changed).
  returned: always
  type: bool
answers: {description: node -> hostname it answered with., returned: when check ran, type: dict, sample: {node1: node1}}
missing:
  description: Nodes that did not answer (or answered wrongly), with pdsh's error line.
  returned: always
  type: list
  elements: str
checks:
  description:
    - One check C(pdsh from SOURCE) in the shape of C(provision verify) when pdsh ran; a failed check C(pdsh)
      when pdsh is not installed, or (check mode) when the hosts file or rcmd_default differs from what it should be.
  returned: always
  type: list
  elements: dict
"""

import os
import socket
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter, read_text
from ansible_collections.provision.cluster.plugins.module_utils.ssh.pdsh import missing_answers, parse_pdsh_output
from ansible_collections.provision.cluster.plugins.module_utils.common.users import as_user


def main():
    module = AnsibleModule(
        argument_spec=dict(
            hosts=dict(type="list", elements="str", required=True),
            hosts_file=dict(type="path", default="/etc/pdsh/hosts"),
            rcmd_default=dict(type="str", default="ssh"),
            rcmd_default_path=dict(type="path", default="/etc/pdsh/rcmd_default"),
            check=dict(type="bool", default=True),
            check_if_changed=dict(type="bool", default=False),
            expect_hostnames=dict(type="list", elements="str"),
            user=dict(type="str"),
            connect_timeout=dict(type="int", required=True),
            command_timeout=dict(type="int", required=True),
            node=dict(type="str"),
            targets=dict(type="list", elements="str"),
            fail_on_check=dict(type="bool", default=False),
            fail_if_absent=dict(type="bool", default=False),
            export_env=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    stage = "ansible-playbook site.yml --tags pdsh" + (" --limit %s" % p["node"] if p["node"] else "")
    who = (p["node"] + ": ") if p["node"] else ""
    exported = {}
    if p["export_env"] is not None:
        export = {"env": p["export_env"], "path": [], "ld_library_path": [], "source": []}
        exported = {"ansible_facts": {"provision_env_pdsh": export}}
    pdsh = module.get_bin_path("pdsh")
    if not pdsh:
        if p["fail_if_absent"]:
            module.fail_json(msg="%spdsh is not installed (pdsh_install: false?); fix: %s (or install the pdsh package)"
                             % (who, stage))
        module.exit_json(changed=False, found=False, rcmd_default_supported=False, missing=[], checked=False,
                         checks=[{"check": "pdsh", "status": "fail", "detail": "pdsh is not installed",
                                  "fix": "%s (or install the pdsh package)" % stage}], **exported)
    wrapper = read_text(pdsh) if os.path.getsize(pdsh) < 65536 else ""
    rcmd_supported = bool(wrapper) and p["rcmd_default_path"] in (wrapper or "")
    files = [(p["hosts_file"], "".join(h + "\n" for h in p["hosts"]))]
    if rcmd_supported and p["rcmd_default"]:
        files.append((p["rcmd_default_path"], p["rcmd_default"] + "\n"))
    w = FileWriter(module)
    for path, content in files:
        w.write(path, content, mode=0o644, new_only=True, dir_mode=0o755)
    changed, diffs = any(f["changed"] for f in w.files), w.diffs
    result = dict(changed=changed, found=True, rcmd_default_supported=rcmd_supported, missing=[], checks=[], checked=False)
    if changed and module.check_mode:
        result["checks"] = [{"check": "pdsh", "status": "fail",
                             "detail": "the pdsh hosts file or rcmd_default does not match the inventory", "fix": stage}]
    if diffs and module._diff:
        result["diff"] = diffs
    if (p["check"] or (p["check_if_changed"] and changed)) and not (module.check_mode and changed):
        kwargs, error = as_user(p["user"], {"PDSH_RCMD_TYPE": "ssh"})
        if error:
            module.fail_json(msg=error)
        # targets: the nodes to reach (provision verify's ring); the hosts file is compared with hosts above
        targets = [t for t in p["targets"] if t in p["hosts"]] if p["targets"] else None
        argv = [pdsh, "-t", str(p["connect_timeout"]), "-u", str(p["command_timeout"]),
                "-w", ",".join(targets) if targets else "^" + p["hosts_file"], "hostname"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                                  timeout=p["connect_timeout"] + p["command_timeout"] + 5, **kwargs)
            out, err = proc.stdout, proc.stderr
        except subprocess.TimeoutExpired:
            out, err = "", "pdsh@%s: all: timed out" % socket.gethostname()
        answers, errors, fixes = parse_pdsh_output(out, err)
        expect = p["expect_hostnames"] or None
        reached = targets or p["hosts"]
        if targets and expect:
            expect = [expect[p["hosts"].index(t)] if p["hosts"].index(t) < len(expect) else t for t in targets]
        missing = missing_answers(reached, expect, answers, errors, cluster=p["hosts"])
        source = socket.gethostname()
        # pdsh runs ssh: when ssh said why (host key changed, key not authorized, ...), its fix
        ssh_fixes = sorted({fix for cls, fix in fixes.values()})
        fix = "run the ssh_mesh and pdsh stages"
        if len(ssh_fixes) == 1:
            fix = "ssh from %s failed: %s" % (source, ssh_fixes[0])
        result.update(answers=answers, missing=missing, checked=True, checks=[{
            "check": "pdsh from %s" % source, "status": "fail" if missing else "pass",
            "detail": "; ".join(missing) or "%d/%d nodes answered%s" % (
                len(answers), len(reached), " (pdsh -w %s)" % ",".join(targets) if targets else ""),
            "fix": "%s; try `PDSH_RCMD_TYPE=ssh pdsh -w ^%s hostname`" % (fix, p["hosts_file"]) if missing else ""}])
        if missing and p["fail_on_check"] and not module.check_mode:
            module.fail_json(msg="%spdsh -w %s hostname: %s; fix: %s" % (
                who, ",".join(targets) if targets else "^" + p["hosts_file"], "; ".join(missing),
                result["checks"][0]["fix"]), **result)
    result.update(exported)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
