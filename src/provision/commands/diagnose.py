"""`provision diagnose LOG|DIR...`: name the first failure of a multi-node job from its logs, the node it came
from and the fix, then what followed from it."""

from __future__ import annotations

import os
import sys
from typing import Any

import click
from rich.text import Text

from provision import diagnose as core
from provision.app import Application
from provision.terminal import Terminal, make_table

ROLE_LABEL = {"root": "FIRST FAILURE", "cause": "ALSO", "consequence": "CONSEQUENCE"}


def _why(c: dict[str, Any]) -> str:
    """The explanation without the quoted evidence (the detail is 'why -- file:line: "evidence"')."""
    return c["detail"].split(" -- ", 1)[0]


def _where(c: dict[str, Any], short: bool = False) -> str:
    data = c.get("data") or {}
    files = data.get("files") or ([data["file"]] if data.get("file") else [])
    if short:
        files = [os.path.basename(f) for f in files]
    return ", ".join(f"{f}:{data.get('line')}" if i == 0 else f for i, f in enumerate(files)) or f"line {data.get('line')}"


def _who(c: dict[str, Any]) -> str:
    data = c.get("data") or {}
    ranks = data.get("ranks") or ([data["rank"]] if data.get("rank") else [])
    who = c.get("node") or "(node unknown)"
    if ranks:
        who += " (rank%s %s)" % ("s" if len(ranks) > 1 else "", ",".join(str(r) for r in ranks[:8])
                                 + (",..." if len(ranks) > 8 else ""))
    elif data.get("task"):
        who += f" (task {data['task']})"
    return who


def _line(term: Terminal, *parts: tuple[str, str]) -> None:
    """One line of styled parts; every part is plain text (log text is never read as markup)."""
    text = Text()
    for value, style in parts:
        text.append(value, style=style or None)
    term.out.print(text, soft_wrap=True)


def _record(term: Terminal, c: dict[str, Any], full: bool = True) -> None:
    data = c.get("data") or {}
    role = data.get("role", "cause")
    style = {"root": "bold red", "cause": "red", "consequence": "yellow"}.get(role, "red")
    when = f" at {data['time']}" if data.get("time") else ""
    _line(term, (ROLE_LABEL.get(role, "FAIL"), style), (f" {_who(c)}: ", ""), (c["check"], "bold"), (when, ""))
    _line(term, ("    cause:    ", ""), (_why(c), ""))
    if not full:
        _line(term, ("    where:    ", ""), (_where(c), ""))
        return
    lines = data.get("evidence_lines") or [{"file": data.get("file"), "line": data.get("line"),
                                            "text": data.get("evidence", "")}]
    for i, e in enumerate(lines):
        where = f"{e['file']}:{e['line']}" if e.get("file") else f"line {e['line']}"
        _line(term, ("    evidence: " if i == 0 else "              ", ""), (f"{where}: {e['text']}", ""))
    _line(term, ("    fix:      ", ""), (c["fix"], ""))


def render(term: Terminal, doc: dict[str, Any]) -> None:
    records = doc["causes"] + doc["consequences"]
    if records:
        table = make_table("what failed, in order", ["role", "cause", "node", "where", "time"])
        for c in records:
            data = c.get("data") or {}
            table.add_row(Text(data.get("role", "")), Text(data.get("cause", c["check"])), Text(_who(c)),
                          Text(_where(c, short=True).split(", ")[0]), Text(data.get("time") or "-"))
        term.table(table)
        for c in doc["causes"]:
            _record(term, c)
        if doc["consequences"]:
            _line(term, ("after it, the other ranks reported (consequences, not causes):", "yellow"))
            for c in doc["consequences"]:
                _record(term, c, full=False)
    exits = [(f["path"], e) for f in doc["files"] for e in f.get("exits") or []]
    if exits:
        _line(term, ("exits the launchers reported:", ""))
        for path, e in exits[:20]:
            who = " ".join(f"{k} {e[k]}" for k in ("node", "task", "rank", "local_rank") if e.get(k) is not None)
            what = e.get("what") or f"exit code {e.get('code')}"
            _line(term, (f"    {path}:{e['line']}: {who or '?'}: {what}", ""))
    long_lines = sum(f.get("long_lines") or 0 for f in doc["files"])
    if long_lines:
        _line(term, (f"({long_lines} line(s) longer than 16 KiB were read in their first 16 KiB)", "dim"))
    if doc["unknown_error_lines"]:
        _line(term, ("lines that look like errors (no known fault in these logs):", ""))
        for u in doc["unknown_error_lines"]:
            node = f" [{u['node']}]" if u.get("node") else ""
            _line(term, (f"    {u.get('file', '')}:{u['line']}{node}: {u['text']}", ""))
    s = doc["summary"]
    if doc["ok"]:
        _line(term, ("diagnose: no known cause", "yellow"), (f" in {s['files']} log(s)", ""))
        return
    first = doc.get("first_failure")
    tail = f" in {s['files']} log(s)" + (f" on {', '.join(s['nodes'])}" if s["nodes"] else "")
    if first:
        _line(term, (f"diagnose: first failure {first['check']}", "red"),
              (f" on {first.get('node') or '(node unknown)'}; {s['causes']} cause(s), "
               f"{s['consequences']} consequence(s){tail}", ""))
    else:
        _line(term, (f"diagnose: {s['causes']} consequence(s)", "yellow"),
              (f"{tail} and no first failure: the log of the rank that failed first is not among them", ""))


@click.command("diagnose")
@click.argument("logs", nargs=-1, required=True, metavar="LOG|DIR...")
@click.option("--node", metavar="NAME", help="The node of lines that name none (a log copied from one node).")
@click.option("--json", "json_mode", is_flag=True, help="Print one JSON document (schema 1).")
def command(logs: tuple[str, ...], node: str | None, json_mode: bool) -> None:
    """Name the first failure of a multi-node job from its logs; exit 1 when a cause was found, 0 when none.

    Reads torchrun/elastic, NCCL (NCCL_DEBUG=INFO/WARN), gloo, DeepSpeed's pdsh runner, mpirun, SLURM job
    output, dmesg/journal and Ascend HCCL logs: files, every file under a DIR (one per rank or node,
    torchrun's --log-dir) and '-' for stdin, each streamed. The events of all logs are ordered by time
    (and rank); the first failure is named with its node, its evidence lines and the fix, and what the
    other ranks reported after it is listed as its consequences. A log with no known cause gets the
    lines that look like errors.

    \b
    provision diagnose slurm-1234.out
    provision diagnose logs/            # one file per node or rank
    provision diagnose node1.log node2.log --json > diagnosis.json
    kubectl logs job/train | provision diagnose --node worker-0 -
    """
    app = Application(json_mode=json_mode)
    with app.guard():
        doc = core.diagnose_paths(logs, node=node)
    if json_mode:
        app.emit_json(doc)
    else:
        render(app, doc)
    sys.exit(core.exit_code(doc))
