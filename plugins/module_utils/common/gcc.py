# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""GCC toolchain: version parsing and the per-distribution plan (pure Python).

The plan says which packages give a GCC >= the minimum and, on the EL family, which Software
Collection (gcc-toolset-N on EL8+, devtoolset-N on EL7) and what it must put in the environment.
The environment is exported explicitly (PATH, LD_LIBRARY_PATH, ...) for the shell_env block, so
login AND non-interactive shells (ssh node cmd, pdsh, DeepSpeed) get it; never `scl enable`.
"""
from __future__ import annotations

import re

# GCC major version shipped by each EL major release (system compiler)
EL_SYSTEM_GCC = {7: 4, 8: 8, 9: 11, 10: 14}
# toolsets that exist per EL major release (Red Hat Developer Toolset / GCC Toolset life cycle)
EL_TOOLSETS = {
    7: [7, 8, 9, 10, 11],            # devtoolset-N (SCL; centos-release-scl on CentOS 7)
    8: [9, 10, 11, 12, 13, 14],      # gcc-toolset-N (AppStream)
    9: [12, 13, 14, 15],             # gcc-toolset-N (AppStream)
    10: [15],
}


def parse_gcc_version(text):
    """First line of `gcc --version` -> '13.3.0' ('gcc (Ubuntu 13.3.0-6ubuntu2~24.04.1) 13.3.0')."""
    first = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)\s*(?:\d{8})?\s*(?:\(.*\))?\s*$", first)
    if not m:
        m = re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", first)
    return m.group(1) if m else None


def vtuple(text):
    return tuple(int(p) for p in re.findall(r"\d+", str(text or ""))[:3])


def meets(version, minimum):
    return bool(version) and vtuple(version) >= vtuple(minimum)


def scl_name(el_major, toolset):
    return f"devtoolset-{toolset}" if el_major == 7 else f"gcc-toolset-{toolset}"


def scl_env(name):
    """What /opt/rh/<name>/enable exports, as the provision_env contract."""
    root = f"/opt/rh/{name}/root"
    return {
        "env": {"CC": f"{root}/usr/bin/gcc", "CXX": f"{root}/usr/bin/g++",
                "CUDAHOSTCXX": f"{root}/usr/bin/g++"},
        "path": [f"{root}/usr/bin"],
        "ld_library_path": [f"{root}/usr/lib64", f"{root}/usr/lib"],
        "source": [],
    }


def plan(os_family, major, min_version, *, toolset=None, debian_packages=None):
    """Decide how a host gets GCC >= min_version.

    Returns {kind: system|scl, packages: [...], pre_packages: [...], scl: name|None,
    enable: path|None, gcc: path of the gcc to check, env: provision_env dict, reason: str}.
    Raises ValueError with one line when no known route reaches min_version.
    """
    min_major = vtuple(min_version)[0] if vtuple(min_version) else 0
    empty_env = {"env": {}, "path": [], "ld_library_path": [], "source": []}
    if os_family == "Debian":
        return {"kind": "system", "packages": list(debian_packages or ["gcc", "g++", "make"]),
                "pre_packages": [], "scl": None, "enable": None, "gcc": "gcc", "env": empty_env,
                "reason": "distribution packages"}
    if os_family != "RedHat":
        raise ValueError(f"gcc_toolchain supports the Debian and RedHat families, not {os_family!r}")
    el = int(str(major).split(".", maxsplit=1)[0])
    system = EL_SYSTEM_GCC.get(el)
    if toolset is None and system is not None and system >= min_major:
        return {"kind": "system", "packages": ["gcc", "gcc-c++", "make"], "pre_packages": [], "scl": None,
                "enable": None, "gcc": "gcc", "env": empty_env,
                "reason": f"EL{el} system GCC {system} >= {min_version}"}
    available = EL_TOOLSETS.get(el, [])
    if toolset is not None:
        chosen = int(toolset)
        if chosen not in available:
            raise ValueError(f"{scl_name(el, chosen)} does not exist on EL{el} (available: "
                             f"{', '.join(str(t) for t in available) or 'none'})")
    else:
        fits = [t for t in available if t >= min_major]
        if not fits:
            raise ValueError(f"no GCC >= {min_version} for EL{el} (system GCC {system}, toolsets "
                             f"{available}); lower gcc_toolchain_min_version")
        chosen = fits[0]
    name = scl_name(el, chosen)
    pkgs = [f"{name}-gcc", f"{name}-gcc-c++", f"{name}-binutils", "make"]
    return {
        "kind": "scl", "packages": pkgs,
        # EL7: the SCL repository itself comes from centos-release-scl (CentOS) first
        "pre_packages": ["centos-release-scl"] if el == 7 else [],
        "scl": name, "enable": f"/opt/rh/{name}/enable", "gcc": f"/opt/rh/{name}/root/usr/bin/gcc",
        "env": scl_env(name),
        "reason": f"EL{el} system GCC {system} < {min_version}: {name}",
    }


def os_release_dict(text):
    kv = {}
    for line in (text or "").splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            kv[k.strip()] = v.strip().strip('"').strip("'")
    return kv


def os_family(kv):
    """The Ansible os_family of an os-release dict."""
    ids = [kv.get("ID", "")] + kv.get("ID_LIKE", "").split()
    if any(i in ("debian", "ubuntu") for i in ids):
        return "Debian"
    if any(i in ("rhel", "fedora", "centos", "rocky", "almalinux", "ol") for i in ids):
        return "RedHat"
    return kv.get("ID", "unknown").capitalize()


def parse_os_release(text):
    """/etc/os-release -> (os_family, major version, pretty name), the way Ansible names families."""
    kv = os_release_dict(text)
    family = os_family(kv)
    major = kv.get("VERSION_ID", "").split(".")[0]
    return family, major, kv.get("PRETTY_NAME", "")


def dpkg_query_argv(dpkg_query, packages):
    return [dpkg_query, "-W", "-f=${Package} ${db:Status-Abbrev}\n"] + list(packages)


def rpm_query_argv(rpm, packages):
    return [rpm, "-q", "--qf", "%{NAME}\n"] + list(packages)


def missing_packages(family, packages, stdout):
    """Packages of the plan that are not installed, from dpkg-query -W / rpm -q output."""
    installed = set()
    for line in (stdout or "").splitlines():
        parts = line.split()
        if not parts:
            continue
        if family == "Debian":
            # 'gcc ii ' : installed; 'gcc un' / 'rc' : not
            if len(parts) >= 2 and parts[1].startswith("ii"):
                installed.add(parts[0].split(":")[0])
        elif "not installed" not in line:
            installed.add(parts[0])
    return [p for p in packages if p not in installed]


def gcc_check(facts, node=None):
    """The Check record of a gcc_facts reading: GCC found and at least the minimum."""
    found = "GCC %s at %s" % (facts["version"], facts.get("path")) if facts.get("version") else "no GCC found"
    if facts.get("meets_min"):
        return {"check": "gcc", "status": "pass", "detail": "%s >= %s" % (found, facts.get("min_version")), "fix": ""}
    limit = " --limit %s" % node if node else ""
    return {"check": "gcc", "status": "fail", "detail": "%s, need >= %s" % (found, facts.get("min_version")),
            "fix": "ansible-playbook site.yml --tags gcc_toolchain%s (gcc_toolchain_min_version=%s)"
                   % (limit, facts.get("min_version"))}
