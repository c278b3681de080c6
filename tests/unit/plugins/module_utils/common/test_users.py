"""Running a command as the cluster user (plugins/module_utils/common/users.py), the one way every module does it."""

from __future__ import annotations

import os
import pwd
import subprocess

import helpers  # noqa: F401  (puts collections/ on sys.path)
import pytest
from ansible_collections.provision.cluster.plugins.module_utils.common import users

# Debian 12's /etc/login.defs (the lines login(1) reads PATH from)
LOGIN_DEFS = ("ENV_SUPATH\tPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
              "ENV_PATH\tPATH=/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games\n")


def test_login_path_is_what_login_sets(tmp_path):
    defs = tmp_path / "login.defs"
    defs.write_text("# comment\n" + LOGIN_DEFS)
    assert users.login_path(0, str(defs)) == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert users.login_path(1000, str(defs)) == "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
    missing = str(tmp_path / "none")
    assert users.login_path(0, missing) == users.DEFAULT_SUPATH
    assert users.login_path(1000, missing) == users.DEFAULT_PATH


def test_the_same_user_is_not_switched_but_gets_its_login_environment():
    me = pwd.getpwuid(os.getuid())
    kwargs, err = users.as_user(me.pw_name, {"LANG": "C.UTF-8"})
    assert err is None and not {"user", "group", "preexec_fn"} & set(kwargs)
    assert kwargs["env"] == {"PATH": users.login_path(me.pw_uid), "LANG": "C.UTF-8", "HOME": me.pw_dir,
                             "USER": me.pw_name, "LOGNAME": me.pw_name}
    assert kwargs["cwd"] == (me.pw_dir if os.path.isdir(me.pw_dir) else "/")


def test_no_user_keeps_the_modules_environment(monkeypatch):
    monkeypatch.setenv("PROVISION_TEST_MARK", "1")
    kwargs, err = users.as_user(None, {"PDSH_RCMD_TYPE": "ssh"})
    assert err is None and set(kwargs) == {"env"}
    assert kwargs["env"]["PROVISION_TEST_MARK"] == "1" and kwargs["env"]["LANG"] == "C"
    assert kwargs["env"]["PDSH_RCMD_TYPE"] == "ssh"


def test_another_user_needs_root(monkeypatch):
    other = next((p for p in pwd.getpwall() if p.pw_uid != os.getuid()), None)
    if other is None:
        pytest.skip("no second user on this machine")
    monkeypatch.setattr(users.os, "getuid", lambda: 4242 if other.pw_uid != 4242 else 4243)
    assert users.as_user(other.pw_name) == (None, "cannot run as %s without root (use become)" % other.pw_name)


@pytest.mark.skipif(os.getuid() != 0, reason="switching users needs root")
def test_root_runs_the_command_as_the_user_in_its_home():
    nobody = pwd.getpwnam("nobody")
    kwargs, err = users.as_user("nobody")
    assert err is None
    out = subprocess.run(["sh", "-c", 'id -u; id -g; echo "$HOME $USER $LOGNAME"; pwd'], capture_output=True,
                         text=True, check=True, **kwargs).stdout.split("\n")
    assert out[:2] == [str(nobody.pw_uid), str(nobody.pw_gid)]
    assert out[2] == "%s nobody nobody" % nobody.pw_dir
    # nobody's home (/nonexistent) is missing: login(1) starts in / then
    assert out[3] == (nobody.pw_dir if os.path.isdir(nobody.pw_dir) else "/")


def test_as_user():
    import os
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    kwargs, err = users.as_user(me, {"PDSH_RCMD_TYPE": "ssh"})
    assert err is None and "user" not in kwargs and "preexec_fn" not in kwargs
    assert kwargs["env"]["PDSH_RCMD_TYPE"] == "ssh" and kwargs["env"]["USER"] == me
    assert users.as_user("no-such-user-provision")[1] == "user no-such-user-provision does not exist"
    if os.getuid() == 0:
        kwargs, err = users.as_user("nobody")
        assert err is None and kwargs["user"] == pwd.getpwnam("nobody").pw_uid
