# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""provision.cluster.versions_compare, computed in the controller's process: a module process
(even on localhost) costs about half a second per run, the comparison itself microseconds."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.provision.cluster.plugins.module_utils.common.python_env import compare_outcome


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("versions", "order", "fail"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        versions, order = args.get("versions"), args.get("order") or []
        if not isinstance(versions, dict) or not isinstance(order, list):
            return dict(result, failed=True,
                        msg="versions_compare: versions must be a dict {node: python_env_versions}, order a list of node names")
        fail = args.get("fail", True)
        fail = fail if isinstance(fail, bool) else str(fail).lower() in ("1", "true", "yes", "on")
        out, msg = compare_outcome(versions, [str(n) for n in order], fail)
        result.update(out)
        if msg:
            result.update(failed=True, msg=msg)
        return result
