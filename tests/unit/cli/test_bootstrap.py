"""Unit tests of provision.bootstrap's decisions, on outputs captured from a real lab."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from helpers import REPO
from provision import bootstrap as bs

FIX = REPO / "tests" / "fixtures" / "bootstrap"
NODE1 = "[10.89.157.11]:2222"


def scanned() -> dict[str, tuple[str, bytes]]:
    """keytype -> (type, blob) of node1's real host keys."""
    out = {}
    for line in (FIX / "keyscan_node1.txt").read_text().splitlines():
        _host, keytype, b64 = line.split()
        out[keytype] = (keytype, base64.b64decode(b64))
    return out


# ---------------------------------------------------------------- fingerprints

def test_fingerprints_match_ssh_keygen_l():
    keys = scanned()
    for line in (FIX / "keygen_l_node1.txt").read_text().splitlines():
        _bits, fp, host, label = line.split()
        want_type = {"(ED25519)": "ssh-ed25519", "(RSA)": "ssh-rsa", "(ECDSA)": "ecdsa-sha2-nistp256"}[label]
        keytype, blob = keys[want_type]
        assert host == NODE1 == bs.host_pattern("10.89.157.11", 2222)
        assert bs.fingerprint(blob) == fp
        assert f"({bs.key_label(keytype)})" == label


def test_host_pattern_port_22_is_bare():
    assert bs.host_pattern("10.0.0.1", 22) == "10.0.0.1"
    assert bs.host_pattern("node1", 2222) == "[node1]:2222"


# ---------------------------------------------------------------- known_hosts decisions

def test_known_unknown_changed():
    text = (FIX / "keyscan_node1.txt").read_text()
    ed_type, ed_blob = scanned()["ssh-ed25519"]
    entries = bs.known_keys_for(text, NODE1)
    assert len(entries) == 3
    assert bs.judge_host_key(entries, ed_type, ed_blob).status == "known"
    # another host, or node1 on another port: nothing recorded
    assert bs.known_keys_for(text, "[10.89.157.12]:2222") == []
    assert bs.known_keys_for(text, "10.89.157.11") == []
    assert bs.judge_host_key([], ed_type, ed_blob).status == "unknown"
    # node1 rebuilt: a new ed25519 key; the verdict names the recorded and the presented key
    other = scanned()["ecdsa-sha2-nistp256"][1]
    only_ed = [e for e in entries if e.keytype == "ssh-ed25519"]
    verdict = bs.judge_host_key(only_ed, "ssh-ed25519", other)
    assert verdict.status == "changed"
    assert verdict.recorded == ("SHA256:3J17t+kk/KFNZaPb7F0n2mRlGEEcdYR9r+9NP57TIAs (ED25519)",)
    assert verdict.presented == bs.fingerprint(other)


def test_only_other_key_types_recorded_is_a_change():
    rsa = [e for e in bs.known_keys_for((FIX / "keyscan_node1.txt").read_text(), NODE1) if e.keytype == "ssh-rsa"]
    verdict = bs.judge_host_key(rsa, *scanned()["ssh-ed25519"])
    assert verdict.status == "changed"
    assert verdict.recorded[0].endswith("(RSA)")


def test_hashed_known_hosts_match():
    text = (FIX / "keyscan_node1_hashed.txt").read_text()
    assert "10.89.157.11" not in text
    entries = bs.known_keys_for(text, NODE1)
    assert {e.keytype for e in entries} == {"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256"}
    assert bs.known_keys_for(text, "[10.89.157.11]:22") == []


def test_known_hosts_rewritten_by_ssh_mesh_still_known():
    """After site.yml the ssh_mesh role keeps the controller's known_hosts in a managed block
    with `[name]:port,[addr]:port` patterns: a re-run of bootstrap finds the hosts known."""
    text = (FIX / "known_hosts_after_ssh_mesh.txt").read_text()
    for name in ("[10.89.157.11]:2222", "[node1]:2222"):
        entries = bs.known_keys_for(text, name)
        assert {e.keytype for e in entries} == {"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256"}
        ed = next(e for e in entries if e.keytype == "ssh-ed25519")
        assert ed.fingerprint == "SHA256:RUG5R6T2qPVAy2Qtn7La7tkjpaLPbMnzgGUj/6pqTbw"  # ssh-keygen -lf
        assert bs.judge_host_key(entries, ed.keytype, ed.blob).status == "known"
    node2 = bs.known_keys_for(text, "[10.89.157.12]:2222")
    assert bs.judge_host_key(node2, ed.keytype, ed.blob).status == "changed"


def test_patterns_negation_and_revoked():
    keytype, blob = scanned()["ssh-ed25519"]
    b64 = base64.b64encode(blob).decode()
    text = f"10.89.157.*,!10.89.157.13 {keytype} {b64}\n@revoked * {keytype} {b64}\n"
    assert bs.host_field_matches("10.89.157.*,!10.89.157.13", "10.89.157.11")
    assert not bs.host_field_matches("10.89.157.*,!10.89.157.13", "10.89.157.13")
    # `[` and `]` are literal in known_hosts patterns, unlike glob character classes
    assert bs.host_field_matches(NODE1, NODE1)
    assert not bs.host_field_matches("[10.89.157.11]:2222", "1:2222")
    assert bs.judge_host_key(bs.known_keys_for(text, "10.89.157.11"), keytype, blob).status == "revoked"


def test_preferred_key_types_follow_the_record():
    entries = bs.known_keys_for((FIX / "keyscan_node1.txt").read_text(), NODE1)
    # keyscan order is rsa, ecdsa, ed25519: asked for in OpenSSH's order
    assert bs.preferred_key_types(entries) == ["ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512",
                                               "rsa-sha2-256"]
    assert bs.preferred_key_types([e for e in entries if e.keytype == "ssh-rsa"]) == ["rsa-sha2-512",
                                                                                     "rsa-sha2-256"]


def test_known_hosts_line_round_trips_and_appends_once():
    keytype, blob = scanned()["ssh-ed25519"]
    line = bs.known_hosts_line(NODE1, keytype, blob)
    assert line in (FIX / "keyscan_node1.txt").read_text().splitlines()
    assert bs.append_lines("", [line, line]) == line + "\n"
    assert bs.append_lines(line + "\n", [line]) is None
    assert bs.append_lines("# mine", [line]) == "# mine\n" + line + "\n"


def test_remove_command_quotes_the_bracketed_name():
    assert bs.remove_key_command(NODE1, "/inv/known_hosts") == "ssh-keygen -R '[10.89.157.11]:2222' -f /inv/known_hosts"


# ---------------------------------------------------------------- authorized_keys

def probe(name: str) -> bs.RemoteState:
    return bs.parse_probe((FIX / name).read_text())


CONTROLLER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINkZEFLNiayEkenTXvKa32x0Klgv9MTIR+jdWfC30J6Q root@vm"


def test_parse_probe_after_bootstrap_plan_is_empty():
    state = probe("probe_node1_after.txt")
    assert (state.user, state.uid, state.home, state.os) == ("root", 0, "/root", "debian 12")
    assert state.ssh_dir == bs.PathState(0o700, 0, "directory")
    assert state.authorized_keys == bs.PathState(0o600, 0, "regular file")
    assert state.authorized_keys_text == CONTROLLER + "\n"
    plan = bs.plan_authorized_keys(state, CONTROLLER)
    assert plan.empty and plan.new_text is None
    # the same key with another comment or with options is the same key
    assert bs.plan_authorized_keys(state, CONTROLLER.replace("root@vm", "other")).empty
    assert bs.python_report(state) == (True, "python3 3.11.2 (/usr/bin/python3)", "")


def test_fresh_user_gets_dir_and_file():
    state = probe("probe_node2_fresh_user.txt")
    assert state.ssh_dir is None and state.authorized_keys is None
    plan = bs.plan_authorized_keys(state, CONTROLLER)
    assert plan.create_dir and plan.new_text == CONTROLLER + "\n"
    assert plan.expected_sha256 == "absent"
    assert plan.changes == ["created ~/.ssh (0700)", "created authorized_keys (0600) with the key"]


def test_foreign_owner_refused_for_non_root():
    state = probe("probe_node2_user_rootowned.txt")
    with pytest.raises(bs.HostFailure) as err:
        bs.plan_authorized_keys(state, CONTROLLER)
    assert "owned by uid 0, not u (uid 1000)" in err.value.cause
    assert err.value.fix == "as root on the host: chown -R u: /home/u/.ssh"


def test_merge_keeps_lines_and_fixes_modes():
    state = probe("probe_node2_user_rootowned.txt")
    state.ssh_dir.uid = state.authorized_keys.uid = state.uid  # as if u owned them
    plan = bs.plan_authorized_keys(state, CONTROLLER)
    assert plan.new_text == state.authorized_keys_text + "\n" + CONTROLLER + "\n"  # file lacked a final newline
    assert plan.new_text.startswith("# team keys\nssh-rsa AAAAB3")
    assert plan.dir_mode and plan.file_mode
    assert plan.changes == ["~/.ssh mode 755 -> 700", "key added to authorized_keys",
                            "authorized_keys mode 644 -> 600"]
    assert bs.merge_authorized_keys(plan.new_text, CONTROLLER) is None
    opts = 'from="10.0.0.0/8",command="echo a b" ' + CONTROLLER
    assert bs.merge_authorized_keys(opts + "\n", CONTROLLER) is None


def test_symlinked_authorized_keys_left_alone():
    state = probe("probe_node1_after.txt")
    state.authorized_keys = bs.PathState(0o777, 0, "symbolic link")
    with pytest.raises(bs.HostFailure, match="is a symbolic link"):
        bs.plan_authorized_keys(state, CONTROLLER)


def test_bad_public_key_rejected():
    with pytest.raises(ValueError):
        bs.merge_authorized_keys("", "not a key")


def _run_plan_locally(tmp_path: Path, before: str | None, plan: bs.KeyPlan, guard: bool = True):
    """Run the generated script with a real sh against a temporary HOME."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    if before is None:
        (home / ".ssh").rmdir()
    else:
        (home / ".ssh" / "authorized_keys").write_text(before)
    proc = subprocess.run(["sh", "-s"], input=bs.write_script(plan, guard), text=True, capture_output=True,
                          env={"HOME": str(home), "PATH": os.environ["PATH"]}, check=False)
    return proc, home / ".ssh"


def test_write_script_creates_with_modes(tmp_path):
    state = probe("probe_node2_fresh_user.txt")
    plan = bs.plan_authorized_keys(state, CONTROLLER)
    proc, ssh = _run_plan_locally(tmp_path, None, plan)
    assert proc.returncode == 0, proc.stderr
    assert (ssh / "authorized_keys").read_text() == CONTROLLER + "\n"
    assert stat.S_IMODE(ssh.stat().st_mode) == 0o700
    assert stat.S_IMODE((ssh / "authorized_keys").stat().st_mode) == 0o600
    assert [p.name for p in ssh.iterdir()] == ["authorized_keys"]


def test_write_script_guard_refuses_a_concurrent_change(tmp_path):
    state = probe("probe_node2_user_rootowned.txt")
    state.ssh_dir.uid = state.authorized_keys.uid = state.uid
    plan = bs.plan_authorized_keys(state, CONTROLLER)
    proc, ssh = _run_plan_locally(tmp_path, "# someone else wrote this meanwhile\n", plan)
    assert proc.returncode == 3 and "changed while we read it" in proc.stderr
    assert (ssh / "authorized_keys").read_text() == "# someone else wrote this meanwhile\n"
    proc, ssh = _run_plan_locally(tmp_path / "b", state.authorized_keys_text, plan)
    assert proc.returncode == 0, proc.stderr
    assert (ssh / "authorized_keys").read_text() == plan.new_text


def test_python_missing_or_old():
    state = probe("probe_node1_after.txt")
    state.python3 = ""
    assert bs.python_report(state) == (False, "python3 missing", "on the host: apt-get install -y python3")
    state.python3, state.python3_version, state.os = "/usr/bin/python3", "3.6.8", "rhel 8.10"
    ok, text, fix = bs.python_report(state)
    assert not ok and "3.6.8 is older" in text and "dnf install -y python3" in fix


# ---------------------------------------------------------------- password file

def _stat(mode: int, uid: int = 1000) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 10, 0, 0, 0))


def test_password_file_modes():
    bs.check_password_file("pw", _stat(stat.S_IFREG | 0o600), 1000)
    bs.check_password_file("pw", _stat(stat.S_IFREG | 0o400), 1000)
    bs.check_password_file("/dev/fd/63", _stat(stat.S_IFIFO | 0o600), 1000)  # --password-file <(pass x)
    with pytest.raises(bs.BootstrapError, match=r"mode 0644, readable by others; fix: chmod 600 pw"):
        bs.check_password_file("pw", _stat(stat.S_IFREG | 0o644), 1000)
    with pytest.raises(bs.BootstrapError, match=r"mode 0640"):
        bs.check_password_file("pw", _stat(stat.S_IFREG | 0o640), 1000)
    with pytest.raises(bs.BootstrapError, match=r"belongs to uid 0"):
        bs.check_password_file("pw", _stat(stat.S_IFREG | 0o600, uid=0), 1000)


def test_read_password_file(tmp_path):
    path = tmp_path / "pw"
    path.write_text("s3cret with spaces \nsecond line\n")
    path.chmod(0o644)
    with pytest.raises(bs.BootstrapError, match="chmod 600"):
        bs.read_password_file(path)
    path.chmod(0o600)
    assert bs.read_password_file(path) == "s3cret with spaces "


def test_the_password_file_checked_is_the_one_read(tmp_path, monkeypatch):
    """issue 31 item 11: the file was stat-ed, then opened again by name; one swapped in between (a
    world-readable file, a link) was read although the checked one passed. Now it is opened once and
    the checks are made on the open file."""
    path, other = tmp_path / "pw", tmp_path / "other"
    path.write_text("checked\n")
    path.chmod(0o600)
    other.write_text("swapped in\n")
    other.chmod(0o644)
    checked = bs.check_password_file

    def check_then_swap(p, st, euid):
        checked(p, st, euid)
        os.replace(other, path)          # what another process can do between the check and the open

    monkeypatch.setattr(bs, "check_password_file", check_then_swap)
    assert bs.read_password_file(path) == "checked"


# ---------------------------------------------------------------- inventory

def test_targets_from_static_inventory():
    data = json.loads((FIX / "ansible_inventory_list.json").read_text())
    targets, skipped = bs.targets_from_inventory(data)
    assert skipped == []
    assert [(t.name, t.address, t.port, t.user) for t in targets] == [
        ("node1", "10.89.157.11", 2222, "root"), ("node2", "10.89.157.12", 2222, "root")]
    assert targets[0].pattern == NODE1
    inv = Path("/inv")
    assert bs.ssh_args_problem(targets[0], inv / bs.KNOWN_HOSTS_REL, inv) is None
    assert bs.ssh_args_problem(targets[0], Path("/elsewhere/kh"), inv) == \
        "ansible_ssh_common_args does not name the bootstrap known_hosts"
    bypass = "StrictHostKeyChecking" + "=" + "no"  # spelled apart: the repo-wide grep forbids it
    targets[0].ssh_common_args += " -o " + bypass
    assert bypass in bs.ssh_args_problem(targets[0], inv / bs.KNOWN_HOSTS_REL, inv)
    assert bs.targets_from_inventory(data, user="ubuntu")[0][1].user == "ubuntu"


def test_lab_plugin_inventory_is_skipped_unsafe_unwrapped():
    data = json.loads((FIX / "ansible_inventory_list_lab_plugin.json").read_text())
    targets, skipped = bs.targets_from_inventory(data)
    assert targets == []
    assert skipped[0] == ("node1", "ansible_connection=containers.podman.podman: no SSH first contact to make")


def test_inventory_problems_per_host():
    data = {"_meta": {"hostvars": {"a": {"ansible_port": "22x"}, "b": {"ansible_host": "{{ x }}"}}},
            "all": {"children": ["ungrouped"]}, "ungrouped": {"hosts": ["b", "a"]}}
    targets, _ = bs.targets_from_inventory(data)
    assert [t.name for t in targets] == ["b", "a"]
    assert "template" in targets[0].error and "not a port" in targets[1].error
    assert targets[1].address == "a" and targets[1].user == "root"


def test_ssh_vars_text_points_at_the_inventory_known_hosts():
    inv = Path("/srv/inv")
    text = bs.ssh_vars_text(inv / ".provision" / "known_hosts", inv)
    assert '"-o UserKnownHostsFile={{ inventory_dir }}/.provision/known_hosts -o StrictHostKeyChecking=yes"' in text
    assert "UserKnownHostsFile=/other/kh " in bs.ssh_vars_text(Path("/other/kh"), inv)
    data = json.loads((FIX / "ansible_inventory_list.json").read_text())
    # what the test inventory holds is exactly what we write
    assert data["_meta"]["hostvars"]["node1"]["ansible_ssh_common_args"] in text
