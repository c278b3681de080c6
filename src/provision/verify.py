"""`provision verify`: run playbooks/verify.yml read-only and turn its results into one document.

The checks themselves are the collection's modules (one implementation each, shared with the
roles); this module only runs ansible-playbook, follows its progress, and builds the stable JSON
document described in the README ("provision verify --json").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision import paths

SCHEMA_VERSION = 1
STATUSES = ("pass", "fail", "warn", "skip")

# --check NAME -> what it covers. Each name is a check of playbooks/verify.yml's verify_checks task
# or a task of its own there (a unit test keeps the two in step); "reach" always runs.
CHECKS: dict[str, str] = {
    "reach": "node reachable from the controller",
    "sshd": "sshd listening on the cluster port (sshd_port)",
    "ports": "rendezvous and cluster ports free or held by the expected process",
    "mesh": "SSH mesh N x N including self (BatchMode, real host keys); ~/.ssh modes sshd accepts",
    "pdsh": "pdsh present and reaching every node",
    "env": "the ~/.bashrc env block seen by non-interactive ssh",
    "gcc": "GCC >= gcc_min_version",
    "gpu": "GPU / driver / CUDA toolkit consistency",
    "versions": "python / torch / CUDA / NCCL versions equal across nodes; DeepSpeed ops built for this torch",
    "nccl": "NCCL interface exists, is up and reaches every peer; IB HCAs active; node names resolve to their nodes",
    "runtime": "/dev/shm, memlock, nofile, ssh lands on the right node",
    "smoke": "all-reduce smoke test across all nodes (only with --smoke)",
}
ALWAYS = ("reach",)
CHECK_TITLES = {"reach": "node reachable", "sshd": "sshd listening", "ports": "ports free",
                "versions": "python_env", "runtime": "node runtime", "landing": "landing"}


class VerifyError(Exception):
    """A usage or inventory problem (exit code 2), told in one line."""


@dataclass
class Run:
    """What ansible-playbook gave back."""

    raw: dict[str, Any] | None
    rc: int
    stderr: str
    duration_s: float
    timed_out: bool = False
    no_hosts: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------- running the playbook

def resolve_inventory(inventory: str | None) -> str:
    if not inventory:
        raise VerifyError("no inventory: give -i PATH (e.g. -i inventory/lab/)")
    if "," in inventory and not os.path.exists(inventory):
        return inventory  # an Ansible host list such as "node1,node2,"
    path = Path(inventory).expanduser()
    if not path.exists():
        raise VerifyError(f"inventory {inventory} does not exist")
    return str(path.resolve())


def select_checks(names: tuple[str, ...] | list[str], smoke: bool) -> list[str]:
    """The check names to run, in CHECKS order; raises VerifyError on an unknown name."""
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise VerifyError(f"unknown check {', '.join(unknown)}; known: {', '.join(CHECKS)}")
    wanted = set(names) if names else set(CHECKS) - {"smoke"}
    if smoke:
        wanted.add("smoke")
    wanted.update(ALWAYS)
    return [n for n in CHECKS if n in wanted]


def build_command(inventory: str, *, checks: list[str], limit: str | None = None,
                  extra_vars: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """argv and environment for ansible-playbook on playbooks/verify.yml."""
    root = paths.content_root()
    playbook = root / "playbooks" / "verify.yml"
    argv = [_ansible_playbook(), str(playbook), "-i", inventory]
    if limit:
        argv += ["--limit", limit]
    argv += ["-e", json.dumps({"verify_fail_on_error": False, "verify_smoke": "smoke" in checks,
                               "verify_select": [n for n in checks if n not in ALWAYS]})]
    for ev in extra_vars or []:
        argv += ["-e", ev]
    env = paths.ansible_env({
        "ANSIBLE_STDOUT_CALLBACK": "provision.cluster.verify_events",
        # replaces the profile_tasks timing callback of ansible.cfg: stdout carries JSON lines only
        "ANSIBLE_CALLBACKS_ENABLED": "provision.cluster.verify_events",
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
        "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
    })
    return argv, env


def _ansible_playbook() -> str:
    import shutil
    import sys

    local = Path(sys.executable).parent / "ansible-playbook"
    return str(local) if local.exists() else (shutil.which("ansible-playbook") or "ansible-playbook")


def run_playbook(argv: list[str], env: dict[str, str], *, timeout: float = 300,
                 on_event: Callable[[dict[str, Any]], None] | None = None) -> Run:
    """Run ansible-playbook with the verify_events callback, following its JSON lines."""
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as err:
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                    cwd=str(paths.content_root()), start_new_session=True)
        except OSError as exc:
            raise VerifyError(f"cannot run {argv[0]}: {exc}") from exc
        raw = None
        no_hosts = False
        events: list[dict[str, Any]] = []
        timed_out = False
        deadline = start + timeout

        def _kill(*_a):
            nonlocal timed_out
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

        import threading

        timer = threading.Timer(max(0.0, deadline - time.monotonic()), _kill)
        timer.daemon = True
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                kind = event.get("event")
                if kind == "report":
                    raw = event.get("report")
                    continue
                if kind == "no_hosts":
                    no_hosts = True
                events.append(event)
                if on_event:
                    on_event(event)
            rc = proc.wait()
        finally:
            timer.cancel()
        err.seek(0)
        stderr = err.read()
    return Run(raw=raw, rc=rc, stderr=stderr, duration_s=time.monotonic() - start,
               timed_out=timed_out, no_hosts=no_hosts, events=events)


def error_line(stderr: str) -> str:
    """The first error Ansible printed, as one line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    if "<<< caused by >>>" in lines[:-1]:  # ansible-core 2.19 puts the real cause after this marker
        cause = lines[lines.index("<<< caused by >>>") + 1]
        first = next((ln for ln in lines if ln.startswith(("[ERROR]:", "ERROR!"))), "")
        if "inventory" in first.lower() or "inventory" in cause.lower():
            return cause
    for ln in lines:
        for prefix in ("[ERROR]:", "ERROR!"):
            if ln.startswith(prefix):
                return ln[len(prefix):].strip()
    for ln in lines:
        if not ln.startswith("[WARNING]"):
            return ln
    return lines[-1] if lines else "ansible-playbook gave no result"


# ---------------------------------------------------------------- the document

def _first_line(text: Any) -> str:
    text = "" if text is None else str(text)
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line.removeprefix("Task failed: ")


def _check(node: str, check: str, status: str, detail: str = "", fix: str = "") -> dict[str, str]:
    if status not in STATUSES:
        status = "fail"
    return {"node": node, "check": check, "status": status, "detail": _first_line(detail),
            "fix": _first_line(fix)}


def _unreachable_fix(node: str, entry: dict[str, Any]) -> str:
    conn = str(entry.get("connection") or "ssh")
    host = entry.get("host") or node
    if conn.endswith("podman") or conn.endswith("docker"):
        return f"start the container: {conn.rsplit('.', 1)[-1]} start {host}"
    port = f"-p {entry['port']} " if entry.get("port") else ""
    user = f"{entry['user']}@" if entry.get("user") else ""
    return (f"bring {node} up and make `ssh {port}{user}{host} true` work from here "
            f"(sshd down? ansible-playbook site.yml --tags sshd --limit {node})")


def _module_checks(node: str, name: str, result: dict[str, Any]) -> list[dict[str, str]]:
    """The checks one registered task result carries (the cross-role contract), or one failure."""
    title = CHECK_TITLES.get(name, name)
    if result.get("skipped"):
        return []
    if result.get("unreachable"):
        return [_check(node, title, "fail", result.get("msg") or "unreachable",
                       f"make {node} reachable and re-run")]
    found: list[dict[str, Any]] = []
    if isinstance(result.get("checks"), list):
        found = [c for c in result["checks"] if isinstance(c, dict)]
    elif isinstance(result.get("check"), dict):
        found = [result["check"]]
    elif isinstance(result.get("check"), str):
        found = [result]
    if not found and name in ADAPTERS and not result.get("failed"):
        found = ADAPTERS[name](node, result)
    if found:
        out = [_check(node, c.get("check") or title, c.get("status", "fail"), c.get("detail", ""),
                      c.get("fix", "")) for c in found]
        if name == "nccl" and result.get("in_effect"):
            out = [_nccl_in_effect(node, str(result.get("socket_ifname") or "?"), c) for c in out]
        rename = RENAME.get(name)
        return [rename(node, c) for c in out] if rename else out
    if result.get("failed"):
        msg = result.get("msg") or result.get("module_stderr") or "the check failed"
        return [_check(node, title, "fail", msg, f"see `provision verify --check {name} -v`")]
    return []


def _nccl_in_effect(node: str, ifname: str, c: dict[str, str]) -> dict[str, str]:
    """The NCCL check of the interface the env block exports (not the one nccl_net chose): say so."""
    if c["status"] != "fail":
        return c
    detail = c["detail"].replace(f"nccl_net_socket_ifname={ifname}: ", "")
    return {**c, "detail": f"NCCL_SOCKET_IFNAME={ifname} from ~/.bashrc (what non-interactive ssh gets): {detail}",
            "fix": f"the env block exports another interface than nccl_net chose: "
                   f"ansible-playbook site.yml --tags shell_env --limit {node} rewrites it; or {c['fix']}"}


def _facts(result: dict[str, Any], key: str) -> dict[str, Any]:
    return (result.get("ansible_facts") or {}).get(key) or {}


def _gcc(node: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    """gcc_facts sets gcc_toolchain_facts (its decision: meets_min); it has no check of its own."""
    f = _facts(result, "gcc_toolchain_facts")
    if not f:
        return []
    found = f"GCC {f['version']} at {f.get('path')}" if f.get("version") else "no GCC found"
    if f.get("meets_min"):
        return [{"check": "gcc", "status": "pass", "detail": f"{found} >= {f.get('min_version')}"}]
    return [{"check": "gcc", "status": "fail", "detail": f"{found}, need >= {f.get('min_version')}",
             "fix": f"ansible-playbook site.yml --tags gcc_toolchain --limit {node} "
                    f"(gcc_toolchain_min_version={f.get('min_version')})"}]


def _gpu(node: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    """gpu_facts: a node without GPUs is skipped; else the GPUs, driver and toolkit found."""
    f = _facts(result, "gpu_facts")
    if not f:
        return []
    if not f.get("gpu_count"):
        return [{"check": "gpu", "status": "skip", "detail": f.get("reason") or "no GPU"}]
    names = sorted({g.get("name", "?") for g in f.get("gpus") or []})
    detail = (f"{f['gpu_count']} x {', '.join(names)}, driver {f.get('driver_version')} "
              f"(CUDA <= {f.get('driver_cuda_version')}), toolkit {f.get('cuda_home') or 'none'}")
    plan = result.get("plan") or {}
    if plan.get("action") == "refuse":
        return [{"check": "gpu", "status": "fail", "detail": plan.get("reason") or detail,
                 "fix": "set cuda_toolkit_version to a release the driver supports, or upgrade the driver"}]
    return [{"check": "gpu", "status": "pass", "detail": detail}]


def _pdsh(node: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    """pdsh_config returns no check when pdsh is missing, or (check mode) when its files would change."""
    fix = f"ansible-playbook site.yml --tags pdsh --limit {node}"
    if result.get("found") is False:
        return [{"check": "pdsh", "status": "fail", "detail": "pdsh is not installed",
                 "fix": f"{fix} (or install the pdsh package)"}]
    if result.get("changed"):
        return [{"check": "pdsh", "status": "fail",
                 "detail": "the pdsh hosts file or rcmd_default does not match the inventory", "fix": fix}]
    return []


ADAPTERS: dict[str, Callable[[str, dict[str, Any]], list[dict[str, Any]]]] = {
    "gcc": _gcc, "gpu": _gpu, "pdsh": _pdsh}


def _rename_sshd(node: str, c: dict[str, str]) -> dict[str, str]:
    fix = c["fix"]
    if c["status"] == "fail":
        fix = f"{fix}; the sshd role does it: ansible-playbook site.yml --tags sshd --limit {node}"
    return {**c, "check": f"sshd listening ({c['check']})", "fix": fix}


RENAME: dict[str, Callable[[str, dict[str, str]], dict[str, str]]] = {
    "sshd": _rename_sshd,
    "ports": lambda node, c: {**c, "check": f"{c['check']} free"},
}


def _compare_checks(compare: dict[str, Any] | None, order: list[str], nodes: dict[str, Any]
                    ) -> list[dict[str, str]]:
    """versions_compare ran once for all nodes: one "versions equal" cell per compared node."""
    if not isinstance(compare, dict) or compare.get("skipped") or not compare.get("check"):
        return []
    check = compare["check"]
    odd = set(compare.get("differing_hosts") or [])
    out = []
    for node in order:
        res = (nodes.get(node) or {}).get("results", {}).get("versions") or {}
        if not _facts(res, "python_env_versions"):
            continue
        if check.get("status") == "fail" and node in odd:
            out.append(_check(node, "versions equal", "fail", check.get("detail", ""), check.get("fix", "")))
        else:
            out.append(_check(node, "versions equal", "pass", "same as the other nodes"))
    return out


def _mesh(raw_nodes: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """N x N: matrix[src][dst] = {"ok", "error" (class), "detail"} from each node's ssh_mesh_check row."""
    matrix: dict[str, dict[str, dict[str, Any]]] = {}
    for src in order:
        res = raw_nodes.get(src, {}).get("results", {}).get("mesh")
        if not isinstance(res, dict) or not isinstance(res.get("row"), list):
            continue
        matrix[src] = {str(cell.get("target")): {"ok": bool(cell.get("ok")), "error": cell.get("error") or "",
                                                 "detail": _first_line(cell.get("detail"))}
                       for cell in res["row"] if isinstance(cell, dict)}
    return {"ran": bool(matrix), "nodes": [n for n in order if n in matrix], "matrix": matrix}


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, bool):
        out[prefix] = "yes" if value else "no"
    else:
        out[prefix] = "-" if value is None else str(value)


def _versions(raw_nodes: dict[str, Any], order: list[str], compare: Any = None) -> dict[str, Any]:
    """versions[node][field] (python_versions + gpu_facts) and the fields that differ."""
    table: dict[str, dict[str, str]] = {}
    for node in order:
        results = raw_nodes.get(node, {}).get("results", {})
        values: dict[str, str] = {}
        pyv = _facts(results.get("versions") or {}, "python_env_versions")
        if pyv:
            _flatten("", pyv, values)
        gpu = _facts(results.get("gpu") or {}, "gpu_facts")
        if gpu:
            values["gpu.count"] = str(gpu.get("gpu_count", 0))
            values["gpu.driver"] = str(gpu.get("driver_version") or "-")
            values["gpu.driver_cuda"] = str(gpu.get("driver_cuda_version") or "-")
            values["gpu.cuda_home"] = str(gpu.get("cuda_home") or "-")
        if values:
            table[node] = values
    fields: list[str] = []
    for values in table.values():
        fields += [k for k in values if k not in fields]
    differing = [f for f in fields if len({table[n].get(f, "-") for n in table}) > 1]
    return {"ran": bool(table), "fields": fields, "nodes": table, "differing": differing,
            "differing_nodes": list((compare or {}).get("differing_hosts") or [])
            if isinstance(compare, dict) else []}


def _allreduce(raw: dict[str, Any], order: list[str]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The allreduce_smoke report (rows, busbw, failures...) and its checks, on the master node."""
    result = raw.get("allreduce")
    error = raw.get("allreduce_error")
    if not isinstance(result, dict) and not error:
        return {"ran": False}, []
    master = order[0] if order else "cluster"
    if not isinstance(result, dict):
        return {"ran": True, "status": "fail"}, [_check(master, "allreduce", "fail", error,
                                                        "see the allreduce_smoke role's output (-v)")]
    checks = [_check(master, f"allreduce {c.get('check', '')}".strip(), c.get("status", "fail"),
                     c.get("detail", ""), c.get("fix", ""))
              for c in (result.get("failures") or []) + (result.get("warnings") or [])]
    if not checks:
        busbw = result.get("busbw_gbps")
        checks = [_check(master, "allreduce", "pass",
                         f"{result.get('backend')} over {result.get('world_size')} ranks, sum "
                         f"{'correct' if result.get('correct') else 'not verified'}, busbw {busbw} GB/s")]
    return {"ran": True, **result}, checks


def build_document(raw: dict[str, Any], *, selected: list[str], inventory: str = "",
                   limit: str | None = None, duration_s: float | None = None) -> dict[str, Any]:
    """The stable `provision verify --json` document from the playbook's raw results."""
    order = list(raw.get("hosts") or [])
    raw_nodes = raw.get("nodes") or {}
    nodes: list[dict[str, Any]] = []
    checks: list[dict[str, str]] = []
    for node in order:
        entry = raw_nodes.get(node) or {}
        address = str(entry.get("address") or node)
        results = entry.get("results") or {}
        reach = results.get("reach") or {}
        reachable = bool(reach) and not reach.get("unreachable") and not reach.get("failed")
        nodes.append({"name": node, "address": address, "reachable": reachable})
        if not reachable:
            detail = reach.get("msg") if reach else "no result from this node"
            checks.append(_check(node, CHECK_TITLES["reach"], "fail", detail,
                                 _unreachable_fix(node, entry)))
            continue
        checks.append(_check(node, CHECK_TITLES["reach"], "pass", f"{address} answers"))
        for name, result in results.items():
            wanted = name == "node" or name in selected or (name == "landing" and "runtime" in selected)
            if wanted and name not in ALWAYS and isinstance(result, dict):
                checks.extend(_module_checks(node, name, result))
    compare = raw.get("compare")
    if "versions" in selected:
        checks.extend(_compare_checks(compare, order, raw_nodes))
    versions = _versions(raw_nodes, order, compare)
    allreduce, smoke_checks = _allreduce(raw, order)
    checks.extend(smoke_checks)
    ok = all(c["status"] != "fail" for c in checks)
    summary = {s: sum(1 for c in checks if c["status"] == s) for s in STATUSES}
    return {
        "schema": SCHEMA_VERSION,
        "ok": ok,
        "inventory": inventory,
        "limit": limit,
        "selected": selected,
        "duration_s": None if duration_s is None else round(duration_s, 2),
        "summary": summary,
        "nodes": nodes,
        "checks": checks,
        "mesh": _mesh(raw_nodes, order),
        "versions": versions,
        "allreduce": allreduce,
    }


def exit_code(document: dict[str, Any]) -> int:
    return 0 if document.get("ok") else 1


def verify(inventory: str | None, *, checks: tuple[str, ...] | list[str] = (), limit: str | None = None,
           smoke: bool = False, extra_vars: list[str] | None = None, timeout: float = 300,
           on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the checks and return the document; raises VerifyError for usage/inventory problems."""
    inv = resolve_inventory(inventory)
    selected = select_checks(list(checks), smoke)
    argv, env = build_command(inv, checks=selected, limit=limit, extra_vars=extra_vars)
    run = run_playbook(argv, env, timeout=timeout, on_event=on_event)
    if run.timed_out:
        raise TimeoutError(f"verify did not finish within {timeout:.0f} s (ansible-playbook was stopped)")
    if run.raw is None:
        if run.no_hosts or "no hosts" in run.stderr.lower():
            where = f" matching --limit {limit}" if limit else ""
            raise VerifyError(f"inventory {inventory} has no host in group cluster{where}")
        raise VerifyError(f"inventory {inventory}: {error_line(run.stderr)}")
    return build_document(run.raw, selected=selected, inventory=inventory or "", limit=limit,
                          duration_s=run.duration_s)
