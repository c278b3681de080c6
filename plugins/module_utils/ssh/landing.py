# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The SSH landing check: does `ssh <name>` from a node land on the node the inventory means?

LANDING_SCRIPT runs through `ssh <alias>` and reports the peer's node-id token, hostname, boot id
and addresses; the verdict compares them with the inventory node's identity (node_facts.node_identity).
Plain Python (no Ansible imports): the ssh_landing and ssh_mesh_check modules and the verify_node
action plugin use it.
"""

from __future__ import annotations

from ansible_collections.provision.cluster.plugins.module_utils.common.node_facts import parse_fib_trie_local


LANDING_SCRIPT = ("cat /etc/provision/node-id 2>/dev/null; echo '@@'; cat /proc/sys/kernel/hostname; "
                  "echo '@@'; cat /proc/sys/kernel/random/boot_id; echo '@@'; cat /proc/net/fib_trie")


def parse_landing_report(text):
    """The output of LANDING_SCRIPT run by `ssh <peer>` -> identity dict (as node_identity)."""
    parts = (text or "").split("@@\n")
    if len(parts) < 4:
        raise ValueError("unexpected landing report (%d parts)" % len(parts))
    return {"token": parts[0].strip(), "hostname": parts[1].strip(), "boot_id": parts[2].strip(),
            "addresses": parse_fib_trie_local(parts[3])}


def token_name(token):
    """'node2 3f2a...' -> 'node2'."""
    return (token or "").split()[0] if (token or "").split() else ""


def landing_pair(alias, expected, text):
    """One landing result from the output of LANDING_SCRIPT run through `ssh alias`:
    {alias, peer, ok, reason, reported}. Raises ValueError when the output is not a report."""
    reported = parse_landing_report(text)
    ok, reason = landing_verdict(alias, expected, reported)
    return {"alias": alias, "peer": expected.get("name"), "ok": ok, "reason": reason, "reported": reported}


def landing_verdict(alias, expected, reported):
    """Did `ssh alias` land in `expected` (identity of the inventory node)? -> (ok, reason)."""
    problems = []
    got = token_name(reported.get("token")) or "a machine without /etc/provision/node-id (the host?)"
    if expected.get("token"):
        if reported.get("token") != expected["token"]:
            problems.append("node-id is %s" % got if token_name(reported.get("token")) != expected.get("name")
                            else "node-id nonce differs (a copy of %s's image?)" % expected.get("name"))
    elif reported.get("token") and token_name(reported["token"]) != expected.get("name"):
        # no gathered token (verify without node_runtime facts): the name in the token still tells
        problems.append("node-id is %s" % got)
    addr = expected.get("address")
    if addr and addr not in (reported.get("addresses") or []):
        problems.append("%s is not on its interfaces (%s)" % (addr, ",".join(reported.get("addresses") or []) or "none"))
    if expected.get("hostname") and reported.get("hostname") != expected["hostname"]:
        problems.append("hostname %s" % (reported.get("hostname") or "?"))
    if not problems:
        return True, ""
    landed = token_name(reported.get("token")) or reported.get("hostname") or "?"
    return False, "`ssh %s` landed on %s, not %s: %s" % (alias, landed, expected.get("name"), "; ".join(problems))


def landing_from_report(alias, peer, text):
    """The verdict from a report the SSH mesh check already read through `ssh alias` in this run,
    when it proves the landing (same node-id token); None when it must be probed again."""
    if not text or not peer.get("token"):
        return None
    try:
        pair = landing_pair(alias, peer, text)
    except ValueError:
        return None
    return dict(pair, from_mesh=True) if pair["ok"] else None


def check_landing(node, results):
    """results: [{"alias","peer","ok","reason"}] for one source node -> one check dict."""
    bad = [r for r in results if not r["ok"]]
    if not results:
        return {"check": "landing", "status": "skip", "detail": "no peers to check", "fix": ""}
    if not bad:
        return {"check": "landing", "status": "pass",
                "detail": "%d ssh names land on the nodes the inventory means" % len(results), "fix": ""}
    detail = "%s: %s" % (node, "; ".join(r["reason"] for r in bad))
    if any("Permission denied" in r["reason"] or "Host key" in r["reason"] or "timed out" in r["reason"]
           or "Could not resolve" in r["reason"] or "refused" in r["reason"] for r in bad):
        fix = ("run the ssh_mesh stage (keys, known_hosts and ~/.ssh/config for every node name), then "
               "look at the entries named above in %s's ~/.ssh/config and /etc/hosts" % node)
    else:
        fix = ("on %s make each name resolve to its node: fix ~/.ssh/config (HostName/Port) and /etc/hosts "
               "for %s; a container on the host network needs its own sshd port (sshd_port)"
               % (node, ", ".join(sorted({r["alias"] for r in bad}))))
    return {"check": "landing", "status": "fail", "detail": detail, "fix": fix,
            "pairs": ["%s->%s" % (node, r["alias"]) for r in bad]}


def shared_host_check(node, results):
    """Nodes that answered with the same hostname and boot id, ``node`` among them, as seen through
    this node's landing connections (results of ``landing_pair``). NCCL hashes exactly these two
    (hostname + /proc/sys/kernel/random/boot_id, unless NCCL_HOSTID is set) to tell hosts apart:
    containers of one machine that share a hostname (``--network host`` gives them the host's) are
    one host to NCCL, which then uses shared memory and P2P between them. -> a warn check, or None."""
    groups = {}
    for r in results:
        rep = r.get("reported") or {}
        if r.get("ok") and rep.get("hostname") and rep.get("boot_id"):
            groups.setdefault((rep["hostname"], rep["boot_id"]), set()).add(r.get("peer"))
    shared = next(((key[0], sorted(p for p in peers if p)) for key, peers in groups.items()
                   if len(peers) > 1 and node in peers), None)
    if not shared:
        return None
    hostname, peers = shared
    return {"check": "host identity", "status": "warn",
            "detail": "%s report the same hostname (%s) and boot id: NCCL takes them for one host and uses shared "
                      "memory and P2P between them ('Duplicate GPU detected', 'Error while attaching to shared "
                      "memory segment')" % (" and ".join(peers), hostname),
            "fix": "give each node its own hostname (a container: --hostname NAME; with --network host it gets "
                   "the host's), or a distinct NCCL_HOSTID per node (nccl_net_extra_env)"}


def landing_checks(node, results):
    """This node's landing checks: ``check_landing``, then ``shared_host_check`` when it warns."""
    shared = shared_host_check(node, results)
    return [check_landing(node, results)] + ([shared] if shared else [])
