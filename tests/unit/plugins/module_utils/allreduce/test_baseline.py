"""The cluster's own baseline (plugins/module_utils/allreduce/baseline.py)."""

from __future__ import annotations

import copy

import helpers  # noqa: F401
from ansible_collections.provision.cluster.plugins.module_utils.allreduce import baseline as B
from ansible_collections.provision.cluster.plugins.module_utils.common.settings import default

# the defaults the verify role writes (verify_baseline_tolerance 0.10, verify_baseline_link_tolerance 0.25)
TOLERANCES = (default("verify_baseline_tolerance"), default("verify_baseline_link_tolerance"))

INPUTS = {"config": {"backend": "gloo", "sizes": ["64M"]}, "python": "/opt/provision/venv/bin/python",
          "nodes": {"n1": {"rank": 0, "address": "10.0.0.1", "versions": {"torch": "2.13.0"}, "boot_id": "a"},
                    "n2": {"rank": 1, "address": "10.0.0.2", "versions": {"torch": "2.13.0"}, "boot_id": "b"}}}
GREEN = {"status": "pass", "busbw_gbps": 0.6, "fingerprint_inputs": INPUTS,
         "rows": [{"bytes": 1 << 20, "busbw": 0.2}, {"bytes": 64 << 20, "busbw": 0.6}],
         "tcp_ring": [{"src": "n1", "dst": "n2", "gbps": 1.0}, {"src": "n2", "dst": "n1", "gbps": 1.1}]}


def test_a_run_like_the_baseline_passes_and_a_reboot_does_not_make_it_stale():
    base = B.make(GREEN, saved_at=0)
    later = copy.deepcopy(GREEN)
    later["fingerprint_inputs"]["nodes"]["n1"]["boot_id"] = "rebooted"
    later["rows"][1]["busbw"] = 0.57                       # 5% slower: within 10%
    assert B.comparable(base, later) == (True, [])
    (c,) = B.compare(base, later, "n1", *TOLERANCES)
    assert c["status"] == "pass" and c["detail"].startswith("within 10% of the baseline")


def test_a_slower_run_and_a_slower_link_fail_naming_size_and_link():
    base = B.make(GREEN, saved_at=0)
    slow = copy.deepcopy(GREEN)
    slow["rows"][1]["busbw"] = 0.3
    slow["tcp_ring"][1]["gbps"] = 0.1
    out = {c["check"]: c for c in B.compare(base, slow, "n1", *TOLERANCES)}
    assert out["allreduce baseline"]["status"] == "fail"
    assert "67108864 B: 0.3 GB/s, 50% below 0.6" in out["allreduce baseline"]["detail"]
    link = out["link n2->n1 baseline"]
    assert link["node"] == "n2" and "n2 -> n1 carries 0.1 GB/s with every link busy, 91% below the baseline 1.1" \
        in link["detail"] and "(link tolerance 25%)" in link["detail"]


def test_a_link_has_its_own_wider_tolerance():
    base = B.make(GREEN, saved_at=0)
    jitter = copy.deepcopy(GREEN)
    jitter["tcp_ring"][0]["gbps"] = 0.8                    # one TCP stream 20% below: within 25%
    (c,) = B.compare(base, jitter, "n1", *TOLERANCES)
    assert c["status"] == "pass" and "each link within 25%" in c["detail"]
    jitter["rows"][1]["busbw"] = 0.48                      # busbw 20% below: beyond 10%
    assert [x["check"] for x in B.compare(base, jitter, "n1", *TOLERANCES)] == ["allreduce baseline"]
    # the lab's healthy run that failed CI: a link 51% below a one-run baseline, within the lab's 0.75
    lab = copy.deepcopy(GREEN)
    lab["tcp_ring"][0]["gbps"] = 0.485 / 0.981
    assert [x["check"] for x in B.compare(base, lab, "n1", *TOLERANCES) if x["status"] == "fail"] == ["link n1->n2 baseline"]
    assert B.compare(base, lab, "n1", 0.5, 0.75)[0]["status"] == "pass"


def test_another_node_set_or_version_is_not_comparable():
    base = B.make(GREEN, saved_at=0)
    other = copy.deepcopy(GREEN)
    other["fingerprint_inputs"]["nodes"]["n3"] = {"rank": 2}
    ok, why = B.comparable(base, other)
    assert not ok and why == ["the node set: n1,n2 then, n1,n2,n3 now"]
    newer = copy.deepcopy(GREEN)
    newer["fingerprint_inputs"]["nodes"]["n2"]["versions"]["torch"] = "2.14.0"
    newer["fingerprint_inputs"]["config"]["sizes"] = ["16M"]
    assert B.comparable(base, newer) == (False, ["config.sizes", "nodes.n2.versions.torch"])
    assert B.comparable(None, GREEN)[0] is False


def test_each_save_adds_a_sample_and_the_median_is_compared():
    base = B.make(GREEN, saved_at=0)
    lucky = copy.deepcopy(GREEN)
    lucky["rows"][1]["busbw"] = 0.9
    base = B.make(lucky, saved_at=1, old=base)
    base = B.make(GREEN, saved_at=2, old=base)
    assert len(base["samples"]) == 3 and base["rows"][1] == {"bytes": 64 << 20, "busbw": 0.6}
    usual = copy.deepcopy(GREEN)
    usual["rows"][1]["busbw"] = 0.56
    assert B.compare(base, usual, "n1", *TOLERANCES)[0]["status"] == "pass"   # a lucky run did not raise the bar
    other = copy.deepcopy(GREEN)
    other["fingerprint_inputs"]["nodes"]["n2"]["address"] = "10.0.0.9"
    assert len(B.make(other, saved_at=3, old=base)["samples"]) == 1  # another cluster: a new baseline
    for i in range(10):
        base = B.make(GREEN, saved_at=10 + i, old=base)
    assert len(base["samples"]) == B.MAX_SAMPLES


def test_a_drop_at_a_latency_bound_size_warns_and_a_drop_at_a_large_size_fails():
    base = B.make(GREEN, saved_at=0)
    # the lab's healthy run that failed CI once: 1 MiB 64% below a one-run baseline, 64 MiB within it
    noisy = copy.deepcopy(GREEN)
    noisy["rows"][0]["busbw"] = 0.072
    out = B.compare(base, noisy, "n1", *TOLERANCES)
    assert [(c["check"], c["status"]) for c in out] == [("allreduce baseline small sizes", "warn"),
                                                         ("allreduce baseline", "pass")]
    assert "1048576 B: 0.072 GB/s, 64% below 0.2" in out[0]["detail"] and "below 16777216 B" in out[0]["detail"]
    assert "at 16777216 B and above" in out[1]["detail"]
    both = copy.deepcopy(noisy)
    both["rows"][1]["busbw"] = 0.3
    out = {c["check"]: c for c in B.compare(base, both, "n1", *TOLERANCES)}
    assert out["allreduce baseline"]["status"] == "fail" and "1048576" not in out["allreduce baseline"]["detail"]
    assert out["allreduce baseline small sizes"]["status"] == "warn"
    # every size small (allreduce_smoke_sizes: [64K, 1M]): the largest is judged as the bandwidth figure
    small = {**GREEN, "rows": [{"bytes": 64 << 10, "busbw": 0.05}, {"bytes": 1 << 20, "busbw": 0.2}]}
    base = B.make(small, saved_at=0)
    slower = copy.deepcopy(small)
    slower["rows"][1]["busbw"] = 0.1
    (c,) = B.compare(base, slower, "n1", *TOLERANCES)
    assert c["status"] == "fail" and "1048576 B: 0.1 GB/s, 50% below 0.2" in c["detail"]


def test_saving_never_writes_through_a_link_planted_at_a_predictable_temporary_name(tmp_path):
    """issue 31 item 11: the baseline was written to `path.PID.tmp`, then renamed; a link planted at that
    name (the controller's pid is visible to every user) sent the write to the link's target."""
    import json
    import os

    from ansible_collections.provision.cluster.plugins.action.verify_report import ActionModule

    path = tmp_path / "baseline.json"
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (tmp_path / f"baseline.json.{os.getpid()}.tmp").symlink_to(victim)
    out = ActionModule._baseline(None, GREEN, {"baseline": str(path), "save_baseline": True}, "n1",
                                 default)
    assert out["saved"] is True and victim.read_text() == "keep me\n"
    assert json.loads(path.read_text())["schema"] == B.SCHEMA and oct(path.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["baseline.json", "victim", f"baseline.json.{os.getpid()}.tmp"])


def test_a_run_without_all_node_figures_is_not_judged_and_says_why():
    # a 32-node lab with node17 stopped: the all-reduce did not run; the run is no other node set
    assert B.no_figures(GREEN) is None
    from ansible_collections.provision.cluster.plugins.filter.allreduce_smoke import allreduce_smoke_unreachable

    nodes = [f"node{i}" for i in range(1, 33)]
    dropped = allreduce_smoke_unreachable(nodes, [n for n in nodes if n != "node17"])["result"]
    assert B.no_figures(dropped) == "no all-node figures in this run to compare: the all-reduce did not run (node17 dropped out)"
    assert B.no_figures({"rows": []}) == "no all-node figures in this run to compare: the all-reduce did not run"
