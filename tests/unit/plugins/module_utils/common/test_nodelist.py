"""Node-list parsers (module_utils/common/nodelist.py) and the provision.cluster.nodelist inventory plugin."""

from __future__ import annotations

import json
import subprocess

import pytest

import helpers
from ansible_collections.provision.cluster.plugins.module_utils.common import nodelist as N


def test_slurm_compressed_ranges_expand_like_scontrol():
    # the form from the issue and SLURM's docs (`scontrol show hostnames` order: as written)
    assert N.parse_slurm_nodelist("gpu[01-04,07],cpu3") == [
        ("gpu01", None), ("gpu02", None), ("gpu03", None), ("gpu04", None), ("gpu07", None), ("cpu3", None)]
    assert [n for n, _ in N.parse_slurm_nodelist("node[1-2]")] == ["node1", "node2"]
    assert [n for n, _ in N.parse_slurm_nodelist("rack[1-2]-n[01-02]")] == [
        "rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]


def test_slurm_tasks_per_node_become_slots():
    assert N.parse_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert N.parse_slurm_nodelist("n[1-4]", "8(x2),4(x2)") == [("n1", 8), ("n2", 8), ("n3", 4), ("n4", 4)]
    with pytest.raises(N.NodeListError, match="gives 2 counts for 3 nodes"):
        N.parse_slurm_nodelist("n[1-3]", "1(x2)")
    with pytest.raises(N.NodeListError):
        N.parse_tasks_per_node("2(y3)")


def test_bad_slurm_list_is_one_clear_error():
    with pytest.raises(N.NodeListError, match="cannot expand node list"):
        N.parse_slurm_nodelist("gpu[01-")


def test_hostfile_deepspeed_and_openmpi_forms():
    text = "# the job\nworker-0 slots=4\n\nworker-1 slots=4 max_slots=8  # big\nworker-2\n"
    assert N.parse_hostfile(text) == [("worker-0", 4), ("worker-1", 4), ("worker-2", None)]
    with pytest.raises(N.NodeListError, match="listed twice"):
        N.parse_hostfile("a slots=1\na slots=2\n")
    with pytest.raises(N.NodeListError, match="line 1"):
        N.parse_hostfile("a slots=x\n")


def test_pbs_repeated_names_are_slots_in_first_seen_order():
    assert N.parse_pbs_nodefile("n2\nn2\nn1\nn2\nn1\n\n") == [("n2", 3), ("n1", 2)]


def test_node_number():
    assert N.node_number("gpu07") == 7 and N.node_number("node12") == 12 and N.node_number("login") is None


# ---- the inventory plugin through ansible-inventory ----------------------------------------

def inventory(path, **env):
    proc = subprocess.run([helpers.tool("ansible-inventory"), "-i", str(path), "--list", "-v"], cwd=helpers.REPO,
                          env=helpers.ansible_env(**env), capture_output=True, text=True, timeout=120, check=False)
    out = proc.stdout
    return proc, (json.loads(out[out.find("{"):]) if proc.returncode == 0 and "{" in out else None)


def plain(value):
    return value.get("__ansible_unsafe", value) if isinstance(value, dict) else value


def hostvars(data, host):
    return {k: plain(v) for k, v in data["_meta"]["hostvars"][host].items()}


def test_plugin_slurm_list_with_address_template_and_vars(tmp_path):
    cfg = tmp_path / "lab.nodelist.yml"
    cfg.write_text("plugin: provision.cluster.nodelist\nsource: slurm\n"
                   "address_template: '10.89.5.{{ number + 10 }}'\n"
                   "vars: {ansible_host: 'lab-{{ name }}', ansible_user: root}\n")
    proc, data = inventory(cfg, SLURM_JOB_NODELIST="node[1-2]", SLURM_TASKS_PER_NODE="2(x2)")
    assert data, proc.stderr
    assert data["cluster"]["hosts"] == ["node1", "node2"]
    h2 = hostvars(data, "node2")
    assert h2["cluster_address"] == "10.89.5.12" and h2["ansible_host"] == "lab-node2"
    assert h2["slots"] == 2 and h2["nodelist_index"] == 2 and h2["nodelist_source"] == "slurm"


def test_plugin_pbs_file_with_address_map_and_group(tmp_path):
    (tmp_path / "nodes").write_text("cn7\ncn7\ncn3\ncn3\n")
    cfg = tmp_path / "pbs.nodelist.yml"
    cfg.write_text("plugin: provision.cluster.nodelist\ngroup: train\naddress_map: {cn7: 192.0.2.7}\n")
    proc, data = inventory(cfg, PBS_NODEFILE=str(tmp_path / "nodes"))
    assert data, proc.stderr
    assert data["train"]["hosts"] == ["cn7", "cn3"]
    assert hostvars(data, "cn7")["cluster_address"] == "192.0.2.7"
    assert hostvars(data, "cn3")["cluster_address"] == "cn3" and hostvars(data, "cn3")["slots"] == 2


def test_plugin_hostfile_relative_to_config(tmp_path):
    (tmp_path / "hostfile").write_text("worker-0 slots=8\nworker-1 slots=8\n")
    cfg = tmp_path / "ds.nodelist.yml"
    cfg.write_text("plugin: provision.cluster.nodelist\nhostfile: hostfile\n"
                   "compose: {launchers_slots: slots // 2}\n")
    proc, data = inventory(cfg)
    assert data, proc.stderr
    assert data["cluster"]["hosts"] == ["worker-0", "worker-1"]
    # compose gives the int on ansible-core >= 2.19, its text before (no native types then)
    assert str(hostvars(data, "worker-1")["launchers_slots"]) == "4"


def test_plugin_without_a_node_list_fails_with_one_line(tmp_path):
    cfg = tmp_path / "x.nodelist.yml"
    cfg.write_text("plugin: provision.cluster.nodelist\n")
    env = {"ANSIBLE_INVENTORY_UNPARSED_FAILED": "1", "SLURM_JOB_NODELIST": "", "PBS_NODEFILE": ""}
    proc, _ = inventory(cfg, **env)
    assert proc.returncode != 0
    # ansible-core < 2.19 wraps its warnings at the terminal's width
    assert "no node list: set hostfile, nodelist (SLURM_JOB_NODELIST) or PBS_NODEFILE" in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr


def test_plugin_is_documented():
    proc = subprocess.run([helpers.tool("ansible-doc"), "-t", "inventory", "provision.cluster.nodelist"],
                          cwd=helpers.REPO, env=helpers.ansible_env(), capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    for word in ("SLURM_JOB_NODELIST", "PBS_NODEFILE", "address_template", "address_map", "slots"):
        assert word in proc.stdout
