#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: fabric_health_info
short_description: Read-only RDMA fabric health checks (InfiniBand/RoCE ports, rate, error counters, MTU, GPUDirect RDMA, ACS, container access)
description:
  - Reads C(/sys/class/infiniband) (port state, physical state, rate, link layer, HCA model, error counters read
    twice O(counter_interval) seconds apart), C(/proc/modules), C(ibv_devinfo) (InfiniBand MTU), C(lspci -vvv)
    (ACS on the PCIe bridges between GPUs and NICs), C(/dev/infiniband) and this process's memlock limit, and
    returns one check record per finding (C(check), C(status) pass/fail/warn/skip, C(detail), C(fix), C(node),
    C(data) with C(category), C(device) (HCA and port), C(value) and C(limit)).
  - "Checks (the C(data.category) of each record): ib_port_state, ib_port_rate, ib_counters, ib_mtu, gdr_peermem,
    pcie_acs, rdma_devices, rdma_memlock. The cluster-level ones (link layer mix, rates across nodes) are
    C(fabric_health.cluster_link_layers) and C(fabric_health.cluster_port_rates) over the returned C(ports)."
  - On a node with no RDMA device every check is a C(skip) with the reason, never a pass.
  - The port's maximum rate is derived from sysfs (see docs/health-checks.md) - an active 1X InfiniBand link, a
    port slower than a peer of the same HCA model, or slower than the model's top rate (a warning).
  - Never writes anything. Every command has a timeout; the only wait is O(counter_interval) (at most 60 s).
version_added: "0.2.0"
author: provision developers (!UNKNOWN)
options:
  node:
    description: Name put in every record (the inventory hostname); empty leaves it to the caller.
    type: str
    default: ""
  counter_interval:
    description: Seconds between the two reads of the port error counters (0 reads once and does not judge
      growth; at most 60).
    type: int
    default: 5
  required_ports:
    description: Ports that must be ACTIVE (C(mlx5_1), C(mlx5_1/1) or NCCL_IB_HCA's C(=mlx5_1:1)), for example
      what NCCL_IB_HCA names (C(^) exclusions are ignored); any other port that is down is a warning while
      another port is ACTIVE.
    type: list
    elements: str
    default: []
  ibv_devinfo:
    description: Run C(ibv_devinfo) (when installed) for the InfiniBand ports' active MTU.
    type: bool
    default: true
  acs:
    description: Run C(lspci -vvv) (when installed and a GPU and an RDMA NIC share a PCIe switch) for ACS; needs
      root to see the ACS capability.
    type: bool
    default: true
  timeout:
    description: Seconds each command may take.
    type: int
    default: 30
  root:
    description: Directory that holds the C(sys), C(proc) and C(dev) trees read (tests point it at a copy).
      Commands still run on the node.
    type: path
    default: /
seealso:
  - module: provision.cluster.nccl_net_facts
  - module: provision.cluster.gpu_health_info
  - module: provision.cluster.node_runtime
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.INFO_MODULE]
"""

EXAMPLES = r"""
- name: Fabric health, error counters read 5 s apart
  provision.cluster.fabric_health_info:
    node: "{{ inventory_hostname }}"
    required_ports: "{{ nccl_net_ib_hca | default([]) }}"
  become: true
  register: fabric_health

- name: Show the failures
  ansible.builtin.debug:
    msg: "{{ fabric_health.checks | selectattr('status', 'equalto', 'fail') | map(attribute='detail') | list }}"
"""

RETURN = r"""
checks:
  description: One record per finding, and one C(pass) per category without finding; all C(skip) without an RDMA device.
  returned: always
  type: list
  elements: dict
  contains:
    check: {description: "The category, or C(<category> <hca>/<port>) for a port (C(pcie_acs <bridge>) for a bridge)", type: str}
    status: {description: "pass, fail, warn or skip.", type: str}
    detail: {description: "One line naming the port (HCA, port, netdev), the value and the limit.", type: str}
    fix: {description: "One line: what to do (empty on pass/skip).", type: str}
    node: {description: O(node) when given., type: str}
    data: {description: "C(category), C(device) (hca, port, netdevs, hca_type), C(value), C(limit).", type: dict}
  sample:
    - check: ib_port_state mlx5_2/1
      status: warn
      detail: "mlx5_2 port 1 (ens17np0): port disabled (administratively, or no cable) (state DOWN)"
      fix: reseat/replace the cable or transceiver, check the switch port
      data: {category: ib_port_state, value: DOWN/Disabled, limit: ACTIVE/LinkUp}
ansible_facts:
  description: RV(fabric_health) again, as the host fact C(fabric_health) (the all-reduce smoke test computes the bandwidth the
    cluster should reach from it).
  returned: always
  type: dict
fabric_health:
  description: What was read.
  returned: always
  type: dict
  contains:
    ports:
      description: "Every RDMA port: device, port, hca_type, link_layer, state, phys_state, rate, gbps, width, speed, netdevs, netdev_mtu."
      type: list
      elements: dict
    counters: {description: "First read of the error counters, per C(hca/port).", type: dict}
    counter_growth: {description: "Counters that grew between the two reads, per C(hca/port).", type: dict}
    devinfo: {description: "ibv_devinfo active_mtu/max_mtu per C(hca/port).", type: dict}
    peermem: {description: "nvidia_peermem / nv_peer_mem loaded (names).", type: list, elements: str}
    gpus: {description: "NVIDIA GPUs on the PCI bus (bus ids).", type: list, elements: str}
    acs: {description: ACSCtl of the PCI functions lspci showed., type: list, elements: dict}
    acs_pairs: {description: "[gpu, nic, bridges between] for GPU/NIC pairs that share a PCIe switch.", type: list, elements: list}
    dev_infiniband: {description: Entries of /dev/infiniband., type: list, elements: str}
    in_container: {description: This node is a container., type: bool}
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.gpu import fabric_health as F
from ansible_collections.provision.cluster.plugins.module_utils.gpu import gpu_health as H
from ansible_collections.provision.cluster.plugins.module_utils.common import node_facts
from ansible_collections.provision.cluster.plugins.module_utils.common.files import read_text
from ansible_collections.provision.cluster.plugins.module_utils.common.procs import run_bounded

MAX_INTERVAL = 60


def acs_pairs(sys_root, gpus, devices):
    """[(gpu, nic, bridges)] for every GPU and RDMA NIC that share a PCIe bridge."""
    pairs = []
    nics = {}
    for dev in devices:
        bdf = F.rdma_bdf(sys_root, dev)
        if bdf:
            nics.setdefault(bdf, dev)
    for gpu in gpus:
        gpath = F.pci_path(sys_root, gpu)
        if not gpath:
            continue
        for nic in sorted(nics):
            npath = F.pci_path(sys_root, nic)
            between = F.bridges_between(gpath, npath) if npath else []
            if between:
                pairs.append([gpu, nic, between])
    return pairs


def collect(module):
    p = module.params
    root, node, timeout = p["root"], p["node"] or None, p["timeout"]
    sys_root, proc_root = os.path.join(root, "sys"), os.path.join(root, "proc")
    ports = F.read_ports(sys_root)
    facts = {"ports": ports, "counters": {}, "counter_growth": {}, "devinfo": {}, "peermem": [], "gpus": [],
             "acs": [], "acs_pairs": [], "dev_infiniband": [], "in_container": False}
    if not ports:
        return facts, F.skipped_all(F.NO_DEVICE, node)
    snap = node_facts.collect_snapshot(root=root)
    container = node_facts.detect_container(snap)
    facts["in_container"] = bool(container["container"])
    interval = max(0, min(p["counter_interval"], MAX_INTERVAL))
    first = F.read_counters(sys_root)
    second = None
    if interval:
        time.sleep(interval)
        second = F.read_counters(sys_root)
    facts["counters"] = first
    facts["counter_growth"] = F.counter_growth(first, second) if second is not None else {}
    devinfo = None
    if p["ibv_devinfo"]:
        exe = module.get_bin_path("ibv_devinfo")
        if exe:
            rc, out, _err = run_bounded([exe], timeout)
            devinfo = F.parse_ibv_devinfo(out) if rc == 0 else None
            facts["devinfo"] = devinfo or {}
    modules_text = read_text(os.path.join(proc_root, "modules"), errors="replace")
    loaded = F.parse_proc_modules(modules_text)
    facts["peermem"] = sorted(m for m in ("nvidia_peermem", "nv_peer_mem") if m in loaded)
    memory_peers = os.path.exists(os.path.join(sys_root, "kernel", "mm", "memory_peers", "nv_mem", "version"))
    gpus = H.pci_nvidia_devices(sys_root)["gpus"]
    facts["gpus"] = gpus
    acs, denied = None, False
    devices = sorted({q["device"] for q in ports})
    pairs = acs_pairs(sys_root, gpus, devices) if gpus else []
    facts["acs_pairs"] = pairs
    if p["acs"]:
        exe = module.get_bin_path("lspci")
        if not pairs:
            acs = []
        elif exe:
            rc, out, _err = run_bounded([exe, "-vvv"], timeout)
            if rc == 0:
                acs = F.parse_lspci_acs(out)
                denied = "<access denied>" in out
                facts["acs"] = acs
    try:
        dev_entries = sorted(os.listdir(os.path.join(root, "dev", "infiniband")))
    except OSError:
        dev_entries = []
    facts["dev_infiniband"] = dev_entries
    limits_text = (snap.get("files") or {}).get("/proc/self/limits")
    limits = node_facts.parse_limits(limits_text) if limits_text else None
    capeff = node_facts.parse_capeff((snap.get("files") or {}).get("/proc/self/status"))
    records = F.fabric_checks(ports, first, second, interval, devinfo, p["required_ports"], bool(gpus),
                              loaded, memory_peers, acs, pairs, denied, dev_entries, facts["in_container"],
                              container.get("runtime"), limits, capeff, node)
    return facts, records


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", default=""),
            counter_interval=dict(type="int", default=5),
            required_ports=dict(type="list", elements="str", default=[]),
            ibv_devinfo=dict(type="bool", default=True),
            acs=dict(type="bool", default=True),
            timeout=dict(type="int", default=30),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    facts, records = collect(module)
    module.exit_json(changed=False, checks=records, fabric_health=facts, ansible_facts={"fabric_health": facts})


if __name__ == "__main__":
    main()
