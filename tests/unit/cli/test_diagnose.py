"""`provision diagnose` (src/provision/diagnose.py, src/provision/commands/diagnose.py) and the diagnosis
`provision launch` prints for a failed job; the rules themselves: tests/unit/plugins/module_utils/test_diagnose.py."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import yaml
from click.testing import CliRunner

import helpers
from helpers import REPO, ansible_env, tool
from provision import diagnose as core
from provision.cli import cli
from provision.commands import launch

PUBLIC = REPO / "tests" / "fixtures" / "diagnose"
H100 = helpers.FIXTURES / "h100-node"
FAIL = H100 / "failures"


def read(path):
    return path.read_text(encoding="utf-8", errors="replace")


def named(doc):
    return [(c["data"]["cause"], c.get("node")) for c in doc["causes"]]


# --------------------------------------------------------------------------- CLI
def invoke(*args, stdin=None):
    return CliRunner().invoke(cli, ["diagnose", *args], input=stdin)


def test_cli_exit_1_with_cause_node_evidence_and_fix():
    result = invoke(str(PUBLIC / "nccl-duplicate-gpu-slurm.log"))
    assert result.exit_code == 1, result.output
    out = result.output
    assert "FAIL qgpu2018: diagnose.duplicate_gpu" in out
    assert "rank 6 and rank 4 both on CUDA device 31000" in out
    assert "nccl-duplicate-gpu-slurm.log:1: qgpu2018:59522:59993 [0] init.cc:795 NCCL WARN Duplicate GPU" in out
    assert "torch.cuda.set_device(LOCAL_RANK)" in out
    assert "diagnose: 1 cause(s) in 1 log(s) on qgpu2018" in out


def test_cli_exit_0_and_error_lines_when_no_known_cause():
    result = invoke(str(PUBLIC / "neg-user-keyerror.log"))
    assert result.exit_code == 0, result.output
    assert "no known cause" in result.output and "KeyError" in result.output


def test_cli_missing_file_is_usage_error():
    result = invoke(str(PUBLIC / "no-such.log"))
    assert result.exit_code == 2 and "no such file" in result.output
    assert invoke().exit_code == 2  # no LOG at all
    assert invoke(str(PUBLIC)).exit_code == 2  # a directory


def test_cli_json_document():
    result = invoke("--json", str(PUBLIC / "hccl-listen-port-held.log"), str(PUBLIC / "neg-cut-short.log"))
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["schema"] == 1 and doc["ok"] is False
    assert [c["check"] for c in doc["causes"]] == ["diagnose.hccl_port_held"]
    assert "HCCL could not listen on port 16666" in doc["causes"][0]["detail"]
    assert [f["path"].split("/")[-1] for f in doc["files"]] == ["hccl-listen-port-held.log", "neg-cut-short.log"]
    assert {u["file"].split("/")[-1] for u in doc["unknown_error_lines"]} == {"neg-cut-short.log"}
    assert set(doc) == {"schema", "ok", "files", "causes", "unknown_error_lines", "summary"}


def test_cli_reads_stdin_and_node_option():
    result = invoke("--json", "--node", "worker-0", "-", stdin=read(PUBLIC / "nccl-no-socket-interface.log"))
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert named(doc) == [("no_interface", "worker-0")] and doc["files"][0]["path"] == "<stdin>"


def test_read_logs_from_a_stream():
    assert core.read_logs(["-"], stdin=io.StringIO("x\n")) == [("<stdin>", "x\n")]


# --------------------------------------------------------------------------- provision launch
def test_launch_prints_the_diagnosis_of_a_failed_job(capsys):
    launch._diagnose_output({"n1": "started\n", "n2": read(FAIL / "nccl-bogus-ifname.log")})
    err = capsys.readouterr().err
    assert "provision launch: diagnose: n2: diagnose.no_interface: NCCL found no usable interface: " \
           "NCCL_SOCKET_IFNAME=bogus0" in err and "| fix: set NCCL_SOCKET_IFNAME" in err
    launch._diagnose_output({"n1": "hello\n"})
    assert "no known cause" in capsys.readouterr().err
    launch._diagnose_output({})
    assert capsys.readouterr().err == ""


def test_printer_keeps_the_tail_of_each_nodes_output():
    printer = launch.Printer(["n1", "n2"])
    printer.TAIL = 10
    printer.feed("n1", "0123456789abc\n")
    printer.feed("n2", "x")
    assert printer.tail == {"n1": "456789abc\n", "n2": "x"}


def test_launch_end_to_end_names_the_cause_when_the_job_fails(tmp_path):
    """Through Ansible on two local "nodes" (as test_launchers_cli): n2 prints a real NCCL failure and exits 1."""
    hosts = {}
    for name, body in {"n1": "echo started; sleep 30\n", "n2": f"cat '{FAIL / 'nccl-bogus-ifname.log'}'; exit 1\n"}.items():
        d = tmp_path / name
        d.mkdir()
        (d / "torchrun-c10d.sh").write_text("#!/bin/sh\n" + body)
        (d / "torchrun-c10d.sh").chmod(0o755)
        hosts[name] = {"launchers_dir": str(d)}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"cluster": {"hosts": hosts, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}))
    proc = subprocess.run([tool("provision"), "launch", "-i", str(inv), "--poll-wait", "1", "--", "x"], cwd=REPO,
                          env=ansible_env(), capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "provision launch: diagnose: n2: diagnose.no_interface: NCCL found no usable interface: " \
           "NCCL_SOCKET_IFNAME=bogus0" in proc.stderr, proc.stderr
