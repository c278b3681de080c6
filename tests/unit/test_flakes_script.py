"""scripts/flakes.py: a test that failed in any run is reported with its runs and first failure."""

from __future__ import annotations

import importlib.util

from helpers import REPO

spec = importlib.util.spec_from_file_location("flakes", REPO / "scripts" / "flakes.py")
flakes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(flakes)

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.integration.test_a" name="test_ok" time="1.0"/>
<testcase classname="tests.integration.test_a" name="test_flaky" time="2.0">{flaky}</testcase>
<testcase classname="tests.integration.test_b" name="test_skip" time="0"><skipped message="no gpu"/></testcase>
</testsuite></testsuites>"""


def test_a_test_that_failed_once_is_named_with_its_run_and_message(tmp_path):
    runs = []
    for i, flaky in enumerate(["", '<failure message="AssertionError: rc=1&#10;more">trace</failure>', ""]):
        path = tmp_path / f"run-{i}.xml"
        path.write_text(JUNIT.format(flaky=flaky))
        runs.append(flakes.results(path))
    assert runs[1]["tests.integration.test_a::test_flaky"] == {"outcome": "failed", "message": "AssertionError: rc=1"}
    assert runs[0]["tests.integration.test_b::test_skip"]["outcome"] == "skipped"
    assert flakes.report(runs) == [{"test": "tests.integration.test_a::test_flaky", "failed_in": [2], "runs": 3,
                                    "first_failure": "AssertionError: rc=1"}]


def test_a_run_that_wrote_no_junit_file_counts_as_no_result(tmp_path):
    assert flakes.results(tmp_path / "missing.xml") == {}
    assert flakes.report([{}, {}]) == []


def test_the_script_runs_pytest_and_reports(tmp_path):
    (tmp_path / "test_x.py").write_text("import os\n\ndef test_x():\n    assert True\n\ndef test_y():\n    assert False, 'boom'\n")
    rc = flakes.main(["--runs", "2", "--keep", str(tmp_path / "out"), "--", str(tmp_path / "test_x.py")])
    assert rc == 1
    import json
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [r["test"].split("::")[-1] for r in doc["flaky_or_failing"]] == ["test_y"]
    assert doc["flaky_or_failing"][0]["failed_in"] == [1, 2] and "boom" in doc["flaky_or_failing"][0]["first_failure"]
