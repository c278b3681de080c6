"""Everything the CLI asks of Ansible, in one place: finding its tools, the environment our content
needs, reading an inventory, running a playbook (following its events), and the one error line
that explains a failure. Every command (verify, launch, site, bootstrap, diagnose) goes through here.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision import paths


class AnsibleError(Exception):
    """Ansible could not do what was asked (an unusable inventory, a missing tool); one line."""


def tool(name: str) -> str:
    """An ansible-* executable: the one beside this Python (our venv) first, then PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if not found:
        raise AnsibleError(f"{name} is missing: pip install ansible-core (or `pip install provision`)")
    return found


# ansible.cfg's callbacks that keep working where a command sets its own (callbacks_enabled replaces the list):
# the collection's module payloads kept between runs (plugins/callback/payload_cache.py)
KEPT_CALLBACKS = ("provision.cluster.payload_cache",)


def callbacks(*names: str) -> str:
    """An ANSIBLE_CALLBACKS_ENABLED value: NAMES and the callbacks every run keeps."""
    return ",".join((*names, *KEPT_CALLBACKS))


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of ansible-* children: our ansible.cfg and collections first."""
    return paths.ansible_env(extra)


def collection_module(name: str):
    """A module of the collection (plugins/module_utils/GROUP/NAME.py, named "GROUP.NAME") imported into the
    CLI's process, so the CLI uses the very code the playbooks run (the check catalog, the document builder,
    diagnosis)."""
    where = str(paths.collections_dir())
    if where not in sys.path:
        sys.path.insert(0, where)
    return importlib.import_module(f"ansible_collections.provision.cluster.plugins.module_utils.{name}")


# ---------------------------------------------------------------- inventories

_PLUGIN_ERROR = re.compile(r"Failed to parse inventory with '[^']*' plugin: (.+)")


def error_line(stderr: str) -> str:
    """The first error Ansible printed, as one line (the inventory plugin's own words when it has them)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    plugin = [m.group(1).strip() for m in _PLUGIN_ERROR.finditer(stderr)
              if "not YAML inventory" not in m.group(1) and "Invalid host pattern" not in m.group(1)]
    if plugin:
        return plugin[0]
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
        if not ln.startswith(("[WARNING]", "Traceback", "  ")):
            return ln
    return lines[-1] if lines else "ansible gave no result"


def resolve_inventory(inventory: str | None) -> str:
    """An inventory path made absolute, or a host list ("a,b,") as it is; AnsibleError when missing."""
    if not inventory:
        raise AnsibleError("no inventory: give -i PATH (e.g. -i inventory/lab/)")
    if "," in inventory and not os.path.exists(inventory):
        return inventory
    path = Path(inventory).expanduser()
    if not path.exists():
        raise AnsibleError(f"inventory {inventory} does not exist")
    return str(path.resolve())


def read_inventory(inventory: str | None, limit: str | None = None, *, timeout: float = 120) -> dict[str, Any]:
    """`ansible-inventory --list` as JSON; AnsibleError with one line when the inventory is unusable."""
    # -v: the inventory plugins' own complaints are warnings only shown with it
    argv = [tool("ansible-inventory"), "--list", "-v"] + (["-i", inventory] if inventory else [])
    if limit:
        argv += ["--limit", limit]
    env = environment({"ANSIBLE_INVENTORY_UNPARSED_FAILED": "True", "ANSIBLE_NOCOLOR": "1"})
    where = inventory or "(ansible.cfg)"
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False,
                              stdin=subprocess.DEVNULL, cwd=str(paths.content_root()))
    except subprocess.TimeoutExpired as exc:
        raise AnsibleError(f"inventory {where}: ansible-inventory did not finish in {timeout:.0f} s") from exc
    if proc.returncode != 0 or "No inventory was parsed" in proc.stderr:
        raise AnsibleError(f"inventory {where}: {error_line(proc.stderr)} "
                           f"(all of it: ansible-inventory -i {where} --list)")
    out = proc.stdout
    try:
        return json.loads(out[out.find("{"):] if "{" in out else "{}")
    except ValueError as exc:
        raise AnsibleError(f"inventory {where}: ansible-inventory printed no JSON") from exc


def plain(value: Any) -> Any:
    """ansible-inventory >= 2.19 prints unsafe strings as {"__ansible_unsafe": "..."}: plain values."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def group_hosts(data: dict[str, Any], group: str) -> list[str]:
    """The hosts of GROUP (and its children, depth first) in inventory order."""
    out: list[str] = []
    seen: set[str] = set()

    def walk(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        entry = data.get(name) or {}
        for host in entry.get("hosts") or []:
            if host not in out:
                out.append(host)
        for child in entry.get("children") or []:
            walk(child)

    walk(group)
    return out


# ---------------------------------------------------------------- become (sudo) password

BECOME_PROMPT = "BECOME password"


def read_become_password_file(path: str) -> str:
    """The become password: the first line of PATH, a file of this user that others cannot read (opened
    once, checked on the open file: never a link); AnsibleError with the fix otherwise."""
    import stat as st

    try:
        fd = os.open(os.path.expanduser(path), os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise AnsibleError(f"--become-password-file {path}: {exc.strerror} (a link is not followed)") from exc
    with os.fdopen(fd, encoding="utf-8") as handle:
        info = os.fstat(handle.fileno())
        if not (st.S_ISREG(info.st_mode) or st.S_ISFIFO(info.st_mode)):
            raise AnsibleError(f"--become-password-file {path} is not a regular file")
        if info.st_uid != os.geteuid():
            raise AnsibleError(f"--become-password-file {path} belongs to uid {info.st_uid}, not to you; "
                               f"fix: chown {os.geteuid()} {path}")
        if st.S_IMODE(info.st_mode) & 0o077:
            raise AnsibleError(f"--become-password-file {path} has mode {st.S_IMODE(info.st_mode):04o}, readable by "
                               f"others; fix: chmod 600 {path}")
        password = handle.readline().rstrip("\r\n")
    if not password:
        raise AnsibleError(f"--become-password-file {path} is empty (its first line is the password)")
    return password


def become_password(ask: bool = False, password_file: str | None = None,
                    prompt: Callable[[str], str] | None = None) -> str | None:
    """The sudo (become) password a command passes to ansible-playbook: asked for on the terminal
    (-K/--ask-become-pass, never echoed) or read from --become-password-file; None for neither."""
    if ask and password_file:
        raise AnsibleError("-K/--ask-become-pass and --become-password-file: give one of them")
    if password_file:
        return read_become_password_file(password_file)
    if not ask:
        return None
    if prompt is None:
        import getpass

        prompt = getpass.getpass
    try:
        password = prompt(f"{BECOME_PROMPT}: ")
    except (EOFError, KeyboardInterrupt) as exc:
        raise AnsibleError("-K/--ask-become-pass: no password was entered") from exc
    if not password:
        raise AnsibleError("-K/--ask-become-pass: the password is empty")
    return password


# ---------------------------------------------------------------- playbooks

@dataclass
class Run:
    """What one ansible-playbook run gave back."""

    rc: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    timeout_s: float = 0.0      # the bound the run was held to (it may grow with the hosts: run_playbook)
    events: list[dict[str, Any]] = field(default_factory=list)
    report: Any = None          # the custom stat provision_verify (verify_events callback)
    no_hosts: bool = False


def playbook_argv(playbook: str, inventory: str | None = None, *, limit: str | None = None,
                  extra_vars: list[str] | None = None, args: list[str] | tuple[str, ...] = ()) -> list[str]:
    """argv of ansible-playbook on one of our playbooks (site.yml or playbooks/NAME.yml)."""
    path = paths.content_root() / playbook
    argv = [tool("ansible-playbook"), str(path)] + (["-i", inventory] if inventory else [])
    if limit:
        argv += ["--limit", limit]
    for ev in extra_vars or []:
        argv += ["-e", ev]
    return argv + list(args)


def run_playbook(argv: list[str], env: dict[str, str], *, timeout: float | Callable[[int], float],
                 on_event: Callable[[dict[str, Any]], None] | None = None, events: bool = False,
                 become_password: str | None = None) -> Run:
    """Run ansible-playbook, bounded by timeout (its whole process group is stopped then).

    events=True: stdout carries the provision.cluster.verify_events callback's JSON lines, followed
    as they come (on_event) and collected; the custom stat provision_verify becomes Run.report.
    timeout may be a function of the number of hosts the run has reported results for: the bound
    then grows as the run finds its hosts (a cluster of 64 nodes needs longer than one of 2), from
    timeout(0) at the start; Run.timeout_s is the bound that held at the end.
    become_password: handed to ansible-playbook the way it reads one (`--become-password-file -`: its
    standard input), never on a command line, in a file or in the environment.
    """
    start = time.monotonic()
    if become_password is not None:
        argv = list(argv) + ["--become-password-file", "-"]
    with tempfile.TemporaryFile(mode="w+") as err:
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                    cwd=str(paths.content_root()), start_new_session=True,
                                    stdin=subprocess.PIPE if become_password is not None else None)
        except OSError as exc:
            raise AnsibleError(f"cannot run {argv[0]}: {exc}") from exc
        if become_password is not None:
            assert proc.stdin is not None
            try:  # ansible-playbook reads its standard input to the end before anything else
                proc.stdin.write(become_password + "\n")
                proc.stdin.close()
            except BrokenPipeError:
                pass
        run = Run(rc=-1, stdout="", stderr="", duration_s=0.0)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

        bound = timeout if callable(timeout) else (lambda _hosts, t=float(timeout): t)
        hosts: set[str] = set()
        run.timeout_s = bound(0)

        def arm() -> threading.Timer:
            t = threading.Timer(max(0.0, start + run.timeout_s - time.monotonic()), kill)
            t.daemon = True
            t.start()
            return t

        timer = arm()
        chunks: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                chunks.append(line)
                if not events or not line.startswith("{"):
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                kind = event.get("event")
                if kind == "report":
                    run.report = event.get("report")
                    continue
                if kind == "no_hosts":
                    run.no_hosts = True
                if kind == "result" and event.get("host") and event["host"] not in hosts:
                    hosts.add(event["host"])
                    grown = bound(len(hosts))
                    if grown > run.timeout_s and not killed.is_set():
                        timer.cancel()
                        run.timeout_s = grown
                        timer = arm()
                run.events.append(event)
                if on_event:
                    on_event(event)
            run.rc = proc.wait()
        except BaseException:
            kill()  # interrupted (SIGTERM from slurmd, Ctrl-C): no ansible-playbook is left behind
            raise
        finally:
            timer.cancel()
        err.seek(0)
        run.stderr = err.read()
    run.stdout = "".join(chunks)
    run.duration_s = time.monotonic() - start
    run.timed_out = killed.is_set()
    return run


def events_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a run whose stdout is the verify_events callback's JSON lines only."""
    env = {
        "ANSIBLE_STDOUT_CALLBACK": "provision.cluster.verify_events",
        # replaces the profile_tasks timing callback of ansible.cfg: stdout carries JSON lines only
        "ANSIBLE_CALLBACKS_ENABLED": callbacks("provision.cluster.verify_events"),
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
        "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
    }
    env.update(extra or {})
    return environment(env)
