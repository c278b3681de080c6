# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Find the bad node: when the all-node collective fails, hangs or is slow, run it in disjoint pairs
and name the node (and its link) whose pairs fail or are slow, from the figures that show it.

Plain Python, no Ansible import. The allreduce_smoke role runs the rounds (every pair of a round at
the same time, each bounded by a timeout); this file decides the pairs of each round from the
rounds before it, and the verdict.

A round is {"pairs": [[a, b], ...], "results": {"a+b": {"status": "ok"|"failed"|"timeout",
"busbw": GB/s|None, "detail": str}}}. A pair is *bad* when it failed, timed out, or is slower than
``(1 - tolerance)`` of the reference busbw (the median of the pairs that worked, or the baseline's
pair figure). A node is *good* once it was in a good pair; a *suspect* until then.

Round 1 pairs neighbours in inventory order (N/2 pairs at once). Every later round pairs each
suspect that has not yet been paired with a known-good node with one, a different good node per
suspect (as many rounds as it takes when suspects outnumber the good nodes, at most
``max_rounds``). A suspect whose pair with a good node is bad is named; one whose pair with a good
node is good is cleared (its first partner was the bad one). With no good pair at all the fault is
not one node: the verdict says so.
"""

from __future__ import annotations

import statistics

DEFAULT_TOLERANCE = 0.5   # a pair below half the healthy pairs' busbw is slow (see judge_pairs)
MAX_ROUNDS = 4


def pair_key(a, b):
    return "%s+%s" % (a, b)


def first_round(nodes):
    """Neighbours in inventory order; an odd node out waits for the next round."""
    nodes = list(nodes)
    return [[nodes[i], nodes[i + 1]] for i in range(0, len(nodes) - 1, 2)]


def judge_pairs(rounds, tolerance=DEFAULT_TOLERANCE, reference=None):
    """Every pair result of every round marked ok/bad -> (marked list, reference busbw).

    reference: a known-good pair busbw (the baseline's); default the median of the faster half of the
    pairs that completed (half the pairs of a round can hold a bad node: the plain median would be
    dragged down by them). tolerance 0.5 flags a pair at less than half of it: what a degraded link
    (a 1X port, a lost lane, TCP fallback, a link limited by a fault) costs, far below the run-to-run
    noise of a healthy pair (docs/verify.md: "Finding the bad node").

    Each round is judged against the pairs of that round and the rounds before it, never the later ones:
    a later round runs fewer pairs at once, and where the pairs share CPUs (a lab, oversubscribed nodes)
    it runs faster (32 lab nodes on 2 cores: 0.04-0.09 GB/s with 15 pairs at once, 0.3-0.5 with 2);
    judged by those, pairs that cleared their nodes in round 1 turned bad afterwards, and healthy nodes
    were named "not yet paired with a healthy node". The verdict is the one the rounds were planned on.
    """
    done, ref, marked = [], reference, []
    for i, rnd in enumerate(rounds):
        done = sorted(done + [r["busbw"] for r in (rnd.get("results") or {}).values()
                              if r.get("status") == "ok" and r.get("busbw")])
        ref = reference or (statistics.median(done[len(done) // 2:]) if done else None)
        for a, b in rnd.get("pairs") or []:
            r = (rnd.get("results") or {}).get(pair_key(a, b)) or {"status": "failed", "detail": "no result"}
            bad = r.get("status") != "ok"
            slow = bool(not bad and ref and r.get("busbw") is not None and r["busbw"] < (1 - tolerance) * ref)
            marked.append({"round": i + 1, "pair": [a, b], "status": r.get("status"), "busbw": r.get("busbw"),
                           "detail": r.get("detail") or "", "bad": bad or slow, "slow": slow})
    return marked, ref


def _standing(nodes, marked):
    good = {n for m in marked if not m["bad"] for n in m["pair"]}
    # a suspect is cleared by a good pair with a good node, named by a bad one
    tested = {}
    for m in marked:
        a, b = m["pair"]
        for me, other in ((a, b), (b, a)):
            if me not in good and other in good:
                tested.setdefault(me, []).append(m)
    return good, tested


def next_round(nodes, rounds, tolerance=DEFAULT_TOLERANCE, reference=None, max_rounds=MAX_ROUNDS):
    """The pairs of the next round, or [] when the verdict can be given (or no round is left)."""
    nodes = list(nodes)
    if not rounds:
        return first_round(nodes)
    if len(rounds) >= max_rounds:
        return []
    marked, _ref = judge_pairs(rounds, tolerance, reference)
    good, tested = _standing(nodes, marked)
    if not good:
        return []
    suspects = [n for n in nodes if n not in good and n not in tested]
    helpers = [n for n in nodes if n in good]
    out = []
    for suspect, helper in zip(suspects, helpers):
        out.append([helper, suspect])
    return out


def verdict(nodes, rounds, tolerance=DEFAULT_TOLERANCE, reference=None, timeout=None):
    """-> {"bad": [{node, detail, evidence}], "cleared": [...], "pairs": marked, "reference", "summary"}."""
    nodes = list(nodes)
    marked, ref = judge_pairs(rounds, tolerance, reference)
    good, tested = _standing(nodes, marked)
    bad, cleared = [], []
    if not marked:
        return {"bad": [], "cleared": [], "pairs": [], "reference": ref, "summary": "no pair ran"}
    if not good:
        why = ("with 2 nodes the pair is the whole cluster: which node is bad cannot be told by pairs"
               if len(nodes) < 3 else "no pair was healthy: not one bad node but the whole network (switch, MTU, "
                                      "firewall) or most nodes are affected")
        return {"bad": [], "cleared": [], "pairs": marked, "reference": ref, "summary": why}
    pairs_of = {}  # node -> the marked pairs it was in, in their order (a scan of them per node is N x N)
    for m in marked:
        for n in dict.fromkeys(m["pair"]):
            pairs_of.setdefault(n, []).append(m)
    for n in nodes:
        if n in good:
            continue
        mine = pairs_of.get(n, [])
        with_good = tested.get(n) or []
        if not mine:
            continue
        if with_good and all(m["bad"] for m in with_good):
            bad.append({"node": n, "detail": _evidence(n, mine, ref, timeout), "pairs": mine})
        elif not with_good:
            bad.append({"node": n, "detail": _evidence(n, mine, ref, timeout) + " (not yet paired with a healthy node)",
                        "pairs": mine, "unconfirmed": True})
    summary = "; ".join(b["detail"] for b in bad) if bad else "every node worked in a pair with a healthy node"
    return {"bad": bad, "cleared": cleared, "pairs": marked, "reference": ref, "summary": summary}


def _evidence(node, mine, ref, timeout):
    partners = [m["pair"][1] if m["pair"][0] == node else m["pair"][0] for m in mine]
    if all(m["status"] == "timeout" for m in mine):
        return "%s did not answer within %s s in pairs with %s" % (
            node, "%g" % timeout if timeout else "the time limit", " and ".join(partners))
    parts = []
    for m, other in zip(mine, partners):
        if m["status"] == "ok":
            parts.append("with %s %.3g GB/s busbw" % (other, m["busbw"]))
        elif m["status"] == "timeout":
            parts.append("with %s no answer in time" % other)
        else:
            parts.append("with %s failed (%s)" % (other, m["detail"] or "no result"))
    healthy = " against %.3g GB/s of the healthy pairs" % ref if ref else ""
    return "%s: every pair it was in was bad: %s%s" % (node, "; ".join(parts), healthy)


def slowest_links(links, tolerance=DEFAULT_TOLERANCE):
    """Per-link figures [{src, dst, gbps}] (the ring probe: every node sending to the next at once) ->
    the links below (1 - tolerance) x the median, slowest first."""
    ok = [lk for lk in links if lk.get("gbps")]
    if len(ok) < 2:
        return []
    med = statistics.median(lk["gbps"] for lk in ok)
    return sorted([lk for lk in ok if lk["gbps"] < (1 - tolerance) * med], key=lambda lk: lk["gbps"])
