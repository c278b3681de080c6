# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Filters of the health_timer role (logic in module_utils/verify/health_timer.py); their documentation is in
health_timer_schedule.yml, health_timer_command.yml and health_timer_parents.yml beside this file."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.provision.cluster.plugins.module_utils.verify import health_timer as H


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
