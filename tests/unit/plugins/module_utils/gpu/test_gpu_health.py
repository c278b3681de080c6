"""GPU health: parsers on real captures (the H100 node, outputs users pasted in public issues, see
tests/fixtures/health/README.md) and the decisions, each failure naming device, value, limit and fix.
The gpu_health_info module runs in-process with stand-in tools that print those captures."""

from __future__ import annotations

import json
import os
import shutil
import sys
import xml.etree.ElementTree as ET

import pytest
import helpers
from helpers import FIXTURES, REPO

from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C
from ansible_collections.provision.cluster.plugins.module_utils.gpu import gpu_health as H

H100_XML = FIXTURES / "h100-node" / "nvidia-smi-q.xml"
HEALTH = REPO / "tests" / "fixtures" / "health"
EDITS = json.loads((HEALTH / "smi-edits.json").read_text())
CAT = shutil.which("cat")


def edited_xml(name):
    """The real H100 capture with the documented edits of smi-edits.json[name] applied (each
    edit first checks the captured value, so the README and the capture cannot drift apart)."""
    root = ET.fromstring(H100_XML.read_text())
    gpu = root.find("gpu")
    for path, before, after in EDITS[name]:
        el = gpu.find(path)
        assert el is not None, path
        assert (el.text or "").strip() == before, (path, el.text)
        el.text = after
    return ET.tostring(root, encoding="unicode")


def gpus_of(name=None):
    return H.parse_smi_health(edited_xml(name) if name else H100_XML.read_text())["gpus"]


def only(records, status=None):
    """The records not passing (or of one status)."""
    return [r for r in records if (r["status"] == status if status else r["status"] != C.PASS)]


def assert_names_device(rec, value, limit):
    assert rec["data"]["device"]["bus_id"] == "0000:00:06.0" and rec["data"]["device"]["index"] == 0
    assert rec["data"]["value"] == value and rec["data"]["limit"] == limit
    assert "GPU0 0000:00:06.0" in rec["detail"] and rec["fix"]
    assert rec["node"] == "n1"


# ---------------------------------------------------------------- the real healthy capture

def test_real_capture_parses():
    smi = H.parse_smi_health(H100_XML.read_text())
    assert smi["driver_version"] == "580.159.04" and smi["attached_gpus"] == 1
    (g,) = smi["gpus"]
    assert g["bus_id"] == "0000:00:06.0" and g["name"] == "NVIDIA H100 80GB HBM3"
    assert g["pcie"] == {"gen_max": 5, "gen_current": 5, "width_max": 16, "width_current": 16}
    assert g["ecc"]["volatile"] == {"sram_uncorrectable_parity": 0, "sram_uncorrectable_secded": 0, "dram_uncorrectable": 0}
    assert g["remap"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert g["retired"] == {"single": None, "double": None, "pending": None}   # N/A on Hopper (row remapping instead)
    assert g["clock_reasons"]["gpu_idle"] is True and not g["clock_reasons"]["hw_slowdown"]
    assert g["util_gpu"] == 0 and g["fabric"] == {"state": None, "status": None}
    assert (g["persistence_mode"], g["mig_current"], g["ecc_current"]) == ("Enabled", "Disabled", "Enabled")


def test_real_capture_is_healthy_and_what_cannot_apply_is_skipped():
    smi = H.parse_smi_health(H100_XML.read_text())
    recs = H.health_checks(smi, pci={"gpus": ["0000:00:06.0"], "nvswitches": []}, xid_events=[], xid_source="dmesg",
                           node="n1")
    by = {r["check"]: r for r in recs}
    assert set(by) == set(H.CATEGORIES)
    assert [r["check"] for r in recs if r["status"] == C.SKIP] == ["gpu_nvlink", "gpu_fabric", "gpu_dcgm_diag"]
    assert not only(recs, C.FAIL) and not only(recs, C.WARN)
    assert "PCIe only" in by["gpu_nvlink"]["detail"] and "no NVSwitch" in by["gpu_fabric"]["detail"]


def test_no_gpu_is_all_skips_never_a_pass():
    recs = H.skipped_all("no NVIDIA GPU (nvidia-smi not found; none on the PCI bus)", "n1")
    assert {r["status"] for r in recs} == {C.SKIP}
    assert [r["check"] for r in recs] == list(H.CATEGORIES)
    assert all("no NVIDIA GPU" in r["detail"] and r["node"] == "n1" for r in recs)


# ---------------------------------------------------------------- count

def test_count_below_expected_and_gpu_on_bus_not_listed():
    gpus = gpus_of()
    (rec,) = H.check_gpu_count(gpus, expected=8, node="n1")
    assert rec["status"] == C.FAIL and rec["data"]["value"] == 1 and rec["data"]["limit"] == 8
    assert "expected 8" in rec["detail"] and "Xid 79" in rec["fix"]
    # a second NVIDIA 3D controller in sysfs that nvidia-smi does not list (constructed bus id)
    recs = H.check_gpu_count(gpus, 0, ["0000:00:06.0", "0000:00:07.0"], node="n1")
    (missing,) = only(recs)
    assert missing["check"] == "gpu_count 0000:00:07.0" and "fallen off the bus" in missing["detail"]
    assert missing["data"]["device"] == {"bus_id": "0000:00:07.0"}


def test_pci_devices_from_sysfs(tmp_path):
    base = tmp_path / "bus" / "pci" / "devices"
    for bdf, vendor, klass in (("0000:00:06.0", "0x10de", "0x030200"), ("0000:05:00.0", "0x10de", "0x068000"),
                               ("0000:00:03.0", "0x1af4", "0x020000")):
        (base / bdf).mkdir(parents=True)
        (base / bdf / "vendor").write_text(vendor + "\n")
        (base / bdf / "class").write_text(klass + "\n")
    assert H.pci_nvidia_devices(str(tmp_path)) == {"gpus": ["0000:00:06.0"], "nvswitches": ["0000:05:00.0"]}
    assert H.pci_nvidia_devices(str(tmp_path / "absent")) == {"gpus": [], "nvswitches": []}


def test_cluster_gpu_counts_names_the_node_with_a_gpu_missing():
    recs = H.cluster_gpu_counts({"node1": 8, "node2": 7, "node3": 8})
    assert [(r["node"], r["status"]) for r in recs] == [("node1", "pass"), ("node2", "fail"), ("node3", "pass")]
    assert "7 GPU(s), 8 as on node1" in recs[1]["detail"]
    assert H.cluster_gpu_counts({"a": 8, "b": 8}, expected=4)[0]["status"] == C.FAIL
    assert {r["status"] for r in H.cluster_gpu_counts({"a": 0, "b": 0})} == {C.SKIP}


# ---------------------------------------------------------------- ECC and memory repair

def test_volatile_uncorrectable_ecc_fails():
    (rec,) = only(H.check_ecc(gpus_of("ecc-volatile-dram"), node="n1"))
    assert rec["status"] == C.FAIL and rec["check"] == "gpu_ecc GPU0"
    assert_names_device(rec, 2, 0)
    assert "dram_uncorrectable=2" in rec["detail"] and "reset the GPU" in rec["fix"]


def test_aggregate_only_dram_warns_and_sram_fails():
    (rec,) = only(H.check_ecc(gpus_of("ecc-aggregate-dram-only"), node="n1"))
    assert rec["status"] == C.WARN and "lifetime" in rec["detail"]
    (rec,) = only(H.check_ecc(gpus_of("ecc-aggregate-sram"), node="n1"))
    assert rec["status"] == C.FAIL and "SRAM" in rec["detail"] and "NHC2019" in rec["fix"]


def test_ecc_mode_disabled():
    (rec,) = only(H.check_ecc(gpus_of("ecc-disabled"), node="n1"))
    assert rec["status"] == C.FAIL
    assert_names_device(rec, "Disabled", "Enabled")
    assert "nvidia-smi -i 0 -e 1" in rec["fix"]
    assert only(H.check_ecc(gpus_of("ecc-disabled"), require_ecc=False))[0]["status"] == C.WARN


def test_remapped_rows_pending_and_failure():
    (rec,) = only(H.check_remap(gpus_of("remap-pending"), node="n1"))
    assert rec["status"] == C.FAIL and "4 uncorrectable row(s)" in rec["detail"]
    assert_names_device(rec, "Yes", "No")
    (rec,) = only(H.check_remap(gpus_of("remap-failure"), node="n1"))
    assert rec["status"] == C.FAIL and "RMA" in rec["fix"]


# ---------------------------------------------------------------- PCIe

def test_pcie_width_loss_fails_even_when_idle():
    recs = H.check_pcie(gpus_of("pcie-width-x8"), node="n1")
    (rec,) = only(recs)
    assert rec["check"] == "gpu_pcie_width GPU0" and rec["status"] == C.FAIL
    assert_names_device(rec, "x8", "x16")
    assert "50%" in rec["detail"]


def test_pcie_gen_drop_on_an_idle_gpu_is_not_judged():
    recs = H.check_pcie(gpus_of("pcie-gen1-idle"), node="n1")
    assert not only(recs, C.FAIL)
    (skip,) = only(recs, C.SKIP)
    assert skip["check"] == "gpu_pcie_gen GPU0" and "idle" in skip["detail"]
    assert skip["data"]["value"] == "Gen1" and skip["data"]["limit"] == "Gen5"


def test_pcie_gen_drop_under_load_fails():
    (rec,) = only(H.check_pcie(gpus_of("pcie-gen3-busy"), node="n1"))
    assert rec["status"] == C.FAIL and "under load (utilization 100%)" in rec["detail"]
    assert_names_device(rec, "Gen3", "Gen5")
    # the idle capture read while the module ran a load command: judged
    (rec,) = only(H.check_pcie(gpus_of("pcie-gen1-idle"), loaded=True, node="n1"))
    assert rec["status"] == C.FAIL and rec["data"]["value"] == "Gen1"


# ---------------------------------------------------------------- clocks, persistence, MIG

def test_hardware_slowdown_and_power_brake_fail_sw_power_cap_does_not():
    (rec,) = only(H.check_clocks(gpus_of("clocks-hw-power-brake"), node="n1"))
    assert rec["status"] == C.FAIL and "HW Power Brake" in rec["detail"] and "HW Slowdown" in rec["detail"]
    assert rec["data"]["value"] == ["hw_slowdown", "hw_power_brake_slowdown"]
    assert not only(H.check_clocks(gpus_of("clocks-sw-power-cap")))


def test_persistence_off_warns_mig_enabled_fails():
    (rec,) = only(H.check_persistence(gpus_of("persistence-off"), node="n1"))
    assert rec["status"] == C.WARN and "nvidia-persistenced" in rec["fix"]
    (rec,) = only(H.check_mig(gpus_of("mig-enabled"), node="n1"))
    assert rec["status"] == C.FAIL and "-mig 0" in rec["fix"]
    assert_names_device(rec, "Enabled", "Disabled")
    assert not only(H.check_mig(gpus_of("mig-enabled"), allow_mig=True))


# ---------------------------------------------------------------- fabric manager

def test_fabric_state_in_progress_fails_with_802():
    (rec,) = only(H.check_fabric(gpus_of("fabric-in-progress"), ["0000:05:00.0"], node="n1"))
    assert rec["status"] == C.FAIL and "802" in rec["detail"] and "nvidia-fabricmanager" in rec["fix"]
    assert_names_device(rec, "In Progress", "Completed")
    (ok,) = H.check_fabric(gpus_of("fabric-completed"), ["0000:05:00.0"])
    assert ok["status"] == C.PASS and "Completed" in ok["detail"]


def test_fabric_manager_process_decides_without_fabric_state(tmp_path):
    gpus = gpus_of()   # driver reports N/A
    (rec,) = H.check_fabric(gpus, ["0000:05:00.0"], fm_running=False, node="n1")
    assert rec["status"] == C.FAIL and "nv-fabricmanager is not running" in rec["detail"]
    assert H.check_fabric(gpus, ["0000:05:00.0"], fm_running=True)[0]["status"] == C.PASS
    assert H.check_fabric(gpus, ["0000:05:00.0"], fm_running=False, in_container=True)[0]["status"] == C.SKIP
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "comm").write_text("systemd\n")
    assert H.fabric_manager_running(str(tmp_path)) is False
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "comm").write_text("nv-fabricmanager\n")
    assert H.fabric_manager_running(str(tmp_path)) is True
    assert H.fabric_manager_running(str(tmp_path / "absent")) is None


# ---------------------------------------------------------------- NVLink

def test_nvlink_all_active_h100():
    status = H.parse_nvlink_status((HEALTH / "nvlink-s-bottlerocket-4418-h100.txt").read_text())
    assert sorted(status) == [0, 1] and len(status[0]["links"]) == 18
    assert status[0]["uuid"] == "GPU-4039dfe4-0c97-4b1e-683e-eb7d42699053"
    assert H.nvlink_bandwidth(status) == {0: 478.116, 1: 478.116}
    (rec,) = H.check_nvlink([], status)
    assert rec["status"] == C.PASS and "478.116 GB/s" in rec["detail"]


def test_nvlink_inactive_links_named():
    status = H.parse_nvlink_status((HEALTH / "nvlink-s-azhpc-diag-73-v100-inactive.txt").read_text())
    assert status[3]["links"] == {0: 25.781, 1: 25.781, 2: 25.781, 3: None, 4: 25.781, 5: None}
    gpu = {"index": 3, "bus_id": "0000:1b:00.0", "name": "Tesla V100-SXM2-32GB", "uuid": None}  # bus id constructed
    (rec,) = H.check_nvlink([gpu], status, node="n1")
    assert rec["status"] == C.FAIL and rec["check"] == "gpu_nvlink GPU3"
    assert "NVLink(s) 3, 5 inactive" in rec["detail"] and rec["data"]["value"] == 4 and rec["data"]["limit"] == 6
    (rec,) = H.check_nvlink([gpu], status, expected_links=6)
    assert rec["status"] == C.FAIL and "4 of 6 NVLinks active (inactive: 3, 5)" in rec["detail"]


def test_nvlink_all_inactive_message():
    status = H.parse_nvlink_status((HEALTH / "nvlink-s-gpud-1085-b200-all-inactive.txt").read_text())
    assert status == {2: {"name": "NVIDIA B200", "uuid": "GPU-xxx", "links": {}, "all_inactive": True}}
    (rec,) = H.check_nvlink([], status)
    assert rec["status"] == C.FAIL and "all NVLinks are inactive" in rec["detail"]


def test_nvlink_down_on_every_gpu_warns_and_error_counters_warn():
    # decision input built as dicts (not a capture): links 16, 17 unused on both GPUs, as on
    # SKUs with fewer links wired (azurehpc-health-checks#162)
    links = {n: (None if n >= 16 else 26.562) for n in range(18)}
    status = {i: {"name": "H100", "uuid": None, "links": dict(links), "all_inactive": False} for i in (0, 1)}
    (rec,) = H.check_nvlink([], status)
    assert rec["status"] == C.WARN and "16, 17 inactive on every GPU" in rec["detail"]
    assert H.check_nvlink([], status, expected_links=16)[0]["status"] == C.PASS
    errors = {0: {3: {"Replay Errors": 0, "Recovery Errors": 2, "CRC Errors": 0}}}
    recs = H.check_nvlink([], status, errors, expected_links=16)
    (rec,) = only(recs)
    assert rec["status"] == C.WARN and "Recovery Errors=2" in rec["detail"]


# ---------------------------------------------------------------- Xid

def xids(name):
    return H.parse_kernel_xids((HEALTH / name).read_text())


def test_xid_79_fallen_off_the_bus():
    events = xids("xid-akash-209-fallen-off-bus.dmesg.txt")
    # the Xid line and the "GPU ... has fallen off the bus" line that follows it are one event
    assert [(e["xid"], e["bus"]) for e in events] == [(79, "0000:a1:00.0")]
    gpu = {"index": 5, "bus_id": "0000:a1:00.0", "name": "NVIDIA H100", "uuid": None}  # bus id from the capture
    (rec,) = H.check_xids([gpu], events, "dmesg", node="n1")
    assert rec["status"] == C.FAIL and rec["check"] == "gpu_xid 79 GPU5"
    assert "GPU5 0000:a1:00.0: Xid 79 x1: GPU has fallen off the bus" in rec["detail"]
    assert "reboot the node" in rec["fix"] and rec["data"]["device"]["bus_id"] == "0000:a1:00.0"


def test_fallen_off_the_bus_without_an_xid_line():
    events = xids("fallen-off-bus-nvsentinel-155.dmesg.txt")
    assert [(e["xid"], e["bus"]) for e in events] == [(79, "0000:b3:00.0")]
    (rec,) = H.check_xids([], events, "dmesg")
    assert rec["status"] == C.FAIL and "GPU? 0000:b3:00.0" in rec["detail"]


def test_application_xids_warn_and_contained_ecc_warns():
    recs = H.check_xids([], xids("xid-akash-244-43-31-94.dmesg.txt"), "dmesg")
    assert [(r["check"], r["status"], r["data"]["count"]) for r in recs] == [
        ("gpu_xid 31 GPU?", "warn", 1), ("gpu_xid 43 GPU?", "warn", 2), ("gpu_xid 94 GPU?", "warn", 1)]
    assert "MMU" in recs[0]["detail"] and "Contained: SM" in recs[2]["detail"]
    recs = H.check_xids([], xids("xid-gpud-46-13-109.dmesg.txt"), "dmesg")
    assert [(r["data"]["value"], r["status"]) for r in recs] == [(13, "warn"), (109, "warn")]
    assert "not in this catalog" in recs[1]["detail"] and "docs.nvidia.com/deploy/xid-errors" in recs[1]["fix"]


def test_gsp_timeouts_and_microcontroller_halt_fail():
    (rec,) = H.check_xids([], xids("xid-gpud-500-gsp-119.txt"), "dmesg")
    assert rec["status"] == C.FAIL and rec["data"]["count"] == 5 and "GSP" in rec["detail"]
    recs = {r["data"]["value"]: r for r in H.check_xids([], xids("xid-chia-301-31-62-45.dmesg.txt"), "dmesg")}
    assert recs[62]["status"] == C.FAIL and recs[45]["status"] == C.WARN and recs[45]["data"]["count"] == 8
    assert recs[31]["status"] == C.WARN


def test_row_remap_xid_and_nvlink5_fatal_vs_nonfatal():
    (rec,) = H.check_xids([], xids("xid-ml-engineering-63.txt"), "dmesg")
    assert rec["status"] == C.FAIL and "0000:10:1c.0" in rec["detail"] and "activate the remap" in rec["fix"]
    recs = H.check_xids([], xids("xid-gpud-1174-149-145-94.kmsg.txt"), "kmsg")
    status = {(r["data"]["value"], r["data"]["device"]["bus_id"]): r["status"] for r in recs}
    assert status == {(94, "0000:9b:00.0"): "warn", (145, "0018:01:00.0"): "warn",
                      (149, "0000:00:00.0"): "fail", (149, "0019:01:00.0"): "fail"}
    recs = H.check_xids([], xids("xid-ogkm-1150-45-after-149-145.journal.txt"), "journalctl -k")
    assert {r["data"]["device"]["bus_id"] for r in recs} == {"0000:dc:00.0", "0000:ed:00.0", "0000:ba:00.0",
                                                            "0000:97:00.0"}


@pytest.mark.parametrize("code,status", [(79, "fail"), (48, "fail"), (63, "fail"), (64, "fail"), (94, "warn"),
                                         (95, "fail"), (13, "warn"), (31, "warn"), (43, "warn"), (74, "fail"),
                                         (119, "fail"), (120, "fail")])
def test_xid_catalog_has_meaning_and_fix(code, status):
    meaning, st, fix = H.xid_meaning(code)
    assert st == status and meaning and fix


def test_xid_map_to_gpu_index_and_no_xid_passes():
    gpus = gpus_of()
    line = "NVRM: Xid (PCI:0000:00:06): 48, pid=1, name=x, DBE (double bit error) ECC error"  # constructed line
    (rec,) = H.check_xids(gpus, H.parse_kernel_xids(line), "dmesg", node="n1")
    assert rec["check"] == "gpu_xid 48 GPU0" and rec["status"] == C.FAIL
    assert_names_device(rec, 48, None)
    assert H.check_xids(gpus, [], "journalctl -k")[0]["status"] == C.PASS


# ---------------------------------------------------------------- dcgmi diag

def test_dcgmi_json_skipped_tests_warn():
    parsed = H.parse_dcgmi_diag((HEALTH / "dcgmi-diag-dcgm-139-skip.json").read_text())
    assert parsed["format"] == "json" and len(parsed["results"]) == 5
    assert {r["status"] for r in parsed["results"]} == {C.SKIP}
    (rec,) = H.check_dcgmi(parsed, gpus_of())
    assert rec["status"] == C.WARN and "skipped 5 test(s)" in rec["detail"] and "DCGM#55" in rec["fix"]


def test_dcgmi_table_failure_carried_over():
    parsed = H.parse_dcgmi_diag((HEALTH / "dcgmi-diag-go-dcgm-52-fail.table.txt").read_text())
    assert parsed["format"] == "table"
    assert [(r["test"], r["gpu"], r["status"]) for r in parsed["results"]] == [
        ("GPU Memory", "1", "pass"), ("GPU Memory", "0", "fail")]
    assert "cuCtxCreate" in parsed["results"][1]["warnings"][0]
    gpu = {"index": 0, "bus_id": "0000:3b:00.0", "name": None, "uuid": None}   # bus id constructed
    (rec,) = H.check_dcgmi(parsed, [gpu], node="n1")
    assert rec["status"] == C.FAIL and rec["check"] == "gpu_dcgm_diag GPU Memory GPU0"
    assert "GPU0 0000:3b:00.0: dcgmi diag Hardware/GPU Memory: fail" in rec["detail"]
    assert "busy or unavailable" in rec["detail"]


def test_dcgmi_tables_that_pass():
    parsed = H.parse_dcgmi_diag((HEALTH / "dcgmi-diag-nccl-tests-264-h100.table.txt").read_text())
    assert [r["test"] for r in parsed["results"]] == ["Denylist", "NVML Library", "CUDA Main Library",
                                                      "Permissions and OS Blocks", "Persistence Mode"]
    assert parsed["results"][-1]["info"] == ["Persistence mode for GPU 0 is disabled. Enabl"]
    assert H.check_dcgmi(parsed)[0]["status"] == C.PASS
    parsed = H.parse_dcgmi_diag((HEALTH / "dcgmi-diag-dcgm-253-4x.table.txt").read_text())
    assert [(r["test"], r["gpu"]) for r in parsed["results"]] == [
        ("software", "0"), ("software", "1"), ("software", "2"), ("software", "3"), ("memory", None)]
    assert H.check_dcgmi(parsed)[0]["status"] == C.PASS


# ---------------------------------------------------------------- the module, in-process

def _module_run(tmp_path, args, smi_xml=None, nvlink=None, dmesg=None):
    """Run gpu_health_info.main() in this process with stand-in tools on PATH that print captures."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    if smi_xml is not None:
        (data / "smi.xml").write_text(smi_xml)
        (data / "nvlink.txt").write_text(nvlink or "")
        smi = bindir / "nvidia-smi"
        smi.write_text("#!/bin/sh\ncase \"$1\" in -q) %s %s;; nvlink) [ \"$2\" = -s ] && %s %s;; esac\n"
                       % (CAT, data / "smi.xml", CAT, data / "nvlink.txt"))
        smi.chmod(0o755)
    if dmesg is not None:
        (bindir / "dmesg").write_text("#!/bin/sh\n%s %s\n" % (CAT, dmesg))
        (bindir / "dmesg").chmod(0o755)
    root = tmp_path / "root"
    (root / "proc" / "sys" / "kernel").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "sys" / "kernel" / "dmesg_restrict").write_text("0\n")
    return helpers.run_module("gpu_health_info", dict({"root": str(root), "node": "n1"}, **args),
                              env=dict(os.environ, PATH=str(bindir)))


def test_module_without_gpu_skips_everything(tmp_path):
    out = _module_run(tmp_path, {})
    assert not out.get("failed") and out["changed"] is False
    assert {c["status"] for c in out["checks"]} == {"skip"} and len(out["checks"]) == len(H.CATEGORIES)
    assert "nvidia-smi not found" in out["checks"][0]["detail"]
    assert out["gpu_health"]["gpu_count"] == 0


def test_module_gpu_on_the_bus_without_driver_fails_the_count(tmp_path):
    dev = tmp_path / "root" / "sys" / "bus" / "pci" / "devices" / "0000:00:06.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10de\n")
    (dev / "class").write_text("0x030200\n")
    out = _module_run(tmp_path, {})
    assert out["checks"][0]["status"] == "fail" and "0000:00:06.0" in out["checks"][0]["detail"]
    assert {c["status"] for c in out["checks"][1:]} == {"skip"}


def test_module_on_replayed_captures(tmp_path):
    out = _module_run(tmp_path, {"expected_gpus": 1}, smi_xml=edited_xml("pcie-width-x8"),
                      nvlink=(HEALTH / "nvlink-s-bottlerocket-4418-h100.txt").read_text(),
                      dmesg=HEALTH / "xid-akash-209-fallen-off-bus.dmesg.txt")
    by = {c["check"]: c for c in out["checks"]}
    assert by["gpu_pcie_width GPU0"]["status"] == "fail" and by["gpu_pcie_width GPU0"]["node"] == "n1"
    assert by["gpu_count"]["status"] == "pass" and by["gpu_nvlink"]["status"] == "pass"
    assert by["gpu_xid 79 GPU?"]["status"] == "fail"
    assert out["gpu_health"]["kernel_log"] == "dmesg" and out["gpu_health"]["xids"][0]["xid"] == 79
    assert by["gpu_dcgm_diag"]["status"] == "skip"


def test_module_reads_the_link_under_a_load_command(tmp_path):
    pidfile = tmp_path / "load.pid"
    load = "import os, time; open(%r, 'w').write(str(os.getpid())); time.sleep(30)" % str(pidfile)
    out = _module_run(tmp_path, {"load_command": [sys.executable, "-c", load],
                                                      "load_seconds": 1, "kernel_log": False},
                      smi_xml=edited_xml("pcie-gen1-idle"))
    assert out["gpu_health"]["loaded"] is True
    by = {c["check"]: c for c in out["checks"]}
    assert by["gpu_pcie_gen GPU0"]["status"] == "fail"
    assert by["gpu_xid"]["status"] == "skip" and "not asked" in by["gpu_xid"]["detail"]
    assert not os.path.exists("/proc/%s" % pidfile.read_text())   # the load was stopped and reaped


def test_module_kernel_log_unreadable_is_a_skip_with_the_reason(tmp_path):
    out = _module_run(tmp_path, {}, smi_xml=H100_XML.read_text())
    xid = {c["check"]: c for c in out["checks"]}["gpu_xid"]
    assert xid["status"] == "skip" and "kernel log not readable" in xid["detail"] and "become" in xid["detail"]


# ---------------------------------------------------------------- as Ansible runs it

def test_ansible_doc_renders_and_module_runs_through_ansible_on_this_machine():
    import subprocess


    proc = subprocess.run([helpers.tool("ansible-doc"), "provision.cluster.gpu_health_info"], cwd=REPO,
                          env=helpers.ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "RETURN VALUES" in proc.stdout and "ATTRIBUTES" in proc.stdout and "check_mode" in proc.stdout
    if H.pci_nvidia_devices("/sys")["gpus"]:
        pytest.skip("this machine has an NVIDIA GPU: the no-GPU path is covered in-process")
    line, out = helpers.adhoc("gpu_health_info", {"node": "ctl"}, "--check", "-i", "localhost,", "-e",
                              "ansible_python_interpreter=%s" % sys.executable)
    assert line.startswith("localhost | SUCCESS") and out["changed"] is False
    assert {c["status"] for c in out["checks"]} == {"skip"} and {c["node"] for c in out["checks"]} == {"ctl"}
