"""The training user in preflight (issue 30): missing is refused unless cluster_user_create; ids compared."""

from __future__ import annotations

from ansible_collections.provision.cluster.plugins.filter.preflight import preflight_training_user
from ansible_collections.provision.cluster.plugins.module_utils.common.users import training_user_report

# getent passwd trainer, as the getent module returns it (fields after the name)
TRAINER = ["x", "2001", "2001", "", "/home/trainer", "/bin/bash"]


def test_missing_user_is_one_line_per_node_with_the_fix():
    out = training_user_report({"node1": TRAINER, "node2": None}, "trainer")
    assert out["warnings"] == []
    (line,) = out["errors"]
    assert line.startswith("node2: the training user trainer does not exist there; fix: ")
    assert "cluster_user_create: true" in line and "LDAP" in line


def test_missing_user_with_create_is_not_an_error():
    assert training_user_report({"node1": None, "node2": None}, "trainer", create=True) == {"errors": [], "warnings": []}


def test_ids_that_differ_are_reported():
    other = list(TRAINER)
    other[1] = "1001"
    out = training_user_report({"node1": TRAINER, "node2": other, "node3": TRAINER}, "trainer")
    assert out["errors"] == []
    (line,) = out["warnings"]
    assert "uid 2001 gid 2001 on node1, node3" in line and "uid 1001 gid 2001 on node2" in line
    assert "shared filesystem" in line


def test_filter_reads_the_getent_results():
    hv = {"node1": {"__preflight_user": {"ansible_facts": {"getent_passwd": {"trainer": TRAINER}}}},
          "node2": {"__preflight_user": {"ansible_facts": {"getent_passwd": {"trainer": None}},
                                         "msg": "One or more supplied key could not be found in the database."}},
          "node3": {"__preflight_user": {"unreachable": True}}}
    out = preflight_training_user(hv, ["node1", "node2", "node3"], "trainer", "false")
    assert len(out["errors"]) == 1 and out["errors"][0].startswith("node2: ")
    assert preflight_training_user(hv, ["node1", "node2"], "trainer", "true")["errors"] == []
