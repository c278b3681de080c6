# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Every task result of a gpu_proof.sh step, one JSON object per line, into $GPU_PROOF_EVENTS.

scripts/gpu_proof.sh enables it (ANSIBLE_CALLBACK_PLUGINS + ANSIBLE_CALLBACKS_ENABLED) next to the
default stdout callback, so that the step's log stays the one people read and the summary is built
from the modules' own results, failed ones included (a role that stops on a GPU fault still leaves
the health reading behind). Not part of the collection: tooling of the proof run only.
"""
from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: gpu_proof_results
type: aggregate
short_description: Task results as JSON lines for scripts/gpu_proof.sh
description:
  - Appends one JSON object per task result (host, task, action, role, status, seconds, result) to
    the file named by the environment variable C(GPU_PROOF_EVENTS); does nothing when it is unset.
requirements: [enabled in callbacks_enabled]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpu_proof_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._path = os.environ.get("GPU_PROOF_EVENTS")
        self._started = {}

    def _write(self, record):
        if not self._path:
            return
        with open(self._path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str, sort_keys=True) + "\n")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._started[task._uuid] = time.monotonic()

    def _result(self, result, status):
        task = result._task
        res = result._result if isinstance(result._result, dict) else {"value": str(result._result)}
        res = {k: v for k, v in res.items() if not str(k).startswith("_ansible")}
        role = getattr(task, "_role", None)
        start = self._started.get(task._uuid)
        self._write({"host": result._host.get_name(), "task": task.get_name(), "action": task.action,
                     "role": role.get_name() if role else None, "status": status,
                     "seconds": round(time.monotonic() - start, 3) if start else None, "result": res})

    def v2_runner_on_ok(self, result):
        self._result(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_unreachable(self, result):
        self._result(result, "unreachable")

    def v2_runner_on_skipped(self, result):
        self._result(result, "skipped")
