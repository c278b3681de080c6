"""The ssh fabric's modules as Ansible runs them, on the controller itself (no lab): docs render, ssh_mesh
writes only what changed and keeps foreign lines; no host key check is switched off anywhere."""

from __future__ import annotations

import subprocess

import helpers
import pytest


MODULES = ["port_facts", "sshd_service", "ssh_identity", "ssh_mesh", "ssh_mesh_check", "pdsh_config"]


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders(module):
    proc = subprocess.run([helpers.tool("ansible-doc"), f"provision.cluster.{module}"], cwd=helpers.REPO,
                          env=helpers.ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "RETURN VALUES" in proc.stdout and "EXAMPLES" in proc.stdout


def test_ssh_mesh_module_controller_known_hosts_and_hosts_file(tmp_path):
    kh = tmp_path / "labs" / "x" / "known_hosts"
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    nodes = [{"name": "node1", "hostname": "node1", "address": "10.89.77.11", "port": 2222,
              "host_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJbawRjG3MDzSAy7cj9UgH4Pd4tZ57YEk09lJy0a0RZ3"]}]
    args = {"nodes": nodes, "known_hosts_path": str(kh), "hosts_file": str(hosts), "authorized_keys": False,
            "known_hosts": False, "ssh_config": False, "block_name": "lab"}
    status, res = helpers.adhoc("ssh_mesh", args, "--check")
    assert "CHANGED" in status and not kh.exists()  # check mode writes nothing
    status, res = helpers.adhoc("ssh_mesh", args)
    assert "CHANGED" in status
    assert kh.read_text().splitlines()[1].startswith("[node1]:2222,[10.89.77.11]:2222 ssh-ed25519 ")
    assert oct(kh.stat().st_mode & 0o777) == "0o600"
    assert hosts.read_text().endswith("# END provision.cluster lab\n127.0.0.1 localhost\n")
    status, res = helpers.adhoc("ssh_mesh", args)
    assert "SUCCESS" in status and res["changed"] is False


def test_no_host_key_override_anywhere_in_the_repo():
    """Host-key checking is never switched off (no "no"/"accept-new" StrictHostKeyChecking, no /dev/null known_hosts) in code or config."""
    proc = subprocess.run(["git", "grep", "-n", "-i", "-E",
                           r"StrictHostKeyChecking[= ]+(no|accept-new)|UserKnownHostsFile[= ]+/dev/null",
                           "--", "*.py", "*.yml", "*.yaml", "*.j2", "*.cfg", "*.sh", "*.toml", "*.ini",
                           ":!tests/unit/plugins/modules/test_ssh_mesh.py"],
                          cwd=helpers.REPO, capture_output=True, text=True, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stdout == "", proc.stdout


def test_ssh_mesh_module_makes_the_controller_key_once(tmp_path):
    key = tmp_path / "ctl" / "id_ed25519"
    args = {"nodes": [], "identity_key_file": str(key), "authorized_keys": False, "known_hosts": False,
            "ssh_config": False}
    status, res = helpers.adhoc("ssh_mesh", args)
    assert "CHANGED" in status and res["public_key"].startswith("ssh-ed25519 ")
    assert oct(key.stat().st_mode & 0o777) == "0o600" and oct(key.parent.stat().st_mode & 0o777) == "0o700"
    digest = key.read_bytes()
    status, again = helpers.adhoc("ssh_mesh", args)
    assert "SUCCESS" in status and again["public_key"] == res["public_key"] and key.read_bytes() == digest


def test_sshd_keeps_port_22_beside_the_cluster_port_on_a_systemd_host():
    from ansible_collections.provision.cluster.plugins.module_utils.ssh import sshd as S

    from helpers import REPO
    debian = (REPO / "tests/fixtures/ssh/debian12-sshd_config.txt").read_text()
    assert S.include_patterns(debian) == ["/etc/ssh/sshd_config.d/*.conf"]
    assert S.configured_ports([debian]) == []                      # "#Port 22": sshd's default
    assert S.configured_ports(["Port 2200\nMatch User x\n  Port 1\n"]) == [2200]
    drop = "#\n# Ansible managed\n#\nPort 2222\nPubkeyAuthentication yes\n"
    assert S.with_port_lines(drop, [22]) == "#\n# Ansible managed\n#\nPort 2222\nPort 22\nPubkeyAuthentication yes\n"
    assert S.with_port_lines(drop, [2222]) == drop
    assert S.with_port_lines("# x\nUseDNS no\n", [22]) == "# x\nPort 22\nUseDNS no\n"


def test_the_mesh_check_judges_who_answers_by_the_hostnames_it_is_given(tmp_path):
    # an ssh that answers for every target as the machine "answer-of-<target>" (argv: options, target, command)
    ssh = tmp_path / "ssh"
    ssh.write_text('#!/bin/sh\nfor a; do prev=$cur; cur=$a; done\necho "answer-of-$prev"\n')
    ssh.chmod(0o755)
    args = {"nodes": ["n1", {"name": "n2", "hostname": "answer-of-n2"}, "n3"], "source": "n1",
            "connect_timeout": 5, "timeout": 20,
            # the stage's hostnames of this run: n1 is known by its name, n3 reaches another machine
            "hostnames": {"n1": "answer-of-n1", "n3": "gpu-c03"}}
    res = helpers.run_module("ssh_mesh_check", args, env={"PATH": "%s:/usr/bin:/bin" % tmp_path})
    assert res["cells"] == {"n1": "ok", "n2": "ok", "n3": "wrong_host"}, res
    (bad,) = res["failed_cells"]
    assert bad["detail"] == "n3 answered as answer-of-n3, expected gpu-c03"
    res = helpers.run_module("ssh_mesh_check", dict(args, hostnames={}), env={"PATH": "%s:/usr/bin:/bin" % tmp_path})
    assert res["cells"] == {"n1": "ok", "n2": "ok", "n3": "ok"}     # without a hostname any answer passes
