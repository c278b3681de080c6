# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""provision.cluster.verify_node: run this node's checks of the catalog, all at once."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.provision.cluster.plugins.module_utils.verify import catalog as K
from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C
from ansible_collections.provision.cluster.plugins.module_utils.ssh.landing import landing_checks, landing_from_report
from ansible_collections.provision.cluster.plugins.plugin_utils.verify import (
    BUILD_LOCK,
    Variables,
    cluster_plan,
    run_entries,
    run_modules,
    selection,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("select", "smoke", "phase", "reuse", "in_site", "parallel"))

    def _configure_module(self, *args, **kwargs):
        with BUILD_LOCK:
            return super()._configure_module(*args, **kwargs)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        phase = args.get("phase") or K.NODE
        if phase not in (K.NODE, K.PEERS):
            return dict(result, failed=True, msg="phase must be node or peers")
        try:
            selected, entries = selection(args.get("select"), K.as_bool(args.get("smoke", False)),
                                          K.as_bool(args.get("in_site", False)), task_vars)
        except K.UnknownCheck as exc:
            return dict(result, failed=True, msg=str(exc))
        var = Variables(task_vars, self._templar, self._loader)
        host = task_vars["inventory_hostname"]
        hosts = list(task_vars.get("ansible_play_hosts_all") or [host])
        ctx = K.Context(host, cluster_plan(var, hosts), hosts, var)
        wanted = [K.BY_NAME[n] for n in entries if K.BY_NAME[n].phase == phase and K.BY_NAME[n].module]
        shown = set(K.reported(selected))
        reuse = K.as_bool(args.get("reuse", False))
        parallel = int(args.get("parallel") or 8)
        if phase == K.PEERS:
            return dict(result, **self._peers(ctx, wanted, reuse, task_vars))
        return dict(result, **self._node(ctx, wanted, shown, reuse, parallel, task_vars))

    # ------------------------------------------------------------ play 1: this node's checks
    def _node(self, ctx, wanted, shown, reuse, parallel, task_vars):
        raw, reused = {}, []
        if reuse:
            for spec in wanted:
                found = K.taken(spec, ctx)
                if found is not None:
                    raw[spec.name] = found
                    reused.append(spec.name)
        ctx.results = raw  # run_entries adds the results of the rest
        reused.extend(run_entries(self, [s for s in wanted if s.name not in raw], ctx, task_vars, parallel))
        records, data = [], {}
        for spec in wanted:
            res = raw.get(spec.name)
            if not isinstance(res, dict):
                continue
            if spec.name in shown:  # a check run only for another one's sake is not reported
                records.extend(spec.records(ctx.host, res, ctx))
            if spec.keep:
                data[spec.name] = spec.keep(res)
        # the hardware the health modules read stays on the host as facts (the smoke test's expected busbw)
        facts = {k: v for res in raw.values() if isinstance(res, dict)
                 for k, v in (res.get("ansible_facts") or {}).items() if k in ("gpu_health", "fabric_health")}
        out = {"changed": False, "checks": records, "data": data, "ran": sorted(set(raw) - set(reused)),
               "reused": reused}
        if facts:
            out["ansible_facts"] = facts
        return out

    # ------------------------------------------------------------ play 2: checks that need every node
    def _peers(self, ctx, wanted, reuse, task_vars):
        records, ran, reused = [], [], []
        for spec in wanted:
            found = K.taken(spec, ctx) if reuse else None
            if found is None and spec.name == "landing":
                found = self._landing(ctx, task_vars)
                ran.append(spec.name)
            elif found is not None:
                reused.append(spec.name)
            if found is not None:
                records.extend(spec.records(ctx.host, found, ctx))
        return {"changed": False, "checks": records, "ran": ran, "reused": reused}

    def _landing(self, ctx, task_vars):
        """ssh <name> from this node lands in that node: from the mesh check's own landing verdict or its
        reports when they prove every pair (no new connection), else with the ssh_landing module on the node."""
        own = ctx.var.data("verify_node_result") or {}  # this node's registered result: data, not a template
        mesh = ((own.get("data") or {}).get("mesh") or {})
        names = ctx.var("node_runtime_landing_names") or ["inventory", "hostname"]
        landing = mesh.get("landing")  # the mesh check's, over inventory names and hostnames
        if isinstance(landing, dict) and (landing.get("checks") or [{}])[0].get("status") == C.PASS \
                and set(names) <= {"inventory", "hostname"}:
            return landing
        peers, reports = [], {}
        # the ring's nodes (every node with verify_matrix: full); that every other name points at its
        # node's address is the mesh_files check's (~/.ssh/config, /etc/hosts) and nccl's (resolution)
        for h in ctx.ring():
            node = ctx.var.hostdata(h, "verify_node_result") or {}
            ident = ((node.get("data") or {}).get("runtime") or {}).get("identity")
            if ident:
                peers.append(ident)
        reports = mesh.get("reports") or {}
        field = {"inventory": "name", "hostname": "hostname", "address": "address"}
        jobs = [(alias, peer) for peer in peers for alias in dict.fromkeys(peer.get(field[n]) for n in names) if alias]
        pairs = [landing_from_report(alias, peer, reports.get(alias)) for alias, peer in jobs]
        if all(pairs):
            return {"checks": landing_checks(ctx.host, pairs)}
        args = {"node": ctx.host, "user": ctx.user(), "peers": peers, "names": names, "timeout": 10,
                "reports": reports}
        return run_modules(self, [("landing", "provision.cluster.ssh_landing", args)], task_vars)["landing"]
