# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Byte sizes, read and written the one way this collection does (binary units).

Plain Python (no Ansible imports, Python 3.9+): the node_runtime rules (limits.py), the all-reduce
smoke test (allreduce_smoke.py) and the benchmarks use it.
"""

from __future__ import annotations

import re

KIB = 1024
MIB = 1024 ** 2
GIB = 1024 ** 3
TIB = 1024 ** 4

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.I)
_UNITS = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": TIB}


def parse_size(value):
    """'64m', '64M', '64MiB', '64MB', '2GiB', '1k', '1073741824', 4096 -> bytes.

    Binary units whatever the spelling, as docker/podman --shm-size and nccl-tests' -b/-e take them.
    """
    if isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError("not a size: %r (use e.g. 4096, 64m, 16M, 1g or 2GiB)" % (value,))
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def human(nbytes, exact=False):
    """Bytes -> the largest binary unit: 64 MiB, 1 GiB, 1.5 GiB, 8 KiB; None -> 'unlimited'.

    exact: only a unit that divides nbytes (1536 MiB, not 1.5 GiB), as message sizes are shown.
    """
    if nbytes is None:
        return "unlimited"
    for unit, size in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= size and (not exact or nbytes % size == 0):
            val = nbytes / float(size)
            return ("%d %s" % (val, unit)) if val == int(val) else ("%.1f %s" % (val, unit))
    return "%d B" % nbytes


def docker_size(nbytes):
    """Bytes -> a --shm-size / sizeLimit argument rounded up to a whole unit: 2g, 512m."""
    if nbytes % GIB == 0 or nbytes >= GIB:
        return "%dg" % -(-nbytes // GIB)
    return "%dm" % -(-nbytes // MIB)
