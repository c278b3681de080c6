"""Pure logic of the ssh fabric (plugins/module_utils/ssh/ssh_mesh.py): managed blocks, known_hosts, ssh config,
ssh error classes, StrictModes, KexAlgorithms. Captures under tests/fixtures/ssh are real (see its README)."""

from __future__ import annotations

import helpers
import pytest
from ansible_collections.provision.cluster.plugins.module_utils.ssh import ssh_mesh

OURS = helpers.REPO / "tests" / "fixtures" / "ssh"
K1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJbawRjG3MDzSAy7cj9UgH4Pd4tZ57YEk09lJy0a0RZ3"
K2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDrhqd7Fx8NGF14eOq4kYtIX0ld3zYSLJD8YFandNsT9"
NODES = [
    {"name": "node1", "hostname": "node1", "address": "10.89.77.11", "port": 2222, "user": "root",
     "user_key": "ssh-ed25519 AAAAuser1 root@node1", "host_keys": [K1]},
    {"name": "n2", "hostname": "gpu-b", "address": "10.89.77.12", "port": 2222, "user": "root",
     "user_key": "ssh-ed25519 AAAAuser2 root@gpu-b", "host_keys": [K2, "not a key"]},
]


def test_merge_block_keeps_other_lines_and_is_stable():
    text = "ssh-rsa AAAAmine me@laptop\n"
    once = ssh_mesh.merge_block(text, "c", ["a", "b"])
    assert once == ("ssh-rsa AAAAmine me@laptop\n# BEGIN provision.cluster c\na\nb\n"
                    "# END provision.cluster c\n")
    assert ssh_mesh.merge_block(once, "c", ["a", "b"]) == once
    changed = ssh_mesh.merge_block(once + "after\n", "c", ["x"])
    assert changed.splitlines() == ["ssh-rsa AAAAmine me@laptop", "# BEGIN provision.cluster c", "x",
                                    "# END provision.cluster c", "after"]
    assert ssh_mesh.merge_block(changed, "c", []) == "ssh-rsa AAAAmine me@laptop\nafter\n"


def test_merge_block_at_start_for_etc_hosts():
    hosts = "127.0.0.1\tlocalhost\n127.0.1.1 node1\n"
    out = ssh_mesh.merge_block(hosts, "c", ssh_mesh.etc_hosts_lines(NODES), position="start")
    assert out.splitlines()[:4] == ["# BEGIN provision.cluster c", "10.89.77.11 node1", "10.89.77.12 n2 gpu-b",
                                    "# END provision.cluster c"]
    assert out.endswith(hosts)


def test_known_hosts_every_name_with_port_address_last():
    lines = ssh_mesh.known_hosts_lines(NODES)
    assert lines == ["[node1]:2222,[10.89.77.11]:2222 " + K1, "[n2]:2222,[gpu-b]:2222,[10.89.77.12]:2222 " + K2]
    port22 = dict(NODES[0], port=22)
    assert ssh_mesh.known_hosts_lines([port22]) == ["node1,10.89.77.11 " + K1]


def test_known_hosts_replaces_stale_entries_of_a_rebuilt_node():
    old = ("[node1]:2222,[10.89.77.11]:2222 ssh-ed25519 AAAAold\n"
           "[10.89.77.11]:2222 ecdsa-sha2-nistp256 AAAAold2\n"
           "github.com ssh-ed25519 AAAAgh\n"
           "|1|hashed= ssh-ed25519 AAAAhashed\n")
    text, removed = ssh_mesh.render_known_hosts(old, "c", NODES)
    assert removed == ["[node1]:2222,[10.89.77.11]:2222 ssh-ed25519 AAAAold",
                       "[10.89.77.11]:2222 ecdsa-sha2-nistp256 AAAAold2"]
    assert "github.com ssh-ed25519 AAAAgh" in text and "|1|hashed=" in text
    assert text.count(K1) == 1
    again, removed_again = ssh_mesh.render_known_hosts(text, "c", NODES)
    assert again == text and removed_again == []


def test_known_hosts_extra_names_for_the_controller():
    lines = ssh_mesh.known_hosts_lines(NODES[:1], {"node1": ["[gw.example]:22", "[10.89.77.11]:2222"]})
    assert lines == ["[gw.example]:22,[node1]:2222,[10.89.77.11]:2222 " + K1]


def test_authorized_keys_dedup_and_comments():
    keys = ["ssh-ed25519 AAAAuser1 root@node1", "ssh-ed25519 AAAAuser1 other-comment", "", None,
            "ssh-rsa AAAAx a b c"]
    assert ssh_mesh.authorized_keys_lines(keys) == ["ssh-ed25519 AAAAuser1 root@node1", "ssh-rsa AAAAx a"]


def test_ssh_config_makes_plain_ssh_name_work():
    lines = ssh_mesh.ssh_config_lines(NODES, "train", "~/.ssh/id_ed25519")
    assert lines[:8] == ["Host node1 10.89.77.11", "    HostName 10.89.77.11", "    Port 2222", "    User root",
                         "    IdentityFile ~/.ssh/id_ed25519", "    IdentitiesOnly yes", "    BatchMode yes",
                         "    UpdateHostKeys no"]
    assert lines[8] == "Host n2 gpu-b 10.89.77.12"
    assert not any("StrictHostKeyChecking" in ln or "UserKnownHostsFile" in ln for ln in lines)


@pytest.mark.parametrize("name,cls,line", [
    ("host-key-missing", "host_key_missing", "Host key verification failed."),
    ("host-key-changed", "host_key_changed",
     "Host key for [10.89.133.12]:2222 has changed and you have requested strict checking."),
    ("permission-denied", "permission_denied", "root@10.89.133.12: Permission denied (publickey)."),
    ("connection-refused", "connection_refused", "ssh: connect to host 10.89.133.12 port 2223: Connection refused"),
    ("timeout", "timeout", "ssh: connect to host 10.89.133.99 port 2222: Connection timed out"),
    ("name-unresolvable", "name_unresolvable",
     "ssh: Could not resolve hostname nosuchnode: Name or service not known"),
])
def test_classify_real_ssh_errors(name, cls, line):
    err = (OURS / f"ssh-err-{name}.txt").read_text()
    got_cls, got_line, fix = ssh_mesh.classify_ssh_error(err, 255)
    assert (got_cls, got_line) == (cls, line)
    assert "stage" in fix or "reachable" in fix


def test_classify_our_own_timeout_and_unknown():
    assert ssh_mesh.classify_ssh_error("", -1, timed_out=True)[0] == "timeout"
    cls, line, _ = ssh_mesh.classify_ssh_error("Warning: x\nkex_exchange_identification: read: reset\n")
    assert (cls, line) == ("other", "kex_exchange_identification: read: reset")


def test_strict_modes_problems_as_sshd_judges_them():
    ok = [("/home/u", 1000, 0o40755), ("/home/u/.ssh", 1000, 0o40700), ("/home/u/.ssh/authorized_keys", 1000, 0o100600)]
    assert ssh_mesh.strict_modes_problems(1000, ok) == []
    assert ssh_mesh.strict_modes_check("node2", "u", "/home/u", [])["status"] == "pass"
    bad = [("/root", 0, 0o40700), ("/root/.ssh", 0, 0o40777), ("/root/.ssh/authorized_keys", 1000, 0o100600)]
    problems = ssh_mesh.strict_modes_problems(0, bad)
    assert problems == ["/root/.ssh is mode 0777 (writable by group and others)",
                        "/root/.ssh/authorized_keys is owned by uid 1000, not by the user"]
    check = ssh_mesh.strict_modes_check("node2", "root", "/root", problems)
    assert check["status"] == "fail" and check["check"] == "ssh files of root on node2"
    assert "StrictModes" in check["detail"] and "chmod 700 /root/.ssh" in check["fix"]
    # a home owned by root is fine for any user; group-writable is not
    assert ssh_mesh.strict_modes_problems(1000, [("/home/u", 0, 0o40775)]) == [
        "/home/u is mode 0775 (writable by group)"]


def test_kex_preference_from_real_ssh_G_output():
    effective = ssh_mesh.effective_kex((OURS / "ssh-G-debian12-openssh9.2.txt").read_text())
    # OpenSSH 9.2's own order: the slow post-quantum hybrid first
    assert effective[:3] == ["sntrup761x25519-sha512", "sntrup761x25519-sha512@openssh.com", "curve25519-sha256"]
    got = ssh_mesh.kex_preference(["mlkem768x25519-sha256", "curve25519-sha256", "curve25519-sha256@libssh.org"],
                                  effective)
    # ML-KEM is unknown to 9.2 and left out; curve25519 first; nothing lost, nothing added
    assert got[:2] == ["curve25519-sha256", "curve25519-sha256@libssh.org"]
    assert sorted(got) == sorted(effective)
    assert ssh_mesh.kex_preference(got[:2], got) == got  # stable on a second run


def test_kex_preference_respects_a_policy_and_empty_preference():
    fips = ["ecdh-sha2-nistp256", "ecdh-sha2-nistp384", "diffie-hellman-group14-sha256"]
    assert ssh_mesh.kex_preference(["curve25519-sha256"], fips) == []
    assert ssh_mesh.kex_preference([], ["curve25519-sha256"]) == []
    assert ssh_mesh.effective_kex("user root\nport 22\n") == []


def test_ssh_config_kex_line_per_host_only_when_given():
    with_kex = ssh_mesh.ssh_config_lines(NODES, "root", "~/.ssh/id_ed25519", ["curve25519-sha256", "x"])
    assert with_kex.count("    KexAlgorithms curve25519-sha256,x") == len(NODES)
    assert not any("KexAlgorithms" in line for line in ssh_mesh.ssh_config_lines(NODES, "root", "~/.ssh/id_ed25519"))


def test_markers_that_do_not_pair_are_refused_and_the_users_keys_are_never_dropped():
    """issue 31 item 8: a BEGIN whose END was deleted; the next run appended a new block, the run after
    it took everything from the stray BEGIN to the new END as the block: the user's keys were gone."""
    mine = "ssh-ed25519 AAAAmine me@laptop"
    stray = "# BEGIN provision.cluster c\n" + mine + "\n"
    with pytest.raises(ssh_mesh.MarkerError, match=r"^line 1: .* has no '# END provision.cluster c' after it; fix:"):
        ssh_mesh.merge_block(stray, "c", ["a"])
    with pytest.raises(ssh_mesh.MarkerError, match=r"^line 2: .*# END provision.cluster c.* has no .* before it"):
        ssh_mesh.merge_block(mine + "\n# END provision.cluster c\n", "c", ["a"])
    twice = ssh_mesh.merge_block("", "c", ["a"]) + mine + "\n" + ssh_mesh.merge_block("", "c", ["a"])
    with pytest.raises(ssh_mesh.MarkerError, match=r"^line 5: a second"):
        ssh_mesh.render_known_hosts(twice, "c", NODES)
    # another cluster's block is not ours and does not count
    other = ssh_mesh.merge_block("", "d", ["x"])
    assert ssh_mesh.merge_block(other, "c", ["a"]).startswith(other)


def test_node_records_with_names_that_would_inject_lines_are_refused():
    good = dict(NODES[0], aliases=["[203.0.113.7]:22", "login1"])
    assert ssh_mesh.node_problems(good) == []
    bad = dict(NODES[0], hostname="node1\n    ProxyCommand sh -c x", address="10.0.0.3; reboot", port="22x",
               user="root\nHost *", aliases=["a b"])
    problems = ssh_mesh.node_problems(bad)
    assert [p.split(" ", 2)[1] for p in problems] == ["hostname", "address", "port", "user", "alias"], problems
    assert all("\n" not in p and p.startswith("node1: ") for p in problems)


def test_a_key_line_that_is_not_one_is_not_written():
    assert ssh_mesh.normalize_key(K1 + " c") == K1
    assert ssh_mesh.normalize_key("ssh-ed25519 AAAA;rm") is None
    assert ssh_mesh.authorized_keys_lines(['command="x" ssh-ed25519 AAAA', K1]) == [K1]
