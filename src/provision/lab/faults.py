"""Faults on one lab node, made from the controller; the node itself is not told and needs nothing.

- `rate`: a token bucket (tc tbf) on the node's cluster interface eth1 inside its network
  namespace (what it sends) and on the host side of its veth pair (what it receives).
- `delay`: each packet through eth1 waits DELAY in each direction it applies to (iptables
  NFQUEUE in the node's namespace and delayd.py there: this kernel has no netem).
- `loss`: iptables' statistic match drops that share of eth1's packets (each direction).
- `mtu`: eth1's MTU inside the node only (the others keep theirs: a mismatch, as a
  misconfigured host).
- `freeze` / `thaw`: podman pause / unpause (the cgroup freezer: every process stops, the
  kernel still answers TCP handshakes on its sockets, nothing more).

Everything runs through `nsenter -t <container pid> -n` with the host's tc/ip/iptables. What was
applied is recorded in the lab's state directory (faults.json), for `lab status` and `--clear`;
a restarted or re-created node has none of it (a new network namespace), and its record goes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ._base import LabError, _run, podman

CLUSTER_IF = "eth1"
DIRECTIONS = ("both", "out", "in")
DELAY_QUEUE = 7
_CHAIN = {"out": "PROVISION_FAULT_OUT", "in": "PROVISION_FAULT_IN"}
_HOOK = {"out": ("OUTPUT", "-o"), "in": ("PREROUTING", "-i")}
FAULT_TOOLS = {"tc": "iproute2", "ip": "iproute2", "iptables": "iptables", "nsenter": "util-linux"}
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$", re.I)
_TIME = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


# ---------------------------------------------------------------- parsing

def rate_bits(rate: str) -> float:
    m = _RATE.match(rate.strip())
    if not m:
        raise LabError(f"--rate {rate!r} is not a rate; write it as tc does, e.g. 100mbit, 1gbit, 500kbit")
    bits = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if bits < 8000:
        raise LabError(f"--rate {rate} is below 8kbit; give a larger rate")
    return bits


def delay_seconds(delay: str) -> float:
    m = _TIME.match(delay.strip())
    if not m:
        raise LabError(f"--delay {delay!r} is not a time; write it as 5ms, 200us or 1s")
    value = float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]
    if not 0 < value <= 10:
        raise LabError(f"--delay {delay} must be above 0 and at most 10s")
    return value


def loss_fraction(loss: str) -> float:
    text = loss.strip().rstrip("%")
    try:
        value = float(text) / 100.0
    except ValueError:
        raise LabError(f"--loss {loss!r} is not a percentage; write it as 1% or 0.5%") from None
    if not 0 < value <= 1:
        raise LabError(f"--loss {loss} must be above 0% and at most 100%")
    return value


def check_mtu(mtu: int) -> int:
    if not 576 <= mtu <= 65535:
        raise LabError(f"--mtu {mtu} is outside 576..65535")
    return mtu


# ---------------------------------------------------------------- host tools and namespaces

def missing_tools() -> list[str]:
    return sorted({pkg for tool, pkg in FAULT_TOOLS.items()
                   if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()})


def ensure_tools(*, log=print) -> None:
    missing = missing_tools()
    if not missing:
        return
    cmd = "apt-get install -y " + " ".join(missing)
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise LabError(f"fault injection needs {', '.join(missing)} on this machine; install them: {cmd}")
    log(f"installing {' '.join(missing)} (apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        _run(argv, env=env, timeout=900)


def container_pid(container: str) -> int:
    out = podman("inspect", "--format", "{{.State.Pid}} {{.State.Status}}", container).stdout.split()
    pid = int(out[0]) if out and out[0].isdigit() else 0
    if pid <= 0:
        raise LabError(f"{container} is not running ({out[1] if len(out) > 1 else 'unknown'}); "
                       f"start it with `provision lab up` first")
    return pid


def container_id(container: str) -> str:
    return podman("inspect", "--format", "{{.Id}}", container).stdout.strip()


def ns(pid: int, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["nsenter", "-t", str(pid), "-n", "--", *argv], check=check, timeout=60)


def cluster_link(pid: int) -> dict:
    """eth1 inside the node: its MTU and the host-side veth peer's name."""
    info = json.loads(ns(pid, "ip", "-j", "link", "show", "dev", CLUSTER_IF).stdout)[0]
    peer_index = info.get("link_index")
    host_if = None
    if peer_index:
        for link in json.loads(_run(["ip", "-j", "link", "show"]).stdout):
            if link.get("ifindex") == peer_index:
                host_if = link["ifname"]
                break
    if host_if is None:
        raise LabError(f"cannot find the host side of the node's {CLUSTER_IF} (ifindex {peer_index})")
    return {"mtu": info.get("mtu"), "host_if": host_if}


# ---------------------------------------------------------------- state

def _state_file(lab: str) -> Path:
    from . import lab_state_dir

    return lab_state_dir(lab) / "faults.json"


def load(lab: str) -> dict:
    try:
        return json.loads(_state_file(lab).read_text())
    except (OSError, ValueError):
        return {}


def _save(lab: str, state: dict) -> None:
    path = _state_file(lab)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def active(lab: str, containers: list[dict]) -> dict[str, dict]:
    """Faults per node name. A record counts only for the container it was applied to, in the
    same run of it (a restart makes a new network namespace: the tc/iptables faults are gone);
    a paused node is frozen whatever the record says."""
    state = load(lab)
    out = {}
    for c in containers:
        node = f"node{(c.get('Labels') or {}).get('provision.lab.index', '0')}"
        rec = state.get(node) or {}
        faults = {}
        if rec.get("id") == c.get("Id") and str(rec.get("started")) == str(c.get("StartedAt")):
            faults = {k: rec[k] for k in ("rate", "delay", "loss", "mtu") if k in rec}
            faults.update({f"{k}_direction": rec[f"{k}_direction"] for k in ("rate", "delay", "loss")
                           if k in rec and f"{k}_direction" in rec})
        if str(c.get("State", "")).lower() == "paused":
            faults["frozen"] = True
        if faults:
            out[node] = faults
    return out


# ---------------------------------------------------------------- applying

def _tbf(bits: float) -> list[str]:
    # burst: 10 ms at that rate, at least 128 KB (a GSO packet is up to 64 KB)
    burst = max(int(bits / 8 / 100), 128 * 1024)
    return ["tbf", "rate", f"{int(bits)}bit", "burst", str(burst), "latency", "100ms"]


def _ensure_chain(pid: int, direction: str) -> None:
    chain = _CHAIN[direction]
    hook, flag = _HOOK[direction]
    if ns(pid, "iptables", "-w", "5", "-t", "mangle", "-L", chain, "-n", check=False).returncode != 0:
        ns(pid, "iptables", "-w", "5", "-t", "mangle", "-N", chain)
        ns(pid, "iptables", "-w", "5", "-t", "mangle", "-A", hook, flag, CLUSTER_IF, "-j", chain)


def _rebuild_chains(pid: int, rec: dict) -> None:
    """The iptables chains from the record: loss first, then the delay queue."""
    for direction in ("out", "in"):
        chain = _CHAIN[direction]
        wanted = [d for d in ("loss", "delay") if rec.get(d) and rec.get(f"{d}_direction", "both") in ("both", direction)]
        if not wanted:
            _drop_chain(pid, direction)
            continue
        _ensure_chain(pid, direction)
        ns(pid, "iptables", "-w", "5", "-t", "mangle", "-F", chain)
        if "loss" in wanted:
            ns(pid, "iptables", "-w", "5", "-t", "mangle", "-A", chain, "-m", "statistic", "--mode", "random",
               "--probability", f"{loss_fraction(rec['loss']):.6f}", "-j", "DROP")
        if "delay" in wanted:
            ns(pid, "iptables", "-w", "5", "-t", "mangle", "-A", chain, "-j", "NFQUEUE",
               "--queue-num", str(DELAY_QUEUE), "--queue-bypass")


def _drop_chain(pid: int, direction: str) -> None:
    chain = _CHAIN[direction]
    hook, flag = _HOOK[direction]
    ns(pid, "iptables", "-w", "5", "-t", "mangle", "-D", hook, flag, CLUSTER_IF, "-j", chain, check=False)
    ns(pid, "iptables", "-w", "5", "-t", "mangle", "-F", chain, check=False)
    ns(pid, "iptables", "-w", "5", "-t", "mangle", "-X", chain, check=False)


def _delayer_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"provision.lab.delayd" in cmdline


def _stop_delayer(rec: dict) -> None:
    pid = rec.pop("delayer_pid", None)
    if _delayer_alive(pid):
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not _delayer_alive(pid):
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)


def _start_delayer(lab: str, node: str, pid: int, seconds: float) -> int:
    from . import lab_state_dir

    log_path = lab_state_dir(lab) / f"delayd-{node}.log"
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(
            ["nsenter", "-t", str(pid), "-n", "--", sys.executable, "-m", "provision.lab.delayd",
             "--queue", str(DELAY_QUEUE), "--delay-ms", f"{seconds * 1000:.3f}"],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=True)
    time.sleep(0.3)
    if proc.poll() is not None:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise LabError(f"{node}: the delay helper stopped at once ({tail[0]}); see {log_path}")
    return proc.pid


def apply(lab: str, node: str, container: str, *, rate: str | None = None, delay: str | None = None,
          loss: str | None = None, mtu: int | None = None, freeze: bool = False, thaw: bool = False,
          clear: bool = False, direction: str = "both", log=print) -> dict:
    """Apply (or clear) faults on one node; returns the node's fault record."""
    if direction not in DIRECTIONS:
        raise LabError(f"--direction {direction!r}: choose one of {', '.join(DIRECTIONS)}")
    if not any([rate, delay, loss, mtu, freeze, thaw, clear]):
        raise LabError("name a fault: --rate, --delay, --loss, --mtu, --freeze, --thaw or --clear")
    # check every value before anything changes
    bits = rate_bits(rate) if rate else None
    seconds = delay_seconds(delay) if delay else None
    if loss:
        loss_fraction(loss)
    if mtu is not None:
        check_mtu(mtu)
    state = load(lab)
    status = podman("inspect", "--format", "{{.State.Status}}", container).stdout.strip()
    if status == "paused" and (thaw or clear):
        podman("unpause", container)
        log(f"{node}: thawed")
        status = "running"
    if status == "paused" and any([rate, delay, loss, mtu]):
        raise LabError(f"{node} is frozen; thaw it first: provision lab fault {lab} {node} --thaw")
    cid = container_id(container)
    # the same figure as `podman ps --format json` gives (StartedAt, unix seconds)
    started = podman("inspect", "--format", "{{.State.StartedAt.Unix}}", container).stdout.strip()
    rec = state.get(node) or {}
    if rec.get("id") != cid or rec.get("started") != started:
        _stop_delayer(rec)
        rec = {}  # a new container or namespace: nothing of the old record applies
    if any([rate, delay, loss, mtu, clear]):
        ensure_tools(log=log)
    pid = container_pid(container) if status == "running" else 0
    if clear and pid:
        link = cluster_link(pid)
        ns(pid, "tc", "qdisc", "del", "dev", CLUSTER_IF, "root", check=False)
        _run(["tc", "qdisc", "del", "dev", link["host_if"], "root"], check=False)
        for d in ("out", "in"):
            _drop_chain(pid, d)
        _stop_delayer(rec)
        if rec.get("mtu_was"):
            ns(pid, "ip", "link", "set", "dev", CLUSTER_IF, "mtu", str(rec["mtu_was"]))
        log(f"{node}: faults cleared")
        rec = {}
    if rate:
        link = cluster_link(pid)
        if direction in ("both", "out"):
            ns(pid, "tc", "qdisc", "replace", "dev", CLUSTER_IF, "root", *_tbf(bits))
        else:
            ns(pid, "tc", "qdisc", "del", "dev", CLUSTER_IF, "root", check=False)
        if direction in ("both", "in"):
            _run(["tc", "qdisc", "replace", "dev", link["host_if"], "root", *_tbf(bits)])
        else:
            _run(["tc", "qdisc", "del", "dev", link["host_if"], "root"], check=False)
        rec.update(rate=rate, rate_direction=direction)
    if loss:
        rec.update(loss=loss, loss_direction=direction)
    if delay:
        _stop_delayer(rec)
        rec.update(delay=delay, delay_direction=direction)
        rec["delayer_pid"] = _start_delayer(lab, node, pid, seconds)
    if loss or delay:
        _rebuild_chains(pid, rec)
    if mtu is not None:
        link = cluster_link(pid)
        rec.setdefault("mtu_was", link["mtu"])
        ns(pid, "ip", "link", "set", "dev", CLUSTER_IF, "mtu", str(mtu))
        rec["mtu"] = mtu
    if any([rate, delay, loss, mtu]):
        rec.update(id=cid, started=started)
        log(f"{node}: " + ", ".join(f"{k} {rec[k]}" + (f" ({rec.get(k + '_direction')})" if k + "_direction" in rec else "")
                                      for k in ("rate", "delay", "loss", "mtu") if k in rec))
    if freeze:
        podman("pause", container)
        log(f"{node}: frozen (podman pause)")
    if rec:
        state[node] = rec
    else:
        state.pop(node, None)
    _save(lab, state)
    return rec


def stop_all(lab: str) -> None:
    """`lab down`: stop the delay helpers this lab started (their namespaces go with the nodes)."""
    for rec in load(lab).values():
        _stop_delayer(rec)
