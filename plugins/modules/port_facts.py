#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: port_facts
short_description: Which TCP ports are listening or held, and by which process (from /proc)
description:
  - Reads C(/proc/net/tcp) and C(/proc/net/tcp6) of the target's network namespace and maps
    each socket to the processes holding it through the links in C(/proc/<pid>/fd). Needs no
    C(ss), C(netstat) or C(lsof), so it works on minimal images and in containers.
  - For every port asked for it reports whether something listens, which pids and process
    names hold it, and a one-line summary such as C(29500 is held by pid 4242 (python)).
  - With O(expect) each port also gets a check in the shape shared with C(provision verify)
    (C(check), C(status), C(detail), C(fix)). The module never fails because of a check; the
    caller asserts on RV(checks) or RV(failed_checks).
  - Read-only; runs the same in check mode.
  - Without root, sockets owned by other users' processes show as listening with no owner.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  ports:
    description:
      - TCP ports to report on. Empty means every port that has a listening socket.
    type: list
    elements: int
    default: []
  expect:
    description:
      - C(report) only describes the ports (every check passes).
      - C(free) fails the check of a port that is held, unless every holder's process name is
        in O(allowed_holders) (e.g. the rendezvous port free, or the sshd port held by our sshd).
      - C(listening) fails the check of a port nothing listens on, and, when
        O(allowed_holders) is given, of a port held by another process.
    type: str
    choices: [report, free, listening]
    default: report
  allowed_holders:
    description: Process names (as in C(/proc/<pid>/comm)) that may hold the ports.
    type: list
    elements: str
    default: []
  proc_path:
    description: Where procfs is mounted (tests point it at a copy).
    type: path
    default: /proc
notes:
  - Only TCP. TIME_WAIT sockets no process owns do not make a port held (a new listener with
    SO_REUSEADDR can bind it); they are shown in RV(ports[].states).
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.INFO_MODULE]
"""

EXAMPLES = r"""
- name: Is the rendezvous port free (or already ours)?
  provision.cluster.port_facts:
    ports: [29500]
    expect: free
  register: rdzv

- name: Fail with who holds it
  ansible.builtin.assert:
    that: rdzv.failed_checks | length == 0
    fail_msg: "{{ inventory_hostname }}: {{ rdzv.failed_checks | map(attribute='detail') | join('; ') }}"

- name: sshd must listen on 2222
  provision.cluster.port_facts:
    ports: [2222]
    expect: listening
    allowed_holders: [sshd]

- name: Everything that listens
  provision.cluster.port_facts:
  register: listeners
"""

RETURN = r"""
ports:
  description: One entry per port asked for (or per listening port), in the order asked.
  returned: always
  type: list
  elements: dict
  contains:
    port: {description: The port., type: int, sample: 29500}
    listening: {description: A LISTEN socket exists on the port (IPv4 or IPv6)., type: bool}
    held:
      description: Listening, or a live process owns a socket bound to the port.
      type: bool
    addresses:
      description: Listening addresses, C(ip:port) or C([ip6]:port).
      type: list
      elements: str
      sample: ["0.0.0.0:2222", "[::]:2222"]
    states: {description: TCP states of all sockets on the port., type: list, elements: str, sample: [LISTEN]}
    pids: {description: Pids holding the port (the listeners if any)., type: list, elements: int, sample: [4242]}
    processes:
      description: C(pid), C(name) (comm) and C(cmdline) of each holder.
      type: list
      elements: dict
      sample: [{pid: 4242, name: python, cmdline: "python train.py"}]
    summary: {description: One line., type: str, sample: "29500 is held by pid 4242 (python)"}
listening:
  description: Every port with a listening socket on the host (whatever O(ports) says).
  returned: always
  type: list
  elements: int
  sample: [22, 2222]
checks:
  description: One check per port (C(check), C(status) pass/fail, C(detail), C(fix)).
  returned: always
  type: list
  elements: dict
  sample: [{check: port 29500, status: fail, detail: "29500 is held by pid 4242 (python)", fix: "stop it: kill 4242"}]
init:
  description: The name of PID 1 (C(systemd), C(init), or in a container C(catatonit), C(tini), C(sleep), ...),
    which says whether anything starts a service again after a restart.
  returned: always
  type: str
  sample: systemd
failed_checks:
  description: The checks whose status is C(fail).
  returned: always
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.net.ports import (
    listeners,
    port_facts,
    port_result,
    read_sockets,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ports=dict(type="list", elements="int", default=[]),
            expect=dict(type="str", choices=["report", "free", "listening"], default="report"),
            allowed_holders=dict(type="list", elements="str", default=[]),
            proc_path=dict(type="path", default="/proc"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    bad = [port for port in p["ports"] if not 0 < port < 65536]
    if bad:
        module.fail_json(msg="ports out of range 1-65535: %s" % bad)
    reports = port_facts(p["ports"], p["proc_path"])
    others = None
    if p["expect"] == "listening" and p["allowed_holders"] and not all(r["listening"] for r in reports):
        others = listeners(p["proc_path"])
    listening = sorted({s["local_port"] for s in read_sockets(p["proc_path"]) if s["state"] == "LISTEN"})
    try:
        with open(os.path.join(p["proc_path"], "1", "comm"), encoding="utf-8") as handle:
            init = handle.read().strip()
    except OSError:
        init = ""
    module.exit_json(**port_result(reports, p["expect"], p["allowed_holders"], listening, init, others))


if __name__ == "__main__":
    main()
