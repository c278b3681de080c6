# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Filters of the health_timer role (logic in module_utils/health_timer.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: health_timer_schedule
short_description: The health timer's schedule for systemd and cron from an interval in seconds
description:
  - Returns C({interval, systemd, cron, cron_minutes, timeout}); cron rounds up to whole minutes
    that divide an hour (or hours that divide a day). Fails on an interval below 10 s or above a day.
  - Also provides C(health_timer_command) (the wrapper's command line) and C(health_timer_parents).
positional: timeout
options:
  _input:
    description: Seconds between two runs.
    type: int
    required: true
  timeout:
    description: Seconds one run may take (default 90% of the interval, at most 600).
    type: int
"""

EXAMPLES = r"""
schedule: "{{ 300 | provision.cluster.health_timer_schedule }}"
"""

RETURN = r"""
_value:
  description: The schedule.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.provision.cluster.plugins.module_utils import health_timer as H


def health_timer_schedule(interval, timeout=None):
    try:
        return H.schedule(interval, timeout)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def health_timer_command(provision, node, textfile, checks=None, extra_vars=None, timeout=120):
    return H.shell_line(H.command(provision, node, textfile, checks or [], extra_vars or {}, timeout))


def health_timer_parents(path):
    try:
        return H.parents(path)
    except ValueError as exc:
        raise AnsibleFilterError("health_timer_venv: %s" % exc)


class FilterModule:
    def filters(self):
        return {"health_timer_schedule": health_timer_schedule, "health_timer_command": health_timer_command,
                "health_timer_parents": health_timer_parents}
