"""Delay every packet of one netfilter queue by a fixed time (the lab's `--delay` fault).

This machine's kernel has no netem qdisc (and no fq for timestamp pacing), so the delay is made
in user space: iptables sends the node's cluster-interface packets to NFQUEUE (with
--queue-bypass: if this process is gone, packets pass undelayed), and this process, run by
`provision lab fault` in the node's network namespace (nsenter -n), holds each packet for the
delay and then accepts it. All packets get the same delay, so they leave in arrival order and
one batch verdict releases every packet that is due.

    python -m provision.lab.delayd --queue 7 --delay-ms 5

Speaks the nfnetlink_queue protocol directly (no libnetfilter_queue binding needed).
"""

from __future__ import annotations

import argparse
import collections
import errno
import os
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 1, 2, 3
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_GSO = 1, 4
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2


def _attr(kind: int, payload: bytes) -> bytes:
    data = struct.pack("=HH", 4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def _message(msg: int, queue: int, attrs: bytes, *, seq: int, flags: int = NLM_F_REQUEST, family: int = 0) -> bytes:
    body = struct.pack("=BBH", family, 0, socket.htons(queue)) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, flags, seq, 0) + body


def _attrs(data: bytes) -> dict[int, bytes]:
    out, pos = {}, 0
    while pos + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, pos)
        if length < 4:
            break
        out[kind & 0x3FFF] = data[pos + 4:pos + length]
        pos += (length + 3) & ~3
    return out


def _check_ack(sock: socket.socket, what: str) -> None:
    data = sock.recv(65536)
    length, kind = struct.unpack_from("=IH", data, 0)
    if kind == NLMSG_ERROR:
        (code,) = struct.unpack_from("=i", data, 16)
        if code != 0:
            raise OSError(-code, f"{what}: {os.strerror(-code)}")


def open_queue(queue: int, maxlen: int = 16384) -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.bind((0, 0))
    try:
        sock.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE (root)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    steps = [
        ("bind", _attr(NFQA_CFG_CMD, struct.pack("=BxH", NFQNL_CFG_CMD_BIND, 0))),
        ("copy mode", _attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))),
        ("queue length", _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", maxlen))),
        ("flags", _attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO))
         + _attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO))),
    ]
    for seq, (what, attrs) in enumerate(steps, start=1):
        sock.send(_message(NFQNL_MSG_CONFIG, queue, attrs, seq=seq, flags=NLM_F_REQUEST | NLM_F_ACK))
        _check_ack(sock, what)
    return sock


def packet_ids(data: bytes):
    pos = 0
    while pos + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, pos)
        if length < 16:
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            hdr = _attrs(data[pos + 20:pos + length]).get(NFQA_PACKET_HDR)
            if hdr:
                yield struct.unpack_from("!I", hdr, 0)[0]
        pos += (length + 3) & ~3


def run(queue: int, delay: float, *, stop_after: float | None = None) -> None:
    sock = open_queue(queue)
    pending: collections.deque[tuple[float, int]] = collections.deque()
    seq = 100
    end = time.monotonic() + stop_after if stop_after else None
    while end is None or time.monotonic() < end:
        wait = max(0.0, pending[0][0] - time.monotonic()) if pending else 1.0
        ready, _, _ = select.select([sock], [], [], wait)
        if ready:
            try:
                data = sock.recv(1 << 20)
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:  # the kernel dropped messages: go on
                    raise
                data = b""
            now = time.monotonic()
            for pid in packet_ids(data):
                pending.append((now + delay, pid))
        now = time.monotonic()
        last = None
        while pending and pending[0][0] <= now:
            last = pending.popleft()[1]
        if last is not None:
            seq += 1
            sock.send(_message(NFQNL_MSG_VERDICT_BATCH, queue,
                               _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, last)), seq=seq))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run(args.queue, args.delay_ms / 1000.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
