"""GPU/driver/toolkit/NCCL parsers on the real H100 captures, and the toolkit decision."""

from __future__ import annotations

import json

import pytest
import helpers
from helpers import FIXTURES

from ansible_collections.provision.cluster.plugins.module_utils.gpu import gpu as G

H100 = FIXTURES / "h100-node"


def test_query_csv_real_capture():
    gpus = G.parse_query_csv((H100 / "nvidia-smi-query-gpu.csv").read_text())
    assert gpus == [{
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-f87b3771-1a61-b461-47d9-dbcb753bc747",
        "pci_bus_id": "00000000:00:06.0", "driver_version": "580.159.04", "memory_total_mib": 81559,
        "compute_capability": "9.0",
    }]


def test_query_csv_rejects_other_field_list():
    with pytest.raises(ValueError):
        G.parse_query_csv("0, NVIDIA H100 80GB HBM3, 580.159.04\n")


def test_smi_xml_real_capture():
    smi = G.parse_smi_xml((H100 / "nvidia-smi-q.xml").read_text())
    assert smi["driver_version"] == "580.159.04"
    assert smi["driver_cuda_version"] == "13.0"
    (gpu,) = smi["gpus"]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["architecture"] == "Hopper"
    assert gpu["uuid"] == "GPU-f87b3771-1a61-b461-47d9-dbcb753bc747"
    assert gpu["pci_bus_id"] == "00000000:00:06.0"
    assert gpu["memory_total_mib"] == 81559
    assert gpu["mig_mode"] == "Disabled"


def test_merge_xml_and_csv_on_uuid():
    smi = G.parse_smi_xml((H100 / "nvidia-smi-q.xml").read_text())
    csv_gpus = G.parse_query_csv((H100 / "nvidia-smi-query-gpu.csv").read_text())
    (gpu,) = G.merge_gpus(smi["gpus"], csv_gpus)
    assert gpu["compute_capability"] == "9.0" and gpu["architecture"] == "Hopper"
    assert "driver_version" not in gpu


def test_driver_cuda_prefers_driver_report_over_table():
    smi = G.parse_smi_xml((H100 / "nvidia-smi-q.xml").read_text())
    assert G.driver_supported_cuda(smi) == ("13.0", "nvidia-smi")
    # without the XML's cuda_version the table decides
    assert G.driver_supported_cuda({"driver_version": "535.104.05"}) == ("12.2", "driver table")
    assert G.driver_supported_cuda({"driver_version": "580.159.04"}) == ("13.0", "driver table")
    assert G.cuda_max_for_driver("440.33") is None


def test_nvcc_real_capture():
    assert G.parse_nvcc_version((H100 / "nvcc-version.txt").read_text()) == {"release": "13.0", "version": "13.0.88"}
    assert G.parse_nvcc_version("bash: nvcc: command not found") is None


def test_cuda_version_json_and_txt():
    # the layout of /usr/local/cuda-X.Y/version.json
    assert G.parse_cuda_version_json('{"cuda": {"name": "CUDA SDK", "version": "12.4.1"}}') == "12.4.1"
    assert G.parse_cuda_version_json("not json") is None
    assert G.parse_cuda_version_txt("CUDA Version 10.2.89\n") == "10.2.89"


def test_torch_versions_real_capture_and_nccl_encodings():
    v = G.parse_torch_versions((H100 / "torch-versions.txt").read_text())
    assert v["python"] == "3.12.3"
    assert v["torch"] == "2.11.0+cu130" and v["torch_cuda"] == "13.0"
    assert v["nccl"] == "2.28.9"
    assert v["device_count"] == 1 and v["device_name"] == "NVIDIA H100 80GB HBM3"
    assert v["backends"] == {"nccl": True, "gloo": True, "mpi": False}
    assert G.nccl_version_from_int(22809) == "2.28.9"
    assert G.nccl_version_from_int(2708) == "2.7.8"
    assert G.nccl_version_from_filename("/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3") == "2.28.3"
    assert G.nccl_version_from_filename("libnccl.so.2") is None
    assert G.nccl_version_from_header("#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 3\n") == "2.28.3"


def test_cuda_env_capture_matches_toolkit_env():
    env = dict(line.split("=", 1) for line in (H100 / "cuda-env.txt").read_text().splitlines() if "=" in line)
    got = G.toolkit_env(env["CUDA_HOME"])
    assert got["env"]["CUDA_HOME"] == "/usr/local/cuda"
    assert got["path"] == ["/usr/local/cuda/bin"] and got["path"][0] in env["PATH"].split(":")
    assert got["ld_library_path"] == ["/usr/local/cuda/lib64"]
    assert G.toolkit_env("") == {}


FACTS_H100 = {"gpu_count": 1, "driver_version": "580.159.04", "driver_cuda_version": "13.0",
              "toolkits": [{"path": "/usr/local/cuda", "version": "13.0.2"},
                           {"path": "/usr/local/cuda-13.0", "version": "13.0.2"}]}


def test_plan_no_gpu_skips():
    plan = G.toolkit_plan({"gpu_count": 0, "reason": "nvidia-smi not found"}, version="12.4", source="repo")
    assert plan == {"action": "skip", "reason": "nvidia-smi not found"}


def test_plan_refuses_newer_than_driver():
    plan = G.toolkit_plan(dict(FACTS_H100, driver_cuda_version="12.2", driver_version="535.104.05"),
                          version="12.4", source="repo")
    assert plan["action"] == "refuse"
    assert "12.4 is newer than driver 535.104.05 supports (CUDA 12.2)" in plan["reason"]
    assert "\n" not in plan["reason"]


def test_plan_present_install_repo_and_runfile():
    assert G.toolkit_plan(FACTS_H100, version="13.0", source="repo")["action"] == "present"
    plan = G.toolkit_plan(FACTS_H100, version="12.4", source="repo", os_family="Debian",
                          distro_release=G.repo_distro_tag("ubuntu", "24.04"))
    assert plan["packages"] == ["cuda-toolkit-12-4"] and plan["cuda_home"] == "/usr/local/cuda-12.4"
    assert plan["repo"]["keyring_deb"].endswith("/repos/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb")
    el = G.toolkit_plan(FACTS_H100, version="12.4", source="repo", os_family="RedHat",
                        distro_release=G.repo_distro_tag("rocky", "9.4"))
    assert el["repo"]["repo_file"].endswith("/repos/rhel9/x86_64/cuda-rhel9.repo")
    run = G.toolkit_plan(FACTS_H100, version="12.4", source="runfile",
                         runfile="/srv/cuda_12.4.1_550.54.15_linux.run")
    # issue 31 item 3: not a predictable /tmp name root then runs, but a root-only directory, which the
    # installer also extracts into (--tmpdir)
    assert run["argv"] == ["sh", "/var/lib/provision/cuda-runfile/cuda_12.4.1_550.54.15_linux.run", "--silent",
                           "--toolkit", "--toolkitpath=/usr/local/cuda-12.4", "--no-man-page", "--override",
                           "--tmpdir=/var/lib/provision/cuda-runfile"]
    assert run["runfile_dir"] == "/var/lib/provision/cuda-runfile" and not any("/tmp/" in a for a in run["argv"])
    assert "--driver" not in run["argv"]
    assert G.toolkit_plan(FACTS_H100, version="12.4", source="runfile")["action"] == "refuse"


def test_pick_toolkit():
    tks = [{"path": "/usr/local/cuda-12.1", "version": "12.1.1"}, {"path": "/usr/local/cuda-12.4", "version": "12.4.0"}]
    assert G.pick_toolkit(tks)["path"] == "/usr/local/cuda-12.4"
    assert G.pick_toolkit(tks, "12.1")["path"] == "/usr/local/cuda-12.1"
    assert G.pick_toolkit(tks, "11.8") is None
    assert G.pick_toolkit(tks + [{"path": "/usr/local/cuda", "version": "12.1.1"}])["path"] == "/usr/local/cuda"


def _run_module(args: dict, env_path: str) -> dict:
    """Run the module in this process as Ansible would, with PATH controlled."""
    return helpers.run_module("gpu_facts", args, env={"PATH": env_path})


def test_module_without_driver_reports_zero_and_reason(tmp_path):
    out = _run_module({"search_roots": [str(tmp_path)]}, str(tmp_path))
    facts = out["ansible_facts"]["gpu_facts"]
    assert facts["gpu_count"] == 0 and "nvidia-smi not found" in facts["reason"]
    assert out["ansible_facts"]["provision_env_cuda_toolkit"]["path"] == []
    assert not out.get("failed")


def test_module_on_replayed_captures(tmp_path):
    """A stand-in nvidia-smi/nvcc that print the real captures: the module's own wiring end to end."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   f'case "$1" in -q) cat {H100 / "nvidia-smi-q.xml"};; *) cat {H100 / "nvidia-smi-query-gpu.csv"};; esac\n')
    root = tmp_path / "local"
    (root / "cuda-13.0" / "bin").mkdir(parents=True)
    (root / "cuda-13.0" / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "13.0.2"}}))
    nvcc = root / "cuda-13.0" / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\ncat {H100 / 'nvcc-version.txt'}\n")
    (root / "cuda-13.0" / "lib64").mkdir()
    (root / "cuda-13.0" / "lib64" / "libnccl.so.2.28.3").write_text("")
    for f in (smi, nvcc):
        f.chmod(0o755)
    out = _run_module({"search_roots": [str(root)], "source": "repo", "cuda_version": "13.1"},
                      f"{bindir}:/usr/bin:/bin")
    facts = out["ansible_facts"]["gpu_facts"]
    assert facts["gpu_count"] == 1 and facts["reason"] == ""
    assert facts["driver_cuda_version"] == "13.0" and facts["driver_cuda_source"] == "nvidia-smi"
    assert facts["gpus"][0]["compute_capability"] == "9.0"
    assert facts["nvcc"]["release"] == "13.0"
    assert facts["nccl"]["version"] == "2.28.3"
    assert out["plan"]["action"] == "refuse"  # 13.1 asked, the driver supports 13.0
    out = _run_module({"search_roots": [str(root)]}, f"{bindir}:/usr/bin:/bin")
    env = out["ansible_facts"]["provision_env_cuda_toolkit"]
    assert env["env"]["CUDA_HOME"] == str(root / "cuda-13.0")
    assert env["ld_library_path"] == [str(root / "cuda-13.0" / "lib64")]


def test_a_toolkit_of_nvidias_apt_packages_is_found_by_its_cuda_h(tmp_path):
    """The H200 image (tests/fixtures/h200-proof/cuda-layout.txt): cuda-*-13-0 apt packages, /usr/local/cuda and
    cuda-13 links (through /etc/alternatives) to cuda-13.0, include a link into targets/, and no version.json
    or version.txt: the proof said 'toolkits none' beside a working nvcc 13.0. cuda.h's CUDA_VERSION names it."""
    from ansible_collections.provision.cluster.plugins.modules import gpu_facts as GF

    layout = (FIXTURES / "h200-proof" / "cuda-layout.txt").read_text()
    assert "cuda -> /etc/alternatives/cuda" in layout and "No such file or directory" in layout
    assert "#define CUDA_VERSION 13000" in layout
    assert G.parse_cuda_h_version("/* ... */\n#define CUDA_VERSION 13000\n") == "13.0"
    assert G.parse_cuda_h_version("#define CUDA_VERSION 12040") == "12.4"
    assert G.parse_cuda_h_version("#define CUDA_VERSION 11080\n") == "11.8"
    assert G.parse_cuda_h_version("#define CUDA_VERSION_MAJOR 13") is None and G.parse_cuda_h_version("") is None
    root = tmp_path / "local"
    real = root / "cuda-13.0"
    (real / "targets" / "x86_64-linux" / "include").mkdir(parents=True)
    (real / "include").symlink_to("targets/x86_64-linux/include")
    # the define line as cuda.h has it (the header itself is NVIDIA's: only that line is written here)
    (real / "targets" / "x86_64-linux" / "include" / "cuda.h").write_text("#define CUDA_VERSION 13000\n")
    (real / "bin").mkdir()
    (real / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (real / "bin" / "nvcc").chmod(0o755)
    (root / "cuda").symlink_to(real)
    (root / "cuda-13").symlink_to(real)
    found = GF.find_toolkits([str(root)])
    # the real directory stands for itself (not its alias cuda-13), /usr/local/cuda apart
    assert [tk["path"] for tk in found] == [str(real), str(root / "cuda")]
    assert all(tk["version"] == "13.0" and tk["realpath"] == str(real) and tk["nvcc"] for tk in found), found
    assert G.pick_toolkit(found)["path"] == str(root / "cuda")
    assert G.pick_toolkit(found, "13.0")["realpath"] == str(real)
    # a directory named cuda* with no toolkit in it is still not one
    (root / "cuda-notes").mkdir()
    assert str(root / "cuda-notes") not in {tk["path"] for tk in GF.find_toolkits([str(root)])}
