# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Which machine a node is: the identity its cached facts are kept with.

Cached facts belong to one machine. ``playbooks/identity.yml`` reads, with ``raw`` (a reinstalled
node may no longer have the interpreter its cached facts name), the machine-id, the boot id with the
start time of PID 1 (a container's "boot": its boot id is its host's) and the OS release, and compares
them with the fact ``provision_machine`` cached at the last run:

- ``other``: the machine-id or the release changed: another machine (reinstalled, replaced, another
  lab's node of the same name): every cached fact of it is dropped and gathered again. So is a node
  that is the same machine but no longer has the interpreter its cached facts name (a venv removed, a
  Python upgraded in place): with it every module would fail "The module interpreter ... was not found";
- ``rebooted``: same machine, new boot: its facts are gathered again (devices, memory), what the
  stages recorded is kept;
- ``same``, ``new`` (nothing cached) or ``unknown`` (the probe did not answer: the stages report why).

Plain Python, no Ansible import.
"""

from __future__ import annotations

import shlex

# sh, no Python; one line per field
PROBE = ("printf 'machine_id=%s\\n' \"$(cat /etc/machine-id 2>/dev/null)\"; "
         "printf 'boot_id=%s\\n' \"$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)\"; "
         "printf 'init_start=%s\\n' \"$(sed 's/^.*) //' /proc/1/stat 2>/dev/null | cut -d' ' -f20)\"; "
         "if [ -r /etc/os-release ]; then . /etc/os-release; fi; "
         "printf 'release=%s %s\\n' \"${ID:-}\" \"${VERSION_ID:-${VERSION_CODENAME:-}}\"")
FIELDS = ("machine_id", "boot_id", "init_start", "release")


def probe(interpreter=None):
    """PROBE; with INTERPRETER (the one the cached facts name), also whether the node still has it."""
    if not interpreter:
        return PROBE
    return PROBE + ("; if [ -x %s ]; then printf 'interpreter=present\\n'; else printf 'interpreter=missing\\n'; fi"
                    % shlex.quote(str(interpreter)))


def interpreter_gone(text):
    """True when PROBE's output says the cached interpreter is not on the node any more."""
    return any(line.strip() == "interpreter=missing" for line in str(text or "").splitlines())


def parse_identity(text):
    """{machine_id, boot, release} from PROBE's output, or None when it is not that output."""
    found = {}
    for line in str(text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in FIELDS:
            found[key] = value.strip()
    if set(found) != set(FIELDS) or not (found["boot_id"] or found["machine_id"]):
        return None
    return {"machine_id": found["machine_id"], "boot": "%s/%s" % (found["boot_id"], found["init_start"]),
            "release": found["release"]}


def machine_verdict(now, cached, gone=False):
    """other | rebooted | same | new | unknown (see the module's docstring); GONE: interpreter_gone()."""
    if not now:
        return "unknown"
    if not isinstance(cached, dict) or not cached:
        return "new"
    if cached.get("release") != now["release"]:
        return "other"
    if cached.get("machine_id") and now["machine_id"] and cached.get("machine_id") != now["machine_id"]:
        return "other"
    if gone:
        return "other"
    if cached.get("boot") != now["boot"]:
        return "rebooted"
    return "same"
