"""`provision diagnose` (src/provision/diagnose.py, src/provision/commands/diagnose.py); the rules themselves:
tests/unit/plugins/module_utils/verify/test_diagnose.py, the diagnosis `provision launch` prints: test_launch.py."""

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
    assert "FIRST FAILURE qgpu2018: diagnose.duplicate_gpu" in out
    assert "rank 6 and rank 4 both on CUDA device 31000" in out
    assert "nccl-duplicate-gpu-slurm.log:1: qgpu2018:59522:59993 [0] init.cc:795 NCCL WARN Duplicate GPU" in out
    assert "torch.cuda.set_device(LOCAL_RANK)" in out
    assert "diagnose: first failure diagnose.duplicate_gpu on qgpu2018; 1 cause(s), 0 consequence(s) in 1 log(s)" in out


def test_cli_names_the_first_failure_of_a_directory_of_logs_and_its_consequences():
    result = invoke(str(PUBLIC / "local" / "kill-2node"))
    assert result.exit_code == 1, result.output
    out = result.output
    assert "FIRST FAILURE localhost (rank 1): diagnose.worker_killed at 11-27 08:28:33.559" in out
    assert "after it, the other ranks reported (consequences, not causes):" in out
    assert "CONSEQUENCE (node unknown) (rank 0): diagnose.peer_lost" in out
    assert "diagnose: first failure diagnose.worker_killed on localhost; 1 cause(s), 1 consequence(s) in 2 log(s)" in out


def test_cli_exit_0_and_error_lines_when_no_known_cause():
    result = invoke(str(PUBLIC / "neg-user-keyerror.log"))
    assert result.exit_code == 0, result.output
    assert "no known cause" in result.output and "KeyError" in result.output


def test_cli_missing_file_is_usage_error(tmp_path):
    result = invoke(str(PUBLIC / "no-such.log"))
    assert result.exit_code == 2 and "no such file" in result.output
    assert invoke().exit_code == 2  # no LOG at all
    result = invoke(str(tmp_path))  # a directory with no log in it
    assert result.exit_code == 2 and "no log files in this directory" in result.output
    (tmp_path / "core").write_bytes(b"\x7fELF\x00\x00binary")  # binary files are not logs
    assert invoke(str(tmp_path)).exit_code == 2


def test_cli_shows_markup_and_escapes_in_a_log_as_plain_text(tmp_path):
    """A log line with rich markup ("[/red]") crashed the table; ESC sequences reached the terminal."""
    line = (PUBLIC / "nccl-duplicate-gpu-slurm.log").read_text().split("\n")[0]
    log = tmp_path / "weird.log"
    log.write_text("[/red][bold]not markup[/] \x1b[31mred\x1b[0m \x1b]0;title\x07 Error: [/]\n"
                   "\x1b[1m" + line + "\x1b[0m [/red]\n", encoding="utf-8")
    result = invoke(str(log))
    assert result.exit_code == 1, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "Duplicate GPU detected : rank 6 and rank 4 both on CUDA device 31000 [/red]" in result.output
    # with no known cause the line that looks like an error is shown, markup and all, as text
    log.write_text("[/red][bold]Error: bad [/] thing\x1b[0m\n", encoding="utf-8")
    result = invoke(str(log))
    assert result.exit_code == 0 and "[/red][bold]Error: bad [/] thing" in result.output
    result = invoke("--json", str(log))
    assert json.loads(result.stdout)["unknown_error_lines"][0]["text"] == "[/red][bold]Error: bad [/] thing"


def test_cli_json_document():
    result = invoke("--json", str(PUBLIC / "hccl-listen-port-held.log"), str(PUBLIC / "neg-cut-short.log"))
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["schema"] == 1 and doc["ok"] is False
    assert [c["check"] for c in doc["causes"]] == ["diagnose.hccl_port_held"]
    assert "HCCL could not listen on port 16666" in doc["causes"][0]["detail"]
    assert [f["path"].split("/")[-1] for f in doc["files"]] == ["hccl-listen-port-held.log", "neg-cut-short.log"]
    assert {u["file"].split("/")[-1] for u in doc["unknown_error_lines"]} == {"neg-cut-short.log"}
    assert set(doc) == {"schema", "ok", "first_failure", "files", "causes", "consequences", "unknown_error_lines",
                        "summary"}
    assert doc["first_failure"]["check"] == "diagnose.hccl_port_held"


def test_cli_reads_stdin_and_node_option():
    result = invoke("--json", "--node", "worker-0", "-", stdin=read(PUBLIC / "nccl-no-socket-interface.log"))
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert named(doc) == [("no_interface", "worker-0")] and doc["files"][0]["path"] == "<stdin>"


def test_read_logs_from_a_stream():
    assert core.read_logs(["-"], stdin=io.StringIO("x\n")) == [("<stdin>", "x\n")]
    doc = core.diagnose_paths(["-"], stdin=io.BytesIO((PUBLIC / "nccl-shm-fallocate-horovod.log").read_bytes()))
    assert named(doc) == [("shm", "gpu2-ru7")] and doc["files"][0]["path"] == "<stdin>"


def test_cli_with_only_consequences_says_the_first_failure_is_in_another_log():
    result = invoke(str(PUBLIC / "tcpstore-broken-pipe.log"))
    assert result.exit_code == 1, result.output
    assert "CONSEQUENCE (node unknown) (rank 1): diagnose.peer_lost at 12-29 22:06:38.480" in result.output
    assert "no first failure: the log of the rank that failed first is not among them" in result.output
    doc = json.loads(invoke("--json", str(PUBLIC / "tcpstore-broken-pipe.log")).stdout)
    assert doc["first_failure"] is None and doc["causes"][0]["data"]["role"] == "consequence"
