"""`provision diagnose` on real logs: users' logs from public threads (tests/fixtures/diagnose/README.md)
and the lab's own failure captures (h100-node/failures, allreduce_smoke, runtime/errors).

Each log names exactly the causes listed (cause id, node), in that order; the logs where the right
answer is "no known cause" name none and list the lines that look like errors instead. The engine
(streamed, bounded, the first failure by time and rank, the rest as its consequences) is tested on
the lab's real captures of a killed rank (local/) and on what a log can do to it: huge lines,
progress bars redrawn with \r, markup and ESC sequences, input fed in any pieces.
"""

from __future__ import annotations

import json
import random
import re
import time

import pytest

import helpers
from helpers import REPO
from ansible_collections.provision.cluster.plugins.module_utils.verify import diagnose as dg
from provision import diagnose as core

PUBLIC = REPO / "tests" / "fixtures" / "diagnose"
H100 = helpers.FIXTURES / "h100-node"
FAIL = H100 / "failures"
SMOKE = REPO / "tests" / "fixtures" / "allreduce_smoke"
RUNTIME = REPO / "tests" / "fixtures" / "runtime" / "errors"
LOCAL = PUBLIC / "local"

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
    # ---- issue 33: the failures users post most (README.md, second table)
    PUBLIC / "nccl-watchdog-allreduce-llamafactory.log": [("nccl_timeout", None)],
    PUBLIC / "nccl-watchdog-reduce-scatter.log": [("nccl_timeout", None)],
    PUBLIC / "nccl-watchdog-basicsr.log": [("nccl_timeout", None)],
    PUBLIC / "nccl-watchdog-after-progress-bar.log": [("nccl_timeout", None)],
    PUBLIC / "nccl-watchdog-blocking-wait.log": [("nccl_timeout", None)],
    PUBLIC / "nccl-watchdog-terminate.log": [("nccl_timeout", None)],
    PUBLIC / "nccl-watchdog-timeout-1ms.log": [("nccl_timeout", None)],
    PUBLIC / "nccl-socket-fallback-docker-ib.log": [("nccl_socket_fallback", None)],
    PUBLIC / "nccl-socket-fallback-slurm-docker.log": [("nccl_socket_fallback", "node013")],
    PUBLIC / "nccl-socket-fallback-no-libibverbs.log": [("nccl_socket_fallback", None)],
    PUBLIC / "nccl-socket-fallback-no-uverbs-driver.log": [("nccl_socket_fallback", None)],
    PUBLIC / "nccl-system-error-no-ip-interface.log": [("no_interface", "e66aa18dc444")],
    PUBLIC / "nccl-system-error-graph-file.log": [("nccl_system_error", "Spotllm")],
    PUBLIC / "nccl-system-error-connect-refused.log": [("nccl_connect_refused", None)],
    PUBLIC / "nccl-system-error-nic-attribute.log": [("nccl_system_error", "clima")],
    PUBLIC / "nccl-system-error-no-warn.log": [("nccl_system_error", None)],
    PUBLIC / "slurm-oom-kill-srun.log": [("host_oom", "node107")],
    PUBLIC / "slurm-oom-kill-batch.log": [("host_oom", "c002")],
    PUBLIC / "torchrun-sigkill-ram.log": [("worker_killed", None)],
    PUBLIC / "deepspeed-sigkill-ram.log": [("worker_killed", None)],
    PUBLIC / "torchrun-sigkill-title.log": [("worker_killed", None)],
    PUBLIC / "gpu-xid79-nvidia-smi-unknown.log": [("gpu_fault", "node1")],
    PUBLIC / "gpu-fallen-off-bus-dmesg.log": [("gpu_fault", None)],
    PUBLIC / "gpu-ecc-uncorrectable-node.log": [("gpu_fault", None)],
    PUBLIC / "gpu-ecc-cuda-runtime-error.log": [("gpu_fault", None)],
    PUBLIC / "gpu-aer-fatal-xid79.log": [("gpu_fault", None)],
    PUBLIC / "gpu-nvidia-smi-unknown-aer.log": [("gpu_fault", "cn-234")],
    PUBLIC / "gpu-aer-fatal-hang.log": [("gpu_fault", None)],
    PUBLIC / "gpu-ecc-then-watchdog.log": [("gpu_fault", None)],
    PUBLIC / "gloo-connection-closed-isend.log": [("peer_lost", None)],
    PUBLIC / "gloo-read-error-reset.log": [("peer_lost", None)],
    PUBLIC / "tcpstore-broken-pipe.log": [("peer_lost", None)],
    PUBLIC / "tcpstore-reset-broken-pipe-ranks.log": [("peer_lost", None)],
    PUBLIC / "gloo-connection-closed-and-reset.log": [("peer_lost", None)],
    PUBLIC / "torchx-ray-head-unresolved.log": [("name_unresolved", "10.131.6.134")],
    PUBLIC / "torch-master-hostname-unresolved.log": [("name_unresolved", None)],
    PUBLIC / "deepspeed-ssh-name-unresolved.log": [("name_unresolved", None)],
    PUBLIC / "deepspeed-ssh-name-unresolved-docker.log": [("name_unresolved", None)],
    PUBLIC / "deepspeed-ssh-name-unresolved-k8s.log": [("name_unresolved", None)],
    PUBLIC / "tcpstore-host-not-found.log": [("name_unresolved", None)],
    # healthy runs and noise: no false alarm
    PUBLIC / "healthy-nccl-tests-tail.log": [],
    PUBLIC / "healthy-nccl-init-complete-4node.log": [],
    PUBLIC / "healthy-nccl-ib-4node.log": [],
    PUBLIC / "healthy-nccl-aws-efa.log": [],
    PUBLIC / "healthy-nccl-p2p-rings.log": [],
    PUBLIC / "healthy-nccl-tests-results.log": [],
    PUBLIC / "healthy-nccl-socket-forced-dgx.log": [],
    PUBLIC / "healthy-nccl-ib-dstack.log": [],
    PUBLIC / "healthy-nccl-roce-ibext.log": [],
    PUBLIC / "noise-nccl-ib-disabled-on-purpose.log": [],
    PUBLIC / "noise-pcie-aer-corrected.log": [],
    LOCAL / "healthy-torchrun-2proc.log": [],
    LOCAL / "healthy-torchrun-debug-detail.log": [],
    LOCAL / "healthy-2node-node0.log": [],
    LOCAL / "healthy-2node-node1.log": [],
    PUBLIC / "neg-success-nccl-tests.log": [],
    PUBLIC / "neg-user-keyerror.log": [],
    PUBLIC / "neg-user-exception-childfailed.log": [],
    PUBLIC / "neg-cut-short.log": [],
    PUBLIC / "neg-slurm-step-cancelled.log": [],
    # ---- the lab's own captures (their READMEs say how each was made)
    FAIL / "nccl-bogus-ifname.log": [("no_interface", "vm")],
    # NCCL_IB_HCA=mlx5_9 on a node with no IB: NCCL ran on sockets (it succeeded, slowly): IB was asked for
    FAIL / "nccl-ib-hca-missing.log": [("nccl_socket_fallback", "vm")],
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
    SMOKE / "gloo-master-unreachable-no-dns.node2.log": [("peer_unreachable", None)],
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


def check_records(doc, path):
    for c in doc["causes"] + doc["consequences"]:
        assert c["check"] == "diagnose." + c["data"]["cause"] and c["status"] == "fail"
        assert "\n" not in c["detail"] and "\n" not in c["fix"] and c["fix"]
        data = c["data"]
        assert data["role"] in ("root", "cause", "consequence")
        assert data["lines"] and data["line"] == data["lines"][0]
        # the evidence is the line the detail quotes, as the file has it (from a little before the match in a
        # long line, marked "...")
        assert data["evidence"] in c["detail"]
        if data.get("file") == str(path):
            line = read(path).split("\n")[data["line"] - 1].strip()
            shown = data["evidence"][3:] if data["evidence"].startswith("...") else data["evidence"]
            assert shown.rstrip(".")[:60] in line, (line, shown)
        for e in data["evidence_lines"]:
            assert e["text"] and e["line"] >= 1


@pytest.mark.parametrize("path", sorted(EXPECTED), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_real_log_names_its_cause_and_node(path):
    doc = core.diagnose([(str(path), read(path))])
    assert named(doc) == EXPECTED[path], (path.name, [c["detail"] for c in doc["causes"]])
    assert doc["ok"] is (not EXPECTED[path])
    assert core.exit_code(doc) == (1 if EXPECTED[path] else 0)
    assert [(c["data"]["cause"], c.get("node")) for c in doc["consequences"]] == CONSEQUENCES.get(path.name, [])
    for c in doc["causes"]:
        assert c["data"]["file"] == str(path)
    check_records(doc, path)
    # a log read from disk in chunks, or fed in pieces of any size, says the same
    assert named(core.diagnose_paths([str(path)])) == EXPECTED[path]
    text = path.read_bytes()
    cuts = sorted(random.Random(path.name).sample(range(1, len(text)), min(12, max(0, len(text) - 1))))
    scanner = dg.Scanner(str(path))
    for a, b in zip([0] + cuts, cuts + [len(text)]):
        scanner.feed(text[a:b])
    assert named(core.diagnose([(str(path), scanner)])) == EXPECTED[path]


# the logs whose diagnosis lists consequences beside the causes above: the c10d client timing out on a store
# that does not answer follows from it
CONSEQUENCES = {"torchrun-c10d-client-timeout.log": [("rendezvous_timeout", None)],
                "torchrun-port-held-c10d.log": [("rendezvous_timeout", None)]}


def test_every_public_fixture_is_tested_and_listed_in_the_readme():
    readme = read(PUBLIC / "README.md")
    files = sorted(p for p in PUBLIC.iterdir() if p.is_file() and p.name != "README.md")
    assert files and all(p in EXPECTED for p in files)
    for p in files:
        row = next((line for line in readme.splitlines() if line.startswith(f"| {p.name} |")), None)
        assert row, p.name
        source = row.split("|")[2].strip()
        assert re.match(r"^[\w.-]+/[\w.-]+#\d+", source), row  # owner/repo#number
    threads = {row.split("|")[2].split()[0] for row in readme.splitlines() if row.startswith("| ") and "#" in row}
    assert len(files) >= 90 and len(threads) >= 85
    assert sum(1 for p in files if not EXPECTED[p]) >= 15
    local_readme = read(LOCAL / "README.md")
    for p in LOCAL.rglob("*"):
        if p.is_file() and p.name not in ("README.md", "train.py"):
            assert p.relative_to(LOCAL).parts[0].split(".")[0].replace("-node0", "").replace("-node1", "") \
                in local_readme, p


# issue 33: at least 4 real logs from public threads per new class, and 10 real healthy logs
NEW_CLASSES = {"nccl_timeout": ["nccl_timeout"], "nccl_socket_fallback": ["nccl_socket_fallback"],
               "nccl_system_error": ["nccl_system_error", "no_interface", "nccl_connect_refused"],
               "host_memory": ["host_oom", "worker_killed"], "gpu_fault": ["gpu_fault"],
               "peer_lost": ["peer_lost"], "name_unresolved": ["name_unresolved"]}
ISSUE_33 = [p for p in EXPECTED if p.parent == PUBLIC and p.name.startswith((
    "nccl-watchdog", "nccl-socket-fallback", "nccl-system-error", "slurm-oom", "torchrun-sigkill-",
    "deepspeed-sigkill", "gpu-", "gloo-connection-closed", "gloo-read-error", "tcpstore-", "torchx-",
    "torch-master-hostname", "deepspeed-ssh-name", "healthy-", "noise-"))]


def test_issue_33_fixtures_cover_every_new_class_four_times_and_ten_healthy_logs():
    assert len(ISSUE_33) >= 40
    for name, causes in NEW_CLASSES.items():
        logs = [p for p in ISSUE_33 if EXPECTED[p] and EXPECTED[p][0][0] in causes]
        assert len(logs) >= 4, (name, logs)
    healthy = [p for p in EXPECTED if p.name.startswith("healthy-") or p.name == "neg-success-nccl-tests.log"]
    assert len(healthy) >= 10 and all(EXPECTED[p] == [] for p in healthy)


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
    assert named(doc) == [("peer_unreachable", "node2")]  # node1 only waited for it: a consequence
    assert [(c["data"]["cause"], c["node"], c["data"]["after"]) for c in doc["consequences"]] == \
        [("rendezvous_timeout", "node1", {"cause": "peer_unreachable", "node": "node2"})]
    assert [f["causes"] for f in doc["files"]] == [[], ["diagnose.peer_unreachable"]]
    assert doc["first_failure"]["node"] == "node2"
    # alone, the waiting node's log still says what it saw
    assert named(core.diagnose(logs[:1], node="node1")) == [("rendezvous_timeout", "node1")]


def test_two_real_causes_on_two_nodes_are_both_named():
    doc = core.diagnose([("a.log", read(PUBLIC / "nccl-shm-fallocate-horovod.log")),
                         ("b.log", read(PUBLIC / "nccl-duplicate-gpu-mpirun-tags.log"))])
    assert named(doc) == [("shm", "gpu2-ru7"), ("duplicate_gpu", "smc-gpu-03")]
    # no time on either: the first in the order given is the first failure, the other a fault of its own
    assert [c["data"]["role"] for c in doc["causes"]] == ["root", "cause"]
    assert doc["summary"] == {"files": 2, "causes": 2, "consequences": 0, "nodes": ["gpu2-ru7", "smc-gpu-03"]}


def test_one_cause_on_one_node_is_one_record_with_every_line():
    doc = core.diagnose([("x", read(PUBLIC / "nccl-ibv-create-qp.log"))])
    (c,) = doc["causes"]
    assert c["data"]["lines"] == [4, 14, 16]


def test_the_same_cause_in_two_files_of_one_node_is_one_record():
    text = read(PUBLIC / "nccl-shm-fallocate-horovod.log")
    doc = core.diagnose([("a.log", text), ("b.log", text)])
    (c,) = doc["causes"]
    assert c["data"]["files"] == ["a.log", "b.log"]


def test_two_unrelated_files_never_merge_into_one_record():
    # the same cause, no node named in either log: one record per log
    text = read(PUBLIC / "nccl-watchdog-blocking-wait.log")
    doc = core.diagnose([("job1.log", text), ("job2.log", text)])
    assert [(c["data"]["file"], c.get("node")) for c in doc["causes"] + doc["consequences"]] == \
        [("job1.log", None), ("job2.log", None)]


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
    assert time.monotonic() - started < 5, len(text)


# --------------------------------------------------------------------------- the smoke test and node_runtime use it
def test_the_smoke_test_and_node_runtime_read_the_same_mapping():
    from ansible_collections.provision.cluster.plugins.module_utils.allreduce import allreduce_smoke

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


# --------------------------------------------------------------------------- the engine: words, bounds, streams
def fixture_lines():
    for path in sorted(helpers.FIXTURES.rglob("*")):
        if path.is_file() and path.suffix in (".log", ".txt", ".json", ".out"):
            yield from (dg.clean(line) for line in read(path).replace("\r", "\n").split("\n"))


def test_every_match_holds_one_of_the_words_its_lines_are_found_by():
    """A pattern is only tried on the lines that hold one of its literal words: no match may lack them."""
    lines = [line for line in fixture_lines() if line.strip()]
    assert len(lines) > 3000
    rxs = [c.rx for c in dg.CAUSES] + [rx for c in dg.CAUSES for rx in c.requires + c.unless] + \
          [rx for c in dg.CAUSES for rx in c.context.values()] + list(dg._EXITS) + [dg._TABLE_EXIT]
    matched = 0
    for rx in rxs:
        for line in lines:
            if rx.search(line):
                matched += 1
                assert any(w in line for w in rx.words), (rx.regex.pattern, line)
    assert matched > 300
    for (word, icase), anchor in zip(dg.WORDS, dg.ANCHORS):
        assert not icase and anchor in word and len(anchor) >= min(4, len(word))


def test_a_pattern_without_a_literal_word_is_refused():
    with pytest.raises(ValueError):
        dg.keywords(r"\d+ (?:ab|cd)")
    assert dg.keywords(r"Duplicate GPU detected : rank (\d+)") == (("Duplicate GPU detected : rank ",), False)
    assert dg.keywords(r"EADDRINUSE|[Aa]ddress already in use") == (("EADDRINUSE", "ddress already in use"), False)


@pytest.mark.parametrize("cause", dg.CAUSES, ids=lambda c: c.cause)
def test_every_pattern_runs_in_bounded_time_on_a_hostile_line(cause):
    """16 KiB of the pattern's own words, digits, brackets and spaces: a pattern with unbounded repetition after
    a word would take seconds here (the old ".*" patterns took 21 s on a 120 KB line)."""
    words = " ".join(cause.rx.words)
    line = ((words + " 1234567890 [a:b] (x, y) " * 3) * 1000)[:dg.MAX_SEGMENT]
    started = time.monotonic()
    for _i in range(3):
        cause.regex.search(line)
        for rx in list(cause.context.values()) + cause.requires + cause.unless:
            rx.search(line)
    assert time.monotonic() - started < 0.5, cause.cause


def test_a_one_megabyte_line_is_cut_and_read_in_well_under_a_second():
    error = read(PUBLIC / "nccl-duplicate-gpu-slurm.log").split("\n")[0]
    text = error + " " + ("x" * (1 << 20)) + "\n" + "after the long line\n" + error + "\n"
    started = time.monotonic()
    doc = core.diagnose([("long.log", text)])
    assert time.monotonic() - started < 1.0
    (c,) = doc["causes"]
    assert c["data"]["lines"] == [1, 3] and doc["files"][0]["long_lines"] == 1 and doc["files"][0]["lines"] == 3
    # what is past the first 16 KiB of a line is not read
    doc = core.diagnose([("late.log", "x" * (20 << 10) + " " + error + "\n")])
    assert doc["causes"] == []
    # the lines that took the previous implementation 22 s and 19 s (a ".*" after each "NET/IB", "Timed out")
    for unit in ("NET/IB ", "Timed out "):
        started = time.monotonic()
        core.diagnose([("x", unit * (120000 // len(unit)))])
        assert time.monotonic() - started < 0.5, unit


def test_a_progress_bar_redrawn_with_cr_ends_a_line_where_the_terminal_shows_one():
    bar = "".join("\rEpoch 0: %3d%%|%s| %d/1000" % (p, "█" * (p // 5), p * 10) for p in range(100)) * 40
    text = "step 1\n" + bar + "\r" + read(PUBLIC / "nccl-watchdog-basicsr.log").split("\n")[0] + "\nstep 2\n"
    assert len(bar) > dg.MAX_SEGMENT  # a line of 16 KiB+ (each \r segment is short)
    doc = core.diagnose([("bar.log", text)])
    (c,) = doc["causes"]
    assert c["data"]["cause"] == "nccl_timeout" and c["data"]["line"] == 2 and c["data"]["rank"] == "1"
    assert c["data"]["evidence"].startswith("[rank1]:[E626 06:24:44")


def test_escape_sequences_and_control_characters_never_reach_the_evidence():
    line = read(PUBLIC / "nccl-duplicate-gpu-slurm.log").split("\n")[0]
    colored = "\x1b[31m" + line.replace("NCCL WARN", "NCCL \x1b[1mWARN\x1b[0m") + "\x1b[0m\x07\x1b]0;title\x07"
    doc = core.diagnose([("color.log", colored + "\n")])
    (c,) = doc["causes"]
    assert c["data"]["evidence"] == line and "\x1b" not in json.dumps(doc) and "\x07" not in json.dumps(doc)


def test_memory_stays_bounded_whatever_the_input():
    noise = ("qgpu2018:59522:59993 [0] NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7\n" * 2000).encode()
    scanner = dg.Scanner("big.log")
    for _i in range(120):  # 20 MB
        scanner.feed(noise)
        assert len(scanner._buf) <= dg.LOOKBACK + len(noise) + dg.LOOKAHEAD
        assert scanner._tail_bytes <= dg.TAIL + len(noise)
    one_line = b"x" * (1 << 20)
    for _i in range(20):  # a 20 MB line with no newline at all
        scanner.feed(one_line)
        assert len(scanner._buf) <= dg.LOOKBACK + dg.MAX_SEGMENT + dg.LOOKAHEAD + 2
    scanner.close()
    assert scanner.long_lines == 1 and scanner.events == []


# --------------------------------------------------------------------------- many logs: the first failure
def test_the_first_failure_across_two_nodes_logs_is_the_killed_rank_and_the_reset_a_consequence():
    for order in (["node0.log", "node1.log"], ["node1.log", "node0.log"]):
        doc = core.diagnose_paths([str(LOCAL / "kill-2node" / name) for name in order])
        (root,) = doc["causes"]
        assert (root["data"]["cause"], root["node"], root["data"]["role"], root["data"]["rank"]) == \
            ("worker_killed", "localhost", "root", "1")
        assert root["data"]["file"].endswith("node1.log") and root["data"]["time"] == "11-27 08:28:33.559"
        (after,) = doc["consequences"]
        assert (after["data"]["cause"], after["data"]["rank"], after["data"]["role"]) == ("peer_lost", "0", "consequence")
        assert "a consequence of the first failure: worker_killed on localhost" in after["detail"]
        assert doc["first_failure"] == {"check": "diagnose.worker_killed", "cause": "worker_killed", "node": "localhost",
                                        "file": root["data"]["file"], "line": 10, "time": "11-27 08:28:33.559",
                                        "rank": "1"}
        assert doc["unknown_error_lines"] == []  # the first failure is known: the reset rank's traceback is noise


def test_a_directory_of_per_rank_logs_is_read_whole():
    doc = core.diagnose_paths([str(LOCAL / "kill-logdir")])
    run = next((LOCAL / "kill-logdir" / "ranks").iterdir()).name
    assert [f["path"].split("kill-logdir/")[1] for f in doc["files"]] == \
        ["torchrun.log"] + [f"ranks/{run}/attempt_0/{r}/{s}.log" for r in (0, 1) for s in ("stderr", "stdout")]
    assert [(c["data"]["cause"], c["data"]["role"], c["data"]["rank"]) for c in doc["causes"] + doc["consequences"]] == \
        [("worker_killed", "root", "1"), ("peer_lost", "consequence", "0")]


def test_one_stream_with_node_prefixes_is_split_per_node_as_provision_launch_prints_it():
    # provision launch's own output: "[node] line", the nodes' lines interleaved as they arrived
    lines = {n: read(LOCAL / "kill-2node" / f"{n}.log").rstrip("\n").split("\n") for n in ("node0", "node1")}
    merged = []
    for i in range(max(len(v) for v in lines.values())):
        for n in ("node0", "node1"):
            if i < len(lines[n]):
                merged.append("[%s] %s" % (n, lines[n][i]))
    doc = core.diagnose([("launch.out", "\n".join(merged) + "\n")])
    assert [(c["data"]["cause"], c["node"], c["data"]["role"], c["data"]["rank"])
            for c in doc["causes"] + doc["consequences"]] == \
        [("worker_killed", "node1", "root", "1"), ("peer_lost", "node0", "consequence", "0")]
    # srun --label and mpirun --tag-output streams: the rank (task) of each record is kept
    doc = core.diagnose([("x", read(PUBLIC / "nccl-duplicate-gpu-mpirun-tags.log"))])
    assert doc["causes"][0]["data"]["rank"] == "2"
    doc = core.diagnose([("x", read(PUBLIC / "nccl-duplicate-gpu-srun-label.log"))])
    assert doc["causes"][0]["data"]["task"] == "3"


def test_time_decides_the_first_failure_when_every_event_has_one():
    shm = read(PUBLIC / "nccl-shm-fallocate-horovod.log").split("\n")
    dup = read(PUBLIC / "nccl-duplicate-gpu-slurm.log").split("\n")
    late = "\n".join("[2026-01-01 10:00:05] " + line for line in shm if line) + "\n"
    early = "\n".join("[2026-01-01 10:00:01] " + line for line in dup if line) + "\n"
    doc = core.diagnose([("a.log", late), ("b.log", early)])
    assert [(c["data"]["cause"], c["data"]["role"]) for c in doc["causes"]] == [("duplicate_gpu", "root"), ("shm", "cause")]
    # without times the order given decides among faults of the same tier, and a hard fault comes before a hang
    doc = core.diagnose([("a.log", read(PUBLIC / "nccl-watchdog-basicsr.log")),
                         ("b.log", read(PUBLIC / "gpu-ecc-cuda-runtime-error.log"))])
    assert [(c["data"]["cause"], c["data"]["role"]) for c in doc["causes"] + doc["consequences"]] == \
        [("gpu_fault", "root"), ("nccl_timeout", "consequence")]


def test_nccl_system_errors_are_named_by_the_warn_line_around_them():
    doc = core.diagnose([("x", read(PUBLIC / "nccl-system-error-graph-file.log"))])
    assert "XML Import Channel : dev 1 not found" in doc["causes"][0]["detail"]
    assert "NCCL_GRAPH_FILE" in doc["causes"][0]["fix"]
    doc = core.diagnose([("x", read(PUBLIC / "nccl-system-error-no-warn.log"))])
    assert "no NCCL WARN line that says why" in doc["causes"][0]["detail"]
    assert "NCCL_DEBUG=INFO" in doc["causes"][0]["fix"]
    # the WARN names a fault diagnose knows: that one is named, the system error it explains is not
    for name, cause in (("nccl-system-error-no-ip-interface.log", "no_interface"),
                        ("nccl-system-error-connect-refused.log", "nccl_connect_refused")):
        doc = core.diagnose([("x", read(PUBLIC / name))])
        assert [c["data"]["cause"] for c in doc["causes"] + doc["consequences"]] == [cause]
    # a peer that closed the connection: the system error is a consequence
    text = ("h1:1:2 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer h2<57557>\n"
            "RuntimeError: NCCL error: unhandled system error, NCCL version 2.21.5\n")
    doc = core.diagnose([("x", text)])
    assert {c["data"]["cause"]: c["data"]["symptom"] for c in doc["causes"]} == {"nccl_system_error": True,
                                                                               "peer_lost": True}


def test_a_fix_names_the_verify_check_that_confirms_it():
    doc = core.diagnose([("x", read(PUBLIC / "gpu-xid79-nvidia-smi-unknown.log"))])
    c = doc["causes"][0]
    assert c["data"]["verify"] == "provision verify -l node1 --check gpu_health"
    assert "provision verify -l NODE --check gpu_health" in c["fix"]
    doc = core.diagnose([("x", read(PUBLIC / "nccl-watchdog-basicsr.log"))])
    assert doc["causes"][0]["data"]["verify"] == "provision verify --smoke"
    for cause in ("nccl_socket_fallback", "name_unresolved", "gpu_fault", "shm", "no_interface"):
        assert dg.BY_ID[cause].verify


def test_a_master_addr_that_does_not_resolve_is_named_as_such():
    text = ("MASTER_ADDR=trainer-0\n[W socket.cpp:558] [c10d] The IPv4 network addresses of (trainer-0, 29500) "
            "cannot be retrieved (gai error: -2 - Name or service not known).\n")
    (c,) = core.diagnose([("x", text)])["causes"]
    assert c["data"]["cause"] == "name_unresolved" and ": it is MASTER_ADDR" in c["detail"]
    # an IPv6-only lookup failure is a warning torch goes on from: not a cause alone
    text = "[W socket.cpp:601] [c10d] The IPv6 network addresses of (localhost, 51595) cannot be retrieved " \
           "(gai error: -2 - Name or service not known).\n"
    assert core.diagnose([("x", text)])["causes"] == []


@pytest.mark.parametrize("name", ["gloo-master-unreachable.node2.log", "gloo-master-unreachable-no-dns.node2.log"])
def test_the_unreachable_master_is_the_address_torch_was_given_not_a_garbled_one(name):
    # with no resolver torch prints its per-address attempts from an unfilled buffer; its retry line is right
    found = dg.classify_log(read(SMOKE / name))
    master = "10.90.120.18" if "no-dns" in name else "10.90.203.18"
    assert found["cause"] == "peer_unreachable"
    assert found["detail"] == f"cannot reach the master {master}:29500 (Network is unreachable)"
