# -*- coding: utf-8 -*-
# Copyright: contributors to provision.cluster
# Apache-2.0
"""The all-reduce smoke worker: runs ON the nodes, with only the standard library and torch.

The allreduce_smoke module writes this file's source into a run directory on every node and
starts it there as ``python allreduce_worker.py supervise CONFIG.json`` (through ``bash -c``
with the user's ``~/.bashrc`` sourced, as a non-interactive ssh shell sees it). The module
imports it as module_utils only to ship it; nothing here imports Ansible, and torch is imported
lazily inside the rank processes.

Layout of a run directory (one per run, on every node)::

    config.json      what the module asked for
    supervisor.log   the supervisor's own output (normally empty)
    rank<L>.log      stdout+stderr of local rank L (NCCL_DEBUG output lands here)
    rank<L>.json     what local rank L found: rendezvous, sum check, sweep, TCP probe
    status.json      written last by the supervisor: state, exit codes, elapsed, environment

The supervisor runs in its own session (process group) and kills every rank it started when
the outer deadline passes, so no worker outlives its run holding the port or a GPU.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import struct
import sys
import time

WORKER_NAME = "allreduce_worker.py"
# environment variables the report shows (what the non-interactive shell gave the workers)
ENV_SHOWN = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE",
             "NCCL_DEBUG", "NCCL_NET", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "OMP_NUM_THREADS",
             "CUDA_VISIBLE_DEVICES", "VIRTUAL_ENV")


# --------------------------------------------------------------------------- helpers
def write_json(path, data):
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def one_line(exc):
    """An exception as one line: its type and the last meaningful line of its message."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.startswith("frame #")]
    text = lines[0] if lines else ""
    for ln in lines:
        if "Exception raised from" in ln:
            break
        text = ln if len(text) < 20 else text
    return f"{type(exc).__name__}: {text}"[:400]


def interface_of(address, proc_net="/proc/net/if_inet6"):
    """Name of the local interface that holds `address` (IPv4: SIOCGIFADDR per interface; IPv6: the
    kernel's /proc/net/if_inet6), or None."""
    import ipaddress

    try:
        want = ipaddress.ip_address(str(address).split("%", 1)[0])
    except ValueError:
        return None
    if want.version == 6:
        try:
            with open(proc_net, encoding="ascii") as fh:
                for line in fh:
                    fields = line.split()
                    if len(fields) >= 6 and ipaddress.IPv6Address(bytes.fromhex(fields[0])) == want:
                        return fields[5]
        except (OSError, ValueError):
            return None
        return None
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _unused, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == str(want):
                return name
    return None


def _bind(address, port=0):
    """A TCP socket bound to address:port (any family; address None: every interface), SO_REUSEADDR."""
    family, _unused, _unused2, _unused3, sockaddr = socket.getaddrinfo(
        address or None, port, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(sockaddr)
    except OSError:
        sock.close()
        raise
    return sock


def store_socket(addresses, port):
    """The master's listening socket for the TCPStore, bound to the first of ADDRESSES this node holds
    (cluster_master_addr, then its own cluster address) instead of every interface: the store has no
    authentication, and whoever reaches it can join or disturb the run. -> (socket, address).
    A port in use raises at once (EADDRINUSE: the report names the holder)."""
    last = None
    for address in [a for a in addresses if a]:
        try:
            sock = _bind(address, port)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise
            last = exc  # not an address of this node (a VIP elsewhere): the next one
            continue
        sock.listen(1024)
        return sock, address
    raise OSError(errno.EADDRNOTAVAIL, "cannot bind the rendezvous store to %s on this node: %s"
                  % (" or ".join(a for a in addresses if a), last))


def peer_matches(got, expected):
    """Is the connecting address GOT (from accept) the peer's cluster address EXPECTED (an address or a
    name, resolved here)? None/empty EXPECTED: anyone (a config without addresses)."""
    import ipaddress

    if not expected:
        return True
    try:
        seen = ipaddress.ip_address(str(got).split("%", 1)[0])
    except ValueError:
        return False
    if seen.version == 6 and seen.ipv4_mapped:
        seen = seen.ipv4_mapped
    try:
        wanted = {ipaddress.ip_address(info[4][0].split("%", 1)[0])
                  for info in socket.getaddrinfo(expected, None, 0, socket.SOCK_STREAM)}
    except (OSError, ValueError):
        return False
    return seen in {w.ipv4_mapped if w.version == 6 and w.ipv4_mapped else w for w in wanted}


def reach(host, port, timeout=3.0):
    """Can we open TCP to host:port? 'ok', 'refused', 'unreachable' or 'timeout'."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return "ok"
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    except OSError as exc:
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return "unreachable"
        return f"error: {exc.strerror or exc}"


# --------------------------------------------------------------------------- supervisor
def supervise(cfg_path):
    with open(cfg_path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    run_dir = cfg["run_dir"]
    start = time.monotonic()
    env = dict(os.environ)
    env_seen = {k: os.environ[k] for k in ENV_SHOWN if k in os.environ}
    notes = []
    for key, value in (cfg.get("env") or {}).items():
        env[str(key)] = str(value)
    backend = cfg.get("backend", "auto")
    nproc = int(cfg.get("nproc_per_node") or 0)
    if backend == "auto" or nproc <= 0:
        gpus = _gpu_count(env)
        if backend == "auto":
            backend = "nccl" if gpus > 0 else "gloo"
        if nproc <= 0:
            nproc = max(gpus, 1) if backend == "nccl" else 1
    iface = interface_of(cfg["address"]) if cfg.get("address") else None
    if backend == "gloo":
        if not env.get("GLOO_SOCKET_IFNAME"):
            if iface:
                env["GLOO_SOCKET_IFNAME"] = iface
                notes.append(f"GLOO_SOCKET_IFNAME not set in the non-interactive environment: "
                             f"used {iface} (holds {cfg['address']})")
        devices = int(cfg.get("gloo_devices") or 1)
        names = [n for n in env.get("GLOO_SOCKET_IFNAME", "").split(",") if n]
        if devices > 1 and len(names) == 1:
            env["GLOO_SOCKET_IFNAME"] = ",".join(names * devices)
    else:
        env.setdefault("NCCL_DEBUG", cfg.get("nccl_debug") or "INFO")
        env.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET,ENV")
    env["PYTHONUNBUFFERED"] = "1"
    procs = []
    for local in range(nproc):
        log = open(os.path.join(run_dir, f"rank{local}.log"), "wb")  # noqa: SIM115 (child owns it)
        procs.append(__import__("subprocess").Popen(
            [sys.executable, os.path.abspath(__file__), "rank", cfg_path, str(local), backend, str(nproc)],
            stdin=__import__("subprocess").DEVNULL, stdout=log, stderr=log, env=env, cwd=run_dir))
        log.close()
    deadline = start + float(cfg.get("timeout", 120))
    grace = float(cfg.get("failure_grace", 5))
    first_failure = None
    timed_out = False
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            break
        now = time.monotonic()
        if first_failure is None and any(c not in (None, 0) for c in codes):
            first_failure = now
        if now > deadline or (first_failure is not None and now > first_failure + grace):
            timed_out = now > deadline
            _kill(procs)
            break
        time.sleep(0.1)
    codes = [p.wait() for p in procs]
    write_json(os.path.join(run_dir, "status.json"), {
        "state": "timeout" if timed_out else ("ok" if all(c == 0 for c in codes) else "failed"),
        "exit_codes": codes, "elapsed": round(time.monotonic() - start, 3), "backend": backend,
        "nproc_per_node": nproc, "env": env_seen, "env_used": {k: env[k] for k in ENV_SHOWN if k in env},
        "interface": iface, "notes": notes, "timeout": cfg.get("timeout", 120),
        "infiniband": sorted(os.listdir("/sys/class/infiniband")) if os.path.isdir("/sys/class/infiniband") else [],
    })
    return 0


def _gpu_count(env):
    if env.get("CUDA_VISIBLE_DEVICES") == "":
        return 0
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def _kill(procs):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except OSError:
                    pass
        end = time.monotonic() + 2
        while time.monotonic() < end and any(p.poll() is None for p in procs):
            time.sleep(0.05)


# --------------------------------------------------------------------------- rank process
def rank_value(index_mod3, rank):
    """What rank r puts in element i: (r+1)*(i%3+1) (numbers or a tensor of i%3)."""
    return (index_mod3 + 1) * (rank + 1)


def expected_value(index_mod3, world_size):
    """The exact sum of rank_value over W ranks: (i%3+1)*W(W+1)/2 (numbers or a tensor of i%3)."""
    return (index_mod3 + 1) * (world_size * (world_size + 1) // 2)


def rank_main(cfg_path, local_rank, backend, nproc):
    with open(cfg_path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    out_path = os.path.join(cfg["run_dir"], f"rank{local_rank}.json")
    res = {"local_rank": local_rank, "node_rank": cfg["node_rank"], "host": socket.gethostname(),
           "backend": backend, "phase": "import", "ok": False}
    write_json(out_path, res)
    started = time.monotonic()
    try:
        _rank_body(cfg, local_rank, backend, nproc, res, out_path)
        res["ok"] = res.get("correct", False)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line in the report
        __import__("traceback").print_exc()
        res["error"] = one_line(exc)
        if res["phase"] in ("rendezvous", "init") and not res.get("is_master"):
            res["master_reach"] = reach(cfg["master_addr"], int(cfg["master_port"]))
    res["elapsed"] = round(time.monotonic() - started, 3)
    write_json(out_path, res)
    return 0 if res["ok"] else 1


def _rank_body(cfg, local_rank, backend, nproc, res, out_path):
    import datetime

    import torch
    import torch.distributed as dist

    res["versions"] = {"torch": torch.__version__, "python": sys.version.split()[0],
                       "cuda": torch.version.cuda,
                       "nccl": ".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else None}
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg["threads"]))
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    nnodes = int(cfg["nnodes"])
    world = nnodes * nproc
    addr, port = cfg["master_addr"], int(cfg["master_port"])
    rdzv_timeout = datetime.timedelta(seconds=float(cfg.get("rendezvous_timeout", 30)))
    res["is_master"] = cfg["node_rank"] == 0 and local_rank == 0
    res["phase"] = "rendezvous"
    # said now: torch retries until the rendezvous bound, and a rank the outer timeout kills says nothing
    first = "master" if res["is_master"] else reach(addr, port)
    if first in ("unreachable", "timeout"):
        res["master_reach"] = first
    write_json(out_path, res)
    t0 = time.monotonic()
    handler = None
    server = None  # the master's store server, bound to the cluster address (kept alive for the run)
    if cfg.get("rendezvous", "static") == "c10d":
        from torch.distributed.elastic.rendezvous import RendezvousParameters
        from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler
        params = RendezvousParameters(
            backend="c10d", endpoint=f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}", run_id=cfg["run_id"],
            min_nodes=world,
            max_nodes=world, local_addr=cfg.get("address"), join_timeout=str(int(rdzv_timeout.total_seconds())),
            read_timeout=str(int(rdzv_timeout.total_seconds())), is_host="false", last_call_timeout="1")
        if res["is_master"]:
            # the store server is ours, bound to the cluster address; every rank (this one too) joins it as a client
            server = _store_server(dist, cfg, addr, port, None, rdzv_timeout, res, wait=False)
        handler = get_rendezvous_handler(params)
        info = handler.next_rendezvous()
        store, rank, world = info.store, info.rank, info.world_size
    else:
        rank = cfg["node_rank"] * nproc + local_rank
        if rank == 0:
            server = _store_server(dist, cfg, addr, port, world, rdzv_timeout, res, wait=True)
            store = server
        else:
            store = dist.TCPStore(addr, port, world, is_master=False, timeout=rdzv_timeout)
    res.pop("master_reach", None)   # the store answered after all
    res.update(rank=rank, world_size=world, rendezvous_s=round(time.monotonic() - t0, 3))
    res["phase"] = "init"
    write_json(out_path, res)
    store = dist.PrefixStore("smoke", store)
    # who is who, and with which versions, before the process group: a version mismatch between
    # nodes can break init_process_group itself, and the report must still be able to say so
    me = {"rank": rank, "host": res["host"], "node_rank": cfg["node_rank"], "local_rank": local_rank,
          "address": cfg.get("address"), "versions": res["versions"]}
    store.set(f"hello/{rank}", json.dumps(me))
    res["peers"] = [json.loads(store.get(f"hello/{r}")) for r in range(world)]
    write_json(out_path, res)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=float(cfg.get("collective_timeout", 60))))
    try:
        _exchange_and_measure(cfg, dist, torch, store, rank, world, device, local_rank, res, out_path)
    finally:
        dist.destroy_process_group()
        if handler is not None:
            handler.shutdown()
        _leave(store, world, server is not None, min(rdzv_timeout.total_seconds(), 10.0))
        del server


def _leave(store, world, serving, bound):
    """Every rank says it is done; the rank that serves the store keeps it up until all have (bounded), so a
    peer's rendezvous shutdown never finds the server gone (torch logs that as RendezvousConnectionError)."""
    try:
        done = store.add("bye", 1)
        deadline = time.monotonic() + bound
        while serving and done < world and time.monotonic() < deadline:
            time.sleep(0.05)
            done = store.add("bye", 0)
    except Exception:  # noqa: BLE001 - the run's result is already written; a peer that left is its own report
        pass


def _store_server(dist, cfg, addr, port, world, timeout, res, wait):
    """The master's TCPStore, listening on a socket bound to the cluster address (store_socket); the
    store takes the socket's fd over (and closes it)."""
    sock, bound = store_socket([addr, cfg.get("address")], port)
    fd = sock.detach()
    try:
        server = dist.TCPStore(addr, port, world, is_master=True, timeout=timeout, wait_for_workers=wait,
                               master_listen_fd=fd)
    except TypeError:  # a torch without master_listen_fd: its own socket, on every interface
        os.close(fd)
        res["store_bound"] = "every interface (this torch cannot take a bound socket)"
        return dist.TCPStore(addr, port, world, is_master=True, timeout=timeout, wait_for_workers=wait)
    res["store_bound"] = bound
    return server


def _exchange_and_measure(cfg, dist, torch, store, rank, world, device, local_rank, res, out_path):
    peers = res["peers"]
    # gloo only: NCCL runs one op per tensor across its own channels, chunks would only queue up
    chunk = int(cfg.get("chunk_bytes") or 0) if device == "cpu" else 0

    def allreduce(t):
        if chunk and t.numel() * t.element_size() > chunk:
            works = [dist.all_reduce(c, async_op=True) for c in t.split(max(chunk // t.element_size(), 1))]
            for w in works:
                w.wait()
        else:
            dist.all_reduce(t)

    def sync():
        if device != "cpu":
            torch.cuda.synchronize()

    res["phase"] = "check"
    sweep, mismatches = [], 0
    warmup, iters = int(cfg.get("warmup", 2)), int(cfg.get("iters", 10))
    budget = float(cfg.get("size_budget_seconds", 2.0))
    for size in cfg["sizes"]:
        n = max(int(size) // 4, 1)
        pattern = (torch.arange(n, dtype=torch.int64, device=device) % 3)
        t = rank_value(pattern, rank).to(torch.float32)
        dist.barrier()
        once = time.perf_counter()
        allreduce(t)
        sync()
        # the checked all-reduce is also the probe of this size's time (the slowest rank's, so every rank
        # decides the same): warm-up and timed iterations as asked, but within the per-size time budget,
        # so a degraded link (a size taking seconds) costs one or two iterations, not a dozen
        probe = torch.tensor([time.perf_counter() - once], dtype=torch.float64, device=device)
        expect = expected_value(pattern, world).to(torch.float32)
        bad = int((t != expect).sum().item())
        if bad:
            first = int((t != expect).nonzero()[0].item())
            res.setdefault("sum_errors", []).append(
                {"bytes": n * 4, "mismatches": bad, "index": first, "got": float(t[first]),
                 "expected": float(expect[first])})
        mismatches += bad
        del expect, pattern
        dist.all_reduce(probe, op=dist.ReduceOp.MAX)
        affordable = int(budget / max(float(probe.item()), 1e-6))
        n_warm = max(0, min(warmup, affordable - 1))
        n_iter = max(1, min(iters, affordable))
        t.zero_()
        for _i in range(n_warm):
            allreduce(t)
        sync()
        dist.barrier()
        t1 = time.perf_counter()
        for _i in range(n_iter):
            allreduce(t)
        sync()
        dt = (time.perf_counter() - t1) / n_iter
        worst = torch.tensor([dt], dtype=torch.float64, device=device)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        sweep.append({"bytes": n * 4, "time_s": float(worst.item()), "iters": n_iter})
        res["sweep"] = sweep
        write_json(out_path, res)
        del t
    res["correct"] = mismatches == 0
    res["mismatches"] = mismatches
    res["phase"] = "probe"
    if cfg.get("tcp_probe_seconds", 1.0) and world > 1:
        seconds = float(cfg.get("tcp_probe_seconds", 1.0))
        res["tcp"] = tcp_probe(store, rank, peers, seconds, dist, cfg.get("address"))
        if cfg.get("tcp_ring_probe", True):
            res["tcp_ring"] = ring_probe(store, rank, peers, seconds, dist, cfg.get("address"))
    res["phase"] = "done"


# --------------------------------------------------------------------------- TCP probe
PROBE_BUF = 4 << 20


def tcp_probe(store, rank, peers, seconds, dist, address):
    """One-way TCP bandwidth node i -> node i+1 (one stream each, pairs one after the other)."""
    reps = sorted((p for p in peers if p["local_rank"] == 0), key=lambda p: p["node_rank"])
    results = []
    if len(reps) < 2:
        return results
    pairs = [(reps[i], reps[(i + 1) % len(reps)]) for i in range(len(reps) if len(reps) > 2 else 2)]
    for idx, (src, dst) in enumerate(pairs):
        dist.barrier()
        key = f"probe/{idx}"
        if rank == dst["rank"]:
            results.append(_probe_receive(store, key, seconds, address, src.get("address")))
        elif rank == src["rank"]:
            _probe_send(store, key, seconds)
        dist.barrier()
        if rank != dst["rank"]:
            results.append(json.loads(store.get(f"{key}/result")))
        results[-1].update({"src": src["host"], "dst": dst["host"]})
    return results


def ring_probe(store, rank, peers, seconds, dist, address):
    """Every node sends to the next node and receives from the previous one, all at once (the
    traffic of a ring all-reduce; with 2 nodes: both directions at once). Each link's rate.

    The store is used from this thread only (a TCPStore client is not safe to share between a
    thread blocked in get() and another one calling set())."""
    import threading

    reps = sorted((p for p in peers if p["local_rank"] == 0), key=lambda p: p["node_rank"])
    if len(reps) < 2:
        return []
    me = next((i for i, p in enumerate(reps) if p["rank"] == rank), None)
    dist.barrier()
    if me is not None:
        srv = _listen(store, f"ring/{me}", seconds, address)
        got = []
        sender = reps[me - 1].get("address")  # only the previous node's cluster address is let in

        def receive():
            try:
                got.append(_receive(srv, seconds, sender))
            except OSError as exc:
                got.append({"gbps": 0.0, "error": one_line(exc)})

        receiver = threading.Thread(target=receive, daemon=True)
        receiver.start()
        try:
            _probe_send(store, f"ring/{(me + 1) % len(reps)}", seconds)
        except OSError as exc:
            got.append({"gbps": 0.0, "error": "send: " + one_line(exc)})
        receiver.join(seconds + 60)
        link = dict(got[0] if got else {"gbps": 0.0, "error": "no answer"}, src=reps[me - 1]["host"],
                    dst=reps[me]["host"])
        store.set(f"ring/{me}/link", json.dumps(link))
    dist.barrier()
    return [json.loads(store.get(f"ring/{i}/link")) for i in range(len(reps))]


def _listen(store, key, seconds, address):
    """A listening socket on this node's address (IPv4 or IPv6), published in the store under key."""
    srv = _bind(address)
    srv.listen(8)
    srv.settimeout(seconds + 30)
    host, port = srv.getsockname()[:2]
    store.set(key, f"{host}:{port}")
    return srv


def _receive(srv, seconds, sender=None):
    """Accept the sender on srv (a connection from any other address is closed and noted, and the wait
    goes on until the socket's timeout) and read until it closes: bytes, seconds and GB/s."""
    strangers = []
    while True:
        conn, peer = srv.accept()
        if peer_matches(peer[0], sender):
            break
        strangers.append(peer[0])
        conn.close()
    conn.settimeout(seconds + 30)
    buf = bytearray(PROBE_BUF)
    view = memoryview(buf)
    total, first, last = 0, None, None
    while True:
        got = conn.recv_into(view)
        if not got:
            break
        now = time.perf_counter()
        if first is None:
            first = now
        else:
            total += got  # the first read only starts the clock
        last = now
    conn.close()
    srv.close()
    span = (last - first) if first is not None and last is not None else 0.0
    out = {"bytes": total, "seconds": round(span, 4), "gbps": round(total / span / 1e9, 4) if span > 0 else 0.0}
    if strangers:
        out["refused"] = sorted(set(strangers))
    return out


def _probe_receive(store, key, seconds, address, sender=None):
    result = _receive(_listen(store, key, seconds, address), seconds, sender)
    store.set(f"{key}/result", json.dumps(result))
    return result


def _probe_send(store, key, seconds):
    host, port = store.get(key).decode().rsplit(":", 1)
    buf = bytes(PROBE_BUF)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            sock.sendall(buf)
        sock.shutdown(socket.SHUT_WR)


def main(argv):
    if len(argv) >= 2 and argv[0] == "supervise":
        return supervise(argv[1])
    if len(argv) >= 5 and argv[0] == "rank":
        return rank_main(argv[1], int(argv[2]), argv[3], int(argv[4]))
    sys.stderr.write(f"usage: {WORKER_NAME} supervise CONFIG | rank CONFIG LOCAL_RANK BACKEND NPROC\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
