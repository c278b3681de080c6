# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Who listens on / holds a TCP port, from /proc alone (no ss, no netstat).

The kernel lists the sockets of the caller's network namespace in /proc/net/tcp and
/proc/net/tcp6 (one line per socket: local and remote address in hex, state, uid, inode).
The process that owns a socket is found by reading the links under /proc/<pid>/fd, which
point to ``socket:[<inode>]``.

Everything here is plain Python (no Ansible import): the port_facts module, the CLI and the
tests use the same functions.
"""

from __future__ import annotations

import os
import socket
import struct

# include/net/tcp_states.h
TCP_STATES = {
    "01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
    "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN",
    "0B": "CLOSING", "0C": "NEW_SYN_RECV",
}


def _hex_ipv4(word):
    # the kernel prints the __be32 address as a host-order (little-endian on x86/arm) integer
    return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(word, 16)))


def _hex_ipv6(text):
    raw = b"".join(struct.pack("<I", int(text[i:i + 8], 16)) for i in range(0, 32, 8))
    return socket.inet_ntop(socket.AF_INET6, raw)


def decode_address(text):
    """'0100007F:1FA3' -> ('127.0.0.1', 8099); 32-hex-digit addresses are IPv6."""
    addr, port = text.split(":")
    ip = _hex_ipv6(addr) if len(addr) == 32 else _hex_ipv4(addr)
    return ip, int(port, 16)


def parse_proc_net_tcp(text, family="tcp"):
    """Parse /proc/net/tcp or /proc/net/tcp6 content into a list of socket dicts.

    Each dict: family, local_address, local_port, remote_address, remote_port, state (name),
    uid (int), inode (int; 0 for sockets no process owns, e.g. TIME_WAIT).
    Lines that do not parse (header, truncated lines) are skipped.
    """
    sockets = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10 or not fields[0].endswith(":") or ":" not in fields[1]:
            continue
        try:
            local_ip, local_port = decode_address(fields[1])
            remote_ip, remote_port = decode_address(fields[2])
            sockets.append({
                "family": family,
                "local_address": local_ip,
                "local_port": local_port,
                "remote_address": remote_ip,
                "remote_port": remote_port,
                "state": TCP_STATES.get(fields[3].upper(), fields[3]),
                "uid": int(fields[7]),
                "inode": int(fields[9]),
            })
        except (ValueError, struct.error, OSError):
            continue
    return sockets


def read_sockets(proc="/proc"):
    """All TCP sockets of this network namespace (IPv4 and IPv6)."""
    out = []
    for name, family in (("tcp", "tcp"), ("tcp6", "tcp6")):
        try:
            with open(os.path.join(proc, "net", name), encoding="ascii", errors="replace") as handle:
                out.extend(parse_proc_net_tcp(handle.read(), family))
        except OSError:
            continue
    return out


def socket_owners(inodes, proc="/proc"):
    """Map socket inode -> sorted list of pids holding it, by scanning /proc/<pid>/fd.

    Processes that vanish or that we may not read (another user's, without root) are skipped.
    """
    wanted = {"socket:[%d]" % i: i for i in inodes if i}
    owners = {}
    if not wanted:
        return owners
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return owners
    for pid in pids:
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            inode = wanted.get(target)
            if inode is not None:
                owners.setdefault(inode, set()).add(int(pid))
    return {k: sorted(v) for k, v in owners.items()}


def process_info(pid, proc="/proc"):
    """{'pid', 'name', 'cmdline'} of a process (name from /proc/<pid>/comm)."""
    info = {"pid": pid, "name": "?", "cmdline": ""}
    try:
        with open(os.path.join(proc, str(pid), "comm"), encoding="utf-8", errors="replace") as handle:
            info["name"] = handle.read().strip()
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            info["cmdline"] = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        pass
    return info


def _describe(port, listening, processes, states):
    who = ", ".join("pid %d (%s)" % (p["pid"], p["name"]) for p in processes)
    if listening:
        return "%d is held by %s" % (port, who) if who else "%d is listening (owner not visible)" % port
    if processes:
        return "%d is in use (%s) by %s" % (port, "/".join(sorted(states)), who)
    if states:
        return "%d is free (only %s sockets without a process)" % (port, "/".join(sorted(states)))
    return "%d is free" % port


def port_report(port, sockets, owners, infos):
    """The state of one port from parsed sockets, inode owners and process infos.

    Returns {port, listening, held, addresses, states, pids, processes, summary}.
    ``held`` is true when a LISTEN socket exists or a live process owns a socket bound to it;
    TIME_WAIT leftovers (inode 0) do not count.
    """
    mine = [s for s in sockets if s["local_port"] == port]
    listen = [s for s in mine if s["state"] == "LISTEN"]
    pids = sorted({pid for s in (listen or mine) for pid in owners.get(s["inode"], [])})
    processes = [infos[p] for p in pids if p in infos]
    states = sorted({s["state"] for s in mine})
    held = bool(listen) or bool(pids)
    return {
        "port": port,
        "listening": bool(listen),
        "held": held,
        "addresses": sorted({"%s:%d" % (s["local_address"], port) if s["family"] == "tcp"
                             else "[%s]:%d" % (s["local_address"], port) for s in listen}),
        "states": states,
        "pids": pids,
        "processes": processes,
        "summary": _describe(port, bool(listen), processes, states),
    }


def check_port(report, expect="report", allowed_holders=(), listeners=None):
    """A verify-style check dict for one port report.

    expect: 'free' (nothing may hold it, except a process named in allowed_holders),
    'listening' (something must listen; if allowed_holders is given, it must be one of them),
    'report' (always pass; the detail says who holds it).
    listeners: {port: [process names]} of every listening port (``listeners()``); with it, a port
    expected listening that is not says where the allowed holder listens instead.
    """
    port = report["port"]
    names = {p["name"] for p in report["processes"]}
    allowed = set(allowed_holders or ())
    status, fix, detail = "pass", "", report["summary"]
    if expect == "free" and report["held"] and not (allowed and names and names <= allowed):
        status = "fail"
        pids = " ".join(str(p) for p in report["pids"])
        fix = ("stop it: kill %s" % pids) if pids else "wait for the socket to close or pick another port"
    elif expect == "listening":
        if not report["listening"]:
            status, fix = "fail", "start the service that should listen on %d" % port
            # the service runs, on another port (sshd "running" on 22 while the cluster uses 2222)
            elsewhere = sorted(other for other, who in (listeners or {}).items()
                               if other != port and allowed and set(who) & allowed)
            if elsewhere:
                holder = "/".join(sorted(allowed))
                detail = "nothing listens on %d; %s listens on %s" % (
                    port, holder, ", ".join(str(x) for x in elsewhere))
                fix = "%s runs on the wrong port: set Port %d in its configuration and restart it" % (holder, port)
        elif allowed and not (names & allowed):
            status = "fail"
            fix = "%d must be held by %s; stop pid %s" % (
                port, "/".join(sorted(allowed)), " ".join(str(p) for p in report["pids"]) or "?")
    return {"check": "port %d" % port, "status": status, "detail": detail, "fix": fix}


def port_result(reports, expect="report", allowed_holders=(), listening=(), init="", others=None):
    """The port_facts module's result for its reports: one check per port (check_port), the failed ones,
    every listening port and PID 1's name. verify's sshd check gives the same from the ports check's
    reading (catalog._sshd_from_ports)."""
    checks = [check_port(r, expect, allowed_holders, others) for r in reports]
    return {"changed": False, "ports": reports, "listening": list(listening), "checks": checks, "init": init,
            "failed_checks": [c for c in checks if c["status"] == "fail"]}


def listeners(proc="/proc"):
    """{port: sorted names of the processes holding it} for every listening port."""
    return {r["port"]: sorted({x["name"] for x in r["processes"]}) for r in port_facts(None, proc)}


def port_facts(ports=None, proc="/proc"):
    """Reports for the given ports (or every listening port when ports is empty)."""
    sockets = read_sockets(proc)
    if not ports:
        ports = sorted({s["local_port"] for s in sockets if s["state"] == "LISTEN"})
    wanted = [s["inode"] for s in sockets if s["local_port"] in set(ports)]
    owners = socket_owners(wanted, proc)
    infos = {pid: process_info(pid, proc) for pids in owners.values() for pid in pids}
    return [port_report(p, sockets, owners, infos) for p in ports]
