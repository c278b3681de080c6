"""Write-if-changed and file reads (plugins/module_utils/common/files.py): what every module that writes a file uses."""

from __future__ import annotations

import os
import pwd

import helpers  # noqa: F401  (puts collections/ on sys.path)
from helpers import patch_module_args
import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common import files


def module(tmp_path, check=False):
    with patch_module_args({"_ansible_check_mode": check, "_ansible_tmpdir": str(tmp_path)}):
        return AnsibleModule(argument_spec={}, supports_check_mode=True)


def leftovers(directory):
    return sorted(n for n in os.listdir(directory) if n.startswith("."))


def existing(tmp_path, text, mode=0o644, name="f"):
    path = tmp_path / name
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_a_new_file_gets_content_mode_and_owner_and_a_diff(tmp_path):
    w = files.FileWriter(module(tmp_path))
    path = str(tmp_path / "sub" / "f.conf")
    me = (os.getuid(), os.getgid())
    assert w.write(path, "a\n", mode=0o600, owner=me, dir_mode=0o700) is True
    st = os.stat(path)
    assert open(path).read() == "a\n" and oct(st.st_mode & 0o777) == "0o600" and (st.st_uid, st.st_gid) == me
    assert oct(os.stat(tmp_path / "sub").st_mode & 0o777) == "0o700"
    assert w.files == [{"path": path, "changed": True}]
    assert w.diffs == [{"before_header": path, "after_header": path, "before": "", "after": "a\n"}]
    assert leftovers(tmp_path / "sub") == []


def test_the_same_content_is_not_written_again(tmp_path):
    path = existing(tmp_path, "a\n", 0o640)
    inode = path.stat().st_ino
    w = files.FileWriter(module(tmp_path))
    assert w.write(str(path), "a\n") is False and w.write(str(path), "a\n", mode=0o640) is False
    assert path.stat().st_ino == inode and w.diffs == [] and [f["changed"] for f in w.files] == [False, False]


def test_check_mode_writes_nothing_but_tells_the_change_and_its_diff(tmp_path):
    path = existing(tmp_path, "old\n")
    w = files.FileWriter(module(tmp_path, check=True))
    assert w.write(str(path), "new\n", mode=0o600) is True and w.write(str(tmp_path / "new"), "x") is True
    assert w.remove(str(path)) is True
    assert path.read_text() == "old\n" and not (tmp_path / "new").exists()
    assert [(d["before"], d["after"]) for d in w.diffs] == [("old\n", "new\n"), ("", "x"), ("old\n", "")]
    assert w.ensure_dir(str(tmp_path / "d")) is True and not (tmp_path / "d").exists()


def test_a_changed_file_is_replaced_atomically_and_takes_the_mode_asked(tmp_path):
    path = existing(tmp_path, "old\n")
    inode = path.stat().st_ino
    w = files.FileWriter(module(tmp_path))
    assert w.write(str(path), "new\n", mode=0o600) is True
    assert path.read_text() == "new\n" and path.stat().st_ino != inode        # renamed over, not rewritten
    assert oct(path.stat().st_mode & 0o777) == "0o600" and leftovers(tmp_path) == []


def test_only_the_mode_differs_the_file_is_chmodded_without_a_diff(tmp_path):
    path = existing(tmp_path, "a\n")
    w = files.FileWriter(module(tmp_path))
    assert files.file_differs(str(path), "a\n", mode=0o600) == "mode"
    assert w.write(str(path), "a\n", mode=0o600) is True and w.diffs == []
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_new_only_keeps_an_existing_files_mode_and_sets_a_new_ones(tmp_path):
    old, new = existing(tmp_path, "a\n", 0o640, "old"), tmp_path / "new"
    w = files.FileWriter(module(tmp_path))
    assert w.write(str(old), "a\n", mode=0o644, new_only=True) is False   # mode not compared
    assert w.write(str(old), "b\n", mode=0o644, new_only=True) is True
    assert old.read_text() == "b\n" and oct(old.stat().st_mode & 0o777) == "0o640"
    old_mask = os.umask(0o077)
    try:
        assert w.write(str(new), "c\n", mode=0o644, new_only=True) is True
    finally:
        os.umask(old_mask)
    assert oct(new.stat().st_mode & 0o777) == "0o644"       # set after the move, whatever the umask


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_owner_is_set_after_the_move(tmp_path):
    nobody = pwd.getpwnam("nobody")
    owner = (nobody.pw_uid, nobody.pw_gid)
    w = files.FileWriter(module(tmp_path))
    made, kept = tmp_path / "made", tmp_path / "kept"
    kept.write_text("a\n")
    assert w.write(str(made), "x\n", owner=owner, new_only=True) is True
    assert (made.stat().st_uid, made.stat().st_gid) == owner
    assert w.write(str(kept), "b\n", owner=owner, new_only=True) is True
    assert kept.stat().st_uid == 0                           # an existing file keeps its owner
    assert files.file_differs(str(kept), "b\n", owner=owner) == "owner"
    assert w.write(str(kept), "b\n", owner=owner) is True and (kept.stat().st_uid, kept.stat().st_gid) == owner


def test_validate_sees_the_new_content_and_can_refuse_it(tmp_path):
    path = existing(tmp_path, "good\n")
    seen = []

    def validate(tmp):
        seen.append((os.path.dirname(tmp), open(tmp).read()))
        if "bad" in seen[-1][1]:
            raise ValueError("refused")

    w = files.FileWriter(module(tmp_path))
    with pytest.raises(ValueError, match="refused"):
        w.write(str(path), "bad\n", validate=validate)
    assert path.read_text() == "good\n" and leftovers(tmp_path) == []
    assert w.write(str(path), "better\n", validate=validate) is True and path.read_text() == "better\n"
    assert seen == [(str(tmp_path), "bad\n"), (str(tmp_path), "better\n")]


def test_remove(tmp_path):
    path = existing(tmp_path, "a\n")
    w = files.FileWriter(module(tmp_path))
    assert w.remove(str(path)) is True and not path.exists() and w.remove(str(path)) is False
    assert w.diffs == [{"before_header": str(path), "after_header": str(path), "before": "a\n", "after": ""}]


def test_reads(tmp_path):
    attr = tmp_path / "speed"
    attr.write_bytes(b"100000\n")
    assert files.read_attr(str(attr)) == "100000" and files.read_attr(str(tmp_path / "none")) is None
    raw = tmp_path / "raw"
    raw.write_bytes(b"caf\xe9\n")
    assert files.read_text(str(raw)).encode("utf-8", "surrogateescape") == b"caf\xe9\n"
    assert files.read_text(str(raw), errors="replace") == "caf\ufffd\n"
    assert files.read_text(str(tmp_path), "dflt") == "dflt"               # a directory: not readable
    assert files.read_text(str(tmp_path / "none"), "", only_missing=True) == ""
    with pytest.raises(IsADirectoryError):
        files.read_text(str(tmp_path), "", only_missing=True)
    w = files.FileWriter(module(tmp_path))
    assert w.write(str(raw), files.read_text(str(raw))) is False          # undecodable bytes survive a round trip


def test_read_no_follow_reads_a_regular_file_and_never_a_link_a_fifo_or_too_much(tmp_path):
    """A process reading its own user's files (launch_files_info as the owner): the file's bytes and stat;
    a planted link is refused without reading its target, a FIFO without waiting on it, a file over the
    limit without reading it into memory; a missing file is (None, None)."""
    plain = existing(tmp_path, "MASTER_ADDR=node1\n", mode=0o640, name="launch.env")
    data, st = files.read_no_follow(str(plain))
    assert data == b"MASTER_ADDR=node1\n" and st.st_mode & 0o777 == 0o640
    assert files.read_no_follow(str(tmp_path / "absent")) == (None, None)
    secret = existing(tmp_path, "root:$6$hash\n", mode=0o600, name="shadow")
    (tmp_path / "hostfile").symlink_to(secret)
    with pytest.raises(files.UnsafeFile, match=r"hostfile is a symbolic link \(not followed\); fix: remove it$"):
        files.read_no_follow(str(tmp_path / "hostfile"))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(files.UnsafeFile, match=r"fifo is not a regular file \(a FIFO, socket or device\)"):
        files.read_no_follow(str(tmp_path / "fifo"))   # O_NONBLOCK: returns at once, no writer needed
    with pytest.raises(files.UnsafeFile, match=r"is not a regular file \(a directory\)"):
        files.read_no_follow(str(tmp_path))
    big = existing(tmp_path, "x" * 100, name="big")
    with pytest.raises(files.UnsafeFile, match=r"big is 100 bytes, more than the 64 this module reads"):
        files.read_no_follow(str(big), limit=64)
