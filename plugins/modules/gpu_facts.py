#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_facts
short_description: NVIDIA GPUs, driver, CUDA toolkits and NCCL of a node, as facts
description:
  - Reads C(nvidia-smi -q -x) (driver version, the CUDA version the driver supports, GPUs with
    UUID, PCI bus id, memory, architecture, MIG mode) and C(nvidia-smi --query-gpu) CSV (compute
    capability), every installed CUDA toolkit (C(/usr/local/cuda*/version.json) or C(version.txt),
    C(nvcc --version)) and the NCCL library (C(libnccl.so.X.Y.Z) file names, C(nccl.h)).
  - A node without C(nvidia-smi), or where the driver does not answer, gets C(gpu_count=0) and a
    one-line C(reason); the module never fails for that.
  - Sets C(provision_env_cuda_toolkit) (CUDA_HOME, PATH, LD_LIBRARY_PATH for the shell_env block)
    when a toolkit is found, and an empty one otherwise.
  - Read-only; runs the same in check mode.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  cuda_version:
    description:
      - The toolkit release (C(12.4)) to export as CUDA_HOME when several are installed.
      - Empty means C(/usr/local/cuda) if present, else the newest one found.
    type: str
    default: ""
  search_roots:
    description:
      - Directories searched for C(cuda*) toolkit directories.
      - A toolkit's version is read from its C(version.json), C(version.txt) or C(include/cuda.h) (C(CUDA_VERSION)), in that order.
    type: list
    elements: path
    default: [/usr/local]
  nccl_dirs:
    description: Extra directories searched for C(libnccl.so.*) besides the usual library directories.
    type: list
    elements: path
    default: []
  timeout:
    description: Seconds each C(nvidia-smi)/C(nvcc) call may take (a wedged driver hangs nvidia-smi).
    type: int
    default: 30
  source:
    description:
      - Where a missing toolkit of release O(cuda_version) would come from (C(repo) = NVIDIA's
        repository, C(distro), C(runfile)). Given, the module also returns the install C(plan);
        a toolkit newer than the driver supports gives C(action=refuse) with the reason.
    type: str
    choices: ["", repo, distro, runfile]
    default: ""
  runfile:
    description: For O(source=runfile), the runfile's name or controller path (C(cuda_12.4.1_550.54.15_linux.run)).
    type: str
    default: ""
  install_root:
    description: Parent directory of C(cuda-X.Y) for repo/runfile installs.
    type: path
    default: /usr/local
  runfile_dir:
    description:
      - For O(source=runfile), the directory on the node where the runfile is copied and its installer
        works (C(--tmpdir)); only root may use it (the cuda_toolkit role makes it root:root 0700).
    type: path
    default: /var/lib/provision/cuda-runfile
extends_documentation_fragment: [provision.cluster.attributes, provision.cluster.attributes.INFO_MODULE]
"""

EXAMPLES = r"""
- name: Read GPUs, driver and toolkits
  provision.cluster.gpu_facts:
    cuda_version: "12.4"

- name: Show the result
  ansible.builtin.debug:
    msg: "{{ gpu_facts.gpu_count }} GPU(s), driver supports CUDA {{ gpu_facts.driver_cuda_version }}"
"""

RETURN = r"""
checks:
  description: The check C(gpu) as C(provision verify) reports it (skip without GPU, fail when the toolkit asked for cannot run on the driver).
  returned: always
  type: list
  elements: dict
  sample: [{"check": "gpu", "status": "skip", "detail": "no NVIDIA driver (nvidia-smi not found)", "fix": ""}]
plan:
  description: With O(source), what the cuda_toolkit role does (action skip|present|none|install|refuse, reason, method, packages, repo, argv, cuda_home).
  returned: always
  type: dict
ansible_facts:
  description: Facts set on the host.
  returned: always
  type: dict
  contains:
    gpu_facts:
      description: The findings.
      type: dict
      contains:
        gpu_count: {description: Number of GPUs (0 without driver/GPU)., type: int}
        reason: {description: Why gpu_count is 0 (empty otherwise)., type: str}
        driver_version: {description: NVIDIA driver version., type: str}
        driver_cuda_version: {description: Newest CUDA the driver supports., type: str}
        driver_cuda_source: {description: C(nvidia-smi) (driver's own report) or C(driver table)., type: str}
        pci_gpus:
          description: PCI bus ids of the NVIDIA GPUs on the PCI bus (from C(/sys/bus/pci/devices)), listed by the driver or not.
          type: list
          elements: str
        gpus:
          description: index, name, uuid, pci_bus_id, memory_total_mib, compute_capability, architecture, mig_mode.
          type: list
          elements: dict
        toolkits:
          description: Installed toolkits, each with path, version and how it was found.
          type: list
          elements: dict
        nvcc: {description: C(nvcc --version) release/version of the nvcc on PATH or in CUDA_HOME., type: dict}
        cuda_home: {description: The toolkit exported as CUDA_HOME (empty when none)., type: str}
        nccl: {description: NCCL library version and path found on the system (not the one inside torch)., type: dict}
    provision_env_cuda_toolkit:
      description: The shell_env contract (env, path, ld_library_path, source); empty lists without a toolkit.
      type: dict
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.gpu import gpu as G
from ansible_collections.provision.cluster.plugins.module_utils.gpu.gpu_health import pci_nvidia_devices
from ansible_collections.provision.cluster.plugins.module_utils.common.gcc import os_family, os_release_dict
from ansible_collections.provision.cluster.plugins.module_utils.common.procs import first_line, run_bounded

NVIDIA_BIN_DIRS = ["/usr/bin", "/usr/local/nvidia/bin", "/usr/local/bin"]
NCCL_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
             "/usr/local/nccl/lib", "/usr/local/lib", "/opt/nccl/lib"]


def read_smi(module, timeout):
    """(smi dict, reason) from nvidia-smi; smi is None when there is no usable driver."""
    smi_bin = module.get_bin_path("nvidia-smi", opt_dirs=NVIDIA_BIN_DIRS)
    if not smi_bin:
        return None, "nvidia-smi not found: no NVIDIA driver on this node"
    rc, out, err = run_bounded([smi_bin, "-q", "-x"], timeout)
    if rc != 0:
        return None, f"nvidia-smi failed (rc={rc}): {first_line(out, err)}"
    try:
        smi = G.parse_smi_xml(out)
    except Exception as exc:  # a broken XML is a reason, not a traceback
        return None, f"nvidia-smi -q -x output unreadable: {exc}"
    rc, out, err = run_bounded([smi_bin, "--query-gpu=" + ",".join(G.QUERY_FIELDS), "--format=csv,noheader"], timeout)
    csv_gpus = []
    if rc == 0:
        try:
            csv_gpus = G.parse_query_csv(out)
        except ValueError:
            csv_gpus = []  # old nvidia-smi without compute_cap: the XML has the rest
    smi["gpus"] = G.merge_gpus(smi["gpus"], csv_gpus)
    if not smi["gpus"]:
        return None, "nvidia-smi lists no GPU"
    return smi, ""


# cuda.h defines CUDA_VERSION in its first lines (about 1 MiB in all): what is read of each file
CUDA_H_READ = 256 * 1024


def find_toolkits(roots):
    seen, toolkits = set(), []
    for root in roots:
        # real directories before links (cuda-13.0 stands for itself, not its alias cuda-13); /usr/local/cuda
        # is kept apart whatever it points to (pick_toolkit's default)
        for path in sorted(glob.glob(os.path.join(root, "cuda*")), key=lambda p: (os.path.islink(p), p)):
            real = os.path.realpath(path)
            version = None
            # version.json (runfile, the cuda-toolkit meta package), version.txt (10.x and older), else the
            # CUDA_VERSION cuda.h defines (the apt packages of NVIDIA's images install no version file)
            for name, parser in (("version.json", G.parse_cuda_version_json), ("version.txt", G.parse_cuda_version_txt),
                                 (os.path.join("include", "cuda.h"), G.parse_cuda_h_version)):
                try:
                    with open(os.path.join(path, name), encoding="utf-8", errors="replace") as fh:
                        version = parser(fh.read(CUDA_H_READ))
                except OSError:
                    continue
                if version:
                    break
            if not version or not os.path.isdir(path):
                continue
            key = (real, path == os.path.join(root, "cuda"))
            if key in seen:
                continue
            seen.add(key)
            toolkits.append({"path": path, "realpath": real, "version": version,
                             "nvcc": os.access(os.path.join(path, "bin", "nvcc"), os.X_OK)})
    return toolkits


def find_nccl(extra_dirs, toolkits):
    dirs = list(extra_dirs) + NCCL_DIRS + [os.path.join(tk["path"], "lib64") for tk in toolkits]
    for d in dirs:
        for lib in sorted(glob.glob(os.path.join(d, "libnccl.so.*")), reverse=True):
            version = G.nccl_version_from_filename(lib)
            if version:
                return {"version": version, "path": lib, "source": "library"}
    for inc in ["/usr/include/nccl.h", "/usr/local/include/nccl.h"] + [
            os.path.join(tk["path"], "include", "nccl.h") for tk in toolkits]:
        try:
            with open(inc, encoding="utf-8") as fh:
                version = G.nccl_version_from_header(fh.read())
        except OSError:
            continue
        if version:
            return {"version": version, "path": inc, "source": "header"}
    return {}


def collect(module):
    p = module.params
    facts = {"gpu_count": 0, "reason": "", "driver_version": "", "driver_cuda_version": "",
             "driver_cuda_source": "", "gpus": [], "toolkits": [], "nvcc": {}, "cuda_home": "", "nccl": {},
             # NVIDIA GPUs on the PCI bus, whatever the driver says (a GPU the driver cannot see is a fault
             # the cuda_toolkit stage's health check names)
             "pci_gpus": pci_nvidia_devices()["gpus"]}
    smi, reason = read_smi(module, p["timeout"])
    if smi:
        supported, source = G.driver_supported_cuda(smi)
        facts.update(gpu_count=len(smi["gpus"]), gpus=smi["gpus"], driver_version=smi["driver_version"] or "",
                     driver_cuda_version=supported or "", driver_cuda_source=source or "")
    else:
        facts["reason"] = reason
    facts["toolkits"] = find_toolkits(p["search_roots"])
    chosen = G.pick_toolkit(facts["toolkits"], p["cuda_version"] or None)
    facts["cuda_home"] = chosen["path"] if chosen else ""
    # the chosen toolkit's nvcc first, then PATH, then any toolkit's
    nvcc_dirs = [os.path.join(tk["path"], "bin") for tk in ([chosen] if chosen else []) + facts["toolkits"]]
    nvcc = next((os.path.join(d, "nvcc") for d in nvcc_dirs[:1] if os.access(os.path.join(d, "nvcc"), os.X_OK)), None)
    nvcc = nvcc or module.get_bin_path("nvcc", opt_dirs=nvcc_dirs)
    if nvcc:
        rc, out, _unused = run_bounded([nvcc, "--version"], p["timeout"])
        parsed = G.parse_nvcc_version(out) if rc == 0 else None
        if parsed:
            facts["nvcc"] = dict(parsed, path=nvcc)
    facts["nccl"] = find_nccl(p["nccl_dirs"], facts["toolkits"])
    return facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cuda_version=dict(type="str", default=""),
            search_roots=dict(type="list", elements="path", default=["/usr/local"]),
            nccl_dirs=dict(type="list", elements="path", default=[]),
            timeout=dict(type="int", default=30),
            source=dict(type="str", default="", choices=["", "repo", "distro", "runfile"]),
            runfile=dict(type="str", default=""),
            install_root=dict(type="path", default="/usr/local"),
            runfile_dir=dict(type="path", default="/var/lib/provision/cuda-runfile"),
        ),
        supports_check_mode=True,
    )
    facts = collect(module)
    env = G.toolkit_env(facts["cuda_home"]) or {"env": {}, "path": [], "ld_library_path": [], "source": []}
    plan = {}
    p = module.params
    if p["source"]:
        try:
            with open("/etc/os-release", encoding="utf-8") as fh:
                osr = os_release_dict(fh.read())
        except OSError:
            osr = {}
        family = os_family(osr)
        plan = G.toolkit_plan(facts, version=p["cuda_version"], source=p["source"], os_family=family,
                              distro_release=G.repo_distro_tag(osr.get("ID"), osr.get("VERSION_ID")),
                              runfile=p["runfile"], install_root=p["install_root"], runfile_dir=p["runfile_dir"])
    module.exit_json(changed=False, plan=plan, checks=[G.gpu_check(facts, plan)],
                     ansible_facts={"gpu_facts": facts, "provision_env_cuda_toolkit": env})


if __name__ == "__main__":
    main()
