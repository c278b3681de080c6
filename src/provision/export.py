"""Machine outputs of a `provision verify` document: JUnit XML for CI systems, the Prometheus text
format for node_exporter's textfile collector, and the atomic file write they (and the report) use.

Prometheus (docs/report.md): every name starts with `provision_`, values are in base units
(seconds, bytes per second), one HELP and TYPE line per family, one sample per label set. A check's
state is a set of 0/1 series, one per status, as node_exporter's systemd collector writes unit
states: alert on `provision_check_status{status="fail"} == 1`.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

STATUSES = ("pass", "fail", "warn", "skip")
SEVERITY = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
GB = 1e9  # the document's GB/s are nccl-tests' (10^9 bytes per second)


class OutputError(Exception):
    """An output file that cannot be written (exit 2), told in one line."""


# ---------------------------------------------------------------- writing files

def write_atomic(path: str | os.PathLike, text: str, mode: int = 0o644) -> Path:
    """Write text to path through a temporary file in the same directory and os.replace: a reader
    (node_exporter, a browser, CI) sees the old file or the new one, never half of one. The temporary
    name does not end in .prom/.xml/.html (node_exporter reads only *.prom)."""
    target = Path(path).expanduser()
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"cannot write {target}: directory {parent} does not exist")
    if target.is_dir():
        raise OutputError(f"cannot write {target}: it is a directory")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


# ---------------------------------------------------------------- Prometheus text format

_LABEL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n"}


def _label_value(value: Any) -> str:
    text = str(value)
    if "\\" not in text and '"' not in text and "\n" not in text:
        return text
    return "".join(_LABEL_ESCAPES.get(ch, ch) for ch in text)


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class Families:
    """Metric families in the order first added, each with its HELP, TYPE and unique samples."""

    def __init__(self) -> None:
        self._fams: dict[str, dict[str, Any]] = {}

    def add(self, name: str, help_text: str, value: float | None, labels: dict[str, Any] | None = None) -> None:
        if value is None:
            return
        fam = self._fams.setdefault(name, {"help": help_text, "samples": {}})
        key = tuple(sorted((labels or {}).items()))
        fam["samples"][key] = value  # the last one wins: never two samples of one series

    def text(self) -> str:
        out = []
        pairs: dict[tuple[str, Any], str] = {}  # a node's or a status's label is written once, used many times
        for name, fam in self._fams.items():
            out.append(f"# HELP {name} {_help(fam['help'])}")
            out.append(f"# TYPE {name} gauge")
            for key, value in fam["samples"].items():
                labels = ",".join([pairs.get(kv) or pairs.setdefault(kv, f'{kv[0]}="{_label_value(kv[1])}"')
                                   for kv in key])
                out.append(f"{name}{{{labels}}} {_number(value)}" if labels else f"{name} {_number(value)}")
        return "\n".join(out) + "\n"


def _float(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def prometheus_text(doc: dict[str, Any], now: float | None = None) -> str:
    """The document as Prometheus gauges (node_exporter textfile collector)."""
    fam = Families()
    now = time.time() if now is None else now
    fam.add("provision_verify_ok", "1 when no check failed in the last provision verify run, else 0.", bool(doc.get("ok")))
    fam.add("provision_verify_completed", "1 when the last provision verify run finished its checks, 0 when it "
            "could not (timeout, usage or inventory error).", 1)
    fam.add("provision_verify_last_run_timestamp_seconds", "When the last provision verify run ended (Unix time).", now)
    fam.add("provision_verify_duration_seconds", "How long the last provision verify run took.", _float(doc.get("duration_s")))
    for status in STATUSES:
        fam.add("provision_verify_checks", "Checks of the last provision verify run by status.",
                int((doc.get("summary") or {}).get(status, 0)), {"status": status})
    for n in doc.get("nodes") or []:
        fam.add("provision_node_reachable", "1 when provision verify reached the node, else 0.",
                bool(n.get("reachable")), {"node": n.get("name")})
    worst: dict[tuple[str, str], str] = {}
    for c in doc.get("checks") or []:
        key = (str(c.get("node", "")), str(c.get("check", "")))
        st = c.get("status") if c.get("status") in SEVERITY else "fail"
        if key not in worst or SEVERITY[st] > SEVERITY[worst[key]]:
            worst[key] = st
    for (node, check), st in worst.items():
        for status in STATUSES:
            fam.add("provision_check_status", "State of each provision verify check on each node: 1 for the status it "
                    "has (pass, fail, warn, skip), 0 for the others.", int(status == st),
                    {"node": node, "check": check, "status": status})
    smoke = doc.get("allreduce") or {}
    if smoke.get("ran"):
        for r in smoke.get("rows") or []:
            size = {"size_bytes": str(r.get("bytes"))}
            for key, name, what in (("busbw", "provision_allreduce_busbw_bytes_per_second",
                                     "All-reduce bus bandwidth (nccl-tests busbw) by message size."),
                                    ("algbw", "provision_allreduce_algbw_bytes_per_second",
                                     "All-reduce algorithm bandwidth (nccl-tests algbw) by message size.")):
                value = _float(r.get(key))
                fam.add(name, what, None if value is None else value * GB, size)
            t = _float(r.get("time_us"))
            fam.add("provision_allreduce_duration_seconds", "Time of one all-reduce by message size.",
                    None if t is None else t / 1e6, size)
        for key, name, what in (
                ("busbw_gbps", "provision_allreduce_large_message_busbw_bytes_per_second",
                 "The all-reduce's bus bandwidth at the bandwidth-bound sizes (what is judged)."),
                ("expected_busbw_gbps", "provision_allreduce_expected_busbw_bytes_per_second",
                 "The bus bandwidth the nodes' hardware should give (provision's model)."),
                ("tcp_gbps", "provision_tcp_one_way_min_bytes_per_second",
                 "The slowest one-way TCP stream between neighbouring nodes."),
                ("tcp_ring_gbps", "provision_tcp_ring_min_bytes_per_second",
                 "The slowest link while every node sends to the next at once.")):
            value = _float(smoke.get(key))
            fam.add(name, what, None if value is None else value * GB)
        slow = {(str(lk.get("src")), str(lk.get("dst"))) for lk in smoke.get("slow_links") or []}
        for lk in smoke.get("links") or []:
            for key, probe in (("ring_gbps", "ring"), ("one_way_gbps", "one_way")):
                value = _float(lk.get(key))
                fam.add("provision_link_bandwidth_bytes_per_second",
                        "TCP bandwidth of one link (src sends to dst): probe=ring with every link busy, one_way alone.",
                        None if value is None else value * GB, {"src": lk.get("src"), "dst": lk.get("dst"), "probe": probe})
            fam.add("provision_link_slow", "1 when the link is far below the other links (allreduce.slow_links), else 0.",
                    (str(lk.get("src")), str(lk.get("dst"))) in slow, {"src": lk.get("src"), "dst": lk.get("dst")})
    return fam.text()


def prometheus_failed_run(message: str, now: float | None = None) -> str:
    """The textfile after a run that could not finish: not ok, not completed, no check series (a
    stale pass must not stay visible)."""
    fam = Families()
    fam.add("provision_verify_ok", "1 when no check failed in the last provision verify run, else 0.", 0)
    fam.add("provision_verify_completed", "1 when the last provision verify run finished its checks, 0 when it "
            "could not (timeout, usage or inventory error).", 0)
    fam.add("provision_verify_last_run_timestamp_seconds", "When the last provision verify run ended (Unix time).",
            time.time() if now is None else now)
    return f"# provision verify could not finish: {message.splitlines()[0] if message else ''}\n" + fam.text()


# ---------------------------------------------------------------- JUnit XML

_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _x(text: Any) -> str:
    return _XML_BAD.sub("?", str(text or ""))


def junit_xml(doc: dict[str, Any], name: str = "provision verify") -> str:
    """One testsuite per node, one testcase per check (classname provision.verify.<node>): fail is a
    <failure> (message: the cause; text: cause and fix), skip a <skipped>, warn a pass with the
    warning in <system-out>."""
    checks = doc.get("checks") or []
    order = [n["name"] for n in doc.get("nodes") or []]
    by_node: dict[str, list[dict]] = {}
    for c in checks:
        by_node.setdefault(str(c.get("node", "")), []).append(c)
    listed = set(order)
    order += [node for node in by_node if node not in listed]
    root = ET.Element("testsuites", name=_x(name), tests=str(len(checks)),
                      failures=str(sum(c.get("status") == "fail" for c in checks)), errors="0",
                      skipped=str(sum(c.get("status") == "skip" for c in checks)),
                      time=_number(_float(doc.get("duration_s")) or 0.0))
    for node in order:
        mine = by_node.get(node, [])
        suite = ET.SubElement(root, "testsuite", name=_x(node), tests=str(len(mine)),
                              failures=str(sum(c.get("status") == "fail" for c in mine)), errors="0",
                              skipped=str(sum(c.get("status") == "skip" for c in mine)), time="0")
        for c in mine:
            case = ET.SubElement(suite, "testcase", classname=_x(f"provision.verify.{node}"), name=_x(c.get("check")),
                                 time="0")
            detail, fix = _x(c.get("detail")), _x(c.get("fix"))
            if c.get("status") == "fail":
                el = ET.SubElement(case, "failure", message=detail, type="fail")
                el.text = detail + (f"\nfix: {fix}" if fix else "")
            elif c.get("status") == "skip":
                ET.SubElement(case, "skipped", message=detail)
            elif c.get("status") == "warn":
                out = ET.SubElement(case, "system-out")
                out.text = f"warning: {detail}" + (f"\nfix: {fix}" if fix else "")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def junit_failed_run(message: str, name: str = "provision verify") -> str:
    """The JUnit file of a run that could not finish: one testcase in error with the reason."""
    root = ET.Element("testsuites", name=_x(name), tests="1", failures="0", errors="1", skipped="0", time="0")
    suite = ET.SubElement(root, "testsuite", name="verify", tests="1", failures="0", errors="1", skipped="0", time="0")
    case = ET.SubElement(suite, "testcase", classname="provision.verify", name="verify run", time="0")
    el = ET.SubElement(case, "error", message=_x(message), type="error")
    el.text = _x(message)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
