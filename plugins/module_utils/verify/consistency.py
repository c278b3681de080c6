# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The same platform on every node: kernel, the NCCL interface's MTU, speed and driver, the NVIDIA
driver, CUDA, NCCL and the RDMA firmware. A node that differs from the rest is named with the value
that differs. Plain Python, no Ansible import (verify's cluster-wide check `consistency`).

An MTU that differs on the cluster interface is a failure: frames larger than the smaller MTU are
dropped, so NCCL and gloo hang on large messages while ssh and small messages work. Every other
difference is a warning: it does not stop a job by itself, but it is the first thing to rule out
when one node is slower than the others.
"""

from __future__ import annotations

from collections import Counter

from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C

# field -> (what it is, status when a node differs, fix)
FIELDS = {
    "mtu": ("MTU of the NCCL interface", C.FAIL,
            "set the same MTU on every node's cluster interface (ip link set dev IFACE mtu N, and in its network "
            "configuration): with different MTUs NCCL and gloo hang on large messages"),
    "speed": ("speed of the NCCL interface (Mb/s)", C.WARN,
              "check the cable, transceiver and switch port of the slower node (ethtool IFACE)"),
    "nic_driver": ("driver of the NCCL interface", C.WARN, "install the same NIC driver on every node"),
    "kernel": ("kernel release", C.WARN, "boot every node into the same kernel"),
    "nvidia_driver": ("NVIDIA driver", C.WARN, "install the same NVIDIA driver on every node"),
    "cuda": ("CUDA the driver supports", C.WARN, "install the same NVIDIA driver on every node"),
    "nccl": ("NCCL version", C.WARN, "install the same torch/NCCL on every node (python_env stage)"),
    "rdma_fw": ("RDMA NIC firmware", C.WARN, "flash the same firmware on every node's HCAs (mlxfwmanager)"),
}


def compare(values):
    """{node: {field: value}} -> Check records `consistency` (one per node, the worst of its fields),
    naming each field in which a node differs from the value most nodes have."""
    nodes = list(values)
    odd = {n: [] for n in nodes}
    for field, (what, status, fix) in FIELDS.items():
        have = {n: values[n].get(field) for n in nodes if values[n].get(field) not in (None, "", [])}
        if len(have) < 2:
            continue
        counts = Counter(str(v) for v in have.values())
        if len(counts) < 2:
            continue
        common, count = counts.most_common(1)[0]
        for n, v in have.items():
            if str(v) != common:
                odd[n].append((status, "%s %s while %d other node(s) have %s" % (what, v, count, common), fix))
    out = []
    for n in nodes:
        if not values[n]:
            out.append(C.skipped("consistency", "nothing read on this node", n))
        elif not odd[n]:
            out.append(C.passed("consistency", "same %s as the other nodes" % ", ".join(
                FIELDS[f][0] for f in FIELDS if values[n].get(f) not in (None, "", [])), n))
        else:
            status = C.FAIL if any(s == C.FAIL for s, _d, _f in odd[n]) else C.WARN
            worst = sorted(odd[n], key=lambda x: C.SEVERITY[x[0]], reverse=True)
            out.append(C.check("consistency", status, "; ".join(d for _s, d, _f in worst),
                               "; ".join(dict.fromkeys(f for _s, _d, f in worst)), n,
                               {"differs": {d.split(" while ")[0]: True for _s, d, _f in worst}}))
    return out
