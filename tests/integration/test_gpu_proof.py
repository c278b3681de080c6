"""scripts/gpu_proof.sh on a machine without a GPU: the CPU path of the one-shot GPU proof (issue 36).

The whole script runs once (about 70 s idle, 130 s at load 19 on the 2-core machine), for real, against
this machine as the only node over Ansible's local connection, with the interpreter running the tests as
"the torch already there", as the device run does with the lent machine's python3: every GPU step must
say skipped with its reason, every other step ok, exit 0, and nothing may be written outside the output
folder ($HOME and $TMPDIR are empty folders of the test and must stay so). No podman, no network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import pytest

from helpers import REPO

SCRIPT = REPO / "scripts" / "gpu_proof.sh"
sys.path.insert(0, str(REPO / "scripts" / "gpu_proof"))
import proof  # noqa: E402

GPU_STEPS = [name for name, _title, gpu in proof.STEPS if gpu]
NO_GPU = "no NVIDIA GPU: nvidia-smi not found: no NVIDIA driver on this node"


def _run(args, tmp, timeout, **env):
    home, tmpdir = tmp / "home", tmp / "tmp"
    home.mkdir(exist_ok=True)
    tmpdir.mkdir(exist_ok=True)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GPU_PROOF_")) and k != "OUT"}
    full.update(HOME=str(home), TMPDIR=str(tmpdir), **env)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env=full, cwd=tmp, check=False)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: run scripts/gpu_proof.sh itself (docs/gpu-proof.md)")
    tmp = tmp_path_factory.mktemp("gpu-proof")
    out = tmp / "out"
    out.mkdir()
    cache = Path(sys.prefix) / ".provision-versions.json"
    cache_before = cache.stat().st_mtime_ns if cache.exists() else None
    # as on the device machine: $OUT set, no --out; the python that runs the tests holds torch
    proc = _run(["--python", sys.executable], tmp, 400, OUT=str(out))
    tarballs = sorted(out.glob("gpu-proof-*.tar.gz"))
    extracted = tmp / "extracted"
    if tarballs:
        with tarfile.open(tarballs[0]) as tar:
            tar.extractall(extracted, filter="data")
    folders = sorted(extracted.glob("gpu-proof-*")) if extracted.exists() else []
    return {"proc": proc, "tmp": tmp, "out": out, "tarballs": tarballs, "folder": folders[0] if folders else None,
            "cache": (cache, cache_before)}


def _steps(run):
    return {s["step"]: s for s in json.loads((run["out"] / "summary.json").read_text())["steps"]}


def test_cpu_path_exits_0_with_every_gpu_step_skipped_and_the_others_ok(cpu_run):
    proc = cpu_run["proc"]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    steps = _steps(cpu_run)
    for name in GPU_STEPS:
        assert steps[name]["status"] == "skipped", steps[name]
        assert steps[name]["detail"].startswith(NO_GPU), steps[name]
    for name in ("prereq", "versions", "preflight", "python_env", "nccl_net", "allreduce_gloo", "verify_local"):
        assert steps[name]["status"] == "ok", steps[name]
    summary = (cpu_run["out"] / "summary.txt").read_text()
    assert "result: 7 ok, 4 skipped, 0 failed; exit 0" in summary
    # the summary is the end of the output (what the device tool's output_tail shows)
    assert summary.strip().splitlines()[-2] in proc.stdout


def test_the_run_says_which_torch_it_used_and_adopted_it_without_installing(cpu_run):
    steps = _steps(cpu_run)
    torch = metadata.version("torch")
    assert f"torch {torch}" in steps["prereq"]["detail"] and sys.executable in steps["prereq"]["detail"]
    assert steps["python_env"]["detail"].startswith(f"torch {torch} ")
    assert f"from {sys.prefix}" in steps["python_env"]["detail"]
    assert "adopted as it is: nothing downloaded, installed or re-owned" in steps["python_env"]["detail"]
    events = [json.loads(line) for line in (cpu_run["folder"] / "results" / "python_env.jsonl").read_text().splitlines()]
    # a module the stage runs through provision.cluster.check is named in the result's check_module
    actions = {str(e["result"].get("check_module") or e["action"]).rsplit(".", 1)[-1]: e for e in events
               if e["status"] != "skipped"}
    assert "wheelhouse" not in actions and "wheelhouse_sync" not in actions  # no wheelhouse built or copied
    assert actions["python_venv"]["result"]["adopted"] is True and actions["python_venv"]["result"]["changed"] is False
    cache, before = cpu_run["cache"]
    assert (cache.stat().st_mtime_ns if cache.exists() else None) == before  # nothing written into that environment


def test_outputs_come_back_as_three_files_under_out(cpu_run):
    """The device tool brings back at most 8 files from $OUT, 2 folders deep: one tarball and the summary."""
    assert sorted(p.name for p in cpu_run["out"].iterdir()) == sorted(
        [cpu_run["tarballs"][0].name, "summary.json", "summary.txt"])
    folder = cpu_run["folder"]
    hosts = (folder / "inventory" / "hosts.ini").read_text()
    assert f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}" in hosts
    for name in ("summary.txt", "prereq.json", "plan.json", "raw/torch-versions.txt", "raw/os-release",
                 "raw/uname.txt", "logs/preflight.log", "results/gpu.jsonl", "expected-busbw.json"):
        assert (folder / name).is_file(), name
    verify = json.loads((folder / "verify-local.json").read_text())
    assert verify["local"] and {c["check"] for c in verify["checks"]} >= {"gpu", "nccl_net.socket_ifname"}
    result = json.loads((folder / "allreduce" / "result.json").read_text())
    assert result["backend"] == "gloo" and result["world_size"] == 1 and result["correct"] is True
    gpu = [json.loads(line) for line in (folder / "results" / "gpu.jsonl").read_text().splitlines()]
    # the cuda_toolkit stage runs gpu_facts as verify's gpu check (provision.cluster.check names the module)
    facts = proof.last_of(gpu, "gpu_facts")["result"]["ansible_facts"]["gpu_facts"]
    assert facts["gpu_count"] == 0 and facts["reason"] == NO_GPU.split(": ", 1)[1]


def test_nothing_is_left_outside_the_output_folder(cpu_run):
    tmp = cpu_run["tmp"]
    assert list((tmp / "home").iterdir()) == []      # no ~/.ansible, ~/.cache/provision, ~/.bashrc
    assert list((tmp / "tmp").iterdir()) == []       # the work folder (wheels, Ansible temp, facts) is gone
    assert not list(tmp.glob("gpu-proof-*"))         # under $OUT only, not in the working directory
    pids = (cpu_run["folder"] / "allreduce" / "current.pid").read_text().split()
    assert not Path(f"/proc/{pids[0]}").exists() or b"allreduce_worker" not in Path(f"/proc/{pids[0]}/cmdline").read_bytes()


def test_a_python_without_torch_or_ansible_stops_at_once_in_one_line(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    proc = _run(["--python", str(bare / "bin" / "python"), "--out", str(tmp_path / "o"), "--wheels",
                 str(tmp_path / "none")], tmp_path, 120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("gpu_proof: cannot proceed: missing: ")]
    assert len(lines) == 1, proc.stdout
    assert "ansible-core" in lines[0] and "torch (not importable by " in lines[0]
    assert "scripts/gpu_proof.sh --prepare DIR" in lines[0]
    assert "nvidia-smi not found" in lines[0] or shutil.which("nvidia-smi")
    assert "prereq          failed" in (tmp_path / "o" / "summary.txt").read_text()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_usage_errors_exit_2(tmp_path):
    assert _run(["--bogus"], tmp_path, 30).returncode == 2
    assert _run(["--budget", "7m"], tmp_path, 30).returncode == 2
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    proc = _run(["--python", sys.executable, "--out", str(tmp_path / "full")], tmp_path, 30)
    assert proc.returncode == 2 and "is not empty" in proc.stdout
