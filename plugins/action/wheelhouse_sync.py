# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Action side of provision.cluster.wheelhouse_sync: one task that compares the node's wheelhouse
with the controller's manifest and transfers only the wheels it lacks (no rsync needed)."""
from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

MODULE = "provision.cluster.wheelhouse_sync"


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _VALID_ARGS = frozenset(("src", "path", "files", "peer_url", "peer_timeout"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        src = os.path.expanduser(str(args.pop("src", "") or ""))
        if not src or not os.path.isdir(src):
            raise AnsibleActionFail(f"wheelhouse_sync: src {src!r} is not a directory on the controller")
        # 1. compare (read-only on the node apart from making the directory)
        state = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        missing = state.get("missing") or []
        peer = {}
        if missing and args.get("peer_url") and not state.get("failed") and not self._task.check_mode:
            # 1b. from a node that has them, over the cluster network (sha256-checked on the node)
            peer = self._execute_module(module_name=MODULE, module_args=dict(args, fetch=True), task_vars=task_vars)
            if peer.get("failed"):
                return dict(result, **peer)
            missing = peer.get("missing") or []
            state = peer
        if state.get("failed") or not missing or self._task.check_mode:
            result.update(state)
            result["bytes_from_controller"] = 0
            if peer.get("fetched"):
                result["changed"] = True
            return result
        # 2. transfer only what is missing into a private staging directory
        staged = self._make_tmp_path()
        try:
            for name in missing:
                local = os.path.join(src, name)
                if not os.path.isfile(local):
                    raise AnsibleActionFail(f"wheelhouse_sync: {local} listed in the manifest but missing on the controller")
                self._transfer_file(local, self._connection._shell.join_path(staged, name))
            # 3. the module checks each staged file's sha256 and moves it into place atomically
            adopted = self._execute_module(module_name=MODULE, module_args=dict(args, staged=staged),
                                           task_vars=task_vars)
        finally:
            self._remove_tmp_path(staged)
        result.update(adopted)
        result["copied"] = missing
        result["changed"] = True
        for key in ("fetched", "bytes_from_peer", "peer_errors"):
            if key in peer:
                result[key] = peer[key]
        result["bytes_from_controller"] = sum(os.path.getsize(os.path.join(src, n)) for n in missing)
        return result
