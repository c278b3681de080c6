"""Finding the bad node on a real 4-node lab (issue 21): a link limited to a tenth, a changed MTU and a
frozen node, each named by `provision verify` (node, link or value) with exit 1, and the healthy state
back after the fault is removed; a saved baseline, a degraded run flagged against it, and a run on
another node set reported as not comparable.

The faults are made from the controller in the nodes' network namespaces (`provision lab fault`): the
nodes are not told. Every test clears its fault before it ends.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import bounds
from helpers import LAB_INVENTORY, REPO, ansible_env, lab_cmd, tool

pytestmark = pytest.mark.lab

# the 60 s from the fault's run start is measured in benchmarks (the machine's load moves it);
# here: a fault is named without waiting out verify's bound (bounds.well_before)
# the lab's healthy runs spread -8%/+30% around their median at 64 MiB, and one link's TCP figure 0.41-1.31
# GB/s (shared cores: docs/performance.md, "Finding the bad node"); a CI run measured a healthy 64 MiB
# busbw 53% below a one-run baseline (2026-11-27), while a link at a tenth costs -87% of busbw and -90% of
# the link: 0.7 sits between the two for busbw, 0.75 for the links
LAB_TOLERANCE = "0.7"
LAB_LINK_TOLERANCE = "0.75"
TOLERANCES = ("-e", f"verify_baseline_tolerance={LAB_TOLERANCE}", "-e", f"verify_baseline_link_tolerance={LAB_LINK_TOLERANCE}")


def verify(lab, *args: str, timeout: float = bounds.VERIFY) -> tuple[int, dict, float]:
    t0 = time.monotonic()
    proc = subprocess.run([tool("provision"), "verify", "-i", str(LAB_INVENTORY), "--json", *args],
                          cwd=REPO, env=ansible_env(lab.name), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout), time.monotonic() - t0


def failures(doc) -> list[dict]:
    return [c for c in doc["checks"] if c["status"] == "fail"]


@pytest.fixture(scope="module")
def lab(four_node_lab):
    baseline = REPO / "inventory" / "lab" / ".provision" / "baseline.json"
    baseline.unlink(missing_ok=True)
    yield four_node_lab
    for node in ("node2", "node3"):
        lab_cmd("fault", node, "--clear", lab_name=four_node_lab.name, check=False)
    baseline.unlink(missing_ok=True)


def test_healthy_run_saves_a_baseline_with_per_node_figures(lab):
    for _ in range(3):                                 # a baseline of three runs: the median of each figure
        rc, doc, _unused = verify(lab, "--smoke", "--save-baseline", *TOLERANCES)
        assert rc == 0, failures(doc)
    smoke = doc["allreduce"]
    assert smoke["status"] == "pass" and smoke["world_size"] == 4
    assert set(smoke["per_node"]) == {"node1", "node2", "node3", "node4"}
    assert all(f["out_ring_gbps"] > 0 for f in smoke["per_node"].values())
    assert {(lk["src"], lk["dst"]) for lk in smoke["links"]} >= {("node1", "node2"), ("node4", "node1")}
    assert smoke["baseline"]["saved"] is True
    saved = json.loads((REPO / "inventory" / "lab" / ".provision" / "baseline.json").read_text())
    assert len(saved["samples"]) == 3 and smoke["baseline"]["link_tolerance"] == float(LAB_LINK_TOLERANCE)


def test_a_link_limited_to_a_tenth_is_named_by_pairs_and_against_the_baseline(lab):
    saved = json.loads((REPO / "inventory" / "lab" / ".provision" / "baseline.json").read_text())
    ring = min(lk["gbps"] for lk in saved["links"])
    rate = "%dmbit" % max(50, int(ring * 8000 / 10))          # a tenth of what the links carry at once
    lab_cmd("fault", "node3", "--rate", rate, lab_name=lab.name)
    try:
        rc, doc, took = verify(lab, "--smoke", *TOLERANCES)
    finally:
        lab_cmd("fault", "node3", "--clear", lab_name=lab.name)
    assert rc == 1 and bounds.well_before(took, bounds.VERIFY), took
    smoke = doc["allreduce"]
    assert smoke["isolation"]["bad"] == ["node3"], smoke["isolation"]
    bad = [c for c in failures(doc) if c["check"] == "allreduce bad_node"]
    assert bad and bad[0]["detail"].startswith("node3: every pair it was in was bad") and "GB/s" in bad[0]["detail"]
    assert any("node3" in (lk["src"], lk["dst"]) for lk in smoke["slow_links"])
    against = [c for c in failures(doc) if "baseline" in c["check"]]
    assert against and smoke["baseline"]["comparable"] is True
    rc, doc, _ = verify(lab, "--smoke", *TOLERANCES)
    assert rc == 0, failures(doc)                      # healthy again once the fault is gone


def test_a_changed_mtu_fails_naming_the_node_and_the_value(lab):
    lab_cmd("fault", "node2", "--mtu", "1400", lab_name=lab.name)
    try:
        rc, doc, took = verify(lab, "--only", "consistency")
    finally:
        lab_cmd("fault", "node2", "--clear", lab_name=lab.name)
    assert rc == 1 and bounds.well_before(took, bounds.VERIFY)
    (c,) = [c for c in failures(doc) if c["check"] == "consistency"]
    assert c["node"] == "node2" and c["detail"].startswith("MTU of the NCCL interface 1400 while 3 other node(s) have")
    rc, doc, _ = verify(lab, "--only", "consistency")
    assert rc == 0, failures(doc)


def test_a_frozen_node_is_named_and_nothing_waits_for_it(lab):
    lab_cmd("fault", "node2", "--freeze", lab_name=lab.name)
    try:
        rc, doc, took = verify(lab, "--smoke", *TOLERANCES)
    finally:
        lab_cmd("fault", "node2", "--clear", lab_name=lab.name)
    assert rc == 1 and bounds.well_before(took, bounds.VERIFY), took
    reach = [c for c in failures(doc) if c["check"] == "node reachable"]
    assert [c["node"] for c in reach] == ["node2"] and "did not answer (frozen" in reach[0]["detail"]
    assert "node2" in doc["allreduce"]["isolation"]["bad"]
    assert [n["reachable"] for n in doc["nodes"]] == [True, False, True, True]


def test_a_baseline_of_another_node_set_is_not_comparable(lab):
    rc, doc, _ = verify(lab, "--smoke", "--limit", "node1,node2,node3", *TOLERANCES)
    base = doc["allreduce"]["baseline"]
    assert base["comparable"] is False and base["differences"][0].startswith("the node set:")
    assert any(c["check"] == "allreduce baseline" and c["status"] == "warn" and "not comparable" in c["detail"]
               for c in doc["checks"])
