"""provision bootstrap behind a bastion (issue 30): the ProxyJump / ProxyCommand Ansible's ssh would use,
from the inventory's ansible_ssh_common_args and the SSH configuration, read with the real `ssh -G`."""

from __future__ import annotations

import shutil

import pytest

import helpers  # noqa: F401
from provision import bootstrap as core

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="openssh-client (ssh -G) is not installed")


def test_config_args_keep_what_chooses_the_configuration():
    args = ("-F /lab/ssh_config -o ProxyJump=lab-bastion -o UserKnownHostsFile=/lab/kh "
            "-o StrictHostKeyChecking=yes -v -J ops@b:2200 -oBatchMode=yes")
    assert core.ssh_config_args(args) == ["-F", "/lab/ssh_config", "-o", "ProxyJump=lab-bastion", "-o",
                                          "UserKnownHostsFile=/lab/kh", "-o", "StrictHostKeyChecking=yes",
                                          "-J", "ops@b:2200", "-oBatchMode=yes"]
    # what ssh hands to the connection to the jump host: only the configuration file
    assert core.config_file_args(core.ssh_config_args(args)) == ["-F", "/lab/ssh_config"]
    assert core.ssh_config_args(None) == []


@pytest.mark.parametrize("spec,want", [
    ("bastion", ("", "bastion", None)),
    ("ops@10.0.0.3", ("ops", "10.0.0.3", None)),
    ("ops@10.0.0.3:2200", ("ops", "10.0.0.3", 2200)),
    ("ops@[fd00::3]:2200", ("ops", "fd00::3", 2200)),
    ("ssh://ops@login.example.org:22", ("ops", "login.example.org", 22)),
])
def test_split_jump(spec, want):
    assert core.split_jump(spec) == want


def test_proxy_command_tokens():
    assert core.expand_proxy_command("ssh -W %h:%p -l %r gw %%x", "10.0.0.5", 22, "ops") == \
        "ssh -W 10.0.0.5:22 -l ops gw %x"
    with pytest.raises(core.BootstrapError, match="%C"):
        core.expand_proxy_command("nc %C", "h", 22, "u")


@needs_ssh
def test_proxyjump_from_the_inventory_and_an_ssh_config(tmp_path):
    """The lab's way (-F its ssh_config, -o ProxyJump=<Host alias>): the bastion resolved as ssh resolves it,
    its host key looked up in the known_hosts its Host block names."""
    cfg = tmp_path / "ssh_config"
    kh = tmp_path / "known_hosts"
    key = tmp_path / "id_ed25519"
    cfg.write_text(f"Host lab-bastion\n  HostName 10.89.9.3\n  Port 22\n  User ops\n  IdentityFile {key}\n"
                   f"  UserKnownHostsFile {kh}\n  StrictHostKeyChecking yes\n")
    target = core.Target(name="node1", address="10.89.9.11", port=22, user="ops",
                         ssh_common_args=f"-F {cfg} -o ProxyJump=lab-bastion -o UserKnownHostsFile={kh}")
    proxy = core.resolve_proxy(target)
    (hop,) = proxy.jumps
    assert (hop.address, hop.port, hop.user) == ("10.89.9.3", 22, "ops")
    assert str(key) in hop.identity_files and str(kh) in hop.known_hosts_files
    assert hop.pattern == "10.89.9.3" and not proxy.command


@needs_ssh
def test_proxyjump_chain_and_proxycommand(tmp_path):
    cfg = tmp_path / "cfg"
    cfg.write_text(f"Host *\n  UserKnownHostsFile {tmp_path / 'kh'}\n")
    t = core.Target(name="n", address="10.0.0.5", port=2222, user="ops",
                    ssh_common_args=f"-F {cfg} -J admin@gw1:2200,gw2")
    proxy = core.resolve_proxy(t)
    assert [(h.address, h.port, h.user) for h in proxy.jumps] == [("gw1", 2200, "admin"), ("gw2", 22, proxy.jumps[1].user)]
    t = core.Target(name="n", address="10.0.0.5", port=2222, user="ops",
                    ssh_common_args=f"-F {cfg} -o 'ProxyCommand=ssh -W %h:%p gw'")
    assert core.resolve_proxy(t).command == "ssh -W 10.0.0.5:2222 gw"


@needs_ssh
def test_no_proxy_is_a_direct_connection(tmp_path):
    cfg = tmp_path / "cfg"
    cfg.write_text("")
    t = core.Target(name="n", address="10.0.0.5", port=22, user="ops", ssh_common_args=f"-F {cfg}")
    assert core.resolve_proxy(t) is None


@needs_ssh
def test_an_unreachable_bastion_is_named_with_its_fix(tmp_path):
    """Nothing listens at the bastion's address (a closed port on this machine): one line naming the bastion
    and the node behind it, not a traceback."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cfg = tmp_path / "cfg"
    cfg.write_text("")
    t = core.Target(name="node1", address="10.0.0.5", port=22, user="ops",
                    ssh_common_args=f"-F {cfg} -J ops@127.0.0.1:{port}")
    with pytest.raises(core.HostFailure) as err:
        core.open_transport(t, timeout=3)
    assert f"127.0.0.1:{port}" in err.value.cause and "bastion" in err.value.cause and "node1" in err.value.cause
    assert "ProxyJump" in err.value.fix
