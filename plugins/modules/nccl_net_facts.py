#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: nccl_net_facts
short_description: Choose NCCL/Gloo network settings from what the node really has
description:
  - Reads interfaces, state, MTU, speed and addresses from C(/sys/class/net), C(/proc/net/fib_trie),
    C(/proc/net/route) and C(/proc/net/if_inet6) (never the C(ip) command, which minimal images lack),
    and RDMA ports from C(/sys/class/infiniband) (state, link layer, rate, GID table).
  - Picks C(NCCL_SOCKET_IFNAME)/C(GLOO_SOCKET_IFNAME) as the interface the kernel routes every peer
    through (longest prefix match), never C(lo), a software bridge, or a link that is down;
    C(NCCL_IB_HCA) as the ACTIVE ports, native InfiniBand before RoCE, DOWN ports never;
    C(NCCL_IB_GID_INDEX) for RoCE v2; C(NCCL_IB_DISABLE=1) when no usable RDMA port exists.
  - Probes every peer (or O(probe_peers)) with a TCP connect from the chosen interface (bounded by O(probe_timeout));
    a refused connection counts as reachable (the peer answered), a timeout or an unreachable error,
    twice (1 s apart, the second with twice the timeout), fails naming the pair.
  - Every value can be overridden; RV(reasons) says why each value was chosen.
  - Changes nothing on the node; safe in check mode (it still probes, a TCP connect is read-only).
version_added: 1.0.0
author: provision developers (!UNKNOWN)
options:
  peers:
    description:
      - The nodes, as the cluster plan lists them (C(cluster_plan.nodes), computed by preflight), each with C(name) and C(address).
      - The entry for this node (by O(self_name) or by one of its own addresses) is skipped.
    type: list
    elements: dict
    default: []
  self_name:
    description: This node's inventory name.
    type: str
  socket_ifname:
    description: Use this C(NCCL_SOCKET_IFNAME) instead of choosing (an interface, or an NCCL pattern such as C(^docker,lo)).
    type: str
  gloo:
    description: Also set C(GLOO_SOCKET_IFNAME).
    type: bool
    default: true
  ib_hca:
    description: Use this C(NCCL_IB_HCA) instead of choosing; ports that are not ACTIVE are an error.
    type: str
  ib_disable:
    description: Force C(NCCL_IB_DISABLE=1) (true) or leave it to the decision (null).
    type: bool
  ib_gid_index:
    description: Use this C(NCCL_IB_GID_INDEX) instead of the RoCE v2 GID found.
    type: int
  ib_mix_link_layers:
    description: Name RoCE ports in C(NCCL_IB_HCA) too when InfiniBand ports are ACTIVE (after them).
    type: bool
    default: false
  extra_env:
    description: More NCCL/Gloo variables to export as they are (e.g. C(NCCL_DEBUG)).
    type: dict
    default: {}
  probe:
    description: Probe every peer from the chosen interface.
    type: bool
    default: true
  probe_peers:
    description:
      - Probe only these peers (inventory names); every peer when not given.
      - The interface is still chosen from every peer's route, and every name is still resolved.
        C(provision verify) probes the nodes of its login ring (the next node and the node half the
        ring away) and the rendezvous, and every node with C(--full); a constant number per node.
    type: list
    elements: str
  probe_port:
    description:
      - TCP port to connect to on the peers (their sshd); closed ports still prove reachability. Required with
        O(probe) (the nccl_net role and C(provision verify) pass the cluster plan's sshd port).
    type: int
  probe_timeout:
    description: Seconds to wait for each peer; required with O(probe) (both pass C(nccl_net_probe_timeout)).
    type: float
  check_names:
    description:
      - Also check that every peer's name resolves on this node to its cluster address (the check
        C(nccl_net.names)).
      - It fails when a name resolves to another node's address or to loopback, and warns when a name
        does not resolve within O(probe_timeout). Never an error (O(fail_on_error) ignores it).
    type: bool
    default: true
  rendezvous:
    description:
      - The master node of the rendezvous, C(name), C(address) (default the name) and C(port)
        (C(cluster_master_port)). From every other node, with O(probe), a TCP connect to it over the
        routing table (as torchrun's workers connect) adds the check C(nccl_net.rendezvous). A refused
        connection is reachable; a timeout or an unreachable error, twice (1 s apart), fails it (a
        firewall that lets ssh through but not the rendezvous port makes torchrun wait until its
        rendezvous timeout).
        Never an error (O(fail_on_error) ignores it).
    type: dict
  fail_on_error:
    description: Fail when a peer cannot be reached or an override is impossible; false only reports (verify).
    type: bool
    default: true
  sys_root:
    description: Where sysfs is mounted (tests use a constructed tree).
    type: path
    default: /sys
  proc_root:
    description: Where procfs is mounted.
    type: path
    default: /proc
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.INFO_MODULE]
"""

EXAMPLES = r"""
- name: Choose the NCCL network
  provision.cluster.nccl_net_facts:
    peers: "{{ cluster_plan.nodes }}"
    self_name: "{{ inventory_hostname }}"
    probe_port: "{{ cluster_plan.ssh_port }}"
    probe_timeout: "{{ lookup('provision.cluster.setting', 'nccl_net_probe_timeout') }}"
  register: nccl

- name: Force the interface, keep InfiniBand choice automatic
  provision.cluster.nccl_net_facts:
    peers: "{{ cluster_plan.nodes }}"
    self_name: "{{ inventory_hostname }}"
    socket_ifname: ens5
    probe: false
"""

RETURN = r"""
env:
  description: The variables to export.
  returned: always
  type: dict
  sample: {"NCCL_SOCKET_IFNAME": "eth1", "GLOO_SOCKET_IFNAME": "eth1", "NCCL_IB_DISABLE": "1"}
socket_ifname:
  description: The chosen interface (or pattern).
  returned: always
  type: str
  sample: eth1
reasons:
  description: Why each value was chosen or ruled out.
  returned: always
  type: list
  elements: str
peers:
  description: Per peer the resolved IP, the interface and route the kernel uses, and the probe result.
  returned: always
  type: list
  elements: dict
ib:
  description: RDMA decision (C(ranked) usable ports best first, C(excluded), C(hca), C(gid_index), C(disable)).
  returned: always
  type: dict
interfaces:
  description: Interfaces read from sysfs/procfs (state, carrier, mtu, speed, addresses).
  returned: always
  type: dict
rdma:
  description: RDMA devices read from /sys/class/infiniband.
  returned: always
  type: dict
kernel:
  description: The node's kernel release (compared across nodes by provision verify's consistency check).
  returned: always
  type: str
  sample: 6.1.0-27-amd64
checks:
  description: Structured results for provision verify (check, status, detail, fix).
  returned: always
  type: list
  elements: dict
errors:
  description: Problems found (the module fails with the first when O(fail_on_error)).
  returned: always
  type: list
  elements: str
"""

import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.net.netinfo import (
    decide, decision_checks, name_check, names_to_resolve, probe_checks, probe_tried, read_net, read_rdma,
    rendezvous_check)


def resolve(peers):
    """Cluster addresses may be names: resolve them as NCCL/Gloo will, on this node."""
    out = []
    for peer in peers:
        peer = dict(peer)
        addr = str(peer.get("address") or peer.get("name"))
        peer["address"] = addr
        try:
            infos = socket.getaddrinfo(addr, None, 0, socket.SOCK_STREAM)
            v4 = [i[4][0] for i in infos if i[0] == socket.AF_INET]
            peer["ip"] = (v4 or [infos[0][4][0]])[0]
        except (socket.gaierror, IndexError):
            peer["ip"] = addr
        out.append(peer)
    return out


def resolve_names(names, timeout):
    """{name: [addresses] or None} as this node resolves them (/etc/hosts, DNS), within ``timeout`` s.

    Each lookup runs in a daemon thread: an unanswered DNS query neither blocks the module's exit
    nor takes longer than the limit (the name counts as not resolving).
    """
    out = {}

    def lookup(name):
        try:
            infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
            out[name] = sorted({i[4][0] for i in infos})
        except (socket.gaierror, UnicodeError):
            out[name] = None

    threads = [threading.Thread(target=lookup, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    end = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    return {n: out.get(n) for n in names}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            peers=dict(type="list", elements="dict", default=[]),
            self_name=dict(type="str"),
            socket_ifname=dict(type="str"),
            gloo=dict(type="bool", default=True),
            ib_hca=dict(type="str"),
            ib_disable=dict(type="bool"),
            ib_gid_index=dict(type="int"),
            ib_mix_link_layers=dict(type="bool", default=False),
            extra_env=dict(type="dict", default={}),
            probe=dict(type="bool", default=True),
            probe_peers=dict(type="list", elements="str"),
            probe_port=dict(type="int"),
            probe_timeout=dict(type="float"),
            check_names=dict(type="bool", default=True),
            rendezvous=dict(type="dict"),
            fail_on_error=dict(type="bool", default=True),
            sys_root=dict(type="path", default="/sys"),
            proc_root=dict(type="path", default="/proc"),
        ),
        required_if=[("probe", True, ["probe_port", "probe_timeout"])],
        supports_check_mode=True,
    )
    p = module.params
    host = p["self_name"] or socket.gethostname()
    net = read_net(p["sys_root"], p["proc_root"])
    rdma = read_rdma(p["sys_root"])
    overrides = {k: p[k] for k in ("socket_ifname", "gloo", "ib_hca", "ib_disable", "ib_gid_index",
                                   "ib_mix_link_layers", "extra_env")}
    peers = resolve(p["peers"])
    decision = decide(net, rdma, peers, host, overrides)
    checks = decision_checks(host, decision)
    # every node's name, this one's included (a 127.0.1.1 line for it sends Gloo's peers to loopback)
    names = names_to_resolve(peers)
    if p["check_names"] and names:
        checks.append(name_check(host, peers, resolve_names(names, p["probe_timeout"])))
    errors = list(decision["errors"])
    if p["probe"] and decision["socket_ifname"] and not errors:
        only = None if p["probe_peers"] is None else set(p["probe_peers"])
        targets = [peer for peer in decision["peers"] if not peer.get("error") and (only is None or peer["name"] in only)]
        ifname = decision["socket_ifname"] if decision["socket_iface"] else None
        with ThreadPoolExecutor(max_workers=min(32, max(1, len(targets)))) as pool:
            results = list(pool.map(
                lambda peer: (peer,) + probe_tried(peer.get("source"), ifname, peer["ip"], p["probe_port"],
                                                   p["probe_timeout"]), targets))
        for peer, ok, detail in results:
            peer["probe"] = {"ok": ok, "detail": detail}
        more_checks, probe_errors = probe_checks(host, decision, results)
        checks += more_checks
        errors += probe_errors
    rdzv = p["rendezvous"] or {}
    if p["probe"] and rdzv.get("name") and rdzv.get("port") and rdzv["name"] != host:
        target = resolve([{"name": rdzv["name"], "address": rdzv.get("address") or rdzv["name"]}])[0]
        # a second try after a pause, as the SSH matrix retries: a lab/VM network that blinks for a
        # moment (seen once in CI: ENETUNREACH while ssh to the same address worked) is not a firewall
        ok, detail = probe_tried(None, None, target["ip"], int(rdzv["port"]), p["probe_timeout"])
        checks.append(rendezvous_check(host, rdzv["name"], target["ip"], int(rdzv["port"]), ok, detail))
    result = dict(
        changed=False,
        env=decision["env"],
        socket_ifname=decision["socket_ifname"],
        reasons=decision["reasons"],
        peers=decision["peers"],
        ib=decision["ib"],
        interfaces=net["interfaces"],
        rdma={dev: dict(info, ports={str(k): v for k, v in info["ports"].items()}) for dev, info in rdma.items()},
        kernel=os.uname().release,
        checks=checks,
        errors=errors,
    )
    if errors and p["fail_on_error"]:
        msg = errors[0] if errors[0].startswith(host) else "%s: %s" % (host, errors[0])
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
