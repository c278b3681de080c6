# -*- coding: utf-8 -*-
# Copyright: contributors to provision.cluster
# Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
name: allreduce_smoke_reuse
short_description: Decide whether the last green all-reduce still stands for the cluster
description:
  - Input is the last result (the C(allreduce_smoke_result) fact the smoke test left on the master,
    kept in the fact cache), or none. Returns C({run, reason, lines, result}). C(run) is false only
    when O(reuse) is true and the last result was green, has the fingerprint of O(inputs) and is
    younger than O(max_age) seconds; C(lines) then is its table with a line saying why it stands.
  - The decision is module_utils.allreduce.allreduce_smoke.reuse_decision, the same one the tests exercise.
positional: inputs
options:
  _input:
    description: The last result, or none.
    type: dict
    required: true
  inputs:
    description: What the run depends on (worker settings; per node address, versions, environment, GPUs, boot id).
    type: dict
    required: true
  reuse:
    description: Whether the last result may stand at all (allreduce_smoke_rerun).
    type: bool
    default: false
  max_age:
    description: Oldest result, in seconds, that may stand.
    type: float
    default: 86400
  check_mode:
    description: A check-mode run starts nothing (C(run) false, with the reason).
    type: bool
    default: false
"""

EXAMPLES = r"""
decision: "{{ hostvars['node1'].allreduce_smoke_result | default(none) | provision.cluster.allreduce_smoke_reuse(inputs, reuse=true) }}"
"""

RETURN = r"""
_value:
  description: C(run) (bool), C(reason) (one line), C(lines) (the last table when it stands), C(result) (the last result when it stands).
  type: dict
"""

import time

from ansible_collections.provision.cluster.plugins.module_utils.allreduce.allreduce_smoke import (
    node_inputs,
    pair_config,
    pair_result,
    reuse_decision,
    table_lines,
)
from ansible_collections.provision.cluster.plugins.module_utils.allreduce.bandwidth import expected_for_nodes
from ansible_collections.provision.cluster.plugins.module_utils.allreduce.isolation import next_round, pair_key
from ansible_collections.provision.cluster.plugins.module_utils.allreduce.isolation import verdict as isolation_verdict


def _plain(value):
    """Templated hostvars data -> plain dicts/lists/str (the fingerprint hashes JSON of it)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def allreduce_smoke_reuse(last, inputs, reuse=False, max_age=86400, now=None, check_mode=False):
    if check_mode:
        line = "check mode: the all-reduce is not started (it starts workers on every node)"
        return {"run": False, "reason": line, "result": {"status": "skip"}, "failure_lines": [], "lines": [line]}
    last = _plain(last) if isinstance(last, dict) else None
    stands, reason = reuse_decision(last, _plain(inputs or {}), time.time() if now is None else float(now),
                                    float(max_age))
    if reuse and stands:
        return {"run": False, "reason": reason, "result": last, "failure_lines": [],
                "lines": table_lines(last) + [f"(not run again: {reason})"]}
    return {"run": True, "reason": reason if reuse else "allreduce_smoke_rerun: always", "result": None,
            "failure_lines": [], "lines": []}


def allreduce_smoke_nodes(order, hostvars):
    """Per node, what a green run proved about it (module_utils.allreduce.allreduce_smoke.node_inputs)."""
    def get(host, name):
        value = hostvars[host].get(name) if host in hostvars else None
        return _plain(value) if value is not None else None
    return node_inputs(list(order), get)


def allreduce_smoke_expected(order, hostvars):
    """The busbw the nodes' hardware should give (module_utils.allreduce.bandwidth.expected_for_nodes), from the
    facts gpu_health and fabric_health (the health checks') and the NCCL interface nccl_net chose."""
    nodes = []
    for host in order:
        hv = hostvars[host] if host in hostvars else {}
        nodes.append({"gpu_health": _plain(hv.get("gpu_health")), "fabric_health": _plain(hv.get("fabric_health")),
                      "link": _plain((hv.get("nccl_net_result") or {}).get("link"))})
    return expected_for_nodes(nodes)


def allreduce_smoke_next_pairs(rounds, hosts):
    """The next round of the bad-node search ([] when the verdict can be given)."""
    return next_round(list(hosts), _plain(rounds or []))


def allreduce_smoke_pair_config(pairs, node, address_of, base_port, size, timeout):
    """This node's worker settings in a round of pairs ({} when it sits the round out)."""
    return pair_config(_plain(pairs), node, _plain(address_of), int(base_port), size, float(timeout))


def allreduce_smoke_pair_round(pairs, hostvars, run_var, address_of, base_port):
    """A round's record {pairs, results} from each node's registered `finished` result (run_var)."""
    pairs = _plain(pairs)
    runs = {}
    for pair in pairs:
        for n in pair:
            value = hostvars[n].get(run_var) if n in hostvars else None
            value = _plain(value) if isinstance(value, dict) else {}
            runs[n] = {} if value.get("skipped") or value.get("unreachable") else value
    results = {pair_key(*pair): pair_result(pair, runs, _plain(address_of), int(base_port), i)
               for i, pair in enumerate(pairs)}
    return {"pairs": pairs, "results": results}


def allreduce_smoke_isolated(result, rounds, nodes, reachable, timeout):
    """The all-node result with the bad-node search's verdict: `isolation` and one failure per node named.
    A node that did not even answer Ansible (not in reachable) is named as such."""
    result = dict(_plain(result or {}))
    rounds = _plain(rounds or [])
    reachable = list(reachable)
    verdict = isolation_verdict(reachable, rounds, timeout=float(timeout))
    failures = list(result.get("failures") or [])
    answered = set(reachable)
    missing = [n for n in nodes if n not in answered]
    for n in missing:
        if not any(f.get("check") == "bad_node" and f.get("node") == n for f in failures):
            failures.append(_unreachable_failure(n))
    for bad in verdict["bad"]:
        failures.append({"check": "bad_node", "status": "fail", "detail": bad["detail"],
                         "fix": "check %s: its cluster link (ethtool/ip -s link: speed, errors, MTU, a qdisc), the "
                                "fabric and GPU health checks (provision verify --only fabric --only gpu_health --limit %s);"
                                " leave it out meanwhile: --limit '!%s'" % (bad["node"], bad["node"], bad["node"])})
    # a pair that ran but was judged slow reads "slow 0.006 GB/s", not "ok ..."
    slow = {(m["round"], pair_key(*m["pair"])) for m in verdict.get("pairs") or [] if m.get("slow")}
    outcome_rounds = []
    for i, rnd in enumerate(rounds, 1):
        outs = []
        for pair in rnd["pairs"]:
            r = rnd["results"].get(pair_key(*pair)) or {}
            status = "slow" if (i, pair_key(*pair)) in slow else r.get("status")
            outs.append("%s%s" % (status, " %.3g GB/s" % r["busbw"] if r.get("busbw") else
                                  (" (%s)" % r["detail"] if r.get("detail") else "")))
        outcome_rounds.append({"pairs": rnd["pairs"], "outcome": outs})
    summary = verdict["summary"]
    if missing:
        summary = "%s dropped out of the run (did not answer, or failed earlier); among the others: %s" % (
            ", ".join(missing), summary)
    result["isolation"] = {"rounds": outcome_rounds, "bad": missing + [b["node"] for b in verdict["bad"]],
                           "reference_gbps": verdict["reference"], "summary": summary}
    result["failures"] = failures
    if failures:
        result["status"] = "fail"
    return result


def _unreachable_failure(node):
    return {"check": "bad_node", "status": "fail", "node": node,
            "detail": "%s dropped out of this run before the all-reduce (it did not answer: down, frozen, its sshd "
                      "hung; or an earlier task failed on it): the all-reduce could not include it" % node,
            "fix": "look at %s (console, hypervisor; a paused container: podman unpause), or leave it out: "
                   "--limit '!%s'" % (node, node)}


def allreduce_smoke_unreachable(nodes, reachable):
    """The result when some node did not answer before the run: no all-node run (the others would wait
    for it until their rendezvous timeout), each missing node named; the pairs then test the others."""
    answered = set(reachable)
    missing = [n for n in nodes if n not in answered]
    result = {"status": "fail", "backend": None, "world_size": 0, "nodes": len(list(nodes)), "rows": [], "tcp": [],
              "tcp_ring": [], "links": [], "per_node": {}, "slow_links": [], "correct": False, "dropped": missing,
              "failures": [_unreachable_failure(n) for n in missing], "warnings": []}
    return allreduce_smoke_lines(result)


def allreduce_smoke_lines(result):
    """The result as table lines and failure lines (after the bad-node search changed it)."""
    result = _plain(result)
    failure_lines = ["%s -- fix: %s" % (f["detail"], f["fix"]) for f in result.get("failures") or []]
    return {"lines": table_lines(result), "failure_lines": failure_lines, "result": result}


class FilterModule:
    def filters(self):
        return {"allreduce_smoke_reuse": allreduce_smoke_reuse, "allreduce_smoke_nodes": allreduce_smoke_nodes,
                "allreduce_smoke_expected": allreduce_smoke_expected,
                "allreduce_smoke_next_pairs": allreduce_smoke_next_pairs,
                "allreduce_smoke_pair_config": allreduce_smoke_pair_config,
                "allreduce_smoke_pair_round": allreduce_smoke_pair_round,
                "allreduce_smoke_isolated": allreduce_smoke_isolated,
                "allreduce_smoke_lines": allreduce_smoke_lines,
                "allreduce_smoke_unreachable": allreduce_smoke_unreachable}
