"""The parsers, checks and the GPU proof's verdicts on the real H200 captures (tests/fixtures/h200-proof/,
`bash scripts/gpu_proof.sh` on a lent H200 on 2026-12-04): what the H100 captures established holds on a
second machine, and the proof's own verdicts are reproduced from the task results it recorded there."""

from __future__ import annotations

import json
import shutil
import sys

from helpers import FIXTURES, REPO

from ansible_collections.provision.cluster.plugins.module_utils.allreduce import allreduce_smoke as ar
from ansible_collections.provision.cluster.plugins.module_utils.allreduce import bandwidth as B
from ansible_collections.provision.cluster.plugins.module_utils.common import python_env as P
from ansible_collections.provision.cluster.plugins.module_utils.gpu import gpu as G
from ansible_collections.provision.cluster.plugins.module_utils.gpu import gpu_health as H
from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C

sys.path.insert(0, str(REPO / "scripts" / "gpu_proof"))
import proof  # noqa: E402

H200 = FIXTURES / "h200-proof"
RAW = H200 / "raw"
UUID = "GPU-46815c64-1251-7708-25f1-881be662513e"


def test_query_csv_and_xml_name_the_h200_with_its_memory():
    (gpu,) = G.parse_query_csv((RAW / "nvidia-smi-query-gpu.csv").read_text())
    assert gpu == {"index": 0, "name": "NVIDIA H200", "uuid": UUID, "pci_bus_id": "00000000:00:06.0",
                   "driver_version": "580.159.04", "memory_total_mib": 143771, "compute_capability": "9.0"}
    smi = G.parse_smi_xml((RAW / "nvidia-smi-q.xml").read_text())
    assert (smi["driver_version"], smi["driver_cuda_version"]) == ("580.159.04", "13.0")
    (xml_gpu,) = smi["gpus"]
    assert (xml_gpu["name"], xml_gpu["architecture"], xml_gpu["uuid"]) == ("NVIDIA H200", "Hopper", UUID)
    assert (xml_gpu["memory_total_mib"], xml_gpu["mig_mode"]) == (143771, "Disabled")


def test_torch_versions_capture():
    v = G.parse_torch_versions((RAW / "torch-versions.txt").read_text())
    assert (v["torch"], v["torch_cuda"], v["nccl"]) == ("2.11.0+cu130", "13.0", "2.28.9")
    assert v["python"].startswith("3.12.3") and v["backends"] == {"nccl": True, "gloo": True, "mpi": False}


def test_health_reading_is_healthy_and_skips_what_cannot_apply():
    smi = H.parse_smi_health((RAW / "nvidia-smi-q.xml").read_text())
    (g,) = smi["gpus"]
    assert g["bus_id"] == "0000:00:06.0" and g["pcie"] == {"gen_max": 5, "gen_current": 5, "width_max": 16,
                                                           "width_current": 16}
    assert g["remap"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    recs = H.health_checks(smi, pci={"gpus": ["0000:00:06.0"], "nvswitches": []}, xid_events=[], xid_source="dmesg",
                           node="h200")
    assert [r["check"] for r in recs if r["status"] == C.SKIP] == ["gpu_nvlink", "gpu_fabric", "gpu_dcgm_diag"]
    assert not [r for r in recs if r["status"] in (C.FAIL, C.WARN)], recs


def test_nccl_log_of_the_one_rank_all_reduce():
    for log in (RAW / "nccl-debug-info.log", H200 / "allreduce" / "rank0.log"):
        info = ar.parse_nccl_log(log.read_text(errors="replace"))
        assert (info["version"], info["network"], info["ranks"]) == ("2.28.9", "Socket", 1), log
        assert info["net_interfaces"] == ["eth0"] and info["warnings"] == [], log
        # IB disabled on purpose: NCCL did not look for a device (ib_found unknown, not False), and the
        # value is "1", not the sentence's "1."
        assert info["ib_found"] is None and info["env"] == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}, log


def test_expected_busbw_from_the_capture_matches_what_the_proof_wrote():
    smi = H.parse_smi_health((RAW / "nvidia-smi-q.xml").read_text())
    cap = B.capability_from_facts({"gpus": smi["gpus"], "nvlink": {}, "pci": {"gpus": ["0000:00:06.0"], "nvswitches": []}},
                                  {"ports": []}, eth_gbps=None)
    wrote = json.loads((H200 / "expected-busbw.json").read_text())
    assert cap == wrote["capability"]
    one = B.expected_busbw([cap])
    assert one["busbw"] is None and "one GPU on one node" in one["reason"]


def _out(tmp_path, step):
    out = tmp_path / "out"
    (out / "results").mkdir(parents=True)
    shutil.copy(H200 / "results" / f"{step}.jsonl", out / "results" / f"{step}.jsonl")
    return out


def _recorded(step):
    return next(s for s in json.loads((H200 / "summary.json").read_text())["steps"] if s["step"] == step)


def test_the_gpu_step_is_judged_again_as_it_was_on_the_machine(tmp_path):
    rec = proof.judge(_out(tmp_path, "gpu"), "gpu", 0, 4.8)
    assert rec["status"] == "ok"
    assert rec["detail"] == _recorded("gpu")["detail"] == \
        "1 x NVIDIA H200, driver 580.159.04, CUDA 13.0 (nvidia-smi); toolkits none; health: 9 pass, 3 skip"


def test_the_python_env_step_names_torch_s_cuda(tmp_path):
    """The adopted environment's versions come from python_venv's own versions check (torch_cuda): the
    summary said 'CUDA None' for torch 2.11.0+cu130 while the fact held 13.0."""
    rows = [json.loads(line) for line in (H200 / "results" / "python_env.jsonl").read_text().splitlines()]
    (venv,) = [r for r in rows if r["result"].get("check_module") == "provision.cluster.python_venv"]
    assert venv["result"]["ansible_facts"]["python_env_versions"]["torch_cuda"] == "13.0"
    out = _out(tmp_path, "python_env")
    (out / "plan.json").write_text(json.dumps({"env_prefix": "/opt/torch/.venv"}))
    rec = proof.judge(out, "python_env", 0, 10.6)
    assert rec["status"] == "ok"
    assert rec["detail"].startswith("torch 2.11.0+cu130 (CUDA 13.0, NCCL 2.28.9, cuda_available True, 1 device(s)) "
                                    "from /opt/torch/.venv, python 3.12.3; adopted as it is"), rec["detail"]


def test_the_image_venv_lock_file_is_uv_s_and_nothing_else_was_writable():
    """The first run on that machine refused /opt/torch/.venv for its .lock (0666, uv's flock file); the
    listing taken before the second run names it alone, root-owned, a plain file of one link."""
    listing = (H200 / "venv-untrusted.txt").read_text().splitlines()
    found = [line for line in listing if not line.startswith("root ")]       # find's lines, then stat's
    assert found == ["0 666 f 1 0 /opt/torch/.venv/.lock"]
    assert "root 755 /opt/torch/.venv" in listing and "root 666 /opt/torch/.venv/.lock" in listing
    assert "python_env      failed" in (H200 / "first-run-summary.txt").read_text()
    assert found[0].split(" ", 5)[5] == f"/opt/torch/.venv/{P.UV_LOCK}"      # the name the walk tolerates


def test_a_user_without_passwordless_sudo_is_stopped_before_the_stages(tmp_path):
    """As `trainee` on the H200 (no sudo in that image) every stage failed on become, one after the other;
    the prerequisites now say it once, before any runs (tests/fixtures/h200-proof/trainee-summary.txt)."""
    assert "preflight       failed" in (H200 / "trainee-summary.txt").read_text()
    assert proof.become_problem(euid=0) == ""
    assert proof.become_problem(euid=1000, sudo="") == "sudo is not installed"
    sudo = tmp_path / "sudo"
    sudo.write_text("#!/bin/sh\necho 'sudo: a password is required' >&2\nexit 1\n")
    sudo.chmod(0o755)
    assert proof.become_problem(euid=1000, sudo=str(sudo)) == "`sudo -n true` fails: sudo: a password is required"
    sudo.write_text("#!/bin/sh\n[ \"$1 $2\" = '-n true' ]\n")
    assert proof.become_problem(euid=1000, sudo=str(sudo)) == ""


def test_the_gpu_step_names_each_toolkit_and_the_one_exported():
    """On the H200 (after gpu_facts read cuda.h) the step printed "toolkits ['13.0', '13.0']": which is which?"""
    facts = {"cuda_home": "/usr/local/cuda",
             "toolkits": [{"path": "/usr/local/cuda-13.0", "version": "13.0"}, {"path": "/usr/local/cuda", "version": "13.0"}]}
    assert proof.toolkits_shown(facts) == "/usr/local/cuda-13.0 13.0, /usr/local/cuda 13.0 (CUDA_HOME)"
    assert proof.toolkits_shown({"toolkits": [], "cuda_home": ""}) == "none"
