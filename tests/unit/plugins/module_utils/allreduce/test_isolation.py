"""Finding the bad node by pairs (plugins/module_utils/allreduce/isolation.py): the rounds and the verdict."""

from __future__ import annotations

import helpers  # noqa: F401
from ansible_collections.provision.cluster.plugins.module_utils.allreduce import isolation as I

NODES = ["n1", "n2", "n3", "n4"]


def play(nodes, bad=(), slow=(), hang=(), healthy=0.6, max_rounds=4):
    """Run the rounds against a simulated cluster: a pair with a bad node fails, with a slow one runs
    at a tenth, with a hanging one times out."""
    rounds = []
    while True:
        pairs = I.next_round(nodes, rounds, max_rounds=max_rounds)
        if not pairs:
            return rounds, I.verdict(nodes, rounds, timeout=30)
        results = {}
        for a, b in pairs:
            if a in hang or b in hang:
                results[I.pair_key(a, b)] = {"status": "timeout", "busbw": None}
            elif a in bad or b in bad:
                results[I.pair_key(a, b)] = {"status": "failed", "busbw": None, "detail": "Connection refused"}
            else:
                bw = healthy / 10 if (a in slow or b in slow) else healthy
                results[I.pair_key(a, b)] = {"status": "ok", "busbw": bw}
        rounds.append({"pairs": pairs, "results": results})


def test_one_slow_link_is_named_in_two_rounds_with_the_figures():
    rounds, v = play(NODES, slow={"n3"})
    assert [r["pairs"] for r in rounds] == [[["n1", "n2"], ["n3", "n4"]], [["n1", "n3"], ["n2", "n4"]]]
    assert [b["node"] for b in v["bad"]] == ["n3"]
    assert v["bad"][0]["detail"] == ("n3: every pair it was in was bad: with n4 0.06 GB/s busbw; with n1 0.06 GB/s "
                                     "busbw against 0.6 GB/s of the healthy pairs")


def test_a_frozen_node_is_named_as_not_answering_within_the_time_limit():
    _rounds, v = play(NODES, hang={"n2"})
    assert [b["node"] for b in v["bad"]] == ["n2"]
    assert v["bad"][0]["detail"] == "n2 did not answer within 30 s in pairs with n1 and n4"


def test_a_failing_node_in_an_odd_cluster_and_the_odd_node_out():
    nodes = ["a", "b", "c", "d", "e"]
    rounds, v = play(nodes, bad={"e"})
    assert rounds[0]["pairs"] == [["a", "b"], ["c", "d"]]          # e waits: odd node out
    assert ["a", "e"] in rounds[1]["pairs"]
    assert [b["node"] for b in v["bad"]] == ["e"] and "failed (Connection refused)" in v["bad"][0]["detail"]
    rounds, v = play(nodes)
    assert v["bad"] == [] and v["summary"] == "every node worked in a pair with a healthy node"


def test_two_bad_nodes_and_a_cluster_wide_fault():
    _rounds, v = play(["n%d" % i for i in range(1, 9)], slow={"n2", "n7"})
    assert [b["node"] for b in v["bad"]] == ["n2", "n7"]
    _rounds, v = play(NODES, bad=set(NODES))
    assert v["bad"] == [] and "not one bad node but the whole network" in v["summary"]
    _rounds, v = play(["n1", "n2"], bad={"n2"})
    assert "which node is bad cannot be told by pairs" in v["summary"]


def test_rounds_are_bounded():
    nodes = ["n%d" % i for i in range(1, 9)]
    rounds, v = play(nodes, slow={"n1", "n2", "n3", "n4", "n5"}, max_rounds=2)
    assert len(rounds) <= 2
    assert all(b.get("unconfirmed") or b["node"] for b in v["bad"])


def test_slowest_links_of_the_ring_probe():
    links = [{"src": "n1", "dst": "n2", "gbps": 1.0}, {"src": "n2", "dst": "n3", "gbps": 0.95},
             {"src": "n3", "dst": "n4", "gbps": 0.1}, {"src": "n4", "dst": "n1", "gbps": 1.02}]
    assert I.slowest_links(links) == [{"src": "n3", "dst": "n4", "gbps": 0.1}]
    assert I.slowest_links(links[:1]) == []


def test_many_bad_nodes_each_named_with_every_pair_it_was_in():
    """A quarter of 400 nodes slow: each is named with the pairs it was in, in the order they ran (the
    verdict indexes the pairs by node once instead of scanning every pair for every suspect)."""
    nodes = ["n%d" % i for i in range(1, 401)]
    slow = set(nodes[3::4])
    rounds, v = play(nodes, slow=slow)
    assert {b["node"] for b in v["bad"]} == slow and [b["node"] for b in v["bad"]] == [n for n in nodes if n in slow]
    marked, _ref = I.judge_pairs(rounds)
    for b in v["bad"]:
        assert b["pairs"] == [m for m in marked if b["node"] in m["pair"]]
        assert b["detail"].startswith("%s: every pair it was in was bad: with " % b["node"])


def test_nodes_that_dropped_out_are_named_in_inventory_order():
    from ansible_collections.provision.cluster.plugins.filter.allreduce_smoke import (allreduce_smoke_isolated,
                                                                                      allreduce_smoke_unreachable)

    nodes = ["n%d" % i for i in range(1, 301)]
    gone = ["n7", "n150", "n300"]
    answered = (n for n in nodes if n not in gone)  # a generator, as Jinja may hand it over
    result = allreduce_smoke_unreachable(nodes, answered)["result"]
    assert [f["node"] for f in result["failures"]] == gone and result["nodes"] == 300
    reachable = [n for n in nodes if n not in gone]
    rounds, _v = play(reachable, slow={"n10"})
    out = allreduce_smoke_isolated({"failures": [], "status": "pass"}, rounds, nodes, iter(reachable), 30)
    assert out["isolation"]["bad"] == gone + ["n10"]
    assert [f["node"] for f in out["failures"] if f.get("node")] == gone
    # a pair that ran but was judged slow says so ("ok 0.06 GB/s" read as healthy in the view and the report)
    first = out["isolation"]["rounds"][0]
    outcome = dict(zip(map(tuple, first["pairs"]), first["outcome"]))
    assert outcome[("n10", "n11")] == "slow 0.06 GB/s" and outcome[("n1", "n2")] == "ok 0.6 GB/s"   # n7 is gone


def test_a_later_faster_round_does_not_turn_the_pairs_of_an_earlier_one_bad():
    """Pairs that share CPUs (the 32-node lab on 2 cores) run faster when a round runs fewer of them: 15
    pairs at once gave 0.04-0.09 GB/s, 2 pairs 0.3-0.5. Judged by the later rounds, round 1's healthy
    pairs turned bad after the fact and healthy nodes were named "not yet paired with a healthy node"
    (2026-11-27). Each round is judged by the pairs up to it: only the slow node is named."""
    nodes = [f"n{i}" for i in range(1, 17)]
    noise = {("n5", "n6"): 0.33, ("n7", "n8"): 0.4, ("n9", "n10"): 0.66}   # round 1 only: two pairs below half
    rounds = []
    while True:
        pairs = I.next_round(nodes, rounds)
        if not pairs:
            break
        healthy = 0.48 / len(pairs)                                         # the CPUs shared by every pair
        results = {}
        for a, b in pairs:
            bw = healthy * (0.1 if "n3" in (a, b) else noise.get((a, b), 1.0) if not rounds else 1.0)
            results[I.pair_key(a, b)] = {"status": "ok", "busbw": round(bw, 4)}
        rounds.append({"pairs": pairs, "results": results})
    assert [len(r["pairs"]) for r in rounds] == [8, 6]                     # 6 suspects retested, fast
    v = I.verdict(nodes, rounds, timeout=30)
    assert [b["node"] for b in v["bad"]] == ["n3"], v["summary"]
    marked, _ref = I.judge_pairs(rounds)
    assert [m["pair"] for m in marked if m["bad"]] == [["n3", "n4"], ["n5", "n6"], ["n7", "n8"], ["n1", "n3"]]
