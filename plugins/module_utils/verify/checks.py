# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The one record every check returns, and the helpers that build and summarise it.

A check is a plain dict (it travels through Ansible's JSON unchanged):

    {"check": "ssh node1->node2",   # the check's id as people read it (per-peer checks name the peer)
     "status": "fail",              # pass | fail | warn | skip
     "detail": "one line of cause",
     "fix": "one line: the exact command or variable ('' when nothing is to fix)",
     "node": "node1",               # the node it concerns, when the producer knows it (else the caller sets it)
     "data": {...}}                 # optional machine-readable values (measured value, limit, device, ...)

Every check module returns a list of these as ``checks``; ``provision verify``, the verify pass at
the end of site.yml, the CLI table and the JSON document read nothing else. Plain Python, no
Ansible import: the modules, the action plugins, the CLI and the tests share it.
"""

from __future__ import annotations

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
STATUSES = (PASS, FAIL, WARN, SKIP)
# worst first: the status a group of checks shows
SEVERITY = {FAIL: 3, WARN: 2, PASS: 1, SKIP: 0}


def one_line(text):
    """The first non-empty line of text, stripped ('' for None)."""
    if text is None:
        return ""
    for line in str(text).splitlines():
        line = line.strip()
        if line:
            return line.removeprefix("Task failed: ")
    return ""


def check(name, status, detail="", fix="", node=None, data=None):
    """One check record. An unknown status counts as a failure (a check must not pass by typo)."""
    record = {"check": str(name), "status": status if status in STATUSES else FAIL,
              "detail": one_line(detail), "fix": one_line(fix)}
    if node:
        record["node"] = str(node)
    if data:
        record["data"] = data
    return record


def passed(name, detail="", node=None, data=None):
    return check(name, PASS, detail, "", node, data)


def failed(name, detail, fix, node=None, data=None):
    return check(name, FAIL, detail, fix, node, data)


def warned(name, detail, fix="", node=None, data=None):
    return check(name, WARN, detail, fix, node, data)


def skipped(name, reason, node=None, data=None):
    """Not run, with the reason (no GPU, no RDMA device, ...): never reported as passed."""
    return check(name, SKIP, reason, "", node, data)


def worst(checks):
    """The worst status of a list of checks (skip for an empty list)."""
    status = SKIP
    for c in checks:
        if SEVERITY.get(c.get("status"), 3) > SEVERITY[status]:
            status = c.get("status") if c.get("status") in SEVERITY else FAIL
    return status


def failures(checks):
    return [c for c in checks if c.get("status") == FAIL]


def with_node(checks, node):
    """The same checks, each naming node unless it already names one."""
    return [c if c.get("node") else dict(c, node=node) for c in checks]


def fail_line(c):
    """'node1: check: detail | fix: fix' (how ansible-playbook's failure message lists a check)."""
    head = "%s: %s: %s" % (c.get("node") or "cluster", c.get("check"), c.get("detail"))
    return head + (" | fix: %s" % c["fix"] if c.get("fix") else "")
