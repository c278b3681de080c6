# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Reading pdsh's output (plain Python, no Ansible)."""

from __future__ import annotations

import re


def parse_pdsh_output(stdout, stderr):
    """pdsh 'host: text' lines -> ({host: first answer}, {host: error text})."""
    answers, errors = {}, {}
    for line in stdout.splitlines():
        host, sep, text = line.partition(": ")
        if sep and host.strip() not in answers:
            answers[host.strip()] = text.strip()
    exits = {}
    for line in stderr.splitlines():
        line = line.strip()
        m = re.match(r"pdsh@[^:]+: ([^:\s]+): (.*)", line)
        if m:
            exits.setdefault(m.group(1), m.group(2).strip())
            continue
        host, sep, text = line.partition(": ")
        if sep and " " not in host and host not in errors:
            errors[host] = text.strip()  # the remote side's / ssh's own message wins
    for host, text in exits.items():
        errors.setdefault(host, text)
    return answers, errors


def missing_answers(hosts, expect, answers, errors):
    """One line per node that did not answer, or answered with another hostname."""
    missing = []
    for host, want in zip(hosts, expect):
        got = answers.get(host)
        if got is None:
            missing.append("%s: %s" % (host, errors.get(host) or errors.get("all") or "no answer"))
        elif got.split(".")[0] != want.split(".")[0]:
            missing.append("%s: answered %s, expected %s" % (host, got, want))
    return missing
