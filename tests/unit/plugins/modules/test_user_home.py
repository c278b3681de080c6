"""Root working in the training user's home (issue 31, items 1 and 8): the modules that write there, run
as root for a user of another uid whose home holds links planted by that user. Nothing outside the home
changes owner, mode or content; each refusal is one line naming the file and the fix; the user's own
lines are kept. The home is a scratch directory given to another uid (tests/conftest.py: ScratchUser)."""

from __future__ import annotations

import os
import stat

import helpers

K1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJbawRjG3MDzSAy7cj9UgH4Pd4tZ57YEk09lJy0a0RZ3"
NODES = [{"name": "node1", "hostname": "node1", "address": "10.89.77.11", "port": 2222, "user": "trainer",
          "user_key": K1 + " trainer@node1", "host_keys": [K1]}]


def mesh(user, **extra):
    args = {"nodes": NODES, "user": user.NAME, "block_name": "t"}
    args.update(extra)
    return helpers.run_module("ssh_mesh", args)


def secret_leaked(user):
    """Is the secret's text in any file of the home (what root would have copied there)?"""
    needle = user.secret.read_bytes()
    for root, _dirs, names in os.walk(user.home):
        for name in names:
            path = os.path.join(root, name)
            if os.path.islink(path) or os.path.samefile(path, user.secret):  # the planted link itself
                continue
            if needle in open(path, "rb").read():
                return path
    return None


def test_ssh_config_linked_to_the_shadow_file_is_refused_and_nothing_is_copied(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    (scratch_user.home / ".ssh").mkdir(mode=0o700)
    scratch_user.give(scratch_user.home / ".ssh")
    link = scratch_user.plant(".ssh/config", scratch_user.secret)
    before = scratch_user.system_state()
    res = mesh(scratch_user, known_hosts=False)
    assert res.get("failed") and "\n" not in res["msg"], res
    assert str(link) in res["msg"] and "symbolic link" in res["msg"] and "fix:" in res["msg"]
    assert link.is_symlink() and secret_leaked(scratch_user) is None
    assert scratch_user.system_state() == before


def test_a_hard_link_to_a_root_file_is_not_read(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    ssh = scratch_user.home / ".ssh"
    ssh.mkdir(mode=0o700)
    scratch_user.give(ssh)
    os.link(scratch_user.secret, ssh / "authorized_keys")   # what fs.protected_hardlinks=0 allows a user
    before = scratch_user.system_state()
    res = mesh(scratch_user, known_hosts=False, ssh_config=False)
    assert res.get("failed") and "hard link" in res["msg"] and str(ssh / "authorized_keys") in res["msg"], res
    assert secret_leaked(scratch_user) is None and scratch_user.system_state() == before


def test_a_linked_ssh_directory_is_refused(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    scratch_user.plant(".ssh", scratch_user.etc)
    before = scratch_user.system_state()
    res = mesh(scratch_user)
    assert res.get("failed") and f"{scratch_user.home}/.ssh is a symbolic link" in res["msg"], res
    assert scratch_user.system_state() == before and sorted(os.listdir(scratch_user.etc)) == ["shadow"]


def test_mesh_files_of_a_clean_home_are_the_users_and_a_second_run_changes_nothing(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    first = mesh(scratch_user)
    assert first["changed"] is True and not first.get("failed"), first
    ssh = scratch_user.home / ".ssh"
    for name, mode in (("authorized_keys", 0o600), ("known_hosts", 0o644), ("config", 0o600)):
        st = (ssh / name).stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (scratch_user.UID, scratch_user.GID, mode), name
    assert (ssh.stat().st_uid, stat.S_IMODE(ssh.stat().st_mode)) == (scratch_user.UID, 0o700)
    assert [n for n in os.listdir(ssh) if n.startswith(".")] == []
    again = mesh(scratch_user)
    assert again["changed"] is False, again


def test_a_stray_begin_marker_is_refused_naming_the_file_and_line_and_the_users_lines_stay(scratch_user,
                                                                                           monkeypatch):
    scratch_user.patch(monkeypatch)
    ssh = scratch_user.home / ".ssh"
    ssh.mkdir(mode=0o700)
    keys = ssh / "authorized_keys"
    # a user's key after a BEGIN left alone (an edit that lost our END): a rewrite would drop it
    mine = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDrhqd7Fx8NGF14eOq4kYtIX0ld3zYSLJD8YFandNsT9 me@laptop\n"
    keys.write_text("# BEGIN provision.cluster t\n" + mine)
    scratch_user.give(ssh, keys)
    res = mesh(scratch_user, known_hosts=False, ssh_config=False)
    assert res.get("failed") and f"{keys} line 1:" in res["msg"] and "fix:" in res["msg"], res
    assert keys.read_text() == "# BEGIN provision.cluster t\n" + mine


def test_the_key_pair_is_made_by_the_user_and_a_dangling_key_link_is_refused(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    ok = helpers.run_module("ssh_identity", {"user": scratch_user.NAME, "name": "node1", "address": "10.89.77.11"})
    assert ok.get("changed") and ok["public_key"].startswith("ssh-ed25519 "), ok
    key = scratch_user.home / ".ssh" / "id_ed25519"
    assert (key.stat().st_uid, stat.S_IMODE(key.stat().st_mode)) == (scratch_user.UID, 0o600)
    assert (key.with_suffix(".pub")).stat().st_uid == scratch_user.UID
    key.unlink()
    key.with_suffix(".pub").unlink()
    target = scratch_user.etc / "planted_key"
    scratch_user.plant(".ssh/id_ed25519", target)        # dangling: ssh-keygen as root would create it
    before = scratch_user.system_state()
    res = helpers.run_module("ssh_identity", {"user": scratch_user.NAME})
    assert res.get("failed") and str(key) in res["msg"] and "symbolic link" in res["msg"], res
    assert not target.exists() and scratch_user.system_state() == before


def test_bad_node_records_are_refused_before_anything_is_written(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    bad = [dict(NODES[0], hostname="node1\n    ProxyCommand touch /tmp/pwned"),
           dict(NODES[0], name="node2", address="10.0.0.3; reboot")]
    res = helpers.run_module("ssh_mesh", {"nodes": bad, "user": scratch_user.NAME, "block_name": "t"})
    assert res.get("failed"), res
    assert "node1: hostname (as the node reports it) 'node1\\n    ProxyCommand touch /tmp/pwned'" in res["msg"]
    assert "node2: address '10.0.0.3; reboot'" not in res["msg"] and "node2: address 10.0.0.3; reboot is" in res["msg"]
    assert "\n" not in res["msg"] and not (scratch_user.home / ".ssh").exists()


def shell_env(user, **extra):
    args = {"user": user.NAME, "env": {"NCCL_SOCKET_IFNAME": "eth1"}, "deepspeed_vars": {"NCCL_SOCKET_IFNAME": "eth1"}}
    args.update(extra)
    return helpers.run_module("shell_env_block", args)


def test_a_dangling_bashrc_link_into_a_system_directory_is_refused_and_nothing_is_created(scratch_user,
                                                                                          monkeypatch):
    scratch_user.patch(monkeypatch)
    profile_d = scratch_user.etc / "profile.d"
    profile_d.mkdir()
    link = scratch_user.plant(".bashrc", profile_d / "x.sh")    # dangling: realpath + write made x.sh
    before = scratch_user.system_state()
    res = shell_env(scratch_user)
    assert res.get("failed") and str(link) in res["msg"] and "symbolic link" in res["msg"], res
    assert "\n" not in res["msg"] and "fix:" in res["msg"]
    assert not (profile_d / "x.sh").exists() and scratch_user.system_state() == before and link.is_symlink()


def test_a_deepspeed_env_link_to_a_root_file_is_refused(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    link = scratch_user.plant(".deepspeed_env", scratch_user.secret)
    before = scratch_user.system_state()
    res = shell_env(scratch_user)
    assert res.get("failed") and str(link) in res["msg"], res
    assert scratch_user.system_state() == before and secret_leaked(scratch_user) is None


def test_the_block_in_a_plain_home_is_written_for_the_user(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    rc = scratch_user.home / ".bashrc"
    rc.write_text("# mine\ncase $- in *i*) ;; *) return;; esac\nalias ll='ls -l'\n")
    scratch_user.give(rc)
    res = shell_env(scratch_user)
    assert res["changed"] and not res.get("failed"), res
    text = rc.read_text()
    assert text.startswith("# BEGIN provision managed environment") and text.endswith(
        "# END provision managed environment (shell_env)\n# mine\ncase $- in *i*) ;; *) return;; esac\nalias ll='ls -l'\n")
    ds = scratch_user.home / ".deepspeed_env"
    assert ds.read_text() == "NCCL_SOCKET_IFNAME=eth1\n" and ds.stat().st_uid == scratch_user.UID
    assert rc.stat().st_uid == scratch_user.UID and shell_env(scratch_user)["changed"] is False


def test_conflicts_are_warnings_and_the_exports_come_back_as_the_cached_fact(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    exports = {"env": {"NCCL_SOCKET_IFNAME": "eth1"}, "path": [], "ld_library_path": [], "source": [], "stages": ["x"]}
    conflict = "NCCL_SOCKET_IFNAME: NCCL_SOCKET_IFNAME=eth1 (from provision_env_nccl_net) replaced by eth2 (from extra vars)"
    res = shell_env(scratch_user, node="n1", conflicts=[conflict], exports=exports)
    assert not res.get("failed") and res["ansible_facts"] == {"__shell_env_exports": exports}, res
    # ansible-core 2.19 returns each warning as a summary (its text under event.msg), older ones as the text
    (warning,) = [w if isinstance(w, str) else w["event"]["msg"] for w in res["warnings"]]
    assert warning == "n1: %s (the later one was kept)" % conflict
    res = shell_env(scratch_user)                       # neither given: no warning, no fact
    assert "ansible_facts" not in res and not res.get("warnings"), res


def test_a_stray_begin_in_bashrc_is_refused_and_the_users_lines_stay(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    rc = scratch_user.home / ".bashrc"
    text = "# BEGIN provision managed environment (shell_env)\nexport MINE=1\nalias ll='ls -l'\n"
    rc.write_text(text)
    scratch_user.give(rc)
    res = shell_env(scratch_user)
    assert res.get("failed") and f"{rc} line 1:" in res["msg"] and "fix:" in res["msg"], res
    assert rc.read_text() == text


def launch(user, path, **extra):
    args = {"path": str(path), "owner": user.NAME, "files": {"hostfile": {"content": "node1 slots=1\n", "mode": "0644"}},
            "absent": ["hccl_rank_table.json"]}
    args.update(extra)
    return helpers.run_module("launch_dir", args)


def test_a_provision_directory_linked_to_a_system_directory_is_refused_and_not_chowned(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    (scratch_user.etc / "launch").mkdir()
    link = scratch_user.plant(".provision", scratch_user.etc)
    before = scratch_user.system_state()
    res = launch(scratch_user, scratch_user.home / ".provision" / "launch")
    assert res.get("failed") and str(link) in res["msg"] and "symbolic link" in res["msg"], res
    assert scratch_user.system_state() == before and os.listdir(scratch_user.etc / "launch") == []


def test_launch_files_in_a_plain_home_and_a_stale_link_is_removed_not_followed(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    launch_dir = scratch_user.home / ".provision" / "launch"
    first = launch(scratch_user, launch_dir)
    assert first["changed"] and first["written"] == ["hostfile"], first
    for d in (launch_dir.parent, launch_dir, launch_dir / "hostfile"):
        assert d.stat().st_uid == scratch_user.UID, d
    stale = launch_dir / "hccl_rank_table.json"
    stale.symlink_to(scratch_user.secret)
    os.lchown(stale, scratch_user.UID, scratch_user.GID)
    second = launch(scratch_user, launch_dir)
    assert second["removed"] == ["hccl_rank_table.json"] and not os.path.lexists(stale)
    assert scratch_user.secret.exists() and launch(scratch_user, launch_dir)["changed"] is False


def test_launch_dir_outside_a_home_gives_only_the_directories_it_made(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    shared = scratch_user.etc / "shared"          # an existing root directory above the launch directory
    shared.mkdir()
    res = launch(scratch_user, shared / "jobs" / "launch")
    assert res["changed"], res
    assert shared.stat().st_uid == 0 and (shared / "jobs").stat().st_uid == scratch_user.UID


def test_the_env_check_does_not_read_a_linked_bashrc_as_root(scratch_user, monkeypatch):
    from ansible_collections.provision.cluster.plugins.module_utils.common import bashrc as B
    from ansible_collections.provision.cluster.plugins.module_utils.common import shell_env_check as C

    scratch_user.patch(monkeypatch)
    scratch_user.secret.write_text(B.render_block({"env": {"SECRET": "from-root"}}))
    link = scratch_user.plant(".bashrc", scratch_user.secret)
    found = C.check_env(scratch_user.NAME, None, "node1", 5, lambda _n: None, B.split_block, B.find_guard)
    check = found["checks"][0]
    assert check["status"] == "fail" and str(link) in check["detail"] and "symbolic link" in check["detail"], check
    assert found["expected"] == {} and "from-root" not in str(found)


def as_the_user(user, fn):
    """fn() in a child process switched to the user's uid (as become_user runs a module) -> its JSON result."""
    import json

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(user.GID, user.GID, user.GID)
            os.setresuid(user.UID, user.UID, user.UID)
            os.environ["HOME"] = str(user.home)
            os.write(w, json.dumps(fn()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as handle:
        data = handle.read()
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data, "the child failed"
    return json.loads(data)


def test_run_as_the_user_a_dangling_link_into_a_system_directory_fails_in_one_line(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    profile_d = scratch_user.etc / "profile.d"
    profile_d.mkdir()
    link = scratch_user.plant(".bashrc", profile_d / "x.sh")
    before = scratch_user.system_state()
    res = as_the_user(scratch_user, lambda: shell_env(scratch_user))
    assert res.get("failed") and "\n" not in res["msg"], res
    assert res["msg"].startswith(f"{link} is a symbolic link to {profile_d}/x.sh: cannot write {profile_d}/x.sh: "
                                 f"Permission denied; fix: make {link} a regular file of trainer's")
    assert scratch_user.system_state() == before and not (profile_d / "x.sh").exists()
    # and a link to a file of the user's own is followed: the user's dotfiles repository keeps its file
    link.unlink()
    dot = scratch_user.home / "dotfiles"
    dot.mkdir()
    (dot / "bashrc").write_text("alias ll='ls -l'\n")
    scratch_user.give(dot, dot / "bashrc")
    scratch_user.plant(".bashrc", dot / "bashrc")
    ok = as_the_user(scratch_user, lambda: shell_env(scratch_user))
    assert ok["changed"] and ok["bashrc"] == str(dot / "bashrc"), ok
    assert (scratch_user.home / ".bashrc").is_symlink() and "BEGIN provision" in (dot / "bashrc").read_text()


def test_run_as_the_user_a_config_link_to_the_shadow_file_fails_in_one_line(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    ssh = scratch_user.home / ".ssh"
    ssh.mkdir(mode=0o700)
    scratch_user.give(ssh)
    link = scratch_user.plant(".ssh/config", scratch_user.secret)
    res = as_the_user(scratch_user, lambda: mesh(scratch_user, known_hosts=False))
    assert res.get("failed") and "\n" not in res["msg"], res
    assert res["msg"].startswith(f"cannot read {link}: Permission denied (it is a symbolic link to {scratch_user.secret})")
    assert secret_leaked(scratch_user) is None


def test_run_as_the_user_a_provision_link_to_a_system_directory_fails_in_one_line(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    link = scratch_user.plant(".provision", scratch_user.etc)
    before = scratch_user.system_state()
    res = as_the_user(scratch_user, lambda: launch(scratch_user, scratch_user.home / ".provision" / "launch"))
    assert res.get("failed") and "\n" not in res["msg"], res
    assert res["msg"].startswith(f"launch_dir: cannot write {link}/launch: Permission denied ({link} is a symbolic "
                                 f"link to {scratch_user.etc}); fix:"), res["msg"]
    assert scratch_user.system_state() == before
