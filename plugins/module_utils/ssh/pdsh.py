# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Reading pdsh's output (plain Python, no Ansible)."""

from __future__ import annotations

import re

from ansible_collections.provision.cluster.plugins.module_utils.ssh.ssh_mesh import classify_ssh_error


def parse_pdsh_output(stdout, stderr):
    """pdsh 'host: text' lines -> ({host: first answer}, {host: the telling error line},
    {host: (ssh error class, fix)} for the nodes whose ssh said why it failed)."""
    answers, texts, exits = {}, {}, {}
    for line in stdout.splitlines():
        host, sep, text = line.partition(": ")
        if sep and host.strip() not in answers:
            answers[host.strip()] = text.strip()
    for line in stderr.splitlines():
        line = line.strip()
        m = re.match(r"pdsh@[^:]+: ([^:\s]+): (.*)", line)
        if m:
            exits.setdefault(m.group(1), m.group(2).strip())
            continue
        host, sep, text = line.partition(": ")
        if sep and " " not in host:
            texts.setdefault(host, []).append(text.strip())
    errors, fixes = {}, {}
    for host, lines in texts.items():
        # ssh's own message wins over its banner ("@@@@ WARNING: REMOTE HOST IDENTIFICATION...")
        cls, line, fix = classify_ssh_error("\n".join(lines))
        if cls == "other":
            line = next((ln for ln in lines if ln.strip("@ ") and not ln.startswith("Warning:")), line)
        else:
            fixes[host] = (cls, fix)
        errors[host] = line
    for host, text in exits.items():
        errors.setdefault(host, text)
    return answers, errors, fixes


def missing_answers(hosts, expect, answers, errors, cluster=None):
    """One line per node that did not answer, or answered with another hostname.

    expect: each node's hostname, in `hosts` order (the ssh_mesh stage read them). None where nobody read
    them (provision verify, a run limited to some nodes): an inventory name need not be the hostname, so
    only an answer that is another node's name of `cluster` is the wrong machine."""
    missing = []
    others = {h.split(".")[0] for h in cluster or hosts}
    for i, host in enumerate(hosts):
        got = answers.get(host)
        if got is None:
            missing.append("%s: %s" % (host, errors.get(host) or errors.get("all") or "no answer"))
            continue
        short = got.split(".")[0]
        if expect is None:
            if short != host.split(".")[0] and short in others:
                missing.append("%s: answered %s, another node of the cluster (the name reaches the wrong "
                               "machine)" % (host, got))
            continue
        want = expect[i] if i < len(expect) else host
        if short != want.split(".")[0]:
            missing.append("%s: answered %s, expected %s" % (host, got, want))
    return missing
