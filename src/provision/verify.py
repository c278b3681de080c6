"""`provision verify`: run playbooks/verify.yml read-only and hand back its document.

The checks are the collection's catalog (plugins/module_utils/verify/catalog.py) and its modules, and the
document is built by the playbook's last task (plugins/module_utils/verify/verify_report.py); this module
only picks the checks, runs ansible-playbook, follows its progress and adds what only the CLI knows
(the inventory, the limit, the run's duration).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provision import ansible


class VerifyError(Exception):
    """A usage or inventory problem (exit code 2), told in one line; `output`: what ansible-playbook printed
    (shown with -v)."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


def catalog():
    return ansible.collection_module("verify.catalog")


def checks() -> dict[str, str]:
    """--only CHECK -> what it covers, in table order (provision verify --list-checks)."""
    return dict(catalog().describe())


def check_list() -> dict[str, Any]:
    """`provision verify --list-checks --json`: the catalog's public checks, one record each (name, summary,
    modules, controller, stage, default, always, local, local_default), under a schema number."""
    return {"schema": 1, "checks": catalog().describe_checks()}


def select_checks(names: tuple[str, ...] | list[str], smoke: bool) -> list[str]:
    """The check names to run (all but smoke when none is named, reach always); VerifyError on an unknown one."""
    try:
        return catalog().select(list(names) or None, smoke)
    except ValueError as exc:
        raise VerifyError(str(exc)) from exc


def baseline_path(inventory: str, given: str | None = None) -> str | None:
    """Where the cluster's baseline lives: --baseline FILE, else INVENTORY_DIR/.provision/baseline.json
    (None for a host list: no directory to keep it in)."""
    if given:
        return str(Path(given).expanduser().resolve())
    path = Path(inventory)
    if not path.exists():
        return None
    return str((path if path.is_dir() else path.parent) / ".provision" / "baseline.json")


def build_command(inventory: str, *, checks: list[str], limit: str | None = None,
                  extra_vars: list[str] | None = None, baseline: str | None = None,
                  save_baseline: bool = False, full: bool = False,
                  args: list[str] | tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
    """argv and environment for ansible-playbook on playbooks/verify.yml."""
    own_vars = {"verify_fail_on_error": False, "verify_smoke": "smoke" in checks,
                "verify_select": [n for n in checks if n != "smoke"]}
    if full:  # N x N SSH and pdsh (else the inventory's verify_matrix, default the ring)
        own_vars["verify_matrix"] = "full"
    if baseline and "smoke" in checks:
        own_vars.update(verify_baseline=baseline, verify_save_baseline=save_baseline)
    own = json.dumps(own_vars)
    argv = ansible.playbook_argv("playbooks/verify.yml", inventory, limit=limit,
                                 extra_vars=[own] + list(extra_vars or []), args=args)
    return argv, ansible.events_env()


def exit_code(document: dict[str, Any]) -> int:
    """0 all passed; 1 a check failed (a node that does not answer among nodes that do is a failed check: the
    run checked the others); 3 no node answered, so nothing was checked (provision.exits)."""
    from provision.exits import ExitCode

    if document.get("ok"):
        return ExitCode.OK
    failed = [c for c in document.get("checks") or [] if c.get("status") == "fail"]
    names = {n.get("name") for n in document.get("nodes") or []}
    down = {c.get("node") for c in failed if c.get("check") == "reach"}
    if failed and names and names <= down and all(c.get("check") == "reach" for c in failed):
        return ExitCode.UNREACHABLE
    return ExitCode.FAILED


# the whole run's bound when none is given: 300 s, and 10 s more for each node beyond 16 (the healthy 32-node
# lab's --smoke took 268 s of a flat 300 on 2 cores, 2026-11-27): every remote wait has its own bound, this
# one only stops a run that cannot end
DEFAULT_TIMEOUT_S = 300.0
TIMEOUT_PER_NODE_S = 10.0
TIMEOUT_FREE_NODES = 16


def default_timeout(nodes: int) -> float:
    """The whole run's bound for a cluster of NODES nodes, when --timeout gives none."""
    return DEFAULT_TIMEOUT_S + TIMEOUT_PER_NODE_S * max(0, nodes - TIMEOUT_FREE_NODES)


def verify(inventory: str | None, *, checks: tuple[str, ...] | list[str] = (), limit: str | None = None,
           smoke: bool = False, extra_vars: list[str] | None = None, timeout: float | None = None,
           on_event: Callable[[dict[str, Any]], None] | None = None, baseline: str | None = None,
           save_baseline: bool = False, full: bool = False, become_password: str | None = None,
           ansible_args: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the checks and return the document; VerifyError for usage/inventory problems,
    TimeoutError when the run passed its limit (timeout None: default_timeout of the nodes the run
    finds). become_password: the sudo password of the login user."""
    try:
        inv = ansible.resolve_inventory(inventory)
    except ansible.AnsibleError as exc:
        raise VerifyError(str(exc)) from exc
    selected = select_checks(list(checks), smoke or save_baseline)
    where = baseline_path(inv, baseline)
    if save_baseline and where is None:
        raise VerifyError(f"{inventory} is a host list: give --baseline FILE to keep the baseline in")
    argv, env = build_command(inv, checks=selected, limit=limit, extra_vars=extra_vars, baseline=where,
                              save_baseline=save_baseline, full=full, args=ansible_args)
    run = ansible.run_playbook(argv, env, timeout=default_timeout if timeout is None else timeout,
                               on_event=on_event, events=True, become_password=become_password)
    if run.timed_out:
        raise TimeoutError(f"verify did not finish within {run.timeout_s:.0f} s (ansible-playbook was stopped; "
                           f"a longer bound: --timeout SECONDS)")
    if not isinstance(run.report, dict):
        if run.no_hosts or "no hosts" in run.stderr.lower():
            where = f" matching --limit {limit}" if limit else ""
            raise VerifyError(f"inventory {inventory} has no host in group cluster{where}", _output(run))
        raise VerifyError(f"inventory {inventory}: {ansible.error_line(run.stderr)}", _output(run))
    doc = dict(run.report)
    head = {"schema": doc.pop("schema", 1), "ok": doc.pop("ok", False), "inventory": inventory or "",
            "limit": limit, "selected": doc.pop("selected", selected), "duration_s": round(run.duration_s, 2)}
    return {**head, **doc}


def _output(run: ansible.Run) -> str:
    """What ansible-playbook printed besides the callback's JSON lines: its own words when a run breaks."""
    lines = [ln for ln in run.stdout.splitlines() if not ln.startswith("{")]
    return "\n".join(lines + run.stderr.splitlines()).strip()


# ---------------------------------------------------------------- --local: this node only

def select_local(names: tuple[str, ...] | list[str]) -> list[str]:
    """The checks of --local (the catalog's node-local defaults when none is named); VerifyError for
    a check that needs other nodes or the controller (mesh, pdsh, env, smoke)."""
    cat = catalog()
    wanted = list(names) or list(cat.LOCAL_DEFAULT)
    not_local = [n for n in wanted if n in cat.BY_NAME and not cat.BY_NAME[n].local]
    if not_local:
        raise VerifyError(f"--local runs the checks of this node only; {', '.join(not_local)} need(s) other nodes "
                          f"or the controller (local checks: {', '.join(n for n in cat.PUBLIC if cat.BY_NAME[n].local)})")
    return select_checks(wanted, False)


def local_inventory(node: str, address: str | None = None, python: str | None = None) -> str:
    """A one-host inventory (YAML) for this node, reached with Ansible's local connection."""
    # ansible_become false: the checks run as whoever runs them (slurmd's root for the health check), with
    # no sudo (the plays' `become: true` is for nodes logged into as an admin)
    host = {"ansible_connection": "local", "ansible_python_interpreter": python or sys.executable,
            "cluster_address": address or node, "ansible_become": False}
    return json.dumps({"cluster": {"hosts": {node: host}}}, indent=1) + "\n"


def verify_local(node: str, *, address: str | None = None, checks: tuple[str, ...] | list[str] = (),
                 extra_vars: list[str] | None = None, timeout: float = 60,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 ansible_args: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Check the node this runs on, as NODE (its name in the cluster), with the same playbook, catalog
    and modules as `verify`, over Ansible's local connection: no controller, no inventory of the
    other nodes. Limits are measured through a login session (runuser -l, what pam_limits gives) when
    root runs it, else in the caller's own session; not over ssh; facts are not cached."""
    selected = select_local(checks)
    # root (slurmd's health check) measures a login session of the cluster user (runuser -l); anyone else
    # cannot, and measures the limits their own session runs under
    own = {"verify_local": True, "node_runtime_limits_source": "login" if os.geteuid() == 0 else "module"}
    with tempfile.TemporaryDirectory(prefix="provision-local-") as tmp:
        inv = Path(tmp) / "local.yml"
        inv.write_text(local_inventory(node, address))
        argv, env = build_command(str(inv), checks=selected, extra_vars=[json.dumps(own)] + list(extra_vars or []),
                                  args=ansible_args)
        env.update({"ANSIBLE_CACHE_PLUGIN": "memory", "ANSIBLE_LOCAL_TEMP": str(Path(tmp) / "local"),
                    "ANSIBLE_REMOTE_TEMP": str(Path(tmp) / "remote")})
        run = ansible.run_playbook(argv, env, timeout=timeout, on_event=on_event, events=True)
    if run.timed_out:
        raise TimeoutError(f"the checks did not finish within {timeout:.0f} s (ansible-playbook was stopped)")
    if not isinstance(run.report, dict):
        raise VerifyError(f"verify --local on {node}: {ansible.error_line(run.stderr)}", _output(run))
    doc = dict(run.report)
    head = {"schema": doc.pop("schema", 1), "ok": doc.pop("ok", False), "inventory": "local", "limit": None,
            "selected": doc.pop("selected", selected), "duration_s": round(run.duration_s, 2), "local": node}
    return {**head, **doc}
