# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The health timer's decisions (roles/health_timer): the schedule for systemd and cron, and the
command line of the root-owned wrapper that runs `provision verify --local` on the node.

Plain Python, no Ansible import: the filter plugins/filter/health_timer.py and the unit tests call it.
"""

from __future__ import annotations

import json
import shlex

MIN_INTERVAL = 10          # seconds: below this a run would start before the last one's checks settle
MAX_CRON_MINUTES = 24 * 60


def schedule(interval, timeout=None):
    """{interval, systemd: OnUnitActiveSec value, cron: the five time fields, cron_minutes, timeout}
    for a run every `interval` seconds. cron counts whole minutes: the interval is rounded up (at
    least 1 minute); a step of minutes that does not divide an hour or a day is refused (cron's
    `*/7` restarts every hour: the runs would not be evenly spaced). timeout: seconds one run may
    take (default: the interval less 10%, at most 600)."""
    try:
        seconds = int(interval)
    except (TypeError, ValueError):
        raise ValueError("health_timer_interval %r is not a number of seconds" % (interval,))
    if seconds < MIN_INTERVAL:
        raise ValueError("health_timer_interval %d s is below %d s" % (seconds, MIN_INTERVAL))
    minutes = max(1, -(-seconds // 60))
    if minutes < 60:
        if 60 % minutes:
            minutes = next(m for m in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60) if m >= minutes)
        cron = "*/%d * * * *" % minutes if minutes < 60 else "0 * * * *"
    elif minutes <= MAX_CRON_MINUTES:
        hours = -(-minutes // 60)
        if 24 % hours:
            hours = next(h for h in (1, 2, 3, 4, 6, 8, 12, 24) if h >= hours)
        minutes = hours * 60
        cron = "0 */%d * * *" % hours if hours < 24 else "0 0 * * *"
    else:
        raise ValueError("health_timer_interval %d s is above a day" % seconds)
    if timeout is None or timeout == "":
        run_timeout = min(600, max(MIN_INTERVAL, int(seconds * 0.9)))
    else:
        run_timeout = int(timeout)
    return {"interval": seconds, "systemd": "%ds" % seconds, "cron": cron, "cron_minutes": minutes,
            "timeout": run_timeout}


def command(provision, node, textfile, checks=(), extra_vars=None, timeout=120):
    """argv of one run: this node's checks, one journal line per failure (--brief), the metrics
    written atomically to the textfile."""
    argv = [provision, "verify", "--local", "--brief", "--node-name", str(node), "--timeout", str(int(timeout)),
            "--prometheus", textfile]
    for name in checks or []:
        argv += ["--only", str(name)]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars, sort_keys=True, separators=(",", ":"))]
    return argv


def shell_line(argv):
    """argv as one /bin/sh line (every word quoted where needed)."""
    return " ".join(shlex.quote(str(a)) for a in argv)


def parents(path):
    """/usr/local/lib/x -> ['/', '/usr', '/usr/local', '/usr/local/lib', '/usr/local/lib/x']: the
    directories whose owners decide who could replace what root runs."""
    path = str(path)
    if not path.startswith("/"):
        raise ValueError("%s is not an absolute path" % path)
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ValueError("%s has . or .. in it" % path)
    return ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
