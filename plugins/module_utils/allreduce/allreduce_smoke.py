# -*- coding: utf-8 -*-
# Copyright: contributors to provision.cluster
# Apache-2.0
"""Pure logic of the all-reduce smoke test: sizes, bandwidth math, NCCL log reading, failure
diagnosis and the report. No Ansible and no torch imports: the module, the CLI and the tests
all call these functions on plain data.

Bandwidth follows nccl-tests (doc/PERFORMANCE.md): for an all-reduce of S bytes taking t
seconds over n ranks, algbw = S / t and busbw = algbw * 2 (n - 1) / n. Bandwidths are in GB/s
(1e9 bytes per second), as nccl-tests prints them.
"""

from __future__ import annotations

import hashlib
import json
import re

# the log -> cause mapping lives in diagnose (one implementation for the smoke test, launch and the CLI)
from ansible_collections.provision.cluster.plugins.module_utils.verify.diagnose import classify_log  # noqa: F401
from ansible_collections.provision.cluster.plugins.module_utils.allreduce.bandwidth import DEFAULT_MIN_FRACTION, judge
from ansible_collections.provision.cluster.plugins.module_utils.allreduce.baseline import differences
from ansible_collections.provision.cluster.plugins.module_utils.common.sizes import human


def bandwidth(nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for an all-reduce of `nbytes` taking `seconds` over `ranks` ranks."""
    if seconds <= 0:
        return 0.0, 0.0
    algbw = nbytes / seconds / 1e9
    busbw = algbw * 2 * (ranks - 1) / ranks if ranks > 0 else 0.0
    return algbw, busbw


# --------------------------------------------------------------------------- NCCL debug log
_NCCL_LINE = re.compile(r"^(?P<host>[^:\s]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
_NCCL_WARN = re.compile(r"^\[[^\]]*\] (?P<host>[^:\s]+):\d+:\d+ \[\d+\] \S+ NCCL WARN (?P<msg>.*)$")
_IFACES = re.compile(r"\[\d+\](\w[\w.:-]*):([0-9a-fA-F.:]+)<\d+>")


def parse_nccl_log(text: str) -> dict:
    """What NCCL_DEBUG=INFO output says NCCL used.

    Returns {version, network ('IB'|'Socket'|None), net_interfaces, bootstrap_interface,
    ib_found (False when NCCL said 'NET/IB : No device found'), env (NCCL_* it reported as set),
    transports (P2P/SHM/NET names seen in channel lines), ranks, warnings}.
    """
    info: dict = {"version": None, "network": None, "net_interfaces": [], "bootstrap_interface": None,
                  "ib_found": None, "env": {}, "transports": [], "ranks": None, "warnings": [],
                  "lines": 0}
    transports: set[str] = set()
    for raw in text.splitlines():
        line = raw.strip()
        warn = _NCCL_WARN.match(line)
        if warn:
            if warn["msg"] not in info["warnings"]:
                info["warnings"].append(warn["msg"])
            info["lines"] += 1
            continue
        match = _NCCL_LINE.match(line)
        if not match:
            continue
        info["lines"] += 1
        msg = match["msg"]
        if match["level"] == "WARN":
            if msg not in info["warnings"]:
                info["warnings"].append(msg)
            continue
        if msg.startswith("NCCL version "):
            info["version"] = msg.split()[2].split("+")[0]
        elif msg.startswith("Bootstrap: Using "):
            found = _IFACES.findall("[0]" + msg[len("Bootstrap: Using "):])
            if found:
                info["bootstrap_interface"] = found[0][0]
        elif msg.startswith("Using network "):
            info["network"] = msg.split()[2]
        elif msg.startswith("NET/IB : No device found"):
            info["ib_found"] = False
        elif msg.startswith("NET/IB : Using"):
            devices = re.findall(r"\[\d+\](\w+):\d+/(?:IB|RoCE)", msg)
            if devices:
                info["ib_found"] = True
                info["ib_devices"] = devices
        elif msg.startswith("NET/Socket : Using"):
            info["net_interfaces"] = [name for name, _unused in _IFACES.findall(msg)]
        elif " set by environment to " in msg or (msg.startswith("NCCL_") and " set to " in msg):
            sep = " set by environment to " if " set by environment to " in msg else " set to "
            key, _unused, value = msg.partition(sep)
            # "NCCL_IB_DISABLE set by environment to 1." (2.28: the sentence's period is not the value's)
            value = value.strip()
            info["env"][key.strip()] = value[:-1] if value.endswith(".") else value
        elif " via " in msg and "Channel" in msg:
            transports.add(msg.rsplit(" via ", 1)[1].split()[0])
        elif msg.startswith("ncclCommInitRank") and " nranks " in msg:
            found = re.search(r" nranks (\d+)", msg)
            info["ranks"] = int(found.group(1)) if found else None
    info["transports"] = sorted(transports)
    return info


def nccl_findings(parsed: dict, infiniband_devices: list | None = None) -> list[dict]:
    """Warnings from a parsed NCCL log: IB present but unused, a requested HCA NCCL did not find."""
    out = []
    ib = list(infiniband_devices or [])
    if parsed.get("network") == "Socket" and ib:
        out.append(check("nccl_transport", "warn",
                         f"InfiniBand devices {', '.join(ib)} present but NCCL used NET/Socket "
                         f"({', '.join(parsed.get('net_interfaces') or []) or '?'})",
                         "set NCCL_IB_HCA to the active HCAs and leave NCCL_IB_DISABLE unset "
                         "(nccl_net role: nccl_net_ib_hca); check `ibstat` shows State: Active"))
    hca = parsed.get("env", {}).get("NCCL_IB_HCA")
    if hca and parsed.get("ib_found") is False:
        out.append(check("nccl_ib_hca", "warn",
                         f"NCCL_IB_HCA={hca} but NCCL found no such IB device and fell back to "
                         f"{parsed.get('network') or 'Socket'}",
                         "set NCCL_IB_HCA to a device listed in /sys/class/infiniband, or unset it "
                         "and set NCCL_IB_DISABLE=1 on nodes without IB"))
    return out


# --------------------------------------------------------------------------- diagnosis
def check(name: str, status: str, detail: str, fix: str = "") -> dict:
    return {"check": name, "status": status, "detail": detail, "fix": fix}


_REACH_TEXT = {"unreachable": "no route (network unreachable)", "timeout": "no answer (connect timed out)",
               "refused": "connection refused (nothing listening)"}


def diagnose(hosts: list[dict], master_addr: str, master_port: int, holder: str | None = None) -> list[dict]:
    """One line (cause + fix) per problem seen across hosts' run results.

    `hosts` items: {host, status: supervisor status.json, ranks: [rank json], log: text excerpt,
    nccl: parsed log, missing: reason when the host produced no result}. `holder` names the
    process holding the master port when the run started (from the port check), if any.
    """
    problems: list[dict] = []

    def add(name, detail, fix, host=None):
        line = f"{host}: {detail}" if host else detail
        if not any(p["detail"] == line for p in problems):
            problems.append(check(name, "fail", line, fix))

    # a version mismatch explains most other failures: look first
    versions = {}
    for h in hosts:
        for r in h.get("ranks") or []:
            for peer in r.get("peers") or [r]:
                v = (peer.get("versions") or {}).get("torch")
                if v:
                    versions.setdefault(v, set()).add(peer.get("host") or h["host"])
    if len(versions) > 1:
        listing = "; ".join(f"torch {v} on {', '.join(sorted(hs))}" for v, hs in sorted(versions.items()))
        add("version_mismatch", f"torch version mismatch between nodes: {listing}",
            "install the same torch on every node (python_env role pins python_env_torch_version)")
    for h in hosts:
        host = h["host"]
        if h.get("missing"):
            add("worker", h["missing"], "rerun; check the node is reachable and the python path exists", host)
            continue
        status = h.get("status") or {}
        ranks = h.get("ranks") or []
        text = h.get("log") or ""
        for r in ranks:
            if r.get("mismatches"):
                first = (r.get("sum_errors") or [{}])[0]
                add("wrong_sum", f"wrong all-reduce sum on rank {r.get('rank')}: {r['mismatches']} elements differ "
                    f"(first at index {first.get('index')}: got {first.get('got')}, expected {first.get('expected')})",
                    "suspect memory/NIC corruption or mixed library versions: rerun, then test node pairs alone",
                    host)
        found = classify_log(text + "\n" + "\n".join(r.get("error", "") for r in ranks))
        reach = next((r.get("master_reach") for r in ranks if r.get("master_reach")), None)
        if found and found["cause"] == "port_held":
            detail = f"master port {master_port} is in use" + (f" (held by {holder})" if holder else "")
            add("port_held", detail, "stop that process or set cluster_master_port to a free port", host)
        elif reach in ("unreachable", "timeout") and (found is None or found["cause"] in (
                "rendezvous_timeout", "rendezvous_connection", "peer_unreachable")):
            add("peer_unreachable", f"cannot reach the master {master_addr}:{master_port}: {_REACH_TEXT[reach]}",
                "use an address on the cluster network for cluster_master_addr and check routes/firewall "
                "between the nodes on that interface", host)
        elif found:
            add(found["cause"], found["detail"], found["fix"], host)
        elif status.get("state") == "timeout":
            phase = ranks[0].get("phase") if ranks else "start"
            add("timeout", f"no result within the outer timeout of {status.get('timeout')} s (stuck in {phase}); "
                "workers killed", "look for a peer that never started; raise allreduce_smoke_timeout for slow "
                "networks", host)
        elif status.get("state") == "failed" and not any(r.get("mismatches") for r in ranks):
            err = next((r.get("error") for r in ranks if r.get("error")), None)
            err = err or status.get("error")
            add("worker", f"worker failed: {err or 'exit codes ' + str(status.get('exit_codes'))}",
                "see the rank logs in the run directory on that node", host)
    # a rank that merely waited for a failed peer is a consequence, not a cause: keep the causes
    causes = [p for p in problems if p["check"] not in ("rendezvous_timeout", "timeout", "peer_lost")]
    return causes or problems


# --------------------------------------------------------------------------- report
def summarize(hosts: list[dict], *, master_addr: str, master_port: int, holder: str | None = None,
              min_busbw: float | None = None, min_ratio: float | None = None,
              ratio_min_bytes: int = 64 << 20, expected: dict | None = None,
              min_fraction: float | None = None) -> dict:
    """The whole run as one result: rows, ratio, findings, failures and status.

    expected: bandwidth.expected_busbw() of the nodes (the busbw the hardware should give); the run
    fails below min_fraction of it (bandwidth.DEFAULT_MIN_FRACTION when None).
    """
    ranks = [r for h in hosts for r in (h.get("ranks") or [])]
    good = [r for r in ranks if r.get("sweep")]
    first = next((r for r in good if r.get("rank") == 0), good[0] if good else None)
    world = first.get("world_size", 0) if first else 0
    rows = []
    if first:
        for entry in first["sweep"]:
            algbw, busbw = bandwidth(entry["bytes"], entry["time_s"], world)
            rows.append({"bytes": entry["bytes"], "time_us": round(entry["time_s"] * 1e6, 1),
                         "algbw": round(algbw, 3), "busbw": round(busbw, 3)})
    tcp = list(first.get("tcp") or []) if first else []
    tcp_gbps = min((p["gbps"] for p in tcp if p.get("gbps")), default=None)
    big = [row for row in rows if row["bytes"] >= ratio_min_bytes] or rows[-1:]
    busbw_big = max((row["busbw"] for row in big), default=None)
    ratio = round(busbw_big / tcp_gbps, 3) if busbw_big is not None and tcp_gbps else None
    # every node sending to the next at once (the all-reduce's own traffic): the ceiling of busbw
    ring = list(first.get("tcp_ring") or []) if first else []
    ring_gbps = min((p.get("gbps") or 0.0 for p in ring), default=None) or None
    ratio_ring = round(busbw_big / ring_gbps, 3) if busbw_big is not None and ring_gbps else None
    links, per_node, slow = link_figures(hosts, tcp, ring)
    failures = diagnose(hosts, master_addr, master_port, holder)
    warnings = []
    for h in hosts:
        status = h.get("status") or {}
        for note in status.get("notes") or []:
            warnings.append(check("environment", "warn", f"{h['host']}: {note}",
                                  "let shell_env export GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME above the "
                                  "~/.bashrc guard (nccl_net + shell_env roles)"))
        if h.get("nccl"):
            for w in nccl_findings(h["nccl"], status.get("infiniband")):
                w["detail"] = f"{h['host']}: {w['detail']}"
                warnings.append(w)
    if not failures and rows:
        if min_busbw is not None and busbw_big is not None and busbw_big < min_busbw:
            failures.append(check("busbw", "fail", f"busbw {busbw_big:.3f} GB/s at {human(big[-1]['bytes'], exact=True)}"
                                  f" is below allreduce_smoke_min_busbw {min_busbw}",
                                  "check the interface (GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME), IB use, or lower "
                                  "the threshold"))
        if min_ratio is not None and ratio is not None and ratio < min_ratio:
            failures.append(check("ratio", "fail", f"busbw/TCP ratio {ratio} is below allreduce_smoke_min_ratio "
                                  f"{min_ratio} (busbw {busbw_big:.3f} GB/s, TCP {tcp_gbps:.3f} GB/s)",
                                  "see the tuning variables in the allreduce_smoke README"))
    verdict = None
    if expected is not None and rows:
        verdict = judge(busbw_big, expected, DEFAULT_MIN_FRACTION if min_fraction is None else float(min_fraction))
        if verdict["status"] == "fail" and not failures:
            failures.append(check("expected_busbw", "fail", verdict["detail"], verdict["fix"]))
    if not failures and not rows:
        failures.append(check("worker", "fail", "no rank produced a result", "see the rank logs on the nodes"))
    status = hosts[0].get("status") if hosts else {}
    return {
        "status": "fail" if failures else ("warn" if warnings else "pass"),
        "backend": (status or {}).get("backend") or (first or {}).get("backend"),
        "world_size": world, "nodes": len(hosts),
        "master": f"{master_addr}:{master_port}",
        "correct": bool(ranks) and all(r.get("correct") for r in ranks) and len(ranks) == world,
        "rows": rows, "tcp": tcp, "tcp_gbps": tcp_gbps, "busbw_gbps": busbw_big, "ratio": ratio,
        "tcp_ring": ring, "tcp_ring_gbps": ring_gbps, "ratio_ring": ratio_ring,
        "interfaces": {h["host"]: (h.get("status") or {}).get("env_used", {}).get("GLOO_SOCKET_IFNAME")
                       or (h.get("nccl") or {}).get("net_interfaces") for h in hosts},
        "nccl": {h["host"]: h["nccl"] for h in hosts if h.get("nccl")},
        "links": links, "per_node": per_node, "slow_links": slow,
        "expected_busbw_gbps": (verdict or {}).get("expected"), "fraction": (verdict or {}).get("fraction"),
        "expected": verdict,
        "failures": failures, "warnings": warnings,
    }


def link_figures(hosts: list[dict], tcp: list[dict], ring: list[dict]) -> tuple[list, dict, list]:
    """Per link (src -> dst, inventory names) the one-way and ring TCP figures, per node what it sends
    and receives with every link busy, and the links far below the others (isolation.slowest_links)."""
    from ansible_collections.provision.cluster.plugins.module_utils.allreduce.isolation import slowest_links

    name = {}
    for h in hosts:
        for r in h.get("ranks") or []:
            if r.get("host"):
                name[r["host"]] = h["host"]
    links = {}
    for kind, probes in (("one_way_gbps", tcp), ("ring_gbps", ring)):
        for p in probes or []:
            src, dst = name.get(p.get("src"), p.get("src")), name.get(p.get("dst"), p.get("dst"))
            links.setdefault((src, dst), {"src": src, "dst": dst})[kind] = p.get("gbps")
    per_node = {}
    for (src, dst), lk in links.items():
        if lk.get("ring_gbps") is not None:
            per_node.setdefault(src, {})["out_ring_gbps"] = lk["ring_gbps"]
            per_node.setdefault(dst, {})["in_ring_gbps"] = lk["ring_gbps"]
        if lk.get("one_way_gbps") is not None:
            per_node.setdefault(src, {})["out_one_way_gbps"] = lk["one_way_gbps"]
    slow = slowest_links([{"src": lk["src"], "dst": lk["dst"], "gbps": lk.get("ring_gbps")} for lk in links.values()])
    return list(links.values()), per_node, slow


def pair_config(pairs: list, node: str, address_of: dict, base_port: int, size, timeout: float) -> dict:
    """This node's worker settings in a round of pairs: a 2-rank run with its partner, pair i on
    base_port + 1 + i, one message size, no TCP probes, bounded by timeout."""
    for i, pair in enumerate(pairs):
        if node in pair:
            return {"master_addr": address_of.get(pair[0], pair[0]), "master_port": int(base_port) + 1 + i,
                    "node_rank": pair.index(node), "nnodes": 2, "sizes": [size], "warmup": 1, "iters": 5,
                    "tcp_probe_seconds": 0, "tcp_ring_probe": False, "rendezvous": "static",
                    "rendezvous_timeout": timeout, "collective_timeout": timeout, "timeout": timeout}
    return {}


def pair_result(pair: list, runs: dict, address_of: dict, base_port: int, index: int) -> dict:
    """One pair's outcome from both nodes' `finished` results: status ok/failed/timeout, busbw."""
    hosts = [dict(runs.get(n) or {}, host=n) for n in pair]
    if any(not (runs.get(n) or {}).get("status") for n in pair):
        missing = [n for n in pair if not (runs.get(n) or {}).get("status")]
        return {"status": "timeout", "busbw": None, "detail": "%s did not answer" % ", ".join(missing)}
    res = summarize(hosts, master_addr=address_of.get(pair[0], pair[0]), master_port=int(base_port) + 1 + index)
    states = {(h.get("status") or {}).get("state") for h in hosts}
    if "timeout" in states:
        return {"status": "timeout", "busbw": None, "detail": "no result within the time limit"}
    if res["status"] == "fail":
        return {"status": "failed", "busbw": None, "detail": (res["failures"] or [{}])[0].get("detail", "")}
    return {"status": "ok", "busbw": res["busbw_gbps"], "detail": ""}


def table_lines(result: dict) -> list[str]:
    """The result as nccl-tests-like lines for the play output."""
    lines = [f"all-reduce {result.get('backend')} over {result.get('world_size')} ranks on "
             f"{result.get('nodes')} nodes, master {result.get('master')}, sum "
             f"{'correct' if result.get('correct') else 'NOT verified'}",
             f"{'size':>10} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}"]
    for row in result.get("rows") or []:
        lines.append(f"{human(row['bytes'], exact=True):>10} {row['time_us']:>12.1f} {row['algbw']:>12.3f} {row['busbw']:>12.3f}")
    for probe in result.get("tcp") or []:
        lines.append(f"TCP one-way {probe.get('src')} -> {probe.get('dst')}: {probe.get('gbps', 0):.3f} GB/s")
    for probe in result.get("tcp_ring") or []:
        lines.append(f"TCP ring (all links at once) {probe.get('src')} -> {probe.get('dst')}: "
                     f"{probe.get('gbps', 0):.3f} GB/s" + (f" ({probe['error']})" if probe.get("error") else ""))
    if result.get("ratio") is not None:
        lines.append(f"busbw/TCP ratio: {result['ratio']:.2f} (busbw {result['busbw_gbps']:.3f} GB/s)"
                     + (f"; busbw/TCP ring: {result['ratio_ring']:.2f}" if result.get("ratio_ring") is not None else ""))
    ring, one_way = result.get("tcp_ring_gbps"), result.get("tcp_gbps")
    if ring and one_way and ring < 0.8 * one_way:
        lines.append(f"note: with every link busy at once TCP carries {ring:.3f} GB/s per link, {ring / one_way:.2f} of "
                     f"one-way: the path is CPU-bound or not full duplex, and busbw cannot exceed that")
    if (result.get("expected") or {}).get("status") in ("pass", "skip"):
        lines.append(f"expected bandwidth: {result['expected']['detail']}")
    for lk in result.get("slow_links") or []:
        lines.append(f"slow link: {lk['src']} -> {lk['dst']} {lk['gbps']:.3f} GB/s with every link busy")
    iso = result.get("isolation") or {}
    for rnd in iso.get("rounds") or []:
        for pair, res in zip(rnd.get("pairs") or [], (rnd.get("outcome") or [])):
            lines.append(f"pair {pair[0]}+{pair[1]}: {res}")
    if iso.get("summary"):
        lines.append(f"bad node search: {iso['summary']}")
    for item in result.get("warnings", []) + result.get("failures", []):
        lines.append(f"{item['status'].upper()}: {item['detail']} -- fix: {item['fix']}")
    return lines


# --------------------------------------------------------------------------- re-run decision
def node_inputs(order, get):
    """Per node, what a green all-reduce proved about it: rank, address, versions, environment block,
    GPUs and boot. get(host, var) reads one published result of another stage (cluster_plan,
    python_env_versions, shell_env_result, gpu_facts, node_runtime)."""
    out = {}
    for rank, h in enumerate(order):
        gpu = get(h, "gpu_facts") or {}
        out[h] = {
            "rank": rank,
            "address": ((get(h, "cluster_plan") or {}).get("address_of") or {}).get(h, h),
            "versions": get(h, "python_env_versions"),
            "env": (get(h, "shell_env_result") or {}).get("block"),
            "gpus": [gpu.get("gpu_count", 0), gpu.get("driver_version", "")]
            + [g.get("uuid", "") for g in gpu.get("gpus") or []],
            "boot_id": ((get(h, "node_runtime") or {}).get("identity") or {}).get("boot_id", ""),
        }
    return out


def fingerprint(inputs: dict) -> str:
    """sha256 of what a green all-reduce proved: the worker configuration and, per node, the facts
    the run depends on (address, versions, environment block, GPUs, boot). Key order does not matter."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def reuse_decision(last: dict | None, inputs: dict, now: float, max_age: float) -> tuple[bool, str]:
    """May the last result stand in for a new run? -> (reuse, reason).

    Only a green (pass or warn) result with the same fingerprint, younger than max_age seconds.
    The reason says what made a new run necessary, or when the reused run was.
    """
    if not last:
        return False, "no earlier result on the master"
    if last.get("status") not in ("pass", "warn"):
        return False, f"the last run did not pass (status {last.get('status')})"
    if last.get("fingerprint") != fingerprint(inputs):
        parts = differences(last.get("fingerprint_inputs") or {}, inputs)
        return False, "changed since the last green run: " + (", ".join(parts[:6]) or "fingerprint")
    age = now - float(last.get("finished_at") or 0)
    if age > max_age or age < 0:
        return False, f"the last green run is {age / 3600:.1f} h old (allreduce_smoke_max_age {max_age:.0f} s)"
    return True, (f"nothing it depends on changed since the green run {age / 60:.0f} min ago; "
                  "allreduce_smoke_rerun=always runs it again")
