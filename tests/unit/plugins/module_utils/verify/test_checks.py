"""The Check record every check module returns (plugins/module_utils/verify/checks.py)."""

from __future__ import annotations

from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C


def test_record_is_one_line_and_names_node_and_data():
    c = C.check("gpu ecc", "fail", "GPU 3: 2 uncorrectable\nsecond line", "drain it\nmore", node="node2",
                data={"gpu": 3, "value": 2, "limit": 0})
    assert c == {"check": "gpu ecc", "status": "fail", "detail": "GPU 3: 2 uncorrectable", "fix": "drain it",
                 "node": "node2", "data": {"gpu": 3, "value": 2, "limit": 0}}


def test_unknown_status_is_a_failure_and_task_failed_prefix_dropped():
    c = C.check("x", "passed", "Task failed: boom")
    assert c["status"] == "fail" and c["detail"] == "boom"


def test_worst_and_failures():
    cs = [C.passed("a"), C.skipped("b", "no GPU"), C.warned("c", "slow")]
    assert C.worst(cs) == "warn"
    assert C.worst([]) == "skip"
    assert C.worst(cs + [C.failed("d", "bad", "fix it")]) == "fail"
    assert [c["check"] for c in C.failures(cs + [C.failed("d", "bad", "fix it")])] == ["d"]


def test_with_node_keeps_an_existing_node_and_fail_line():
    cs = C.with_node([C.failed("a", "bad", "do x"), C.passed("b", node="node9")], "node1")
    assert [c["node"] for c in cs] == ["node1", "node9"]
    assert C.fail_line(cs[0]) == "node1: a: bad | fix: do x"
    assert C.fail_line(C.failed("a", "bad", "")) == "cluster: a: bad"
