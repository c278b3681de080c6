"""`provision diagnose` (src/provision/diagnose.py, src/provision/commands/diagnose.py); the rules themselves:
tests/unit/plugins/module_utils/test_diagnose.py, the diagnosis `provision launch` prints: test_launch.py."""

from __future__ import annotations

import io
import json

from click.testing import CliRunner

from helpers import REPO
from provision import diagnose as core
from provision.cli import cli

PUBLIC = REPO / "tests" / "fixtures" / "diagnose"


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
