"""`provision site`: run the shipped site.yml (or one stage) with the shipped configuration.

For users who installed the package and never cloned the repository; from a checkout,
`ansible-playbook site.yml -i inventory/<name>/` does the same. Its exit status is provision's
(provision.exits): 0 ok, 1 a host failed, 2 usage, 3 a host unreachable, the run timed out or was interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess

import click

from provision import ansible
from provision.app import Application
from provision.commands._options import ansible_args, ansible_options
from provision.exits import ExitCode, from_ansible


def playbook_argv(inventory: str, stage: str | None, extra: tuple[str, ...] | list[str]) -> list[str]:
    return ansible.playbook_argv("site.yml" if stage is None else f"playbooks/{stage}.yml", inventory, args=extra)


@click.command("site", context_settings={"ignore_unknown_options": True})
@ansible_options
@click.option("--stage", type=click.Choice(ansible.collection_module("common.cluster_plan").STAGES), default=None,
              help="Run one stage only.")
@click.option("-C", "--check", "dry_run", is_flag=True,
              help="Ansible's dry run (ansible-playbook --check): change nothing, say what would change.")
@click.option("-D", "--diff", "diff", is_flag=True, help="Show the changes in files (ansible-playbook --diff).")
@click.option("--timeout", type=click.FloatRange(1), default=None, metavar="SECONDS",
              help="Stop the whole run after this many seconds (exit 3) [default: no bound].")
@click.argument("ansible_args_rest", nargs=-1, type=click.UNPROCESSED, metavar="[ANSIBLE-PLAYBOOK ARGS]...")
def command(inventory: str | None, limit: str | None, extra_vars: tuple[str, ...], forks: int | None,
            user: str | None, connect_timeout: float | None, verbose: int, ask_become_pass: bool,
            become_password_file: str | None, stage: str | None, dry_run: bool, diff: bool, timeout: float | None,
            ansible_args_rest: tuple[str, ...]) -> None:
    """Run site.yml (all stages, or --stage NAME) against an inventory.

    \b
    provision site -i inventory/prod/
    provision site -i inventory/prod/ --stage network -l node2 --check --diff
    provision site -i hosts.ini -u admin -K -f 20

    Further arguments go to ansible-playbook as they are (e.g. --tags, --skip-tags). Exit status:
    0 ok, 1 a host failed, 2 usage or inventory error, 3 a host unreachable, timed out or interrupted.
    """
    app = Application()
    try:
        inv = ansible.resolve_inventory(inventory)
        if become_password_file:  # yours, 0600, not a link: refused here before ansible-playbook reads it
            ansible.read_become_password_file(become_password_file)
    except ansible.AnsibleError as exc:
        app.usage(f"{exc}; fix: pass -i inventory/<name>/ (see `provision lab up` for a local one)"
                  if "inventory" in str(exc) else str(exc))
    extra = ansible_args(forks, user, verbose, connect_timeout)
    if limit:
        extra += ["--limit", limit]
    for ev in extra_vars:
        extra += ["-e", ev]
    if dry_run:
        extra.append("--check")
    if diff:
        extra.append("--diff")
    if ask_become_pass:
        extra.append("--ask-become-pass")  # ansible-playbook asks on this terminal itself
    elif become_password_file:
        extra += ["--become-password-file", become_password_file]
    with app.guard():
        argv = playbook_argv(inv, stage, extra + list(ansible_args_rest))
    app.exit(run(argv, ansible.environment(), timeout))


def run(argv: list[str], env: dict[str, str], timeout: float | None) -> ExitCode:
    """ansible-playbook in the foreground (this terminal), its status as provision's; bounded by timeout."""
    proc = subprocess.Popen(argv, env=env)
    try:
        return from_ansible(proc.wait(timeout=timeout))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # as Ctrl-C: ansible-playbook ends its workers
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        click.echo(f"provision site: stopped after {timeout:.0f} s (--timeout)", err=True)
        return ExitCode.INTERRUPTED
    except KeyboardInterrupt:  # the terminal's Ctrl-C reached ansible-playbook too
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        return ExitCode.INTERRUPTED
