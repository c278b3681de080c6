"""The check action (plugins/action/check.py): a stage runs a catalog check with verify's arguments, and
its record is what site.yml's verify pass may take (catalog.stand_in)."""

from __future__ import annotations

from unittest import mock

import helpers  # (puts collections/ on sys.path)
import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.provision.cluster.plugins.action.check import ActionModule
from ansible_collections.provision.cluster.plugins.module_utils.verify import catalog as K

RUN = "1764673200.000001-42"
PLAN = dict(helpers.CHECK_PLAN, run=RUN)
PASS = [{"check": "gcc", "status": "pass", "detail": "GCC 12.2.0 at /usr/bin/gcc >= 9", "fix": ""}]
FAIL = [{"check": "gcc", "status": "fail", "detail": "GCC 8.5.0 at /usr/bin/gcc, need >= 9",
         "fix": "ansible-playbook site.yml --tags gcc_toolchain --limit n1"}]


def run(args, module_result=None, task_vars=None, check_mode=False):
    """-> (the task's result, the module arguments the action passed)."""
    task = mock.MagicMock(args=args, check_mode=check_mode, async_val=0)
    loader = DataLoader()
    variables = dict({"inventory_hostname": "n1", "ansible_play_hosts_all": ["n1", "n2"], "cluster_plan": PLAN},
                     **(task_vars or {}))
    action = ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader, Templar(loader=loader, variables=variables),
                          None)
    calls = []

    def execute(module_name, module_args, task_vars, wrap_async):
        calls.append((module_name, module_args))
        return dict(module_result or {"changed": False, "checks": PASS})

    with mock.patch.object(ActionModule, "_execute_module", side_effect=execute):
        out = action.run(task_vars=variables)
    return out, calls


def test_the_stage_runs_the_module_with_verifys_arguments_and_keeps_a_record_verify_takes():
    facts = {"gcc_toolchain_facts": {"meets_min": True}}
    out, calls = run({"check": "gcc", "extra": {"fail_below": True}},
                     {"changed": False, "checks": PASS, "plan": {"missing": []}, "ansible_facts": facts})
    ((module, args),) = calls
    assert module == "provision.cluster.gcc_facts" and out["check_module"] == module
    ctx = K.Context("n1", PLAN, ["n1", "n2"], helpers.CheckVars({}))
    assert args == dict(K.BY_NAME["gcc"].args(ctx), fail_below=True)
    assert not out.get("failed") and out["plan"] == {"missing": []} and out["checks"] == PASS
    assert out["ansible_facts"]["gcc_toolchain_facts"] == facts["gcc_toolchain_facts"]   # the module's own facts
    record = out["ansible_facts"][K.RECORDS]["gcc"]
    assert record["ok"] and record["run"] == RUN and record["checks"] == PASS
    # what the verify pass of the same run sees: the record stands in for the check
    later = K.Context("n1", PLAN, ["n1", "n2"], helpers.CheckVars({K.RECORDS: out["ansible_facts"][K.RECORDS]}))
    assert K.stand_in(K.BY_NAME["gcc"], later) == {"checks": PASS}


def test_records_of_earlier_runs_are_dropped_and_this_runs_kept():
    old = {"gpu": {"run": "1700000000.000000-1", "ok": True, "args": "x", "checks": PASS}}
    mine = {"ports": {"run": RUN, "ok": True, "args": "y", "checks": PASS}}
    out, _ = run({"check": "gcc"}, task_vars={K.RECORDS: dict(old, **mine)})
    assert sorted(out["ansible_facts"][K.RECORDS]) == ["gcc", "ports"]


def test_records_are_found_where_facts_are_not_injected_as_variables():
    mine = {"ports": {"run": RUN, "ok": True, "args": "y", "checks": PASS}}
    out, _ = run({"check": "gcc"}, task_vars={"ansible_facts": {K.RECORDS: mine}})
    records = out["ansible_facts"][K.RECORDS]
    assert sorted(records) == ["gcc", "ports"]
    ctx = K.Context("n1", PLAN, ["n1", "n2"], helpers.CheckVars({"ansible_facts": {K.RECORDS: records}}))
    assert K.stand_in(K.BY_NAME["gcc"], ctx) == {"checks": PASS}


def test_fail_stops_the_task_with_verifys_line_but_not_in_check_mode():
    out, _ = run({"check": "gcc", "fail": True}, {"changed": False, "checks": FAIL})
    assert out["failed"] and out["msg"] == (
        "n1: gcc: GCC 8.5.0 at /usr/bin/gcc, need >= 9 | fix: ansible-playbook site.yml --tags gcc_toolchain --limit n1")
    assert out["ansible_facts"][K.RECORDS]["gcc"]["ok"]        # a failed check is still what the node is
    out, _ = run({"check": "gcc", "fail": True}, {"changed": False, "checks": FAIL}, check_mode=True)
    assert not out.get("failed")
    out, _ = run({"check": "gcc"}, {"changed": False, "checks": FAIL})
    assert not out.get("failed")


def test_a_module_that_fails_or_changes_leaves_a_record_that_stands_in_for_nothing():
    out, _ = run({"check": "runtime", "extra": {"manage_limits": True}},
                 {"changed": True, "checks": PASS, "ansible_facts": {"node_runtime": {"identity": {}}}})
    assert out["changed"] and out["ansible_facts"][K.RECORDS]["runtime"]["ok"] is False
    out, _ = run({"check": "gcc"}, {"failed": True, "msg": "boom"})
    assert out["failed"] and out["msg"] == "boom" and not out["ansible_facts"][K.RECORDS]["gcc"]["ok"]


@pytest.mark.parametrize("args, says", [
    ({"check": "nope"}, "check must be one of"),
    ({"check": "compare"}, "check must be one of"),                  # computed on the controller: no module
    ({"check": "gcc", "extra": {"toolset": 11}}, "extra: toolset not among the arguments a stage adds to the gcc check"),
    ({"check": "ports", "extra": {"ports": [22]}}, "extra: ports not among"),
])
def test_what_is_not_a_stages_call_of_a_check_is_refused_before_anything_runs(args, says):
    out, calls = run(args)
    assert out["failed"] and says in out["msg"] and calls == []


def test_a_stage_key_may_not_change_what_the_check_judges(monkeypatch):
    monkeypatch.setattr(K.BY_NAME["gcc"], "stage_keys", frozenset(("fail_below", "min_version")))
    out, calls = run({"check": "gcc", "extra": {"min_version": "1"}})
    assert out["failed"] and "min_version would change what the gcc check reads or judges" in out["msg"] and not calls


MESH_PASS = [{"check": "ssh n1->n1", "status": "pass", "detail": "n1", "fix": ""}]
PLAN4 = dict(PLAN, hosts=["n1", "n2", "n3", "n4"],
             nodes=[{"name": "n%d" % i, "address": "10.0.0.%d" % i} for i in range(1, 5)],
             address_of={"n%d" % i: "10.0.0.%d" % i for i in range(1, 5)})


def test_the_ssh_mesh_stage_checks_n_by_n_after_a_change_and_that_record_stands_in_only_for_a_full_verify():
    play = {"ansible_play_hosts_all": ["n1", "n2", "n3", "n4"], "cluster_plan": PLAN4, "ssh_mesh_block_name": "lab"}
    extra = {"hostnames": {"n1": "node-a", "n2": "node-b"}, "landing_peers": []}
    out, calls = run({"check": "mesh", "matrix": "full", "extra": extra}, {"changed": False, "checks": MESH_PASS},
                     task_vars=play)
    ((module, args),) = calls
    assert module == "provision.cluster.ssh_mesh_check"
    assert args["nodes"] == ["n1", "n2", "n3", "n4"] and args["hostnames"] == extra["hostnames"]
    records = {K.RECORDS: out["ansible_facts"][K.RECORDS]}

    def verify_pass(matrix):
        return K.stand_in(K.BY_NAME["mesh"], K.Context("n1", PLAN4, play["ansible_play_hosts_all"],
                                                        helpers.CheckVars(dict(records, verify_matrix=matrix,
                                                                               ssh_mesh_block_name="lab",
                                                                               cluster_plan=PLAN4))))
    # verify's ring (n1, n2, n3) is not what the stage proved: the pass logs in itself; --full takes the record
    assert verify_pass("ring") is None and verify_pass("full")["checks"] == MESH_PASS
    # an unchanged re-run: the stage's ring is verify's
    out, calls = run({"check": "mesh", "matrix": "ring", "extra": extra}, {"changed": False, "checks": MESH_PASS},
                     task_vars=play)
    assert calls[0][1]["nodes"] == ["n1", "n2", "n3"]
    records = {K.RECORDS: out["ansible_facts"][K.RECORDS]}
    assert verify_pass("ring")["checks"] == MESH_PASS and verify_pass("full") is None


def test_a_matrix_that_is_neither_ring_nor_full_is_refused():
    out, calls = run({"check": "mesh", "matrix": "half"})
    assert out["failed"] and "matrix must be ring or full, not 'half'" in out["msg"] and calls == []


ENV_PASS = [{"check": "env block", "status": "pass", "detail": "`ssh n1` sees the block's 2 variable(s)", "fix": ""}]
VERSIONS = {"python": "3.11.2", "torch": "2.13.0"}
VERSIONS_PASS = [{"check": "python_env", "status": "pass", "detail": "python 3.11.2 torch 2.13.0", "fix": ""}]


def test_the_stages_own_module_runs_the_check_after_its_work_and_its_unchanged_call_is_the_record():
    writer_args = {"user": "train", "env": {"A": "1"}, "node": "n1"}
    out, calls = run({"check": "env", "module": "provision.cluster.shell_env_block", "module_args": writer_args},
                     {"changed": False, "block": "# BEGIN", "ansible_facts": {"__shell_env_exports": {}},
                      "check_result": {"checks": ENV_PASS, "seen": {"A": "1"}}})
    ((module, args),) = calls
    ctx = K.Context("n1", PLAN, ["n1", "n2"], helpers.CheckVars({}))
    # one module run: the writer, with its own arguments and verify's for the check (option check)
    assert module == "provision.cluster.shell_env_block" and out["check_module"] == module
    assert args == dict(writer_args, check=K.BY_NAME["env"].args(ctx))
    assert out["block"] == "# BEGIN" and out["check_result"]["seen"] == {"A": "1"}   # the module's result as it is
    assert out["ansible_facts"]["__shell_env_exports"] == {}
    later = K.Context("n1", PLAN, ["n1", "n2"], helpers.CheckVars({K.RECORDS: out["ansible_facts"][K.RECORDS]}))
    # what the verify pass takes: the check's records and what the entry keeps (seen, for nccl_in_effect)
    assert K.stand_in(K.BY_NAME["env"], later) == {"checks": ENV_PASS, "seen": {"A": "1"}}


def test_the_checks_facts_become_the_hosts_and_extra_goes_to_the_check_not_to_the_module():
    out, calls = run({"check": "versions", "module": "provision.cluster.python_venv", "extra": {"require_torch": True},
                      "module_args": {"path": "/opt/provision/venv"}},
                     {"changed": False, "ansible_facts": {"provision_env_python_env": {"env": {}}},
                      "check_result": {"checks": VERSIONS_PASS, "cached": True,
                                       "ansible_facts": {"python_env_versions": VERSIONS}}})
    ((_module, args),) = calls
    assert args["path"] == "/opt/provision/venv" and "require_torch" not in args and args["check"]["require_torch"] is True
    facts = out["ansible_facts"]
    assert facts["python_env_versions"] == VERSIONS and facts["provision_env_python_env"] == {"env": {}}
    later = K.Context("n1", PLAN, ["n1", "n2"], helpers.CheckVars({K.RECORDS: facts[K.RECORDS]}))
    # the record's fingerprint is of verify's arguments only (require_torch is how the stage runs it)
    assert K.stand_in(K.BY_NAME["versions"], later)["checks"] == VERSIONS_PASS


@pytest.mark.parametrize("module_result", [
    {"changed": True, "check_result": {"checks": ENV_PASS}},                  # the block was rewritten
    {"changed": False},                                                       # the check did not run
    {"failed": True, "msg": "torch does not import", "check_result": {"failed": True, "checks": VERSIONS_PASS}},
])
def test_a_writers_call_that_changed_failed_or_did_not_check_stands_in_for_nothing(module_result):
    out, _ = run({"check": "env", "module": "provision.cluster.shell_env_block", "module_args": {}}, module_result)
    assert out["ansible_facts"][K.RECORDS]["env"]["ok"] is False


def test_fail_judges_the_checks_records_of_a_writers_call():
    failed = [{"check": "launch files", "status": "fail", "detail": "launch.env lists 1 node", "fix": "site.yml --tags launchers"}]
    out, _ = run({"check": "launchers", "module": "provision.cluster.launch_dir", "module_args": {}, "fail": True},
                 {"changed": False, "written": [], "check_result": {"checks": failed}})
    assert out["failed"] and out["msg"] == "n1: launch files: launch.env lists 1 node | fix: site.yml --tags launchers"


@pytest.mark.parametrize("args, says", [
    ({"check": "env", "module": "provision.cluster.launch_dir"}, "module: the env check runs in provision.cluster.shell_env_block"),
    ({"check": "gcc", "module": "provision.cluster.gcc_facts"}, "module: the gcc check runs in its own module only"),
    ({"check": "gcc", "module_args": {"x": 1}}, "module_args: only with module"),
])
def test_a_module_the_entry_does_not_name_is_refused_before_anything_runs(args, says):
    out, calls = run(args)
    assert out["failed"] and says in out["msg"] and calls == []
