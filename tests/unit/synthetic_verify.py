"""Synthetic `provision verify --json` documents of any size, for the views and the report tests.

SYNTHETIC, built from real parts and presented as nothing else: every node's check records are node2's
of the recorded healthy lab (tests/fixtures/verify/healthy-2nodes.json) with names and addresses
replaced; the faults are produced by the project's own code on chosen inputs (verify_report.unreachable
for a node that does not answer, limits.check_shm for a 64 MiB /dev/shm, baseline.compare against a
baseline made by baseline.make, the pair search by isolation and the allreduce_smoke filter, the
expected busbw by the bandwidth model for a 5 Gb/s interface); the all-reduce rows and link figures
are the recorded 3-node lab run's (tests/fixtures/verify/smoke-3nodes-healthy.json), cycled over the
ring; the document itself by verify_report.build_document.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from ansible_collections.provision.cluster.plugins.filter.allreduce_smoke import allreduce_smoke_isolated
from ansible_collections.provision.cluster.plugins.module_utils.allreduce import bandwidth as BW
from ansible_collections.provision.cluster.plugins.module_utils.allreduce import baseline as B
from ansible_collections.provision.cluster.plugins.module_utils.allreduce import isolation as I
from ansible_collections.provision.cluster.plugins.module_utils.common.limits import check_shm
from ansible_collections.provision.cluster.plugins.module_utils.common.settings import default as _default
from ansible_collections.provision.cluster.plugins.module_utils.verify.verify_report import build_document

_TOL, _LINK_TOL = _default("verify_baseline_tolerance"), _default("verify_baseline_link_tolerance")

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "verify"
T0 = 1_790_000_000.0      # the baselines' first run (2026-09-21)


def recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text())


def node_names(n: int, pattern: str = "gpu-node-{:04d}") -> list[str]:
    return [pattern.format(i) for i in range(1, n + 1)]


def address(i: int) -> str:
    return f"10.89.{(i >> 8) & 255}.{i & 255}"


def _node_checks(template: list[dict], name: str, master: str, nxt: str, addr: str) -> list[dict]:
    """node2's records as `name`'s, with the ring's per-peer checks (ssh to itself and the next node,
    NCCL's reach of the next node)."""
    out = []
    for c in template:
        if c["check"] == "node reachable" or c["check"].startswith(("ssh ", "nccl_net.reach")):
            continue
        c = {k: v for k, v in c.items() if k != "node"}
        for key in ("check", "detail"):
            c[key] = (c[key].replace("10.89.236.12", addr).replace("node2", "\0").replace("node1", master)
                      .replace("\0", name))
        out.append(c)
    out[2:2] = [{"check": f"ssh {name}->{name}", "status": "pass", "detail": name, "fix": ""},
                {"check": f"ssh {name}->{nxt}", "status": "pass", "detail": nxt, "fix": ""}]
    out.append({"check": f"nccl_net.reach.{nxt}", "status": "pass",
                "detail": f"{name} via eth1 ({addr}): connected to {nxt}:2222", "fix": ""})
    return out


def fingerprint_inputs(names: list[str]) -> dict:
    return {"config": {"backend": "gloo", "sizes": [65536, 1048576, 16777216, 67108864]}, "python": "3.11.2",
            "nodes": {n: {"address": address(i)} for i, n in enumerate(names, 1)}}


def synthetic_document(n: int, *, pattern: str = "gpu-node-{:04d}", down: tuple[int, ...] = (),
                       shm_small: tuple[int, ...] = (), slow_link: int | None = None, smoke: bool = True) -> dict:
    """A verify document of n nodes (faults by 1-based node number): `down` nodes do not answer,
    `shm_small` nodes have a 64 MiB /dev/shm, the `slow_link` node sends at a tenth to the next."""
    healthy = recorded("healthy-2nodes.json")
    template = [c for c in healthy["checks"] if c["node"] == "node2"]
    names = node_names(n, pattern)
    master = names[0]
    nodes: dict[str, dict] = {}
    for i, name in enumerate(names, 1):
        entry = {"address": address(i), "reachable": i not in down, "checks": [], "reach_detail": ""}
        if i in down:
            entry["reach_detail"] = (f"Failed to connect to the host via ssh: ssh: connect to host {address(i)} port 22: "
                                     "No route to host")
            entry["connection"] = {"connection": "ssh", "host": address(i), "port": 22, "user": "root"}
        else:
            entry["checks"] = _node_checks(template, name, master, names[i % n], address(i))
            if i in shm_small:
                shm = check_shm({"size": 64 << 20, "free": 64 << 20}, 0, False, None)
                entry["checks"] = [dict(c, status=shm["status"], detail=shm["detail"], fix=shm["fix"])
                                   if c["check"] == "shm" else c for c in entry["checks"]]
        nodes[name] = entry
    for i in down:  # the node before it in the ring cannot log in to it either
        prev, gone = names[(i - 2) % n], names[i - 1]
        if nodes[prev]["reachable"]:
            nodes[prev]["checks"] = [dict(c, status="fail", detail=f"ssh: connect to host {address(i)} port 2222: No "
                                          "route to host", fix=f"bring {gone} up (see its node reachable check)")
                                     if c["check"] == f"ssh {prev}->{gone}" else c for c in nodes[prev]["checks"]]
    mesh_rows = {nm: [{"target": c["check"].split("->")[1], "ok": c["status"] == "pass",
                       "error": "" if c["status"] == "pass" else "no_route", "detail": c["detail"]}
                      for c in nodes[nm]["checks"] if c["check"].startswith(f"ssh {nm}->")]
                 for nm in names if nodes[nm]["reachable"]}
    allreduce = None
    if smoke:
        ran = [nm for i, nm in enumerate(names, 1) if i not in down]
        allreduce = _allreduce(names, ran, slow_link)
        base = synthetic_baselines({"nodes": [{"name": nm} for nm in names], "allreduce": allreduce}, files=1, runs=3,
                                   slow_link=slow_link)[0]
        checks = B.compare(base, allreduce, master, _TOL, _LINK_TOL)
        allreduce["baseline"] = {"path": "inventory/synthetic/.provision/baseline.json", "tolerance": _TOL,
                                 "link_tolerance": _LINK_TOL, "saved_at": base["saved_at"],
                                 "comparable": True, "differences": [], "checks": checks}
        for c in checks:
            nodes[c["node"]]["checks"].append(c)
    doc = build_document(names, nodes, selected=healthy["selected"] + (["smoke"] if smoke else []), mesh_rows=mesh_rows,
                         versions={nm: _nested_versions(healthy) for nm in names if nodes[nm]["reachable"]},
                         allreduce=allreduce)
    head = {"schema": doc.pop("schema"), "ok": doc.pop("ok"), "inventory": "inventory/synthetic/", "limit": None,
            "selected": doc.pop("selected"), "duration_s": 42.0}
    return {**head, **doc}


def _nested_versions(healthy: dict) -> dict:
    """The recorded node's python_versions answer, from its flattened row in the document."""
    out: dict = {}
    for key, value in healthy["versions"]["nodes"]["node1"].items():
        if key.startswith("gpu."):
            continue
        *parents, leaf = key.split(".")
        cur = out
        for p in parents:
            cur = cur.setdefault(p, {})
        cur[leaf] = None if value == "-" else {"yes": True, "no": False}.get(value, value)
    return out


def _allreduce(names: list[str], ran: list[str], slow_link: int | None) -> dict:
    real = recorded("smoke-3nodes-healthy.json")["allreduce"]
    result = copy.deepcopy({k: v for k, v in real.items() if k not in ("baseline", "isolation", "fingerprint")})
    links = []
    for i, src in enumerate(ran):
        lk = real["links"][i % len(real["links"])]
        one, ring = lk["one_way_gbps"], lk["ring_gbps"]
        if slow_link is not None and src == names[slow_link - 1]:
            one, ring = round(one / 10, 4), round(ring / 10, 4)
        links.append({"src": src, "dst": ran[(i + 1) % len(ran)], "one_way_gbps": one, "ring_gbps": ring})
    per_node: dict = {}
    for lk in links:
        per_node.setdefault(lk["src"], {}).update(out_ring_gbps=lk["ring_gbps"], out_one_way_gbps=lk["one_way_gbps"])
        per_node.setdefault(lk["dst"], {})["in_ring_gbps"] = lk["ring_gbps"]
    expected = BW.expected_busbw([BW.capability_from_facts(eth_gbps=5)] * len(ran))
    result.update(world_size=len(ran), nodes=len(ran), master=f"{address(1)}:29500", failures=[], warnings=[],
                  status="pass", interfaces={n: "eth1" for n in ran}, nccl={}, links=links, per_node=per_node,
                  tcp=[{"src": lk["src"], "dst": lk["dst"], "gbps": lk["one_way_gbps"]} for lk in links],
                  tcp_ring=[{"src": lk["src"], "dst": lk["dst"], "gbps": lk["ring_gbps"]} for lk in links],
                  tcp_gbps=min(lk["one_way_gbps"] for lk in links), tcp_ring_gbps=min(lk["ring_gbps"] for lk in links),
                  slow_links=I.slowest_links([{"src": lk["src"], "dst": lk["dst"], "gbps": lk["ring_gbps"]} for lk in links]),
                  fingerprint_inputs=fingerprint_inputs(names))
    if slow_link is not None:
        # the ring runs at its slowest link: busbw a tenth at the bandwidth-bound sizes; the pair search
        bad = names[slow_link - 1]
        result["rows"] = [dict(r, busbw=round(r["busbw"] / 10, 4), algbw=round(r["algbw"] / 10, 4))
                          if r["bytes"] >= B.BANDWIDTH_MIN_BYTES else r for r in result["rows"]]
        ref = real["rows"][-1]["busbw"]
        rounds: list[dict] = []
        while len(rounds) < I.MAX_ROUNDS:
            pairs = I.next_round(ran, rounds)
            if not pairs:
                break
            rounds.append({"pairs": pairs, "results": {I.pair_key(a, b): {
                "status": "ok", "busbw": round(ref / 10 if bad in (a, b) else ref, 4), "detail": ""} for a, b in pairs}})
        result = allreduce_smoke_isolated(result, rounds, names, ran, 30)
    result["busbw_gbps"] = result["rows"][-1]["busbw"]
    verdict = BW.judge(result["busbw_gbps"], expected)
    result.update(expected=verdict, expected_busbw_gbps=verdict["expected"], fraction=verdict["fraction"])
    if verdict["status"] == "fail":
        result["failures"] = list(result["failures"]) + [{"check": "expected_busbw", "status": "fail",
                                                          "detail": verdict["detail"], "fix": verdict["fix"]}]
    if result["failures"]:
        result["status"] = "fail"
    return dict(result, ran=True)


def synthetic_baselines(doc: dict, files: int = 3, runs: int = 3, slow_link: int | None = None) -> list[dict]:
    """Baselines of the document's nodes as `provision verify --smoke --save-baseline` keeps them
    (baseline.make), `files` of them with `runs` healthy runs each, one day apart: the recorded run's
    figures scaled by a few percent per run."""
    names = [n["name"] for n in doc["nodes"]]
    real = recorded("smoke-3nodes-healthy.json")["allreduce"]
    smoke = doc["allreduce"]
    healthy_ring = []
    for i, lk in enumerate(smoke["tcp_ring"]):
        healthy_ring.append(dict(lk, gbps=real["links"][i % len(real["links"])]["ring_gbps"]))
    out, k = [], 0
    for _f in range(files):
        base = None
        for _r in range(runs):
            factor = 1.0 + 0.03 * ((k % 5) - 2)
            run = {"rows": [dict(r, busbw=round(r["busbw"] * factor, 4)) for r in real["rows"]],
                   "tcp_ring": [dict(lk, gbps=round(lk["gbps"] * factor, 4)) for lk in healthy_ring],
                   "fingerprint_inputs": fingerprint_inputs(names)}
            base = B.make(run, saved_at=T0 + k * 86400, old=base)
            k += 1
        out.append(base)
    return out
