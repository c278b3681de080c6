"""`provision verify`: check a cluster read-only and explain every failure with its fix."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from provision import ansible, export
from provision import verify as core
from provision import views
from provision.app import Application
from provision.commands._options import ansible_args, ansible_options, deprecated
from provision.terminal import Terminal, make_table

# where each setting's default is written (roles/verify/defaults/main.yml for verify's own)
_SETTINGS = ansible.collection_module("common.settings")


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


def row_key(check: str, nodes: list[str]) -> str:
    """One grid row for the per-peer checks (views.row_key)."""
    return views.row_key(check, nodes)


def render(term: Terminal, doc: dict[str, Any], grid: bool | None = None) -> None:
    """The document for people: the per-node view, the grid when it fits (grid=None) or when asked
    (True: in slices of nodes that fit), the SSH mesh, versions, all-reduce, the failures and a summary."""
    width = term.out.width
    nodes = [n["name"] for n in doc["nodes"]]
    rows, slices = views.grid_slices(doc, width)
    if grid or (grid is None and len(slices) == 1):
        for sl in slices:
            part = "" if len(slices) == 1 else f"; nodes {nodes.index(sl[0]) + 1}-{nodes.index(sl[-1]) + 1} of {len(nodes)}"
            term.table(views.grid_table(rows, sl, f"checks (* = one cell per peer, the worst shown{part})"))
    for line in views.per_node_lines(doc, width):
        term.out.print(line, soft_wrap=True)

    mesh = doc["mesh"]
    if mesh["ran"]:
        cols = sorted({d for row in mesh["matrix"].values() for d in row}, key=_order(nodes))
        if views.matrix_fits(cols, width) or grid:
            step = len(cols) if views.matrix_fits(cols, width) else max(1, (width - 20) // (max(map(len, cols)) + 3))
            for i in range(0, len(cols), step):
                part = cols[i:i + step]
                title = "ssh mesh (row: from, column: to)" + ("" if step >= len(cols) else
                                                                f"; columns {i + 1}-{i + len(part)} of {len(cols)}")
                table = make_table(title, ["from \\ to"] + [escape(c) for c in part])
                for src in mesh["nodes"]:
                    row = mesh["matrix"][src]
                    table.add_row(escape(src), *[("[green]✓[/green]" if row[d]["ok"] else "[red]✗[/red]")
                                                 if d in row else "" for d in part])
                term.table(table)
        else:
            for line in views.mesh_lines(mesh, width):
                term.out.print(line, soft_wrap=True)

    versions = doc["versions"]
    if versions["ran"]:
        if views.versions_fit(versions, width):
            vnodes = list(versions["nodes"])
            table = make_table("versions (differing values in red)", [""] + [escape(n) for n in vnodes])
            for fld in versions["fields"]:
                differs = fld in versions["differing"]
                vals = [escape(versions["nodes"][n].get(fld, "") or "-") for n in vnodes]
                table.add_row(f"[red]{escape(fld)}[/red]" if differs else escape(fld),
                              *[f"[red]{v}[/red]" if differs else v for v in vals])
            term.table(table)
        else:
            for line in views.versions_lines(versions, width):
                term.out.print(line, soft_wrap=True)

    smoke = doc["allreduce"]
    if smoke.get("ran"):
        _render_smoke(term, smoke)

    for line in views.failure_lines(doc, width):
        term.out.print(line, soft_wrap=True)
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
    if smoke.get("rows"):
        table = make_table(f"all-reduce ({head})", ["size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)"])
        for r in smoke["rows"]:
            table.add_row(str(r.get("bytes")), str(r.get("time_us")), str(r.get("algbw")), str(r.get("busbw")))
        term.table(table)
    else:  # no all-node run (a node dropped out): no empty table, and the pairs below test the others
        term.out.print(f"all-reduce: no figures ({head}): it did not run on every node", markup=False)
    per_node = smoke.get("per_node") or {}
    if per_node:
        slow = {lk["src"] for lk in smoke.get("slow_links") or []} | set((smoke.get("isolation") or {}).get("bad") or [])
        shown = list(per_node)
        title = "per node (TCP GB/s: sending to the next node alone, and with every link busy)"
        if len(shown) > views.MAX_SMOKE_ROWS:
            # many nodes: the slow ones and the slowest few; the rest in the summary line below
            by_ring = sorted(shown, key=lambda n: per_node[n].get("out_ring_gbps") or 0.0)
            keep = set(by_ring[:3]) | (slow & set(shown))
            shown = [n for n in per_node if n in keep]
            title += f"; the slow and the 3 slowest of {len(per_node)} nodes"
        table = make_table(title, ["node", "out one-way", "out ring", "in ring"])
        for node in shown:
            f = per_node[node]
            table.add_row(f"[red]{escape(node)}[/red]" if node in slow else escape(node),
                          *[str(f.get(k, "-")) for k in ("out_one_way_gbps", "out_ring_gbps", "in_ring_gbps")])
        term.table(table)
        ring = sorted(f["out_ring_gbps"] for f in per_node.values() if f.get("out_ring_gbps") is not None)
        if len(shown) < len(per_node) and ring:
            term.out.print(f"out ring over {len(ring)} nodes: min {ring[0]}, median {ring[len(ring) // 2]}, "
                           f"max {ring[-1]} GB/s", markup=False)
    expected = smoke.get("expected") or {}
    if expected.get("detail"):
        term.out.print(f"expected bandwidth: {expected['detail']}", markup=False)
    iso = smoke.get("isolation") or {}
    named = set(iso.get("bad") or [])
    for rnd_no, rnd in enumerate(iso.get("rounds") or [], 1):
        pairs = list(zip(rnd["pairs"], rnd["outcome"]))
        if len(pairs) > views.FOLD_AT:  # many pairs: the count, and the pairs with a named node or not ok
            odd = [(p, out) for p, out in pairs if not str(out).startswith("ok") or set(p) & named]
            by_outcome: dict[str, list[str]] = {}
            for (a, b), out in odd:  # one outcome once (every pair of a round timed out: one line, not 15)
                by_outcome.setdefault(str(out), []).append(f"{a}+{b}")
            text = f"{len(pairs)} pairs, {len(pairs) - len(odd)} without a named node" + "".join(
                f"; {', '.join(ps)} {out}" for out, ps in by_outcome.items())
        else:
            text = "; ".join(f"{a}+{b} {out}" for (a, b), out in pairs)
        term.out.print(f"bad node search, round {rnd_no}: {text}", markup=False)
    if iso.get("summary"):
        term.out.print(f"bad node search: {iso['summary']}", markup=False)
    base = smoke.get("baseline") or {}
    if base.get("path"):
        state = ("saved" if base.get("saved") else base.get("not_saved") or "") if "saved" in base or \
            base.get("not_saved") else ""
        diff = "; ".join(base.get("differences") or [])[:200]
        # comparable None: nothing to compare (no baseline yet, or this run has no all-node figures)
        judged = ("compared" if base.get("comparable") else "not comparable: " + diff
                  if base.get("comparable") is False else diff or "not compared")
        term.out.print(f"baseline {base['path']}: {judged}" + (f"; {state}" if state else ""), markup=False)


@click.command("verify")
@ansible_options
@click.option("--only", "checks", multiple=True, metavar="CHECK",
              help="Run only this check (repeatable); --list-checks names them.")
@click.option("--check", "checks_old", multiple=True, metavar="CHECK", hidden=True,
              help="Deprecated spelling of --only (in ansible-playbook and `provision site`, --check is the dry run).")
@click.option("--smoke", is_flag=True, help="Also run the all-reduce smoke test across the nodes.")
@click.option("--full", is_flag=True,
              help="SSH, pdsh and the NCCL TCP probe from every node to every node (N x N; default: a ring, and "
                   "every pair's keys compared in the files; inventory variable verify_matrix: full does the same).")
@click.option("--save-baseline", is_flag=True,
              help="With --smoke (implied): keep this run's all-reduce figures as the cluster's baseline, which later "
                   "--smoke runs are compared with (busbw within -e verify_baseline_tolerance, default %s; each "
                   "link within verify_baseline_link_tolerance, default %s)."
                   % (_SETTINGS.default("verify_baseline_tolerance"), _SETTINGS.default("verify_baseline_link_tolerance")))
@click.option("--baseline", "baseline", metavar="FILE", default=None,
              help="The baseline file [default: INVENTORY_DIR/.provision/baseline.json].")
@click.option("--timeout", default=None, type=click.FloatRange(1), metavar="SECONDS",
              help="Stop the whole run after this many seconds (exit 3) [default: %.0f, and %.0f more for each node "
                   "beyond %d (32 nodes: %.0f); 45 with --local: slurmd kills its HealthCheckProgram at 60 s]."
                   % (core.DEFAULT_TIMEOUT_S, core.TIMEOUT_PER_NODE_S, core.TIMEOUT_FREE_NODES,
                      core.default_timeout(32)))
@click.option("--json", "json_mode", is_flag=True, help="Print one JSON document (docs/verify.md: --json).")
@click.option("--list-checks", is_flag=True, help="List the checks and exit (with --json: one JSON document on stdout).")
@click.option("--local", is_flag=True,
              help="Check only the node this runs on (Ansible's local connection, no inventory, no controller); "
                   "the node-local checks by default.")
@click.option("--slurm-drain", is_flag=True,
              help="With --local (implied): SLURM's health check. Drain this node when a check fails (reason "
                   "'provision: <check>: <cause>'), resume it when all pass and the drain was ours (docs/slurm.md).")
@click.option("--node-name", metavar="NAME", help="This node's name [default: $SLURMD_NODENAME, else the short hostname].")
@click.option("--grid/--no-grid", "grid", default=None,
              help="The check x node grid: --grid always (in slices of nodes that fit the terminal), --no-grid never "
                   "[default: when it fits]. The per-node view is always shown.")
@click.option("--brief", is_flag=True,
              help="One line per failed or warned check and a summary line (logs: the journal, cron mail).")
@click.option("--junit", "junit", metavar="FILE", help="Also write the checks as JUnit XML (CI systems).")
@click.option("--prometheus", "prometheus", metavar="FILE",
              help="Also write the Prometheus text format for node_exporter's textfile collector (atomically; "
                   "docs/report.md).")
def command(inventory: str | None, limit: str | None, extra_vars: tuple[str, ...], forks: int | None,
            user: str | None, connect_timeout: float | None, verbose: int, ask_become_pass: bool,
            become_password_file: str | None, checks: tuple[str, ...], checks_old: tuple[str, ...], smoke: bool,
            full: bool, save_baseline: bool, baseline: str | None, timeout: float, json_mode: bool,
            list_checks: bool, local: bool, slurm_drain: bool, node_name: str | None, grid: bool | None, brief: bool,
            junit: str | None, prometheus: str | None) -> None:
    """Check the cluster read-only; exit 0 all pass, 1 a check failed, 2 usage/inventory error, 3 no node
    answered, timed out or interrupted (a node down among nodes that answer is a failed check: 1).

    \b
    provision verify -i inventory/lab/
    provision verify -i inventory/lab/ --only mesh --only env --limit node1,node2
    provision verify -i hosts.ini --smoke --json > verify.json
    provision verify --local --slurm-drain       # as slurmd's HealthCheckProgram (docs/slurm.md)
    """
    app = term = Application(json_mode=json_mode)
    if checks_old:
        deprecated("verify --check", "verify --only")
        checks = tuple(checks) + tuple(checks_old)
    if list_checks:
        if json_mode:  # on stdout, as every --json document
            app.emit_json(core.check_list())
        else:
            listed = core.checks()
            width = max(map(len, listed))
            for name, desc in listed.items():
                term.info(f"{name:{width}} {desc}")
        return
    if brief and json_mode:
        app.usage("--brief and --json: choose one (--brief prints lines for people and logs, --json one document)")
    outputs = Outputs(app, junit, prometheus)
    show = Show(grid, brief)
    extra_args = ansible_args(forks, user, verbose, connect_timeout)
    if local or slurm_drain:
        if inventory or limit or smoke or save_baseline:
            app.usage("--local checks this node only: no --inventory, --limit, --smoke or --save-baseline")
        _local(app, checks, list(extra_vars), timeout or 45, slurm_drain, node_name, outputs, show, extra_args,
               verbose)
    with app.guard():
        password = ansible.become_password(ask_become_pass, become_password_file)
    with app.guard(), shown_when_broken(app, verbose), outputs.on_error(), Progress(term) as progress:
        # on stderr: stdout stays one JSON document
        doc = core.verify(inventory, checks=checks, limit=limit, smoke=smoke, full=full,
                          extra_vars=list(extra_vars), timeout=timeout, on_event=progress, baseline=baseline,
                          save_baseline=save_baseline, become_password=password, ansible_args=extra_args)
    outputs.write(doc)
    show(app, doc)
    app.exit(core.exit_code(doc))


@contextlib.contextmanager
def shown_when_broken(app: Application, verbose: int):
    """With -v: when the run breaks (no document), what ansible-playbook printed, on stderr."""
    try:
        yield
    except core.VerifyError as exc:
        if verbose and exc.output:
            app.err.rule("ansible-playbook's output")
            app.err.print(exc.output, markup=False, highlight=False, soft_wrap=True)
            app.err.rule()
        raise


class Show:
    """How the document is shown: --json, --brief or the views (with --grid/--no-grid)."""

    def __init__(self, grid: bool | None, brief: bool) -> None:
        self.grid, self.brief = grid, brief

    def __call__(self, app: Application, doc: dict[str, Any]) -> None:
        if app.json_mode:
            app.emit_json(doc)
        elif self.brief:
            brief(app, doc)
        else:
            render(app, doc, grid=self.grid)


class Outputs:
    """--junit FILE and --prometheus FILE: written atomically after the run, and also when the run
    could not finish (a timeout, an inventory error): then a not-ok, not-completed record, so that
    a pass from an earlier run does not stay visible."""

    def __init__(self, app: Application, junit: str | None, prometheus: str | None) -> None:
        self.app, self.junit, self.prometheus = app, junit, prometheus
        for path in (junit, prometheus):
            if path and not Path(path).expanduser().parent.is_dir():
                app.usage(f"cannot write {path}: directory {Path(path).expanduser().parent} does not exist")

    def write(self, doc: dict[str, Any]) -> None:
        self._write(export.junit_xml(doc) if self.junit else None, export.prometheus_text(doc) if self.prometheus else None)

    def _write(self, junit_text: str | None, prom_text: str | None) -> None:
        try:
            if self.junit and junit_text is not None:
                export.write_atomic(self.junit, junit_text)
            if self.prometheus and prom_text is not None:
                export.write_atomic(self.prometheus, prom_text)
        except export.OutputError as exc:
            self.app.usage(str(exc))

    @contextlib.contextmanager
    def on_error(self):
        try:
            yield
        except Exception as exc:
            if self.junit or self.prometheus:
                msg = str(exc) or type(exc).__name__
                self._write(export.junit_failed_run(msg), export.prometheus_failed_run(msg))
            raise


def brief(app: Application, doc: dict[str, Any]) -> None:
    """One line per failed or warned check, then the summary line. Under systemd with the output in
    the journal ($JOURNAL_STREAM), each line carries its syslog priority (<3> fail, <4> warning, <6>
    summary): `journalctl -p err` shows the failures."""
    prio = journal_priorities()
    for c in doc["checks"]:
        if c["status"] not in ("fail", "warn"):
            continue
        line = f"{c['status'].upper()} {c['node']}: {c['check']}: {c['detail']}" + (f" (fix: {c['fix']})" if c["fix"] else "")
        app.out.print((("<3>" if c["status"] == "fail" else "<4>") if prio else "") + line, markup=False,
                      highlight=False, soft_wrap=True)
    s = doc["summary"]
    app.out.print(("<6>" if prio else "") + f"verify: {'OK' if doc['ok'] else 'FAILED'}: {len(doc['nodes'])} node(s), "
                  f"{s['pass']} passed, {s['fail']} failed, {s['warn']} warnings, {s['skip']} skipped in "
                  f"{doc['duration_s']} s", markup=False, highlight=False, soft_wrap=True)


def journal_priorities() -> bool:
    """True when stdout is systemd's journal stream (JOURNAL_STREAM=device:inode of our stdout)."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    try:
        dev, ino = (int(x) for x in stream.split(":"))
        st = os.fstat(sys.stdout.fileno())
    except (ValueError, OSError, AttributeError, io.UnsupportedOperation):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def _local(app: Application, checks: tuple[str, ...], extra_vars: list[str], timeout: float, drain: bool,
           node_name: str | None, outputs: Outputs, show: Show, extra_args: list[str] = (), verbose: int = 0) -> None:
    """--local: this node's checks; --slurm-drain: and drain/resume it (provision.slurm_health)."""
    from provision import slurm_health

    if os.geteuid() == 0:
        # slurmd runs this as root: it must not run code another user could write (issue 31)
        problems = slurm_health.install_problems()
        if problems:
            app.abort(f"verify --local runs as root from an installation another user can write ({'; '.join(problems)}); "
                      "fix: install provision in a root-owned venv of its own (docs/slurm.md: python3 -m venv "
                      "/opt/provision-health && /opt/provision-health/bin/pip install provision)",
                      code=slurm_health.EXIT_ERROR)

    if not drain:
        with app.guard(), shown_when_broken(app, verbose), outputs.on_error():
            doc = core.verify_local(slurm_health.node_name(node_name), checks=checks, extra_vars=extra_vars,
                                    timeout=timeout, ansible_args=extra_args)
        outputs.write(doc)
        show(app, doc)
        app.exit(core.exit_code(doc))
    slurm_health.health_environment()
    # slurmd stops its health check with SIGTERM at 60 s: exit through Python so that the playbook
    # run is stopped with us (provision.ansible.run_playbook), not left behind
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        with app.guard(), shown_when_broken(app, verbose), outputs.on_error():
            out = slurm_health.run(lambda node, addr: core.verify_local(node, address=addr, checks=checks,
                                                                        extra_vars=extra_vars, timeout=timeout,
                                                                        ansible_args=extra_args),
                                   node_name)
    except slurm_health.SlurmError as exc:
        app.abort(f"verify --slurm-drain: {exc}", code=slurm_health.EXIT_ERROR)
    if out.get("document"):
        outputs.write(out["document"])
    if app.json_mode:
        app.emit_json(out)
    else:
        for c in out["failures"]:
            app.out.print(f"FAIL {out['node']}: {c['check']}: {c['detail']}", markup=False)
        done = {"drain": "drained", "resume": "resumed", "nothing": "unchanged"}[out["action"]]
        app.out.print(f"{out['node']}: {done} ({out['why']})" + (f"; reason: {out['reason']}" if out["action"] == "drain"
                                                                   else ""), markup=False)
    raise SystemExit(out["exit_code"])
