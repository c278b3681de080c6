# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Run several read-only check modules on one host at the same time (provision verify)."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase


# Building a module's payload parses Python (ast), which is not safe in several threads at once;
# only the execution on the host runs in parallel.
_BUILD_LOCK = threading.Lock()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("checks", "parallel", "reuse"))

    def _configure_module(self, *args, **kwargs):
        with _BUILD_LOCK:
            return super()._configure_module(*args, **kwargs)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        checks = self._task.args.get("checks") or {}
        parallel = int(self._task.args.get("parallel") or 8)
        if not isinstance(checks, dict):
            return {"failed": True, "msg": "checks must be a dict: name -> {module, args}"}
        wanted = {name: spec for name, spec in checks.items()
                  if isinstance(spec, dict) and spec.get("module") and spec.get("enabled", True) not in (False, "False", "false")}
        bad = [name for name, spec in checks.items() if not isinstance(spec, dict) or not spec.get("module")]
        if bad:
            return {"failed": True, "msg": "checks without a module: %s" % ", ".join(bad)}

        def one(item):
            name, spec = item
            try:
                res = self._execute_module(module_name=spec["module"], module_args=dict(spec.get("args") or {}),
                                           task_vars=task_vars, wrap_async=False)
            except AnsibleConnectionFailure as exc:
                res = {"unreachable": True, "msg": str(exc)}
            except Exception as exc:  # one broken check must not hide the others
                res = {"failed": True, "msg": "%s: %s" % (spec["module"], exc)}
            res.pop("invocation", None)
            return name, res

        reuse = self._task.args.get("reuse") or {}
        if not isinstance(reuse, dict):
            return {"failed": True, "msg": "reuse must be a dict: name -> an earlier result of that check"}
        # a reused result of a check not listed here (one that needs every node, like landing) is passed on
        results = {name: dict(res, reused=True) for name, res in reuse.items()
                   if isinstance(res, dict) and (name in wanted or name not in checks)}
        todo = [(name, spec) for name, spec in wanted.items() if name not in results]
        with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(todo) or 1))) as pool:
            results.update(pool.map(one, todo))
        result.update(changed=False, results=results)
        return result
