"""`provision launch` end to end through Ansible on two "nodes" that are local directories
(connection local): streaming with node prefixes, fail-fast stop, exit codes. The launch scripts
here are tiny sh scripts put where the launchers role would put torchrun-c10d.sh, so no torch is
needed; the real torchrun run is in tests/integration/test_launchers.py."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml

import helpers
from helpers import REPO, ansible_env, tool
from provision.commands import launch

FAIL = helpers.FIXTURES / "h100-node" / "failures"


def _cluster(tmp_path, scripts: dict[str, str], script: str = "torchrun-c10d.sh"):
    hosts = {}
    for name, body in scripts.items():
        d = tmp_path / name
        d.mkdir()
        (d / script).write_text("#!/bin/sh\n" + body)
        (d / script).chmod(0o755)
        hosts[name] = {"launchers_dir": str(d)}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"cluster": {"hosts": hosts, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}))
    return inv


def _launch(inv, *args, timeout=180):
    return subprocess.run([tool("provision"), "launch", "-i", str(inv), *args], cwd=REPO, env=ansible_env(),
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_output_is_prefixed_and_success_is_0(tmp_path):
    inv = _cluster(tmp_path, {
        "n1": 'echo "hello from n1 $*"; echo second line\n',
        "n2": 'printf "partial "; sleep 1; echo "line of n2"\n',
    })
    proc = _launch(inv, "--poll-wait", "1", "--", "train.py", "--lr", "a b")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "[n1] hello from n1 train.py --lr a b" in lines
    assert "[n1] second line" in lines
    assert "[n2] partial line of n2" in lines  # partial lines are kept until they end
    assert "succeeded on 2 node(s)" in proc.stderr


@pytest.mark.parametrize("launcher", ["mpirun", "deepspeed", "colossalai", "horovodrun"])
def test_master_only_launchers_start_and_poll_only_the_master(tmp_path, launcher):
    script = launch.LAUNCHERS[launcher][0]
    inv = _cluster(tmp_path, {"n1": 'echo "master runs %s $*"\n' % script, "n2": "echo never; exit 9\n"}, script)
    proc = _launch(inv, "--launcher", launcher, "--poll-wait", "1", "--", "train.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["[n1] master runs %s train.py" % script]
    assert "(master only)" in proc.stderr and "succeeded on 1 node(s)" in proc.stderr


def test_a_failure_stops_the_others_and_exits_1(tmp_path):
    marker = tmp_path / "still-running"
    inv = _cluster(tmp_path, {
        "n1": f'echo started; touch {marker}; sleep 119.25; rm -f {marker}\n',
        "n2": 'echo about to fail; sleep 2; exit 7\n',
    })
    started = time.monotonic()
    proc = _launch(inv, "--poll-wait", "1", "--", "x")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "n2 failed (exit 7); stopping n1" in proc.stderr
    assert "[n2] about to fail" in proc.stdout
    assert time.monotonic() - started < 90
    # n1's sleep was killed with its process group: the line after it never ran
    assert marker.exists()
    out = subprocess.run(["pgrep", "-f", "sleep 119.25"], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == ""


def test_timeout_stops_everything_and_exits_3(tmp_path):
    inv = _cluster(tmp_path, {"n1": "sleep 100\n", "n2": "sleep 100\n"})
    started = time.monotonic()
    proc = _launch(inv, "--timeout", "3", "--poll-wait", "1", "--", "x")
    assert proc.returncode == 3 and "timed out after 3 s" in proc.stderr, proc.stderr
    assert time.monotonic() - started < 60


def test_missing_launch_script_is_one_line(tmp_path):
    inv = _cluster(tmp_path, {"n1": "true\n"})
    (tmp_path / "n1" / "torchrun-c10d.sh").unlink()
    proc = _launch(inv, "--", "x")
    assert proc.returncode == 1
    assert "run the launchers stage first" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, needle", [
    (["-i", "/nonexistent/inventory", "--", "x"], "inventory /nonexistent/inventory does not exist"),
    (["--group", "nope", "--", "x"], "group 'nope' has no host"),
    (["-e", "novalue", "--", "x"], "-e wants KEY=VALUE"),
    (["--timeout", "0", "--", "x"], "--timeout must be > 0"),
])
def test_usage_and_inventory_errors_exit_2_with_one_line(tmp_path, args, needle):
    inv = _cluster(tmp_path, {"n1": "true\n"})
    argv = args if args[0] == "-i" else ["-i", str(inv), *args]
    proc = subprocess.run([tool("provision"), "launch", *argv], cwd=REPO, env=ansible_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# --------------------------------------------------------------------------- the diagnosis of a failed job
def test_launch_prints_the_diagnosis_of_a_failed_job(capsys):
    launch._diagnose_output({"n1": "started\n", "n2": (FAIL / "nccl-bogus-ifname.log").read_text(encoding="utf-8", errors="replace")})
    err = capsys.readouterr().err
    assert "provision launch: diagnose: n2: diagnose.no_interface: NCCL found no usable interface: " \
           "NCCL_SOCKET_IFNAME=bogus0" in err and "| fix: set NCCL_SOCKET_IFNAME" in err
    launch._diagnose_output({"n1": "hello\n"})
    assert "no known cause" in capsys.readouterr().err
    launch._diagnose_output({})
    assert capsys.readouterr().err == ""


def test_printer_streams_each_nodes_output_into_its_own_diagnosis(capsys):
    """The whole output is diagnosed (not its last MiBs), in bounded memory, the same way as `provision diagnose`."""
    printer = launch.Printer(["n1", "n2"])
    noise = "[2026-11-27 08:00:00,000] rank0 INFO step 1/8 loss 0.999998\n" * 2000
    log = (FAIL / "nccl-bogus-ifname.log").read_text(encoding="utf-8", errors="replace")
    for _i in range(50):  # 6 MB of n1's progress lines, the failure at the start of n2's output
        printer.feed("n1", noise)
    for piece in (log[:100], log[100:], "tail\n"):
        printer.feed("n2", piece)
    capsys.readouterr()
    assert set(printer.scanners) == {"n1", "n2"}
    assert len(printer.scanners["n1"]._buf) < 1 << 20 and printer.scanners["n1"].bytes == 50 * len(noise)
    launch._diagnose_output(printer.scanners)
    err = capsys.readouterr().err
    assert "provision launch: diagnose: n2: diagnose.no_interface: NCCL found no usable interface: " \
           "NCCL_SOCKET_IFNAME=bogus0" in err


def test_launch_end_to_end_names_the_cause_when_the_job_fails(tmp_path):
    """Through Ansible on two local "nodes": n2 prints a real NCCL failure and exits 1."""
    inv = _cluster(tmp_path, {"n1": "echo started; sleep 30\n",
                              "n2": f"cat '{FAIL / 'nccl-bogus-ifname.log'}'; exit 1\n"})
    proc = subprocess.run([tool("provision"), "launch", "-i", str(inv), "--poll-wait", "1", "--", "x"], cwd=REPO,
                          env=ansible_env(), capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "provision launch: diagnose: n2: diagnose.no_interface: NCCL found no usable interface: " \
           "NCCL_SOCKET_IFNAME=bogus0" in proc.stderr, proc.stderr
