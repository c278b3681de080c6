"""slurm.conf of the lab's SLURM (no podman)."""

from __future__ import annotations

import helpers  # noqa: F401

from provision.lab import slurm


def test_slurm_conf_names_every_node_by_address_and_one_partition():
    nodes = [{"name": f"node{i}", "address": f"10.89.7.{10 + i}"} for i in (1, 2, 3)]
    conf = slurm.slurm_conf(nodes)
    lines = conf.splitlines()
    assert "SlurmctldHost=node1(10.89.7.11)" in lines
    assert [line.split()[0] for line in lines if line.startswith("NodeName=")] == ["NodeName=node1", "NodeName=node2",
                                                                                   "NodeName=node3"]
    assert "NodeName=node3 NodeAddr=10.89.7.13 CPUs=2 RealMemory=1000 State=UNKNOWN" in lines
    assert "PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP" in lines
    # no cgroup plugin: the containers share the host's cgroup tree
    assert "ProctrackType=proctrack/linuxproc" in lines and "TaskPlugin=task/none" in lines


def test_the_munge_key_is_made_once_and_private(tmp_path):
    key = slurm._key(tmp_path)
    assert len(key) == 1024 and slurm._key(tmp_path) == key
    assert (tmp_path / "munge.key").stat().st_mode & 0o777 == 0o600
