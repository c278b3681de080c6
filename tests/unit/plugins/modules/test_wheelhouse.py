"""The wheelhouse module never records a set of pins without its own pins' wheels, and two runs on one
wheelhouse take turns. pip is stood in for by a script that prints a real pip download output (the
capture tests/fixtures/toolchains/pip-download-present.txt) and makes the wheels it names, empty."""

from __future__ import annotations

import fcntl
import json
import os
import stat

from helpers import FIXTURES, run_module

CAPTURE = FIXTURES / "toolchains" / "pip-download-present.txt"
TORCH = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def fake_pip(tmp_path, drop=None):
    """A `python` whose `-m pip download ... --dest D` prints the capture (less the lines naming `drop`,
    as a pip that did not report that file) and touches each wheel it names in D."""
    lines = [ln for ln in CAPTURE.read_text().splitlines() if not (drop and drop in ln)]
    out = tmp_path / "pip-output.txt"
    out.write_text("\n".join(lines) + "\n")
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\n"
        'while [ $# -gt 0 ]; do [ "$1" = --dest ] && dest=$2; shift; done\n'
        f"cat {out}\n"
        f"grep -o '[^/ ]*\\.whl$' {out} | while read w; do : > \"$dest/$w\"; done\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def args(tmp_path, python, **extra):
    return {"path": str(tmp_path / "wh"), "requirements": [["torch==2.13.0", "numpy==2.3.5"]],
            "python": str(python), "find_links": [], **extra}


def manifest(tmp_path):
    return json.loads((tmp_path / "wh" / ".provision-wheelhouse.json").read_text())


def test_a_full_report_is_recorded_and_a_second_run_downloads_nothing(tmp_path):
    python = fake_pip(tmp_path)
    first = run_module("wheelhouse", args(tmp_path, python))
    assert not first.get("failed"), first
    assert first["changed"] is True
    files = manifest(tmp_path)["sets"]["numpy==2.3.5 torch==2.13.0"]
    assert TORCH in files and len(files) == 11
    again = run_module("wheelhouse", args(tmp_path, python))
    assert again["changed"] is False and again["downloaded"] == []


def test_a_pin_pip_did_not_name_is_taken_from_the_directory(tmp_path):
    # another run had put torch there (what two controllers filling one wheelhouse left behind)
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / TORCH).write_bytes(b"")
    out = run_module("wheelhouse", args(tmp_path, fake_pip(tmp_path, drop="torch-2.13.0")))
    assert not out.get("failed"), out
    assert TORCH in manifest(tmp_path)["sets"]["numpy==2.3.5 torch==2.13.0"]


def test_a_pin_without_a_wheel_fails_naming_it_and_records_nothing(tmp_path):
    out = run_module("wheelhouse", args(tmp_path, fake_pip(tmp_path, drop="torch-2.13.0")))
    assert out.get("failed") and "left no wheel of torch==2.13.0" in out["msg"], out
    assert not (tmp_path / "wh" / ".provision-wheelhouse.json").exists()


def test_a_manifest_that_lost_the_pins_wheels_is_filled_again(tmp_path):
    python = fake_pip(tmp_path)
    assert not run_module("wheelhouse", args(tmp_path, python)).get("failed")
    data = manifest(tmp_path)
    key = "numpy==2.3.5 torch==2.13.0"
    data["sets"][key] = [f for f in data["sets"][key] if not f.startswith(("torch-", "numpy-"))]
    (tmp_path / "wh" / ".provision-wheelhouse.json").write_text(json.dumps(data))
    out = run_module("wheelhouse", args(tmp_path, python))
    assert out["changed"] is True and out["downloaded"] == [["torch==2.13.0", "numpy==2.3.5"]]
    assert TORCH in manifest(tmp_path)["sets"][key]


def test_a_wheelhouse_another_run_holds_is_waited_for_within_the_timeout(tmp_path):
    (tmp_path / "wh").mkdir()
    with open(tmp_path / "wh" / ".provision-wheelhouse.lock", "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        out = run_module("wheelhouse", args(tmp_path, fake_pip(tmp_path), timeout=1))
    assert out.get("failed") and "stayed locked by another run for 1s" in out["msg"], out
    assert sorted(os.listdir(tmp_path / "wh")) == [".provision-wheelhouse.lock"]


def test_check_mode_downloads_nothing(tmp_path):
    out = run_module("wheelhouse", dict(args(tmp_path, fake_pip(tmp_path)), _ansible_check_mode=True))
    assert out["changed"] is True and not (tmp_path / "wh").exists()
