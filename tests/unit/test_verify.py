"""provision verify: the document built from recorded playbook results, the CLI and its exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from helpers import REPO

from provision import verify as core
from provision.cli import cli

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "verify"


def recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text())


def playbook_tags() -> set[str]:
    plays = yaml.safe_load((REPO / "playbooks" / "verify.yml").read_text())
    tags: set[str] = set()
    for play in plays:
        for task in play.get("tasks", []):
            tags.update(task.get("tags", []))
    return tags


# ---------------------------------------------------------------- checks and playbook in step

def test_every_check_name_runs_in_the_playbook():
    plays = yaml.safe_load((REPO / "playbooks" / "verify.yml").read_text())
    batch = next(t for t in plays[0]["tasks"] if "provision.cluster.verify_checks" in t)
    names = set(batch["provision.cluster.verify_checks"]["checks"])
    for name, spec in batch["provision.cluster.verify_checks"]["checks"].items():
        assert f"'{name}' in __verify_selected" in spec["enabled"], name
    tags = playbook_tags()
    names |= {t.removeprefix("verify_") for t in tags}
    missing = [n for n in core.CHECKS if n not in names]
    assert not missing, f"CHECKS that playbooks/verify.yml does not run: {missing}"
    assert "verify_report" in tags


def test_every_check_task_of_the_playbook_is_read_only():
    plays = yaml.safe_load((REPO / "playbooks" / "verify.yml").read_text())
    for task in plays[0]["tasks"]:
        action = next(k for k in task if k.startswith(("provision.cluster.", "ansible.builtin.")))
        if action.startswith("provision.cluster."):
            assert task.get("check_mode") is True, f"{task['name']} must run with check_mode: true"


def test_select_checks_orders_and_always_has_reach():
    assert core.select_checks(["mesh", "gcc"], smoke=False) == ["reach", "mesh", "gcc"]
    assert "smoke" not in core.select_checks([], smoke=False)
    assert core.select_checks([], smoke=True)[-1] == "smoke"
    with pytest.raises(core.VerifyError, match="unknown check nope; known: reach"):
        core.select_checks(["nope"], smoke=False)


def test_build_command_selection_limit_and_vars(tmp_path):
    argv, env = core.build_command(str(tmp_path), checks=["reach", "mesh"], limit="node1",
                                   extra_vars=["gcc_min_version=11"])
    assert argv[1].endswith("playbooks/verify.yml")
    assert argv[argv.index("--limit") + 1] == "node1"
    assert "gcc_min_version=11" in argv
    assert json.loads(argv[argv.index("-e") + 1]) == {"verify_fail_on_error": False, "verify_smoke": False,
                                                      "verify_select": ["mesh"]}
    assert env["ANSIBLE_STDOUT_CALLBACK"] == "provision.cluster.verify_events"
    assert env["ANSIBLE_CONFIG"].endswith("ansible.cfg")
    all_argv, _ = core.build_command(str(tmp_path), checks=core.select_checks([], True))
    assert json.loads(all_argv[all_argv.index("-e") + 1])["verify_smoke"] is True


def test_resolve_inventory_errors(tmp_path):
    with pytest.raises(core.VerifyError, match="no inventory"):
        core.resolve_inventory(None)
    with pytest.raises(core.VerifyError, match="does not exist"):
        core.resolve_inventory(str(tmp_path / "nope"))
    assert core.resolve_inventory("node1,node2,") == "node1,node2,"


def test_error_line_takes_the_first_ansible_error():
    stderr = ("[WARNING]: Failed to load inventory plugin\n"
              "[ERROR]: Completely failed to parse inventory source /x/broken.yml\n  more\n")
    assert core.error_line(stderr) == "Completely failed to parse inventory source /x/broken.yml"
    assert core.error_line("ERROR! the playbook could not be found\n") == "the playbook could not be found"
    # ansible-core 2.19: the plugin's own message comes after "<<< caused by >>>"
    lab = ("[WARNING]: Failed to parse inventory with 'ansible_collections.provision.cluster.plugins.inventory.lab' "
           "plugin: lab inventory: lab 'x' has no running node\n\nFailed to parse inventory with "
           "'ansible_collections.provision.cluster.plugins.inventory.lab' plugin.\n\n<<< caused by >>>\n\n"
           "lab inventory: lab 'x' has no running node; run `provision lab up --name x`\n"
           "[ERROR]: Completely failed to parse inventory source /r/inventory/lab/lab.yml\n")
    assert core.error_line(lab) == "lab inventory: lab 'x' has no running node; run `provision lab up --name x`"


# ---------------------------------------------------------------- the document

def test_document_unreachable_node_is_a_failed_check_with_a_fix():
    doc = core.build_document(recorded("unreachable.json"), selected=["reach"])
    assert doc["ok"] is False
    assert [n["reachable"] for n in doc["nodes"]] == [True, False]
    bad = [c for c in doc["checks"] if c["status"] == "fail"]
    assert len(bad) == 1
    assert bad[0]["node"] == "bad" and bad[0]["check"] == "node reachable"
    assert "Connection refused" in bad[0]["detail"] and not bad[0]["detail"].startswith("Task failed")
    assert "ssh -p 1 127.0.0.1 true" in bad[0]["fix"]
    assert core.exit_code(doc) == 1


def test_document_schema_is_stable():
    doc = core.build_document(recorded("unreachable.json"), selected=["reach"], inventory="inv",
                              duration_s=1.234)
    assert list(doc) == ["schema", "ok", "inventory", "limit", "selected", "duration_s", "summary",
                         "nodes", "checks", "mesh", "versions", "allreduce"]
    assert doc["duration_s"] == 1.23
    assert doc["summary"] == {"pass": 1, "fail": 1, "warn": 0, "skip": 0}
    for c in doc["checks"]:
        assert set(c) == {"node", "check", "status", "detail", "fix"}
        assert c["status"] in core.STATUSES
        assert "\n" not in c["detail"] + c["fix"]
    assert doc["mesh"] == {"ran": False, "nodes": [], "matrix": {}}
    assert doc["allreduce"] == {"ran": False}


def test_module_results_in_every_contract_shape():
    fail_dict = {"check": {"check": "python_env", "status": "fail", "detail": "torch does not import\nx",
                           "fix": "run python_env"}, "failed": True, "msg": "torch does not import"}
    listed = {"checks": [{"check": "port 29500", "status": "fail", "detail": "29500 is held by pid 42 (python)",
                          "fix": "stop it: kill 42"}], "changed": False}
    crashed = {"failed": True, "msg": "MODULE FAILURE\nSee stdout/stderr", "module_stderr": "Traceback"}
    assert core._module_checks("n1", "versions", fail_dict) == [
        {"node": "n1", "check": "python_env", "status": "fail", "detail": "torch does not import",
         "fix": "run python_env"}]
    assert core._module_checks("n1", "ports", listed)[0]["fix"] == "stop it: kill 42"
    crash = core._module_checks("n1", "gcc", crashed)
    assert crash[0]["status"] == "fail" and crash[0]["detail"] == "MODULE FAILURE"
    assert core._module_checks("n1", "gcc", {"skipped": True}) == []


def test_nccl_interface_from_the_env_block_is_named_so():
    # the module result of verify.yml's "NCCL interface in effect" task (marked in_effect there)
    result = {"socket_ifname": "ib0", "in_effect": True, "checks": [
        {"check": "nccl_net.socket_ifname", "status": "fail",
         "detail": "node2: nccl_net_socket_ifname=ib0: no such interface (have: eth0, eth1, lo)",
         "fix": "set nccl_net_socket_ifname, or fix cluster_address"},
        {"check": "nccl_net.ib", "status": "skip", "detail": "node2: NCCL_IB_DISABLE=1", "fix": ""}]}
    bad, skipped = core._module_checks("node2", "nccl", result)
    assert bad["detail"] == ("NCCL_SOCKET_IFNAME=ib0 from ~/.bashrc (what non-interactive ssh gets): "
                             "node2: no such interface (have: eth0, eth1, lo)")
    assert bad["fix"].startswith("the env block exports another interface than nccl_net chose: "
                                 "ansible-playbook site.yml --tags shell_env --limit node2")
    assert skipped["detail"] == "node2: NCCL_IB_DISABLE=1"
    # the check of the interface nccl_net chose keeps its own words
    plain = core._module_checks("node2", "nccl", dict(result, in_effect=False))[0]
    assert plain["detail"].startswith("node2: nccl_net_socket_ifname=ib0")


# ---------------------------------------------------------------- the CLI

def fake_run(raw, **kw):
    def run(argv, env, *, timeout=300, on_event=None):
        if on_event:
            on_event({"event": "result", "host": "good", "task": "Node reachable", "status": "ok"})
        return core.Run(raw=raw, rc=0, stderr="", duration_s=0.5, **kw)
    return run


def test_cli_json_document_and_exit_1(monkeypatch, tmp_path):
    monkeypatch.setattr(core, "run_playbook", fake_run(recorded("unreachable.json")))
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["nodes"][1]["name"] == "bad"


def test_cli_human_output_names_node_check_cause_and_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(core, "run_playbook", fake_run(recorded("unreachable.json")))
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path)])
    assert result.exit_code == 1
    out = result.stdout
    assert re.search(r"FAIL bad: node reachable", out)
    assert "cause: Failed to connect to the host via ssh" in out
    assert "fix:   bring bad up" in out
    assert "verify: FAILED" in out


def test_cli_exit_0_when_all_pass(monkeypatch, tmp_path):
    raw = recorded("unreachable.json")
    raw["hosts"] = ["good"]
    monkeypatch.setattr(core, "run_playbook", fake_run(raw))
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "verify: OK" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["verify"], "no inventory"),
    (["verify", "-i", "/nonexistent/inventory"], "does not exist"),
    (["verify", "-i", ".", "--check", "bogus"], "unknown check bogus"),
])
def test_cli_usage_errors_exit_2_with_one_line(args, message):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_inventory_that_ansible_cannot_parse_exits_2(monkeypatch, tmp_path):
    def run(argv, env, *, timeout=300, on_event=None):
        return core.Run(raw=None, rc=1, duration_s=0.1,
                        stderr="[ERROR]: Completely failed to parse inventory source /x/broken.yml\n")
    monkeypatch.setattr(core, "run_playbook", run)
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path)])
    assert result.exit_code == 2
    assert "Completely failed to parse inventory source" in result.stderr


def test_cli_no_host_matched_exits_2(monkeypatch, tmp_path):
    def run(argv, env, *, timeout=300, on_event=None):
        return core.Run(raw=None, rc=0, stderr="", duration_s=0.1, no_hosts=True)
    monkeypatch.setattr(core, "run_playbook", run)
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--limit", "nodeX"])
    assert result.exit_code == 2
    assert "no host in group cluster matching --limit nodeX" in result.stderr


def test_cli_list_checks():
    result = CliRunner().invoke(cli, ["verify", "--list-checks"])
    assert result.exit_code == 0
    assert [ln.split()[0] for ln in result.stdout.splitlines()] == list(core.CHECKS)


# ---------------------------------------------------------------- rendering helpers and the callback

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
        custom = {"_run": {"provision_verify": {"hosts": ["node1"], "nodes": {}}}}

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
    assert events[3]["report"]["hosts"] == ["node1"]


# ---------------------------------------------------------------- a real healthy 2-node lab

def test_document_of_a_healthy_lab():
    doc = core.build_document(recorded("healthy-2nodes.json"), selected=core.select_checks([], False))
    assert doc["ok"] is True, [c for c in doc["checks"] if c["status"] == "fail"]
    assert [n["name"] for n in doc["nodes"]] == ["node1", "node2"]
    by_node = {}
    for c in doc["checks"]:
        by_node.setdefault(c["node"], set()).add(c["check"])
    for node in ("node1", "node2"):
        for name in ("node reachable", "sshd listening (port 2222)", "port 29500 free", "env block", "gcc",
                     "gpu", "python_env", "shm", "memlock", "nofile", "landing", "versions equal",
                     f"ssh {node}->node1", f"ssh {node}->node2", f"pdsh from {node}"):
            assert name in by_node[node], (node, name, sorted(by_node[node]))
    assert {c["status"] for c in doc["checks"] if c["check"] == "gpu"} == {"skip"}
    mesh = doc["mesh"]
    assert mesh["nodes"] == ["node1", "node2"]
    assert all(mesh["matrix"][a][b]["ok"] for a in ("node1", "node2") for b in ("node1", "node2"))
    versions = doc["versions"]
    assert versions["nodes"]["node1"]["torch"] == versions["nodes"]["node2"]["torch"] == "2.13.0+cpu"
    assert versions["differing"] == [] and versions["differing_nodes"] == []
    assert doc["allreduce"] == {"ran": False}


def test_selection_keeps_only_the_selected_checks():
    doc = core.build_document(recorded("healthy-2nodes.json"), selected=["reach", "mesh"])
    assert {c["check"].split()[0] for c in doc["checks"]} == {"node", "ssh"}


def test_human_rendering_of_a_healthy_lab(monkeypatch, tmp_path):
    monkeypatch.setattr(core, "run_playbook", fake_run(recorded("healthy-2nodes.json")))
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("ssh mesh (row: from, column: to)", "versions (differing values in red)", "ssh *",
                 "pdsh from *", "2.13.0+cpu", "verify: OK: 2 node(s)"):
        assert text in out, text
    assert "FAIL" not in out
