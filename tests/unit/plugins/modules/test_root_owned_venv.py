"""The environment root runs is root's (issue 31, item 2): a venv another user could write is never run
by root (python_venv sets it aside and makes it again, python_versions refuses it), a `.pth` file planted
there by that user never runs, and the cluster user cannot be made its owner."""

from __future__ import annotations

import json
import os
import stat
import sys

import helpers
import pytest
from ansible_collections.provision.cluster.plugins.module_utils.common import python_env as P


def fake_venv(root, marker, owner=None):
    """A venv-shaped tree whose python (a shell script) and whose planted .pth would each leave `marker`
    behind when run: what a training user who owned /opt/provision/venv could put there."""
    venv = root / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    py = venv / "bin" / "python"
    py.write_text(f"#!/bin/sh\ntouch {marker}\necho '{{\"python\": \"3.11.2\", \"dists\": {{}}}}'\n")
    py.chmod(0o755)
    (site / "zz-planted.pth").write_text(f"import os; open({str(marker)!r}, 'w').close()\n")
    (site / "mine-1.0.dist-info").mkdir()
    if owner is not None:
        for path in [venv] + list(venv.rglob("*")):
            os.lchown(path, owner, owner)
    return venv


def test_untrusted_names_foreign_owners_writable_entries_and_parents(tmp_path):
    tree = tmp_path / "opt" / "env"
    (tree / "lib").mkdir(parents=True)
    (tree / "lib" / "a.py").write_text("")
    os.chmod(tmp_path / "opt", 0o755)
    assert P.untrusted(str(tree)) == [] or os.stat(tmp_path).st_uid != 0
    os.chmod(tree / "lib" / "a.py", 0o666)
    assert P.untrusted(str(tree)) == [f"{tree}/lib/a.py is mode 0666 (writable by group or others)"]
    os.chmod(tree / "lib" / "a.py", 0o644)
    os.chmod(tmp_path / "opt", 0o777)
    assert P.untrusted(str(tree))[0] == f"{tmp_path}/opt is mode 0777 (writable by group or others)"
    os.chmod(tmp_path / "opt", 0o755)
    (tree / "link").symlink_to("/etc")                 # a link's own mode does not count, nor is it followed
    assert P.untrusted(str(tree)) == []
    if os.geteuid() == 0:
        os.lchown(tree / "lib" / "a.py", 65534, 65534)
        assert P.untrusted(str(tree)) == [f"{tree}/lib/a.py is owned by uid 65534"]
        assert P.untrusted(str(tree), walk=False) == []



@pytest.mark.skipif(not any(os.access(f, os.X_OK) for f in P.FIND), reason="no find(1) here")
def test_find_walk_and_python_walk_name_the_same_entries(tmp_path, monkeypatch):
    """The walk below the tree is one find(1) where the node has it; without it Python walks: the same
    entries named, in the same words (a sticky directory and a link's own mode do not count, a link
    is not followed, the limit holds)."""
    tree = tmp_path / "env"
    (tree / "sticky" / "deep").mkdir(parents=True)
    (tree / "sticky").chmod(0o1777)
    (tree / "sticky" / "deep" / "w.py").write_text("")
    (tree / "sticky" / "deep" / "w.py").chmod(0o664)
    (tree / "odd name\nwith newline").write_text("")
    (tree / "odd name\nwith newline").chmod(0o646)
    (tree / "link").symlink_to(tmp_path)                 # followed, it would reach tmp_path's entries
    (tmp_path / "outside.py").write_text("")
    (tmp_path / "outside.py").chmod(0o666)
    if os.geteuid() == 0:
        (tree / "theirs").write_text("")
        os.lchown(tree / "theirs", 65534, 65534)
    mine = (os.geteuid(),)
    by_find = P.untrusted(str(tree), mine, limit=10)
    assert P._find_untrusted(str(tree), mine, 10) is not None
    monkeypatch.setattr(P, "FIND", ())
    by_python = P.untrusted(str(tree), mine, limit=10)
    expected = {f"{tree}/sticky/deep/w.py is mode 0664 (writable by group or others)",
                f"{tree}/odd name\nwith newline is mode 0646 (writable by group or others)"}
    if os.geteuid() == 0:
        expected.add(f"{tree}/theirs is owned by uid 65534")
    assert sorted(by_find) == sorted(by_python) == sorted(expected)
    assert len(P.untrusted(str(tree), mine, limit=1)) == 1
    # a find without -printf (busybox's) stops at once: Python walks instead
    busybox = tmp_path / "find"
    busybox.write_text("#!/bin/sh\necho 'find: unrecognized: -printf' >&2\nexit 1\n")
    busybox.chmod(0o755)
    monkeypatch.setattr(P, "FIND", (str(busybox),))
    assert P._find_untrusted(str(tree), mine, 10) is None
    assert sorted(P.untrusted(str(tree), mine, limit=10)) == sorted(expected)

@pytest.mark.parametrize("walker", ["find", "python"])
def test_uv_lock_file_at_the_environment_root_does_not_count(tmp_path, monkeypatch, walker):
    """`uv pip install` leaves a 0666 `.lock` at the venv's root (the H200 image's /opt/torch/.venv had one,
    and root refused to run that torch for it: tests/fixtures/h200-proof/): python never reads it, so it
    does not count; the same name elsewhere, as a directory, or hard-linked, is judged like any entry."""
    if walker == "find" and not any(os.access(f, os.X_OK) for f in P.FIND):
        pytest.skip("no find(1) here")
    if walker == "python":
        monkeypatch.setattr(P, "FIND", ())
    mine = (os.geteuid(),)
    tree = tmp_path / "env"
    (tree / "lib").mkdir(parents=True)
    (tree / "pyvenv.cfg").write_text("home = /usr/bin\n")
    lock = tree / ".lock"
    lock.write_text("")
    lock.chmod(0o666)
    assert P.untrusted(str(tree), mine) == []
    assert P.untrusted(str(tree) + "/", mine) == []
    (tree / "lib" / ".lock").write_text("")
    (tree / "lib" / ".lock").chmod(0o666)
    (tree / "lib" / "a.py").write_text("")
    (tree / "lib" / "a.py").chmod(0o666)
    assert sorted(P.untrusted(str(tree), mine)) == [f"{tree}/lib/.lock is mode 0666 (writable by group or others)",
                                                    f"{tree}/lib/a.py is mode 0666 (writable by group or others)"]
    assert len(P.untrusted(str(tree), mine, limit=1)) == 1     # the tolerated lock takes no place in the limit
    os.link(lock, tmp_path / "other-name")                     # a second name: not uv's plain lock file
    assert f"{lock} is mode 0666 (writable by group or others)" in P.untrusted(str(tree), mine, limit=5)
    os.unlink(tmp_path / "other-name")
    lock.unlink()
    lock.mkdir()
    lock.chmod(0o777)
    assert f"{lock} is mode 0777 (writable by group or others)" in P.untrusted(str(tree), mine, limit=5)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a tree of another uid needs root")


@needs_root
def test_root_never_runs_a_venv_the_user_owns_it_is_set_aside_and_made_again(scratch_user, monkeypatch):
    from ansible.module_utils.basic import AnsibleModule

    # what the module warns, whatever this process's Ansible did with earlier warnings (2.19 routes a
    # module's warnings to the controller's display once a controller-side plugin was imported here)
    said: list[str] = []
    real_warn = AnsibleModule.warn
    monkeypatch.setattr(AnsibleModule, "warn", lambda self, msg, *a, **kw: (said.append(msg), real_warn(self, msg, *a, **kw))[1])
    marker = scratch_user.base / "ran-as-root"
    opt = scratch_user.base / "opt"
    opt.mkdir()
    venv = fake_venv(opt, marker, owner=scratch_user.UID)
    args = {"path": str(venv), "requirements": [], "find_links": str(opt), "python": sys.executable,
            "python_version": "%d.%d" % sys.version_info[:2], "owner": "root",
            # the versions check after the work (as the python_env stage runs it through provision.cluster.check)
            "check": {"python": str(venv / "bin" / "python"), "require_torch": False, "cache": str(venv / "c.json")}}
    dry = helpers.run_module("python_venv", dict(args, _ansible_check_mode=True))
    assert dry["changed"] and dry["created"] and dry["rebuilt_untrusted"][0] == f"{venv} is owned by uid {scratch_user.UID}"
    assert "check_result" not in dry    # check mode: nothing made yet, nothing to check
    assert not marker.exists() and venv.exists()            # check mode: neither run nor removed
    res = helpers.run_module("python_venv", args)
    assert res["created"] and res["rebuilt_untrusted"], res
    # the check ran on the environment made again (root's): this interpreter, no torch in it
    (check,) = res["check_result"]["checks"]
    assert check["status"] == "fail" and check["detail"].startswith("torch does not import"), res
    warned = json.dumps(said)
    assert "made again as root's" in warned and "also held mine (not pinned)" in warned, res
    assert not marker.exists(), "root ran the user's python or its .pth"
    assert P.untrusted(str(venv)) == [] and os.stat(venv).st_uid == 0
    assert not (venv / "lib" / "python3.11" / "site-packages" / "zz-planted.pth").exists()
    assert [n for n in os.listdir(opt) if "untrusted" in n] == []
    again = helpers.run_module("python_venv", args)
    assert again["changed"] is False and again["rebuilt_untrusted"] == [], again


@needs_root
def test_a_user_owned_parent_directory_is_refused_in_one_line(scratch_user):
    opt = scratch_user.base / "opt"
    opt.mkdir()
    venv = fake_venv(opt, scratch_user.base / "ran")
    os.chown(opt, scratch_user.UID, scratch_user.GID)
    res = helpers.run_module("python_venv", {"path": str(venv), "find_links": str(opt), "node": "node1"})
    assert res.get("failed") and res["msg"].startswith(f"node1: {opt} is owned by uid {scratch_user.UID}"), res
    assert f"fix: chown root: {opt}" in res["msg"] and not (scratch_user.base / "ran").exists()


@needs_root
def test_the_cluster_user_cannot_be_made_the_owner(scratch_user, monkeypatch):
    scratch_user.patch(monkeypatch)
    res = helpers.run_module("python_venv", {"path": str(scratch_user.base / "v"), "find_links": "/nonexistent",
                                             "owner": scratch_user.NAME})
    assert res.get("failed") and "stays root's" in res["msg"] and not (scratch_user.base / "v").exists(), res


@needs_root
def test_the_versions_probe_does_not_run_a_venv_another_user_can_write(scratch_user):
    marker = scratch_user.base / "ran-as-root"
    venv = fake_venv(scratch_user.base, marker)
    (venv / "lib" / "python3.11" / "site-packages").chmod(0o777)
    res = helpers.run_module("python_versions", {"python": str(venv / "bin" / "python"), "require_torch": False})
    check = res["checks"][0]
    assert check["status"] == "fail" and check["detail"].startswith(f"root does not run {venv}/bin/python: "), res
    assert "writable by group or others" in check["detail"] and not marker.exists()
    strict = helpers.run_module("python_versions", {"python": str(venv / "bin" / "python")})
    assert strict.get("failed") and "fix: run the python_env stage" in strict["msg"] and not marker.exists()
    assert stat.S_IMODE(os.stat(venv).st_mode) == 0o755
