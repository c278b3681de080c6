"""`provision diagnose` core: read the logs of a failed multi-node job and name the first failure, its node and the
fix, then what followed from it.

The mapping itself is the collection's plugins/module_utils/verify/diagnose.py (the smoke test and
`provision launch` use the same one); this module finds the logs (files, directories, stdin), streams
each through its ``Scanner`` and builds the document:

    {"schema": 1,
     "ok": true when no known cause was found,
     "first_failure": {"check", "cause", "node", "file", "line", "time", "rank"} or null,
     "files": [{"path", "lines", "bytes", "long_lines", "nodes", "exits", "causes", "consequences"}],
     "causes": [Check records: the first failure (data.role "root"), then other faults (role "cause")],
     "consequences": [Check records (role "consequence"): what the other ranks reported after the first failure],
     "unknown_error_lines": [{"file", "line", "text", "node"}]  (from the logs where no fault was recognised),
     "summary": {"files", "causes", "consequences", "nodes"}}
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any, Iterable

from provision.ansible import collection_module

SCHEMA = 1
STDIN = "-"
MAX_FILES = 10000      # a directory with more is not one job's logs
MAX_DEPTH = 8          # torchrun's --log-dir: DIR/RUN_ID/attempt_N/RANK/stderr.log
_SNIFF = 8192


class DiagnoseError(Exception):
    """A log that cannot be read (exit 2)."""


def _engine():
    return collection_module("verify.diagnose")


def _looks_like_text(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return b"\0" not in handle.read(_SNIFF)
    except OSError:
        return False


def _walk(top: str) -> list[str]:
    found: list[str] = []
    base = top.rstrip(os.sep).count(os.sep)
    for root, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if root.count(os.sep) - base < MAX_DEPTH else []
        for name in sorted(names):
            path = os.path.join(root, name)
            if name.startswith(".") or os.path.islink(path) or not os.path.isfile(path):
                continue
            if _looks_like_text(path):
                found.append(path)
            if len(found) > MAX_FILES:
                raise DiagnoseError(f"{top}: more than {MAX_FILES} files (give the directory of one job's logs)")
    return found


def expand(paths: Iterable[str]) -> list[str]:
    """The logs to read: files as given, every text file under a directory (sorted, hidden names and
    links left out), '-' for stdin; DiagnoseError names the first path that does not exist."""
    out: list[str] = []
    for path in paths:
        if path == STDIN:
            out.append(path)
        elif not os.path.exists(path):
            raise DiagnoseError(f"{path}: no such file or directory")
        elif os.path.isdir(path):
            found = _walk(path)
            if not found:
                raise DiagnoseError(f"{path}: no log files in this directory")
            out.extend(found)
        else:
            out.append(path)
    return out


def scanner(source: str | None, node: str | None = None):
    """A new Scanner for one log, to feed as its text arrives (`provision launch` feeds each node's output)."""
    return _engine().Scanner(source, node)


def scan_stream(stream: IO, source: str | None, node: str | None = None):
    """A closed Scanner over a binary or text stream, read in chunks (never whole)."""
    dg = _engine()
    scanner = dg.Scanner(source, node)
    reader = getattr(stream, "buffer", stream)
    while True:
        chunk = reader.read(dg.CHUNK)
        if not chunk:
            break
        scanner.feed(chunk)
    return scanner.close()


def scan_paths(paths: Iterable[str], node: str | None = None, stdin: IO | None = None) -> list:
    """A closed Scanner per log (directories expanded); DiagnoseError for an unreadable one."""
    scanners = []
    for path in expand(paths):
        if path == STDIN:
            scanners.append(scan_stream(stdin if stdin is not None else sys.stdin, "<stdin>", node))
            continue
        try:
            with open(path, "rb") as handle:
                scanners.append(scan_stream(handle, path, node))
        except OSError as exc:
            raise DiagnoseError(f"{path}: {exc.strerror or exc}") from None
    return scanners


def read_logs(paths: Iterable[str], stdin: IO | None = None) -> list[tuple[str, str]]:
    """[(source, text)] for small logs already known to fit in memory (tests, tools); the CLI streams instead."""
    logs = []
    for path in expand(paths):
        if path == STDIN:
            logs.append(("<stdin>", (stdin if stdin is not None else sys.stdin).read()))
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                logs.append((path, handle.read()))
        except OSError as exc:
            raise DiagnoseError(f"{path}: {exc.strerror or exc}") from None
    return logs


def document(scanners: list) -> dict[str, Any]:
    """The document for the logs' scanners (fed; closed here)."""
    job = _engine().diagnose_job(scanners)
    records = job["causes"] + job["consequences"]
    named = sorted({c["node"] for c in records if c.get("node")})
    return {
        "schema": SCHEMA,
        "ok": not records,
        "first_failure": job["first_failure"],
        "files": job["files"],
        "causes": job["causes"],
        "consequences": job["consequences"],
        "unknown_error_lines": job["unknown_error_lines"],
        "summary": {"files": len(job["files"]), "causes": len(job["causes"]),
                    "consequences": len(job["consequences"]), "nodes": named},
    }


def diagnose(logs: list[tuple[str, Any]], node: str | None = None,
             nodes: dict[str, str] | None = None) -> dict[str, Any]:
    """The document for logs [(source, text or bytes or a fed Scanner)]; `node` names the node of lines that carry
    none, `nodes` does it per source (as `provision launch` knows which node printed what)."""
    dg = _engine()
    nodes = nodes or {}
    scanners = []
    for source, log in logs:
        if isinstance(log, dg.Scanner):
            scanners.append(log)
        else:
            scanners.append(dg.scan_text(log, source, nodes.get(source) or node))
    return document(scanners)


def diagnose_paths(paths: Iterable[str], node: str | None = None, stdin: IO | None = None) -> dict[str, Any]:
    """The document for log files, directories and '-' (stdin), each streamed."""
    return document(scan_paths(paths, node, stdin))


def exit_code(doc: dict[str, Any]) -> int:
    """1 when a cause was found, 0 when none."""
    return 0 if doc["ok"] else 1
