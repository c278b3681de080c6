#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: ssh_landing
short_description: Check that `ssh <peer>` from this node lands in the node the inventory means
description:
  - From this node, as O(user), runs C(ssh <name>) for every name of every peer (the node itself
    included) the way pdsh, DeepSpeed and mpirun do (BatchMode, the user's ~/.ssh/config and
    known_hosts, no host-key shortcuts), and reads back the identity the session sees
    (/etc/provision/node-id, hostname, boot_id, the IPv4 addresses on its interfaces).
  - Compares it with the identity Ansible gathered from that peer (M(provision.cluster.node_runtime)
    writes the per-node token). The token must match, the peer's cluster address must be on the
    interfaces of the machine reached, the hostname must match. A container on the host network
    whose C(ssh node2) reaches the host's sshd, or a name that resolves to a sibling, fails
    naming the pair.
  - Read-only; the ssh connections run in parallel, each bounded by O(timeout).
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  node:
    description: This node's inventory name (for the messages).
    type: str
    required: true
  user:
    description: The user who runs ssh (the cluster user).
    type: str
    default: root
  peers:
    description:
      - Identities of the nodes, as M(provision.cluster.node_runtime) returns them in
        C(node_runtime.identity), C(name), C(address), C(hostname), C(token).
      - C(name) and C(address) suffice (inventory only, e.g. under the free strategy); then the
        inventory name in the peer's node-id file is compared instead of the whole token.
    type: list
    elements: dict
    required: true
  names:
    description:
      - Which names of each peer to ssh to, C(inventory) (its inventory name), C(hostname), C(address)
        (its cluster address). The ssh mesh makes the first two; launchers' hostfiles use them.
    type: list
    elements: str
    choices: [inventory, hostname, address]
    default: [inventory, hostname]
  timeout:
    description:
      - Seconds for each ssh connection (ConnectTimeout); each login is bounded by twice that plus 5 s,
        each try of it.
    type: int
    default: 10
  retries:
    description:
      - How many more times a login whose connection timed out is tried (an answer, such as a refused
        key or a wrong landing, is never tried again).
    type: int
    default: 1
  fail_on_check:
    description: Fail with the check's detail and fix when a name lands in the wrong place.
    type: bool
    default: false
  reports:
    description:
      - alias -> the landing report an earlier connection of the same user already printed in this run
        (C(reports) of M(provision.cluster.ssh_mesh_check) with C(landing=true)). A report that proves
        the landing (the peer's node-id token) is used instead of a new connection; any other alias is
        probed here.
    type: dict
    default: {}
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.INFO_MODULE]
"""

EXAMPLES = r"""
- name: ssh <peer> lands in the node the inventory means
  provision.cluster.ssh_landing:
    node: "{{ inventory_hostname }}"
    user: "{{ cluster_user | default('root') }}"
    peers: "{{ ansible_play_hosts | map('extract', hostvars) | selectattr('node_runtime', 'defined')
               | map(attribute='node_runtime.identity') | list }}"
    fail_on_check: true
"""

RETURN = r"""
checks:
  description:
    - One C(landing) check for this node.
    - Then a C(host identity) warning when this node and another answered with the same hostname and
      boot id (what NCCL hashes to tell hosts apart; containers of one machine sharing a hostname).
  returned: always
  type: list
  elements: dict
  sample: [{"check": "landing", "status": "fail",
            "detail": "node1: `ssh node2` landed on node1, not node2: node-id is node1; 10.89.7.12 is not on its interfaces",
            "fix": "on node1 make each name resolve to its node: fix ~/.ssh/config (HostName/Port) and /etc/hosts for node2"}]
pairs:
  description: Every name tried, with the peer meant, ok, the reason and what the session reported.
  returned: always
  type: list
  elements: dict
"""

import subprocess
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.ssh.landing import (
    LANDING_SCRIPT, landing_checks, landing_from_report, landing_pair,
)
from ansible_collections.provision.cluster.plugins.module_utils.common.users import as_user


def probe(ssh, popen_user, alias, peer, timeout, retries=1):
    """One login; a connection that timed out (a SYN lost on the way: on a 32-node lab whose host's
    neighbour table had overflowed, for seconds at a time; a VM network that blinks) is tried again,
    RETRIES times, as the SSH matrix does. A refused key, a wrong host key or a wrong landing is an
    answer and is not retried."""
    result = attempt(ssh, popen_user, alias, peer, timeout)
    for n in range(retries):
        if result.get("ok") or not result.get("timed_out"):
            break
        result = dict(attempt(ssh, popen_user, alias, peer, timeout), attempts=n + 2)
    result.pop("timed_out", None)
    return result


def attempt(ssh, popen_user, alias, peer, timeout):
    argv = [ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=%d" % timeout, alias, LANDING_SCRIPT]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=2 * timeout + 5,
                              stdin=subprocess.DEVNULL, check=False, **popen_user)
    except subprocess.TimeoutExpired:
        return {"alias": alias, "peer": peer["name"], "ok": False, "timed_out": True,
                "reason": "`ssh %s` timed out after %d s" % (alias, 2 * timeout + 5)}
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
        return {"alias": alias, "peer": peer["name"], "ok": False, "timed_out": "timed out" in err,
                "reason": "`ssh %s` failed: %s" % (alias, err)}
    try:
        return landing_pair(alias, peer, proc.stdout)
    except ValueError as exc:
        return {"alias": alias, "peer": peer["name"], "ok": False, "reason": "`ssh %s`: %s" % (alias, exc)}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", required=True),
            user=dict(type="str", default="root"),
            peers=dict(type="list", elements="dict", required=True),
            names=dict(type="list", elements="str", default=["inventory", "hostname"],
                       choices=["inventory", "hostname", "address"]),
            timeout=dict(type="int", default=10),
            retries=dict(type="int", default=1),
            fail_on_check=dict(type="bool", default=False),
            reports=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    ssh = module.get_bin_path("ssh", required=True)
    popen_user, error = as_user(p["user"])
    if error:
        module.fail_json(msg=error)
    jobs = []
    field = {"inventory": "name", "hostname": "hostname", "address": "address"}
    for peer in p["peers"]:
        for alias in dict.fromkeys(peer.get(field[n]) for n in p["names"]):
            if alias:
                jobs.append((alias, peer))
    # 8 logins at a time: every node runs this at once, and a fresh run checks every node under each
    # of its names (2N logins per node by default), so the cluster has 8N logins in flight at most
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(jobs)))) as pool:
        pairs = list(pool.map(lambda j: landing_from_report(j[0], j[1], p["reports"].get(j[0]))
                              or probe(ssh, popen_user, j[0], j[1], p["timeout"], p["retries"]), jobs))
    checks = landing_checks(p["node"], pairs)
    check = checks[0]
    result = {"changed": False, "checks": checks, "pairs": pairs}
    if p["fail_on_check"] and check["status"] == "fail":
        module.fail_json(msg="%s | fix: %s" % (check["detail"], check["fix"]), checks=[check],
                         pairs=[{k: v for k, v in pair.items() if k != "reported"} for pair in pairs])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
