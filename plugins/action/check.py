# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""provision.cluster.check: a stage runs one check of the catalog, with the arguments verify gives it:
through the check's module, or (module:) through the stage's own module, which runs it after its work."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.provision.cluster.plugins.module_utils.verify import catalog as K
from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C
from ansible_collections.provision.cluster.plugins.module_utils.verify.stage_check import RESULT
from ansible_collections.provision.cluster.plugins.plugin_utils.verify import Variables, cluster_plan


def failed_line(host, records):
    """One line for the failed checks of a call, as provision verify words them: the node, each failed
    check with its detail and fix."""
    failed = ["%s: %s | fix: %s" % (c["check"], c["detail"], c["fix"]) for c in records if c["status"] == C.FAIL]
    return "%s: %s" % (host, "; ".join(failed))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("check", "extra", "fail", "matrix", "module", "module_args"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        spec = K.BY_NAME.get(str(args.get("check") or ""))
        if spec is None or spec.module is None or spec.args is None or spec.phase != K.NODE:
            names = sorted(s.name for s in K.CATALOG if s.module and s.args and s.phase == K.NODE)
            return dict(result, failed=True, msg="check must be one of %s, not %r" % (", ".join(names), args.get("check")))
        writer = args.get("module")
        if writer is not None and writer not in spec.writers:
            return dict(result, failed=True, msg="module: the %s check runs in %s, not in %r" % (
                spec.name, ", ".join(spec.writers) or "its own module only", writer))
        if args.get("module_args") is not None and writer is None:
            return dict(result, failed=True, msg="module_args: only with module (the stage's module that runs the check)")
        extra = dict(args.get("extra") or {})
        foreign = sorted(set(extra) - spec.stage_keys)
        if foreign:
            return dict(result, failed=True, msg="extra: %s not among the arguments a stage adds to the %s check (%s)"
                        % (", ".join(foreign), spec.name, ", ".join(sorted(spec.stage_keys)) or "none"))
        var = Variables(task_vars, self._templar, self._loader)
        host = task_vars["inventory_hostname"]
        hosts = list(task_vars.get("ansible_play_hosts_all") or [host])
        matrix = str(args.get("matrix") or "").lower() or None
        if matrix not in (None, "ring", "full"):
            return dict(result, failed=True, msg="matrix must be ring or full, not %r" % args.get("matrix"))
        ctx = K.Context(host, cluster_plan(var, hosts), hosts, var, matrix=matrix)
        check_args = spec.args(ctx)
        judged = sorted((set(extra) & set(check_args)) - K.HOW)
        if judged:
            return dict(result, failed=True, msg="extra: %s would change what the %s check reads or judges"
                        % (", ".join(judged), spec.name))
        if writer is None:
            res = self._execute_module(module_name=spec.module, module_args=dict(check_args, **extra),
                                       task_vars=task_vars, wrap_async=False)
            checked = res
        else:
            # the stage's module does its work, then runs the check with these arguments (its option check)
            res = self._execute_module(module_name=writer, task_vars=task_vars, wrap_async=False,
                                       module_args=dict(args.get("module_args") or {}, check=dict(check_args, **extra)))
            # (the task's result keeps the check's under check_result)
            checked = res.get(RESULT)
            # the record of the whole call: a module that changed something or failed before the check is none
            checked = dict(checked or {"skipped": True}, changed=res.get("changed"),
                           failed=res.get("failed") or (checked or {}).get("failed"))
        if res.get("unreachable"):
            return dict(result, **res)
        kept = {k: v for k, v in K.records_of(var.data).items()
                if isinstance(v, dict) and v.get("run") == ctx.plan.get("run")}
        kept[spec.name] = K.record(spec, ctx.plan.get("run"), check_args, checked)
        out = dict(result, **res)
        out["check_module"] = writer or spec.module  # which module ran (the task's action is this plugin's name)
        facts = dict(res.get("ansible_facts") or {})
        if writer is not None:  # the facts the check sets (python_env_versions) are the host's too
            facts.update(checked.get("ansible_facts") or {})
        out["ansible_facts"] = dict(facts, **{K.RECORDS: kept})
        if K.as_bool(args.get("fail", False)) and not res.get("failed") and not self._task.check_mode:
            ctx.results = {spec.name: checked}
            records = spec.records(host, checked, ctx)
            if any(c["status"] == C.FAIL for c in records):
                out["failed"] = True
                out["msg"] = failed_line(host, records)
        return out
