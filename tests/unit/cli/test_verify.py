"""`provision verify` (src/provision/verify.py, src/provision/commands/verify.py): the command it runs,
the document it hands back, what it prints and its exit codes. The documents are recorded from real
runs (tests/fixtures/verify/README.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import helpers  # noqa: F401
from provision import ansible
from provision import verify as core
from provision.cli import cli

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "verify"


def recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text())


def test_select_checks_orders_and_always_has_reach():
    assert core.select_checks(["mesh", "gcc"], smoke=False) == ["reach", "mesh", "gcc"]
    assert "smoke" not in core.select_checks([], smoke=False)
    assert core.select_checks([], smoke=True)[-1] == "smoke"
    with pytest.raises(core.VerifyError, match="unknown check nope; known: reach"):
        core.select_checks(["nope"], smoke=False)


def test_build_command_selection_limit_and_vars(tmp_path):
    argv, env = core.build_command(str(tmp_path), checks=["reach", "mesh"], limit="node1",
                                   extra_vars=["gcc_toolchain_min_version=11"])
    assert argv[1].endswith("playbooks/verify.yml")
    assert argv[argv.index("--limit") + 1] == "node1"
    assert "gcc_toolchain_min_version=11" in argv
    assert json.loads(argv[argv.index("-e") + 1]) == {"verify_fail_on_error": False, "verify_smoke": False,
                                                      "verify_select": ["reach", "mesh"]}
    assert env["ANSIBLE_STDOUT_CALLBACK"] == "provision.cluster.verify_events"
    assert env["ANSIBLE_CONFIG"].endswith("ansible.cfg")
    all_argv, _ = core.build_command(str(tmp_path), checks=core.select_checks([], True))
    assert json.loads(all_argv[all_argv.index("-e") + 1])["verify_smoke"] is True
    # --full: N x N logins; without it the inventory's verify_matrix (default the ring) is left alone
    full, _ = core.build_command(str(tmp_path), checks=["reach", "mesh"], full=True)
    assert json.loads(full[full.index("-e") + 1])["verify_matrix"] == "full"
    assert "verify_matrix" not in json.loads(argv[argv.index("-e") + 1])


def fake_run(report, seen=None, **kw):
    def run(argv, env, *, timeout=300, on_event=None, events=False, become_password=None):
        assert events
        if seen is not None:
            seen.update(argv=argv, env=env, become_password=become_password)
        if on_event:
            on_event({"event": "result", "host": "good", "task": "Node reachable", "status": "ok"})
        return ansible.Run(rc=0, stdout="", stderr="", duration_s=0.5, report=report, **kw)
    return run


def test_cli_json_document_adds_inventory_limit_and_duration_and_exits_1(monkeypatch, tmp_path):
    monkeypatch.setattr(ansible, "run_playbook", fake_run(recorded("unreachable.json")))
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--json", "--check", "reach"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert list(doc) == ["schema", "ok", "inventory", "limit", "selected", "duration_s", "summary",
                         "nodes", "checks", "mesh", "versions", "allreduce"]
    assert doc["ok"] is False and doc["nodes"][1]["name"] == "bad" and doc["duration_s"] == 0.5
    assert doc["inventory"] == str(tmp_path)


def test_become_password_goes_to_the_run_never_the_command_line(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(ansible, "run_playbook", fake_run(recorded("unreachable.json"), seen))
    secret = tmp_path / "pw"
    secret.write_text("s3cret-sudo\n")
    secret.chmod(0o600)
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--become-password-file", str(secret)])
    assert result.exit_code == 1, result.output
    assert seen["become_password"] == "s3cret-sudo"
    assert not any("s3cret" in a for a in seen["argv"]) and not any("s3cret" in v for v in seen["env"].values())
    assert "s3cret" not in result.output
    # -K asks on the terminal (getpass: not echoed)
    monkeypatch.setattr("getpass.getpass", lambda prompt: "typed-pw")
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "-K"])
    assert seen["become_password"] == "typed-pw" and "typed-pw" not in result.output


def test_become_password_file_others_can_read_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(ansible, "run_playbook", fake_run(recorded("unreachable.json")))
    secret = tmp_path / "pw"
    secret.write_text("pw\n")
    secret.chmod(0o644)
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--become-password-file", str(secret)])
    assert result.exit_code == 2 and "chmod 600" in result.output
    link = tmp_path / "link"
    link.symlink_to(secret)
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--become-password-file", str(link)])
    assert result.exit_code == 2 and "link" in result.output


def test_cli_human_output_names_node_check_cause_and_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(ansible, "run_playbook", fake_run(recorded("unreachable.json")))
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path)])
    assert result.exit_code == 1
    out = result.stdout
    assert re.search(r"FAIL bad: node reachable", out)
    assert "cause: Failed to connect to the host via ssh" in out
    assert "fix:   bring bad up" in out
    assert "verify: FAILED" in out


def test_human_rendering_of_a_healthy_lab(monkeypatch, tmp_path):
    monkeypatch.setattr(ansible, "run_playbook", fake_run(recorded("healthy-2nodes.json")))
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("ssh mesh (row: from, column: to)", "versions (differing values in red)", "ssh *",
                 "pdsh from *", "2.13.0+cpu", "verify: OK: 2 node(s)"):
        assert text in out, text
    assert "FAIL" not in out


def test_recorded_healthy_lab_has_every_check_on_every_node():
    doc = recorded("healthy-2nodes.json")
    assert doc["ok"] is True
    by_node: dict[str, set[str]] = {}
    for c in doc["checks"]:
        by_node.setdefault(c["node"], set()).add(c["check"])
    for node in ("node1", "node2"):
        for name in ("node reachable", "sshd listening (port 2222)", "port 29500 free", "env block", "gcc",
                     "gpu", "python_env", "shm", "memlock", "nofile", "landing", "versions equal",
                     f"ssh {node}->node1", f"ssh {node}->node2", f"pdsh from {node}"):
            assert name in by_node[node], (node, name, sorted(by_node[node]))
    assert {c["status"] for c in doc["checks"] if c["check"] == "gpu"} == {"skip"}


@pytest.mark.parametrize("args, message", [
    (["verify"], "no inventory"),
    (["verify", "-i", "/nonexistent/inventory"], "does not exist"),
    (["verify", "-i", ".", "--only", "bogus"], "unknown check bogus"),
])
def test_cli_usage_errors_exit_2_with_one_line(args, message):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_inventory_that_ansible_cannot_parse_exits_2(monkeypatch, tmp_path):
    def run(argv, env, *, timeout=300, on_event=None, events=False, become_password=None):
        return ansible.Run(rc=1, stdout="", duration_s=0.1,
                           stderr="[ERROR]: Completely failed to parse inventory source /x/broken.yml\n")
    monkeypatch.setattr(ansible, "run_playbook", run)
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path)])
    assert result.exit_code == 2
    assert "Completely failed to parse inventory source" in result.stderr


def test_cli_no_host_matched_exits_2(monkeypatch, tmp_path):
    def run(argv, env, *, timeout=300, on_event=None, events=False, become_password=None):
        return ansible.Run(rc=0, stdout="", stderr="", duration_s=0.1, no_hosts=True)
    monkeypatch.setattr(ansible, "run_playbook", run)
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--limit", "nodeX"])
    assert result.exit_code == 2
    assert "no host in group cluster matching --limit nodeX" in result.stderr


def test_cli_timeout_exits_3(monkeypatch, tmp_path):
    def run(argv, env, *, timeout=300, on_event=None, events=False, become_password=None):
        return ansible.Run(rc=-15, stdout="", stderr="", duration_s=timeout, timed_out=True, timeout_s=timeout)
    monkeypatch.setattr(ansible, "run_playbook", run)
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--timeout", "3"])
    assert result.exit_code == 3 and "did not finish within 3 s" in result.stderr


def test_cli_default_bound_grows_with_the_nodes_the_run_finds(monkeypatch, tmp_path):
    """No --timeout: 300 s up to 16 nodes, 10 s more a node beyond (the healthy 32-node lab's --smoke took 268 s
    of a flat 300); the bound is a function of the hosts the run reports, handed to run_playbook."""
    seen = {}

    def run(argv, env, *, timeout=300, on_event=None, events=False, become_password=None):
        seen["bound"] = timeout
        return ansible.Run(rc=-15, stdout="", stderr="", duration_s=1, timed_out=True, timeout_s=timeout(32))
    monkeypatch.setattr(ansible, "run_playbook", run)
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path)])
    assert [seen["bound"](n) for n in (0, 2, 16, 17, 32, 64)] == [300, 300, 300, 310, 460, 780]
    assert result.exit_code == 3
    assert "did not finish within 460 s (ansible-playbook was stopped; a longer bound: --timeout SECONDS)" in result.stderr


def test_cli_list_checks_is_the_catalog():
    result = CliRunner().invoke(cli, ["verify", "--list-checks"])
    assert result.exit_code == 0
    assert [ln.split()[0] for ln in result.stdout.splitlines()] == list(core.checks())
    assert list(core.checks())[:3] == ["reach", "sshd", "ports"]
    # one column of names, as wide as the longest
    assert len({ln.index(desc) for ln, desc in zip(result.stdout.splitlines(), core.checks().values())}) == 1


def test_cli_list_checks_json_is_one_document_on_stdout():
    result = CliRunner().invoke(cli, ["verify", "--list-checks", "--json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc == core.check_list() and doc["schema"] == 1
    assert [c["name"] for c in doc["checks"]] == list(core.checks())
    by_name = {c["name"]: c for c in doc["checks"]}
    assert by_name["reach"]["always"] and by_name["smoke"]["default"] is False
    assert by_name["sshd"]["modules"] == ["provision.cluster.port_facts"] and by_name["sshd"]["stage"] == "sshd"
    assert by_name["runtime"]["modules"] == ["provision.cluster.node_runtime", "provision.cluster.ssh_landing"]
    assert by_name["consistency"]["controller"] and not by_name["consistency"]["modules"]
    assert by_name["mesh"]["local"] is False and by_name["gpu_health"]["local_default"] is True


def test_row_key_groups_per_peer_checks():
    from provision.commands.verify import row_key

    nodes = ["node1", "node2", "node10"]
    assert row_key("ssh node1->node2", nodes) == "ssh *"
    assert row_key("ssh node10->node1", nodes) == "ssh *"
    assert row_key("nccl_net.reach.node10", nodes) == "nccl_net.reach *"
    assert row_key("pdsh from node2", nodes) == "pdsh from *"
    assert row_key("gcc", nodes) == "gcc"
    assert row_key("node1", nodes) == "node1"


def test_callback_prints_one_json_object_per_line(capsys):
    from ansible_collections.provision.cluster.plugins.callback.verify_events import CallbackModule

    class Named:
        def __init__(self, name):
            self.name = name

        def get_name(self):
            return self.name

    class Result:
        def __init__(self, host, task, res):
            self._host, self._task, self._result = Named(host), Named(task), res

    class Stats:
        processed = {"node1": 1}
        custom = {"_run": {"provision_verify": {"schema": 1, "nodes": []}}}

        def summarize(self, host):
            return {"ok": 1, "failures": 0, "unreachable": 0}

    cb = CallbackModule()
    cb.v2_playbook_on_task_start(Named("Node reachable"), False)
    cb.v2_runner_on_unreachable(Result("node1", "Node reachable", {"msg": "Failed to connect\nmore"}))
    cb.v2_playbook_on_stats(Stats())
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["event"] for e in events] == ["task", "result", "stats", "report"]
    assert events[1] == {"event": "result", "host": "node1", "task": "Node reachable", "status": "unreachable",
                         "msg": "Failed to connect"}
    assert events[3]["report"]["schema"] == 1


def test_exit_3_only_when_no_node_answered():
    from provision.verify import exit_code

    nodes = [{"name": "node1"}, {"name": "node2"}]
    down = [{"check": "reach", "node": n["name"], "status": "fail"} for n in nodes]
    assert exit_code({"ok": False, "nodes": nodes, "checks": down}) == 3
    # one node down among nodes that answered: the run checked them, a check failed
    assert exit_code({"ok": False, "nodes": nodes, "checks": down[1:] + [{"check": "reach", "node": "node1",
                                                                         "status": "pass"}]}) == 1
    assert exit_code({"ok": False, "nodes": nodes, "checks": down + [{"check": "gcc", "node": "node1",
                                                                      "status": "fail"}]}) == 1
    assert exit_code({"ok": True, "nodes": nodes, "checks": []}) == 0
