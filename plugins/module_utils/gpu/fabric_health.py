# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""RDMA fabric health (InfiniBand / RoCE): readers over a /sys tree and decisions (pure Python).

Used by the ``fabric_health_info`` module and the tests. Readers take a root path (``sys_root``,
``proc_root``, ``dev_root``) so tests point them at a copy; decisions take what was read and
return Check records (plugins/module_utils/verify/checks.py) naming node, device (HCA and port), value,
limit and fix.

Reading:  read_ports(sys_root)                 ports of /sys/class/infiniband (netinfo.read_rdma + more)
          read_counters(sys_root)              per port error counters (counters/*)
          parse_ibv_devinfo(text)              active/max MTU per port
          parse_proc_modules(text)             loaded kernel modules
          parse_lspci_acs(text)                ACSCtl per PCI bridge from `lspci -vvv`
          pci_path(sys_root, bdf)              the bridges from the root complex to a device
Deciding: check_port_state, check_port_rate, check_counters, check_mtu, check_gdr, check_acs,
          check_rdma_devices, check_memlock (node_runtime's), cluster_link_layers, cluster_port_rates;
          fabric_checks() runs the per-node ones; skipped_all(reason) is every check as a skip.
How the port's maximum rate is derived, and every threshold: docs/health-checks.md.
"""

from __future__ import annotations

import os
import re

from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C
from ansible_collections.provision.cluster.plugins.module_utils.common.files import read_attr
from ansible_collections.provision.cluster.plugins.module_utils.net import netinfo
from ansible_collections.provision.cluster.plugins.module_utils.common import limits as runtime_limits

CATEGORIES = ("ib_port_state", "ib_port_rate", "ib_counters", "ib_mtu", "gdr_peermem", "pcie_acs",
              "rdma_devices", "rdma_memlock")

# The most one port of an HCA model runs (Gb/s), by the `hca_type` sysfs reports (ibstat's
# "CA type"). An upper bound only: the same model ships in lower-speed variants (a ConnectX-7
# NDR200 card), so a port below it is warned, not failed.
HCA_MAX_GBPS = {
    "MT4115": 100,  # ConnectX-4 (EDR / 100GbE)
    "MT4117": 50,   # ConnectX-4 Lx
    "MT4119": 100,  # ConnectX-5
    "MT4121": 100,  # ConnectX-5 Ex
    "MT4123": 200,  # ConnectX-6 (HDR / 200GbE)
    "MT4124": 200,  # ConnectX-6 virtual function
    "MT4125": 200,  # ConnectX-6 Dx
    "MT4127": 50,   # ConnectX-6 Lx
    "MT4129": 400,  # ConnectX-7 (NDR / 400GbE)
    "MT4131": 800,  # ConnectX-8 (XDR / 800GbE)
}

# Port error counters (IBTA PortCounters as the kernel exposes them under ports/N/counters/).
# Growth between two reads fails for the ones that mean a bad link, warns for congestion.
COUNTERS_FAIL = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                 "port_rcv_remote_physical_errors", "local_link_integrity_errors",
                 "excessive_buffer_overrun_errors")
COUNTERS_WARN = ("port_xmit_discards", "port_rcv_constraint_errors", "port_xmit_constraint_errors", "VL15_dropped")

IB_MTUS = (4096, 2048, 1024, 512, 256)
WANT_MTU = 4096
# include/rdma/ib_addr.h iboe_get_mtu(): the RoCE MTU is the largest IB MTU that fits in the
# netdev MTU less GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4 bytes.
ROCE_OVERHEAD = 40 + 8 + 12 + 4 + 28 + 4

_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec(?:\s*\((\d+)X\s*([A-Z0-9]+)\))?")
_NUM_STATE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)")


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def parse_rate(text):
    """'200 Gb/sec (4X HDR)' -> {"gbps": 200.0, "width": 4, "speed": "HDR"}; width/speed None when absent."""
    m = _RATE.match(text or "")
    if not m:
        return {"gbps": None, "width": None, "speed": None}
    return {"gbps": float(m.group(1)), "width": int(m.group(2)) if m.group(2) else None, "speed": m.group(3)}


def port_label(port):
    net = (" (%s)" % ",".join(port["netdevs"])) if port.get("netdevs") else ""
    return "%s port %s%s" % (port["device"], port["port"], net)


def port_device(port):
    return {"hca": port["device"], "port": port["port"], "netdevs": port.get("netdevs") or [],
            "hca_type": port.get("hca_type")}


# ---------------------------------------------------------------- reading

def read_ports(sys_root="/sys"):
    """Every RDMA port: [{device, port, hca_type, fw_ver, board_id, netdevs, link_layer, state,
    phys_state, rate, gbps, width, speed, netdev_mtu}] (netinfo.read_rdma plus what health needs)."""
    rdma = netinfo.read_rdma(sys_root)
    base = os.path.join(sys_root, "class", "infiniband")
    out = []
    for dev in sorted(rdma):
        dpath = os.path.join(base, dev)
        info = {"hca_type": read_attr(os.path.join(dpath, "hca_type")), "fw_ver": read_attr(os.path.join(dpath, "fw_ver")),
                "board_id": read_attr(os.path.join(dpath, "board_id"))}
        netdevs = rdma[dev].get("netdevs") or []
        for num, p in sorted(rdma[dev]["ports"].items()):
            rate = parse_rate(p.get("rate"))
            phys = _NUM_STATE.match(read_attr(os.path.join(dpath, "ports", str(num), "phys_state")) or "")
            mtu = None
            for nd in netdevs:
                value = read_attr(os.path.join(sys_root, "class", "net", nd, "mtu"))
                if value and value.isdigit():
                    mtu = int(value)
                    break
            out.append(dict(info, device=dev, port=num, netdevs=netdevs, link_layer=p.get("link_layer"),
                            state=(p.get("state") or "").upper() or None, phys_state=phys.group(2) if phys else
                            p.get("phys_state"), rate=p.get("rate"), gbps=rate["gbps"], width=rate["width"],
                            speed=rate["speed"], netdev_mtu=mtu))
    return out


def read_counters(sys_root="/sys"):
    """{"mlx5_0/1": {counter: int}} from /sys/class/infiniband/*/ports/*/counters/."""
    base = os.path.join(sys_root, "class", "infiniband")
    out = {}
    for dev in _listdir(base):
        for port in _listdir(os.path.join(base, dev, "ports")):
            cdir = os.path.join(base, dev, "ports", port, "counters")
            values = {}
            for name in _listdir(cdir)[:64]:
                text = read_attr(os.path.join(cdir, name))
                if text is not None and text.isdigit():
                    values[name] = int(text)
            if values:
                out["%s/%s" % (dev, port)] = values
    return out


_DEVINFO_DEV = re.compile(r"^hca_id:\s*(\S+)")
_DEVINFO_PORT = re.compile(r"^\s*port:\s*(\d+)")
_DEVINFO_MTU = re.compile(r"^\s*(active_mtu|max_mtu):\s*(\d+)")


def parse_ibv_devinfo(text):
    """`ibv_devinfo` -> {"mlx5_0/1": {"active_mtu": 4096, "max_mtu": 4096}}."""
    out, dev, port = {}, None, None
    for line in (text or "").splitlines():
        m = _DEVINFO_DEV.match(line)
        if m:
            dev, port = m.group(1), None
            continue
        m = _DEVINFO_PORT.match(line)
        if m and dev:
            port = int(m.group(1))
            out["%s/%d" % (dev, port)] = {}
            continue
        m = _DEVINFO_MTU.match(line)
        if m and dev and port is not None:
            out["%s/%d" % (dev, port)][m.group(1)] = int(m.group(2))
    return out


def parse_proc_modules(text):
    """/proc/modules -> the set of loaded module names."""
    return {line.split()[0] for line in (text or "").splitlines() if line.strip()}


_LSPCI_HEAD = re.compile(r"^([0-9a-fA-F]{4}:)?([0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.*)$")
_ACS_FLAGS = re.compile(r"(\w+)([+-])")


def parse_lspci_acs(text):
    """`lspci -vvv` -> [{"bdf", "desc", "acsctl": {flag: bool}}] for every function with an ACSCtl line.

    bdf is None for lines before the first device header (output that was cut, or
    `lspci -vvv | grep ACSCtl`). "<access denied>" (not root) leaves ACSCtl out entirely.
    """
    out, bdf, desc = [], None, None
    for line in (text or "").splitlines():
        m = _LSPCI_HEAD.match(line)
        if m and not line[:1].isspace():
            bdf = netinfo_bdf(m.group(1), m.group(2))
            desc = m.group(3).strip()
            continue
        if "ACSCtl:" in line:
            flags = dict((k, v == "+") for k, v in _ACS_FLAGS.findall(line.split("ACSCtl:", 1)[1]))
            out.append({"bdf": bdf, "desc": desc, "acsctl": flags})
    return out


def netinfo_bdf(domain, rest):
    return ((domain or "0000:") + rest).lower()


def pci_path(sys_root, bdf):
    """['0000:00:01.0', '0000:01:00.0', ..., bdf]: the device's ancestors from the root port down,
    read from the realpath of /sys/bus/pci/devices/<bdf> (None when absent)."""
    link = os.path.join(sys_root, "bus", "pci", "devices", bdf)
    if not os.path.exists(link):
        return None
    parts = os.path.realpath(link).split(os.sep)
    return [p for p in parts if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", p)]


def bridges_between(path_a, path_b):
    """The PCI bridges traffic between two devices crosses when it stays below the root complex:
    the deepest shared bridge and everything below it on both sides (endpoints excluded). []
    when the devices share no bridge (their traffic goes through the root complex anyway)."""
    common = 0
    for a, b in zip(path_a, path_b):
        if a != b:
            break
        common += 1
    if common == 0:
        return []
    shared = path_a[common - 1]
    return [shared] + path_a[common:-1] + path_b[common:-1]


def rdma_bdf(sys_root, dev):
    """The PCI address of an RDMA device (/sys/class/infiniband/<dev>/device -> ../../0000:xx:yy.z)."""
    target = os.path.realpath(os.path.join(sys_root, "class", "infiniband", dev, "device"))
    name = os.path.basename(target)
    return name if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", name) else None


# ---------------------------------------------------------------- decisions (one node)

def _port_record(status, category, port, detail, fix="", value=None, limit=None, node=None, extra=None):
    data = {"category": category, "device": port_device(port), "value": value, "limit": limit}
    data.update(extra or {})
    return C.check("%s %s/%s" % (category, port["device"], port["port"]), status,
                   "%s: %s" % (port_label(port), detail), fix if status in (C.FAIL, C.WARN) else "", node, data)


def _summary(category, records, detail, node=None, data=None):
    if records:
        return records
    return [C.passed(category, detail, node, dict({"category": category}, **(data or {})))]


def _active(port):
    return port.get("state") == "ACTIVE" and port.get("phys_state") == "LinkUp"


def check_port_state(ports, required=(), node=None):
    """ACTIVE/LinkUp wanted. LinkUp but not ACTIVE on InfiniBand: no subnet manager configured it.
    Polling (no link) or Disabled fails on a required port (NCCL_IB_HCA / required_ports), and
    when no port of the node is ACTIVE; otherwise it is warned (an unused port)."""
    req = {r.lstrip("=").replace(":", "/") for r in (required or ()) if r and not r.startswith("^")}
    any_active = any(_active(p) for p in ports)
    records = []
    for p in ports:
        if _active(p):
            continue
        name = "%s/%s" % (p["device"], p["port"])
        needed = name in req or p["device"] in req or not any_active
        phys, state = p.get("phys_state"), p.get("state")
        if phys == "LinkUp" and p.get("link_layer") == "InfiniBand":
            records.append(_port_record(
                C.FAIL, "ib_port_state", p,
                "physical link up but state %s: the subnet manager has not configured the port" % state,
                "start a subnet manager on the fabric (`systemctl start opensm` on one node, or UFM / the managed "
                "switch's SM); `sminfo` must answer", state, "ACTIVE", node))
        elif phys == "LinkUp":
            records.append(_port_record(C.FAIL, "ib_port_state", p, "link up but state %s" % state,
                                        "check the RoCE port's netdev (`ip link`) and the mlx5 driver log (dmesg)",
                                        state, "ACTIVE", node))
        else:
            why = {"Polling": "no link (cable unplugged, bad cable/transceiver, or the switch port is down)",
                   "Disabled": "port disabled (administratively, or no cable)"}.get(phys, "physical state %s" % phys)
            fix = ("reseat/replace the cable or transceiver, check the switch port (`ibportstate`, switch logs); "
                   "`ibstat %s` must show Physical state: LinkUp" % p["device"])
            records.append(_port_record(C.FAIL if needed else C.WARN, "ib_port_state", p,
                                        "%s (state %s)%s" % (why, state, "" if needed else ": not used while "
                                                             "another port is ACTIVE; keep it out of NCCL_IB_HCA"),
                                        fix, "%s/%s" % (state, phys), "ACTIVE/LinkUp", node))
    active = [port_label(p) for p in ports if _active(p)]
    return _summary("ib_port_state", records, "%d port(s) ACTIVE/LinkUp: %s" % (len(active), ", ".join(active)), node)


def check_port_rate(ports, node=None):
    """Active ports below their own maximum.

    The maximum is derived from what sysfs exposes (the `rate` file, `hca_type`): (1) width: an
    InfiniBand HCA port is 4X (2X on split HDR100/NDR200 ports), so an active 1X link has lost
    lanes; (2) peers: ports of the same HCA model and link layer on this node run the same rate,
    so one below the fastest of them is degraded (an HDR port at EDR); (3) model: a port below
    HCA_MAX_GBPS for its model is warned (the same model ships in slower variants).
    """
    records = []
    act = [p for p in ports if _active(p) and p.get("gbps")]
    for p in act:
        if p.get("link_layer") == "InfiniBand" and p.get("width") == 1:
            records.append(_port_record(
                C.FAIL, "ib_port_rate", p, "active at %s: 1X width, a 4X port has lost lanes" % p["rate"],
                "reseat or replace the cable/transceiver (check `mlxlink -d %s` for lane errors)" % p["device"],
                p["rate"], "4X", node))
            continue
        peers = [q for q in act if q is not p and q.get("link_layer") == p.get("link_layer")
                 and q.get("hca_type") == p.get("hca_type")]
        best = max(peers, key=lambda q: q["gbps"]) if peers else None
        if best and best["gbps"] > p["gbps"]:
            records.append(_port_record(
                C.FAIL, "ib_port_rate", p,
                "active at %s while %s (same %s, %s) runs %s" % (p["rate"], port_label(best), p.get("hca_type") or
                                                                 "model", p.get("link_layer"), best["rate"]),
                "check the cable/transceiver rating and the switch port speed (an EDR cable on an HDR port trains "
                "at EDR); reseat or replace it", p["gbps"], best["gbps"], node))
            continue
        top = HCA_MAX_GBPS.get((p.get("hca_type") or "").upper())
        if top and p["gbps"] < top:
            records.append(_port_record(
                C.WARN, "ib_port_rate", p,
                "active at %s; a %s port runs up to %d Gb/sec" % (p["rate"], p["hca_type"], top),
                "fine for a slower variant of the card or a slower switch; otherwise check the cable rating and "
                "the switch port speed", p["gbps"], top, node))
    return _summary("ib_port_rate", records, "%d active port(s) at their full rate: %s" % (
        len(act), ", ".join("%s %s" % (port_label(p), p["rate"]) for p in act)), node)


def counter_growth(first, second):
    """{"mlx5_0/1": {counter: increase}} for counters that grew between two reads."""
    out = {}
    for key, after in (second or {}).items():
        before = (first or {}).get(key) or {}
        grown = {k: v - before[k] for k, v in after.items() if k in before and v > before[k]}
        if grown:
            out[key] = grown
    return out


def check_counters(ports, first, second, interval, node=None):
    """Error counters that grew between two reads `interval` seconds apart."""
    if not interval or second is None:
        return [C.skipped("ib_counters", "error counters read once (fabric_health_counter_interval 0): growth not "
                          "judged", node, {"category": "ib_counters", "value": first})]
    grown = counter_growth(first, second)
    by_key = {"%s/%s" % (p["device"], p["port"]): p for p in ports}
    records = []
    for key, grew in sorted(grown.items()):
        p = by_key.get(key) or {"device": key.split("/")[0], "port": key.split("/")[-1]}
        bad = {k: v for k, v in grew.items() if k in COUNTERS_FAIL}
        warn = {k: v for k, v in grew.items() if k in COUNTERS_WARN}
        if bad:
            records.append(_port_record(
                C.FAIL, "ib_counters", p, "error counters grew in %ss: %s" % (interval, ", ".join(
                    "%s +%d" % kv for kv in sorted(bad.items()))),
                "a link taking errors now: reseat/replace the cable or transceiver; `perfquery -x` on both ends, "
                "then watch them again", bad, 0, node, {"interval_s": interval}))
        elif warn:
            records.append(_port_record(
                C.WARN, "ib_counters", p, "congestion counters grew in %ss: %s" % (interval, ", ".join(
                    "%s +%d" % kv for kv in sorted(warn.items()))),
                "packets dropped for congestion/credits: check the fabric (ibqueryerrors) and its routing",
                warn, 0, node, {"interval_s": interval}))
    return _summary("ib_counters", records, "no error counter grew in %ss on %d port(s)" % (interval, len(second)),
                    node, {"interval_s": interval})


def roce_mtu(netdev_mtu):
    """The RoCE (IB) MTU a netdev MTU gives, as the kernel computes it (iboe_get_mtu)."""
    if not netdev_mtu:
        return None
    room = netdev_mtu - ROCE_OVERHEAD
    for mtu in IB_MTUS:
        if room >= mtu:
            return mtu
    return None


def check_mtu(ports, devinfo=None, node=None):
    """Active MTU 4096 wanted. InfiniBand: `ibv_devinfo` active_mtu (the subnet manager's partition
    MTU). RoCE: derived from the netdev MTU (1500 gives 1024; 9000 gives 4096)."""
    records, judged = [], []
    for p in [q for q in ports if _active(q)]:
        key = "%s/%s" % (p["device"], p["port"])
        if p.get("link_layer") == "Ethernet":
            mtu = roce_mtu(p.get("netdev_mtu"))
            if mtu is None:
                continue
            judged.append(key)
            if mtu < WANT_MTU:
                records.append(_port_record(
                    C.WARN, "ib_mtu", p, "RoCE MTU %d (netdev mtu %s): more packets and headers per byte than with "
                    "4096" % (mtu, p.get("netdev_mtu")),
                    "set mtu 9000 on %s and on the switch ports (RoCE then runs 4096)" % ",".join(p["netdevs"] or ["the netdev"]),
                    mtu, WANT_MTU, node, {"netdev_mtu": p.get("netdev_mtu")}))
        else:
            info = (devinfo or {}).get(key) or {}
            if not info.get("active_mtu"):
                continue
            judged.append(key)
            if info["active_mtu"] < WANT_MTU:
                records.append(_port_record(
                    C.WARN, "ib_mtu", p, "active MTU %d (port max %s)" % (info["active_mtu"], info.get("max_mtu")),
                    "raise the partition MTU on the subnet manager (opensm partitions.conf `mtu=5` = 4096, or UFM)",
                    info["active_mtu"], WANT_MTU, node))
    if not judged:
        return [C.skipped("ib_mtu", "no MTU to judge: InfiniBand MTU needs `ibv_devinfo` (ibverbs-utils) and no "
                          "active RoCE port has a netdev", node, {"category": "ib_mtu"})]
    return _summary("ib_mtu", records, "MTU %d on %s" % (WANT_MTU, ", ".join(judged)), node)


def check_gdr(gpus_present, rdma_active, modules, memory_peers=False, node=None):
    """GPUDirect RDMA: nvidia_peermem (driver R470+) or nv_peer_mem (MLNX_OFED) loaded."""
    if not gpus_present or not rdma_active:
        return [C.skipped("gdr_peermem", "GPUDirect RDMA needs both GPUs and an active RDMA port (%s)" % (
            "no GPU" if not gpus_present else "no active RDMA port"), node, {"category": "gdr_peermem"})]
    loaded = sorted(m for m in ("nvidia_peermem", "nv_peer_mem") if m in modules)
    if loaded or memory_peers:
        return [C.passed("gdr_peermem", "%s loaded" % (", ".join(loaded) or "nv_mem memory peer"), node,
                         {"category": "gdr_peermem", "value": loaded or ["memory_peers/nv_mem"], "limit": None})]
    return [C.warned("gdr_peermem",
                     "neither nvidia_peermem nor nv_peer_mem is loaded: NCCL cannot use GPUDirect RDMA unless DMA-BUF "
                     "works (NCCL >= 2.19, open kernel module, Linux >= 5.12); otherwise every transfer is staged "
                     "through host memory (nccl-tests#29: enabling GPUDirect RDMA doubled the bandwidth)",
                     "`sudo modprobe nvidia_peermem` (ships with the driver) and list it in "
                     "/etc/modules-load.d/nvidia-peermem.conf; NCCL_DEBUG=INFO shows 'GPU Direct RDMA Enabled'",
                     node, {"category": "gdr_peermem", "value": "not loaded", "limit": "nvidia_peermem"})]


_ACS_REDIRECT = ("SrcValid", "ReqRedir", "CmpltRedir")


def check_acs(acs, pairs, node=None, access_denied=False):
    """PCIe ACS enabled on a bridge between a GPU and a NIC: a warning with the reason.

    acs: parse_lspci_acs(); pairs: [(gpu_bdf, nic_bdf, [bridges between])]. With redirection on
    (ReqRedir/CmpltRedir, and SrcValid as NCCL's troubleshooting guide checks), GPU<->NIC
    peer-to-peer traffic is sent up to the root complex instead of across the switch, which
    halves GPUDirect RDMA bandwidth or breaks it (nccl-tests#112, nccl#19).
    """
    if access_denied and not acs:
        return [C.skipped("pcie_acs", "lspci shows no ACS capability without root: run the check with become",
                          node, {"category": "pcie_acs"})]
    if not pairs:
        return [C.skipped("pcie_acs", "no GPU and NIC share a PCIe switch (or none of each): ACS does not apply",
                          node, {"category": "pcie_acs"})]
    on = {a["bdf"]: a for a in acs if a["bdf"] and any(a["acsctl"].get(f) for f in _ACS_REDIRECT)}
    records = []
    seen = set()
    for gpu, nic, bridges in pairs:
        for b in bridges:
            if b in on and b not in seen:
                seen.add(b)
                flags = [f for f in _ACS_REDIRECT if on[b]["acsctl"].get(f)]
                records.append(C.warned(
                    "pcie_acs %s" % b,
                    "ACS %s on bridge %s between GPU %s and NIC %s: peer-to-peer traffic is redirected to the root "
                    "complex, which halves or breaks GPUDirect RDMA" % ("+".join(flags), b, gpu, nic),
                    "disable ACS in the BIOS (or `setpci -s %s ECAP_ACS+0x6.w=0000` at boot; not inside VMs that need "
                    "it for passthrough); see NCCL's troubleshooting guide 'PCI Access Control Services'" % b,
                    node, {"category": "pcie_acs", "device": {"bridge": b, "gpu": gpu, "nic": nic},
                           "value": flags, "limit": []}))
    if not records and any(a["bdf"] is None and any(a["acsctl"].get(f) for f in _ACS_REDIRECT) for a in acs):
        return [C.warned("pcie_acs", "ACS redirection is on for some PCI functions but lspci's output names no "
                         "device: cannot tell whether they lie between a GPU and a NIC",
                         "run `sudo lspci -vvv` and look up the bridges between the GPU and the NIC", node,
                         {"category": "pcie_acs"})]
    return _summary("pcie_acs", records, "ACS redirection off on the bridges between %d GPU/NIC pair(s)" % len(pairs),
                    node)


def check_rdma_devices(ports, dev_entries, in_container, node=None):
    """/dev/infiniband/uverbs* present when /sys/class/infiniband lists devices."""
    devs = sorted({p["device"] for p in ports})
    uverbs = sorted(e for e in (dev_entries or []) if e.startswith("uverbs"))
    if uverbs:
        return [C.passed("rdma_devices", "%d uverbs device(s) in /dev/infiniband for %s" % (len(uverbs), ", ".join(devs)),
                         node, {"category": "rdma_devices", "value": uverbs})]
    if in_container:
        fix = ("re-create the container with `--device=/dev/infiniband` (docker/podman; plus `--cap-add IPC_LOCK "
               "--ulimit memlock=-1`), or the RDMA shared-device plugin on Kubernetes")
        why = "the host's RDMA devices are not passed into this container"
    else:
        fix = "`sudo modprobe ib_uverbs` (and rdma_ucm); install rdma-core"
        why = "the ib_uverbs module is not loaded"
    return [C.failed("rdma_devices", "%s lists %s but /dev/infiniband has no uverbs device: %s; NCCL falls back to "
                     "TCP sockets" % ("/sys/class/infiniband", ", ".join(devs), why), fix, node,
                     {"category": "rdma_devices", "value": list(dev_entries or []), "limit": "uverbs*"})]


def check_memlock(limits, devices, in_container, runtime, capeff=None, node=None):
    """node_runtime's memlock rule (unlimited where RDMA devices exist), as a Check record."""
    res = runtime_limits.check_memlock(limits, {"present": bool(devices), "devices": list(devices)}, in_container,
                                       runtime, capeff=capeff, require="auto", source="module")
    return [C.check("rdma_memlock", res["status"], res["detail"], res["fix"], node,
                    {"category": "rdma_memlock", "value": res.get("measured"), "limit": res.get("required")})]


# ---------------------------------------------------------------- cluster-level

def chosen_layer(ports):
    """The link layer NCCL uses on a node: InfiniBand when a port of it is ACTIVE (nccl_net prefers
    native InfiniBand over RoCE), else Ethernet (RoCE), else None."""
    layers = {p.get("link_layer") for p in ports if _active(p)}
    return "InfiniBand" if "InfiniBand" in layers else ("Ethernet" if "Ethernet" in layers else None)


def cluster_link_layers(ports_by_node):
    """{node: read_ports()} -> checks naming nodes whose RDMA link layer differs from the others.

    InfiniBand and RoCE do not talk to each other, and NCCL uses one network for the whole job:
    a node that would use RoCE among InfiniBand nodes (or has no active RDMA port among RDMA
    nodes) drags the job onto TCP sockets, or hangs it. The layer most nodes use is the norm
    (InfiniBand on a tie).
    """
    chosen = {n: chosen_layer(ports) for n, ports in ports_by_node.items()}
    nodes = sorted(chosen)
    used = [c for c in chosen.values() if c]
    if not used:
        return [C.skipped("ib_link_layer", "no node has an active RDMA port", n) for n in nodes]
    want = max(("InfiniBand", "Ethernet"), key=lambda layer: (used.count(layer), layer == "InfiniBand"))
    wanted = used.count(want)  # once: counted for each node, it made the check N x N
    name = {"InfiniBand": "InfiniBand", "Ethernet": "RoCE (Ethernet)", None: "no active RDMA port"}
    out = []
    for n in nodes:
        have = chosen[n]
        data = {"category": "ib_link_layer", "value": have, "limit": want}
        if have == want:
            out.append(C.passed("ib_link_layer", "%s, as on %d of %d node(s)" % (name[want], wanted, len(nodes)), n,
                                data))
            continue
        out.append(C.failed("ib_link_layer", "%s while %d other node(s) use %s: NCCL cannot run one RDMA network "
                            "across all nodes (it falls back to TCP or hangs)" % (name[have], wanted, name[want]),
                            "bring up the same kind of port on every node (InfiniBand everywhere, or RoCE "
                            "everywhere), or pin NCCL_IB_HCA to ports of one kind on all nodes", n, data))
    return out


def cluster_port_rates(ports_by_node):
    """Active ports of the same HCA model and link layer across nodes: one below the cluster's
    fastest of its kind is degraded."""
    best = {}
    for n, ports in ports_by_node.items():
        for p in ports:
            if _active(p) and p.get("gbps"):
                key = (p.get("hca_type"), p.get("link_layer"))
                if p["gbps"] > best.get(key, (0, None, None))[0]:
                    best[key] = (p["gbps"], n, p)
    out = []
    for n in sorted(ports_by_node):
        slow = []
        for p in ports_by_node[n]:
            if not (_active(p) and p.get("gbps")):
                continue
            top, where, q = best[(p.get("hca_type"), p.get("link_layer"))]
            if p["gbps"] < top:
                slow.append(_port_record(C.FAIL, "ib_port_rate", p, "active at %s while %s on %s runs %s" % (
                    p["rate"], port_label(q), where, q["rate"]),
                    "check the cable/transceiver rating and the switch port speed; reseat or replace it",
                    p["gbps"], top, n))
        if slow:
            out += slow
        elif any(_active(p) and p.get("gbps") for p in ports_by_node[n]):
            out.append(C.passed("ib_port_rate", "active ports at the cluster's rate for their kind", n,
                                {"category": "ib_port_rate"}))
        else:
            out.append(C.skipped("ib_port_rate", "no active RDMA port on this node", n, {"category": "ib_port_rate"}))
    return out


# ---------------------------------------------------------------- everything

NO_DEVICE = "no RDMA device under /sys/class/infiniband"


def skipped_all(reason, node=None, categories=CATEGORIES):
    """Every fabric check as a skip with the reason (no RDMA device): never a pass."""
    return [C.skipped(cat, reason, node, {"category": cat}) for cat in categories]


def fabric_checks(ports, counters_first=None, counters_second=None, interval=0, devinfo=None, required=(),
                  gpus_present=False, modules=(), memory_peers=False, acs=None, acs_pairs=None,
                  acs_denied=False, dev_entries=None, in_container=False, runtime=None, limits=None, capeff=None,
                  node=None):
    """All per-node fabric checks from what was read (ports: read_ports())."""
    if not ports:
        return skipped_all(NO_DEVICE, node)
    out = check_port_state(ports, required, node)
    out += check_port_rate(ports, node)
    out += check_counters(ports, counters_first, counters_second, interval, node)
    out += check_mtu(ports, devinfo, node)
    out += check_gdr(gpus_present, any(_active(p) for p in ports), set(modules or ()), memory_peers, node)
    if acs is None:
        out.append(C.skipped("pcie_acs", "lspci not available or not run", node, {"category": "pcie_acs"}))
    else:
        out += check_acs(acs, acs_pairs or [], node, acs_denied)
    out += check_rdma_devices(ports, dev_entries, in_container, node)
    if limits is None:
        out.append(C.skipped("rdma_memlock", "process limits not readable", node, {"category": "rdma_memlock"}))
    else:
        out += check_memlock(limits, sorted({p["device"] for p in ports}), in_container, runtime, capeff, node)
    return out
