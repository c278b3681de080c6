# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Network facts from /sys and /proc, and the NCCL network decision made from them.

Plain Python (no Ansible imports): used by the nccl_net_facts module, the nccl_net_agree filter,
`provision verify` and the unit tests. Nothing here runs `ip`: minimal images do not have it.

Reading:  read_net(sys_root, proc_root) -> {"interfaces": {...}, "routes": [...], "ipv6": [...]}
          read_rdma(sys_root)           -> {"mlx5_0": {"ports": {1: {...}}, "netdevs": [...]}}
Deciding: decide(net, rdma, peers, overrides) -> {"env", "socket_ifname", "ib", "peers", "reasons", ...}
Agreeing: agree({host: decision}) -> {host: {"env", "reasons", "checks"}}  (cluster-wide consistency)
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import struct
import time

from ansible_collections.provision.cluster.plugins.module_utils.common.files import read_attr

ARPHRD_LOOPBACK = 772

# software bridges and container plumbing: never the interface that carries NCCL traffic
BRIDGE_PREFIXES = ("docker", "podman", "virbr", "br-", "cni", "veth", "cali", "flannel", "lxcbr",
                   "lxdbr", "kube-", "weave", "vxlan.calico", "cilium")

ROUTE_FLAG_UP = 0x1
ROUTE_FLAG_GATEWAY = 0x2


def _listdir(path, key=None):
    """Sorted entries of a directory, [] when it is absent."""
    try:
        return sorted(os.listdir(path), key=key)
    except OSError:
        return []


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------- /proc parsers

def _hex_ipv4(text):
    """/proc/net/route prints addresses as host-order (little-endian) hex."""
    return socket.inet_ntoa(struct.pack("<I", int(text, 16)))


def parse_proc_route(text):
    """/proc/net/route -> [{iface, destination, gateway, mask, prefix, flags, metric, network}]."""
    routes = []
    lines = text.splitlines()
    for line in lines[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        iface, dest, gateway, flags, _ref, _use, metric, mask = fields[:8]
        network = ipaddress.IPv4Network("%s/%s" % (_hex_ipv4(dest), _hex_ipv4(mask)), strict=False)
        routes.append({
            "iface": iface,
            "destination": str(network.network_address),
            "prefix": network.prefixlen,
            "network": str(network),
            "gateway": _hex_ipv4(gateway),
            "flags": int(flags, 16),
            "metric": int(metric),
        })
    return routes


_TRIE_TABLE = re.compile(r"^(\S.*):\s*$")
_TRIE_LEAF = re.compile(r"^\s*\|--\s+(\d+\.\d+\.\d+\.\d+)\s*$")
_TRIE_INFO = re.compile(r"^\s*/(\d+)\s+(\S+)\s+(\S+)")


def parse_fib_trie(text):
    """/proc/net/fib_trie -> [{table, address, prefix, scope, type}] (one entry per leaf info line).

    Leaves look like `|-- 10.89.152.11` followed by one or more `/32 host LOCAL` lines.
    """
    entries = []
    seen = set()
    table = None
    leaf = None
    for line in text.splitlines():
        match = _TRIE_TABLE.match(line)
        if match:
            table, leaf = match.group(1), None
            continue
        match = _TRIE_LEAF.match(line)
        if match:
            leaf = match.group(1)
            continue
        match = _TRIE_INFO.match(line)
        if match and leaf is not None:
            entry = (table, leaf, int(match.group(1)), match.group(2), match.group(3))
            if entry not in seen:
                seen.add(entry)
                entries.append(dict(zip(("table", "address", "prefix", "scope", "type"), entry)))
            continue
        if line.strip().startswith("+--"):
            leaf = None
    return entries


def parse_if_inet6(text):
    """/proc/net/if_inet6 -> [{address, prefix, scope, iface}]."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 6:
            continue
        raw, _index, prefix, scope, _flags, iface = fields
        addr = ipaddress.IPv6Address(int(raw, 16))
        out.append({"address": str(addr), "prefix": int(prefix, 16), "scope": int(scope, 16), "iface": iface})
    return out


# ---------------------------------------------------------------- sysfs readers

def read_interfaces(sys_root="/sys"):
    """Every interface under /sys/class/net with the attributes the decision needs."""
    base = os.path.join(sys_root, "class", "net")
    out = {}
    for name in _listdir(base):
        path = os.path.join(base, name)
        try:
            link = os.readlink(path)
        except OSError:
            link = ""
        speed = _int(read_attr(os.path.join(path, "speed")))
        try:
            driver = os.path.basename(os.readlink(os.path.join(path, "device", "driver")))
        except OSError:
            driver = None
        out[name] = {
            "name": name,
            "operstate": read_attr(os.path.join(path, "operstate")),
            "carrier": _int(read_attr(os.path.join(path, "carrier"))),
            "mtu": _int(read_attr(os.path.join(path, "mtu"))),
            "type": _int(read_attr(os.path.join(path, "type"))),
            "speed": speed if speed is not None and speed > 0 else None,
            "mac": read_attr(os.path.join(path, "address")),
            "virtual": "/virtual/" in link,
            "driver": driver,
            "bridge": os.path.isdir(os.path.join(path, "bridge")),
            "bridge_port": os.path.isdir(os.path.join(path, "brport")),
            "ipv4": [],
            "ipv6": [],
        }
    return out


def read_net(sys_root="/sys", proc_root="/proc"):
    """Interfaces with their IPv4/IPv6 addresses, and the IPv4 routing table."""
    interfaces = read_interfaces(sys_root)
    routes = parse_proc_route(read_attr(os.path.join(proc_root, "net", "route")) or "")
    trie = parse_fib_trie(read_attr(os.path.join(proc_root, "net", "fib_trie")) or "")
    inet6 = parse_if_inet6(read_attr(os.path.join(proc_root, "net", "if_inet6")) or "")
    assign_addresses(interfaces, routes, trie, inet6)
    return {"interfaces": interfaces, "routes": routes}


def assign_addresses(interfaces, routes, trie, inet6):
    """Give each interface its addresses.

    fib_trie lists the local addresses (`/32 host LOCAL`) but not their interface; the connected
    route (no gateway) whose network holds the address names it (longest prefix wins). Loopback
    addresses belong to lo.
    """
    connected = [r for r in routes if not r["flags"] & ROUTE_FLAG_GATEWAY]
    for entry in trie:
        if entry["type"] != "LOCAL" or entry["prefix"] != 32:
            continue
        addr = ipaddress.IPv4Address(entry["address"])
        if addr.is_loopback:
            iface, prefix = ("lo" if "lo" in interfaces else None), 8
        else:
            best = None
            for route in connected:
                if addr in ipaddress.IPv4Network(route["network"]):
                    if best is None or route["prefix"] > best["prefix"]:
                        best = route
            iface, prefix = (best["iface"], best["prefix"]) if best else (None, 32)
        if iface in interfaces:
            item = "%s/%d" % (addr, prefix)
            if item not in interfaces[iface]["ipv4"]:
                interfaces[iface]["ipv4"].append(item)
    for entry in inet6:
        if entry["iface"] in interfaces:
            interfaces[entry["iface"]]["ipv6"].append("%s/%d" % (entry["address"], entry["prefix"]))


_STATE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)")
_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")
_IPV4_MAPPED = re.compile(r"^0000:0000:0000:0000:0000:ffff:", re.I)
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def _state(text):
    match = _STATE.match(text or "")
    return (int(match.group(1)), match.group(2)) if match else (None, text)


def read_rdma(sys_root="/sys"):
    """RDMA devices under /sys/class/infiniband: per port state, link layer, rate and GID table."""
    base = os.path.join(sys_root, "class", "infiniband")
    out = {}
    for dev in _listdir(base):
        dpath = os.path.join(base, dev)
        netdevs = _listdir(os.path.join(dpath, "device", "net"))
        ports = {}
        for pname in _listdir(os.path.join(dpath, "ports"), key=lambda p: _int(p) or 0):
            ppath = os.path.join(dpath, "ports", pname)
            state_num, state = _state(read_attr(os.path.join(ppath, "state")))
            _phys_num, phys = _state(read_attr(os.path.join(ppath, "phys_state")))
            rate_text = read_attr(os.path.join(ppath, "rate")) or ""
            rate = _RATE.match(rate_text)
            gids = []
            for gname in _listdir(os.path.join(ppath, "gids"), key=lambda g: _int(g) or 0):
                gid = read_attr(os.path.join(ppath, "gids", gname))
                if not gid or gid == ZERO_GID:
                    continue
                gids.append({
                    "index": int(gname),
                    "gid": gid,
                    "type": read_attr(os.path.join(ppath, "gid_attrs", "types", gname)),
                    "ndev": read_attr(os.path.join(ppath, "gid_attrs", "ndevs", gname)),
                })
            ports[int(pname)] = {
                "state": state,
                "state_num": state_num,
                "phys_state": phys,
                "link_layer": read_attr(os.path.join(ppath, "link_layer")),
                "rate": rate_text,
                "rate_gbps": float(rate.group(1)) if rate else 0.0,
                "gids": gids,
            }
        out[dev] = {"ports": ports, "netdevs": netdevs}
    return out


# ---------------------------------------------------------------- decision

def excluded_reason(iface):
    """Why an interface must never carry NCCL/Gloo traffic, or None."""
    name = iface["name"]
    if name == "lo" or iface.get("type") == ARPHRD_LOOPBACK:
        return "loopback"
    if iface.get("bridge") or name.startswith(BRIDGE_PREFIXES):
        return "software bridge / container plumbing"
    if iface.get("bridge_port"):
        return "enslaved to a bridge"
    if iface.get("operstate") == "down" or iface.get("carrier") == 0:
        return "link down (operstate %s)" % iface.get("operstate")
    return None


def route_lookup(routes, ip):
    """The route the kernel picks for an IPv4 address: longest prefix, then lowest metric."""
    addr = ipaddress.IPv4Address(ip)
    best = None
    for route in routes:
        if not route["flags"] & ROUTE_FLAG_UP:
            continue
        if addr in ipaddress.IPv4Network(route["network"]):
            key = (route["prefix"], -route["metric"])
            if best is None or key > (best["prefix"], -best["metric"]):
                best = route
    return best


def _ipv6_lookup(interfaces, ip):
    addr = ipaddress.IPv6Address(ip)
    best = None
    for iface in interfaces.values():
        for item in iface["ipv6"]:
            net = ipaddress.IPv6Interface(item).network
            if net.prefixlen and addr in net and (best is None or net.prefixlen > best[1]):
                best = (iface["name"], net.prefixlen, str(net))
    return best


def local_addresses(interfaces):
    out = set()
    for iface in interfaces.values():
        for item in iface["ipv4"] + iface["ipv6"]:
            out.add(item.split("/")[0])
    return out


def source_address(iface, peer_ip):
    """The interface's address in the peer's family, preferring the one whose subnet holds the peer."""
    family = ipaddress.ip_address(peer_ip).version
    items = [ipaddress.ip_interface(i) for i in (iface["ipv4"] if family == 4 else iface["ipv6"])]
    items = [i for i in items if not i.ip.is_link_local] or items
    for item in items:
        if ipaddress.ip_address(peer_ip) in item.network:
            return str(item.ip)
    return str(items[0].ip) if items else None


def route_peers(net, peers, self_name=None):
    """For every other node: the interface the kernel would use to reach its address."""
    interfaces = net["interfaces"]
    mine = local_addresses(interfaces)
    out = []
    for peer in peers:
        ip = peer.get("ip") or peer["address"]
        entry = {"name": peer.get("name", ip), "address": peer["address"], "ip": ip}
        if peer.get("name") == self_name or ip in mine:
            continue
        try:
            version = ipaddress.ip_address(ip).version
        except ValueError:
            entry.update(iface=None, error="address %r does not resolve to an IP" % peer["address"])
            out.append(entry)
            continue
        if version == 4:
            route = route_lookup(net["routes"], ip)
            if route is None:
                entry.update(iface=None, error="no route to %s" % ip)
            else:
                via = ("gateway %s" % route["gateway"]) if route["flags"] & ROUTE_FLAG_GATEWAY else "connected"
                entry.update(iface=route["iface"], route=route["network"], via=via)
        else:
            found = _ipv6_lookup(interfaces, ip)
            if found is None:
                entry.update(iface=None, error="no IPv6 subnet holds %s" % ip)
            else:
                entry.update(iface=found[0], route=found[2], via="connected")
        out.append(entry)
    return out


def _fallback_iface(net, reasons):
    """No peers: the interface of the default route, else the first usable one with an address."""
    interfaces = net["interfaces"]
    default = [r for r in net["routes"] if r["prefix"] == 0 and r["iface"] in interfaces
               and not excluded_reason(interfaces[r["iface"]])]
    if default:
        reasons.append("no peers given: %s carries the default route" % default[0]["iface"])
        return default[0]["iface"]
    for name, iface in sorted(interfaces.items()):
        if not excluded_reason(iface) and iface["ipv4"]:
            reasons.append("no peers given and no default route: %s is the first usable interface" % name)
            return name
    return None


def choose_socket_ifname(net, routed, override=None):
    """-> (ifname | None, reasons, errors)."""
    reasons, errors = [], []
    interfaces = net["interfaces"]
    if override:
        if override.startswith(("^", "=")) or "," in override:
            reasons.append("NCCL_SOCKET_IFNAME=%s from nccl_net_socket_ifname (an NCCL pattern: used as given)"
                           % override)
            return override, reasons, errors
        if override not in interfaces:
            errors.append("nccl_net_socket_ifname=%s: no such interface (have: %s)"
                          % (override, ", ".join(sorted(interfaces))))
        else:
            why = excluded_reason(interfaces[override])
            reasons.append("NCCL_SOCKET_IFNAME=%s from nccl_net_socket_ifname%s"
                           % (override, " (warning: %s)" % why if why else ""))
        return override, reasons, errors
    for peer in routed:
        if peer.get("error"):
            errors.append("cannot reach %s (%s): %s" % (peer["name"], peer["address"], peer["error"]))
    if errors:
        return None, reasons, errors
    if not routed:
        return _fallback_iface(net, reasons), reasons, errors
    by_iface = {}
    for peer in routed:
        by_iface.setdefault(peer["iface"], []).append(peer)
    for name, group in sorted(by_iface.items()):
        iface = interfaces.get(name)
        why = excluded_reason(iface) if iface else "not under /sys/class/net"
        if why:
            errors.append("the route to %s goes through %s, which is %s; give the nodes cluster addresses "
                          "on the network that connects them" % (
                              ", ".join("%s (%s)" % (p["name"], p["ip"]) for p in group), name, why))
    if errors:
        return None, reasons, errors
    if len(by_iface) > 1:
        errors.append("no single interface reaches every peer: %s; set nccl_net_socket_ifname" % "; ".join(
            "%s via %s" % (", ".join(p["name"] for p in group), name) for name, group in sorted(by_iface.items())))
        return None, reasons, errors
    name = next(iter(by_iface))
    group = by_iface[name]
    routes = sorted({"%s (%s)" % (p["route"], p["via"]) for p in group})
    reasons.append("NCCL_SOCKET_IFNAME=%s: the kernel routes every peer (%s) through it, route %s" % (
        name, ", ".join("%s %s" % (p["name"], p["ip"]) for p in group), ", ".join(routes)))
    others = [n for n, i in sorted(interfaces.items()) if n != name]
    if others:
        reasons.append("not chosen: %s" % ", ".join(
            "%s (%s)" % (n, excluded_reason(interfaces[n]) or "reaches no peer") for n in others))
    return name, reasons, errors


def rank_rdma_ports(rdma, interfaces=None):
    """-> (ranked usable ports, excluded ports). InfiniBand before RoCE, then faster, then by name."""
    usable, excluded = [], []
    for dev, info in sorted(rdma.items()):
        for port, attrs in sorted(info["ports"].items()):
            hca = "%s:%d" % (dev, port)
            entry = dict(attrs, hca=hca, device=dev, port=port, netdevs=info["netdevs"])
            if attrs["state"] != "ACTIVE":
                excluded.append(dict(entry, why="port %s (%s)" % (attrs["state"], attrs["phys_state"])))
                continue
            if attrs["link_layer"] not in ("InfiniBand", "Ethernet"):
                excluded.append(dict(entry, why="unknown link layer %r" % attrs["link_layer"]))
                continue
            if attrs["link_layer"] == "Ethernet" and interfaces is not None:
                down = [n for n in info["netdevs"] if n in interfaces and excluded_reason(interfaces[n])]
                if down and len(down) == len(info["netdevs"]):
                    excluded.append(dict(entry, why="RoCE netdev %s is down" % ",".join(down)))
                    continue
            usable.append(entry)
    usable.sort(key=lambda e: (e["link_layer"] != "InfiniBand", -e["rate_gbps"], e["device"], e["port"]))
    return usable, excluded


def roce_gid_index(port):
    """RoCE v2 with an IPv4-mapped GID (routable), else any RoCE v2, else None (NCCL's default)."""
    v2 = [g for g in port["gids"] if (g.get("type") or "").lower() == "roce v2"]
    mapped = [g for g in v2 if _IPV4_MAPPED.match(g["gid"])]
    pick = (mapped or v2 or [None])[0]
    return pick["index"] if pick else None


def choose_ib(rdma, interfaces=None, overrides=None):
    """-> dict(disable, hca, ranked, excluded, gid_index, link_layer, reasons, errors)."""
    overrides = overrides or {}
    reasons, errors = [], []
    chosen = []
    ranked, excluded = rank_rdma_ports(rdma, interfaces)
    for item in excluded:
        reasons.append("never %s: %s" % (item["hca"], item["why"]))
    result = {"ranked": [p["hca"] for p in ranked], "excluded": [p["hca"] for p in excluded],
              "hca": None, "gid_index": None, "link_layer": None, "disable": True}
    if overrides.get("ib_disable") is True:
        reasons.append("NCCL_IB_DISABLE=1 from nccl_net_ib_disable")
        return dict(result, reasons=reasons, errors=errors)
    if overrides.get("ib_hca"):
        names = [n.strip() for n in overrides["ib_hca"].lstrip("=^").split(",") if n.strip()]
        known = {p["hca"] for p in ranked} | {p["device"] for p in ranked}
        bad = {p["hca"] for p in excluded} | {p["device"] for p in excluded if p["device"] not in known}
        for name in names:
            if name in bad:
                errors.append("nccl_net_ib_hca names %s, which is not ACTIVE; NCCL would fall back to sockets"
                              % name)
            elif not overrides["ib_hca"].startswith("^") and name not in known:
                errors.append("nccl_net_ib_hca names %s, which is not under /sys/class/infiniband" % name)
        reasons.append("NCCL_IB_HCA=%s from nccl_net_ib_hca" % overrides["ib_hca"])
        chosen = [p for p in ranked if p["hca"] in names or p["device"] in names]
        result.update(hca=overrides["ib_hca"], disable=False,
                      link_layer=chosen[0]["link_layer"] if chosen else None)
    elif not ranked:
        reasons.append("NCCL_IB_DISABLE=1: %s" % (
            "no RDMA device under /sys/class/infiniband" if not rdma else "no ACTIVE RDMA port"))
        return dict(result, reasons=reasons, errors=errors)
    else:
        ib = [p for p in ranked if p["link_layer"] == "InfiniBand"]
        roce = [p for p in ranked if p["link_layer"] == "Ethernet"]
        if ib and not overrides.get("ib_mix_link_layers"):
            chosen = ib
            reasons.append("NCCL_IB_HCA=%s: ACTIVE native InfiniBand ports (%s)" % (
                ",".join(p["hca"] for p in ib), ", ".join("%s %s" % (p["hca"], p["rate"]) for p in ib)))
            if roce:
                reasons.append("second choice, not used while InfiniBand is ACTIVE: %s (RoCE)" % ",".join(
                    p["hca"] for p in roce))
        else:
            chosen = ranked
            reasons.append("NCCL_IB_HCA=%s: ACTIVE ports, InfiniBand before RoCE (%s)" % (
                ",".join(p["hca"] for p in chosen), ", ".join(
                    "%s %s %s" % (p["hca"], p["link_layer"], p["rate"]) for p in chosen)))
        result.update(hca="=" + ",".join(p["hca"] for p in chosen), disable=False,
                      link_layer="InfiniBand" if chosen[0]["link_layer"] == "InfiniBand" else "Ethernet")
    roce_chosen = [p for p in chosen if p["link_layer"] == "Ethernet"]
    if overrides.get("ib_gid_index") is not None:
        result["gid_index"] = int(overrides["ib_gid_index"])
        reasons.append("NCCL_IB_GID_INDEX=%d from nccl_net_ib_gid_index" % result["gid_index"])
    elif roce_chosen:
        indexes = {p["hca"]: roce_gid_index(p) for p in roce_chosen}
        distinct = sorted({i for i in indexes.values() if i is not None})
        if distinct:
            result["gid_index"] = distinct[0]
            reasons.append("NCCL_IB_GID_INDEX=%d: RoCE v2 GID%s" % (
                distinct[0], " (IPv4-mapped)" if any(
                    _IPV4_MAPPED.match(g["gid"]) for p in roce_chosen for g in p["gids"]
                    if g["index"] == distinct[0]) else ""))
            if len(distinct) > 1:
                reasons.append("warning: RoCE ports disagree on the RoCE v2 GID index (%s); NCCL takes one "
                               "index for all: set nccl_net_ib_gid_index" % indexes)
        else:
            reasons.append("no RoCE v2 GID on %s: NCCL_IB_GID_INDEX left to NCCL" % ",".join(indexes))
    return dict(result, reasons=reasons, errors=errors)


def decide(net, rdma, peers, self_name=None, overrides=None):
    """The whole per-node decision, from parsed inputs only (pure)."""
    overrides = overrides or {}
    routed = route_peers(net, peers, self_name)
    ifname, reasons, errors = choose_socket_ifname(net, routed, overrides.get("socket_ifname"))
    if ifname is None and not errors:
        errors.append("no usable network interface (only %s)" % ", ".join(sorted(net["interfaces"])))
    ib = choose_ib(rdma, net["interfaces"], overrides)
    reasons += ib.pop("reasons")
    errors += ib.pop("errors")
    env = {}
    if ifname:
        env["NCCL_SOCKET_IFNAME"] = ifname
        if overrides.get("gloo", True):
            env["GLOO_SOCKET_IFNAME"] = ifname
    if ib["disable"]:
        env["NCCL_IB_DISABLE"] = "1"
    else:
        env["NCCL_IB_DISABLE"] = "0"
        env["NCCL_IB_HCA"] = ib["hca"]
        if ib["gid_index"] is not None:
            env["NCCL_IB_GID_INDEX"] = str(ib["gid_index"])
    for key, value in sorted((overrides.get("extra_env") or {}).items()):
        env[key] = str(value)
        reasons.append("%s=%s from nccl_net_extra_env" % (key, value))
    iface = net["interfaces"].get(ifname) if ifname else None
    for peer in routed:
        if iface and not peer.get("error"):
            peer["source"] = source_address(iface, peer["ip"])
    return {
        "socket_ifname": ifname,
        "socket_iface": iface,
        "peers": routed,
        "ib": ib,
        "env": env,
        "reasons": reasons,
        "errors": errors,
    }


# ---------------------------------------------------------------- probe (I/O, kept small)

def probe(src, ifname, dst, port, timeout):
    """TCP connect from src (bound to ifname when allowed) to dst:port.

    A refused connection is a success: the peer's kernel answered over this path (nothing listens
    on the port yet). Timeouts and unreachable errors are failures: NCCL would hang or fail the same way.
    -> (ok, detail)
    """
    family = socket.AF_INET6 if ":" in dst else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        if ifname and hasattr(socket, "SO_BINDTODEVICE"):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode() + b"\0")
            except OSError:
                pass  # not root: the source address still pins the path on most hosts
        if src:
            sock.bind((src, 0))
        sock.connect((dst, port))
        return True, "connected to %s:%d" % (dst, port)
    except ConnectionRefusedError:
        return True, "%s answered (port %d closed)" % (dst, port)
    except socket.timeout:
        return False, "no answer from %s:%d within %ss" % (dst, port, timeout)
    except OSError as exc:
        return False, "%s:%d: %s" % (dst, port, exc.strerror or exc)
    finally:
        sock.close()


def tcp_state(host, port, timeout):
    """What a TCP connect to host:port meets: "open", "refused" (the host answered, nothing listens),
    "timeout" (no answer within TIMEOUT s) or "error: <reason>" (no route, unknown name, ...)."""
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    except (OSError, ValueError) as exc:   # ValueError: a name IDNA cannot encode, a port out of range
        return "error: %s" % (getattr(exc, "strerror", None) or exc)


def probe_tried(src, ifname, dst, port, timeout, tries=2, pause=1.0, probe_fn=None):
    """probe(), tried again after PAUSE s while it fails, TRIES times in all, each try with a longer
    timeout (TIMEOUT, 2 x TIMEOUT, ...: a 3 s connect sends only two SYNs). A SYN lost while the path
    was busy (32 lab nodes resolving and connecting to every node at once lost some for a few
    seconds; a VM network that blinks) is not a firewall, which fails every try. -> (ok, detail)"""
    probe_fn = probe_fn or probe
    ok, detail = probe_fn(src, ifname, dst, port, timeout)
    for n in range(1, tries):
        if ok:
            break
        time.sleep(pause)
        ok, detail = probe_fn(src, ifname, dst, port, timeout * (n + 1))
    if not ok and tries > 1:
        detail = "%s (%d tries, %g s apart)" % (detail, tries, pause)
    return ok, detail


def probe_checks(host, decision, results):
    """results: [(peer, ok, detail)] -> (checks, errors)."""
    checks, errors = [], []
    ifname = decision["socket_ifname"]
    for peer, ok, detail in results:
        name = "nccl_net.reach.%s" % peer["name"]
        if ok:
            checks.append({"check": name, "status": "pass",
                           "detail": "%s via %s (%s): %s" % (host, ifname, peer.get("source"), detail), "fix": ""})
        else:
            fix = ("check the network/firewall between %s and %s, or set nccl_net_socket_ifname / "
                   "cluster_address" % (host, peer["name"]))
            line = "%s -> %s: %s via %s (%s) cannot reach %s at %s (%s); fix: %s" % (
                host, peer["name"], host, ifname, peer.get("source"), peer["name"], peer["ip"], detail, fix)
            errors.append(line)
            checks.append({"check": name, "status": "fail", "detail": line.split("; fix: ")[0], "fix": fix})
    return checks, errors


def _ip(text):
    try:
        return ipaddress.ip_address(str(text).split("%", 1)[0])
    except ValueError:
        return None


def _loopback(addr):
    ip = _ip(addr)
    return bool(ip and ip.is_loopback)


def names_to_resolve(peers):
    """The peers' names that ``name_check`` needs resolved (a name that is an address is left out)."""
    return [p["name"] for p in peers if p.get("name") and _ip(p["name"]) is None]


def name_check(host, peers, resolved):
    """Do the nodes' names resolve, on this node, to their cluster addresses?

    Launchers and hostfiles name the nodes (hostfile.deepspeed, Slurm, MPI); ssh finds them through
    ~/.ssh/config, anything else through /etc/hosts or DNS. A name that resolves to another node's
    address or to loopback (the 127.0.1.1 line of a cloud image) sends that traffic to the wrong node.

    peers: [{"name", "ip"}] (``ip``: the node's cluster address as resolved here).
    resolved: {name: [addresses] or None (does not resolve)}; names that are addresses are left out.
    Returns one check: fail (wrong node or loopback), warn (does not resolve), else pass.
    """
    ips = {p["name"]: p.get("ip") for p in peers}
    owner = {ip: name for name, ip in ips.items() if ip}
    fails, warns = [], []
    for name, addrs in resolved.items():
        want = ips.get(name)
        if addrs is None:
            warns.append("%s does not resolve" % name)
        elif want in addrs:
            continue
        elif any(owner.get(a) not in (None, name) for a in addrs):
            other = next(owner[a] for a in addrs if owner.get(a) not in (None, name))
            fails.append("%s resolves to %s, the address of %s" % (name, ", ".join(addrs), other))
        elif all(_loopback(a) for a in addrs):
            fails.append("%s resolves to %s (loopback), not to %s" % (name, ", ".join(addrs), want))
    status = "fail" if fails else ("warn" if warns else "pass")
    if status == "pass":
        detail = "%s: %d node names resolve to their cluster addresses" % (host, len(resolved))
        fix = ""
    else:
        detail = "%s: %s" % (host, "; ".join(fails + warns))
        fix = ("fix those names in %s's /etc/hosts: the ssh_mesh stage writes every node's name there "
               "(ssh_mesh_hosts_file)" % host)
        if not fails:
            fix += "; ssh still finds them through ~/.ssh/config, tools that resolve names themselves do not"
    return {"check": "nccl_net.names", "status": status, "detail": detail, "fix": fix}


def rendezvous_check(host, master, address, port, ok, detail):
    """The rendezvous port of the master node, probed from another node (routing as torchrun's
    workers connect: no interface binding). Refused = reachable (nothing listens between jobs)."""
    if ok:
        return {"check": "nccl_net.rendezvous", "status": "pass",
                "detail": "%s reaches %s's rendezvous port %s:%d (%s)" % (host, master, address, port, detail),
                "fix": ""}
    return {"check": "nccl_net.rendezvous", "status": "fail",
            "detail": "%s cannot reach %s's rendezvous port %s:%d (%s): torchrun/c10d would wait here until "
                      "its rendezvous timeout" % (host, master, address, port, detail),
            "fix": "open TCP %d from the cluster network to %s (firewall, security group), or set "
                   "cluster_master_port to a port that is open" % (port, master)}


def decision_checks(host, decision):
    """Structured results for `provision verify` (one per decision)."""
    checks = []
    errs = decision["errors"]
    sock_errs = [e for e in errs if "nccl_net_ib" not in e]
    checks.append({
        "check": "nccl_net.socket_ifname",
        "status": "fail" if sock_errs else "pass",
        "detail": "%s: %s" % (host, sock_errs[0] if sock_errs else
                              "NCCL_SOCKET_IFNAME=%s" % decision["socket_ifname"]),
        "fix": "set nccl_net_socket_ifname, or fix cluster_address" if sock_errs else "",
    })
    ib = decision["ib"]
    ib_errs = [e for e in errs if "nccl_net_ib" in e]
    checks.append({
        "check": "nccl_net.ib",
        "status": "fail" if ib_errs else ("skip" if ib["disable"] else "pass"),
        "detail": "%s: %s" % (host, ib_errs[0] if ib_errs else (
            "NCCL_IB_DISABLE=1 (%s usable RDMA ports)" % len(ib["ranked"]) if ib["disable"]
            else "NCCL_IB_HCA=%s" % ib["hca"])),
        "fix": "set nccl_net_ib_hca to ACTIVE ports (%s)" % ",".join(ib["ranked"]) if ib_errs else "",
    })
    return checks


# ---------------------------------------------------------------- cluster agreement

def agree(decisions):
    """Make the per-node choices consistent where NCCL needs it.

    decisions: {host: module result with "env", "ib", "socket_ifname"} in node order.
    -> {host: {"env": env, "reasons": [...], "checks": [...]}}

    - RDMA: every rank must use the same transport. If some node has no usable RDMA port, or the
      nodes' ports are of different link layers (InfiniBand vs RoCE), IB is disabled everywhere.
    - NCCL_SOCKET_IFNAME may legitimately differ per node (each node reads its own ~/.bashrc), but
      launchers that export the launching node's NCCL_* to all nodes (DeepSpeed's pdsh runner) then
      send a wrong name: reported as a warning with the fix.
    """
    hosts = list(decisions)
    out = {h: {"env": dict(decisions[h].get("env") or {}), "reasons": [], "checks": []} for h in hosts}
    layers = {h: (None if decisions[h]["ib"]["disable"] else decisions[h]["ib"].get("link_layer")) for h in hosts}
    distinct = sorted({str(v) for v in layers.values()})
    if len(distinct) > 1:
        detail = "RDMA transports differ: %s" % ", ".join(
            "%s=%s" % (h, layers[h] or "none") for h in hosts)
        for host in hosts:
            env = out[host]["env"]
            if env.get("NCCL_IB_DISABLE") != "1":
                for key in ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX"):
                    env.pop(key, None)
                env["NCCL_IB_DISABLE"] = "1"
            out[host]["reasons"].append("NCCL_IB_DISABLE=1 on every node: %s; NCCL needs one transport "
                                        "on all ranks" % detail)
            out[host]["checks"].append({"check": "nccl_net.agree.ib", "status": "warn", "detail": detail,
                                        "fix": "bring the RDMA ports up on every node, or set "
                                               "nccl_net_ib_disable: true"})
    else:
        for host in hosts:
            out[host]["checks"].append({"check": "nccl_net.agree.ib", "status": "pass",
                                        "detail": "all nodes: %s" % (distinct[0] if distinct[0] != "None"
                                                                     else "NCCL_IB_DISABLE=1"), "fix": ""})
    for key in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX"):
        values = {h: out[h]["env"].get(key) for h in hosts}
        if len(set(values.values())) > 1:
            detail = "%s differs: %s" % (key, ", ".join("%s=%s" % (h, v) for h, v in values.items()))
            for host in hosts:
                out[host]["checks"].append({
                    "check": "nccl_net.agree.%s" % key.lower(), "status": "warn",
                    "detail": detail + " (launchers that export the launching node's NCCL_* to all nodes, "
                                       "e.g. DeepSpeed's pdsh runner, will send one value everywhere)",
                    "fix": ("give the nodes one name for the cluster interface (udev/netplan rename; podman: "
                            "--network NET:interface_name=NAME) or " if key == "NCCL_SOCKET_IFNAME" else "")
                    + "set %s to a value valid on every node" % ("nccl_net_" + key[5:].lower())})
    return out
