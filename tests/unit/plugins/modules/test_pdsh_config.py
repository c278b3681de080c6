"""The pdsh_config module as the pdsh stage calls it: the export it returns as a fact, and the stage's two stops
(pdsh absent after its install, a node pdsh does not reach) in one line each. pdsh is a fake on PATH that
answers for the nodes it is told to (pdsh's own output format: "host: text")."""

from __future__ import annotations

import pytest

import helpers

ENV = {"PDSH_RCMD_TYPE": "ssh", "WCOLL": "/etc/pdsh/hosts"}


def args(tmp_path, **extra):
    out = {"hosts": ["n1", "n2"], "hosts_file": str(tmp_path / "hosts"), "rcmd_default_path": str(tmp_path / "rcmd"),
           "connect_timeout": 5, "command_timeout": 10, "node": "n1", "export_env": ENV}
    out.update(extra)
    return out


def fake_pdsh(tmp_path, answers):
    """A pdsh that prints "host: hostname" for the hosts in answers, and pdsh's exit line for the others."""
    pdsh = tmp_path / "bin" / "pdsh"
    pdsh.parent.mkdir()
    lines = "".join("echo '%s: %s'\n" % (h, a) for h, a in answers.items())
    lost = "".join("echo 'pdsh@ctl: %s: ssh exited with exit code 255' >&2\n" % h for h in ("n1", "n2") if h not in answers)
    pdsh.write_text("#!/bin/sh\n%s%sexit %d\n" % (lines, lost, 1 if lost else 0))
    pdsh.chmod(0o755)
    return {"PATH": "%s:/usr/bin:/bin" % pdsh.parent}


def test_absent_pdsh_is_reported_then_stops_the_stage_after_its_install(tmp_path):
    path = {"PATH": str(tmp_path)}                       # no pdsh on it (nor in the sbin directories it searches)
    res = helpers.run_module("pdsh_config", args(tmp_path), env=path)
    if res.get("found") is not False:
        pytest.skip("this machine has pdsh in a sbin directory")
    assert not res.get("failed") and res["ansible_facts"]["provision_env_pdsh"]["env"] == ENV, res
    res = helpers.run_module("pdsh_config", args(tmp_path, fail_if_absent=True), env=path)
    assert res.get("failed") and res["msg"].startswith("n1: pdsh is not installed"), res
    assert "; fix: ansible-playbook site.yml --tags pdsh --limit n1" in res["msg"] and "\n" not in res["msg"]


def test_a_node_pdsh_does_not_reach_stops_the_stage_in_one_line(tmp_path):
    path = fake_pdsh(tmp_path, {"n1": "n1"})
    res = helpers.run_module("pdsh_config", args(tmp_path), env=path)
    # without fail_on_check (provision verify): the failed check, and the export
    assert not res.get("failed") and res["checks"][0]["status"] == "fail", res
    assert res["ansible_facts"] == {"provision_env_pdsh": {"env": ENV, "path": [], "ld_library_path": [], "source": []}}
    assert (tmp_path / "hosts").read_text() == "n1\nn2\n"
    res = helpers.run_module("pdsh_config", args(tmp_path, fail_on_check=True), env=path)
    assert res.get("failed") and res["msg"].startswith("n1: pdsh -w ^%s hostname: n2" % (tmp_path / "hosts")), res
    assert "; fix: " in res["msg"] and "\n" not in res["msg"]


def test_every_node_answering_passes_and_without_export_env_no_fact(tmp_path):
    path = fake_pdsh(tmp_path, {"n1": "n1", "n2": "n2"})
    res = helpers.run_module("pdsh_config", args(tmp_path, fail_on_check=True, export_env=None), env=path)
    assert not res.get("failed") and res["missing"] == [] and "ansible_facts" not in res, res
