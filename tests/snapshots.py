"""Converged labs from snapshots: the name of the snapshot that holds exactly this content.

A converged lab (site.yml green on fresh nodes) is saved once with `provision lab save` and every later
test that needs converged nodes starts from it (`provision lab up --from`, seconds) instead of running
site.yml again. The snapshot's name carries a digest of everything that shapes the nodes: the roles,
plugins, playbooks, the lab inventory and its group_vars, the lab code and its image recipes, ansible.cfg,
and the ansible-core version. Any change to them names another snapshot, which is made fresh.
PROVISION_TEST_SNAPSHOTS=fresh never reuses one (each session converges its labs itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

from helpers import REPO, ansible_env, tool

INPUTS = ("roles", "plugins", "playbooks", "site.yml", "ansible.cfg", "requirements.yml", "galaxy.yml",
          "inventory/lab", "src/provision/lab")


def content_digest() -> str:
    import ansible.release

    digest = hashlib.sha256(ansible.release.__version__.encode())
    for top in INPUTS:
        base = REPO / top
        files = [base] if base.is_file() else sorted(
            p for p in base.rglob("*") if p.is_file() and not any(
                part.startswith(".") or part == "__pycache__" for part in p.relative_to(REPO).parts))
        for path in files:
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def name_for(lab: str, nodes: int) -> str:
    return f"{lab}-{nodes}n-{content_digest()}"


def reuse() -> bool:
    return os.environ.get("PROVISION_TEST_SNAPSHOTS", "reuse") != "fresh"


def _listing() -> list[dict]:
    proc = subprocess.run([tool("provision"), "lab", "snapshots", "--json"], cwd=REPO, env=ansible_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    return json.loads(proc.stdout or "{}").get("snapshots", []) if proc.returncode == 0 else []


def exists(name: str) -> bool:
    return any(s["snapshot"] == name for s in _listing())


def forget_older(lab: str, keep: str) -> None:
    """Snapshots of this lab made for other content (each holds a node's worth of layers)."""
    for snap in _listing():
        if snap["snapshot"].startswith(f"{lab}-") and snap["snapshot"] != keep:
            subprocess.run([tool("provision"), "lab", "forget", snap["snapshot"]], cwd=REPO, env=ansible_env(),
                           capture_output=True, text=True, timeout=300, check=False)
