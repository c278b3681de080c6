# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""A known-good record of the cluster's own all-reduce figures, and later runs judged against it.

``provision verify --smoke --save-baseline`` records, on the controller, the run's figures (busbw per
message size, per link of the ring probe, per pair when the bad-node search ran) with what they
depend on: the node set and addresses, each node's versions, environment block and GPUs, and the
worker settings (the all-reduce's own fingerprint inputs, without the boot ids: a reboot does not
make a baseline stale). A later ``--smoke`` run compares: a figure more than ``tolerance`` below the
baseline fails, naming the size or the link; a baseline taken on other nodes, versions or settings
is reported as not comparable and never used. Plain Python, no Ansible import.
"""

from __future__ import annotations

import time

SCHEMA = 1
# The default tolerance: 10% below the baseline fails. Chosen from repeated runs on the lab (README:
# "Finding the bad node"): healthy runs of the same 2-node lab spread busbw at 64 MiB by about
# +-6% around their median, so 10% stays clear of that noise while a degraded link (-50% or worse)
# is far past it.
DEFAULT_TOLERANCE = 0.10


def context(inputs):
    """What the figures depend on, from the run's fingerprint inputs (boot ids left out)."""
    inputs = inputs or {}
    nodes = {}
    for name, node in (inputs.get("nodes") or {}).items():
        nodes[name] = {k: v for k, v in node.items() if k != "boot_id"}
    return {"config": inputs.get("config") or {}, "python": inputs.get("python"), "nodes": nodes}


def _differences(old, new, prefix=""):
    out = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, "%s%s." % (prefix, key))
        else:
            out.append("%s%s" % (prefix, key))
    return out


def make(result, saved_at=None):
    """The baseline record of one green all-reduce result (the allreduce_smoke report)."""
    return {
        "schema": SCHEMA,
        "saved_at": time.time() if saved_at is None else saved_at,
        "context": context(result.get("fingerprint_inputs")),
        "rows": [{"bytes": r["bytes"], "busbw": r["busbw"]} for r in result.get("rows") or []],
        "busbw_gbps": result.get("busbw_gbps"),
        "links": [{"src": p.get("src"), "dst": p.get("dst"), "gbps": p.get("gbps")}
                  for p in result.get("tcp_ring") or [] if p.get("gbps")],
    }


def comparable(baseline, result):
    """(True, []) or (False, [what differs]) between a baseline and a new run."""
    if not isinstance(baseline, dict) or baseline.get("schema") != SCHEMA:
        return False, ["no baseline of this schema"]
    old, new = baseline.get("context") or {}, context(result.get("fingerprint_inputs"))
    if set((old.get("nodes") or {})) != set(new.get("nodes") or {}):
        return False, ["the node set: %s then, %s now" % (",".join(sorted(old.get("nodes") or {})),
                                                         ",".join(sorted(new.get("nodes") or {})))]
    diff = _differences(old, new)
    return (not diff), diff


def compare(baseline, result, master, tolerance=DEFAULT_TOLERANCE):
    """Check records of a run against its baseline (the caller made sure it is comparable)."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(baseline.get("saved_at") or 0))
    out = []
    old_rows = {r["bytes"]: r["busbw"] for r in baseline.get("rows") or []}
    slow = []
    for row in result.get("rows") or []:
        ref = old_rows.get(row["bytes"])
        if ref and row.get("busbw") is not None and row["busbw"] < (1 - tolerance) * ref:
            slow.append("%d B: %.3g GB/s, %.0f%% below %.3g" % (row["bytes"], row["busbw"],
                                                                100 * (1 - row["busbw"] / ref), ref))
    if slow:
        out.append({"check": "allreduce baseline", "status": "fail", "node": master,
                    "detail": "busbw below the baseline of %s (tolerance %.0f%%): %s" % (when, 100 * tolerance,
                                                                                        "; ".join(slow)),
                    "fix": "find the slow node or link (the pair search below, the fabric/GPU checks); if the "
                           "cluster changed on purpose, save a new baseline (provision verify --smoke --save-baseline)"})
    old_links = {(lk["src"], lk["dst"]): lk["gbps"] for lk in baseline.get("links") or []}
    for probe in result.get("tcp_ring") or []:
        ref = old_links.get((probe.get("src"), probe.get("dst")))
        got = probe.get("gbps")
        if ref and got is not None and got < (1 - tolerance) * ref:
            out.append({"check": "link %s->%s baseline" % (probe["src"], probe["dst"]), "status": "fail",
                        "node": probe["src"],
                        "detail": "%s -> %s carries %.3g GB/s with every link busy, %.0f%% below the baseline %.3g "
                                  "GB/s of %s" % (probe["src"], probe["dst"], got, 100 * (1 - got / ref), ref, when),
                        "fix": "check %s's cluster interface (ethtool/ip -s link: errors, speed, MTU, a qdisc) and "
                               "the path to %s" % (probe["src"], probe["dst"])})
    if not out:
        out.append({"check": "allreduce baseline", "status": "pass", "node": master, "fix": "",
                    "detail": "within %.0f%% of the baseline of %s (busbw %.3g GB/s then, %s now)" % (
                        100 * tolerance, when, baseline.get("busbw_gbps") or 0, result.get("busbw_gbps"))})
    return out
