"""The launch_files_info module (verify's `launch files` check) on real directories: as the files' owner,
and as root reading another user's directory (through its fds, never following a planted link)."""

from __future__ import annotations

import os
import types
from unittest import mock

import pytest

import helpers
from ansible_collections.provision.cluster.plugins.filter import launchers as L
from ansible_collections.provision.cluster.plugins.module_utils.common import launch as M

NAMES = ["node1", "node2"]
ARGS = {"nodes": NAMES, "master_addr": "10.89.77.11", "master_port": 29500, "ssh_port": 2222, "node": "node2"}


def write(directory, names=NAMES, node="node2", uid=None):
    hostvars = {n: {"cluster_address": "10.89.77.%d" % (11 + i)} for i, n in enumerate(names)}
    nodes = L.launch_nodes(names, hostvars)
    os.makedirs(directory, exist_ok=True)
    for name, f in L.launch_files(nodes, node, nodes[0]["address"], 29500, 2222).items():
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f["content"])
        os.chmod(path, int(f["mode"], 8))
        if uid is not None:
            os.chown(path, uid, uid)
    if uid is not None:
        os.chown(directory, uid, uid)


def run(path, **args):
    return helpers.run_module("launch_files_info", dict(ARGS, path=str(path), **args))


def test_as_the_owner_pass_then_a_node_added_then_no_directory(tmp_path):
    d = tmp_path / "launch"
    write(d)
    res = run(d)
    assert res["changed"] is False and res["path"] == str(d)
    (c,) = res["checks"]
    assert c["status"] == "pass" and c["node"] == "node2", c
    (c,) = run(d, nodes=NAMES + ["node3"])["checks"]
    assert c["status"] == "fail" and "(not listed: node3)" in c["detail"], c
    (c,) = run(tmp_path / "nothing")["checks"]
    assert c["status"] == "warn" and "no launch files in" in c["detail"], c


def test_the_master_is_rank_0_and_fail_true_refuses_in_one_line(tmp_path):
    d = tmp_path / "launch"
    write(d, names=["node2", "node1"])            # written with node2 as the master
    (c,) = run(d, master="node2")["checks"]
    assert c["status"] == "pass", c
    res = run(d, fail=True)                        # the inventory's master is node1 now
    assert res["failed"] is True and res["msg"].startswith(
        f"launch files: {d}: launch.env lists the nodes in another order (rank 0: node2; in the inventory: node1)"), res
    assert res["msg"].endswith("; fix: ansible-playbook site.yml --tags launchers (rewrites them on every node from "
                               "the inventory; your own launch files belong elsewhere: this directory is rewritten)")
    assert "failed" not in run(tmp_path / "none", fail=True)      # no directory: a warning, not a refusal


def test_as_the_owner_a_link_in_place_of_a_file_is_not_followed(tmp_path):
    d = tmp_path / "launch"
    write(d)
    secret = tmp_path / "secret"
    secret.write_text("not for verify\n")
    os.unlink(d / "hostfile.mpi")
    os.symlink(secret, d / "hostfile.mpi")
    (c,) = run(d)["checks"]
    assert c["status"] == "fail" and f"{d}/hostfile.mpi is a symbolic link (not followed)" in c["detail"], c
    assert "not for verify" not in str(c)


@pytest.mark.skipif(os.geteuid() != 0, reason="root reading another user's directory needs root")
def test_as_root_for_another_user_reads_through_fds_and_refuses_links(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    pw = types.SimpleNamespace(pw_name="trainer", pw_dir=str(home), pw_uid=65534, pw_gid=65534)
    d = home / ".provision"
    d.mkdir()
    os.chown(d, 65534, 65534)
    launch = d / "launch"
    write(launch, uid=65534)
    found = M.read_launch_dir(str(launch), pw)
    assert found["launch.env"]["content"].startswith("MASTER_ADDR=10.89.77.11\n")
    assert found["deepspeed.sh"]["mode"] == 0o755
    # a file the user links to a system file: refused in one line, nothing of the target read
    os.unlink(launch / "hostfile.mpi")
    os.symlink("/etc/shadow", launch / "hostfile.mpi")
    found = M.read_launch_dir(str(launch), pw)
    assert "content" not in found["hostfile.mpi"] and "hostfile.mpi" in found["hostfile.mpi"]["error"], found
    # the directory itself a link (~/.provision -> /etc): refused, not read
    os.rename(d, home / "moved")
    os.symlink("/etc", d)
    with pytest.raises(M.UnsafeFile, match=f"^{d} is a symbolic link \\(to /etc\\): root does not follow links"):
        M.read_launch_dir(str(d / "launch"), pw)
    # as the module reports it: the refusal's own fix
    with mock.patch.object(M.pwd, "getpwnam", return_value=pw):
        (c,) = helpers.run_module("launch_files_info", dict(ARGS, path=str(d / "launch"), user="trainer"))["checks"]
    assert c["status"] == "fail" and c["detail"].startswith(f"{d} is a symbolic link (to /etc)"), c
    assert "; fix:" not in c["detail"] and c["fix"].startswith("replace it with a regular file or directory"), c


def test_launch_dir_with_check_runs_this_check_on_what_it_wrote(tmp_path):
    """The launchers stage's call (provision.cluster.check with module: launch_dir): the files written, then the
    same check as this module with the same arguments, in the same process."""
    hostvars = {n: {"cluster_address": "10.89.77.%d" % (11 + i)} for i, n in enumerate(NAMES)}
    nodes = L.launch_nodes(NAMES, hostvars)
    files = L.launch_files(nodes, "node2", nodes[0]["address"], 29500, 2222)
    d = tmp_path / "launch"
    check = dict(ARGS, path=str(d))
    done = helpers.run_module("launch_dir", {"path": str(d), "files": files, "check": check})
    assert done["changed"] is True and sorted(done["written"]) == sorted(files)
    alone = run(d)
    # (exit_json adds the path's owner and mode to a module's own result, not to a dict inside it)
    assert done["check_result"] == {"path": alone["path"], "checks": alone["checks"]}
    assert done["check_result"]["checks"][0]["status"] == "pass"
    # a stale inventory: the check fails on the files as written (fail: stops the module with its line)
    stale = helpers.run_module("launch_dir", {"path": str(d), "files": files,
                                              "check": dict(check, nodes=NAMES + ["node3"], fail=True)})
    assert stale["failed"] and stale["msg"].startswith("launch files: ") and "(not listed: node3)" in stale["msg"]
    assert stale["changed"] is False and stale["check_result"]["failed"]
