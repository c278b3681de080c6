"""The lab's login shapes (issue 30), the parts that need no podman: what is refused before anything
starts, the lab's key and known_hosts on the controller, the bastion's ssh_config, the node labels the lab
inventory turns into an ops-with-become ssh login (never podman)."""

from __future__ import annotations

import json
import stat
import subprocess

import pytest

import helpers  # noqa: F401
from provision import lab as lab_core
from provision.lab import login


@pytest.mark.parametrize("kw,message", [
    ({"login": "sudo-password"}, "needs the admin's password: --sudo-password-file"),
    ({"login": "sudo", "sudo_password": "x"}, "it needs --login sudo-password"),
    ({"login": "root", "bastion": True}, "use --login sudo or sudo-password"),
    ({"login": "sudo", "flavour": "bare"}, "--image bare has not"),
    ({"login": "ldap"}, "choose one of root, sudo, sudo-password"),
    ({"login": "sudo-password", "sudo_password": "a:b"}, "chpasswd"),
])
def test_login_shapes_refused_before_anything_starts(monkeypatch, kw, message):
    monkeypatch.setattr(lab_core, "setup_host", lambda **_: pytest.fail("must not touch the host"))
    monkeypatch.setattr(lab_core, "podman", lambda *a, **_: pytest.fail("must not run podman"))
    with pytest.raises(lab_core.LabError, match=message):
        lab_core.up(lab_core.LabSpec(name="x", **kw))


def test_a_restored_password_lab_needs_no_password():
    lab_core.LabSpec(name="x", login="sudo-password", snapshot="s").check()
    lab_core.LabSpec(name="x", login="sudo", snapshot="s").check()


def test_the_labs_key_is_made_here_private_and_kept(tmp_path):
    key, public = login.lab_key(tmp_path, "lg-x")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and public.startswith("ssh-ed25519 ")
    assert public.endswith("provision-lab-lg-x")
    assert login.lab_key(tmp_path, "lg-x") == (key, public)  # kept: the nodes authorize it


def test_host_keys_read_at_the_console_replace_those_of_that_address_only(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("10.89.5.11 ssh-ed25519 AAAAold\n[10.89.5.11]:2222 ssh-ed25519 AAAAmesh\n10.89.5.12 ssh-rsa AAAAother\n")
    login.record_host_keys(known, "10.89.5.11", ["ssh-ed25519 AAAAnew root@node1", "ecdsa-sha2-nistp256 AAAAe root@node1",
                                                "not a key line"])
    lines = known.read_text().splitlines()
    assert "10.89.5.11 ssh-ed25519 AAAAold" not in lines
    assert {"10.89.5.11 ssh-ed25519 AAAAnew", "10.89.5.11 ecdsa-sha2-nistp256 AAAAe", "[10.89.5.11]:2222 ssh-ed25519 AAAAmesh",
            "10.89.5.12 ssh-rsa AAAAother"} == set(lines)
    assert stat.S_IMODE(known.stat().st_mode) == 0o600
    with pytest.raises(lab_core.LabError, match="no SSH host key"):
        login.record_host_keys(known, "10.89.5.13", ["garbage"])


def test_the_bastions_ssh_config_is_what_ssh_reads_for_the_jump(tmp_path):
    path = login.write_ssh_config(tmp_path, "lg-x", "10.89.5.3")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    out = subprocess.run(["ssh", "-G", "-F", str(path), "lg-x-bastion"], capture_output=True, text=True, check=True).stdout
    cfg = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert cfg["hostname"] == "10.89.5.3" and cfg["user"] == "ops" and cfg["stricthostkeychecking"] == "true"
    assert cfg["userknownhostsfile"] == str(tmp_path / "known_hosts")
    assert login.gateways(["10.89.5.0/24", "10.90.5.16/28"]) == ["10.89.5.1", "10.90.5.17"]


def _inventory(monkeypatch, tmp_path, containers):
    """`ansible-inventory --list` of the lab inventory plugin, with a `podman` on the PATH that answers
    `podman ps -a` with CONTAINERS -> {host: vars}; raises with ansible's error when it parses nothing."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (tmp_path / "ps.json").write_text(json.dumps(containers))
    (fake / "podman").write_text(f"#!/bin/sh\ncat {tmp_path / 'ps.json'}\n")
    (fake / "podman").chmod(0o755)
    cfg = tmp_path / "lab.yml"
    cfg.write_text(f"plugin: provision.cluster.lab\nlab_name: lg-x\nstate_dir: {tmp_path}\n")
    env = helpers.ansible_env(ANSIBLE_INVENTORY_UNPARSED_FAILED="True")
    env["PATH"] = f"{fake}:{env['PATH']}"
    proc = subprocess.run([helpers.tool("ansible-inventory"), "-i", str(cfg), "--list"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    from provision.ansible import plain

    return plain(json.loads(proc.stdout)["_meta"]["hostvars"])


def _node(idx, login_, bastion):
    return {"Names": [f"lg-x-node{idx}"], "State": "running", "Labels": {
        "provision.lab": "lg-x", "provision.lab.index": str(idx), "provision.lab.address": f"10.89.5.{10 + idx}",
        "provision.lab.side_address": f"10.90.5.{16 * idx + 2}", "provision.lab.login": login_,
        "provision.lab.bastion": "1" if bastion else "0"}}


def test_the_lab_inventory_logs_in_as_the_admin_with_become_never_podman(monkeypatch, tmp_path):
    hv = _inventory(monkeypatch, tmp_path, [_node(1, "sudo", False), _node(2, "sudo", False)])
    for host in ("node1", "node2"):
        v = hv[host]
        assert (v["ansible_connection"], v["ansible_user"], v["ansible_port"], v["ansible_become"]) == ("ssh", "ops", 22, True)
        assert v["cluster_user"] == "trainer" and v["ansible_ssh_private_key_file"] == str(tmp_path / "id_ed25519")
        assert f"UserKnownHostsFile={tmp_path}/known_hosts" in v["ansible_ssh_common_args"]
        assert "StrictHostKeyChecking=yes" in v["ansible_ssh_common_args"] and "ProxyJump" not in v["ansible_ssh_common_args"]
        assert v["ssh_mesh_controller_access"] is False


def test_behind_a_bastion_the_inventory_jumps_through_it(monkeypatch, tmp_path):
    bastion = {"Names": ["lg-x-bastion"], "State": "running", "Labels": {
        "provision.lab": "lg-x", "provision.lab.role": "bastion", "provision.lab.address": "10.89.5.3"}}
    hv = _inventory(monkeypatch, tmp_path, [_node(1, "sudo", True), bastion])
    assert list(hv) == ["node1"]  # the bastion is not a node
    args = hv["node1"]["ansible_ssh_common_args"]
    assert f"-F {tmp_path}/ssh_config" in args and "-o ProxyJump=lg-x-bastion" in args
    with pytest.raises(RuntimeError, match="has no bastion container"):
        _inventory(monkeypatch, tmp_path, [_node(1, "sudo", True)])


def test_a_root_lab_is_unchanged(monkeypatch, tmp_path):
    hv = _inventory(monkeypatch, tmp_path, [_node(1, "root", False)])
    assert hv["node1"]["ansible_connection"] == "containers.podman.podman" and hv["node1"]["ansible_user"] == "root"
    assert "ansible_become" not in hv["node1"] and "cluster_user" not in hv["node1"]
