"""The ~/.bashrc managed block: placement above every common non-interactive guard, byte-for-byte
preservation, idempotence, quoting proven by bash itself, and ~/.deepspeed_env."""

from __future__ import annotations

import os
import subprocess

import pytest

from ansible_collections.provision.cluster.plugins.module_utils.common import bashrc as br
import helpers
from helpers import REPO

BASHRC = REPO / "tests" / "fixtures" / "netenv" / "bashrc"
SKEL = (BASHRC / "debian12-skel.bashrc").read_text()          # case $- in *i*) ;; *) return;; esac
ETC_BASHRC = (BASHRC / "debian12-etc-bash.bashrc").read_text()  # [ -z "$PS1" ] && return
ROOT = (BASHRC / "debian12-root.bashrc").read_text()            # no guard

MERGED = {"env": {"NCCL_SOCKET_IFNAME": "eth1", "WEIRD": "a b 'c' $d \"e\""},
          "path": ["/opt/venv/bin", "/usr/local/cuda/bin"], "ld_library_path": ["/usr/local/cuda/lib64"],
          "source": ["/opt/rh/gcc-toolset-12/enable"]}
BLOCK = br.render_block(MERGED)

GUARDS = {
    "case-multiline": "case $- in\n    *i*) ;;\n      *) return;;\nesac\n",
    "case-one-line": "case $- in *i*) ;; *) return ;; esac\n",
    "ps1-and": '[ -z "$PS1" ] && return\n',
    "ps1-braces": '[ -z "${PS1-}" ] && return\n',
    "ps1-or": '[ -n "$PS1" ] || return\n',
    "test-ps1": 'test -z "$PS1" && return\n',
    "dash-double": "[[ $- != *i* ]] && return\n",
    "dash-double-quoted": '[[ "$-" != *i* ]] && return\n',
    "dash-double-or": "[[ $- == *i* ]] || return\n",
    "if-one-line": 'if [ -z "$PS1" ]; then return; fi\n',
    "if-multiline": 'if [[ $- != *i* ]]; then\n    # Shell is non-interactive.  Be done now!\n    return\nfi\n',
}
USER_TOP = "# my header\nexport EARLY=1\n\n"
USER_BOTTOM = "\nalias ll='ls -l'\nexport LATE=2  # mine\n"


def _bash_env(text: str, tmp_path, *names: str) -> dict[str, str]:
    """What a non-interactive bash sees after reading `text` as its startup file (as `ssh node cmd` does)."""
    rc = tmp_path / "rc"
    rc.write_text(text)
    script = "; ".join(f'printf "%s=%s\\n" {n} "${{{n}-<unset>}}"' for n in names)
    proc = subprocess.run(["bash", "-c", script], env={"BASH_ENV": str(rc), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                          capture_output=True, text=True, check=True)
    return dict(line.split("=", 1) for line in proc.stdout.splitlines())


@pytest.mark.parametrize("form", sorted(GUARDS))
def test_block_goes_above_every_guard_form(form, tmp_path):
    original = USER_TOP + "# If not running interactively, don't do anything\n" + GUARDS[form] + USER_BOTTOM
    new, where = br.place_block(original, BLOCK)
    assert new.index(BLOCK) == len(USER_TOP), where          # above the guard and its comment
    assert br.remove_block(new) == original                  # user content byte for byte
    assert br.place_block(new, BLOCK) == (new, "kept at line 4")
    seen = _bash_env(new, tmp_path, "NCCL_SOCKET_IFNAME", "LATE", "EARLY")
    assert seen == {"NCCL_SOCKET_IFNAME": "eth1", "LATE": "<unset>", "EARLY": "1"}   # the guard returned


def test_guard_really_hides_appended_lines(tmp_path):
    """The seed's failure: appended at the end, a non-interactive shell never sees it."""
    appended = SKEL + "export NCCL_SOCKET_IFNAME=eth1\n"
    assert _bash_env(appended, tmp_path, "NCCL_SOCKET_IFNAME") == {"NCCL_SOCKET_IFNAME": "<unset>"}
    fixed, _ = br.place_block(appended, BLOCK)
    assert _bash_env(fixed, tmp_path, "NCCL_SOCKET_IFNAME") == {"NCCL_SOCKET_IFNAME": "eth1"}


def test_real_debian_files():
    skel, where = br.place_block(SKEL, BLOCK)
    assert where == "above the non-interactive guard at line 6"
    assert skel.startswith(SKEL.split("# If not running")[0] + BLOCK + "# If not running interactively")
    etc, where = br.place_block(ETC_BASHRC, BLOCK)
    assert where.endswith("line 7") and etc.index(BLOCK) < etc.index('[ -z "$PS1" ] && return')
    root, where = br.place_block(ROOT, BLOCK)
    assert where == "top (no non-interactive guard)" and root == BLOCK + ROOT


def test_commented_out_guard_is_not_a_guard():
    text = "# [ -z \"$PS1\" ] && return\necho hi\n"
    assert br.find_guard(text.splitlines()) is None


def test_block_below_a_guard_is_moved_and_content_kept():
    stale = br.render_block({"env": {"OLD": "1"}})
    original = SKEL + USER_BOTTOM
    below = original + stale                     # e.g. someone appended it, or the guard came later
    new, where = br.place_block(below, BLOCK)
    assert new.index(BLOCK) < new.index("case $- in") and stale not in new
    assert br.remove_block(new) == original
    assert "guard at line 6" in where


def test_guard_added_later_above_the_block_moves_it():
    placed, _ = br.place_block(USER_TOP, BLOCK)              # no guard: at the top
    with_guard = GUARDS["ps1-and"] + placed                  # user puts a guard first
    new, _ = br.place_block(with_guard, BLOCK)
    assert new == BLOCK + GUARDS["ps1-and"] + USER_TOP


def test_changed_content_is_updated_in_place():
    first, _ = br.place_block(SKEL, br.render_block({"env": {"A": "1"}}))
    second, where = br.place_block(first, BLOCK)
    assert second == first.replace(br.render_block({"env": {"A": "1"}}), BLOCK)
    assert where == "above the non-interactive guard at line 6"


def test_file_without_trailing_newline_and_empty_file():
    assert br.place_block("", BLOCK) == (BLOCK, "top (no non-interactive guard)")
    text = "echo a\n[ -z \"$PS1\" ] && return"
    new, _ = br.place_block(text, BLOCK)
    assert br.remove_block(new) == text


def test_markers_that_do_not_pair_are_refused_naming_the_line_and_the_users_lines_are_never_dropped():
    # a BEGIN whose END the user deleted, the user's own lines after it: placing our block, then placing
    # it again, used to take everything from the stray BEGIN to our END as the old block
    text = "# my aliases\n" + br.BEGIN + "\nexport MINE=1\nalias ll='ls -l'\n"
    with pytest.raises(br.MarkerError, match=r"^line 2: .*has no .*# END provision managed environment.* fix: "):
        br.place_block(text, BLOCK)
    with pytest.raises(br.MarkerError, match=r"^line 1: .* has no .*BEGIN.* before it"):
        br.split_block(br.END + "\nexport X=1\n")
    with pytest.raises(br.MarkerError, match=r"^line %d: a second .* \(the first is at line 1\)" % (len(BLOCK.splitlines()) + 2)):
        br.remove_block(BLOCK + "x\n" + BLOCK)
    with pytest.raises(br.MarkerError, match=r"comes before its"):
        br.split_block(br.END + "\nx\n" + br.BEGIN + "\n")
    with pytest.raises(br.MarkerError):
        br.deepspeed_keys_of(text)


def test_render_is_deterministic_and_bash_reads_exact_values(tmp_path):
    again = br.render_block({"env": dict(reversed(list(MERGED["env"].items()))), "path": MERGED["path"],
                             "ld_library_path": MERGED["ld_library_path"], "source": MERGED["source"]})
    assert again == BLOCK
    seen = _bash_env(BLOCK + BLOCK, tmp_path, "WEIRD", "PATH", "LD_LIBRARY_PATH")   # read twice: no duplicates
    assert seen["WEIRD"] == "a b 'c' $d \"e\""
    assert seen["PATH"] == "/opt/venv/bin:/usr/local/cuda/bin:/usr/bin:/bin"
    assert seen["LD_LIBRARY_PATH"] == "/usr/local/cuda/lib64"
    assert "if [ -r /opt/rh/gcc-toolset-12/enable ]; then . /opt/rh/gcc-toolset-12/enable; fi" in BLOCK


def test_merge_env_orders_and_reports_conflicts():
    merged = br.merge_env([
        ("provision_env_python_env", {"env": {"VIRTUAL_ENV": "/opt/venv"}, "path": ["/opt/venv/bin"]}),
        ("provision_env_cuda_toolkit", {"env": {"CUDA_HOME": "/usr/local/cuda"}, "path": ["/usr/local/cuda/bin"],
                                        "ld_library_path": ["/usr/local/cuda/lib64"]}),
        ("provision_env_nccl_net", {"env": {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_IB_DISABLE": "1"}}),
    ], {"NCCL_SOCKET_IFNAME": "eth2", "MINE": 3})
    assert list(merged["env"]) == sorted(merged["env"])
    assert merged["env"]["NCCL_SOCKET_IFNAME"] == "eth2" and merged["env"]["MINE"] == "3"
    assert merged["path"] == ["/usr/local/cuda/bin", "/opt/venv/bin"]     # by fact name: cuda_toolkit < python_env
    assert merged["conflicts"] == ["NCCL_SOCKET_IFNAME: NCCL_SOCKET_IFNAME=eth1 (from provision_env_nccl_net) "
                                   "replaced by eth2 (from shell_env_extra_vars)"]
    with pytest.raises(ValueError, match="not a valid environment variable name"):
        br.merge_env([], {"BAD-NAME": 1})
    with pytest.raises(ValueError, match="path"):
        br.merge_env([("provision_env_x", {"env": {"PATH": "/x"}})])


def test_common_env_keeps_only_identical_values():
    assert br.common_env([{"A": "1", "B": "eth1"}, {"A": "1", "B": "eth0"}]) == {"A": "1"}
    assert br.common_env([]) == {}


def test_deepspeed_env_update():
    user = "MY_SETTING=x\nNCCL_DEBUG=INFO\n"
    first = br.update_deepspeed_env(user, {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_IB_HCA": "=mlx5_1:1"})
    assert first == "MY_SETTING=x\nNCCL_DEBUG=INFO\nNCCL_IB_HCA==mlx5_1:1\nNCCL_SOCKET_IFNAME=eth1\n"
    second = br.update_deepspeed_env(first, {"NCCL_SOCKET_IFNAME": "eth1"}, ["NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"])
    assert second == "MY_SETTING=x\nNCCL_DEBUG=INFO\nNCCL_SOCKET_IFNAME=eth1\n"
    assert br.update_deepspeed_env(second, {"NCCL_SOCKET_IFNAME": "eth1"}, ["NCCL_SOCKET_IFNAME"]) == second
    for line in second.splitlines():                  # DeepSpeed's runner: key, val = line.split('=', 1)
        key, val = line.split("=", 1)
        assert key and val
    assert br.deepspeed_safe({"A": "eth1", "B": "a b"}) == ({"A": "eth1"}, ["B"])


def test_deepspeed_keys_are_recorded_in_the_block():
    text = br.render_block({"env": {"A": "1"}}, ["A", "B"])
    assert br.deepspeed_keys_of(text) == ["A", "B"]
    assert br.deepspeed_keys_of(br.render_block({"env": {}}, [])) == []


def _module(tmp_path, args, check=False, diff=False):
    return helpers.run_module("shell_env_block", dict(args, _ansible_check_mode=check, _ansible_diff=diff,
                                                      _ansible_tmpdir=str(tmp_path), _ansible_remote_tmp=str(tmp_path)),
                              env={"HOME": str(tmp_path)})


def test_module_check_diff_then_write_then_idempotent(tmp_path):
    import pwd
    user = pwd.getpwuid(os.getuid()).pw_name
    rc, ds = tmp_path / "bashrc", tmp_path / "ds_env"
    rc.write_text(SKEL)
    os.chmod(rc, 0o640)
    args = {"user": user, "bashrc": str(rc), "env": {"NCCL_SOCKET_IFNAME": "eth1"}, "path": ["/opt/venv/bin"],
            "deepspeed_env": str(ds), "deepspeed_vars": {"NCCL_SOCKET_IFNAME": "eth1", "X": "a b"}}
    checked = _module(tmp_path, args, check=True, diff=True)
    assert checked["changed"] is True and rc.read_text() == SKEL and not ds.exists()
    assert checked["diff"][0]["before"] == SKEL and br.BEGIN in checked["diff"][0]["after"]
    assert checked["diff"][1]["after"] == "NCCL_SOCKET_IFNAME=eth1\n"
    assert {c["status"] for c in checked["checks"]} == {"fail"}
    done = _module(tmp_path, args)
    assert done["changed"] is True and done["deepspeed_skipped"] == ["X"]
    assert br.remove_block(rc.read_text()) == SKEL and ds.read_text() == "NCCL_SOCKET_IFNAME=eth1\n"
    assert oct(rc.stat().st_mode & 0o777) == "0o640"              # mode of the existing file kept
    again = _module(tmp_path, args)
    assert again["changed"] is False and {c["status"] for c in again["checks"]} == {"pass"}
    gone = _module(tmp_path, dict(args, state="absent"))
    assert gone["changed"] is True and rc.read_text() == SKEL and ds.read_text() == ""


def test_with_check_the_module_runs_verifys_env_check_on_the_block_it_wrote(tmp_path):
    """The shell_env stage's call (provision.cluster.check with module: shell_env_block): after writing, the
    same check as the module shell_env_check with the same arguments, in the same process."""
    import pwd
    user = pwd.getpwuid(os.getuid()).pw_name
    rc = tmp_path / "bashrc"
    rc.write_text(SKEL)
    # ssh to loopback, where nothing answers as this node: both runs see the same ssh error
    check = {"user": user, "bashrc": str(rc), "ssh_host": "127.0.0.1", "timeout": 2}
    args = {"user": user, "bashrc": str(rc), "env": {"NCCL_SOCKET_IFNAME": "eth1"}, "deepspeed_env": ""}
    done = _module(tmp_path, dict(args, check=check))
    alone = helpers.run_module("shell_env_check", check, env={"HOME": str(tmp_path)})
    assert done["changed"] is True and br.BEGIN in rc.read_text()
    found = done["check_result"]
    assert found["expected"] == {"env": {"NCCL_SOCKET_IFNAME": "eth1"}, "path": {}}       # read after the write
    assert dict(found, changed=False) == {k: v for k, v in alone.items() if k != "invocation"}, (found, alone)
    assert "check_result" not in _module(tmp_path, args)                           # no check asked, none run
    bad = _module(tmp_path, dict(args, check={"user": user}))
    assert bad["failed"] and bad["msg"].startswith("check: missing required arguments: ssh_host"), bad


@pytest.mark.skipif(os.getuid() != 0, reason="making a file for another user needs root")
def test_module_gives_the_files_it_makes_to_the_user(tmp_path):
    import pwd
    nobody = pwd.getpwnam("nobody")
    rc, ds = tmp_path / "bashrc", tmp_path / "ds_env"
    args = {"user": "nobody", "bashrc": str(rc), "env": {"NCCL_SOCKET_IFNAME": "eth1"},
            "deepspeed_env": str(ds), "deepspeed_vars": {"NCCL_SOCKET_IFNAME": "eth1"}}
    done = _module(tmp_path, args)
    assert done["changed"] is True
    for made in (rc, ds):
        st = made.stat()
        assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o777)) == (nobody.pw_uid, nobody.pw_gid, "0o644"), made



def test_merge_names_the_stages_that_set_something():
    merged = br.merge_env({"provision_env_python_env": {"env": {"VIRTUAL_ENV": "/opt/v"}, "path": ["/opt/v/bin"]},
                           "provision_env_cuda_toolkit": {"env": {}, "path": [], "ld_library_path": [], "source": []},
                           "provision_env_nccl_net": {"env": {"NCCL_SOCKET_IFNAME": "eth1"}}}, {"EXTRA": "1"})
    assert merged["stages"] == ["nccl_net", "python_env"]       # a CPU node's empty CUDA export is no stage's


def test_a_run_that_knows_a_recorded_stage_no_more_is_told_which():
    block = br.render_block(MERGED, stages=["python_env", "nccl_net"])
    assert "# exported by: nccl_net python_env\n" in block
    text, _ = br.place_block(SKEL, block)
    assert br.stages_of(text) == ["nccl_net", "python_env"]
    # a run with --tags shell_env and no cached facts knows neither stage; a run that has the facts (or ran
    # the stages, exporting nothing now) may rewrite the block
    assert br.lost_exports(text, ["provision_env_pdsh"]) == ["nccl_net", "python_env"]
    assert br.lost_exports(text, ["provision_env_python_env", "provision_env_nccl_net"]) == []
    # a block written before blocks recorded their stages, or none at all: nothing to compare with
    assert br.lost_exports(br.place_block(SKEL, BLOCK)[0], []) == [] and br.lost_exports(SKEL, []) == []
    assert br.stages_of(br.place_block(SKEL, br.render_block(MERGED, stages=[]))[0]) == []


def test_module_refuses_to_drop_what_an_unknown_stage_exported(tmp_path):
    import pwd
    user = pwd.getpwuid(os.getuid()).pw_name
    rc = tmp_path / "bashrc"
    rc.write_text(SKEL)
    full = {"user": user, "bashrc": str(rc), "deepspeed_env": "", "env": {"VIRTUAL_ENV": "/opt/v", "NCCL_SOCKET_IFNAME": "eth1"},
            "path": ["/opt/v/bin"], "stages": ["nccl_net", "python_env"],
            "known_stages": ["provision_env_nccl_net", "provision_env_python_env"], "node": "node2"}
    assert _module(tmp_path, full)["changed"] is True
    written = rc.read_text()
    # the same run with python_env's facts gone (site.yml --tags nccl_net,shell_env, an empty fact cache)
    partial = dict(full, env={"NCCL_SOCKET_IFNAME": "eth1"}, path=[], stages=["nccl_net"],
                   known_stages=["provision_env_nccl_net"])
    for check in (True, False):
        res = _module(tmp_path, partial, check=check)
        assert res.get("failed") and res["lost_stages"] == ["python_env"], res
        assert res["msg"].startswith("node2: ") and "--tags python_env,shell_env" in res["msg"], res["msg"]
        assert "\n" not in res["msg"] and rc.read_text() == written
    # python_env ran and exports nothing now (its fact defined, empty): its lines go
    gone = _module(tmp_path, dict(partial, known_stages=["provision_env_nccl_net", "provision_env_python_env"]))
    assert gone["changed"] is True and "/opt/v" not in rc.read_text() and br.stages_of(rc.read_text()) == ["nccl_net"]
