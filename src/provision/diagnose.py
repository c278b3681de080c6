"""`provision diagnose` core: read the logs of a failed multi-node job and name each cause, its node and the fix.

The mapping itself is the collection's plugins/module_utils/diagnose.py (the smoke test and
`provision launch` use the same one); this module reads files or stdin and builds the document:

    {"schema": 1,
     "ok": true when no known cause was found,
     "files": [{"path", "lines", "nodes", "exits", "causes"}],
     "causes": [Check records: node, check "diagnose.<cause>", status "fail", detail, fix, data],
     "unknown_error_lines": [{"file", "line", "text", "node"}]  (from the logs where nothing was recognised),
     "summary": {"files", "causes", "nodes"}}
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable

from provision.ansible import collection_module

SCHEMA = 1
STDIN = "-"


class DiagnoseError(Exception):
    """A log that cannot be read (exit 2)."""


def read_logs(paths: Iterable[str], stdin=None) -> list[tuple[str, str]]:
    """[(source, text)] for files, or stdin for '-'; DiagnoseError names the first unreadable one."""
    logs = []
    for path in paths:
        if path == STDIN:
            stream = stdin if stdin is not None else sys.stdin
            logs.append(("<stdin>", stream.read()))
            continue
        if not os.path.exists(path):
            raise DiagnoseError(f"{path}: no such file")
        if os.path.isdir(path):
            raise DiagnoseError(f"{path}: is a directory (give the log files in it)")
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                logs.append((path, handle.read()))
        except OSError as exc:
            raise DiagnoseError(f"{path}: {exc.strerror or exc}") from None
    return logs


def diagnose(logs: list[tuple[str, str]], node: str | None = None,
             nodes: dict[str, str] | None = None) -> dict[str, Any]:
    """The document for logs [(source, text)]; `node` names the node of lines that carry none, `nodes`
    does it per source (as `provision launch` knows which node printed what)."""
    nodes = nodes or {}
    job = collection_module("diagnose").diagnose_job([(src, text, nodes.get(src) or node) for src, text in logs])
    named = sorted({c["node"] for c in job["causes"] if c.get("node")})
    return {
        "schema": SCHEMA,
        "ok": not job["causes"],
        "files": job["files"],
        "causes": job["causes"],
        "unknown_error_lines": job["unknown_error_lines"],
        "summary": {"files": len(job["files"]), "causes": len(job["causes"]), "nodes": named},
    }


def exit_code(doc: dict[str, Any]) -> int:
    """1 when a cause was found, 0 when none."""
    return 0 if doc["ok"] else 1
