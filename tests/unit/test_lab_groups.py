"""tests/lab_groups.py: the units the lab tests are shared out by between xdist workers."""

from __future__ import annotations

from types import SimpleNamespace

import lab_groups
import pytest


def item(nodeid: str, *fixtures: str):
    return SimpleNamespace(nodeid=nodeid, fixturenames=["request", *fixtures])


def test_a_module_of_a_shared_lab_is_that_labs_unit_and_any_other_module_its_own():
    assert lab_groups.unit_of("tests/integration/test_site.py::test_first_run_is_green") == "lab-site"
    assert lab_groups.unit_of("tests/integration/test_verify.py::test_fault[a::b c]") == "lab-site"
    assert lab_groups.unit_of("tests/integration/test_lifecycle.py::test_x") == "lab-four"
    assert lab_groups.unit_of("tests/integration/test_netenv.py::test_x[min]") == "test_netenv"


def test_a_test_of_a_shared_lab_outside_its_unit_stops_the_run_naming_the_line_to_add():
    lab_groups.check_shared([item("tests/integration/test_site.py::test_a", "converged_lab", "lab_factory"),
                             item("tests/integration/test_netenv.py::test_b", "lab_factory")])
    with pytest.raises(pytest.UsageError, match=r'test_netenv.py::test_b uses the shared lab `four_node_lab`.*'
                                                r'add "test_netenv" to SHARED\["lab-four"\]'):
        lab_groups.check_shared([item("tests/integration/test_netenv.py::test_b", "four_node_lab")])


def test_every_shared_lab_has_a_unit_and_every_unit_a_lab():
    assert set(lab_groups.SHARED_LABS.values()) == set(lab_groups.SHARED)


def test_one_worker_is_one_process_and_more_share_the_units_out(monkeypatch):
    monkeypatch.delenv("PROVISION_TEST_LAB_WORKERS", raising=False)
    assert lab_groups.xdist_args() == ["-n", "2", "--dist", "loadscope", "--no-loadscope-reorder"]
    assert lab_groups.xdist_args("1") == []
    monkeypatch.setenv("PROVISION_TEST_LAB_WORKERS", "3")
    assert lab_groups.xdist_args()[:2] == ["-n", "3"]


def test_unit_seconds_sums_a_junit_files_tests_by_unit(tmp_path):
    junit = tmp_path / "labs.xml"
    junit.write_text('<testsuites><testsuite name="pytest">'
                     '<testcase classname="tests.integration.test_site" name="test_a" time="10.5"/>'
                     '<testcase classname="tests.integration.test_verify" name="test_b[x]" time="2"/>'
                     '<testcase classname="tests.integration.test_netenv" name="test_c" time="30"/>'
                     '</testsuite></testsuites>')
    assert lab_groups.unit_seconds(str(junit)) == {"test_netenv": 30.0, "lab-site": 12.5}
