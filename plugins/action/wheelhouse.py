# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Action side of provision.cluster.wheelhouse (a controller-side module): when the manifest already
covers every requirement set with files still present and nothing in it would change (the re-run
case), answer from the controller's own process; otherwise run the module, which downloads."""
from __future__ import annotations

import os

from ansible.plugins.action import ActionBase

from ansible_collections.provision.cluster.plugins.module_utils.common import python_env as P

MODULE = "provision.cluster.wheelhouse"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        local = self._connection.transport == "local" or self._play_context.remote_addr in ("localhost", "127.0.0.1")
        if local:
            path = os.path.expanduser(str(args.get("path") or ""))
            try:
                state = P.wheelhouse_state(path, args.get("requirements") or [], str(args.get("platform") or "manylinux_2_28_x86_64"),
                                           str(args.get("python_version") or "3.11"), str(args.get("implementation") or "cp"),
                                           args.get("abi") or None)
            except (ValueError, TypeError, OSError):
                state = None    # the module says what is wrong
            if state is not None and not state["todo"]:
                new = P.wheelhouse_records(path, state, {})
                if new == state["manifest"]:
                    result.update(changed=False, downloaded=[], by_set=P.wheelhouse_by_set(state, new), path=path)
                    return result
        result.update(self._execute_module(module_name=MODULE, module_args=dict(args), task_vars=task_vars))
        return result
