"""`provision diagnose` on real logs: users' logs from public threads (tests/fixtures/diagnose/README.md)
and the lab's own failure captures (h100-node/failures, allreduce_smoke, runtime/errors).

Each log names exactly the causes listed (cause id, node), in that order; the logs where the right
answer is "no known cause" name none and list the lines that look like errors instead.
"""

from __future__ import annotations

import re
import time

import pytest

import helpers
from helpers import REPO
from ansible_collections.provision.cluster.plugins.module_utils import diagnose as dg
from provision import diagnose as core

PUBLIC = REPO / "tests" / "fixtures" / "diagnose"
H100 = helpers.FIXTURES / "h100-node"
FAIL = H100 / "failures"
SMOKE = REPO / "tests" / "fixtures" / "allreduce_smoke"
RUNTIME = REPO / "tests" / "fixtures" / "runtime" / "errors"

# file -> [(cause, node)] in the order they are named; [] = no known cause
EXPECTED = {
    # ---- logs from public threads (README.md there: source, what happened, what was trimmed)
    PUBLIC / "nccl-socket-ifname-missing.log": [("no_interface", "twshared1016")],
    PUBLIC / "nccl-no-socket-interface.log": [("no_interface", None)],
    PUBLIC / "gloo-ifname-exclude-list.log": [("no_interface", None)],
    PUBLIC / "gloo-hostname-loopback-fallback.log": [("gloo_loopback", None)],
    PUBLIC / "gloo-peer-on-loopback.log": [("gloo_loopback", None)],
    PUBLIC / "nccl-uses-loopback.log": [("nccl_loopback_interface", "paigcr-b-gpu-1012")],
    PUBLIC / "nccl-connect-refused.log": [("nccl_connect_refused", "tj1-asr-train-v100-13")],
    PUBLIC / "nccl-no-route-to-peer.log": [("peer_unreachable", "node5")],
    PUBLIC / "nccl-peer-closed.log": [("peer_lost", "ubuntu")],
    PUBLIC / "nccl-duplicate-gpu-slurm.log": [("duplicate_gpu", "qgpu2018")],
    PUBLIC / "nccl-duplicate-gpu-mpirun-tags.log": [("duplicate_gpu", "smc-gpu-03")],
    PUBLIC / "nccl-duplicate-gpu-srun-label.log": [("duplicate_gpu", None)],
    PUBLIC / "nccl-shm-fallocate-horovod.log": [("shm", "gpu2-ru7")],
    PUBLIC / "nccl-shm-extend-ci.log": [("shm", "mt-l-x86iavx512-45-172-t4-4-csmpw-runner-g4sfw-workflow")],
    PUBLIC / "nccl-ibv-create-qp.log": [("ib_qp_create", "hai-a100-3")],
    PUBLIC / "nccl-ibv-modify-qp-unreachable.log": [("ib_fabric_path", "dgxh100-3")],
    PUBLIC / "nccl-ib-completion-error-pdsh.log": [("ib_fabric_path", "node01")],
    PUBLIC / "torchrun-c10d-client-timeout.log": [("rendezvous_connection", None)],
    PUBLIC / "torchrun-port-in-use-bind.log": [("port_held", None)],
    PUBLIC / "torchrun-eaddrinuse-29500.log": [("port_held", None)],
    PUBLIC / "torch-nccl-id-store-timeout.log": [("nccl_id_timeout", None)],
    PUBLIC / "torchrun-sigkill.log": [("worker_killed", None)],
    PUBLIC / "slurm-rendezvous-closed.log": [("rendezvous_closed", None)],
    PUBLIC / "slurm-preempted.log": [("slurm_preempted", "learnfair5146")],
    PUBLIC / "deepspeed-ssh-no-route.log": [("ssh_unreachable", "175.24.121.148")],
    PUBLIC / "deepspeed-hostfile-ssh-check.log": [("ssh_failed", "gadi-gpu-v100-0011")],
    PUBLIC / "pdsh-ssh-refused.log": [("ssh_refused", "localhost")],
    PUBLIC / "pdsh-command-not-found.log": [("remote_command_not_found", "compute-0-0")],
    PUBLIC / "mpirun-host-key.log": [("ssh_host_key", None)],
    PUBLIC / "mpirun-tcp-blocked.log": [("mpi_tcp_blocked", "a2935f150BBB")],
    PUBLIC / "mpirun-not-enough-slots.log": [("mpi_not_enough_slots", None)],
    PUBLIC / "hccl-ei0006-socket-timeout.log": [("hccl_socket_timeout", None)],
    PUBLIC / "hccl-ei0006-ppo.log": [("hccl_socket_timeout", None)],
    PUBLIC / "hccl-listen-port-held.log": [("hccl_port_held", None)],
    PUBLIC / "hccl-bind-ip-port.log": [("hccl_port_held", None)],
    PUBLIC / "hccl-nic-down.log": [("hccl_nic_down", None)],
    PUBLIC / "neg-success-nccl-tests.log": [],
    PUBLIC / "neg-user-keyerror.log": [],
    PUBLIC / "neg-user-exception-childfailed.log": [],
    PUBLIC / "neg-cut-short.log": [],
    PUBLIC / "neg-slurm-step-cancelled.log": [],
    # ---- the lab's own captures (their READMEs say how each was made)
    FAIL / "nccl-bogus-ifname.log": [("no_interface", "vm")],
    FAIL / "nccl-ib-hca-missing.log": [],  # a silent fallback to Socket that succeeded
    FAIL / "torchrun-port-held-static.log": [("port_held", None)],
    FAIL / "torchrun-port-held-c10d.log": [("rendezvous_connection", None)],
    FAIL / "torchrun-c10d-endpoint-absent.log": [("rendezvous_timeout", None)],
    FAIL / "torchrun-c10d-peer-never-joins.log": [("rendezvous_timeout", None)],
    FAIL / "torchrun-static-master-absent.log": [],  # killed by timeout: the log is only "exit 124"
    H100 / "nccl-duplicate-gpu-error.log": [("duplicate_gpu", "vm")],
    H100 / "nccl-debug-info-1rank-socket.log": [],
    H100 / "gloo-2rank-allreduce.log": [],
    SMOKE / "gloo-bogus-ifname.node1.json": [("no_interface", None)],
    SMOKE / "gloo-master-unreachable.node1.json": [("rendezvous_timeout", None)],
    SMOKE / "gloo-master-unreachable.node2.json": [("peer_unreachable", None)],
    SMOKE / "gloo-master-unreachable.node2.log": [("peer_unreachable", None)],
    SMOKE / "gloo-port-held.node1.json": [("port_held", None)],
    SMOKE / "gloo-port-held.node2.json": [],  # stuck in rendezvous, killed: it says nothing
    SMOKE / "torch-shm-too-small.log": [("shm", None)],
    RUNTIME / "nccl-ibv-reg-mr.log": [("memlock", None)],
    RUNTIME / "nccl-shm-attach-missing.log": [("ipc", "g148")],
    RUNTIME / "nccl-shm-extend-failed.log": [("shm", "ubuntu")],
    RUNTIME / "nccl-shm-fallocate.log": [("shm", None)],
    RUNTIME / "python-emfile-sockets.txt": [("nofile", None)],
    RUNTIME / "torch-dataloader-bus-error.txt": [("shm", None)],
}


def read(path):
    return path.read_text(encoding="utf-8", errors="replace")


def named(doc):
    return [(c["data"]["cause"], c.get("node")) for c in doc["causes"]]


@pytest.mark.parametrize("path", sorted(EXPECTED), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_real_log_names_its_cause_and_node(path):
    doc = core.diagnose([(str(path), read(path))])
    assert named(doc) == EXPECTED[path], (path.name, [c["detail"] for c in doc["causes"]])
    assert doc["ok"] is (not EXPECTED[path])
    assert core.exit_code(doc) == (1 if EXPECTED[path] else 0)
    for c in doc["causes"]:
        assert c["check"] == "diagnose." + c["data"]["cause"] and c["status"] == "fail"
        assert "\n" not in c["detail"] and "\n" not in c["fix"] and c["fix"]
        data = c["data"]
        assert data["file"] == str(path) and data["lines"] and data["line"] == data["lines"][0]
        # the evidence is the line the detail quotes, as the file has it
        assert data["evidence"] in c["detail"]
        assert read(path).splitlines()[data["line"] - 1].strip().startswith(data["evidence"].rstrip(".")[:60])


def test_every_public_fixture_is_tested_and_listed_in_the_readme():
    readme = read(PUBLIC / "README.md")
    files = sorted(p for p in PUBLIC.iterdir() if p.name != "README.md")
    assert files and all(p in EXPECTED for p in files)
    for p in files:
        row = next((line for line in readme.splitlines() if line.startswith(f"| {p.name} |")), None)
        assert row, p.name
        source = row.split("|")[2].strip()
        assert re.match(r"^[\w.-]+/[\w.-]+#\d+", source), row  # owner/repo#number
    threads = {row.split("|")[2].split()[0] for row in readme.splitlines() if row.startswith("| ") and "#" in row}
    assert len(files) >= 15 and len(threads) >= 8
    assert sum(1 for p in files if not EXPECTED[p]) >= 3


@pytest.mark.parametrize("path", sorted(PUBLIC.glob("neg-*.log")), ids=lambda p: p.name)
def test_no_known_cause_lists_the_lines_that_look_like_errors(path):
    doc = core.diagnose([(str(path), read(path))])
    assert doc["causes"] == [] and doc["unknown_error_lines"], path.name
    for item in doc["unknown_error_lines"]:
        assert item["file"] == str(path) and read(path).splitlines()[item["line"] - 1].strip().startswith(item["text"][:40])


def test_a_log_with_nothing_in_it_gives_nothing():
    doc = core.diagnose([("x", read(FAIL / "torchrun-static-master-absent.log")), ("empty", "")])
    assert doc["ok"] and doc["causes"] == [] and doc["unknown_error_lines"] == []


def test_a_users_error_is_quoted_not_explained():
    doc = core.diagnose([("keyerror.log", read(PUBLIC / "neg-user-keyerror.log"))])
    assert [(u["line"], u.get("node")) for u in doc["unknown_error_lines"]] == [(2, "viking-prod-230")]
    assert "KeyError" in doc["unknown_error_lines"][0]["text"]
    doc = core.diagnose([("x.log", read(PUBLIC / "neg-user-exception-childfailed.log"))])
    assert doc["unknown_error_lines"][0]["text"] == "Exception: expected value at line 1 column 1"


# --------------------------------------------------------------------------- specificity
def test_a_specific_cause_hides_what_it_explains():
    # the NIC down also makes HCCL's listen fail: not a held port
    text = read(PUBLIC / "hccl-nic-down.log")
    assert "listen on ip[192.168.20.148] and specific port[16666] fail" in text
    assert named(core.diagnose([("x", text)])) == [("hccl_nic_down", None)]
    # the held port came first, the link timeouts followed
    assert "wait socket establish timeout" in read(PUBLIC / "hccl-listen-port-held.log")
    # ssh's host key is why mpirun could not start its daemons
    assert "ORTE was unable" in read(PUBLIC / "mpirun-host-key.log")
    # NCCL on lo is why the connect was refused
    assert "Connection refused" in read(PUBLIC / "nccl-uses-loopback.log")


def test_symptoms_give_way_to_a_real_cause_in_another_nodes_log():
    logs = [("node1", read(SMOKE / "gloo-master-unreachable.node1.json")),
            ("node2", read(SMOKE / "gloo-master-unreachable.node2.json"))]
    doc = core.diagnose(logs, nodes={"node1": "node1", "node2": "node2"})
    assert named(doc) == [("peer_unreachable", "node2")]  # node1 only waited for it
    assert [f["causes"] for f in doc["files"]] == [[], ["diagnose.peer_unreachable"]]
    # alone, the waiting node's log still says what it saw
    assert named(core.diagnose(logs[:1], node="node1")) == [("rendezvous_timeout", "node1")]


def test_two_real_causes_on_two_nodes_are_both_named():
    doc = core.diagnose([("a.log", read(PUBLIC / "nccl-shm-fallocate-horovod.log")),
                         ("b.log", read(PUBLIC / "nccl-duplicate-gpu-mpirun-tags.log"))])
    assert named(doc) == [("shm", "gpu2-ru7"), ("duplicate_gpu", "smc-gpu-03")]
    assert doc["summary"] == {"files": 2, "causes": 2, "nodes": ["gpu2-ru7", "smc-gpu-03"]}


def test_one_cause_on_one_node_is_one_record_with_every_line():
    doc = core.diagnose([("x", read(PUBLIC / "nccl-ibv-create-qp.log"))])
    (c,) = doc["causes"]
    assert c["data"]["lines"] == [4, 14, 16]


def test_the_same_cause_in_two_files_of_one_node_is_one_record():
    text = read(PUBLIC / "nccl-shm-fallocate-horovod.log")
    doc = core.diagnose([("a.log", text), ("b.log", text)])
    (c,) = doc["causes"]
    assert c["data"]["files"] == ["a.log", "b.log"]


# --------------------------------------------------------------------------- nodes
@pytest.mark.parametrize("line, expected", [
    # torchrun --tee / vLLM, torchx roles
    ("[rank0]: torch.distributed.DistBackendError: NCCL error in: ...", {"rank": "rank0"}),
    ("[default3]:Traceback (most recent call last):", {"rank": "default3"}),
    ("[trainer0|0]:ncclInternalError: Internal check failed.", {"rank": "trainer0|0"}),
    # pdsh / DeepSpeed, with NCCL's own host after it
    ("node01: VM-0-14-centos:108:593 [0] transport/net_ib.cc:816 NCCL WARN x", {"node": "node01", "host": "VM-0-14-centos"}),
    ("gpu003:   File \"/data/vayu/train/LLaMA-Factory/src/train_bash.py\", line 5, in main", {"node": "gpu003"}),
    ("104.171.201.172: lambda-scalar03:148973:150186 [7] NCCL INFO Connected all trees",
     {"node": "104.171.201.172", "host": "lambda-scalar03"}),
    ("pdsh@rocks7: compute-0-0: ssh exited with exit code 127", {"node": "compute-0-0"}),
    # NCCL host:pid:tid [dev], with a timestamp before it
    ("[2026-11-23 03:36:31] vm:538:538 [0] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found", {"host": "vm"}),
    # SLURM
    ("srun: error: cdr2596: task 1: Exited with exit code 1", {"node": "cdr2596", "task": "1"}),
    ("slurmstepd: error: *** STEP 6053.0 ON DEL2212S020 CANCELLED AT 2024-04-23T12:18:08 ***", {"node": "DEL2212S020"}),
    ("3: Duplicate GPU detected : rank 3 and rank 0 both on CUDA device 3000", {"task": "3"}),
    # Open MPI [host:pid], mpirun --tag-output
    ("[mpi001:21274] mca:base:select: Auto-selecting plm components", {"node": "mpi001"}),
    ("[1,2]<stdout>:smc-gpu-03:29880:30398 [0] init.cc:497 NCCL WARN x", {"rank": "2", "host": "smc-gpu-03"}),
    ("[viking-prod-230:0]:An error occurred: KeyError", {"node": "viking-prod-230"}),
    # not nodes
    ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1201", {}),
    ("torch.distributed.DistBackendError: [4] is setting up NCCL communicator", {}),
    ("EI0006: 2024-08-05-18:15:21.270.506 Getting socket times out.", {}),
    ("self.dist_backend: nccl", {}),
    ("ssh: connect to host 175.24.121.148 port 22: No route to host", {}),
    ("[W socket.cpp:426] [c10d] The server socket has failed to bind", {}),
])
def test_line_prefixes_name_the_node_or_rank(line, expected):
    assert dg.attribute(line) == expected


def test_node_option_names_lines_that_carry_none_but_not_those_that_do():
    text = read(PUBLIC / "nccl-no-socket-interface.log")
    assert named(core.diagnose([("x", text)], node="n7")) == [("no_interface", "n7")]
    text = read(PUBLIC / "pdsh-ssh-refused.log")
    assert named(core.diagnose([("x", text)], node="n7")) == [("ssh_refused", "localhost")]


def test_launcher_exits_are_listed():
    doc = core.diagnose([("x", read(PUBLIC / "slurm-rendezvous-closed.log"))])
    assert [(e["node"], e["task"], e["code"]) for e in doc["files"][0]["exits"]] == [("cdr2596", "1", 1), ("cdr2598", "2", 1)]
    doc = core.diagnose([("x", read(FAIL / "nccl-bogus-ifname.log"))])
    assert {"node": "localhost", "rank": "0", "code": 1} in [{k: e[k] for k in ("node", "rank", "code")}
                                                             for e in doc["files"][0]["exits"] if "node" in e]


def test_a_large_log_is_read_quickly():
    text = read(H100 / "nccl-debug-info-1rank-socket.log") * 300 + read(FAIL / "nccl-bogus-ifname.log")
    started = time.monotonic()
    doc = core.diagnose([("big.log", text)])
    assert named(doc) == [("no_interface", "vm")]
    assert time.monotonic() - started < 20, len(text)


# --------------------------------------------------------------------------- the smoke test and node_runtime use it
def test_the_smoke_test_and_node_runtime_read_the_same_mapping():
    from ansible_collections.provision.cluster.plugins.module_utils import allreduce_smoke

    assert allreduce_smoke.classify_log is dg.classify_log
    text = read(RUNTIME / "nccl-shm-fallocate.log")
    cause, why, fix = dg.explain_resource_error(text)
    assert cause == "shm" and (why, fix) == (dg.BY_ID["shm"].detail, dg.BY_ID["shm"].fix)
    assert set(dg.RESOURCE_CAUSES) == {"shm", "ipc", "memlock", "nofile"}
    assert dg.explain_resource_error(read(PUBLIC / "hccl-nic-down.log")) is None


def test_cause_ids_are_known_and_fixes_are_one_line():
    for c in dg.CAUSES:
        assert re.match(r"^[a-z][a-z0-9_]*$", c.cause) and c.fix and "\n" not in c.fix
        assert all(s in dg.BY_ID for s in c.suppresses), c.cause


# ---------------------------------------------------------------- NCCL diagnosis


@pytest.mark.parametrize("name,cause", [
    ("nccl-shm-extend-failed.log", "shm"),
    ("nccl-shm-fallocate.log", "shm"),
    ("torch-dataloader-bus-error.txt", "shm"),
    ("nccl-shm-attach-missing.log", "ipc"),
    ("nccl-ibv-reg-mr.log", "memlock"),
    ("python-emfile-sockets.txt", "nofile"),
])
def test_explain_nccl_resource_error(name, cause):
    got = dg.explain_resource_error((RUNTIME / name).read_text())
    assert got is not None and got[0] == cause and got[2]


def test_explain_ignores_other_failures(fixtures_dir):
    failures = sorted((fixtures_dir / "h100-node" / "failures").glob("*.log"))
    assert failures
    for log in failures + [fixtures_dir / "h100-node" / "nccl-debug-info-1rank-socket.log"]:
        assert dg.explain_resource_error(log.read_text()) is None, log.name
