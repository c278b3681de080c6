"""python_venv with install=false: an existing environment adopted as it is (scripts/gpu_proof.sh adopts
the GPU image's PyTorch so). The environment here is a real venv made for the test; nothing is installed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import run_module


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv without pip (fast) whose only distribution is a hand-made dist-info of 'demo' 1.2.3+local."""
    path = tmp_path_factory.mktemp("adopt") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    site = next(path.glob("lib/python*/site-packages"))
    info = site / "demo-1.2.3+local.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.2.3+local\n")
    return path


def _tree(path):
    return sorted((str(p), p.stat().st_mtime_ns, p.stat().st_uid) for p in path.rglob("*"))


def adopt(path, requirements, **extra):
    args = {"path": str(path), "requirements": requirements, "find_links": "/nonexistent/wheelhouse",
            "install": False, "node": "node1", **extra}
    return run_module("python_venv", args)


def test_adopts_an_environment_that_meets_the_pins_and_changes_nothing(venv):
    before = _tree(venv)
    # an owner that does not exist: install=false never re-owns, so it is not even looked up
    out = adopt(venv, ["demo==1.2.3"], owner="no-such-user-here")
    assert not out.get("failed"), out
    assert out["changed"] is False and out["adopted"] is True and out["installed"] == []
    assert out["python"] == os.path.join(str(venv), "bin", "python")
    assert out["ansible_facts"]["provision_env_python_env"]["env"] == {"VIRTUAL_ENV": str(venv)}
    assert _tree(venv) == before


def test_unmet_pins_fail_in_one_line_naming_what_the_environment_has(venv):
    out = adopt(venv, ["demo==2.0", "torch==2.11.0"])
    assert out["failed"] is True
    assert out["msg"].startswith(f"node1: demo==2.0 torch==2.11.0 not met in {venv} (demo 1.2.3+local, torch absent)")
    assert "python_env_install is false: nothing is installed" in out["msg"] and "\n" not in out["msg"]


def test_an_environment_that_does_not_run_fails_instead_of_being_made(tmp_path):
    out = adopt(tmp_path / "none", ["demo==1.2.3"])
    assert out["failed"] is True and "does not run, and python_env_install is false" in out["msg"]
    assert not (tmp_path / "none").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the trust walk is root's")
def test_the_versions_check_after_adopting_does_not_walk_the_environment_again(venv):
    """python_env's call: python_venv walks the environment's trust once, then runs the versions check on it
    (option check) without a second walk; the check alone (python_versions) walks it itself."""
    from unittest import mock

    from ansible_collections.provision.cluster.plugins.module_utils.common import python_env as P

    check = {"python": os.path.join(str(venv), "bin", "python"), "require_torch": False}
    with mock.patch.object(P, "untrusted", wraps=P.untrusted) as walk:
        out = adopt(venv, ["demo==1.2.3"], check=check)
    assert not out.get("failed"), out
    assert [c.args[0] for c in walk.call_args_list] == [str(venv)], walk.call_args_list
    (found,) = out["check_result"]["checks"]
    assert found["check"] == "python_env" and found["detail"].startswith("torch does not import"), found
    with mock.patch.object(P, "untrusted", wraps=P.untrusted) as walk:
        alone = run_module("python_versions", check)
    assert [c.args[0] for c in walk.call_args_list] == [str(venv)] and alone["checks"] == out["check_result"]["checks"]
