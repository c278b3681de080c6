# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Node lists of schedulers and launchers, parsed into [(name, slots or None)] in order.

- DeepSpeed/MPI hostfiles: `name slots=N [max_slots=M]`, `#` comments (OpenMPI also allows a
  bare name = 1 slot).
- SLURM: `SLURM_JOB_NODELIST` compressed ranges (`gpu[01-04,07],cpu3`), expanded by python-hostlist,
  with `SLURM_TASKS_PER_NODE` (`2(x3),1`) as slots when given.
- PBS/Torque: `PBS_NODEFILE`, one name per slot, so repeated names are slots.
"""

from __future__ import annotations

import re

_HOSTFILE_LINE = re.compile(r"^(?P<name>[^\s#]+)(?P<rest>(?:\s+[A-Za-z_]+=\S+)*)\s*(?:#.*)?$")
_KV = re.compile(r"([A-Za-z_]+)=(\S+)")
_TASKS = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
_NUMBER = re.compile(r"(\d+)$")


class NodeListError(ValueError):
    """A node list we cannot read (message names the line)."""


def _add(order, name, slots):
    if name in order:
        raise NodeListError("%s is listed twice" % name)
    order[name] = slots


def parse_hostfile(text):
    """DeepSpeed / OpenMPI hostfile -> [(name, slots or None)]."""
    nodes = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _HOSTFILE_LINE.match(line)
        if not match:
            raise NodeListError("hostfile line %d: cannot read %r (want `name slots=N`)" % (lineno, raw))
        opts = dict(_KV.findall(match.group("rest")))
        slots = opts.get("slots")
        if slots is not None and not slots.isdigit():
            raise NodeListError("hostfile line %d: slots=%s is not a number" % (lineno, slots))
        _add(nodes, match.group("name"), int(slots) if slots is not None else None)
    return list(nodes.items())


def parse_pbs_nodefile(text):
    """PBS_NODEFILE -> [(name, slots)]: one line per slot, first appearance gives the order."""
    nodes = {}
    for raw in text.splitlines():
        name = raw.strip()
        if name and not name.startswith("#"):
            nodes[name] = nodes.get(name, 0) + 1
    return list(nodes.items())


def parse_tasks_per_node(text):
    """SLURM_TASKS_PER_NODE (`2(x3),1`) -> [2, 2, 2, 1]."""
    counts = []
    for part in text.split(","):
        match = _TASKS.match(part.strip())
        if not match:
            raise NodeListError("cannot read SLURM_TASKS_PER_NODE part %r" % part)
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def parse_slurm_nodelist(nodelist, tasks_per_node=None):
    """SLURM_JOB_NODELIST (+ SLURM_TASKS_PER_NODE) -> [(name, slots or None)]."""
    import hostlist  # python-hostlist: the same expansion as `scontrol show hostnames`

    try:
        names = hostlist.expand_hostlist(nodelist.strip())
    except hostlist.BadHostlist as exc:
        raise NodeListError("cannot expand node list %r: %s" % (nodelist, exc)) from None
    slots = [None] * len(names)
    if tasks_per_node:
        counts = parse_tasks_per_node(tasks_per_node)
        if len(counts) != len(names):
            raise NodeListError("SLURM_TASKS_PER_NODE %r gives %d counts for %d nodes"
                                % (tasks_per_node, len(counts), len(names)))
        slots = counts
    nodes = {}
    for name, count in zip(names, slots, strict=True):
        _add(nodes, name, count)
    return list(nodes.items())


def node_number(name):
    """The trailing number of a host name (`gpu07` -> 7), or None."""
    match = _NUMBER.search(name)
    return int(match.group(1)) if match else None
