# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""GPU, driver, CUDA toolkit and NCCL facts: parsers and the toolkit decision (pure Python).

Used by the ``gpu_facts`` module, the cuda_toolkit role and ``provision verify``. Every parser
takes the text a tool printed and returns plain data; nothing here runs a command.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import xml.etree.ElementTree as ET

# nvidia-smi --query-gpu fields, in the order gpu_facts asks for them
QUERY_FIELDS = ("index", "name", "uuid", "pci.bus_id", "driver_version", "memory.total", "compute_cap")

# Minimum Linux driver for each CUDA toolkit release (CUDA release notes, table 3 "CUDA Toolkit
# and Corresponding Driver Versions", GA drivers). Used only when the driver does not report the
# CUDA version it supports itself (nvidia-smi older than 410, or no XML); the driver's own
# <cuda_version> is preferred.
DRIVER_MIN_FOR_CUDA = (
    ("11.0", "450.36.06"), ("11.1", "455.23.05"), ("11.2", "460.27.03"), ("11.3", "465.19.01"),
    ("11.4", "470.42.01"), ("11.5", "495.29.05"), ("11.6", "510.39.01"), ("11.7", "515.43.04"),
    ("11.8", "520.61.05"), ("12.0", "525.60.13"), ("12.1", "530.30.02"), ("12.2", "535.54.03"),
    ("12.3", "545.23.06"), ("12.4", "550.54.14"), ("12.5", "555.42.02"), ("12.6", "560.28.03"),
    ("12.8", "570.26"), ("12.9", "575.51.03"), ("13.0", "580.65.06"),
)


def vtuple(text):
    """'580.159.04' -> (580, 159, 4); non-numeric parts end the tuple."""
    out = []
    for part in re.split(r"[.\-+]", str(text or "").strip()):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def _mib(text):
    m = re.match(r"\s*(\d+)\s*MiB", text or "")
    return int(m.group(1)) if m else None


def _na(value):
    value = (value or "").strip()
    return None if value in ("", "N/A", "[N/A]", "[Not Supported]") else value


def parse_query_csv(text):
    """Rows of `nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader`."""
    gpus = []
    for row in csv.reader(io.StringIO(text)):
        row = [c.strip() for c in row]
        if not row or not row[0]:
            continue
        if len(row) != len(QUERY_FIELDS):
            raise ValueError(f"nvidia-smi CSV row has {len(row)} fields, expected {len(QUERY_FIELDS)}: {row!r}")
        rec = dict(zip(QUERY_FIELDS, row))
        gpus.append({
            "index": int(rec["index"]),
            "name": rec["name"],
            "uuid": rec["uuid"],
            "pci_bus_id": rec["pci.bus_id"],
            "driver_version": _na(rec["driver_version"]),
            "memory_total_mib": _mib(rec["memory.total"]),
            "compute_capability": _na(rec["compute_cap"]),
        })
    return gpus


def parse_smi_xml(text):
    """`nvidia-smi -q -x`: driver version, the CUDA version the driver supports, and the GPUs."""
    root = ET.fromstring(text)
    out = {
        "driver_version": _na(root.findtext("driver_version")),
        "driver_cuda_version": _na(root.findtext("cuda_version")),
        "gpus": [],
    }
    for i, gpu in enumerate(root.findall("gpu")):
        out["gpus"].append({
            "index": i,  # nvidia-smi lists GPUs in PCI bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID
            "name": _na(gpu.findtext("product_name")),
            "architecture": _na(gpu.findtext("product_architecture")),
            "uuid": _na(gpu.findtext("uuid")),
            "pci_bus_id": _na(gpu.findtext("pci/pci_bus_id")) or gpu.get("id"),
            "memory_total_mib": _mib(gpu.findtext("fb_memory_usage/total")),
            "persistence_mode": _na(gpu.findtext("persistence_mode")),
            "mig_mode": _na(gpu.findtext("mig_mode/current_mig")),
        })
    return out


def merge_gpus(xml_gpus, csv_gpus):
    """XML has the architecture and MIG mode, the CSV the compute capability: join on UUID."""
    by_uuid = {g["uuid"]: dict(g) for g in csv_gpus}
    merged = []
    for g in xml_gpus or csv_gpus:
        rec = dict(by_uuid.get(g["uuid"], {}))
        rec.update({k: v for k, v in g.items() if v is not None})
        rec.pop("driver_version", None)
        merged.append(rec)
    return sorted(merged, key=lambda g: g["index"])


def parse_nvcc_version(text):
    """'Cuda compilation tools, release 13.0, V13.0.88' -> {'release': '13.0', 'version': '13.0.88'}."""
    m = re.search(r"release\s+(\d+\.\d+),\s*V(\d+(?:\.\d+)*)", text or "")
    if not m:
        return None
    return {"release": m.group(1), "version": m.group(2)}


def parse_cuda_version_json(text):
    """/usr/local/cuda-X.Y/version.json -> '12.4.1' (the 'cuda' entry)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    entry = data.get("cuda") if isinstance(data, dict) else None
    return entry.get("version") if isinstance(entry, dict) else None


def parse_cuda_version_txt(text):
    """Older toolkits: version.txt 'CUDA Version 10.2.89'."""
    m = re.search(r"CUDA Version\s+(\d+(?:\.\d+)+)", text or "")
    return m.group(1) if m else None


_CUDA_H = re.compile(r"^\s*#\s*define\s+CUDA_VERSION\s+(\d+)\b", re.M)


def parse_cuda_h_version(text):
    """A toolkit's include/cuda.h '#define CUDA_VERSION 13000' -> '13.0' (1000 * major + 10 * minor): the
    version a toolkit from NVIDIA's apt packages has where it has no version.json (the nvidia/cuda
    images' layout, e.g. the H200 image's /usr/local/cuda-13.0: tests/fixtures/h200-proof/cuda-layout.txt)."""
    m = _CUDA_H.search(text or "")
    if not m:
        return None
    n = int(m.group(1))
    return f"{n // 1000}.{n % 1000 // 10}" if n >= 1000 else None


_NCCL_SO = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)$")
_NCCL_H = re.compile(r"#define\s+NCCL_(MAJOR|MINOR|PATCH)\s+(\d+)")


def nccl_version_from_filename(name):
    m = _NCCL_SO.search(os.path.basename(name))
    return m.group(1) if m else None


def nccl_version_from_header(text):
    parts = dict(_NCCL_H.findall(text or ""))
    if {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
    return None


def nccl_version_from_int(code):
    """torch.cuda.nccl.version() gives a tuple on new torch, an int (2.x: MAJOR*10000+MINOR*100+PATCH
    from 2.9 on; MAJOR*1000+MINOR*100+PATCH before) on old torch."""
    if isinstance(code, (list, tuple)):
        return ".".join(str(int(p)) for p in code)
    code = int(code)
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def parse_torch_versions(text):
    """The fixture format torch-versions.txt (python line, torch/cuda/nccl/device line, backends)."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    out = {"python": lines[0].split()[0] if lines else None}
    if len(lines) > 1:
        m = re.match(r"(\S+)\s+(\S+)\s+\(([\d,\s]+)\)\s+(.*)\s+(\d+)$", lines[1])
        if m:
            out.update(torch=m.group(1), torch_cuda=None if m.group(2) == "None" else m.group(2),
                       nccl=nccl_version_from_int(tuple(int(x) for x in m.group(3).split(","))),
                       device_name=m.group(4), device_count=int(m.group(5)))
    if len(lines) > 2:
        toks = lines[2].split()
        out["backends"] = {toks[i]: toks[i + 1] == "True" for i in range(0, len(toks) - 1, 2)}
    return out


def cuda_max_for_driver(driver_version):
    """The newest CUDA release a driver supports, from the fallback table."""
    best = None
    dv = vtuple(driver_version)
    if not dv:
        return None
    for cuda, min_driver in DRIVER_MIN_FOR_CUDA:
        if dv >= vtuple(min_driver):
            best = cuda
    return best


def driver_supported_cuda(smi):
    """(version, source): the driver's own report when there is one, the table otherwise."""
    if smi.get("driver_cuda_version"):
        return smi["driver_cuda_version"], "nvidia-smi"
    table = cuda_max_for_driver(smi.get("driver_version"))
    return table, ("driver table" if table else None)


def toolkit_env(cuda_home):
    """The provision_env_cuda_toolkit fact for a toolkit at cuda_home."""
    if not cuda_home:
        return {}
    return {
        "env": {"CUDA_HOME": cuda_home, "CUDA_PATH": cuda_home},
        "path": [f"{cuda_home}/bin"],
        "ld_library_path": [f"{cuda_home}/lib64"],
        "source": [],
    }


def pick_toolkit(toolkits, wanted=None):
    """Choose the toolkit to export: the one of the wanted release, else <root>/cuda (/usr/local/cuda: the
    distribution's choice, an alternatives link in NVIDIA's images), else the newest."""
    if not toolkits:
        return None
    if wanted:
        for tk in toolkits:
            if vtuple(tk["version"])[:2] == vtuple(wanted)[:2]:
                return tk
        return None
    for tk in toolkits:
        if os.path.basename(tk["path"]) == "cuda":
            return tk
    return max(toolkits, key=lambda tk: vtuple(tk["version"]))


# Where root puts the CUDA runfile and lets its installer extract: a directory only root can use
# (the role makes it root:root 0700), never a predictable name in /tmp that another user could take first.
RUNFILE_DIR = "/var/lib/provision/cuda-runfile"


def toolkit_plan(facts, *, version, source, os_family="Debian", distro_release="", runfile=None,
                 install_root="/usr/local", runfile_dir=RUNFILE_DIR):
    """Decide what the cuda_toolkit role does on a host.

    Returns a dict with ``action`` one of skip|present|install|refuse|none and, for install, the
    packages/commands. ``facts`` is the gpu_facts result.
    """
    if not facts.get("gpu_count"):
        return {"action": "skip", "reason": facts.get("reason") or "no GPU"}
    supported = facts.get("driver_cuda_version")
    want = str(version or "").strip()
    if not want:
        # no version asked: whatever is installed is fine; nothing to install
        return {"action": "present" if facts.get("toolkits") else "none",
                "reason": "cuda_toolkit_version is empty: nothing to install"}
    if supported and vtuple(want)[:2] > vtuple(supported)[:2]:
        return {"action": "refuse",
                "reason": (f"CUDA toolkit {want} is newer than driver {facts.get('driver_version')} supports "
                           f"(CUDA {supported}); set cuda_toolkit_version <= {supported} or upgrade the driver")}
    if pick_toolkit(facts.get("toolkits") or [], want):
        return {"action": "present", "reason": f"CUDA {want} is installed"}
    major_minor = ".".join(str(p) for p in vtuple(want)[:2])
    dashed = major_minor.replace(".", "-")
    home = f"{install_root}/cuda-{major_minor}"
    if source == "distro":
        pkgs = ["nvidia-cuda-toolkit"] if os_family == "Debian" else ["cuda-toolkit"]
        return {"action": "install", "method": "package", "packages": pkgs, "cuda_home": "/usr",
                "reason": "distribution package (its CUDA release is the distribution's)"}
    if source == "repo":
        return {"action": "install", "method": "package", "packages": [f"cuda-toolkit-{dashed}"],
                "repo": vendor_repo(os_family, distro_release), "cuda_home": home,
                "reason": f"NVIDIA repository package cuda-toolkit-{dashed}"}
    if source == "runfile":
        if not runfile:
            return {"action": "refuse", "reason": "cuda_toolkit_source=runfile needs cuda_toolkit_runfile "
                                                  "(a cuda_*_linux.run on the controller)"}
        return {"action": "install", "method": "runfile", "cuda_home": home, "runfile_dir": runfile_dir,
                "argv": runfile_argv(f"{runfile_dir}/{os.path.basename(runfile)}", home, tmpdir=runfile_dir),
                "reason": f"runfile {os.path.basename(runfile)}"}
    return {"action": "refuse", "reason": f"unknown cuda_toolkit_source {source!r}: use distro, repo or runfile"}


def runfile_argv(runfile_on_node, cuda_home, tmpdir=None):
    """Toolkit only (never the driver), silently, into cuda_home, no /usr/local/cuda symlink games;
    tmpdir: where the installer extracts and works instead of /tmp (--tmpdir, CUDA 7.5 and later)."""
    return ["sh", runfile_on_node, "--silent", "--toolkit", f"--toolkitpath={cuda_home}",
            "--no-man-page", "--override"] + ([f"--tmpdir={tmpdir}"] if tmpdir else [])


def vendor_repo(os_family, distro_release):
    """NVIDIA's CUDA repository for a distribution (keyring package / repo file URL)."""
    base = "https://developer.download.nvidia.com/compute/cuda/repos"
    rel = str(distro_release or "")
    if os_family == "Debian":
        # distro_release like 'ubuntu2204' or 'debian12'
        return {"keyring_deb": f"{base}/{rel}/x86_64/cuda-keyring_1.1-1_all.deb"}
    if os_family == "RedHat":
        return {"repo_file": f"{base}/{rel}/x86_64/cuda-{rel}.repo"}
    return {}


def repo_distro_tag(distribution, major_version):
    """'Ubuntu', '22.04' -> 'ubuntu2204'; 'Debian', '12' -> 'debian12'; 'Rocky', '9' -> 'rhel9'."""
    d = (distribution or "").lower()
    ver = str(major_version or "")
    if d == "ubuntu":
        return "ubuntu" + ver.replace(".", "")
    if d == "debian":
        return "debian" + ver.split(".", maxsplit=1)[0]
    return "rhel" + ver.split(".", maxsplit=1)[0]


def gpu_check(facts, plan=None):
    """The Check record of a gpu_facts reading: skipped without GPU, failed when the toolkit asked for
    cannot run on the driver, else what was found."""
    if not facts.get("gpu_count"):
        return {"check": "gpu", "status": "skip", "detail": facts.get("reason") or "no GPU", "fix": ""}
    names = sorted({g.get("name", "?") for g in facts.get("gpus") or []})
    detail = "%s x %s, driver %s (CUDA <= %s), toolkit %s" % (
        facts["gpu_count"], ", ".join(names), facts.get("driver_version"), facts.get("driver_cuda_version"),
        facts.get("cuda_home") or "none")
    if (plan or {}).get("action") == "refuse":
        return {"check": "gpu", "status": "fail", "detail": plan.get("reason") or detail,
                "fix": "set cuda_toolkit_version to a release the driver supports, or upgrade the driver"}
    return {"check": "gpu", "status": "pass", "detail": detail, "fix": ""}
