"""gcc_toolchain, cuda_toolkit and python_env on a fresh 2-node lab: GCC >= min, no GPU -> clean skip,
a venv with torch 2.13.0 from the controller's wheelhouse on both nodes, equal versions; a re-run that
changes and copies nothing; a safe --check --diff; a node with another pin reported by name."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import bounds
from helpers import FIXTURES, LAB_INVENTORY, REPO, ansible_env, lab_name, node_exec, run_playbook, tool

pytestmark = pytest.mark.lab

LAB = lab_name("tcit")
STAGES = ["playbooks/gcc_toolchain.yml", "playbooks/cuda_toolkit.yml", "playbooks/python_env.yml"]
USER = "trainer"  # a non-root cluster_user: it runs the venv, which stays root's (root runs it too)
VENV = "/opt/provision/venv"


def stages(inventory, *extra, extra_vars=None, playbooks=None):
    """The stages in one ansible-playbook run, imported in order as site.yml does."""
    names = playbooks or STAGES
    play = inventory.parent / f"stages-{'-'.join(Path(n).stem for n in names)}.yml"
    play.write_text("".join(f"- import_playbook: {REPO / n}\n" for n in names))
    t0 = time.monotonic()
    res = run_playbook(play, lab_name=LAB, inventory=inventory, extra_args=list(extra),
                       extra_vars={"cluster_user": USER, **(extra_vars or {})}, timeout=bounds.STAGES)
    res.seconds = time.monotonic() - t0
    return res


def adhoc(inventory, module, args):
    """Run one module on every node; {host: result} from the json callback."""
    env = ansible_env(LAB, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    proc = subprocess.run([tool("ansible"), "cluster", "-i", str(inventory), "-m", module]
                          + (["-a", json.dumps(args)] if args else []),
                          env=env, capture_output=True, text=True, timeout=bounds.STAGES, check=False)
    try:
        # the JSON document starts at the first line that opens it (profile_tasks may print around it)
        start = proc.stdout.index("{\n") if proc.stdout.startswith("{") else proc.stdout.index("\n{\n") + 1
        doc, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
        return doc["plays"][0]["tasks"][0]["hosts"]
    except (ValueError, KeyError, IndexError) as exc:
        raise AssertionError(f"ansible {module}: {exc}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}") from exc


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    """A copy of the lab inventory, so one test can give node2 host_vars of its own."""
    inv = tmp_path_factory.mktemp("inv")
    shutil.copy(LAB_INVENTORY / "lab.yml", inv / "lab.yml")
    shutil.copytree(LAB_INVENTORY / "group_vars", inv / "group_vars")
    (inv / "host_vars").mkdir()
    return inv


@pytest.fixture(scope="module")
def lab(lab_factory, inventory):
    lab = lab_factory(LAB, nodes=2)
    for n in (1, 2):
        node_exec(LAB, n, f"id {USER} >/dev/null 2>&1 || useradd -m -s /bin/bash {USER}")
    first = stages(inventory)
    print(f"\nfresh run of gcc_toolchain+cuda_toolkit+python_env: {first.seconds:.1f}s")
    lab.first = first
    return lab


def test_fresh_run_green(lab):
    first = lab.first
    assert first.rc == 0, first
    assert set(first.recap) == {"node1", "node2"} and first.changed > 0, first


def test_torch_imports_on_both_nodes_as_the_cluster_user_and_the_venv_is_roots(lab):
    for n in (1, 2):
        out = node_exec(LAB, n, f"{VENV}/bin/python -c 'import torch, numpy; print(torch.__version__, numpy.__version__)'"
                                f" && stat -c %U {VENV} {VENV}/bin/python", user=USER).stdout.split()
        assert out == ["2.13.0+cpu", "2.3.5", "root", "root"], out


def test_gcc_and_gpu_facts(lab, inventory):
    gcc = adhoc(inventory, "provision.cluster.gcc_facts", {"min_version": "9"})
    for host in ("node1", "node2"):
        facts = gcc[host]["ansible_facts"]["gcc_toolchain_facts"]
        assert facts["version"].startswith("12.") and facts["meets_min"] and facts["os_family"] == "Debian"
        assert gcc[host]["plan"]["missing"] == []
    gpu = adhoc(inventory, "provision.cluster.gpu_facts", {})
    for host in ("node1", "node2"):
        facts = gpu[host]["ansible_facts"]["gpu_facts"]
        assert facts["gpu_count"] == 0 and "nvidia-smi not found" in facts["reason"], facts
        assert gpu[host]["ansible_facts"]["provision_env_cuda_toolkit"]["path"] == []


def test_gcc_below_min_fails_with_one_line(lab, inventory):
    res = stages(inventory, extra_vars={"gcc_toolchain_min_version": "13"}, playbooks=STAGES[:1])
    assert res.rc != 0
    assert "GCC 12.2.0 at /usr/bin/gcc is below gcc_toolchain_min_version 13" in res.output, res
    assert "Traceback" not in res.output


def test_rerun_changes_and_copies_nothing(lab, inventory):
    before = node_exec(LAB, 1, "stat -c %Y /var/cache/provision/wheelhouse/torch-*.whl").stdout
    again = stages(inventory, "-v")
    print(f"\nre-run of gcc_toolchain+cuda_toolkit+python_env: {again.seconds:.1f}s")
    assert again.rc == 0, again
    assert again.changed == 0, again
    assert '"copied"' not in again.output and "pip install" not in again.output
    assert node_exec(LAB, 1, "stat -c %Y /var/cache/provision/wheelhouse/torch-*.whl").stdout == before


def test_check_diff_is_safe(lab, inventory):
    check = stages(inventory, "--check", "--diff")
    assert check.rc == 0, check
    assert check.changed == 0, check


def test_node_with_another_pin_is_named(lab, inventory):
    (inventory / "host_vars" / "node2.yml").write_text('python_env_extra_packages: ["numpy==2.2.6"]\n')
    try:
        res = stages(inventory, playbooks=STAGES[2:])
    finally:
        (inventory / "host_vars" / "node2.yml").unlink()
    assert res.rc != 0, res
    assert "versions differ on node2" in res.output, res
    assert "2.2.6*" in res.output and "numpy" in res.output
    # node2 got only the one wheel it lacked, node1 none
    wheels2 = node_exec(LAB, 2, "ls /var/cache/provision/wheelhouse").stdout
    wheels1 = node_exec(LAB, 1, "ls /var/cache/provision/wheelhouse").stdout
    assert "numpy-2.2.6" in wheels2 and "numpy-2.2.6" not in wheels1


def test_cuda_toolkit_refuses_newer_than_driver_on_a_replayed_gpu_node(lab, inventory):
    """No GPU here: node1 gets a stand-in nvidia-smi that prints the real H100 captures (driver
    580.159.04, CUDA 13.0); asking for CUDA 13.1 must stop node1 with one line, node2 (no GPU) skips."""
    h100 = FIXTURES / "h100-node"
    subprocess.run(["podman", "cp", str(h100 / "nvidia-smi-q.xml"), f"{LAB}-node1:/tmp/smi.xml"], check=True)
    subprocess.run(["podman", "cp", str(h100 / "nvidia-smi-query-gpu.csv"), f"{LAB}-node1:/tmp/smi.csv"], check=True)
    node_exec(LAB, 1, "printf '#!/bin/sh\\ncase \"$1\" in -q) cat /tmp/smi.xml;; *) cat /tmp/smi.csv;; esac\\n'"
                      " > /usr/local/bin/nvidia-smi && chmod 755 /usr/local/bin/nvidia-smi")
    try:
        res = stages(inventory, extra_vars={"cuda_toolkit_version": "13.1"}, playbooks=STAGES[1:2])
    finally:
        node_exec(LAB, 1, "rm -f /usr/local/bin/nvidia-smi /tmp/smi.xml /tmp/smi.csv")
    assert res.rc != 0 and res.recap["node1"]["failed"] == 1 and res.recap["node2"]["failed"] == 0, res
    assert ("node1: CUDA toolkit 13.1 is newer than driver 580.159.04 supports (CUDA 13.0); "
            "set cuda_toolkit_version <= 13.0 or upgrade the driver") in res.output, res
