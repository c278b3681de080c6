# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""provision.cluster.verify_report: every node's checks -> the verify document (run once, on the controller)."""
from __future__ import annotations

import json
import os

from ansible.plugins.action import ActionBase

from ansible_collections.provision.cluster.plugins.module_utils.allreduce import baseline as B
from ansible_collections.provision.cluster.plugins.module_utils.verify import catalog as K
from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C
from ansible_collections.provision.cluster.plugins.module_utils.ssh import known_hosts as KH
from ansible_collections.provision.cluster.plugins.module_utils.ssh.ssh_mesh import classify_ssh_error
from ansible_collections.provision.cluster.plugins.module_utils.net.netinfo import tcp_state
from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import is_ssh_connection
from ansible_collections.provision.cluster.plugins.module_utils.verify.verify_report import build_document, fail_lines
from ansible_collections.provision.cluster.plugins.plugin_utils.verify import Variables, cluster_plan, selection


def _reach(node_result, reach_result):
    """(reachable, why not) from the ping task (skipped inside site.yml) and the checks task."""
    for res in (reach_result, node_result):
        if isinstance(res, dict) and (res.get("unreachable") or (res is reach_result and res.get("failed"))):
            # the whole message: ssh's changed-host-key warning has the fingerprint on a later line
            return False, str(res.get("msg") or "").strip() or "unreachable"
    if not isinstance(node_result, dict) or not node_result:
        return False, "no result from this node"
    return True, ""


def _recorded_keys(var, host, conn):
    """{"known_hosts": file, "recorded_keys": [...]} for a node whose host key changed: what the
    controller's known_hosts (the file ssh reads for that host) records for it."""
    name = KH.host_pattern(str(conn["host"]), int(conn.get("port") or 22))
    for path in KH.user_known_hosts_files(var.hostvar(host, "ansible_ssh_common_args"),
                                          var.hostvar(host, "ansible_ssh_extra_args")):
        path = os.path.expanduser(path)
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                recorded = KH.recorded_fingerprints(fh.read(), name)
        except OSError:
            continue
        if recorded:
            return {"known_hosts": path, "recorded_keys": recorded}
    return {}


# seconds a TCP connect from the controller may take, for a node whose ssh error lost ssh's own words
TCP_PROBE_TIMEOUT = 3


def _tcp_states(nodes):
    """conn["tcp"] (tcp_state) for every unreachable node over ssh, without a bastion, whose error line says
    nothing ssh said (ansible-core 2.16: "Data could not be sent ... Broken pipe"), probed at once (bounded)."""
    todo = [entry["connection"] for entry in nodes.values()
            if not entry["reachable"] and not entry["connection"].get("proxy")
            and is_ssh_connection(entry["connection"].get("connection"))
            and classify_ssh_error(entry.get("reach_detail") or "")[0] == "other"]
    if not todo:
        return
    from concurrent.futures import ThreadPoolExecutor

    def probe(conn):
        try:
            port = int(conn.get("port") or 22)
        except (TypeError, ValueError):
            return   # not a port: the inventory check names it
        conn["tcp"] = tcp_state(str(conn["host"]), port, TCP_PROBE_TIMEOUT)

    with ThreadPoolExecutor(max_workers=min(32, len(todo))) as pool:
        list(pool.map(probe, todo))


def _inventory_problem(line, order):
    """'node2: address ... is also used by node1; fix: ...' -> (node2, failed check `inventory`)."""
    head, _unused, rest = line.partition(": ")
    node = head if head in order else (order[0] if order else head)
    detail, _unused, fix = (rest if head in order else line).partition("; fix: ")
    return node, C.failed("inventory", detail, fix, node=node)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("select", "smoke", "in_site", "stats", "baseline", "save_baseline",
                             "baseline_tolerance", "baseline_link_tolerance"))

    def _baseline(self, result, args, master, var):
        """Compare the all-reduce with the saved baseline (when there is one), save it when asked."""
        path = os.path.expanduser(str(args.get("baseline") or ""))
        tolerance = float(args.get("baseline_tolerance") or var("verify_baseline_tolerance"))
        link_tolerance = float(args.get("baseline_link_tolerance") or var("verify_baseline_link_tolerance"))
        out = {"path": path or None, "tolerance": tolerance, "link_tolerance": link_tolerance}
        old = None
        if path and os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as fh:
                    old = json.load(fh)
            except (OSError, ValueError) as exc:
                out.update(comparable=False, differences=["cannot read it: %s" % exc])
        unjudged = B.no_figures(result)
        if old is not None and unjudged:
            out.update(saved_at=old.get("saved_at"), comparable=None, differences=[unjudged])
        elif old is not None:
            ok, diff = B.comparable(old, result)
            out.update(saved_at=old.get("saved_at"), comparable=ok, differences=diff)
            if ok:
                out["checks"] = B.compare(old, result, master, tolerance, link_tolerance)
            else:
                out["checks"] = [C.warned("allreduce baseline", "not comparable, not used: the baseline was taken with "
                                          "another %s" % "; ".join(diff[:6]),
                                          "save a new one on purpose: provision verify --smoke --save-baseline",
                                          node=master)]
        elif path and "comparable" not in out:
            out.update(comparable=None, differences=["no baseline saved yet"])
        if K.as_bool(args.get("save_baseline", False)) and path:
            if result.get("status") == "fail":
                out["saved"] = False
                out["not_saved"] = "the run failed: a failing run is no baseline"
            else:
                B.save(path, B.make(result, old=old))
                out["saved"] = True
        return out

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        try:
            selected, entries = selection(args.get("select"), K.as_bool(args.get("smoke", False)),
                                          K.as_bool(args.get("in_site", False)), task_vars)
        except K.UnknownCheck as exc:
            return dict(result, failed=True, msg=str(exc))
        var = Variables(task_vars, self._templar, self._loader)
        order = list(task_vars.get("ansible_play_hosts_all") or [])
        plan = cluster_plan(var, order)
        addresses = plan.get("address_of") or {}

        nodes, rows, versions, gpus, data_of = {}, {}, {}, {}, {}
        for h in order:
            node = var.hostdata(h, "verify_node_result") or {}
            peers = var.hostdata(h, "verify_peers_result") or {}
            reachable, why = _reach(node, var.hostdata(h, "verify_reach"))
            data = data_of[h] = node.get("data") or {}
            records = list(node.get("checks") or []) + list(peers.get("checks") or [])
            if reachable and node.get("failed") and not records:
                records = [C.failed("verify", node.get("msg") or "the checks failed", "see `provision verify -v`", node=h)]
            conn = {"connection": var.hostvar(h, "ansible_connection") or "ssh", "host": var.hostvar(h, "ansible_host") or h,
                    "port": var.hostvar(h, "ansible_port"), "user": var.hostvar(h, "ansible_user"),
                    "proxy": KH.proxy_of(var.hostvar(h, "ansible_ssh_common_args"),
                                         var.hostvar(h, "ansible_ssh_extra_args"))}
            if not reachable and "IDENTIFICATION HAS CHANGED" in (why or ""):
                conn.update(_recorded_keys(var, h, conn))
            nodes[h] = {"address": addresses.get(h, h), "reachable": reachable, "reach_detail": why, "checks": records,
                        "connection": conn}
            if (data.get("mesh") or {}).get("row"):
                rows[h] = data["mesh"]["row"]
            if (data.get("versions") or {}).get("versions"):
                versions[h] = data["versions"]["versions"]
            if (data.get("gpu") or {}).get("gpu"):
                gpus[h] = data["gpu"]["gpu"]
        _tcp_states(nodes)

        for line in plan.get("problems") or []:
            h, c = _inventory_problem(line, order)
            if h in nodes:
                nodes[h]["checks"].insert(0, c)

        extra = {}
        cc = K.ClusterContext(order, data_of, var, plan=plan)
        for name in entries:
            spec = K.BY_NAME[name]
            if spec.phase != K.CLUSTER or not spec.cluster:
                continue
            records, more = spec.cluster(cc)
            extra.update(more)
            for c in records:
                if c.get("node") in nodes:
                    nodes[c["node"]]["checks"].append(c)

        allreduce, error = None, None
        if "smoke" in selected and order:
            allreduce = var.hostdata(order[0], "allreduce_smoke_result")
            error = var.hostdata(order[0], "verify_smoke_error")
            if error and isinstance(allreduce, dict) and allreduce.get("status") != "fail":
                allreduce = None  # an earlier run's result: this run failed before it had one
        if isinstance(allreduce, dict) and (args.get("baseline") or args.get("save_baseline")):
            allreduce = dict(allreduce, baseline=self._baseline(allreduce, args, order[0], var))
            for c in allreduce["baseline"].get("checks") or []:
                nodes.setdefault(c["node"], {"checks": []})["checks"].append(c)
        doc = build_document(order, nodes, selected=selected, mesh_rows=rows, versions=versions, gpus=gpus,
                             differing_nodes=extra.get("differing_nodes") or [], allreduce=allreduce,
                             allreduce_error=error)
        lines = fail_lines(doc)
        result.update(changed=False, document=doc, fail_lines=lines)
        if K.as_bool(args.get("stats", True)):
            result["ansible_stats"] = {"data": {"provision_verify": doc}, "per_host": False, "aggregate": False}
        return result
