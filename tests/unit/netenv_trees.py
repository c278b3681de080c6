"""Build sysfs/procfs trees in a temp dir from captured facts (shared by the netenv unit tests).

Nothing here invents output: the trees are laid out from real captures
(tests/fixtures/h100-node/net, tests/fixtures/seed-ib, tests/fixtures/netenv) in the
layout the kernel uses (/sys/class/net/IF/ATTR, /sys/class/infiniband/DEV/ports/N/ATTR,
/proc/net/FILE).
"""

from __future__ import annotations

import re
from pathlib import Path

from helpers import FIXTURES, REPO

NETENV = REPO / "tests" / "fixtures" / "netenv"
H100_NET = FIXTURES / "h100-node" / "net"
SEED_IB = FIXTURES / "seed-ib"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def net_tree(root: Path, capture: Path, extra_attrs: str = "") -> tuple[Path, Path]:
    """sys/ and proc/ under root from a capture dir (sys-class-net-attrs.txt + proc-net-*.txt)."""
    sys_root, proc_root = root / "sys", root / "proc"
    attrs = (capture / "sys-class-net-attrs.txt").read_text() + extra_attrs
    for line in attrs.splitlines():
        if not line.strip():
            continue
        name, *pairs = line.split()
        base = sys_root / "class" / "net" / name
        base.mkdir(parents=True, exist_ok=True)
        for pair in pairs:
            key, _, value = pair.partition("=")
            if key in ("device", "link"):
                continue
            if key == "bridge":          # a software bridge has a bridge/ directory
                (base / "bridge").mkdir(exist_ok=True)
                continue
            if value != "":              # an attribute the kernel refuses to read is absent here
                _write(base / key, value + "\n")
    for name in ("route", "fib_trie", "if_inet6"):
        src = capture / ("proc-net-%s.txt" % name)
        _write(proc_root / "net" / name, src.read_text() if src.exists() else "")
    return sys_root, proc_root


_DEV = re.compile(r"Infiniband device '(\S+)' port (\d+) status:")
_FIELD = re.compile(r"^\s+([a-z_ ]+):\s+(.*)$")


def parse_ibstatus(text: str) -> dict[tuple[str, int], dict[str, str]]:
    out: dict[tuple[str, int], dict[str, str]] = {}
    key = None
    for line in text.splitlines():
        match = _DEV.match(line)
        if match:
            key = (match.group(1), int(match.group(2)))
            out[key] = {}
            continue
        match = _FIELD.match(line)
        if match and key:
            out[key][match.group(1).strip()] = match.group(2).strip()
    return out


def seed_ib_tree(root: Path, drop: tuple[str, ...] = (), roce_ipv4_gid: str | None = None) -> Path:
    """/sys/class/infiniband + /sys/class/net from the seed's ibstatus and ibdev2netdev outputs.

    Port attributes are ibstatus's fields in sysfs form (state "4: ACTIVE", phys_state "5: LinkUp",
    rate, link_layer). GID 0 is the port's default GID; on RoCE ports the kernel lists each GID once
    per RoCE version, so GID 0 is "IB/RoCE v1" and GID 1 the same GID as "RoCE v2". With
    roce_ipv4_gid, GIDs 2/3 hold that IPv4-mapped GID (v1, v2), as the kernel adds for an IPv4
    address on the netdev.
    """
    sys_root = root / "sys"
    ports = parse_ibstatus((SEED_IB / "ibstatus.txt").read_text())
    netdevs = {}
    for line in (SEED_IB / "ibdev2netdev.txt").read_text().splitlines():
        match = re.match(r"(\S+) port (\d+) ==> (\S+) \((\w+)\)", line)
        if match:
            netdevs[match.group(1)] = (match.group(3), match.group(4))
    for (dev, port), fields in ports.items():
        if dev in drop:
            continue
        pdir = sys_root / "class" / "infiniband" / dev / "ports" / str(port)
        for key, field in (("state", "state"), ("phys_state", "phys state"), ("rate", "rate"),
                           ("link_layer", "link_layer")):
            _write(pdir / key, fields[field] + "\n")
        gid = fields["default gid"]
        gids = [(gid, "IB/RoCE v1"), (gid, "RoCE v2")] if fields["link_layer"] == "Ethernet" else [(gid, None)]
        if roce_ipv4_gid and fields["link_layer"] == "Ethernet":
            gids += [(roce_ipv4_gid, "IB/RoCE v1"), (roce_ipv4_gid, "RoCE v2")]
        for index in range(len(gids), 8):
            gids.append(("0000:0000:0000:0000:0000:0000:0000:0000", None))
        for index, (value, kind) in enumerate(gids):
            _write(pdir / "gids" / str(index), value + "\n")
            if kind:
                _write(pdir / "gid_attrs" / "types" / str(index), kind + "\n")
        netdev, state = netdevs[dev]
        (sys_root / "class" / "infiniband" / dev / "device" / "net" / netdev).mkdir(parents=True, exist_ok=True)
        nbase = sys_root / "class" / "net" / netdev
        _write(nbase / "operstate", ("up" if state == "Up" else "down") + "\n")
        _write(nbase / "type", ("32" if fields["link_layer"] == "InfiniBand" else "1") + "\n")
        if state == "Up":
            _write(nbase / "carrier", "1\n")
    return sys_root
