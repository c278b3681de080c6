# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""GPU health: parsers and decisions over what the NVIDIA driver reports (pure Python).

Used by the ``gpu_health_info`` module and the tests. Nothing here runs a command or imports
Ansible: every parser takes the text a tool printed, every decision takes parsed data and returns
Check records (plugins/module_utils/verify/checks.py) that name the device (GPU index and PCI bus id), the
value, the limit and the fix. The node is set by the caller (``node=``, or checks.with_node).

Reading:   parse_smi_health(xml)          `nvidia-smi -q -x` (full query) -> {"gpus": [...], ...}
           parse_nvlink_status(text)       `nvidia-smi nvlink -s`
           parse_nvlink_errors(text)       `nvidia-smi nvlink -e`
           parse_kernel_xids(text)         `dmesg` / `journalctl -k` -> Xid events
           parse_dcgmi_diag(text)          `dcgmi diag -r 1 -j` (JSON) or its table
           pci_nvidia_devices(sys_root)    NVIDIA GPUs and NVSwitches on the PCI bus (sysfs)
Deciding:  check_gpu_count, check_ecc, check_remap, check_pcie, check_clocks, check_persistence,
           check_mig, check_nvlink, check_xids, check_fabric, check_dcgmi, cluster_gpu_counts;
           health_checks() runs them all; skipped_all(reason) is every check as a skip.
Thresholds and sources: docs/health-checks.md.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET

from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C

# The check ids (the catalog's keys). A record for one device is named "<id> GPU<index>".
CATEGORIES = ("gpu_count", "gpu_ecc", "gpu_remap", "gpu_pcie_width", "gpu_pcie_gen", "gpu_clocks",
              "gpu_persistence", "gpu_mig", "gpu_nvlink", "gpu_xid", "gpu_fabric", "gpu_dcgm_diag")

NVIDIA_VENDOR = "0x10de"
# PCI class codes (sysfs `class`, 24 bits): 0x0300xx VGA, 0x0302xx 3D controller (datacenter
# GPUs), 0x0680xx "other bridge" (NVSwitch).
GPU_CLASSES = ("0x0300", "0x0302")
NVSWITCH_CLASS = "0x0680"

# Clock event ("throttle") reasons that are faults. GPU idle, application clocks, display clocks,
# sync boost and the software power cap are normal (the power cap is how a GPU holds its power
# limit under load); azurehpc-health-checks' customTests/azure_gpu_clock_throttling.nhc treats
# idle, none and SW power cap as normal too.
FAULT_CLOCK_REASONS = {
    "hw_slowdown": "HW Slowdown (clocks cut by half or more: over temperature, power brake or power supply)",
    "hw_thermal_slowdown": "HW Thermal Slowdown (GPU or memory over its temperature limit)",
    "hw_power_brake_slowdown": "HW Power Brake Slowdown (the system's power supply asserted the brake)",
    "sw_thermal_slowdown": "SW Thermal Slowdown (the driver holds clocks down: GPU above its max operating temperature)",
}

# Retired-pages table (pre-Ampere dynamic page retirement): NVIDIA retires at most 64 pages;
# azurehpc-health-checks (azure_gpu_ecc.nhc) calls the table full at 62 with a retirement pending.
RETIRED_PAGES_WARN = 60
# Row remapping (Ampere+): azure_gpu_ecc.nhc fails above 512 uncorrectable remapped rows.
REMAPPED_UNC_LIMIT = 512

XID_CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/"
_RESET = "drain the node and reset the GPU (`nvidia-smi -r -i {index}` with no process on it) or reboot"
# code: (meaning, status, fix). Status follows the immediate action of NVIDIA's Xid catalog:
# RESTART_APP -> warn (an application fault; the GPU is usually fine), RESET_GPU / reboot /
# CONTACT_SUPPORT -> fail. {index} is the GPU index when the bus id maps to one.
XID_CATALOG = {
    13: ("Graphics Engine Exception: an application ran an illegal instruction or accessed out of range "
         "(usually a software fault)", C.WARN,
         "rerun the job (compute-sanitizer finds the kernel at fault); if it repeats with other applications, "
         "run `dcgmi diag -r 2` on that GPU"),
    31: ("GPU memory page fault (MMU fault): an application used an invalid address (usually a software or "
         "driver fault)", C.WARN,
         "check the application (compute-sanitizer); if it repeats with other applications, run `dcgmi diag -r 2`"),
    43: ("GPU stopped processing: a user application hit a fault; the GPU stays usable", C.WARN,
         "restart the application; nothing to fix on the node unless it repeats with other applications"),
    45: ("preemptive cleanup after a previous error: a consequence, not a cause", C.WARN,
         "look at the Xid logged just before it on the same GPU"),
    48: ("double-bit (uncorrectable) ECC error in GPU memory", C.FAIL,
         _RESET + "; if it recurs, RMA the GPU"),
    61: ("internal micro-controller breakpoint/warning", C.FAIL, _RESET + "; update the driver if it recurs"),
    62: ("internal micro-controller halt", C.FAIL, _RESET + "; update the driver if it recurs"),
    63: ("ECC page retirement / row remapping event: a memory row was marked for remapping, which takes effect "
         "at the next GPU reset", C.FAIL,
         _RESET + " to activate the remap (`nvidia-smi -q -d ROW_REMAPPER` shows it pending)"),
    64: ("ECC page retirement / row remapping failure: the GPU could not retire the bad memory", C.FAIL,
         _RESET + "; if `Remapping Failure Occurred: Yes` persists, RMA the GPU"),
    74: ("NVLink error: a link reported a fatal error", C.FAIL,
         _RESET + " (on NVSwitch systems reboot); if it repeats on the same link, reseat/inspect the NVLink "
         "path or baseboard, then RMA"),
    79: ("GPU has fallen off the bus: it stopped answering on PCIe", C.FAIL,
         "drain and reboot the node (a GPU reset is not enough); if it recurs check power cables, thermals, "
         "the PCIe slot/riser and the BIOS, then RMA"),
    92: ("high single-bit ECC error rate", C.WARN,
         "watch `nvidia-smi -q -d ECC`; reset the GPU when convenient; RMA if it keeps rising"),
    94: ("contained ECC error: an uncorrectable memory error was contained; only the applications using that "
         "memory were stopped", C.WARN,
         "restart the affected job; reset the GPU when convenient so the row remap takes effect"),
    95: ("uncontained ECC error: an uncorrectable memory error could not be contained; every application on "
         "the GPU is affected", C.FAIL, _RESET + " before running anything on it"),
    119: ("GSP RPC timeout: the GPU System Processor firmware stopped answering the driver", C.FAIL,
          _RESET + "; if it recurs, update the driver"),
    120: ("GSP error: the GPU System Processor firmware reported an error", C.FAIL,
          _RESET + "; if it recurs, update the driver"),
    140: ("unrecovered ECC error", C.FAIL, _RESET),
    154: ("GPU recovery action changed: the driver asks for a GPU reset or a node reboot (the message says which)",
          C.FAIL, "do what the message names: drain, then reset the GPU or reboot the node"),
}


# ---------------------------------------------------------------- small helpers

def _na(value):
    value = (value or "").strip()
    return None if value in ("", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "None") else value


def _int(value):
    m = re.match(r"\s*(-?\d+)", value or "")
    return int(m.group(1)) if m else None


def _yes(value):
    value = _na(value)
    return None if value is None else value.lower() in ("yes", "true", "enabled", "active")


def norm_bus_id(bus_id):
    """'00000000:1B:00.0' / '0000:1b:00.0' / 'PCI:0000:1b:00' -> '0000:1b:00.0' (lowercase, 4-digit domain)."""
    text = (bus_id or "").strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    m = re.match(r"^(?:([0-9a-f]+):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.([0-7]))?$", text)
    if not m:
        return text
    domain = (m.group(1) or "0")[-4:].rjust(4, "0")
    return "%s:%s:%s.%s" % (domain, m.group(2).rjust(2, "0"), m.group(3).rjust(2, "0"), m.group(4) or "0")


def device(gpu):
    """The device a record names: {index, bus_id, name, uuid}."""
    return {"index": gpu.get("index"), "bus_id": gpu.get("bus_id"), "name": gpu.get("name"), "uuid": gpu.get("uuid")}


def label(gpu):
    return "GPU%s %s" % (gpu.get("index"), gpu.get("bus_id"))


def _record(status, category, gpu, detail, fix="", value=None, limit=None, node=None, extra=None):
    data = {"category": category, "value": value, "limit": limit}
    if gpu is not None:
        data["device"] = device(gpu)
    data.update(extra or {})
    name = category if gpu is None else "%s GPU%s" % (category, gpu.get("index"))
    text = detail if gpu is None else "%s: %s" % (label(gpu), detail)
    return C.check(name, status, text, fix if status in (C.FAIL, C.WARN) else "", node, data)


def _summary(category, records, passed_detail, node=None, data=None):
    """The per-device records, or one pass for the category when none was raised."""
    if records:
        return records
    return [C.passed(category, passed_detail, node, dict({"category": category}, **(data or {})))]


# ---------------------------------------------------------------- nvidia-smi -q -x

def _reasons(gpu_el):
    """clocks_event_reasons (driver >= 535) or clocks_throttle_reasons (older) -> {reason: active}."""
    out = {}
    for tag, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                        ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        el = gpu_el.find(tag)
        if el is None:
            continue
        for child in el:
            if child.tag.startswith(prefix):
                value = _na(child.text)
                if value is not None:
                    out[child.tag[len(prefix):]] = value == "Active"
    return out


def _ecc_counts(el):
    """One ECC timescale (<volatile> or <aggregate>) -> {name: int} for the uncorrectable counters.

    Drivers differ: 580 has sram_uncorrectable_parity/_secded and dram_uncorrectable, 470-550
    sram_uncorrectable/dram_uncorrectable, pre-Ampere double_bit/{device_memory,...,total}.
    """
    out = {}
    if el is None:
        return out
    for child in el:
        if len(child):
            if child.tag == "double_bit":
                for leaf in child:
                    value = _int(_na(leaf.text))
                    if value is not None:
                        out["double_bit_" + leaf.tag] = value
            continue
        if "uncorrectable" in child.tag:
            value = _int(_na(child.text))
            if value is not None:
                out[child.tag] = value
    return out


def _uncorrectable_total(counts):
    if "double_bit_total" in counts:
        return counts["double_bit_total"]
    return sum(v for k, v in counts.items() if not k.startswith("double_bit_"))


def parse_smi_health(text):
    """`nvidia-smi -q -x` -> {"driver_version", "cuda_version", "attached_gpus", "gpus": [...]}.

    Each GPU: index (XML order = PCI bus order, as nvidia-smi numbers them), bus_id (normalized),
    name, uuid, architecture, persistence_mode, mig_current/mig_pending, ecc_current/ecc_pending,
    ecc {"volatile": {...}, "aggregate": {...}} uncorrectable counters, sram_threshold_exceeded,
    retired {single, double, pending}, remap {correctable, uncorrectable, pending, failure},
    pcie {gen_max, gen_current, width_max, width_current}, util_gpu (%), perf_state,
    clock_reasons {reason: bool}, fabric {state, status}. Unknown values are None.
    """
    root = ET.fromstring(text)
    out = {"driver_version": _na(root.findtext("driver_version")),
           "cuda_version": _na(root.findtext("cuda_version")),
           "attached_gpus": _int(root.findtext("attached_gpus")), "gpus": []}
    for i, g in enumerate(root.findall("gpu")):
        bus = _na(g.findtext("pci/pci_bus_id")) or g.get("id")
        link = "pci/pci_gpu_link_info/"
        ecc = g.find("ecc_errors")
        rec = {
            "index": i,
            "bus_id": norm_bus_id(bus),
            "name": _na(g.findtext("product_name")),
            "uuid": _na(g.findtext("uuid")),
            "architecture": _na(g.findtext("product_architecture")),
            "persistence_mode": _na(g.findtext("persistence_mode")),
            "mig_current": _na(g.findtext("mig_mode/current_mig")),
            "mig_pending": _na(g.findtext("mig_mode/pending_mig")),
            "ecc_current": _na(g.findtext("ecc_mode/current_ecc")),
            "ecc_pending": _na(g.findtext("ecc_mode/pending_ecc")),
            "ecc": {"volatile": _ecc_counts(ecc.find("volatile") if ecc is not None else None),
                    "aggregate": _ecc_counts(ecc.find("aggregate") if ecc is not None else None)},
            "sram_threshold_exceeded": _yes(g.findtext("ecc_errors/aggregate/sram_threshold_exceeded")),
            "retired": {
                "single": _int(_na(g.findtext("retired_pages/multiple_single_bit_retirement/retired_count"))),
                "double": _int(_na(g.findtext("retired_pages/double_bit_retirement/retired_count"))),
                "pending": _yes(g.findtext("retired_pages/pending_retirement"))
                or _yes(g.findtext("retired_pages/pending_blacklist")),
            },
            "remap": {
                "correctable": _int(_na(g.findtext("remapped_rows/remapped_row_corr"))),
                "uncorrectable": _int(_na(g.findtext("remapped_rows/remapped_row_unc"))),
                "pending": _yes(g.findtext("remapped_rows/remapped_row_pending")),
                "failure": _yes(g.findtext("remapped_rows/remapped_row_failure")),
            },
            "pcie": {
                "gen_max": _int(_na(g.findtext(link + "pcie_gen/max_link_gen"))),
                "gen_current": _int(_na(g.findtext(link + "pcie_gen/current_link_gen"))),
                "width_max": _int(_na(g.findtext(link + "link_widths/max_link_width"))),
                "width_current": _int(_na(g.findtext(link + "link_widths/current_link_width"))),
            },
            "util_gpu": _int(_na(g.findtext("utilization/gpu_util"))),
            "perf_state": _na(g.findtext("performance_state")),
            "clock_reasons": _reasons(g),
            "fabric": {"state": _na(g.findtext("fabric/state")), "status": _na(g.findtext("fabric/status"))},
        }
        out["gpus"].append(rec)
    return out


# ---------------------------------------------------------------- sysfs: GPUs and NVSwitches on the bus

def pci_nvidia_devices(sys_root="/sys"):
    """{"gpus": [bus ids], "nvswitches": [bus ids]} from /sys/bus/pci/devices/*/{vendor,class}.

    A GPU on the bus that nvidia-smi does not list has fallen off the bus or failed to
    initialise; an NVIDIA bridge-class device is an NVSwitch (HGX/DGX baseboards).
    """
    base = os.path.join(sys_root, "bus", "pci", "devices")
    out = {"gpus": [], "nvswitches": []}
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return out
    for name in names[:4096]:  # bounded: a node has a few hundred PCI functions
        try:
            with open(os.path.join(base, name, "vendor"), encoding="ascii") as fh:
                vendor = fh.read().strip().lower()
            with open(os.path.join(base, name, "class"), encoding="ascii") as fh:
                klass = fh.read().strip().lower()
        except OSError:
            continue
        if vendor != NVIDIA_VENDOR:
            continue
        if klass.startswith(GPU_CLASSES):
            out["gpus"].append(norm_bus_id(name))
        elif klass.startswith(NVSWITCH_CLASS):
            out["nvswitches"].append(norm_bus_id(name))
    return out


# ---------------------------------------------------------------- decisions over nvidia-smi -q -x

def check_gpu_count(gpus, expected=0, pci_gpus=None, node=None):
    """GPU count against the expected one, and GPUs the PCI bus has but nvidia-smi does not list."""
    found = len(gpus)
    listed = {g["bus_id"] for g in gpus}
    records = []
    for bus in sorted(set(pci_gpus or ()) - listed):
        records.append(C.failed(
            "gpu_count %s" % bus,
            "GPU %s is on the PCI bus but nvidia-smi does not list it (fallen off the bus or failed to "
            "initialise; look for Xid 79 / 'fallen off the bus' in the kernel log)" % bus,
            "drain and reboot the node; if it stays missing, check its power cables and slot, then RMA",
            node, {"category": "gpu_count", "device": {"bus_id": bus}, "value": "missing", "limit": "listed"}))
    if expected and found < expected:
        records.append(C.failed(
            "gpu_count", "%d GPU(s) visible, expected %d" % (found, expected),
            "find the missing GPU(s) with `lspci -d 10de:` and the kernel log (Xid 79); reboot, reseat or RMA",
            node, {"category": "gpu_count", "value": found, "limit": expected}))
    elif expected and found > expected:
        records.append(C.warned(
            "gpu_count", "%d GPU(s) visible, expected %d" % (found, expected),
            "set the expected GPU count of this node in the inventory (gpu_health_expected_gpus)",
            node, {"category": "gpu_count", "value": found, "limit": expected}))
    if records:
        return records
    what = ("%d GPU(s), as expected" % found) if expected else ("%d GPU(s) (no expected count given)" % found)
    return [C.passed("gpu_count", what, node, {"category": "gpu_count", "value": found, "limit": expected or None})]


def cluster_gpu_counts(counts, expected=0):
    """{node: gpu_count} across the cluster -> checks naming the nodes whose count differs.

    expected 0: the count of the first node (sorted by name) that has GPUs, as the inventory
    default promises ("the same on every node as the first GPU node"). Nodes with no GPU at all
    are skipped when no node has any.
    """
    nodes = sorted(counts)
    gpu_nodes = [n for n in nodes if counts[n]]
    if not gpu_nodes:
        return [C.skipped("gpu_count", "no node has a GPU", n) for n in nodes]
    want = expected or counts[gpu_nodes[0]]
    source = "expected" if expected else "as on %s, the first GPU node" % gpu_nodes[0]
    out = []
    for n in nodes:
        have = counts[n] or 0
        if have == want:
            out.append(C.passed("gpu_count", "%d GPU(s) (%s)" % (have, source), n,
                                {"category": "gpu_count", "value": have, "limit": want}))
        else:
            out.append(C.failed("gpu_count", "%d GPU(s), %d %s" % (have, want, source),
                                "find the missing GPU(s): `lspci -d 10de:`, the kernel log (Xid 79); reboot, "
                                "reseat or RMA, or set gpu_health_expected_gpus for this node", n,
                                {"category": "gpu_count", "value": have, "limit": want}))
    return out


def check_ecc(gpus, require_ecc=True, node=None):
    """Uncorrectable ECC errors (volatile and aggregate) and ECC mode."""
    records = []
    for g in gpus:
        vol, agg = g["ecc"]["volatile"], g["ecc"]["aggregate"]
        vol_total = _uncorrectable_total(vol) if vol else None
        sram_agg = sum(v for k, v in agg.items() if k.startswith("sram_uncorrectable"))
        dram_agg = _uncorrectable_total({k: v for k, v in agg.items() if not k.startswith("sram")}) if agg else 0
        if vol_total:
            records.append(_record(C.FAIL, "gpu_ecc", g,
                                   "%d uncorrectable ECC error(s) since the driver loaded (%s)"
                                   % (vol_total, ", ".join("%s=%d" % kv for kv in sorted(vol.items()) if kv[1])),
                                   "drain the node and reset the GPU (`nvidia-smi -r -i %s`) or reboot; if errors "
                                   "return, RMA the GPU" % g["index"], vol_total, 0, node))
        elif sram_agg or g.get("sram_threshold_exceeded"):
            records.append(_record(C.FAIL, "gpu_ecc", g,
                                   "%d aggregate uncorrectable SRAM ECC error(s)%s: SRAM cannot be repaired by "
                                   "row remapping" % (sram_agg, ", SRAM threshold exceeded"
                                                      if g.get("sram_threshold_exceeded") else ""),
                                   "drain the node and RMA the GPU (azurehpc-health-checks fails any SRAM "
                                   "uncorrectable error, NHC2019)", sram_agg, 0, node))
        elif dram_agg:
            records.append(_record(C.WARN, "gpu_ecc", g,
                                   "%d aggregate (lifetime) uncorrectable DRAM ECC error(s), none since the driver "
                                   "loaded" % dram_agg,
                                   "usually repaired by row remapping/page retirement (see gpu_remap); RMA if the "
                                   "count keeps growing", dram_agg, 0, node))
        cur, pend = g.get("ecc_current"), g.get("ecc_pending")
        if cur == "Disabled":
            status = C.FAIL if require_ecc else C.WARN
            records.append(_record(status, "gpu_ecc", g,
                                   "ECC mode is Disabled on a GPU that supports it: memory errors go undetected",
                                   "`sudo nvidia-smi -i %s -e 1` then reboot (or set gpu_health_require_ecc: false "
                                   "if disabled on purpose)" % g["index"], "Disabled", "Enabled", node))
        elif cur and pend and cur != pend:
            records.append(_record(C.WARN, "gpu_ecc", g, "ECC mode %s, %s pending" % (cur, pend),
                                   "reboot (or reset the GPU) to apply the pending ECC mode", cur, pend, node))
    return _summary("gpu_ecc", records, "%d GPU(s): no uncorrectable ECC error, ECC enabled" % len(gpus), node)


def check_remap(gpus, node=None):
    """Row remapping (Ampere and later) and page retirement (earlier GPUs)."""
    records = []
    for g in gpus:
        rm, rt = g["remap"], g["retired"]
        if rm.get("failure"):
            records.append(_record(C.FAIL, "gpu_remap", g,
                                   "row remapping failure occurred: the GPU has no spare row left for a bad one",
                                   "drain the node and RMA the GPU (NVIDIA memory error management: a remapping "
                                   "failure is an RMA condition)", "Yes", "No", node))
        if rm.get("pending"):
            records.append(_record(C.FAIL, "gpu_remap", g,
                                   "row remapping pending (%s uncorrectable row(s) remapped): the remap takes "
                                   "effect only after a GPU reset" % rm.get("uncorrectable"),
                                   "drain the node and reset the GPU (`nvidia-smi -r -i %s`) or reboot"
                                   % g["index"], "Yes", "No", node))
        unc = rm.get("uncorrectable") or 0
        if unc > REMAPPED_UNC_LIMIT:
            records.append(_record(C.FAIL, "gpu_remap", g, "%d rows remapped for uncorrectable errors" % unc,
                                   "drain the node and RMA the GPU", unc, REMAPPED_UNC_LIMIT, node))
        if rt.get("pending"):
            records.append(_record(C.FAIL, "gpu_remap", g, "page retirement pending",
                                   "reboot (or reset the GPU) so the pending page is retired", "Yes", "No", node))
        total = (rt.get("single") or 0) + (rt.get("double") or 0)
        if total >= RETIRED_PAGES_WARN:
            records.append(_record(C.WARN, "gpu_remap", g,
                                   "%d retired pages: the retirement table (64 pages) is nearly full" % total,
                                   "plan an RMA of this GPU", total, RETIRED_PAGES_WARN, node))
    return _summary("gpu_remap", records, "%d GPU(s): no remap/retirement pending or failed" % len(gpus), node)


def is_busy(gpu, busy_util=10):
    """Whether the GPU reports load (utilization >= busy_util %): idle GPUs lower their link generation."""
    util = gpu.get("util_gpu")
    return util is not None and util >= busy_util


def check_pcie(gpus, busy_util=10, loaded=False, node=None):
    """PCIe link width (judged always) and generation (judged only under load).

    Limits are the driver's "max": the most this GPU and this slot allow together, so an x8
    slot by design is not a fault. Idle GPUs drop the link generation to save power (nvidia-smi:
    "These may be reduced when the GPU is not in use"), so a lower generation is judged only when
    the GPU is busy or was put under load (``loaded``); otherwise that check is a skip.
    """
    width_records, gen_records = [], []
    for g in gpus:
        p = g["pcie"]
        if p["width_current"] is not None and p["width_max"] is not None and p["width_current"] < p["width_max"]:
            width_records.append(_record(
                C.FAIL, "gpu_pcie_width", g,
                "PCIe link x%d, the GPU and slot support x%d: host<->GPU bandwidth is cut by %d%%"
                % (p["width_current"], p["width_max"], round(100 - 100.0 * p["width_current"] / p["width_max"])),
                "reseat the GPU (or its riser/cable), check the slot and BIOS lane settings; `lspci -vvv` LnkSta "
                "shows (downgraded)", "x%d" % p["width_current"], "x%d" % p["width_max"], node))
        if p["gen_current"] is None or p["gen_max"] is None:
            gen_records.append(_record(C.SKIP, "gpu_pcie_gen", g, "the driver does not report the link generation"))
            continue
        if p["gen_current"] >= p["gen_max"]:
            continue
        if loaded or is_busy(g, busy_util):
            gen_records.append(_record(
                C.FAIL, "gpu_pcie_gen", g,
                "PCIe Gen%d under load (utilization %s%%), the GPU and slot support Gen%d"
                % (p["gen_current"], g.get("util_gpu"), p["gen_max"]),
                "check the BIOS PCIe speed setting, the riser/retimer and the slot; reseat the GPU",
                "Gen%d" % p["gen_current"], "Gen%d" % p["gen_max"], node))
        else:
            gen_records.append(_record(
                C.SKIP, "gpu_pcie_gen", g,
                "Gen%d of Gen%d while idle (utilization %s%%): idle GPUs lower the link generation, so this is not "
                "judged; set gpu_health_load_command to read it under load"
                % (p["gen_current"], p["gen_max"], g.get("util_gpu")), value="Gen%d" % p["gen_current"],
                limit="Gen%d" % p["gen_max"], node=node))
    out = _summary("gpu_pcie_width", width_records, "%d GPU(s) at their full PCIe link width" % len(gpus), node)
    out += _summary("gpu_pcie_gen", gen_records, "%d GPU(s) at their maximum PCIe generation" % len(gpus), node)
    return out


def check_clocks(gpus, node=None):
    """Active clock event reasons that are faults (not idle, app clocks, sync boost, SW power cap)."""
    records = []
    for g in gpus:
        active = [r for r in FAULT_CLOCK_REASONS if g["clock_reasons"].get(r)]
        if active:
            records.append(_record(
                C.FAIL, "gpu_clocks", g, "clocks held down: " + "; ".join(FAULT_CLOCK_REASONS[r] for r in active),
                "check cooling (fans, airflow, inlet temperature) and power (PSU, power cables, BMC power "
                "capping); `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER` shows which", active, [], node))
    return _summary("gpu_clocks", records, "%d GPU(s): no hardware/thermal slowdown active" % len(gpus), node)


def check_persistence(gpus, node=None):
    records = [_record(C.WARN, "gpu_persistence", g,
                       "persistence mode is off: the driver unloads between jobs (slow start, lost state); DCGM's "
                       "deployment test reports the same",
                       "`sudo systemctl enable --now nvidia-persistenced` (or `sudo nvidia-smi -pm 1`)",
                       g.get("persistence_mode"), "Enabled", node)
               for g in gpus if g.get("persistence_mode") == "Disabled"]
    return _summary("gpu_persistence", records, "%d GPU(s): persistence mode on" % len(gpus), node)


def check_mig(gpus, allow_mig=False, node=None):
    records = []
    for g in gpus:
        cur, pend = g.get("mig_current"), g.get("mig_pending")
        if cur == "Enabled" and not allow_mig:
            records.append(_record(
                C.FAIL, "gpu_mig", g,
                "MIG mode is enabled: CUDA sees MIG instances, not the whole GPU, and NCCL cannot all-reduce "
                "across MIG instances",
                "`sudo nvidia-smi -i %s -mig 0` then reset the GPU (or set gpu_health_allow_mig: true if "
                "intended)" % g["index"], "Enabled", "Disabled", node))
        elif cur and pend and cur != pend:
            records.append(_record(C.WARN, "gpu_mig", g, "MIG mode %s, %s pending" % (cur, pend),
                                   "reset the GPU (or reboot) to apply the pending MIG mode", cur, pend, node))
    return _summary("gpu_mig", records, "%d GPU(s): MIG %s" % (len(gpus), "allowed" if allow_mig else "off"), node)


# ---------------------------------------------------------------- NVLink

_NV_GPU = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]+)\))?\s*$")
_NV_LINK = re.compile(r"^\s*Link (\d+): (.*?)\s*$")
_NV_SPEED = re.compile(r"([\d.]+)\s*GB/s")
_NV_ERR = re.compile(r"^\s*Link (\d+): ([A-Za-z][A-Za-z /-]*?)\s*:\s*(\d+)\s*$")


def parse_nvlink_status(text):
    """`nvidia-smi nvlink -s` -> {gpu_index: {"name", "uuid", "links": {link: GB/s or None}, "all_inactive"}}.

    A link printed as `<inactive>` is None. Drivers print "NVML: Unable to retrieve NVLink
    information as all links are inActive" under a GPU whose links are all down; a GPU without
    NVLink prints no link lines.
    """
    out, cur = {}, None
    for line in (text or "").splitlines():
        m = _NV_GPU.match(line.strip())
        if m:
            cur = int(m.group(1))
            out[cur] = {"name": m.group(2).strip(), "uuid": m.group(3), "links": {}, "all_inactive": False}
            continue
        if cur is None:
            continue
        if "all links are inactive" in line.lower():
            out[cur]["all_inactive"] = True
            continue
        m = _NV_LINK.match(line)
        if m:
            speed = _NV_SPEED.search(m.group(2))
            out[cur]["links"][int(m.group(1))] = float(speed.group(1)) if speed else None
    return out


def parse_nvlink_errors(text):
    """`nvidia-smi nvlink -e` -> {gpu_index: {link: {counter name: count}}} ("Link 0: Replay Errors: 0")."""
    out, cur = {}, None
    for line in (text or "").splitlines():
        m = _NV_GPU.match(line.strip())
        if m:
            cur = int(m.group(1))
            out[cur] = {}
            continue
        m = _NV_ERR.match(line)
        if m and cur is not None:
            out[cur].setdefault(int(m.group(1)), {})[m.group(2).strip()] = int(m.group(3))
    return out


def nvlink_bandwidth(status):
    """Per GPU the sum of its active links' speed (GB/s per direction, as nvidia-smi prints it)."""
    return {i: round(sum(v for v in info["links"].values() if v), 3) for i, info in status.items()}


def check_nvlink(gpus, status, errors=None, expected_links=0, node=None, failed=None):
    """Inactive links and error counters on GPUs that have NVLink.

    A link inactive on one GPU while active on others is a fault. A link inactive on every GPU
    of a node is warned, not failed: some SKUs have links unused by design (azurehpc-health-checks
    #162, H100 NVL: 12 of 18 links); expected_links makes it a requirement.
    """
    by_index = {g["index"]: g for g in gpus}
    if failed:
        return [C.skipped("gpu_nvlink", "nvidia-smi nvlink -s failed: NVLink not read (%s)" % failed, node,
                          {"category": "gpu_nvlink"})]
    if not status or not any(info["links"] or info["all_inactive"] for info in status.values()):
        return [C.skipped("gpu_nvlink", "no NVLink on these GPUs (nvidia-smi nvlink -s lists no link): PCIe only",
                          node, {"category": "gpu_nvlink"})]
    records = []
    link_ids = set()
    for info in status.values():
        link_ids |= set(info["links"])
    multi = len(status) > 1
    inactive_everywhere = {n for n in link_ids
                           if multi and all(info["links"].get(n, None) is None for info in status.values())}
    for idx in sorted(status):
        info = status[idx]
        g = by_index.get(idx, {"index": idx, "bus_id": None, "name": info["name"], "uuid": info["uuid"]})
        active = sorted(n for n, v in info["links"].items() if v)
        inactive = sorted(n for n, v in info["links"].items() if not v)
        if info["all_inactive"] and not active:
            records.append(_record(C.FAIL, "gpu_nvlink", g, "all NVLinks are inactive",
                                   "drain and reset the GPU (reboot on NVSwitch systems); check the fabric manager "
                                   "and the kernel log for Xid 74/145-150; reseat or RMA if it stays down",
                                   0, expected_links or None, node))
            continue
        if expected_links and len(active) < expected_links:
            records.append(_record(C.FAIL, "gpu_nvlink", g, "%d of %d NVLinks active (inactive: %s)"
                                   % (len(active), expected_links, ", ".join(map(str, inactive)) or "-"),
                                   "drain and reset the GPU (reboot on NVSwitch systems); if links stay down, "
                                   "inspect the NVLink bridge/baseboard, then RMA", len(active), expected_links, node))
            continue
        faulty = [n for n in inactive if n not in inactive_everywhere]
        if faulty:
            records.append(_record(C.FAIL, "gpu_nvlink", g, "NVLink(s) %s inactive while active elsewhere (%d active)"
                                   % (", ".join(map(str, faulty)), len(active)),
                                   "drain and reset the GPU (reboot on NVSwitch systems); if links stay down, "
                                   "inspect the NVLink bridge/baseboard, then RMA",
                                   len(active), len(active) + len(faulty), node))
        for link, counters in sorted(((errors or {}).get(idx) or {}).items()):
            bad = {k: v for k, v in counters.items() if v}
            if bad:
                records.append(_record(C.WARN, "gpu_nvlink", g, "NVLink %d error counters %s"
                                       % (link, ", ".join("%s=%d" % kv for kv in sorted(bad.items()))),
                                       "counters count since the driver loaded: if they grow between two reads, reset "
                                       "the GPU and inspect the link", bad, 0, node))
    if inactive_everywhere and not expected_links and not records:
        return [C.warned("gpu_nvlink", "NVLink(s) %s inactive on every GPU: unused by design on some SKUs, or a "
                         "baseboard fault" % ", ".join(map(str, sorted(inactive_everywhere))),
                         "set gpu_health_expected_nvlinks to the SKU's link count to make this a requirement",
                         node, {"category": "gpu_nvlink", "value": sorted(inactive_everywhere), "limit": None})]
    bw = nvlink_bandwidth(status)
    counts = sorted({sum(1 for v in info["links"].values() if v) for info in status.values()})
    return _summary("gpu_nvlink", records, "%d GPU(s) with NVLink, %s active link(s) each (%s GB/s per GPU)"
                    % (len(status), "/".join(map(str, counts)), ", ".join(sorted({str(v) for v in bw.values()}))),
                    node, {"value": bw, "limit": expected_links or None})


# ---------------------------------------------------------------- kernel log: Xid

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)\): (\d+),\s*(.*)$")
_FALLEN_SAME_LINE = re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)"
                               r"[: ].*fallen off the bus")
_FALLEN_HEAD = re.compile(r"NVRM: The NVIDIA GPU ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)")
_PID = re.compile(r"pid=([^,\s]+)(?:, name=([^,]+))?")


def parse_kernel_xids(text):
    """Kernel log text (dmesg or journalctl -k) -> [{xid, bus, message, line, pid, name}].

    Lines look like `NVRM: Xid (PCI:0000:2b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen
    off the bus.` (older drivers: `NVRM: Xid (0000:01:00): 3, ...`). "fallen off the bus" printed
    without an Xid (newer drivers split it over lines, see NVIDIA/NVSentinel#155) counts as Xid 79.
    """
    events = []
    lines = (text or "").splitlines()
    xid79 = set()
    pending_head = None
    for n, line in enumerate(lines):
        m = _XID.search(line)
        if m:
            bus = norm_bus_id(m.group(1))
            code = int(m.group(2))
            msg = m.group(3).strip()
            pid = _PID.search(msg)
            events.append({"xid": code, "bus": bus, "message": msg, "line": line.strip(),
                           "pid": pid.group(1).strip("'") if pid else None,
                           "name": (pid.group(2) or "").strip() or None if pid else None})
            if code == 79:
                xid79.add(bus)
            continue
        m = _FALLEN_HEAD.search(line)
        if m:
            pending_head = (norm_bus_id(m.group(1)), n)
            continue
        m = _FALLEN_SAME_LINE.search(line)
        bus = None
        if m:
            bus = norm_bus_id(m.group(1))
        elif "fallen off the bus" in line and pending_head and n - pending_head[1] <= 3:
            bus = pending_head[0]
        if bus:
            pending_head = None
            if bus[:-2] in {b[:-2] for b in xid79}:
                continue
            events.append({"xid": 79, "bus": bus, "message": "GPU has fallen off the bus (no Xid line)",
                           "line": line.strip(), "pid": None, "name": None})
            xid79.add(bus)
    return events


def _gpu_for_bus(gpus, bus):
    """The GPU whose bus id matches (Xid names domain:bus:device, without the function)."""
    for g in gpus:
        if g.get("bus_id") and g["bus_id"][:-2] == bus[:-2]:
            return g
    return None


def xid_meaning(code, message=""):
    """(meaning, status, fix) of an Xid. 144-150 are the NVLink5 (Blackwell) errors: the driver's
    message says Fatal or Nonfatal (leptonai/gpud#1160), which sets fail or warn."""
    if code in XID_CATALOG:
        return XID_CATALOG[code]
    if 144 <= code <= 150:
        fatal = re.search(r"\bFatal\b", message or "") is not None
        return ("NVLink error (NVLink5 %s)" % ("fatal" if fatal else "non-fatal"), C.FAIL if fatal else C.WARN,
                _RESET + " (reboot on NVSwitch systems); if it repeats on the same link, inspect the NVLink path, "
                "then RMA")
    return ("Xid %d (not in this catalog)" % code, C.WARN,
            "look it up in NVIDIA's Xid catalog (%s) and follow its resolution" % XID_CATALOG_URL)


def check_xids(gpus, events, source, node=None):
    """One record per (Xid, GPU): meaning and fix from XID_CATALOG, count, and the last line."""
    if not events:
        return [C.passed("gpu_xid", "no Xid in the kernel log since boot (%s)" % source, node,
                         {"category": "gpu_xid", "source": source})]
    groups = {}
    for e in events:
        groups.setdefault((e["xid"], e["bus"]), []).append(e)
    records = []
    for (code, bus), evs in sorted(groups.items()):
        g = _gpu_for_bus(gpus, bus) or {"index": "?", "bus_id": bus}
        meaning, status, fix = xid_meaning(code, evs[-1]["message"])
        records.append(C.check(
            "gpu_xid %d GPU%s" % (code, g["index"]), status,
            "%s: Xid %d x%d: %s; last: %s" % (label(g), code, len(evs), meaning, evs[-1]["message"][:160]),
            fix.replace("{index}", str(g["index"])), node,
            {"category": "gpu_xid", "device": device(g), "value": code, "limit": None, "count": len(evs),
             "last_line": evs[-1]["line"], "source": source}))
    return records


# ---------------------------------------------------------------- fabric manager (NVSwitch systems)

def fabric_manager_running(proc_root="/proc"):
    """True when a process named nv-fabricmanager runs (None when /proc cannot be read)."""
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        return None
    for pid in pids[:100000]:
        try:
            with open(os.path.join(proc_root, pid, "comm"), encoding="utf-8", errors="replace") as fh:
                if fh.read().strip() == "nv-fabricmanager":
                    return True
        except OSError:
            continue
    return False


def check_fabric(gpus, nvswitches=(), fm_running=None, in_container=False, node=None):
    """NVSwitch systems: every GPU's fabric state must be Completed (else CUDA init fails with 802).

    The driver reports the state from R550 on (`fabric/state`); older drivers, and single-GPU or
    non-NVSwitch systems, report N/A or Not Supported, and then the fabric manager process
    decides (not visible from a container: the host runs it).
    """
    fix = ("start the fabric manager: `sudo systemctl enable --now nvidia-fabricmanager` (its version must equal "
           "the driver's; B200/GB200 also need NVLSM), then check `nvidia-smi -q | grep -A2 Fabric`")
    states = [(g, g["fabric"]) for g in gpus if g["fabric"].get("state")]
    if not nvswitches and not states:
        return [C.skipped("gpu_fabric", "no NVSwitch on this node (no NVIDIA bridge-class PCI device, no fabric "
                          "state from the driver): no fabric manager needed", node, {"category": "gpu_fabric"})]
    records = []
    for g, f in states:
        if f["state"] != "Completed" or (f.get("status") and f["status"] != "Success"):
            records.append(_record(C.FAIL, "gpu_fabric", g,
                                   "fabric state %s (status %s): CUDA init fails with error 802 'system not yet "
                                   "initialized' until the GPU registers with the NVLink fabric"
                                   % (f["state"], f.get("status")), fix, f["state"], "Completed", node))
    if not states and nvswitches:
        if fm_running is False and not in_container:
            records.append(C.failed("gpu_fabric", "%d NVSwitch(es) on the PCI bus and nv-fabricmanager is not running: "
                                    "CUDA init fails with error 802" % len(nvswitches), fix, node,
                                    {"category": "gpu_fabric", "value": "not running", "limit": "running",
                                     "nvswitches": list(nvswitches)}))
        elif fm_running is not True:
            return [C.skipped("gpu_fabric", "%d NVSwitch(es) but the fabric manager cannot be seen from here%s and "
                              "the driver reports no fabric state" % (len(nvswitches), " (container)" if in_container
                                                                      else ""), node, {"category": "gpu_fabric"})]
    done = "fabric state Completed on %d GPU(s)" % len(states) if states else "nv-fabricmanager running"
    return _summary("gpu_fabric", records, "%s (%d NVSwitch(es))" % (done, len(nvswitches)), node)


# ---------------------------------------------------------------- dcgmi diag

_STATUS_WORDS = {"pass": C.PASS, "fail": C.FAIL, "warn": C.WARN, "warning": C.WARN, "skip": C.SKIP,
                 "not run": C.SKIP}


def _norm_status(text):
    return _STATUS_WORDS.get((text or "").strip().lower())


def _find_categories(obj, depth=0):
    if depth > 6:
        return None
    if isinstance(obj, dict):
        if isinstance(obj.get("test_categories"), list):
            return obj["test_categories"]
        for value in obj.values():
            found = _find_categories(value, depth + 1)
            if found is not None:
                return found
    return None


def _warning_texts(items):
    out = []
    for w in items or []:
        if isinstance(w, dict):
            text = w.get("warning") or w.get("message") or ""
            if w.get("error_id") is not None:
                text = "%s (error %s)" % (text, w["error_id"])
            out.append(text.strip())
        elif w:
            out.append(str(w).strip())
    return out


def _parse_dcgmi_json(doc):
    results = []
    for cat in _find_categories(doc) or []:
        for test in cat.get("tests") or []:
            for res in test.get("results") or [{"status": test.get("status")}]:
                gpu = res.get("gpu_id", res.get("entity_id"))
                results.append({"category": cat.get("category"), "test": test.get("name"),
                                "gpu": None if gpu is None else str(gpu),
                                "status": _norm_status(res.get("status")),
                                "warnings": _warning_texts(res.get("warnings")),
                                "info": _warning_texts(res.get("info") if isinstance(res.get("info"), list)
                                                       else [res.get("info")] if res.get("info") else [])})
    return results


_ROW = re.compile(r"^\|\s?(.*?)\s*\|\s?(.*?)\s*\|\s*$")
_CAT = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+")
_GPU_STATUS = re.compile(r"^(Pass|Fail|Warn|Skip)\s*-\s*GPUs?:\s*([\d, ]+)$", re.I)
_GPU_PREFIX = re.compile(r"^GPU\s*(\d+):\s*(Pass|Fail|Warn|Skip)\b", re.I)


def _parse_dcgmi_table(text):
    """The table `dcgmi diag` prints (DCGM 3.x rows per test; 4.x adds `GPU0: Pass` rows)."""
    results, category, last = [], None, None
    for line in text.splitlines():
        m = _CAT.match(line)
        if m:
            category = m.group(1).strip()
            continue
        m = _ROW.match(line)
        if not m or line.startswith("+="):
            continue
        name, value = m.group(1).strip(), m.group(2).strip()
        if name in ("Diagnostic",) or category in (None, "Metadata"):
            continue
        if name in ("Warning", "Info", "Error") or (not name and last and not (
                _GPU_STATUS.match(value) or _GPU_PREFIX.match(value) or _norm_status(value))):
            if last is not None and value:
                if name:
                    last["_notes"].append([name, value])
                elif last["_notes"]:
                    last["_notes"][-1][1] += value
            continue
        gm, gp = _GPU_STATUS.match(value), _GPU_PREFIX.match(value)
        if gm or gp:
            test = name or (last["test"] if last else None)
            gpus = [x.strip() for x in gm.group(2).split(",") if x.strip()] if gm else [gp.group(1)]
            status = _norm_status(gm.group(1) if gm else gp.group(2))
            for gid in gpus:
                last = {"category": category, "test": test, "gpu": gid, "status": status, "_notes": []}
                results.append(last)
            continue
        status = _norm_status(value)
        if name and status:
            last = {"category": category, "test": name, "gpu": None, "status": status, "_notes": []}
            results.append(last)
    for r in results:
        notes = r.pop("_notes")
        r["warnings"] = [v for k, v in notes if k in ("Warning", "Error")]
        r["info"] = [v for k, v in notes if k == "Info"]
    # a per-test summary row followed by per-GPU rows: keep the per-GPU ones
    tested = {(r["category"], r["test"]) for r in results if r["gpu"] is not None}
    return [r for r in results if r["gpu"] is not None or (r["category"], r["test"]) not in tested]


def parse_dcgmi_diag(text):
    """`dcgmi diag -r N -j` JSON (or, failing that, its table) -> {"format", "results": [...]}.

    Each result: category, test, gpu (id string or None), status (pass|fail|warn|skip),
    warnings [text], info [text].
    """
    text = text or ""
    start = text.find("{")
    if start >= 0:
        try:
            doc = json.loads(text[start:text.rfind("}") + 1])
        except ValueError:
            doc = None
        if doc is not None:
            return {"format": "json", "results": _parse_dcgmi_json(doc)}
    return {"format": "table", "results": _parse_dcgmi_table(text)}


def check_dcgmi(parsed, gpus=(), node=None):
    """dcgmi diag failures and warnings carried over; skipped tests are warned (DCGM#55: a diag that
    skips its tests reports no failure). A pass here does not overrule our own checks (DCGM#198:
    the diag passed with every NVLink down)."""
    by_id = {str(g["index"]): g for g in gpus}
    records = []
    results = parsed.get("results") or []
    if not results:
        return [C.warned("gpu_dcgm_diag", "dcgmi diag printed no result", "run `dcgmi diag -r 1` by hand and read "
                         "/var/log/nvidia-dcgm/nvvs.log", node, {"category": "gpu_dcgm_diag"})]
    skipped = []
    for r in results:
        g = by_id.get(r["gpu"]) if r["gpu"] is not None else None
        where = label(g) if g else ("GPU%s" % r["gpu"] if r["gpu"] is not None else "all GPUs")
        notes = "; ".join(r["warnings"] or r["info"])[:300]
        if r["status"] in (C.FAIL, C.WARN):
            name = "gpu_dcgm_diag %s" % r["test"] + (" GPU%s" % r["gpu"] if r["gpu"] is not None else "")
            records.append(C.check(
                name, r["status"], "%s: dcgmi diag %s/%s: %s%s" % (where, r["category"], r["test"], r["status"],
                                                                   (": " + notes) if notes else ""),
                "follow the DCGM message; rerun `dcgmi diag -r 2` after the fix", node,
                {"category": "gpu_dcgm_diag", "device": device(g) if g else {"index": r["gpu"]},
                 "value": r["status"], "limit": C.PASS, "test": r["test"]}))
        elif r["status"] == C.SKIP:
            skipped.append("%s/%s" % (r["test"], r["gpu"]) if r["gpu"] is not None else r["test"])
    if skipped:
        records.append(C.warned("gpu_dcgm_diag", "dcgmi diag skipped %d test(s): %s" % (len(skipped), ", ".join(skipped[:8])),
                                "a skipped test proves nothing: check nv-hostengine's log and the diag's "
                                "is_allowed/SKU settings (NVIDIA/DCGM#55)", node,
                                {"category": "gpu_dcgm_diag", "value": skipped, "limit": []}))
    return _summary("gpu_dcgm_diag", records, "dcgmi diag: %d result(s), all pass" % len(results), node)


# ---------------------------------------------------------------- everything

def skipped_all(reason, node=None, categories=CATEGORIES):
    """Every GPU check as a skip with the reason (no GPU, no driver): never a pass."""
    return [C.skipped(cat, reason, node, {"category": cat}) for cat in categories]


def no_gpu_checks(reason, node=None):
    """A node with no NVIDIA GPU read and none on the PCI bus: every check a skip saying so
    (gpu_health_info's records, and provision verify's in site.yml from the cuda_toolkit stage's reading)."""
    return skipped_all("no NVIDIA GPU (%s; none on the PCI bus)" % reason, node)


def health_checks(smi, nvlink=None, nvlink_errors=None, xid_events=None, xid_source=None, xid_skip=None,
                  pci=None, fm_running=None, in_container=False, dcgmi=None, dcgmi_skip=None, expected_gpus=0,
                  require_ecc=True, allow_mig=False, busy_util=10, loaded=False, expected_nvlinks=0, node=None,
                  nvlink_failed=None):
    """All GPU checks from what was read. smi: parse_smi_health(); pci: pci_nvidia_devices();
    nvlink_failed: why `nvidia-smi nvlink -s` gave nothing (None when it ran)."""
    gpus = smi["gpus"]
    pci = pci or {"gpus": [], "nvswitches": []}
    out = check_gpu_count(gpus, expected_gpus, pci.get("gpus"), node)
    out += check_ecc(gpus, require_ecc, node)
    out += check_remap(gpus, node)
    out += check_pcie(gpus, busy_util, loaded, node)
    out += check_clocks(gpus, node)
    out += check_persistence(gpus, node)
    out += check_mig(gpus, allow_mig, node)
    out += check_nvlink(gpus, nvlink or {}, nvlink_errors, expected_nvlinks, node, nvlink_failed)
    if xid_events is None:
        out.append(C.skipped("gpu_xid", xid_skip or "kernel log not read", node, {"category": "gpu_xid"}))
    else:
        out += check_xids(gpus, xid_events, xid_source or "kernel log", node)
    out += check_fabric(gpus, pci.get("nvswitches") or (), fm_running, in_container, node)
    if dcgmi is None:
        out.append(C.skipped("gpu_dcgm_diag", dcgmi_skip or "not asked (gpu_health_dcgm_diag: false)", node,
                             {"category": "gpu_dcgm_diag"}))
    else:
        out += check_dcgmi(dcgmi, gpus, node)
    return out
