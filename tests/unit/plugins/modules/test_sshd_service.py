"""sshd_service's drop-in: written only when sshd -t accepts it, restored when the main config then fails."""

from __future__ import annotations

import json
import os

import helpers  # noqa: F401  (puts collections/ on sys.path)
from helpers import patch_module_args
import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.modules import sshd_service as M

# stand-in for `sshd -t -f FILE`: a file with BAD is invalid; the main config fails when a drop-in says CLASH
FAKE_SSHD = """#!/bin/sh
f="$3"
grep -q BAD "$f" && { echo "$f line 1: Bad configuration option: BAD" >&2; exit 255; }
[ "$f" = "%(main)s" ] && grep -qs CLASH %(dropins)s/*.conf && { echo "Port conflict" >&2; exit 255; }
exit 0
"""


@pytest.fixture()
def sshd(tmp_path):
    dropins = tmp_path / "sshd_config.d"
    dropins.mkdir()
    main = tmp_path / "sshd_config"
    main.write_text("Include %s/*.conf\n" % dropins)
    fake = tmp_path / "sshd"
    fake.write_text(FAKE_SSHD % {"main": main, "dropins": dropins})
    fake.chmod(0o755)

    def write_dropin(content, check=False):
        args = {"content": content, "path": str(dropins / "10-provision.conf"), "main_config": str(main),
                "_ansible_check_mode": check, "_ansible_diff": True, "_ansible_tmpdir": str(tmp_path)}
        with patch_module_args(args):
            module = AnsibleModule(argument_spec={"content": {"type": "str"}, "path": {"type": "path"},
                                                  "main_config": {"type": "path"}}, supports_check_mode=True)
            module.get_bin_path = lambda name, required=False, opt_dirs=None: str(fake)
            return M.Sshd(module).write_dropin()

    return write_dropin, dropins / "10-provision.conf"


def failure(capsys, call, *args):
    with pytest.raises(SystemExit):
        call(*args)
    return json.loads(capsys.readouterr().out)["msg"]


def test_a_valid_dropin_is_written_once(sshd):
    write, path = sshd
    changed, diff = write("Port 2222")
    assert changed and path.read_text() == "Port 2222\n" and oct(path.stat().st_mode & 0o777) == "0o644"
    assert diff == {"before_header": str(path), "after_header": str(path), "before": "", "after": "Port 2222\n"}
    assert write("Port 2222\n") == (False, None)


def test_check_mode_writes_nothing(sshd):
    write, path = sshd
    changed, diff = write("Port 2222", check=True)
    assert changed and diff["after"] == "Port 2222\n" and not path.exists()


def test_an_invalid_dropin_is_refused_and_the_old_one_kept(sshd, capsys):
    write, path = sshd
    write("Port 2222")
    msg = failure(capsys, write, "BAD yes")
    assert msg.startswith("the new sshd drop-in is invalid (%s): " % path) and "Bad configuration option" in msg
    assert path.read_text() == "Port 2222\n" and sorted(os.listdir(path.parent)) == ["10-provision.conf"]


def test_a_dropin_the_main_config_rejects_is_rolled_back(sshd, capsys):
    write, path = sshd
    msg = failure(capsys, write, "CLASH yes")
    assert msg.startswith("sshd -t rejects") and "old one restored: Port conflict" in msg
    assert not path.exists()                                  # there was none before
    write("Port 2222")
    failure(capsys, write, "CLASH again")
    assert path.read_text() == "Port 2222\n" and sorted(os.listdir(path.parent)) == ["10-provision.conf"]
