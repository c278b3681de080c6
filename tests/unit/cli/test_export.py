"""Machine outputs of a verify document (src/provision/export.py): the Prometheus text format for
node_exporter's textfile collector (checked by `promtool check metrics` where it is installed, and
always by a parser that enforces the exposition format's rules), JUnit XML, and the atomic write."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner
from unit.synthetic_verify import recorded, synthetic_document

import helpers
from helpers import cannot_run
from provision import ansible, export
from provision.cli import cli

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
SAMPLE = re.compile(r"(?P<name>[^\s{]+)(?:\{(?P<labels>.*)\})?\s(?P<value>\S+)(?:\s(?P<ts>-?\d+))?\Z")
UNITS = ("_seconds", "_bytes", "_bytes_per_second", "_timestamp_seconds", "_ratio")


def parse_labels(text: str) -> dict[str, str]:
    """label="value",... with only \\\\, \\" and \\n escapes (the exposition format's rules)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(text):
        m = re.compile(r'([^=,\s]+)="').match(text, i)
        assert m, f"bad label at {text[i:]!r}"
        name = m.group(1)
        assert LABEL.match(name) and not name.startswith("__"), name
        i = m.end()
        value = ""
        while True:
            ch = text[i]
            if ch == "\\":
                nxt = text[i + 1]
                assert nxt in '\\"n', f"bad escape \\{nxt} in {text!r}"
                value += {"\\": "\\", '"': '"', "n": "\n"}[nxt]
                i += 2
            elif ch == '"':
                i += 1
                break
            else:
                assert ch != "\n"
                value += ch
                i += 1
        assert name not in out, f"label {name} twice"
        out[name] = value
        if i < len(text):
            assert text[i] == ",", text[i:]
            i += 1
    return out


def parse_exposition(text: str) -> dict[str, dict]:
    """The text format's rules, strictly: families with one HELP and one TYPE before their samples,
    each family's samples together, valid names, labels and values, no series twice, a final newline.
    -> {family: {"help", "type", "samples": {labels tuple: value}}}"""
    assert text.endswith("\n")
    fams: dict[str, dict] = {}
    order: list[str] = []
    current = None
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, name, rest = line[2:6], *line[7:].split(" ", 1)
            assert NAME.match(name), name
            fam = fams.setdefault(name, {"samples": {}})
            assert kind.lower() not in fam, f"second {kind} for {name}"
            assert not fam["samples"], f"{kind} of {name} after its samples"
            fam[kind.lower()] = rest
            if kind == "TYPE":
                assert rest in ("gauge", "counter", "untyped", "summary", "histogram"), rest
            if name not in order:
                order.append(name)
            current = name
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name = m.group("name")
        assert NAME.match(name), name
        assert name == current, f"{name}: its samples are not together (after {current})"
        labels = tuple(sorted(parse_labels(m.group("labels") or "").items()))
        value = m.group("value")
        assert value in ("NaN", "+Inf", "-Inf") or not math.isnan(float(value)), value
        assert labels not in fams[name]["samples"], f"{name}{dict(labels)} twice"
        fams[name]["samples"][labels] = float(value)
    for name, fam in fams.items():
        assert "help" in fam and "type" in fam, name
    return fams


def check_conventions(fams: dict[str, dict]) -> None:
    """Prometheus naming: our prefix, gauges without _total, base units spelled out."""
    for name, fam in fams.items():
        assert name.startswith("provision_"), name
        assert fam["type"] == "gauge" and not name.endswith("_total"), name
        assert not re.search(r"(_gb|_gbps|_ms|_us|_mib|_percent)(_|$)", name), f"{name}: not a base unit"
        if "bandwidth" in name or "busbw" in name or "algbw" in name or name.endswith("_min_bytes_per_second"):
            assert name.endswith("_bytes_per_second"), name
        if "duration" in name or "timestamp" in name:
            assert name.endswith("_seconds"), name


def promtool(text: str) -> None:
    tool = helpers.tool("promtool")
    if not shutil.which(tool):
        cannot_run("promtool not installed (Debian: prometheus; the parser test runs regardless)")
    proc = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not (proc.stdout + proc.stderr).strip(), proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def slow32():
    return synthetic_document(32, down=(7,), shm_small=(12,), slow_link=20)


def test_prometheus_text_of_a_recorded_lab_run_keeps_every_rule_and_convention(tmp_path):
    doc = recorded("smoke-3nodes-slow-link.json")
    text = export.prometheus_text(doc, now=1_790_000_000.0)
    fams = parse_exposition(text)
    check_conventions(fams)
    # one series per check, node and status; the status it has is 1, the others 0
    status = fams["provision_check_status"]["samples"]
    by_check: dict[tuple, list[float]] = {}
    for labels, value in status.items():
        d = dict(labels)
        by_check.setdefault((d["node"], d["check"]), []).append(value)
    assert all(sorted(v) == [0, 0, 0, 1] for v in by_check.values())
    # busbw per size in bytes per second (the document's GB/s are 10^9 B/s)
    rows = doc["allreduce"]["rows"]
    busbw = fams["provision_allreduce_busbw_bytes_per_second"]["samples"]
    assert busbw[(("size_bytes", str(rows[-1]["bytes"])),)] == pytest.approx(rows[-1]["busbw"] * 1e9)
    links = fams["provision_link_bandwidth_bytes_per_second"]["samples"]
    assert len(links) == 2 * len(doc["allreduce"]["links"])
    slow = {(dict(k)["src"], dict(k)["dst"]) for k, v in fams["provision_link_slow"]["samples"].items() if v == 1}
    assert slow == {(lk["src"], lk["dst"]) for lk in doc["allreduce"]["slow_links"]}
    assert fams["provision_verify_ok"]["samples"][()] == 0


def test_prometheus_text_of_a_synthetic_32_node_document(slow32, tmp_path):
    text = export.prometheus_text(slow32, now=1_790_000_000.0)
    fams = parse_exposition(text)
    check_conventions(fams)
    failing = {dict(k)["node"] for k, v in fams["provision_check_status"]["samples"].items()
               if v == 1 and dict(k)["status"] == "fail"}
    assert {"gpu-node-0007", "gpu-node-0012", "gpu-node-0020"} <= failing
    reach = fams["provision_node_reachable"]["samples"]
    assert reach[(("node", "gpu-node-0007"),)] == 0 and reach[(("node", "gpu-node-0008"),)] == 1


def test_label_values_with_quotes_backslashes_and_newlines_are_escaped(tmp_path):
    doc = recorded("unreachable.json")
    doc["checks"].append({"node": 'we"ird\\node', "check": "odd\ncheck", "status": "warn", "detail": "", "fix": ""})
    text = export.prometheus_text(doc)
    fams = parse_exposition(text)
    labels = [dict(k) for k in fams["provision_check_status"]["samples"]]
    assert {"node": 'we"ird\\node', "check": "odd\ncheck", "status": "warn"} in labels


def test_the_same_check_twice_on_a_node_is_one_series_with_the_worst_status():
    doc = recorded("unreachable.json")
    doc["checks"] += [{"node": "good", "check": "allreduce environment", "status": s, "detail": "", "fix": ""}
                      for s in ("pass", "warn", "pass")]
    fams = parse_exposition(export.prometheus_text(doc))
    got = {dict(k)["status"]: v for k, v in fams["provision_check_status"]["samples"].items()
           if dict(k)["check"] == "allreduce environment"}
    assert got == {"pass": 0, "fail": 0, "warn": 1, "skip": 0}


def test_a_run_that_could_not_finish_leaves_no_stale_check_series(tmp_path):
    text = export.prometheus_failed_run("verify did not finish within 45 s\nmore")
    fams = parse_exposition(text)
    assert set(fams) == {"provision_verify_ok", "provision_verify_completed", "provision_verify_last_run_timestamp_seconds"}
    assert fams["provision_verify_completed"]["samples"][()] == 0


def test_junit_xml_one_testcase_per_check_with_failures_skips_and_warnings(slow32):
    root = ET.fromstring(export.junit_xml(slow32))
    assert root.tag == "testsuites" and int(root.get("tests")) == len(slow32["checks"])
    assert int(root.get("failures")) == slow32["summary"]["fail"] and int(root.get("skipped")) == slow32["summary"]["skip"]
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites)[:2] == ["gpu-node-0001", "gpu-node-0002"] and len(suites) == 32
    (shm,) = [c for c in suites["gpu-node-0012"].findall("testcase") if c.get("name") == "shm"]
    failure = shm.find("failure")
    assert failure.get("message").startswith("/dev/shm is 64 MiB") and "\nfix: " in failure.text
    assert suites["gpu-node-0007"].find("testcase/failure") is not None
    assert sum(int(s.get("failures")) for s in suites.values()) == int(root.get("failures"))
    assert root.find(".//skipped") is not None


def test_junit_suites_in_node_order_then_the_nodes_only_checks_name():
    doc = {"nodes": [{"name": "b"}, {"name": "a"}], "checks": [
        {"node": "x", "check": "c1", "status": "pass"}, {"node": "a", "check": "c1", "status": "pass"},
        {"node": "cluster", "check": "allreduce", "status": "fail", "detail": "d"},
        {"node": "x", "check": "c2", "status": "skip"}, {"node": "b", "check": "c1", "status": "warn"}]}
    root = ET.fromstring(export.junit_xml(doc))
    assert [(s.get("name"), s.get("tests")) for s in root.findall("testsuite")] == [
        ("b", "1"), ("a", "1"), ("x", "2"), ("cluster", "1")]


def test_write_atomic_replaces_whole_files_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "provision.prom"
    target.write_text("old\n")
    export.write_atomic(target, "new\n")
    assert target.read_text() == "new\n" and oct(target.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["provision.prom"]
    with pytest.raises(export.OutputError, match="directory .* does not exist"):
        export.write_atomic(tmp_path / "nope" / "x.prom", "x")


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "provision.prom"
    target.write_text("old\n")

    def no_space(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(export.os, "replace", no_space)
    with pytest.raises(export.OutputError, match="cannot write .*provision.prom: No space left on device"):
        export.write_atomic(target, "new\n")
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["provision.prom"]


def fake_run(report):
    def run(argv, env, *, timeout=300, on_event=None, events=False, become_password=None):
        return ansible.Run(rc=0, stdout="", stderr="", duration_s=0.5, report=report)
    return run


def test_verify_writes_junit_and_prometheus_and_keeps_json_on_stdout(monkeypatch, tmp_path):
    monkeypatch.setattr(ansible, "run_playbook", fake_run(recorded("unreachable.json")))
    prom, junit = tmp_path / "v.prom", tmp_path / "v.xml"
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--json", "--prometheus", str(prom),
                                      "--junit", str(junit)])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["ok"] is False
    fams = parse_exposition(prom.read_text())
    assert fams["provision_check_status"]["samples"][(("check", "node reachable"), ("node", "bad"), ("status", "fail"))] == 1
    assert ET.parse(junit).getroot().get("failures") == "1"


def test_verify_that_times_out_still_writes_a_not_ok_record(monkeypatch, tmp_path):
    def run(argv, env, *, timeout=300, on_event=None, events=False, become_password=None):
        return ansible.Run(rc=-15, stdout="", stderr="", duration_s=timeout, timed_out=True, timeout_s=timeout)
    monkeypatch.setattr(ansible, "run_playbook", run)
    prom, junit = tmp_path / "v.prom", tmp_path / "v.xml"
    prom.write_text(export.prometheus_text(recorded("healthy-2nodes.json") | {"duration_s": 1}))
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--timeout", "3", "--prometheus", str(prom),
                                      "--junit", str(junit)])
    assert result.exit_code == 3 and "did not finish within 3 s" in result.stderr
    fams = parse_exposition(prom.read_text())
    assert "provision_check_status" not in fams and fams["provision_verify_ok"]["samples"][()] == 0
    assert ET.parse(junit).getroot().find(".//error").get("message").startswith("verify did not finish")


def test_verify_output_into_a_missing_directory_is_a_usage_error_before_any_run(monkeypatch, tmp_path):
    monkeypatch.setattr(ansible, "run_playbook", lambda *a, **k: pytest.fail("ran the checks"))
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--prometheus", str(tmp_path / "no" / "x.prom")])
    assert result.exit_code == 2 and "does not exist" in result.stderr and "Traceback" not in result.output


def test_brief_prints_one_line_per_failure_and_the_summary(monkeypatch, tmp_path):
    monkeypatch.setattr(ansible, "run_playbook", fake_run(recorded("unreachable.json")))
    result = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--brief"])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("FAIL bad: node reachable: Failed to connect to the host via ssh") and "(fix: bring bad up" in lines[0]
    assert lines[1].startswith("verify: FAILED: 2 node(s)") and len(lines) == 2
    assert CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--brief", "--json"]).exit_code == 2


def test_promtool_check_metrics_accepts_every_textfile(slow32):
    """`promtool check metrics` (Prometheus' own linter) on each kind of file this project writes."""
    doc = recorded("unreachable.json")
    doc["checks"].append({"node": 'we"ird\\node', "check": "odd\ncheck", "status": "warn", "detail": "", "fix": ""})
    for text in (export.prometheus_text(recorded("smoke-3nodes-slow-link.json")), export.prometheus_text(slow32),
                 export.prometheus_text(doc), export.prometheus_failed_run("verify did not finish within 45 s")):
        promtool(text)


def test_brief_lines_carry_syslog_priorities_when_stdout_is_the_journal(tmp_path, monkeypatch):
    """systemd sets JOURNAL_STREAM=<device>:<inode> of the service's stdout when it is the journal."""
    from provision.app import Application
    from provision.commands.verify import brief

    out = tmp_path / "journal"
    with out.open("w") as fh:
        st = os.fstat(fh.fileno())
        monkeypatch.setattr("sys.stdout", fh)
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        brief(Application(), recorded("unreachable.json") | {"duration_s": 1})
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")   # another stream: no prefixes
        brief(Application(), recorded("unreachable.json") | {"duration_s": 1})
    lines = out.read_text().splitlines()
    assert lines[0].startswith("<3>FAIL bad: node reachable:") and lines[1].startswith("<6>verify: FAILED")
    assert lines[2].startswith("FAIL bad: node reachable:") and lines[3].startswith("verify: FAILED")
