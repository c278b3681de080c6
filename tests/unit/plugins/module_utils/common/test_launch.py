"""plugins/module_utils/common/launch.py: the launch_dir decision and launch_job's job control."""

from __future__ import annotations

import os
import sys
import time

import pytest

import helpers  # noqa: F401  (puts collections/ on sys.path)
from ansible_collections.provision.cluster.plugins.module_utils.common import launch as U


# ---- launch_dir decision -------------------------------------------------------------------

def test_plan_files(tmp_path):
    files = {"a": {"content": "x\n", "mode": "0644"}, "b": {"content": "y\n", "mode": "0755"},
             "c": {"content": "z\n", "mode": "0644"}}
    (tmp_path / "a").write_text("x\n")
    os.chmod(tmp_path / "a", 0o644)
    (tmp_path / "b").write_text("y\n")
    os.chmod(tmp_path / "b", 0o644)
    assert U.plan_files(str(tmp_path), files) == [("b", "mode"), ("c", "missing")]
    (tmp_path / "a").write_text("changed\n")
    assert ("a", "content") in U.plan_files(str(tmp_path), files)


# ---- job control (local processes) ---------------------------------------------------------

def _poll_until_done(runs, run_id, limit=30):
    out, offset = "", 0
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        res = U.poll_job(runs, run_id, offset, wait=1)
        out += res["output"]
        offset = res["offset"]
        if not res["running"]:
            return out, res["exit_status"]
    raise AssertionError("job did not end")


def test_job_output_and_exit_status(tmp_path):
    runs = str(tmp_path / "runs")
    U.start_job(runs, "r1", [sys.executable, "-c", "import sys; print('hello'); sys.stderr.write('err\\n'); sys.exit(4)"])
    out, status = _poll_until_done(runs, "r1")
    assert "hello" in out and "err" in out and status == 4
    U.start_job(runs, "r2", ["sh", "-c", "echo one; sleep 0.5; echo two"])
    out, status = _poll_until_done(runs, "r2")
    assert out == "one\ntwo\n" and status == 0


def test_poll_wait_is_bounded_and_stop_kills_the_group(tmp_path):
    runs = str(tmp_path / "runs")
    U.start_job(runs, "r", ["sh", "-c", "sleep 60 & sleep 60; echo never"])
    started = time.monotonic()
    res = U.poll_job(runs, "r", 0, wait=1)
    assert res["running"] and res["exit_status"] is None and 0.9 < time.monotonic() - started < 5
    assert U.stop_job(runs, "r", grace=2) is True
    out, status = _poll_until_done(runs, "r", limit=10)
    assert "never" not in out and status == 128 + 15
    pgid = int(open(os.path.join(runs, "r", "pid")).read())
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert U.stop_job(runs, "r") is False


def test_run_ids_cannot_escape(tmp_path):
    for bad in ("", "../x", ".hidden"):
        with pytest.raises(ValueError):
            U.run_dir(str(tmp_path), bad)
    with pytest.raises(FileNotFoundError):
        U.poll_job(str(tmp_path), "nope")


# ---- verify's check of a launch directory (launch_checks, the launch_files_info module) --------

from ansible_collections.provision.cluster.plugins.filter import launchers as L  # noqa: E402

CLUSTER = ["node1", "node2", "node3"]
EXPECT = {"nodes": CLUSTER, "master_addr": "10.89.77.11", "master_port": 29500, "ssh_port": 2222}


def written(names=CLUSTER, node="node1", master_port=29500, ssh_port=2222, slots=(1, 1, 1), **kw):
    """What the launchers stage writes on NODE for NAMES (the real renderers), as launch_checks gets it."""
    hostvars = {n: {"cluster_address": "10.89.77.%d" % (11 + i), "launchers_slots": s}
                for i, (n, s) in enumerate(zip(names, slots, strict=False))}
    nodes = L.launch_nodes(names, hostvars)
    files = L.launch_files(nodes, node, nodes[0]["address"], master_port, ssh_port, header="Managed", **kw)
    return {name: {"content": f["content"], "mode": int(f["mode"], 8)} for name, f in files.items()}


def one(found, node="node1", expect=EXPECT):
    (c,) = U.launch_checks(node, "/home/train/.provision/launch", found, expect)
    assert c["node"] == node and c["check"] == "launch files"
    return c


def test_the_files_the_stage_always_writes_are_the_ones_verify_reads():
    for slots in ((1, 1, 1), (2, 1, 1)):          # uniform slots add torchrun-c10d, colossalai.sh, sbatch.sh
        for env in (None, {}):
            assert set(U.ALWAYS) <= set(written(slots=slots, environment=env)), (slots, env)


def test_launch_order_puts_the_master_first_and_keeps_the_rest():
    assert U.launch_order(["a", "b", "c"], "b") == ["b", "a", "c"]
    assert U.launch_order(["a", "b", "c"], None) == ["a", "b", "c"]
    assert U.launch_order(["a", "b", "c"], "zz") == ["a", "b", "c"]
    assert U.launch_order([], None) == []
    # the renderers' ranks follow it
    hostvars = {n: {"cluster_address": "10.0.0.%d" % i} for i, n in enumerate("abc", start=1)}
    assert [n["name"] for n in L.launch_nodes(list("abc"), hostvars, master="c")] == U.launch_order(list("abc"), "c")


def test_files_written_for_this_inventory_pass_on_every_node():
    for i, node in enumerate(CLUSTER):
        c = one(written(node=node), node=node)
        assert c["status"] == "pass", c
        assert "for 3 nodes (rank 0 node1), rendezvous 10.89.77.11:29500" in c["detail"]
        assert c["data"] == {"dir": "/home/train/.provision/launch", "nodes": 3}, i


def test_a_node_added_since_the_files_were_written_is_named():
    c = one(written(names=["node1", "node2"]))
    assert c["status"] == "fail"
    assert "launch.env lists 2 nodes, the inventory has 3 (not listed: node3)" in c["detail"], c
    # said once: the hostfiles agree with launch.env, so they are not listed again
    assert "hostfile" not in c["detail"], c
    assert c["fix"].startswith("ansible-playbook site.yml --tags launchers"), c


def test_a_node_removed_from_the_inventory_is_named():
    c = one(written(names=CLUSTER + ["node4"], slots=(1, 1, 1, 1)))
    assert c["status"] == "fail"
    assert "launch.env lists 4 nodes, the inventory has 3 (listed but not in the inventory: node4)" in c["detail"]


def test_another_rendezvous_or_ssh_port_or_order_is_named():
    assert "rendezvous 10.89.77.11:29501, the inventory's is 10.89.77.11:29500" in one(written(master_port=29501))["detail"]
    assert "ssh port 22, the inventory's is 2222" in one(written(ssh_port=22))["detail"]
    moved = one(written(names=["node2", "node1", "node3"]), expect=EXPECT)
    assert "the nodes in another order (rank 0: node2; in the inventory: node1)" in moved["detail"], moved
    assert "rendezvous 10.89.77.11:29500" not in moved["detail"]   # its address is node2's .11 here: same text
    # the master in place, two others swapped (the inventory reordered): the first rank that differs
    swapped = one(written(names=["node1", "node3", "node2"]))
    assert "the nodes in another order (rank 1: node3; in the inventory: node2)" in swapped["detail"], swapped


def test_a_hand_edited_hostfile_a_missing_script_and_a_lost_x_bit_fail_together():
    found = written()
    found["hostfile.deepspeed"]["content"] = "# mine\nnode1 slots=1\nnode2 slots=1\n"
    del found["mpirun.sh"]
    found["deepspeed.sh"]["mode"] = 0o644
    c = one(found)
    assert c["status"] == "fail"
    assert c["detail"].startswith("/home/train/.provision/launch: missing: mpirun.sh; deepspeed.sh is not executable "
                                  "(mode 0644); hostfile.deepspeed lists 2 nodes, launch.env has 3 (not listed: node3)")
    broken = written()
    broken["hostfile.mpi"]["content"] = "node1 slots=x\n"
    assert "hostfile.mpi: hostfile line 1: slots=x is not a number" in one(broken)["detail"]


def test_an_unreadable_file_and_no_directory_at_all():
    found = written()
    found["hostfile.mpi"] = {"error": "/home/train/.provision/launch/hostfile.mpi is a symbolic link (not followed); "
                                      "fix: remove it"}
    c = one(found)
    assert c["status"] == "fail" and "hostfile.mpi is a symbolic link (not followed)" in c["detail"], c
    missing = one(None)
    assert missing["status"] == "warn"
    assert missing["detail"] == ("no launch files in /home/train/.provision/launch (the hostfiles and launch scripts of "
                                 "every launcher)")
    assert missing["fix"] == "ansible-playbook site.yml --tags launchers (writes them on every node)"


def test_many_nodes_are_named_a_few_at_a_time():
    many = ["n%d" % i for i in range(1, 101)]
    c = one(written(names=many[:90], node="n1", slots=[1] * 90), node="n1", expect=dict(EXPECT, nodes=many))
    assert "not listed: n91, n92, n93, n94, n95, n96 and 4 more" in c["detail"], c
