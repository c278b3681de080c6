"""plugins/module_utils/common/launch.py: the launch_dir decision and launch_job's job control."""

from __future__ import annotations

import os
import sys
import time

import pytest

import helpers  # noqa: F401  (puts collections/ on sys.path)
from ansible_collections.provision.cluster.plugins.module_utils.common import launch as U


# ---- launch_dir decision -------------------------------------------------------------------

def test_plan_files(tmp_path):
    files = {"a": {"content": "x\n", "mode": "0644"}, "b": {"content": "y\n", "mode": "0755"},
             "c": {"content": "z\n", "mode": "0644"}}
    (tmp_path / "a").write_text("x\n")
    os.chmod(tmp_path / "a", 0o644)
    (tmp_path / "b").write_text("y\n")
    os.chmod(tmp_path / "b", 0o644)
    assert U.plan_files(str(tmp_path), files) == [("b", "mode"), ("c", "missing")]
    (tmp_path / "a").write_text("changed\n")
    assert ("a", "content") in U.plan_files(str(tmp_path), files)


# ---- job control (local processes) ---------------------------------------------------------

def _poll_until_done(runs, run_id, limit=30):
    out, offset = "", 0
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        res = U.poll_job(runs, run_id, offset, wait=1)
        out += res["output"]
        offset = res["offset"]
        if not res["running"]:
            return out, res["exit_status"]
    raise AssertionError("job did not end")


def test_job_output_and_exit_status(tmp_path):
    runs = str(tmp_path / "runs")
    U.start_job(runs, "r1", [sys.executable, "-c", "import sys; print('hello'); sys.stderr.write('err\\n'); sys.exit(4)"])
    out, status = _poll_until_done(runs, "r1")
    assert "hello" in out and "err" in out and status == 4
    U.start_job(runs, "r2", ["sh", "-c", "echo one; sleep 0.5; echo two"])
    out, status = _poll_until_done(runs, "r2")
    assert out == "one\ntwo\n" and status == 0


def test_poll_wait_is_bounded_and_stop_kills_the_group(tmp_path):
    runs = str(tmp_path / "runs")
    U.start_job(runs, "r", ["sh", "-c", "sleep 60 & sleep 60; echo never"])
    started = time.monotonic()
    res = U.poll_job(runs, "r", 0, wait=1)
    assert res["running"] and res["exit_status"] is None and 0.9 < time.monotonic() - started < 5
    assert U.stop_job(runs, "r", grace=2) is True
    out, status = _poll_until_done(runs, "r", limit=10)
    assert "never" not in out and status == 128 + 15
    pgid = int(open(os.path.join(runs, "r", "pid")).read())
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert U.stop_job(runs, "r") is False


def test_run_ids_cannot_escape(tmp_path):
    for bad in ("", "../x", ".hidden"):
        with pytest.raises(ValueError):
            U.run_dir(str(tmp_path), bad)
    with pytest.raises(FileNotFoundError):
        U.poll_job(str(tmp_path), "nope")
