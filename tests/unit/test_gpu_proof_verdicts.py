"""The GPU branch of scripts/gpu_proof/proof.py's verdicts, without a GPU: gpu_facts and gpu_health_info
run in this process on the real H100 captures (tests/fixtures/h100-node/, replayed by a stand-in
nvidia-smi, as the modules' own tests do), their results written as the proof's callback writes them,
then judged as the gpu and expected_busbw steps judge them on a lent GPU."""

from __future__ import annotations

import json
import os
import shutil
import sys

import helpers
from helpers import FIXTURES, REPO

sys.path.insert(0, str(REPO / "scripts" / "gpu_proof"))
import proof  # noqa: E402

H100 = FIXTURES / "h100-node"


def _gpu_step(tmp_path):
    """The gpu step's events file, from the two modules run on the replayed captures."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi, cat = bindir / "nvidia-smi", shutil.which("cat")
    smi.write_text("#!/bin/sh\n"
                   f'case "$1" in -q) {cat} {H100 / "nvidia-smi-q.xml"};; --query-gpu=*) {cat} {H100 / "nvidia-smi-query-gpu.csv"};;'
                   ' *) exit 2;; esac\n')
    smi.chmod(0o755)
    root = tmp_path / "root"
    (root / "proc" / "sys" / "kernel").mkdir(parents=True)
    (root / "proc" / "sys" / "kernel" / "dmesg_restrict").write_text("0\n")
    env = dict(os.environ, PATH=f"{bindir}:/usr/bin:/bin")
    facts = helpers.run_module("gpu_facts", {"search_roots": [str(tmp_path / "none")]}, env=env)
    health = helpers.run_module("gpu_health_info", {"root": str(root), "node": "localhost"},
                                env=dict(env, PATH=str(bindir)))
    out = tmp_path / "out"
    (out / "results").mkdir(parents=True)
    with open(out / "results" / "gpu.jsonl", "w") as fh:
        for action, res in (("provision.cluster.gpu_facts", facts), ("provision.cluster.gpu_health_info", health)):
            fh.write(json.dumps({"action": action, "status": "ok", "task": action, "result": res}) + "\n")
    return out, health


def test_the_gpu_step_names_the_gpu_driver_cuda_and_the_health_reading(tmp_path):
    out, _health = _gpu_step(tmp_path)
    rec = proof.judge(out, "gpu", 0, 3.0)
    assert rec["status"] == "ok", rec
    assert rec["detail"].startswith("1 x NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0 (nvidia-smi); ")
    assert rec["detail"].endswith("; toolkits none; health: 8 pass, 4 skip")  # nvlink, kernel log, fabric, dcgm not read


def test_a_role_stopped_on_a_gpu_fault_is_a_failed_step_that_keeps_the_reading(tmp_path):
    out, health = _gpu_step(tmp_path)
    bad = dict(health, checks=health["checks"] + [{"check": "gpu_persistence GPU0", "status": "fail",
                                                   "detail": "persistence mode off", "fix": "nvidia-smi -pm 1"}])
    with open(out / "results" / "gpu.jsonl", "a") as fh:
        fh.write(json.dumps({"action": "provision.cluster.gpu_health_info", "status": "ok", "task": "t", "result": bad}) + "\n")
    rec = proof.judge(out, "gpu", 2, 3.0)
    assert rec["status"] == "failed"
    assert rec["detail"] == "the role stopped on a GPU finding: gpu_persistence GPU0: persistence mode off"
    assert rec["data"]["health_checks"][-1]["check"] == "gpu_persistence GPU0"


def test_expected_busbw_from_the_h100_reading(tmp_path):
    out, _health = _gpu_step(tmp_path)
    assert proof.expected(out) == 0
    doc = json.loads((out / "expected-busbw.json").read_text())
    assert doc["status"] == "ok" and doc["gpu_count"] == 1
    # one GPU, one node: nothing crosses a link; the PCIe figure is NCCL's model of the link nvidia-smi reports
    assert doc["one_node"]["busbw"] is None and "busbw is 0 by definition" in doc["one_node"]["reason"]
    assert "PCIe Gen5/5 x16/16 (model 48.0 GB/s host<->GPU)" in doc["detail"]
