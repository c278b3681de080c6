# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
name: verify_events
type: stdout
short_description: One JSON object per line for each play, task and host result
description:
  - A machine-readable stdout callback used by C(provision verify) to show progress while
    C(playbooks/verify.yml) runs. Each line on stdout is one JSON object with an C(event) key
    (C(play), C(task), C(result), C(no_hosts), C(stats)); nothing else is written to stdout.
  - Progress lines carry host, task and status. The raw verify results come last as one
    C(report) event, the custom stat C(provision_verify) that the playbook sets with
    C(ansible.builtin.set_stats), so the CLI never parses human output.
  - Warnings and errors still go to stderr through Ansible's display.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
"""

import json
import sys

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "provision.cluster.verify_events"

    def _emit(self, **event):
        sys.stdout.write(json.dumps(event, default=str) + "\n")
        sys.stdout.flush()

    def v2_playbook_on_play_start(self, play):
        self._emit(event="play", name=play.get_name())

    def v2_playbook_on_no_hosts_matched(self):
        self._emit(event="no_hosts")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._emit(event="task", task=task.get_name())

    def _result(self, result, status):
        res = result._result if isinstance(result._result, dict) else {}
        msg = res.get("msg") if status in ("failed", "unreachable") else None
        self._emit(event="result", host=result._host.get_name(), task=result._task.get_name(),
                   status=status, msg=(str(msg).splitlines()[0] if msg else None))

    def v2_runner_on_ok(self, result):
        self._result(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result(result, "failed")

    def v2_runner_on_unreachable(self, result):
        self._result(result, "unreachable")

    def v2_runner_on_skipped(self, result):
        self._result(result, "skipped")

    def v2_playbook_on_stats(self, stats):
        hosts = sorted(stats.processed.keys())
        custom = (getattr(stats, "custom", None) or {}).get("_run", {})
        self._emit(event="stats", hosts={h: stats.summarize(h) for h in hosts})
        if "provision_verify" in custom:
            self._emit(event="report", report=custom["provision_verify"])
