"""`provision bootstrap`: first contact with password-only machines (see provision.bootstrap)."""

from __future__ import annotations

import getpass
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from provision import bootstrap as core
from provision.commands._options import connect_timeout_option, deprecated, forks_option, inventory_option, limit_option, user_option
from provision.exits import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE
from provision.terminal import Terminal


class _View:
    """Progress bar per phase on a terminal (stderr), result lines above it."""

    def __init__(self, term: Terminal) -> None:
        self.term = term
        self.console: Console = term.err
        self.progress: Progress | None = None
        self.task = None
        self.marks: list[tuple[str, float]] = []  # (phase, start) for the timings in --json

    def phase(self, name: str, total: int) -> None:
        self.marks.append((name, time.monotonic()))
        self.stop()
        if not self.console.is_terminal or total == 0:
            return
        self.progress = Progress(SpinnerColumn(), TextColumn(f"[bold]{name}[/bold]"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=self.console,
                                 transient=True)
        self.task = self.progress.add_task(name, total=total)
        self.progress.start()

    def advance(self) -> None:
        if self.progress is not None:
            self.progress.advance(self.task)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def line(self, text: str, style: str = "") -> None:
        if self.term.json_mode:
            return
        target = self.progress.console if self.progress is not None else self.term.out
        target.print(text, style=style or None, markup=False, highlight=False)


def _result_line(r: core.HostResult) -> tuple[str, str]:
    if r.same_as:
        return (f"{'ok    ' if r.ok else 'FAILED'} {r.host} ({r.where}): the same machine as {r.same_as}, "
                "handled under that name", "green" if r.ok else "red")
    if not r.ok:
        return f"FAILED {r.host} ({r.where}): {r.cause}; fix: {r.fix}", "red"
    key = f"host key {r.host_key} {r.host_key_status}"
    done = "; ".join(r.changes) if r.changes else "authorized_keys unchanged"
    py = r.python if r.python_ok else f"{r.python} (fix: {r.python_fix})"
    return f"ok     {r.host} ({r.where}): {key}; {done}; {py}", ("green" if r.python_ok else "yellow")


def _confirm_factory(view: _View):
    def confirm(target: core.Target, label: str, fp: str) -> bool:
        view.stop()
        return click.confirm(f"{target.name} ({target.address}:{target.port}) presents the {label} host key "
                             f"{fp}. Is that the host's key?", default=False, err=True)
    return confirm


def _controller_keys(targets: list[core.Target], key_file: str | None, term: Terminal
                     ) -> dict[str | None, core.ControllerKey]:
    """One controller key per distinct key file (--key overrides the inventory's for every host)."""
    if key_file is not None:
        for target in targets:
            target.key_file = None
    keys = {}
    for path in sorted({t.key_file for t in targets}, key=lambda p: p or ""):
        keys[path] = core.ensure_controller_key(path or key_file, log=term.info)
    for key in keys.values():
        if key.note:
            term.warn(key.note)
    return keys


def _check_password_options(ask_pass: bool, password_file: str | None) -> None:
    if ask_pass and password_file:
        raise click.UsageError("give --ask-pass or --password-file, not both")
    if ask_pass and not sys.stdin.isatty():
        raise click.UsageError("--ask-pass needs a terminal; use --password-file FILE (mode 0600)")


def _password(ask_pass: bool, password_file: str | None, users: list[str]) -> str | None:
    if password_file:
        return core.read_password_file(password_file)
    if ask_pass:
        password = getpass.getpass(f"SSH password for {', '.join(users)}: ")
        if not password:
            raise click.UsageError("empty password")
        return password
    return None


def _ssh_vars(targets: list[core.Target], known_hosts: Path, inv_dir: Path | None, view: _View) -> str | None:
    """Write group_vars/all/provision_ssh.yml when missing and some host needs it (an inventory whose
    hosts already name this known_hosts with checking on, like the lab's, gets nothing); warn where
    Ansible would not use it."""
    written = None
    needed = any(core.ssh_args_problem(t, known_hosts, inv_dir) for t in targets)
    if inv_dir is not None and needed:
        path = inv_dir / core.SSH_VARS_RELPATH
        blocked = path.parent.exists() and not path.parent.is_dir()
        if not path.exists() and not blocked:
            core.write_atomic(path, core.ssh_vars_text(known_hosts, inv_dir))
            written = str(path)
    want = f'-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes'
    problems: dict[str, list[str]] = {}
    for target in targets:
        if written and not target.ssh_common_args:
            continue  # the new file supplies it
        problem = core.ssh_args_problem(target, known_hosts, inv_dir)
        if problem:
            problems.setdefault(problem, []).append(target.name)
    for problem, hosts in problems.items():
        view.term.warn(f"{', '.join(hosts)}: {problem}; set ansible_ssh_common_args: \"{want}\" "
                       "for them in the inventory")
    return written


@click.command("bootstrap")
@inventory_option
@limit_option
@user_option
@click.option("-k", "--ask-pass", is_flag=True, help="Ask for the SSH password on the terminal.")
@click.option("--password-file", type=click.Path(dir_okay=False), default=None,
              help="Read the SSH password from the first line of FILE (mode 0600).")
@click.option("--accept-host-keys", is_flag=True,
              help="Accept (and record) unknown host keys without asking. Changed keys are still refused.")
@click.option("--replace-host-key", "replace_host_keys", multiple=True, metavar="SHA256:...",
              help="A reinstalled host's new key fingerprint, as its console shows it (ssh-keygen -lf "
                   "/etc/ssh/ssh_host_ed25519_key.pub): a changed key with this fingerprint replaces the recorded "
                   "one. Repeatable; any other changed key is still refused.")
@click.option("--key", "key_file", type=click.Path(dir_okay=False), default=None,
              help="Controller private key whose .pub to install [default: ~/.ssh/id_ed25519, made if missing].")
@click.option("--known-hosts", type=click.Path(dir_okay=False), default=None,
              help="known_hosts to check and record keys in [default: INVENTORY_DIR/.provision/known_hosts].")
@forks_option(core.DEFAULT_FORKS)
@connect_timeout_option(core.DEFAULT_TIMEOUT)
@click.option("--timeout", "timeout_old", type=click.FloatRange(1, 600), default=None, hidden=True,
              help="Deprecated spelling of -T/--connect-timeout (--timeout bounds a whole run elsewhere).")
@click.option("--json", "json_mode", is_flag=True, help="Print the results as one JSON document.")
def command(inventory: str | None, limit: str | None, user: str | None, ask_pass: bool, password_file: str | None,
            accept_host_keys: bool, replace_host_keys: tuple[str, ...], key_file: str | None,
            known_hosts: str | None, forks: int, connect_timeout: float, timeout_old: float | None,
            json_mode: bool) -> None:
    """First contact: record host keys, install this machine's SSH key, check python3.

    \b
    For every SSH host of the inventory, in parallel: show the host key's fingerprint and ask
    to trust it when it is new (--accept-host-keys: trust without asking), refuse it when it
    changed; log in with the password once and append the controller's public key to the
    user's ~/.ssh/authorized_keys. Afterwards Ansible reaches the hosts with the key and
    with host-key checking on, through INVENTORY_DIR/.provision/known_hosts (see
    group_vars/all/provision_ssh.yml, written when missing). Re-running changes nothing.

    \b
    -T/--connect-timeout bounds the TCP connect, the SSH banner, authentication and each remote command.

    \b
    Exit status: 0 all hosts done, 1 some host failed (one line each), 2 usage or inventory error,
    3 the only failures are hosts that could not be reached.
    """
    term = Terminal(json_mode=json_mode)
    t0 = time.monotonic()
    timeout = connect_timeout
    if timeout_old is not None:
        deprecated("bootstrap --timeout", "bootstrap -T/--connect-timeout")
        timeout = min(timeout_old, 600)
    if not inventory:
        raise click.UsageError("no inventory: give -i PATH (e.g. -i inventory/prod/) or set PROVISION_INVENTORY")
    try:
        _check_password_options(ask_pass, password_file)
        if password_file:
            core.read_password_file(password_file)  # a loose file is refused before anything else
        inv_dir = core.inventory_dir(inventory)
        if inv_dir is None and "," not in inventory:
            raise click.UsageError(f"inventory {inventory} does not exist")
        if known_hosts:
            kh_path = Path(known_hosts).expanduser().resolve()
        elif inv_dir is not None:
            kh_path = inv_dir / core.KNOWN_HOSTS_REL
        else:
            raise click.UsageError(f"{inventory} is a host list, not a file or directory: give --known-hosts FILE")
        data = core.load_inventory(inventory, limit)
        targets, skipped = core.targets_from_inventory(data, user=user)
        if not targets:
            why = "; ".join(f"{h}: {w}" for h, w in skipped) or "the inventory has no hosts"
            raise click.UsageError(f"no SSH host to bootstrap in {inventory} ({why})")
        keys = _controller_keys(targets, key_file, term)
        password = _password(ask_pass, password_file, sorted({t.user for t in targets}))
    except core.BootstrapError as exc:
        raise click.UsageError(str(exc)) from exc

    view = _View(term)
    view.marks.append(("inventory", t0))
    for host, why in skipped:
        view.line(f"skip   {host}: {why}", "dim")
    tty = sys.stdin.isatty() and term.err.is_terminal
    bad = [f for f in replace_host_keys if not f.startswith("SHA256:")]
    if bad:
        raise click.UsageError(f"--replace-host-key wants a SHA256:... fingerprint, got {bad[0]!r}")
    opts = core.Options(known_hosts=kh_path, password=password, accept_host_keys=accept_host_keys,
                        replace_host_keys=frozenset(replace_host_keys),
                        confirm=_confirm_factory(view) if tty and not json_mode else None,
                        forks=forks, timeout=timeout)

    def on_result(result: core.HostResult) -> None:
        text, style = _result_line(result)
        view.line(text, style)

    try:
        results = core.bootstrap(targets, keys, opts, on_phase=view.phase, on_progress=view.advance,
                                 on_result=on_result)
    finally:
        view.stop()
    view.marks.append(("end", time.monotonic()))
    phases = {name: round(view.marks[i + 1][1] - start, 3) for i, (name, start) in enumerate(view.marks[:-1])}
    written = _ssh_vars(targets, kh_path, inv_dir, view)
    failed = [r for r in results if not r.ok]
    changed = [r for r in results if r.ok and r.changed]
    seconds = time.monotonic() - t0
    if json_mode:
        term.emit_json({"inventory": inventory, "known_hosts": str(kh_path),
                        "controller_keys": sorted(str(k.private) + ".pub" for k in keys.values()),
                        "ssh_vars_written": written, "seconds": round(seconds, 3), "phases": phases,
                        "ok": len(results) - len(failed), "changed": len(changed), "failed": len(failed),
                        "hosts": [r.as_dict() for r in results],
                        "skipped": [{"host": h, "why": w} for h, w in skipped]})
    else:
        if written:
            term.info(f"wrote {written}: Ansible checks host keys against {kh_path}")
        term.info(f"bootstrap: {len(results) - len(failed)} ok ({len(changed)} changed), "
                  f"{len(failed)} failed, in {seconds:.1f} s; controller key "
                  f"{', '.join(sorted(str(k.private) + '.pub' for k in keys.values()))}; "
                  f"known_hosts {kh_path}")
        if not failed:
            term.info(f"next: ansible -i {inventory} all -m ping")
    sys.exit(exit_code(results))


def exit_code(results: list[core.HostResult]) -> int:
    """0 every host done; 3 the failures are all hosts that could not be reached; 1 otherwise."""
    failed = [r for r in results if not r.ok]
    if not failed:
        return EXIT_OK
    return EXIT_UNREACHABLE if all(r.cause.startswith(UNREACHABLE) for r in failed) else EXIT_FAILED


# the causes (provision.bootstrap) of a host that was never reached: no TCP connection, no SSH banner
UNREACHABLE = ("connection refused", "cannot resolve", "timeout: no answer", "cannot reach", "timeout: no SSH banner")
