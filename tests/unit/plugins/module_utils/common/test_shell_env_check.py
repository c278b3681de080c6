"""shell_env_check (the `env block` check of provision verify): block exports, env -0 parsing, decision."""

from __future__ import annotations



from helpers import REPO
from ansible_collections.provision.cluster.plugins.module_utils.common import bashrc
from ansible_collections.provision.cluster.plugins.module_utils.common import shell_env_check as C

RECORDED = REPO / "tests" / "fixtures" / "verify"


def read(name: str) -> str:
    return (RECORDED / name).read_text()


def layout_of(text: str) -> dict:
    return C.block_layout(text, bashrc.split_block, bashrc.find_guard)


def test_block_exports_of_a_real_block():
    layout = layout_of(read("bashrc.lab"))
    assert layout["block"] and not layout["below_guard"]
    assert layout["block_line"] == 1 and layout["guard_line"] is None  # root's .bashrc has no guard
    expected = C.block_exports(layout["block"])
    assert expected["env"]["NCCL_SOCKET_IFNAME"] == "eth1"
    assert expected["env"]["PDSH_RCMD_TYPE"] == "ssh"
    assert "/opt/provision/venv/bin" in expected["path"]["PATH"]


def test_env0_of_a_real_session_passes():
    layout = layout_of(read("bashrc.lab"))
    expected = C.block_exports(layout["block"])
    seen = C.parse_env0(read("env0.lab"), C.wanted_names(expected))
    check = C.decide("/root/.bashrc", layout, expected, seen, None, "node1")
    assert check["status"] == "pass", check
    assert "sees the block's" in check["detail"]


def test_block_placed_by_shell_env_above_debians_guard():
    _rest, block, _at = bashrc.split_block(read("bashrc.lab"))
    text, _where = bashrc.place_block(read("skel.bashrc"), block)
    layout = layout_of(text)
    assert not layout["below_guard"] and layout["block_line"] < layout["guard_line"]
    assert text.splitlines()[layout["guard_line"] - 1].startswith("case $- in")


def test_block_appended_after_debians_guard_fails_with_the_shell_env_fix():
    _rest, block, _at = bashrc.split_block(read("bashrc.lab"))
    layout = layout_of(read("skel.bashrc") + block)
    assert layout["below_guard"]
    check = C.decide("/root/.bashrc", layout, C.block_exports(block), {}, None, "node1")
    assert check["status"] == "fail"
    assert "below the non-interactive guard" in check["detail"]
    assert check["fix"].startswith("ansible-playbook site.yml --tags shell_env")


def test_value_overridden_after_the_block_is_named():
    layout = layout_of(read("bashrc.lab"))
    expected = C.block_exports(layout["block"])
    seen = C.parse_env0(read("env0.lab"), C.wanted_names(expected))
    seen["NCCL_SOCKET_IFNAME"] = "eth0"
    seen["PATH"] = "/usr/bin:/bin"
    check = C.decide("/root/.bashrc", layout, expected, seen, None, "node2")
    assert check["status"] == "fail"
    assert "NCCL_SOCKET_IFNAME=eth0 (block: eth1)" in check["detail"]
    assert "PATH lacks /opt/provision/venv/bin" in check["detail"]


def test_missing_file_block_and_ssh_failure():
    none = C.block_layout(None, bashrc.split_block, bashrc.find_guard)
    assert C.decide("/x/.bashrc", none, {}, {}, None, "n")["status"] == "fail"
    plain = layout_of("# just a user file\nalias ll='ls -l'\n")
    check = C.decide("/x/.bashrc", plain, {"env": {}, "path": {}}, {}, None, "n")
    assert check["status"] == "fail" and "no provision environment block" in check["detail"]
    layout = layout_of(read("bashrc.lab"))
    check = C.decide("/x/.bashrc", layout, C.block_exports(layout["block"]), {}, "Permission denied (publickey).", "n")
    assert check["status"] == "fail" and "Permission denied" in check["detail"]
    assert "SSH mesh" in check["fix"]


def test_ssh_argv_is_batch_mode_without_host_key_shortcuts():
    argv = C.ssh_argv("/usr/bin/ssh", "node2", 5)
    assert argv[:5] == ["/usr/bin/ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
    assert not any("StrictHostKeyChecking" in a or "UserKnownHostsFile" in a for a in argv)
