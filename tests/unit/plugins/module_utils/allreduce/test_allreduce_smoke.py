"""Unit tests of the all-reduce smoke logic on real captured outputs.

Fixtures: tests/fixtures/h100-node (NCCL logs from an H100 VM, see its README and
failures/README.md) and tests/fixtures/allreduce_smoke (gloo logs captured from the lab, see
the README there).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

import helpers
from helpers import REPO, need_module
from ansible_collections.provision.cluster.plugins.module_utils.allreduce import allreduce_smoke as ar
from ansible_collections.provision.cluster.plugins.module_utils.allreduce import allreduce_worker as worker
from ansible_collections.provision.cluster.plugins.module_utils.common import sizes
from ansible_collections.provision.cluster.plugins.modules import allreduce_smoke as mod

H100 = helpers.FIXTURES / "h100-node"
FAIL = H100 / "failures"
OURS = REPO / "tests" / "fixtures" / "allreduce_smoke"


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


# --------------------------------------------------------------------------- sizes and math
@pytest.mark.parametrize("value,expected", [("64M", 64 << 20), ("64MiB", 64 << 20), ("4k", 4096),
                                            (4096, 4096), ("1G", 1 << 30), ("512", 512)])
def test_parse_size(value, expected):
    assert sizes.parse_size(value) == expected


def test_parse_size_rejects_garbage():
    with pytest.raises(ValueError, match="not a size"):
        sizes.parse_size("64 parsecs")


def test_bandwidth_matches_nccl_tests_definition():
    # PERFORMANCE.md: busbw = algbw * 2(n-1)/n; for 8 ranks the factor is 1.75
    algbw, busbw = ar.bandwidth(1 << 30, 0.5, 8)
    assert algbw == pytest.approx((1 << 30) / 0.5 / 1e9)
    assert busbw == pytest.approx(algbw * 1.75)
    assert ar.bandwidth(100, 1.0, 2)[1] == ar.bandwidth(100, 1.0, 2)[0]   # n=2: busbw == algbw
    assert ar.bandwidth(100, 1.0, 1)[1] == 0.0                            # one rank moves nothing
    assert ar.bandwidth(100, 0.0, 2) == (0.0, 0.0)


def test_bandwidth_reproduces_the_h100_gloo_line():
    # gloo-2rank-allreduce.log: size=268435456 B time=116.093 ms algbw=2.31 GB/s busbw=2.31 GB/s
    line = [ln for ln in text(H100 / "gloo-2rank-allreduce.log").splitlines() if ln.startswith("rank 0: size=")][0]
    nbytes = int(line.split("size=")[1].split()[0])
    ms = float(line.split("time=")[1].split()[0])
    algbw, busbw = ar.bandwidth(nbytes, ms / 1e3, 2)
    assert f"{algbw:.2f}" == line.split("algbw=")[1].split()[0]
    assert f"{busbw:.2f}" == line.split("busbw=")[1].split()[0]


def test_expected_value_is_exact_sum_of_rank_values():
    for world in (1, 2, 3, 8):
        for step in range(3):
            assert worker.expected_value(step, world) == sum(worker.rank_value(step, r) for r in range(world))


def test_the_workers_check_on_tensors_is_the_sum_of_what_the_ranks_put_in():
    """The very expressions the rank process runs, on the tensors it builds (torch on the CPU)."""
    torch = need_module("torch", "the worker's tensor code runs on torch")
    world = 5
    pattern = torch.arange(1000, dtype=torch.int64) % 3
    total = sum(worker.rank_value(pattern, r).to(torch.float32) for r in range(world))
    assert torch.equal(total, worker.expected_value(pattern, world).to(torch.float32))
    assert not torch.equal(total, worker.expected_value(pattern, world - 1).to(torch.float32))


# --------------------------------------------------------------------------- NCCL log parser
def test_parse_nccl_socket_log():
    info = ar.parse_nccl_log(text(H100 / "nccl-debug-info-1rank-socket.log"))
    assert info["version"] == "2.28.9"
    assert info["network"] == "Socket"
    assert info["net_interfaces"] == ["eth0"]
    assert info["bootstrap_interface"] == "eth0"
    assert info["ib_found"] is False
    assert info["ranks"] == 1
    assert info["warnings"] == []


def test_ib_present_but_unused_is_flagged():
    info = ar.parse_nccl_log(text(H100 / "nccl-debug-info-1rank-socket.log"))
    assert ar.nccl_findings(info, []) == []   # no IB on that VM: nothing to say
    found = ar.nccl_findings(info, ["mlx5_0", "mlx5_1"])
    assert [f["check"] for f in found] == ["nccl_transport"]
    assert "mlx5_0, mlx5_1 present but NCCL used NET/Socket (eth0)" in found[0]["detail"]
    assert "NCCL_IB_HCA" in found[0]["fix"]


def test_requested_hca_missing_is_a_silent_fallback_warning():
    info = ar.parse_nccl_log(text(FAIL / "nccl-ib-hca-missing.log"))
    assert info["env"]["NCCL_IB_HCA"] == "mlx5_9"
    assert info["network"] == "Socket"
    found = ar.nccl_findings(info, [])
    assert [f["check"] for f in found] == ["nccl_ib_hca"]
    assert "NCCL_IB_HCA=mlx5_9" in found[0]["detail"] and "fell back to Socket" in found[0]["detail"]


def test_duplicate_gpu_log_parses_warnings():
    info = ar.parse_nccl_log(text(H100 / "nccl-duplicate-gpu-error.log"))
    assert any("Duplicate GPU detected" in w for w in info["warnings"])
    assert info["network"] == "Socket"


# --------------------------------------------------------------------------- failure classifier
@pytest.mark.parametrize("path,cause,words", [
    (H100 / "nccl-duplicate-gpu-error.log", "duplicate_gpu", ["rank 0 and rank 1", "CUDA device 60"]),
    (FAIL / "nccl-bogus-ifname.log", "no_interface", ["NCCL_SOCKET_IFNAME=bogus0"]),
    (FAIL / "torchrun-port-held-static.log", "port_held", ["master port"]),
    (FAIL / "torchrun-port-held-c10d.log", "rendezvous_connection", ["foreign listener"]),
    (FAIL / "torchrun-c10d-endpoint-absent.log", "rendezvous_timeout", ["not every rank joined"]),
    (FAIL / "torchrun-c10d-peer-never-joins.log", "rendezvous_timeout", ["not every rank joined"]),
    (OURS / "gloo-bogus-ifname.node1.json", "no_interface", ["bogus0"]),
    (OURS / "gloo-port-held.node1.json", "port_held", ["master port"]),
    (OURS / "gloo-master-unreachable.node2.json", "peer_unreachable", ["10.90.203.18:29500", "Network is unreachable"]),
    (OURS / "gloo-master-unreachable.node1.json", "rendezvous_timeout", ["not every rank joined"]),
    (OURS / "torch-shm-too-small.log", "shm", ["/dev/shm"]),
])
def test_classify_real_failure_logs(path, cause, words):
    found = ar.classify_log(text(path))
    assert found is not None, path.name
    assert found["cause"] == cause, (path.name, found)
    for word in words:
        assert word in found["detail"], (word, found)
    assert found["fix"]


def test_classify_fixes_name_the_remedy():
    assert "--shm-size" in ar.classify_log(text(OURS / "torch-shm-too-small.log"))["fix"]
    assert "--ipc=host" in ar.classify_log(text(OURS / "torch-shm-too-small.log"))["fix"]
    assert "NCCL_SOCKET_IFNAME" in ar.classify_log(text(FAIL / "nccl-bogus-ifname.log"))["fix"]
    assert "set_device" in ar.classify_log(text(H100 / "nccl-duplicate-gpu-error.log"))["fix"]


def test_classify_nccl_memory_messages_by_their_source_format():
    # No RDMA or GPU here to capture these: the strings are NCCL's own format strings
    # (src/misc/shmutils.cc, src/transport/net_ib.cc), not captured output.
    shm = ar.classify_log("NCCL WARN Error while creating shared memory segment /dev/shm/nccl-xyz (size 9637888)")
    assert shm["cause"] == "shm"
    reg = ar.classify_log("NCCL WARN NET/IB : ibv_reg_mr failed: Cannot allocate memory")
    assert reg["cause"] == "memlock" and "memlock" in reg["fix"] and "ulimit -l" in reg["fix"]


def test_master_absent_prints_nothing_so_only_the_timeout_speaks():
    assert ar.classify_log(text(FAIL / "torchrun-static-master-absent.log")) is None
    problems = ar.diagnose([{"host": "node2", "status": {"state": "timeout", "timeout": 120},
                             "ranks": [{"phase": "rendezvous"}], "log": text(FAIL / "torchrun-static-master-absent.log")}],
                           "10.0.0.1", 29500)
    assert [p["check"] for p in problems] == ["timeout"]
    assert "node2: no result within the outer timeout of 120 s (stuck in rendezvous)" in problems[0]["detail"]


# --------------------------------------------------------------------------- diagnose / summarize
def _host(name: str, stem: str) -> dict:
    return {"host": name, "status": {"state": "failed", "exit_codes": [1]},
            "ranks": [json.loads(text(OURS / f"{stem}.json"))], "log": text(OURS / f"{stem}.log")}


def test_diagnose_unreachable_master_names_address_and_host():
    hosts = [_host("node1", "gloo-master-unreachable.node1"), _host("node2", "gloo-master-unreachable.node2")]
    problems = ar.diagnose(hosts, "10.90.203.18", 29500)
    assert [p["check"] for p in problems] == ["peer_unreachable"]   # node1's wait is only a consequence
    assert problems[0]["detail"] == "node2: cannot reach the master 10.90.203.18:29500: no route (network unreachable)"
    assert "cluster_master_addr" in problems[0]["fix"]


def test_diagnose_port_held_names_the_holder():
    hosts = [_host("node1", "gloo-port-held.node1"),
             {"host": "node2", "status": {"state": "timeout", "timeout": 40},
              "ranks": [json.loads(text(OURS / "gloo-port-held.node2.json"))], "log": ""}]
    problems = ar.diagnose(hosts, "10.89.203.11", 29500, holder="pid 442 (python3 -c ...)")
    assert problems[0]["check"] == "port_held"
    assert problems[0]["detail"] == "node1: master port 29500 is in use (held by pid 442 (python3 -c ...))"
    assert len(problems) == 1


def test_diagnose_version_mismatch_and_wrong_sum():
    peers = [{"host": "node1", "versions": {"torch": "2.13.0+cpu"}}, {"host": "node2", "versions": {"torch": "2.11.0"}}]
    hosts = [{"host": "node1", "status": {"state": "failed"},
              "ranks": [{"rank": 0, "peers": peers, "mismatches": 3,
                         "sum_errors": [{"index": 5, "got": 4.0, "expected": 6.0}]}], "log": ""}]
    checks = {p["check"]: p for p in ar.diagnose(hosts, "a", 1)}
    assert "torch 2.11.0 on node2; torch 2.13.0+cpu on node1" in checks["version_mismatch"]["detail"]
    assert "index 5: got 4.0, expected 6.0" in checks["wrong_sum"]["detail"]


def _ok_host(name, rank, busbw_time=0.1, tcp_gbps=1.0):
    sweep = [{"bytes": 1 << 20, "time_s": 0.01}, {"bytes": 64 << 20, "time_s": busbw_time}]
    return {"host": name, "status": {"state": "ok", "backend": "gloo", "env_used": {"GLOO_SOCKET_IFNAME": "eth1"}},
            "ranks": [{"rank": rank, "world_size": 2, "correct": True, "sweep": sweep,
                       "tcp": [{"src": "node1", "dst": "node2", "gbps": tcp_gbps},
                               {"src": "node2", "dst": "node1", "gbps": tcp_gbps * 1.2}]}]}


def test_summarize_table_ratio_and_thresholds():
    hosts = [_ok_host("node1", 0), _ok_host("node2", 1)]
    result = ar.summarize(hosts, master_addr="10.0.0.1", master_port=29500)
    assert result["status"] == "pass" and result["correct"]
    busbw = (64 << 20) / 0.1 / 1e9
    assert result["busbw_gbps"] == pytest.approx(busbw, abs=1e-3)
    assert result["tcp_gbps"] == 1.0                      # the slower direction
    assert result["ratio"] == pytest.approx(busbw / 1.0, abs=1e-3)
    lines = ar.table_lines(result)
    assert "64 MiB" in lines[-3] or any("64 MiB" in ln for ln in lines)
    assert any(ln.startswith("busbw/TCP ratio: 0.67") for ln in lines)
    slow = ar.summarize(hosts, master_addr="10.0.0.1", master_port=29500, min_ratio=0.7, min_busbw=1.0)
    assert slow["status"] == "fail"
    assert [f["check"] for f in slow["failures"]] == ["busbw", "ratio"]
    assert "below allreduce_smoke_min_ratio 0.7" in slow["failures"][1]["detail"]


def test_summarize_reads_busbw_against_the_ring_probe_too():
    hosts = [_ok_host("node1", 0), _ok_host("node2", 1)]
    hosts[0]["ranks"][0]["tcp_ring"] = [{"src": "node2", "dst": "node1", "gbps": 0.8},
                                        {"src": "node1", "dst": "node2", "gbps": 0.6}]
    result = ar.summarize(hosts, master_addr="10.0.0.1", master_port=29500)
    busbw = (64 << 20) / 0.1 / 1e9
    assert result["tcp_ring_gbps"] == 0.6                 # the slowest link while all are busy
    assert result["ratio_ring"] == pytest.approx(busbw / 0.6, abs=1e-3)
    lines = ar.table_lines(result)
    assert "TCP ring (all links at once) node1 -> node2: 0.600 GB/s" in lines
    assert any(ln.startswith("busbw/TCP ratio: 0.67") and "busbw/TCP ring: 1.12" in ln for ln in lines)
    assert any(ln.startswith("note: with every link busy at once TCP carries 0.600 GB/s per link, 0.60 of one-way")
               for ln in lines)
    # no ring probe (older worker, or allreduce_smoke_tcp_ring_probe: false): nothing about it
    plain = ar.summarize([_ok_host("node1", 0), _ok_host("node2", 1)], master_addr="a", master_port=1)
    assert plain["ratio_ring"] is None and not any("ring" in ln for ln in ar.table_lines(plain))


def test_ring_probe_sends_both_ways_at_once_on_loopback():
    """Two ranks (threads), each with its own TCPStore client as the workers have: both links carry
    data at the same time and every rank gets both rates (a client shared between the probe's threads
    deadlocked in get/set: this runs on a real TCPStore for that reason)."""
    dist_c10d = need_module("torch.distributed", "the c10d store check runs on torch")
    timeout = datetime.timedelta(seconds=30)
    master = dist_c10d.TCPStore("127.0.0.1", 0, 2, True, timeout=timeout, wait_for_workers=False)
    client = dist_c10d.TCPStore("127.0.0.1", master.port, 2, False, timeout=timeout)
    barrier = threading.Barrier(2)
    dist = types.SimpleNamespace(barrier=lambda: barrier.wait(timeout=30))
    peers = [{"local_rank": 0, "node_rank": i, "rank": i, "host": "n%d" % i} for i in range(2)]
    out = {}
    threads = [threading.Thread(target=lambda r=r, st=st: out.update({r: worker.ring_probe(st, r, peers, 0.3, dist,
                                                                                             "127.0.0.1")}))
               for r, st in ((0, master), (1, client))]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert time.monotonic() - start < 10
    assert out[0] == out[1]
    assert [(link["src"], link["dst"]) for link in out[0]] == [("n1", "n0"), ("n0", "n1")]
    assert all(link["gbps"] > 0 and link["bytes"] > 0 and "error" not in link for link in out[0])


def test_the_ring_probe_lets_in_only_the_previous_nodes_address():
    """issue 31 item 10: the receiving side took whoever connected first. A stranger (here from 127.0.0.2)
    that connects first is turned away and named; the peer's own connection is the one measured."""
    srv = worker._bind("127.0.0.1")
    srv.listen(8)
    srv.settimeout(20)
    port = srv.getsockname()[1]
    got = {}
    receiver = threading.Thread(target=lambda: got.update(worker._receive(srv, 0.2, sender="127.0.0.1")))
    receiver.start()
    import socket

    stranger = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0))
    stranger.sendall(b"x" * 100)
    time.sleep(0.2)
    peer = socket.create_connection(("127.0.0.1", port))
    peer.sendall(b"y" * (4 << 20))
    peer.close()
    receiver.join(30)
    stranger.close()
    assert got["refused"] == ["127.0.0.2"] and got["bytes"] > 0, got
    assert worker.peer_matches("::ffff:10.0.0.2", "10.0.0.2") and not worker.peer_matches("10.0.0.3", "10.0.0.2")
    assert worker.peer_matches("10.0.0.9", None) and worker.peer_matches("127.0.0.1", "localhost")


def test_the_rendezvous_store_listens_on_the_cluster_address_only():
    """issue 31 item 10: the master's TCPStore listened on every interface, unauthenticated. Its socket is
    bound to cluster_master_addr when this node holds it, else to the node's cluster address."""
    import errno
    import socket

    sock, bound = worker.store_socket(["192.0.2.77", "127.0.0.1"], 0)   # a VIP elsewhere, then our address
    try:
        assert bound == "127.0.0.1" and sock.getsockname()[0] == "127.0.0.1"
        with pytest.raises(OSError) as held:
            worker.store_socket(["127.0.0.1"], sock.getsockname()[1])
        assert held.value.errno == errno.EADDRINUSE and "Address already in use" in worker.one_line(held.value)
    finally:
        sock.close()
    with pytest.raises(OSError, match="cannot bind the rendezvous store to 192.0.2.77"):
        worker.store_socket(["192.0.2.77"], 0)
    six = socket.has_ipv6 and worker.interface_of("::1") == "lo"
    if six:
        sock6, bound6 = worker.store_socket(["::1"], 0)
        assert bound6 == "::1" and sock6.family == socket.AF_INET6
        sock6.close()


def test_two_ranks_meet_on_a_store_bound_to_the_cluster_address(tmp_path):
    """The worker itself, two ranks (two nodes of one process each) on loopback with gloo: the master's
    store is handed the bound socket (TCPStore master_listen_fd), both ranks get the exact sum, and the
    ring probe measures both links."""
    pytest.importorskip("torch.distributed")
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    procs = []
    for node in (0, 1):
        run_dir = tmp_path / f"n{node}"
        run_dir.mkdir()
        cfg = {"run_dir": str(run_dir), "run_id": "t", "master_addr": "127.0.0.1", "master_port": port,
               "node_rank": node, "nnodes": 2, "address": "127.0.0.1", "sizes": [1 << 16], "warmup": 1, "iters": 2,
               "tcp_probe_seconds": 0.2, "rendezvous_timeout": 60, "collective_timeout": 60}
        (run_dir / "config.json").write_text(json.dumps(cfg))
        procs.append(subprocess.Popen([sys.executable, worker.__file__, "rank", str(run_dir / "config.json"), "0",
                                       "gloo", "1"], cwd=run_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      env={"PATH": "/usr/bin:/bin", "GLOO_SOCKET_IFNAME": "lo", "HOME": str(tmp_path)}))
    try:
        outs = [p.communicate(timeout=240)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    ranks = [json.loads((tmp_path / f"n{n}" / "rank0.json").read_text()) for n in (0, 1)]
    assert all(r["ok"] for r in ranks), (ranks, outs)
    assert ranks[0]["store_bound"] == "127.0.0.1" and "store_bound" not in ranks[1]
    assert len(ranks[0]["tcp_ring"]) == 2 and all(link["gbps"] > 0 for link in ranks[0]["tcp_ring"])


def test_summarize_without_results_fails():
    result = ar.summarize([{"host": "node1", "missing": "no result"}], master_addr="a", master_port=1)
    assert result["status"] == "fail" and result["failures"][0]["check"] == "worker"


# --------------------------------------------------------------------------- interfaces
def test_interface_of_loopback():
    assert worker.interface_of("127.0.0.1") == "lo"
    assert worker.interface_of("192.0.2.123") is None


def test_interface_of_an_ipv6_address():
    """issue 31 item 11: the worker was AF_INET only. A lab node's /proc/net/if_inet6 (tests/fixtures/netenv)."""
    table = str(helpers.FIXTURES / "netenv" / "lab-full" / "node1" / "proc-net-if_inet6.txt")
    assert worker.interface_of("fe80::a884:ff:fea4:7357", proc_net=table) == "eth1"
    assert worker.interface_of("::1", proc_net=table) == "lo"
    assert worker.interface_of("fd00::3", proc_net=table) is None
    assert worker.interface_of("not-an-address") is None


def test_worker_one_line_keeps_the_message():
    exc = RuntimeError("[enforce fail at device.cc:84] ifa != nullptr. Unable to find address for: bogus0\n"
                       "Exception raised from x\nframe #0: y")
    assert worker.one_line(exc).startswith("RuntimeError: [enforce fail")
    assert "bogus0" in worker.one_line(exc)


# --------------------------------------------------------------------------- the module's process handling
def test_kill_group_leaves_no_process_of_the_run():
    # a supervisor-like leader in its own session with a child that ignores SIGTERM
    leader = subprocess.Popen([sys.executable, "-c",
                               "import signal,subprocess,sys,time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
                               "subprocess.Popen([sys.executable,'-c','import signal,time;"
                               "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); time.sleep(60)"],
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(mod._group_pids(leader.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(mod._group_pids(leader.pid)) == 2
        killed = mod._kill_group(leader.pid)
        leader.wait(timeout=5)
        assert leader.pid in killed and len(killed) == 2
        assert mod._group_pids(leader.pid) == []
    finally:
        if leader.poll() is None:
            leader.kill()


def test_excerpt_keeps_interesting_lines_and_the_tail():
    lines = [f"noise {i}" for i in range(1000)]
    lines[10] = "vm:1:1 [0] NCCL INFO Using network Socket"
    out = mod._excerpt("\n".join(lines)).splitlines()
    assert out[0] == lines[10] and out[-1] == "noise 999" and len(out) == 1 + mod.LOG_KEEP


# --------------------------------------------------------------------------- re-run decision
INPUTS = {"config": {"backend": "auto", "sizes": ["64K", "64M"], "master_port": 29500},
          "python": "/opt/provision/venv/bin/python",
          "nodes": {"node1": {"rank": 0, "address": "10.89.0.11", "versions": {"torch": "2.13.0+cpu"}, "boot_id": "b1"},
                    "node2": {"rank": 1, "address": "10.89.0.12", "versions": {"torch": "2.13.0+cpu"}, "boot_id": "b2"}}}


def _green(inputs=INPUTS, at=1000.0, status="pass"):
    return {"status": status, "fingerprint": ar.fingerprint(inputs), "fingerprint_inputs": inputs, "finished_at": at}


def test_fingerprint_ignores_key_order_but_not_values():
    shuffled = json.loads(json.dumps(INPUTS))
    shuffled["nodes"] = dict(reversed(list(shuffled["nodes"].items())))
    assert ar.fingerprint(shuffled) == ar.fingerprint(INPUTS)
    other = json.loads(json.dumps(INPUTS))
    other["nodes"]["node2"]["versions"]["torch"] = "2.12.0"
    assert ar.fingerprint(other) != ar.fingerprint(INPUTS)


def test_unchanged_green_run_is_reused_within_max_age():
    reuse, reason = ar.reuse_decision(_green(), INPUTS, now=1000.0 + 600, max_age=3600)
    assert reuse and "10 min ago" in reason and "allreduce_smoke_rerun=always" in reason
    assert ar.reuse_decision(_green(status="warn"), INPUTS, now=1100.0, max_age=3600)[0]


@pytest.mark.parametrize("last, now, words", [
    (None, 1000.0, "no earlier result"),
    (_green(status="fail"), 1000.0, "did not pass"),
    (_green(), 1000.0 + 7200, "2.0 h old"),
    (_green(), 900.0, "h old"),          # clock went back: do not trust the stamp
])
def test_new_run_when_missing_failed_or_stale(last, now, words):
    reuse, reason = ar.reuse_decision(last, INPUTS, now=now, max_age=3600)
    assert not reuse and words in reason


def test_new_run_names_what_changed():
    changed = json.loads(json.dumps(INPUTS))
    changed["nodes"]["node2"]["versions"]["torch"] = "2.12.0"
    changed["nodes"]["node1"]["boot_id"] = "rebooted"
    changed["config"]["sizes"] = ["64K"]
    reuse, reason = ar.reuse_decision(_green(), changed, now=1001.0, max_age=3600)
    assert not reuse
    assert reason == ("changed since the last green run: config.sizes, nodes.node1.boot_id, "
                      "nodes.node2.versions.torch")


def test_report_stamps_the_result_and_the_filter_reuses_it_until_something_changes(tmp_path):
    from ansible_collections.provision.cluster.plugins.filter.allreduce_smoke import allreduce_smoke_reuse
    path = str(tmp_path / "result.json")
    rep = helpers.run_module("allreduce_smoke", {
        "state": "report", "names": ["node1", "node2"], "hosts": [_ok_host("node1", 0), _ok_host("node2", 1)],
        "master_addr": "10.0.0.1", "master_port": 29500, "path": path, "inputs": INPUTS}, env={"PATH": "/usr/bin:/bin"})
    assert rep["written"] and rep["result"]["fingerprint"] == ar.fingerprint(INPUTS)
    last = rep["ansible_facts"]["allreduce_smoke_result"]          # what the fact cache keeps
    assert json.loads(Path(path).read_text())["fingerprint"] == last["fingerprint"]
    same = allreduce_smoke_reuse(last, INPUTS, reuse=True, max_age=3600)
    assert same["run"] is False and same["result"]["rows"] == rep["result"]["rows"]
    assert same["lines"][-1].startswith("(not run again: nothing it depends on changed")
    assert allreduce_smoke_reuse(last, INPUTS, reuse=False)["run"] is True     # allreduce_smoke_rerun: always
    assert allreduce_smoke_reuse(None, INPUTS, reuse=True)["run"] is True
    changed = json.loads(json.dumps(INPUTS))
    changed["nodes"]["node2"]["address"] = "10.0.0.9"
    again = allreduce_smoke_reuse(last, changed, reuse=True, max_age=3600)
    assert again["run"] is True and "nodes.node2.address" in again["reason"]
    assert allreduce_smoke_reuse(last, INPUTS, reuse=True, max_age=3600, now=last["finished_at"] + 7200)["run"] is True


def test_ranks_follow_the_inventory_order_after_the_master(tmp_path):
    """The role's rank order must be stable run to run (a set difference is not): it is part of
    what a green run proved, so a re-run must see the same order to reuse it."""
    import os
    (tmp_path / "hosts.ini").write_text("[cluster]\n" + "".join(f"node{i} ansible_connection=local\n" for i in (1, 2, 3, 4, 5, 6, 7, 8)))
    (tmp_path / "play.yml").write_text(
        "- hosts: cluster\n  gather_facts: false\n  vars_files: [" + str(REPO / "roles/allreduce_smoke/vars/main.yml") + "]\n"
        "  vars: {cluster_master: node3}\n  tasks:\n"
        "    - ansible.builtin.include_role: {name: provision.cluster.preflight, tasks_from: plan}\n"
        "      vars: {__preflight_plan_stages: []}\n"
        "    - ansible.builtin.assert:\n        that: __allreduce_smoke_order == ['node3', 'node1', 'node2', 'node4', 'node5', 'node6', 'node7', 'node8']\n"
        "        fail_msg: '{{ __allreduce_smoke_order }}'\n      run_once: true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = str(tmp_path / "facts")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.ini"),
                           str(tmp_path / "play.yml")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_the_smoke_is_started_as_the_cluster_user_never_as_another(tmp_path):
    """issue 31 item 2: run as root for a non-root cluster user, the workers sourced root's ~/.bashrc and
    ran as root; the role runs the module as the cluster user, and the module refuses any other."""
    import pwd

    me = pwd.getpwuid(__import__("os").getuid()).pw_name
    other = "nobody" if me != "nobody" else "root"
    res = helpers.run_module("allreduce_smoke", {"state": "started", "run_id": "run", "run_root": str(tmp_path / "r"),
                                                 "user": other, "config": {"master_addr": "127.0.0.1", "node_rank": 0,
                                                                           "nnodes": 1, "master_port": 29999}})
    assert res.get("failed") and res["msg"].startswith(f"allreduce_smoke runs as the cluster user {other}, not as {me}")
    assert f"source {me}'s ~/.bashrc" in res["msg"] and not (tmp_path / "r").exists()
