# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The `provision verify` document, built once from every node's Check records.

``playbooks/verify.yml``'s last task (the action plugin ``verify_report``) calls ``build_document``
and hands the result to the CLI (``provision verify --json`` prints it, with the inventory, the limit
and the run's duration added) and to its own failure message (``fail_lines``). Schema 1 is stable
(README: "provision verify --json"). Plain Python, no Ansible import.
"""

from __future__ import annotations

from ansible_collections.provision.cluster.plugins.module_utils import checks as C

SCHEMA_VERSION = 1


def unreachable_fix(node, conn):
    """How to get a node back that the controller cannot reach (conn: connection, host, port, user)."""
    kind = str(conn.get("connection") or "ssh")
    host = conn.get("host") or node
    if kind.endswith("podman") or kind.endswith("docker"):
        return "start the container: %s start %s" % (kind.rsplit(".", 1)[-1], host)
    port = "-p %s " % conn["port"] if conn.get("port") else ""
    user = "%s@" % conn["user"] if conn.get("user") else ""
    return ("bring %s up and make `ssh %s%s%s true` work from here (sshd down? ansible-playbook site.yml "
            "--tags sshd --limit %s)" % (node, port, user, host, node))


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
            checks.append(C.failed("node reachable", entry.get("reach_detail") or "no result from this node",
                                   unreachable_fix(node, entry.get("connection") or {}), node=node))
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
