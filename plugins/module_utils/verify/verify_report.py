# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The `provision verify` document, built once from every node's Check records.

``playbooks/verify.yml``'s last task (the action plugin ``verify_report``) calls ``build_document``
and hands the result to the CLI (``provision verify --json`` prints it, with the inventory, the limit
and the run's duration added) and to its own failure message (``fail_lines``). Schema 1 is stable
(docs/verify.md: "--json"). Plain Python, no Ansible import.
"""

from __future__ import annotations

import re

from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C
from ansible_collections.provision.cluster.plugins.module_utils.ssh.become import ENDED, become_problem
from ansible_collections.provision.cluster.plugins.module_utils.ssh.known_hosts import (
    failed_hop,
    presented_fingerprint,
)
from ansible_collections.provision.cluster.plugins.module_utils.ssh.ssh_mesh import classify_ssh_error

SCHEMA_VERSION = 1


def unreachable(node, conn, message=""):
    """(cause, fix) for a node the controller cannot reach (conn: connection, host, port, user),
    telling apart a key refused by a node that answers, nothing listening, no answer at all and a
    changed host key, from the connection's own error line."""
    kind = str(conn.get("connection") or "ssh")
    host = conn.get("host") or node
    detail = C.one_line(message) or "no result from this node"
    # the node answered: sudo (become) is what failed, and the fix is about sudo, not the network
    become = become_problem(node, message, conn.get("user"), conn.get("become_method") or "sudo")
    if become is not None:
        return become
    if ENDED.search(message or ""):
        detail = "the connection ended before %s confirmed (%s)" % (conn.get("become_method") or "sudo", detail)
    if kind.endswith("podman") or kind.endswith("docker"):
        return detail, "start the container: %s start %s" % (kind.rsplit(".", 1)[-1], host)
    bastion = _through_bastion(node, conn, message or "", detail)
    if bastion is not None:
        return bastion
    port_opt = "-p %s " % conn["port"] if conn.get("port") else ""
    user = "%s@" % conn["user"] if conn.get("user") else ""
    where = "%s port %s" % (host, conn.get("port") or 22)
    ssh = "`ssh %s%s%s true`" % (port_opt, user, host)
    cls = classify_ssh_error(message or "")[0] if message else "other"
    tcp = conn.get("tcp")
    if cls == "other" and tcp:
        # ssh's own words were lost (ansible-core 2.16 says only "Data could not be sent ... Broken pipe" when
        # ssh exits before it took the module): what a TCP connect from the controller met tells the cases apart
        cls = {"refused": "connection_refused", "timeout": "timeout"}.get(tcp, "no_route" if tcp != "open" else cls)
        detail = "%s (a TCP connect from the controller to %s: %s)" % (detail, where, tcp)
    if ("did not answer within" in detail or ("timed out" in detail and "banner" in detail)
            or "in the expected time frame" in detail or "read from master failed" in detail):
        cls = "frozen"
    if cls == "permission_denied":
        return ("%s answers on %s but refused our key: %s" % (node, where, detail),
                "our key is not in %sauthorized_keys there, or sshd ignores the file for its modes (home, ~/.ssh "
                "or authorized_keys group/world-writable: StrictModes); get back in with the password "
                "(provision bootstrap -i INV --limit %s --ask-pass) or at the console (chmod go-w ~; chmod 700 "
                "~/.ssh; chmod 600 ~/.ssh/authorized_keys)" % (("~%s/." % conn["user"]) if conn.get("user") else "the ",
                                                               node))
    if cls == "connection_refused":
        return ("%s answers but nothing listens on %s (sshd down or on another port): %s" % (node, where, detail),
                "start sshd there (at the console: systemctl start ssh, or /usr/sbin/sshd -p %s), then "
                "ansible-playbook site.yml --tags sshd --limit %s" % (conn.get("port") or 22, node))
    presented = presented_fingerprint(message)
    if cls == "host_key_changed" and presented:
        recorded = conn.get("recorded_keys") or []
        was = ("%s records %s" % (conn.get("known_hosts") or "known_hosts", ", ".join(recorded)) if recorded
               else "the recorded key differs")
        return ("%s presents a host key that is not the one recorded: it sends %s (%s), %s; ssh refuses to "
                "connect (reimaged, replaced, or someone in between)" % (node, presented[1], presented[0], was),
                "if %s was reimaged, compare %s with the console's `ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub` "
                "and accept it on purpose: provision bootstrap -i INV --limit %s --replace-host-key %s; if not, "
                "find out who answers at %s before anything else"
                % (node, presented[1], presented[0].lower(), node, presented[1], where))
    if cls in ("host_key_changed", "host_key_missing"):
        return (detail, "the node's host key is not the one recorded (reimaged?): check its fingerprint at the "
                        "console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and accept it on purpose: "
                        "provision bootstrap -i INV --limit %s --replace-host-key SHA256:..." % node)
    if "timed out after" in detail.lower():
        # the task's own timeout: the connection (or the module) never came back
        return ("%s did not answer (frozen, overloaded or its sshd hung) within the task's timeout: %s"
                % (node, detail), "look at %s's console or hypervisor (a paused container: podman unpause)" % node)
    if cls == "frozen":
        return ("%s accepted the connection but did not answer (frozen, overloaded or its sshd hung): %s"
                % (node, detail), "look at %s's console or hypervisor (a paused container: podman unpause)" % node)
    if cls in ("no_route", "timeout", "name_unresolvable"):
        return ("%s does not answer at %s (down, or no route/firewall): %s" % (node, where, detail),
                "bring %s up and make %s work from here" % (node, ssh))
    return (detail, "bring %s up and make %s work from here (sshd down? ansible-playbook site.yml --tags sshd "
                    "--limit %s)" % (node, ssh, node))


def _through_bastion(node, conn, message, detail):
    """(cause, fix) when ssh failed at the bastion in front of NODE (conn["proxy"]: its ProxyJump or
    ProxyCommand), not at the node itself; else None."""
    proxy = conn.get("proxy")
    if not proxy:
        return None
    hop = failed_hop(message, [conn.get("host"), node])
    # ssh names the proxied stream "UNKNOWN port 65535": what broke is the way through the bastion; a login
    # that ended while Ansible waited for sudo (become.ENDED) carries no ssh words, the way through it first
    broken = "UNKNOWN port 65535" in message or "kex_exchange_identification" in message or bool(ENDED.search(message))
    if not hop and not broken:
        return None
    what = "the bastion %s (ProxyJump %s)" % (hop, proxy) if hop else "the bastion (ProxyJump %s)" % proxy
    # ssh's own words, without Ansible's preamble about the node
    detail = re.sub(r'^(?:Data could not be sent to remote host "[^"]*"\. Make sure this host can be reached over '
                    r'ssh: |Failed to connect to the host via ssh: )', "", detail)
    presented = presented_fingerprint(message)
    cls = classify_ssh_error(message)[0]
    if hop and cls == "host_key_changed" and presented:
        named = re.search(r'ssh-keygen -f "([^"]+)" -R', message)
        where = named.group(1) if named else "the known_hosts ssh reads for it"
        return ("%s in front of %s presents a host key that is not the one recorded: it sends %s (%s); ssh "
                "refuses to connect through it (reinstalled, replaced, or someone in between)"
                % (what, node, presented[1], presented[0]),
                "if the bastion was reinstalled, compare %s with its console (ssh-keygen -lf "
                "/etc/ssh/ssh_host_%s_key.pub) and replace its line on purpose (ssh-keygen -R %s -f %s); if not, "
                "find out who answers at %s before anything else"
                % (presented[1], presented[0].lower(), hop, where, hop))
    if hop and cls in ("connection_refused", "no_route", "timeout", "name_unresolvable", "frozen"):
        return ("%s in front of %s cannot be reached: %s" % (what, node, detail),
                "bring the bastion up, or fix ProxyJump (ansible_ssh_common_args or ~/.ssh/config): %s is "
                "reached only through it" % node)
    return ("the connection to %s through %s failed: %s" % (node, what, detail),
            "check that the bastion is up and answers (`ssh %s true`), then that it reaches %s on port %s "
            "(`ssh -J %s %s%s true`)"
            % (proxy, node, conn.get("port") or 22, proxy, ("%s@" % conn["user"]) if conn.get("user") else "",
               conn.get("host") or node))


def mesh_matrix(rows, order):
    """N x N: matrix[src][dst] = {"ok", "error" (class), "detail"} from each node's ssh_mesh_check row."""
    matrix = {}
    for src in order:
        row = rows.get(src)
        if not isinstance(row, list):
            continue
        matrix[src] = {str(cell.get("target")): {"ok": bool(cell.get("ok")), "error": cell.get("error") or "",
                                                 "detail": C.one_line(cell.get("detail"))}
                       for cell in row if isinstance(cell, dict)}
    return {"ran": bool(matrix), "nodes": [n for n in order if n in matrix], "matrix": matrix}


def _flatten(prefix, value, out):
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten("%s.%s" % (prefix, k) if prefix else str(k), v, out)
    elif isinstance(value, bool):
        out[prefix] = "yes" if value else "no"
    else:
        out[prefix] = "-" if value is None else str(value)


def versions_table(versions, gpus, order, differing_nodes=()):
    """versions[node][field] (python_versions + gpu_facts) and the fields that differ."""
    table = {}
    for node in order:
        values = {}
        if versions.get(node):
            _flatten("", versions[node], values)
        gpu = gpus.get(node)
        if gpu:
            values["gpu.count"] = str(gpu.get("gpu_count", 0))
            values["gpu.driver"] = str(gpu.get("driver_version") or "-")
            values["gpu.driver_cuda"] = str(gpu.get("driver_cuda_version") or "-")
            values["gpu.cuda_home"] = str(gpu.get("cuda_home") or "-")
        if values:
            table[node] = values
    fields = []
    for values in table.values():
        fields += [k for k in values if k not in fields]
    differing = [f for f in fields if len({table[n].get(f, "-") for n in table}) > 1]
    return {"ran": bool(table), "fields": fields, "nodes": table, "differing": differing,
            "differing_nodes": list(differing_nodes)}


def allreduce_section(result, error, master):
    """The allreduce_smoke report (rows, busbw, failures...) and its checks, on the master node."""
    if not isinstance(result, dict) and not error:
        return {"ran": False}, []
    if not isinstance(result, dict):
        return {"ran": True, "status": "fail"}, [C.failed("allreduce", error, "see the allreduce_smoke role's output (-v)",
                                                          node=master)]
    checks = [C.check(("allreduce %s" % c.get("check", "")).strip(), c.get("status", C.FAIL), c.get("detail"),
                      c.get("fix"), node=master)
              for c in (result.get("failures") or []) + (result.get("warnings") or [])]
    if not checks:
        checks = [C.passed("allreduce", "%s over %s ranks, sum %s, busbw %s GB/s" % (
            result.get("backend"), result.get("world_size"), "correct" if result.get("correct") else "not verified",
            result.get("busbw_gbps")), node=master)]
    return dict({"ran": True}, **result), checks


def build_document(order, nodes, *, selected, mesh_rows=None, versions=None, gpus=None, differing_nodes=(),
                   allreduce=None, allreduce_error=None):
    """The document (without inventory/limit/duration, which the CLI adds).

    order: node names in inventory order. nodes: name -> {"address", "reachable", "reach_detail",
    "connection": {connection, host, port, user}, "checks": [Check records of that node, in order]}.
    """
    doc_nodes, checks = [], []
    for node in order:
        entry = nodes.get(node) or {}
        address = str(entry.get("address") or node)
        reachable = bool(entry.get("reachable"))
        doc_nodes.append({"name": node, "address": address, "reachable": reachable})
        if not reachable:
            cause, fix = unreachable(node, entry.get("connection") or {}, entry.get("reach_detail") or "")
            checks.append(C.failed("node reachable", cause, fix, node=node))
            continue
        checks.append(C.passed("node reachable", "%s answers" % address, node=node))
        checks.extend(C.with_node(entry.get("checks") or [], node))
    master = order[0] if order else "cluster"
    smoke, smoke_checks = allreduce_section(allreduce, allreduce_error, master)
    checks.extend(smoke_checks)
    # the document's records carry no data: the tables below hold the figures
    checks = [{k: c[k] for k in ("node", "check", "status", "detail", "fix")} for c in checks]
    ok = all(c["status"] != C.FAIL for c in checks)
    return {
        "schema": SCHEMA_VERSION,
        "ok": ok,
        "selected": list(selected),
        "summary": {s: sum(1 for c in checks if c["status"] == s) for s in C.STATUSES},
        "nodes": doc_nodes,
        "checks": checks,
        "mesh": mesh_matrix(mesh_rows or {}, order),
        "versions": versions_table(versions or {}, gpus or {}, order, differing_nodes),
        "allreduce": smoke,
    }


def fail_lines(document):
    """One line per failed check, as ansible-playbook playbooks/verify.yml fails with them."""
    return [C.fail_line(c) for c in document.get("checks") or [] if c.get("status") == C.FAIL]
