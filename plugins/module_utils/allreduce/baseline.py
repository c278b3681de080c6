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

import json
import os
import tempfile
import time

SCHEMA = 1
# A baseline keeps up to MAX_SAMPLES runs (each --save-baseline on the same cluster adds one) and is
# compared through their median per figure, which a single lucky or unlucky run cannot move. The
# tolerances are settings (verify_baseline_tolerance, verify_baseline_link_tolerance): their defaults, and
# how they were chosen, are in roles/verify/defaults/main.yml.
MAX_SAMPLES = 5
# Message sizes at or above this are bandwidth-bound: their busbw is the cluster's bandwidth, and a
# drop below the baseline fails. Below it a call's time is mostly per-call latency, which moves with the
# load on the nodes far more than bandwidth does (the lab, healthy: 1 MiB 64% below a one-run baseline
# while 64 MiB was within it), so a drop there only warns. When every size is smaller, the largest is
# judged as the bandwidth figure.
BANDWIDTH_MIN_BYTES = 16 << 20


def save(path, document):
    """Write the baseline (JSON) to path atomically through a temporary file that mkstemp makes
    (O_EXCL, 0600, a random name in the same directory): a predictable `path.PID.tmp` could be a link
    planted there by another user, and the write would go through it (issue 31)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    finally:
        if tmp is not None:
            os.unlink(tmp)


def context(inputs):
    """What the figures depend on, from the run's fingerprint inputs (boot ids left out)."""
    inputs = inputs or {}
    nodes = {}
    for name, node in (inputs.get("nodes") or {}).items():
        nodes[name] = {k: v for k, v in node.items() if k != "boot_id"}
    return {"config": inputs.get("config") or {}, "python": inputs.get("python"), "nodes": nodes}


def differences(old, new, prefix=""):
    """Dotted names of what differs between two nested dicts (fingerprint inputs, baseline contexts)."""
    out = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, "%s%s." % (prefix, key))
        else:
            out.append("%s%s" % (prefix, key))
    return out


def _sample(result, saved_at):
    return {"saved_at": saved_at,
            "rows": {str(r["bytes"]): r["busbw"] for r in result.get("rows") or [] if r.get("busbw") is not None},
            "links": {"%s>%s" % (p.get("src"), p.get("dst")): p.get("gbps")
                      for p in result.get("tcp_ring") or [] if p.get("gbps")}}


def _median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2.0


def make(result, saved_at=None, old=None):
    """The baseline after one more green run: its figures added to the samples of a comparable earlier
    baseline (at most MAX_SAMPLES, the newest kept), or a new baseline of this run alone."""
    now = time.time() if saved_at is None else saved_at
    samples = list((old or {}).get("samples") or []) if old is not None and comparable(old, result)[0] else []
    samples = (samples + [_sample(result, now)])[-MAX_SAMPLES:]
    rows = [{"bytes": int(b), "busbw": _median([s["rows"].get(b) for s in samples])}
            for b in sorted({b for s in samples for b in s["rows"]}, key=int)]
    links = []
    for key in sorted({k for s in samples for k in s["links"]}):
        src, _unused, dst = key.partition(">")
        links.append({"src": src, "dst": dst, "gbps": _median([s["links"].get(key) for s in samples])})
    return {"schema": SCHEMA, "saved_at": now, "context": context(result.get("fingerprint_inputs")),
            "samples": samples, "rows": rows, "links": links,
            "busbw_gbps": _median([r["busbw"] for r in rows[-1:]]) if rows else None}


def no_figures(result):
    """Why a run cannot be judged against a baseline at all, or None: with no all-node figures (a node
    dropped out before the all-reduce, which then did not run) there is nothing to compare, and calling
    it another node set would send the user to save a new baseline."""
    result = result or {}
    if result.get("rows"):
        return None
    dropped = result.get("dropped") or []   # the nodes that did not answer before the run (allreduce_smoke)
    return "no all-node figures in this run to compare: the all-reduce did not run%s" % (
        " (%s dropped out)" % ", ".join(dropped) if dropped else "")


def comparable(baseline, result):
    """(True, []) or (False, [what differs]) between a baseline and a new run."""
    if not isinstance(baseline, dict) or baseline.get("schema") != SCHEMA:
        return False, ["no baseline of this schema"]
    old, new = baseline.get("context") or {}, context(result.get("fingerprint_inputs"))
    if set((old.get("nodes") or {})) != set(new.get("nodes") or {}):
        return False, ["the node set: %s then, %s now" % (",".join(sorted(old.get("nodes") or {})),
                                                          ",".join(sorted(new.get("nodes") or {})))]
    diff = differences(old, new)
    return (not diff), diff


def compare(baseline, result, master, tolerance, link_tolerance):
    """Check records of a run against its baseline (the caller made sure it is comparable): busbw per
    size within ``tolerance``, each link of the ring probe within ``link_tolerance``."""
    when = "%s (median of %d run%s)" % (time.strftime("%Y-%m-%d %H:%M", time.localtime(baseline.get("saved_at") or 0)),
                                        len(baseline.get("samples") or [1]),
                                        "" if len(baseline.get("samples") or [1]) == 1 else "s")
    out = []
    old_rows = {r["bytes"]: r["busbw"] for r in baseline.get("rows") or []}
    rows = result.get("rows") or []
    floor = min(BANDWIDTH_MIN_BYTES, max([r["bytes"] for r in rows] or [0]))
    slow, small = [], []
    for row in rows:
        ref = old_rows.get(row["bytes"])
        if ref and row.get("busbw") is not None and row["busbw"] < (1 - tolerance) * ref:
            (slow if row["bytes"] >= floor else small).append(
                "%d B: %.3g GB/s, %.0f%% below %.3g" % (row["bytes"], row["busbw"], 100 * (1 - row["busbw"] / ref), ref))
    if slow:
        out.append({"check": "allreduce baseline", "status": "fail", "node": master,
                    "detail": "busbw below the baseline of %s (tolerance %.0f%%): %s" % (when, 100 * tolerance,
                                                                                         "; ".join(slow)),
                    "fix": "find the slow node or link (the pair search below, the fabric/GPU checks); if the "
                           "cluster changed on purpose, save a new baseline (provision verify --smoke --save-baseline)"})
    if small:
        out.append({"check": "allreduce baseline small sizes", "status": "warn", "node": master,
                    "detail": "latency-bound sizes (below %d B) slower than the baseline of %s (tolerance %.0f%%): %s"
                              % (floor, when, 100 * tolerance, "; ".join(small)),
                    "fix": "if it repeats on an idle cluster, look for load on the nodes or a changed transport "
                           "(NCCL_DEBUG=INFO: NET/IB or NET/Socket); a drop at the large sizes is what fails"})
    old_links = {(lk["src"], lk["dst"]): lk["gbps"] for lk in baseline.get("links") or []}
    for probe in result.get("tcp_ring") or []:
        ref = old_links.get((probe.get("src"), probe.get("dst")))
        got = probe.get("gbps")
        if ref and got is not None and got < (1 - link_tolerance) * ref:
            out.append({"check": "link %s->%s baseline" % (probe["src"], probe["dst"]), "status": "fail",
                        "node": probe["src"],
                        "detail": "%s -> %s carries %.3g GB/s with every link busy, %.0f%% below the baseline %.3g "
                                  "GB/s of %s (link tolerance %.0f%%)" % (probe["src"], probe["dst"], got,
                                                                          100 * (1 - got / ref), ref, when,
                                                                          100 * link_tolerance),
                        "fix": "check %s's cluster interface (ethtool/ip -s link: errors, speed, MTU, a qdisc) and "
                               "the path to %s" % (probe["src"], probe["dst"])})
    if not any(c["status"] == "fail" for c in out):
        sizes = " at %d B and above" % floor if small else ""
        out.append({"check": "allreduce baseline", "status": "pass", "node": master, "fix": "",
                    "detail": "within %.0f%% of the baseline of %s%s, each link within %.0f%% (busbw %.3g GB/s "
                              "then, %s now)" % (100 * tolerance, when, sizes, 100 * link_tolerance,
                                                 baseline.get("busbw_gbps") or 0, result.get("busbw_gbps"))})
    return out
