#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_health_info
short_description: Read-only NVIDIA GPU health checks (count, ECC, row remapping, PCIe, NVLink, clocks, Xid, fabric manager, DCGM)
description:
  - Reads C(nvidia-smi -q -x), C(nvidia-smi nvlink -s) and C(-e), the kernel log (C(dmesg), else C(journalctl -k -b)),
    the PCI devices in sysfs, and optionally C(dcgmi diag -r N -j), and returns one check record per finding
    (C(check), C(status) pass/fail/warn/skip, C(detail), C(fix), C(node), C(data) with C(category), C(device)
    (GPU index and PCI bus id), C(value) and C(limit)).
  - "Checks (the C(data.category) of each record): gpu_count, gpu_ecc, gpu_remap, gpu_pcie_width, gpu_pcie_gen,
    gpu_clocks, gpu_persistence, gpu_mig, gpu_nvlink, gpu_xid, gpu_fabric, gpu_dcgm_diag. A category with no
    finding is one C(pass) record; a finding on a device is one record named C(<category> GPU<index>)."
  - On a node with no NVIDIA GPU every check is a C(skip) with the reason, never a pass. A GPU on the PCI bus that
    the driver cannot see is a C(gpu_count) failure, not a skip.
  - The PCIe generation is judged only under load (idle GPUs lower it); without O(load_command) an idle GPU's lower
    generation is a C(skip) saying so. The width is always judged.
  - Never writes anything. Every command has a timeout. Thresholds and sources are in docs/health-checks.md.
version_added: "0.2.0"
author: provision developers (!UNKNOWN)
options:
  node:
    description: Name put in every record (the inventory hostname); empty leaves it to the caller.
    type: str
    default: ""
  expected_gpus:
    description: GPUs this node must have; 0 compares nothing here (the cluster-level comparison is
      C(gpu_health.cluster_gpu_counts)). GPUs on the PCI bus that nvidia-smi does not list fail regardless.
    type: int
    default: 0
  require_ecc:
    description: ECC mode disabled on a GPU that supports it fails (C(false) makes it a warning).
    type: bool
    default: true
  allow_mig:
    description: MIG mode enabled is allowed (otherwise it fails).
    type: bool
    default: false
  busy_util:
    description: GPU utilization (%) from which a GPU counts as busy, so a PCIe generation below the maximum is judged.
    type: int
    default: 10
  expected_nvlinks:
    description: Active NVLinks each GPU must have; 0 derives it from the node (a link down on one GPU but up
      on others fails; a link down on every GPU warns).
    type: int
    default: 0
  kernel_log:
    description: Read the kernel log for Xid errors.
    type: bool
    default: true
  dcgm_diag:
    description: Run C(dcgmi diag -r O(dcgm_level) -j) when C(dcgmi) exists (needs nv-hostengine running).
    type: bool
    default: false
  dcgm_level:
    description: The C(dcgmi diag) run level (1 is quick, about a minute; 3 and 4 take long).
    type: int
    choices: [1, 2, 3, 4]
    default: 1
  dcgm_timeout:
    description: Seconds C(dcgmi diag) may take.
    type: int
    default: 300
  load_command:
    description:
      - A command (argv list) that loads the GPUs, started before C(nvidia-smi -q -x) is read and stopped after,
        so the PCIe generation is read under load (for example C([gpu_burn, "30"])). Empty reads the GPUs as they are.
      - Not run in check mode.
    type: list
    elements: str
    default: []
  load_seconds:
    description: Seconds the load runs before the read (at most 60).
    type: int
    default: 10
  timeout:
    description: Seconds each nvidia-smi, dmesg or journalctl call may take (a wedged driver hangs nvidia-smi).
    type: int
    default: 30
  root:
    description: Directory that holds the C(sys) and C(proc) trees read (tests point it at a copy). Commands
      still run on the node.
    type: path
    default: /
notes:
  - The kernel log is read without root where C(kernel.dmesg_restrict=0) or the user may read the journal (groups
    C(adm)/C(systemd-journal)); otherwise the Xid check is a skip saying so (run with C(become=true)).
seealso:
  - module: provision.cluster.gpu_facts
  - module: provision.cluster.fabric_health_info
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.INFO_MODULE]
attributes:
  check_mode:
    details: Reads the same in check mode, except that O(load_command) is not run.
"""

EXAMPLES = r"""
- name: GPU health of every node
  provision.cluster.gpu_health_info:
    node: "{{ inventory_hostname }}"
    expected_gpus: 8
  register: gpu_health

- name: With DCGM's quick diagnostic, the PCIe generation read under a short load
  provision.cluster.gpu_health_info:
    node: "{{ inventory_hostname }}"
    dcgm_diag: true
    load_command: [/usr/local/bin/gpu_burn, "20"]
    load_seconds: 10
  become: true

- name: Fail on any failed check
  ansible.builtin.assert:
    that: gpu_health.checks | selectattr('status', 'equalto', 'fail') | list | length == 0
    fail_msg: "{{ gpu_health.checks | selectattr('status', 'equalto', 'fail') | map(attribute='detail') | list }}"
"""

RETURN = r"""
checks:
  description: One record per finding, and one C(pass) per category without finding; all C(skip) without a GPU.
  returned: always
  type: list
  elements: dict
  contains:
    check: {description: "The category, or C(<category> GPU<index>) for a device (C(gpu_xid <code> GPU<index>) for Xids)", type: str}
    status: {description: "pass, fail, warn or skip.", type: str}
    detail: {description: "One line naming the device (GPU index and bus id), the value and the limit.", type: str}
    fix: {description: "One line: what to do (empty on pass/skip).", type: str}
    node: {description: O(node) when given., type: str}
    data:
      description: C(category), C(device) (index, bus_id, name, uuid), C(value), C(limit), and per check extras.
      type: dict
  sample:
    - check: gpu_pcie_width GPU0
      status: fail
      detail: "GPU0 0000:00:06.0: PCIe link x8, the GPU and slot support x16: host<->GPU bandwidth is cut by 50%"
      fix: reseat the GPU (or its riser/cable), check the slot and BIOS lane settings
      node: node1
      data: {category: gpu_pcie_width, value: x8, limit: x16, device: {index: 0, bus_id: "0000:00:06.0"}}
ansible_facts:
  description: RV(gpu_health) again, as the host fact C(gpu_health) (the all-reduce smoke test computes the bandwidth the
    cluster should reach from it).
  returned: always
  type: dict
gpu_health:
  description: What was read.
  returned: always
  type: dict
  contains:
    gpu_count: {description: GPUs nvidia-smi lists (0 without driver)., type: int}
    reason: {description: "Why nothing was read (no GPU, no driver, nvidia-smi failed); empty otherwise.", type: str}
    driver_version: {description: NVIDIA driver version., type: str}
    gpus: {description: "Per GPU the parsed health fields (see gpu_health.parse_smi_health).", type: list, elements: dict}
    nvlink: {description: "Per GPU index: name, uuid, links (link -> GB/s, null when inactive), all_inactive.", type: dict}
    nvlink_errors: {description: "Per GPU index, per link: error counters (nvidia-smi nvlink -e).", type: dict}
    xids: {description: "Xid events of the kernel log since boot (xid, bus, message, line).", type: list, elements: dict}
    kernel_log: {description: "Where the kernel log came from (dmesg, journalctl -k) or why it was not read.", type: str}
    pci: {description: "NVIDIA GPUs and NVSwitches on the PCI bus (bus ids).", type: dict}
    fabric_manager_running: {description: "nv-fabricmanager seen running (null when it cannot be seen).", type: bool}
    in_container: {description: This node is a container., type: bool}
    loaded: {description: The GPUs were read under O(load_command)., type: bool}
    dcgm: {description: "Parsed C(dcgmi diag) results (format, results), or the reason it did not run.", type: dict}
"""

import os
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C
from ansible_collections.provision.cluster.plugins.module_utils.gpu import gpu_health as H
from ansible_collections.provision.cluster.plugins.module_utils.common import node_facts
from ansible_collections.provision.cluster.plugins.module_utils.common.files import read_attr
from ansible_collections.provision.cluster.plugins.module_utils.common.procs import first_line, run_bounded
from ansible_collections.provision.cluster.plugins.module_utils.common.spawn import start_process

NVIDIA_BIN_DIRS = ["/usr/bin", "/usr/local/nvidia/bin", "/usr/local/bin", "/usr/sbin", "/sbin", "/bin"]
MAX_LOAD_SECONDS = 60


def read_kernel_log(module, root, timeout):
    """(text, source, reason): dmesg where the kernel lets this user read it, else journalctl -k."""
    restrict = read_attr(os.path.join(root, "proc", "sys", "kernel", "dmesg_restrict"))
    tried = []
    dmesg = module.get_bin_path("dmesg")
    if dmesg and (os.geteuid() == 0 or restrict in ("0", None)):
        rc, out, err = run_bounded([dmesg], timeout)
        if rc == 0 and out.strip():
            return out, "dmesg", ""
        tried.append("dmesg: %s" % (first_line(err, out) or "rc=%d" % rc))
    elif dmesg:
        tried.append("dmesg: kernel.dmesg_restrict=%s and uid %d" % (restrict, os.geteuid()))
    journalctl = module.get_bin_path("journalctl")
    if journalctl:
        rc, out, err = run_bounded([journalctl, "-k", "-b", "--no-pager", "-q", "-o", "short"], timeout)
        if rc == 0 and out.strip() and "No entries" not in out[:200]:
            return out, "journalctl -k", ""
        tried.append("journalctl -k: %s" % (first_line(err, out) or "rc=%d, no entries" % rc))
    else:
        tried.append("no journalctl")
    return None, "", ("kernel log not readable (%s): run with become: true, or add the user to the adm/"
                      "systemd-journal group, or set kernel.dmesg_restrict=0" % "; ".join(tried))


def run_load(argv, seconds):
    """Start the load command; return the process (None when it could not start)."""
    try:
        proc = start_process(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
    deadline = time.monotonic() + max(0, min(seconds, MAX_LOAD_SECONDS))
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    return proc


def stop_load(proc):
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def collect(module):
    p = module.params
    root, node, timeout = p["root"], p["node"] or None, p["timeout"]
    sys_root, proc_root = os.path.join(root, "sys"), os.path.join(root, "proc")
    facts = {"gpu_count": 0, "reason": "", "driver_version": "", "gpus": [], "nvlink": {}, "nvlink_errors": {},
             "xids": [], "kernel_log": "", "pci": H.pci_nvidia_devices(sys_root), "fabric_manager_running": None,
             "in_container": False, "loaded": False, "dcgm": {}}
    try:
        facts["in_container"] = bool(node_facts.detect_container(node_facts.collect_snapshot(root=root))["container"])
    except Exception:  # a snapshot that cannot be read leaves the node counted as not a container
        facts["in_container"] = False
    smi = module.get_bin_path("nvidia-smi", opt_dirs=NVIDIA_BIN_DIRS)
    on_bus = facts["pci"]["gpus"]
    if not smi:
        facts["reason"] = "nvidia-smi not found: no NVIDIA driver on this node"
        return facts, _no_read(facts, on_bus, node)
    load = None
    if p["load_command"] and not module.check_mode:
        load = run_load(p["load_command"], p["load_seconds"])
    try:
        rc, out, err = run_bounded([smi, "-q", "-x"], timeout)
        facts["loaded"] = bool(load is not None and load.poll() is None)
    finally:
        stop_load(load)
    if rc != 0:
        facts["reason"] = "nvidia-smi -q -x failed (rc=%d): %s" % (rc, first_line(out, err))
        return facts, _no_read(facts, on_bus, node)
    try:
        parsed = H.parse_smi_health(out)
    except Exception as exc:  # an unreadable XML is a reason, not a traceback
        facts["reason"] = "nvidia-smi -q -x output unreadable: %s" % exc
        return facts, _no_read(facts, on_bus, node)
    facts.update(gpu_count=len(parsed["gpus"]), driver_version=parsed["driver_version"] or "", gpus=parsed["gpus"])
    if not parsed["gpus"]:
        facts["reason"] = "nvidia-smi lists no GPU"
        return facts, _no_read(facts, on_bus, node)
    rc, out, _err = run_bounded([smi, "nvlink", "-s"], timeout)
    nvlink_failed = None if rc == 0 else "rc=%d: %s" % (rc, first_line(_err, out))
    facts["nvlink"] = H.parse_nvlink_status(out) if rc == 0 else {}
    if any(info["links"] for info in facts["nvlink"].values()):
        rc, out, _err = run_bounded([smi, "nvlink", "-e"], timeout)
        facts["nvlink_errors"] = H.parse_nvlink_errors(out) if rc == 0 else {}
    xid_events, xid_skip = None, None
    if p["kernel_log"]:
        text, source, xid_skip = read_kernel_log(module, root, timeout)
        facts["kernel_log"] = source or xid_skip
        if text is not None:
            xid_events = H.parse_kernel_xids(text)
            facts["xids"] = xid_events
    else:
        xid_skip = "not asked (gpu_health_kernel_log: false)"
        facts["kernel_log"] = xid_skip
    facts["fabric_manager_running"] = H.fabric_manager_running(proc_root)
    dcgmi, dcgmi_skip = None, None
    if p["dcgm_diag"]:
        dcgmi_bin = module.get_bin_path("dcgmi", opt_dirs=NVIDIA_BIN_DIRS)
        if not dcgmi_bin:
            dcgmi_skip = "dcgmi not installed (datacenter-gpu-manager)"
        else:
            rc, out, err = run_bounded([dcgmi_bin, "diag", "-r", str(p["dcgm_level"]), "-j"], p["dcgm_timeout"])
            parsed_diag = H.parse_dcgmi_diag(out)
            if parsed_diag["results"]:
                dcgmi = parsed_diag
            else:
                dcgmi_skip = "dcgmi diag gave no result (rc=%d): %s" % (rc, first_line(err, out) or "no output")
        facts["dcgm"] = dcgmi or {"reason": dcgmi_skip}
    else:
        facts["dcgm"] = {"reason": "not asked"}
    records = H.health_checks(parsed, facts["nvlink"], facts["nvlink_errors"], xid_events, facts["kernel_log"],
                              xid_skip, facts["pci"], facts["fabric_manager_running"], facts["in_container"], dcgmi,
                              dcgmi_skip, p["expected_gpus"], p["require_ecc"], p["allow_mig"], p["busy_util"],
                              facts["loaded"], p["expected_nvlinks"], node, nvlink_failed)
    return facts, records


def _no_read(facts, on_bus, node):
    """Nothing read from the driver: all skips, unless GPUs sit on the PCI bus (then the count fails)."""
    if not on_bus:
        return H.no_gpu_checks(facts["reason"], node)
    fail = C.failed("gpu_count", "%d NVIDIA GPU(s) on the PCI bus (%s) but %s" % (
        len(on_bus), ", ".join(on_bus), facts["reason"]),
        "install/load the NVIDIA driver (`nvidia-smi` must list the GPUs); if it hangs or errors, check the kernel "
        "log for Xid 79 and reboot", node, {"category": "gpu_count", "value": 0, "limit": len(on_bus),
                                            "pci_gpus": on_bus})
    rest = [c for c in H.CATEGORIES if c != "gpu_count"]
    return [fail] + H.skipped_all("not read: %s" % facts["reason"], node, rest)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", default=""),
            expected_gpus=dict(type="int", default=0),
            require_ecc=dict(type="bool", default=True),
            allow_mig=dict(type="bool", default=False),
            busy_util=dict(type="int", default=10),
            expected_nvlinks=dict(type="int", default=0),
            kernel_log=dict(type="bool", default=True),
            dcgm_diag=dict(type="bool", default=False),
            dcgm_level=dict(type="int", default=1, choices=[1, 2, 3, 4]),
            dcgm_timeout=dict(type="int", default=300),
            load_command=dict(type="list", elements="str", default=[]),
            load_seconds=dict(type="int", default=10),
            timeout=dict(type="int", default=30),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    facts, records = collect(module)
    module.exit_json(changed=False, checks=records, gpu_health=facts, ansible_facts={"gpu_health": facts})


if __name__ == "__main__":
    main()
