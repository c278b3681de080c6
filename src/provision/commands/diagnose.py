"""`provision diagnose LOG...`: name the cause of a failed multi-node job from its logs, with the node and the fix."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from provision import diagnose as core
from provision.app import Application
from provision.terminal import Terminal, make_table


def _why(c: dict[str, Any]) -> str:
    """The explanation without the quoted evidence (the detail is 'why -- file:line: "evidence"')."""
    return c["detail"].split(" -- ", 1)[0]


def _where(c: dict[str, Any], short: bool = False) -> str:
    data = c.get("data") or {}
    files = data.get("files") or ([data["file"]] if data.get("file") else [])
    if short:
        files = [os.path.basename(f) for f in files]
    return ", ".join(f"{f}:{data.get('line')}" if i == 0 else f for i, f in enumerate(files)) or f"line {data.get('line')}"


def render(term: Terminal, doc: dict[str, Any]) -> None:
    if doc["causes"]:
        table = make_table("causes (most specific first)", ["cause", "node", "where"])
        for c in doc["causes"]:
            table.add_row(c["check"], c.get("node") or "-", _where(c, short=True))
        term.table(table)
        for c in doc["causes"]:
            data = c.get("data") or {}
            extra = ", ".join(f"{k} {data[k]}" for k in ("rank", "task", "host") if data.get(k))
            term.out.print(f"[red]FAIL[/red] {c.get('node') or '(node unknown)'}: {c['check']}"
                           + (f" ({extra})" if extra else ""))
            term.out.print(f"    cause:    {_why(c)}", markup=False)
            term.out.print(f"    evidence: {_where(c)}: {data.get('evidence', '')}", markup=False)
            term.out.print(f"    fix:      {c['fix']}", markup=False)
    exits = [(f["path"], e) for f in doc["files"] for e in f.get("exits") or []]
    if exits:
        term.out.print("exits the launchers reported:")
        for path, e in exits[:20]:
            who = " ".join(f"{k} {e[k]}" for k in ("node", "task", "rank", "local_rank") if e.get(k) is not None)
            what = e.get("what") or f"exit code {e.get('code')}"
            term.out.print(f"    {path}:{e['line']}: {who or '?'}: {what}", markup=False)
    if doc["unknown_error_lines"]:
        term.out.print("lines that look like errors (no known cause in these logs):")
        for u in doc["unknown_error_lines"]:
            node = f" [{u['node']}]" if u.get("node") else ""
            term.out.print(f"    {u.get('file', '')}:{u['line']}{node}: {u['text']}", markup=False)
    s = doc["summary"]
    if doc["ok"]:
        term.out.print(f"[yellow]diagnose: no known cause[/yellow] in {s['files']} log(s)")
    else:
        term.out.print(f"[red]diagnose: {s['causes']} cause(s)[/red] in {s['files']} log(s)"
                       + (f" on {', '.join(s['nodes'])}" if s["nodes"] else ""))


@click.command("diagnose")
@click.argument("logs", nargs=-1, required=True, metavar="LOG...")
@click.option("--node", metavar="NAME", help="The node of lines that name none (a log copied from one node).")
@click.option("--json", "json_mode", is_flag=True, help="Print one JSON document (schema 1).")
def command(logs: tuple[str, ...], node: str | None, json_mode: bool) -> None:
    """Name the cause of a failed multi-node job from its logs; exit 1 when a cause was found, 0 when none.

    Reads torchrun/elastic, NCCL (NCCL_DEBUG=INFO/WARN), gloo, DeepSpeed's pdsh runner, mpirun, SLURM job
    output and Ascend HCCL logs ('-' reads stdin). Each cause comes with the node it concerns, the line
    that shows it and the fix; a log with no known cause gets the lines that look like errors.

    \b
    provision diagnose slurm-1234.out
    provision diagnose node1.log node2.log --json > diagnosis.json
    kubectl logs job/train | provision diagnose --node worker-0 -
    """
    app = Application(json_mode=json_mode)
    with app.guard():
        doc = core.diagnose(core.read_logs(logs), node=node)
    if json_mode:
        app.emit_json(doc)
    else:
        render(app, doc)
    sys.exit(core.exit_code(doc))
