# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The all-reduce bus bandwidth a cluster should reach, from the hardware its nodes report (pure Python).

No per-SKU table: every node is described by what it has (GPU count, NVLink links and their
speed, NVSwitch or not, PCIe link, the RDMA ports NCCL would use and their rate, or the Ethernet
speed), and each path gets an efficiency factor taken from figures the NCCL maintainers
published. busbw is nccl-tests' bus bandwidth (all-reduce: algbw * 2(n-1)/n, doc/PERFORMANCE.md),
the figure that "should reach the peak bandwidth of your platform" (nccl-tests#40).

    node_capability(...)        -> {"intra": {...}|None, "inter": {...}|None, "gpus": n}
    capability_from_facts(...)  the same from gpu_health_info / fabric_health_info results
    expected_busbw([caps])      -> {"busbw": GB/s|None, "bound", "basis", "reason", "per_node"}
    judge(measured, expected)   -> {"status", "fraction", "detail", "fix", ...} (a verdict)

Factors and their sources (docs/health-checks.md has the derivation):
- InfiniBand/RoCE NIC: 0.96 of line rate up to 200 Gb/s ("12 GB/s for 100G NICs", "24GB/s ... per
  200G NIC": sjeaugey, nccl-tests#119; "12.2 GB/s (for a 100Gbps card) is as good as you can get",
  nccl-tests#29) and 0.94 at 400 Gb/s and above ("For NDR @ 400Gbps you should see 46-48GB/s per
  NIC", AddyLaddy, nccl-tests#290; midpoint 47 of 50).
- NVLink: 0.77 of the per-direction line rate nvidia-smi prints (A100: 12 x 25 GB/s = 300, "should
  reach 230 GB/s", sjeaugey nccl-tests#149; H100: 18 x 26.562 = 478, "app-level bandwidth is
  370GB/s in each direction", sjeaugey nccl#1442); x1.3 for all-reduce with NVLink SHARP (NVLS) on
  NVSwitch systems from NVLink 4 on ("a 30% improvement using NVLink SHARP", nccl#1442; "~480GB/s"
  on 8 H100, nccl-tests#212; 476 GB/s measured "in the expected range", nccl-tests#290).
- PCIe: NCCL's own topology model, width x speed / 80 GB/s with 15/30/60/120/240/480 (x100 Mb/s
  per lane) for Gen1..6 (kvDictPciGen; sjeaugey in nccl#1206: "120 means 12000 Mbps = 1.5 GB/s per
  lane", so Gen4 x16 = 24 GB/s).
- TCP sockets: 0.6 of the interface speed (a user's measurement, "not ... more than 60% of wire
  speed", nccl#209; maintainers: NCCL's socket bandwidth is the single-flow speed times the
  sockets, nccl-tests#83). The weakest of these figures; documented as such.
"""

from __future__ import annotations

NIC_EFFICIENCY = ((200, 0.96, "nccl-tests#119, #29: 12 GB/s per 100 Gb/s, 24 GB/s per 200 Gb/s"),
                  (None, 0.94, "nccl-tests#290: 46-48 GB/s per 400 Gb/s NDR NIC"))
NVLINK_EFFICIENCY = 0.77
NVLINK_SOURCE = "nccl-tests#149 (A100 230 of 300 GB/s), nccl#1442 (H100 370 of 478 GB/s)"
NVLS_GAIN = 1.3
NVLS_SOURCE = "nccl#1442 (+30% with NVLink SHARP), nccl-tests#212 (~480 GB/s on 8 H100), nccl-tests#290 (476)"
PCIE_LANE_100MBPS = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}
PCIE_SOURCE = "NCCL topology model (kvDictPciGen), nccl#1206: Gen4 x16 = 24 GB/s"
SOCKET_EFFICIENCY = 0.6
SOCKET_SOURCE = "nccl#209 (a user's measurement: <= 60% of wire speed over TCP), nccl-tests#83"
# The default minimum fraction of the expected busbw a measurement must reach. Azure's per-SKU
# thresholds sit between 0.75 and 0.96 of these figures (azurehpc-health-checks conf/: NDv4
# check_nccl_allreduce_ib_loopback 18 of 24, NDv5 check_nccl_allreduce 460 of 480); 0.8 leaves
# room for message size and algorithm choice while catching a halved link (ACS, a lost NIC,
# x8 PCIe, TCP fallback all cost 50% or more). Overridable per call.
DEFAULT_MIN_FRACTION = 0.8

# nvidia-smi nvlink -s per-link speed (GB/s) -> NVLink generation
_NVLINK_GEN = ((50.0, 5), (26.0, 4), (25.5, 2), (24.0, 3), (0.1, 1))


def nvlink_generation(link_gbps):
    """Per-link speed nvidia-smi prints -> NVLink generation: 53.125 -> 5, 26.562 -> 4, 25.781 -> 2
    (V100), 25.0 -> 3 (A100), 20 -> 1 (P100)."""
    if not link_gbps:
        return None
    for floor, gen in _NVLINK_GEN:
        if link_gbps >= floor:
            return gen
    return None


def nic_efficiency(gbps):
    for top, eff, _src in NIC_EFFICIENCY:
        if top is None or gbps <= top:
            return eff
    return NIC_EFFICIENCY[-1][1]


def nic_busbw(gbps):
    """The all-reduce busbw one RDMA NIC carries (GB/s) at a line rate in Gb/s."""
    return gbps / 8.0 * nic_efficiency(gbps)


def pcie_busbw(gen, width):
    """NCCL's model of a PCIe link (GB/s): width * per-lane rate / 80."""
    per_lane = PCIE_LANE_100MBPS.get(int(gen or 0))
    if not per_lane or not width:
        return None
    return width * per_lane / 80.0


def node_capability(gpus, nvlink_per_gpu=None, nvlink_link_gbps=None, nvswitch=False, nvlink_all_to_all=None,
                    pcie=None, nics=None, eth_gbps=None):
    """What one node can carry in an all-reduce.

    gpus: GPUs (ranks) on the node. nvlink_per_gpu: the smallest per-GPU sum of active NVLink
    speeds (GB/s per direction, as `nvidia-smi nvlink -s` prints); nvlink_link_gbps: one link's
    speed (gives the NVLink generation). nvswitch: NVSwitch on the node. nvlink_all_to_all: every
    GPU pair NVLink-connected (default: true with an NVSwitch or 2 GPUs; otherwise rings cross
    PCIe and PCIe bounds them). pcie: (generation, width) of the slowest GPU link. nics: line
    rates (Gb/s) of the active RDMA ports NCCL would use (one kind: InfiniBand when there is any).
    eth_gbps: the socket interface's speed when there is no RDMA port.
    """
    cap = {"gpus": gpus, "intra": None, "inter": None}
    if gpus and gpus > 1:
        all_to_all = nvlink_all_to_all if nvlink_all_to_all is not None else bool(nvswitch or gpus == 2)
        if nvlink_per_gpu and all_to_all:
            gen = nvlink_generation(nvlink_link_gbps)
            busbw = nvlink_per_gpu * NVLINK_EFFICIENCY
            basis = "NVLink %.1f GB/s per GPU x %.2f" % (nvlink_per_gpu, NVLINK_EFFICIENCY)
            source = NVLINK_SOURCE
            if nvswitch and gen and gen >= 4:
                busbw *= NVLS_GAIN
                basis += " x %.1f (NVLink SHARP, NVSwitch, NVLink%d)" % (NVLS_GAIN, gen)
                source += "; " + NVLS_SOURCE
            cap["intra"] = {"busbw": round(busbw, 1), "basis": basis, "source": source}
        elif pcie and pcie_busbw(*pcie):
            bw = pcie_busbw(*pcie)
            note = "" if not nvlink_per_gpu else " (NVLink does not join every GPU pair: rings cross PCIe)"
            cap["intra"] = {"busbw": round(bw, 1), "basis": "PCIe Gen%s x%s%s" % (pcie[0], pcie[1], note),
                            "source": PCIE_SOURCE}
    usable = sorted((n for n in (nics or []) if n), reverse=True)
    if usable:
        used = usable[:max(1, gpus or 1)]
        bw = sum(nic_busbw(n) for n in used)
        cap["inter"] = {"busbw": round(bw, 1), "source": "; ".join(s for _t, _e, s in NIC_EFFICIENCY),
                        "basis": "%d RDMA port(s) %s Gb/s (%s used: at most one per GPU)" % (
                            len(usable), "+".join("%g" % n for n in usable), len(used))}
    elif eth_gbps and eth_gbps > 0:
        cap["inter"] = {"busbw": round(eth_gbps / 8.0 * SOCKET_EFFICIENCY, 2), "source": SOCKET_SOURCE,
                        "basis": "TCP sockets on a %g Gb/s interface x %.1f" % (eth_gbps, SOCKET_EFFICIENCY)}
    else:
        cap["inter_reason"] = ("no active RDMA port and the interface reports no speed" if eth_gbps in (None, 0, -1)
                               else "no usable network")
    return cap


def expected_busbw(capabilities):
    """The all-reduce busbw the cluster should reach: the slowest node's bound.

    One node: its intra-node bound (none with one GPU: an all-reduce of one rank moves nothing).
    Several nodes: per node min(intra, inter), then the minimum over nodes (a ring runs at its
    slowest link). This is the ring figure; a 2-node tree or NVLS-tree all-reduce can report more
    (nccl-tests#22, nccl#1576), which judge() accepts.
    """
    caps = list(capabilities)
    if not caps:
        return {"busbw": None, "reason": "no node", "basis": None, "bound": None, "per_node": []}
    per_node = []
    if len(caps) == 1:
        c = caps[0]
        if not c.get("intra"):
            why = ("one GPU on one node: the all-reduce crosses no link (busbw is 0 by definition)"
                   if (c.get("gpus") or 0) <= 1 else "no NVLink/PCIe figure for this node")
            return {"busbw": None, "reason": why, "basis": None, "bound": None, "per_node": [c]}
        return {"busbw": c["intra"]["busbw"], "bound": "intra-node", "basis": c["intra"]["basis"],
                "source": c["intra"]["source"], "reason": None, "per_node": [c]}
    best = None
    for i, c in enumerate(caps):
        if not c.get("inter"):
            return {"busbw": None, "bound": None, "basis": None, "per_node": caps,
                    "reason": "node %d: %s" % (i, c.get("inter_reason") or "no network figure")}
        options = [("inter-node", c["inter"])] + ([("intra-node", c["intra"])] if c.get("intra") else [])
        bound, fig = min(options, key=lambda kv: kv[1]["busbw"])
        per_node.append({"busbw": fig["busbw"], "bound": bound})
        if best is None or fig["busbw"] < best[1]["busbw"]:
            best = (bound, fig)
    return {"busbw": best[1]["busbw"], "bound": best[0], "basis": best[1]["basis"], "source": best[1]["source"],
            "reason": None, "per_node": per_node}


def judge(measured, expected, min_fraction=DEFAULT_MIN_FRACTION):
    """A measured busbw (GB/s) against the expectation -> verdict (status pass|fail|skip)."""
    exp = expected.get("busbw") if isinstance(expected, dict) else expected
    out = {"measured": measured, "expected": exp, "min_fraction": min_fraction, "fraction": None,
           "basis": expected.get("basis") if isinstance(expected, dict) else None}
    if not exp:
        why = expected.get("reason") if isinstance(expected, dict) else None
        return dict(out, status="skip", detail="no expected busbw: %s" % (why or "unknown hardware"), fix="")
    if measured is None:
        return dict(out, status="skip", detail="expected %.1f GB/s busbw (%s); nothing measured" % (
            exp, out["basis"]), fix="")
    frac = measured / exp
    out["fraction"] = round(frac, 3)
    if frac >= min_fraction:
        note = ("; above the ring model: a 2-node tree/NVLS all-reduce can exceed it (nccl-tests#22)"
                if frac > 1.1 else "")
        return dict(out, status="pass", fix="", detail="busbw %.1f GB/s = %.0f%% of the expected %.1f GB/s (%s)%s"
                    % (measured, 100 * frac, exp, out["basis"], note))
    return dict(out, status="fail",
                detail="busbw %.1f GB/s = %.0f%% of the expected %.1f GB/s (%s), below %.0f%%"
                % (measured, 100 * frac, exp, out["basis"], 100 * min_fraction),
                fix="find the slow link: run the fabric/GPU health checks (PCIe width, NVLink, port rate, ACS, "
                    "GPUDirect RDMA), check NCCL_DEBUG=INFO for 'NET/Socket' (TCP fallback), then test node pairs")


def capability_from_facts(gpu_health=None, fabric_health=None, eth_gbps=None, nvlink_all_to_all=None):
    """node_capability() from the facts gpu_health_info and fabric_health_info return."""
    g = gpu_health or {}
    gpus = g.get("gpus") or []
    nvlink = g.get("nvlink") or {}
    per_gpu, link_speed = None, None
    if nvlink:
        sums = []
        for info in nvlink.values():
            speeds = [v for v in (info.get("links") or {}).values() if v]
            sums.append(sum(speeds))
            link_speed = link_speed or (max(speeds) if speeds else None)
        per_gpu = min(sums) if sums and min(sums) > 0 else None
    pcie = None
    for gpu in gpus:
        p = gpu.get("pcie") or {}
        gen, width = p.get("gen_max"), p.get("width_current") or p.get("width_max")
        if gen and width and (pcie is None or pcie_busbw(gen, width) < pcie_busbw(*pcie)):
            pcie = (gen, width)
    ports = [p for p in (fabric_health or {}).get("ports") or []
             if p.get("state") == "ACTIVE" and p.get("phys_state") == "LinkUp" and p.get("gbps")]
    kind = "InfiniBand" if any(p.get("link_layer") == "InfiniBand" for p in ports) else "Ethernet"
    nics = [p["gbps"] for p in ports if p.get("link_layer") == kind]
    nvswitch = bool((g.get("pci") or {}).get("nvswitches"))
    return node_capability(len(gpus), per_gpu, link_speed, nvswitch, nvlink_all_to_all, pcie, nics, eth_gbps)


def link_gbps(link):
    """A NIC's speed in Gb/s from the interface record nccl_net publishes, None when unknown or virtual
    (a veth or virtio interface reports a speed its host never promised)."""
    if not isinstance(link, dict) or link.get("virtual") or not link.get("speed"):
        return None
    return link["speed"] / 1000.0


def expected_for_nodes(nodes):
    """[{"gpu_health", "fabric_health", "link"}] (one per node, as the hosts have them) -> expected_busbw()."""
    return expected_busbw([capability_from_facts(n.get("gpu_health"), n.get("fabric_health"), link_gbps(n.get("link")))
                           for n in nodes])
