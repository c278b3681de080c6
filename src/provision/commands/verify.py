"""`provision verify`: check a cluster read-only and explain every failure with its fix."""

from __future__ import annotations

import signal
import sys
from typing import Any

import click

from provision import ansible
from provision import verify as core
from provision.app import Application
from provision.commands._options import become_options
from provision.terminal import Terminal, make_table

MARK = {"pass": "[green]✓[/green]", "fail": "[red]✗[/red]", "warn": "[yellow]![/yellow]",
        "skip": "[dim]-[/dim]"}


class Progress:
    """One status line on stderr while ansible-playbook runs (a spinner on a terminal)."""

    def __init__(self, term: Terminal) -> None:
        self.term = term
        self.done = 0
        self.failed: list[str] = []
        self.status = None

    def __enter__(self) -> "Progress":
        self.status = self.term.status("verify: starting ansible-playbook")
        self.status.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.status is not None:
            self.status.__exit__(*exc)

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("event") != "result" or self.status is None:
            return
        self.done += 1
        state = event.get("status")
        if state == "unreachable":
            self.failed.append(event.get("host", "?"))
        self.status.update(f"verify: {event.get('host')}: {event.get('task')} ({state}); "
                           f"{self.done} results so far")


SEVERITY = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
_SEPARATORS = " .->:/"


def row_key(check: str, nodes: list[str]) -> str:
    """One table row for the per-peer checks: 'ssh node1->node2' -> 'ssh *', 'nccl_net.reach.node2' -> 'nccl_net.reach *'."""
    key = check
    stripped = True
    while stripped:
        stripped = False
        for node in sorted(nodes, key=len, reverse=True):
            if key.endswith(node) and key != node:
                key = key[: -len(node)].rstrip(_SEPARATORS)
                stripped = True
    return f"{key} *" if key != check and key else check


def render(term: Terminal, doc: dict[str, Any]) -> None:
    nodes = [n["name"] for n in doc["nodes"]]
    rows: dict[str, dict[str, str]] = {}
    for c in doc["checks"]:
        cells = rows.setdefault(row_key(c["check"], nodes), {})
        old = cells.get(c["node"])
        if old is None or SEVERITY[c["status"]] > SEVERITY[old]:
            cells[c["node"]] = c["status"]
    table = make_table("checks (* = one cell per peer, the worst shown)", ["check"] + nodes)
    for name, cells in rows.items():
        table.add_row(name, *[MARK[cells[n]] if n in cells else "" for n in nodes])
    term.table(table)

    mesh = doc["mesh"]
    if mesh["ran"]:
        cols = sorted({d for row in mesh["matrix"].values() for d in row}, key=_order(nodes))
        table = make_table("ssh mesh (row: from, column: to)", ["from \\ to"] + cols)
        for src in mesh["nodes"]:
            row = mesh["matrix"][src]
            table.add_row(src, *[("[green]✓[/green]" if row[d]["ok"] else "[red]✗[/red]")
                                 if d in row else "" for d in cols])
        term.table(table)

    versions = doc["versions"]
    if versions["ran"]:
        vnodes = list(versions["nodes"])
        table = make_table("versions (differing values in red)", ["" ] + vnodes)
        for fld in versions["fields"]:
            differs = fld in versions["differing"]
            vals = [versions["nodes"][n].get(fld, "") or "-" for n in vnodes]
            table.add_row(f"[red]{fld}[/red]" if differs else fld,
                          *[f"[red]{v}[/red]" if differs else v for v in vals])
        term.table(table)

    smoke = doc["allreduce"]
    if smoke.get("ran"):
        _render_smoke(term, smoke)

    failures = [c for c in doc["checks"] if c["status"] in ("fail", "warn")]
    for c in failures:
        colour = "red" if c["status"] == "fail" else "yellow"
        term.out.print(f"[{colour}]{c['status'].upper()}[/{colour}] {c['node']}: {c['check']}")
        term.out.print(f"    cause: {c['detail']}", markup=False)
        if c["fix"]:
            term.out.print(f"    fix:   {c['fix']}", markup=False)
    s = doc["summary"]
    line = (f"{len(nodes)} node(s), {s['pass']} passed, {s['fail']} failed, {s['warn']} warnings, "
            f"{s['skip']} skipped in {doc['duration_s']} s")
    if doc["ok"]:
        term.success(f"verify: OK: {line}")
    else:
        term.out.print(f"[red]verify: FAILED[/red]: {line}")


def _order(nodes: list[str]):
    return lambda n: (nodes.index(n) if n in nodes else len(nodes), n)


def _render_smoke(term: Terminal, smoke: dict[str, Any]) -> None:
    """The all-reduce figures as nccl-tests prints them (size, time, algbw, busbw)."""
    head = ", ".join(f"{k}: {smoke[k]}" for k in ("backend", "world_size", "nodes", "master", "correct",
                                                    "busbw_gbps", "tcp_gbps", "ratio", "tcp_ring_gbps", "ratio_ring")
                     if smoke.get(k) is not None)
    table = make_table(f"all-reduce ({head})", ["size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)"])
    for r in smoke.get("rows") or []:
        table.add_row(str(r.get("bytes")), str(r.get("time_us")), str(r.get("algbw")), str(r.get("busbw")))
    term.table(table)
    per_node = smoke.get("per_node") or {}
    if per_node:
        slow = {lk["src"] for lk in smoke.get("slow_links") or []}
        table = make_table("per node (TCP GB/s: sending to the next node alone, and with every link busy)",
                           ["node", "out one-way", "out ring", "in ring"])
        for node, f in per_node.items():
            mark = "[red]" if node in slow else ""
            table.add_row(f"{mark}{node}", *[str(f.get(k, "-")) for k in ("out_one_way_gbps", "out_ring_gbps",
                                                                           "in_ring_gbps")])
        term.table(table)
    expected = smoke.get("expected") or {}
    if expected.get("detail"):
        term.out.print(f"expected bandwidth: {expected['detail']}", markup=False)
    iso = smoke.get("isolation") or {}
    for rnd_no, rnd in enumerate(iso.get("rounds") or [], 1):
        term.out.print(f"bad node search, round {rnd_no}: " + "; ".join(
            f"{a}+{b} {out}" for (a, b), out in zip(rnd["pairs"], rnd["outcome"])), markup=False)
    if iso.get("summary"):
        term.out.print(f"bad node search: {iso['summary']}", markup=False)
    base = smoke.get("baseline") or {}
    if base.get("path"):
        state = ("saved" if base.get("saved") else base.get("not_saved") or "") if "saved" in base or \
            base.get("not_saved") else ""
        term.out.print(f"baseline {base['path']}: "
                       + ("compared" if base.get("comparable") else "not comparable: " + "; ".join(
                           base.get("differences") or [])[:200]) + (f"; {state}" if state else ""), markup=False)


@click.command("verify")
@click.option("-i", "--inventory", envvar="PROVISION_INVENTORY", metavar="PATH",
              help="Ansible inventory (file, directory or host list), e.g. inventory/lab/.")
@click.option("--check", "checks", multiple=True, metavar="NAME",
              help="Run only this check (repeatable); --list-checks names them.")
@click.option("-l", "--limit", metavar="PATTERN", help="Only these hosts, as ansible-playbook --limit.")
@click.option("--smoke", is_flag=True, help="Also run the all-reduce smoke test across the nodes.")
@click.option("--full", is_flag=True,
              help="SSH, pdsh and the NCCL TCP probe from every node to every node (N x N; default: a ring, and "
                   "every pair's keys compared in the files; inventory variable verify_matrix: full does the same).")
@click.option("-e", "--extra-vars", "extra_vars", multiple=True, metavar="VARS",
              help="Extra variables for the checks (as ansible-playbook -e), e.g. gcc_toolchain_min_version=11.")
@click.option("--save-baseline", is_flag=True,
              help="With --smoke (implied): keep this run's all-reduce figures as the cluster's baseline, which later "
                   "--smoke runs are compared with (busbw within -e verify_baseline_tolerance, default 0.10; each "
                   "link within verify_baseline_link_tolerance, default 0.25).")
@click.option("--baseline", "baseline", metavar="FILE", default=None,
              help="The baseline file [default: INVENTORY_DIR/.provision/baseline.json].")
@click.option("--timeout", default=None, type=float,
              help="Give up after this many seconds [default: 300; 45 with --local: slurmd kills its HealthCheckProgram at 60 s].")
@click.option("--json", "json_mode", is_flag=True, help="Print one JSON document (README: provision verify --json).")
@click.option("--list-checks", is_flag=True, help="List the check names and exit.")
@click.option("--local", is_flag=True,
              help="Check only the node this runs on (Ansible's local connection, no inventory, no controller); "
                   "the node-local checks by default.")
@click.option("--slurm-drain", is_flag=True,
              help="With --local (implied): SLURM's health check. Drain this node when a check fails (reason "
                   "'provision: <check>: <cause>'), resume it when all pass and the drain was ours (README).")
@click.option("--node-name", metavar="NAME", help="This node's name [default: $SLURMD_NODENAME, else the short hostname].")
@become_options
def command(inventory: str | None, checks: tuple[str, ...], limit: str | None, smoke: bool, full: bool,
            extra_vars: tuple[str, ...], save_baseline: bool, baseline: str | None, timeout: float, json_mode: bool,
            list_checks: bool, local: bool, slurm_drain: bool, node_name: str | None, ask_become_pass: bool,
            become_password_file: str | None) -> None:
    """Check the cluster read-only; exit 0 all pass, 1 a check failed, 2 usage/inventory error.

    \b
    provision verify -i inventory/lab/
    provision verify -i inventory/lab/ --check mesh --check env --limit node1,node2
    provision verify -i hosts.ini --smoke --json > verify.json
    provision verify --local --slurm-drain       # as slurmd's HealthCheckProgram (README)
    """
    app = term = Application(json_mode=json_mode)
    if list_checks:
        for name, desc in core.checks().items():
            term.info(f"{name:10} {desc}")
        return
    if local or slurm_drain:
        if inventory or limit or smoke or save_baseline:
            app.usage("--local checks this node only: no --inventory, --limit, --smoke or --save-baseline")
        _local(app, checks, list(extra_vars), timeout or 45, slurm_drain, node_name)
    timeout = timeout or 300
    with app.guard():
        password = ansible.become_password(ask_become_pass, become_password_file)
    with app.guard(), Progress(term) as progress:  # on stderr: stdout stays one JSON document with --json
        doc = core.verify(inventory, checks=checks, limit=limit, smoke=smoke, full=full,
                          extra_vars=list(extra_vars), timeout=timeout, on_event=progress, baseline=baseline,
                          save_baseline=save_baseline, become_password=password)
    if json_mode:
        app.emit_json(doc)
    else:
        render(app, doc)
    app.done(doc["ok"])


def _local(app: Application, checks: tuple[str, ...], extra_vars: list[str], timeout: float, drain: bool,
           node_name: str | None) -> None:
    """--local: this node's checks; --slurm-drain: and drain/resume it (provision.slurm_health)."""
    from provision import slurm_health

    if not drain:
        with app.guard():
            doc = core.verify_local(slurm_health.node_name(node_name), checks=checks, extra_vars=extra_vars,
                                    timeout=timeout)
        if app.json_mode:
            app.emit_json(doc)
        else:
            render(app, doc)
        app.done(doc["ok"])
    slurm_health.health_environment()
    # slurmd stops its health check with SIGTERM at 60 s: exit through Python so that the playbook
    # run is stopped with us (provision.ansible.run_playbook), not left behind
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        with app.guard():
            out = slurm_health.run(lambda node, addr: core.verify_local(node, address=addr, checks=checks,
                                                                        extra_vars=extra_vars, timeout=timeout),
                                   node_name)
    except slurm_health.SlurmError as exc:
        app.abort(f"verify --slurm-drain: {exc}", code=slurm_health.EXIT_ERROR)
    if app.json_mode:
        app.emit_json(out)
    else:
        for c in out["failures"]:
            app.out.print(f"FAIL {out['node']}: {c['check']}: {c['detail']}", markup=False)
        done = {"drain": "drained", "resume": "resumed", "nothing": "unchanged"}[out["action"]]
        app.out.print(f"{out['node']}: {done} ({out['why']})" + (f"; reason: {out['reason']}" if out["action"] == "drain"
                                                                   else ""), markup=False)
    raise SystemExit(out["exit_code"])
