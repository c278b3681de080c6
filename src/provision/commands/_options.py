"""Options several commands share: one definition each, so that a flag means the same on every command
(docs/cli.md). The test tests/unit/cli/test_rules.py walks the command tree and holds every command to them.

- `-i/--inventory PATH` (or $PROVISION_INVENTORY) on every command that targets a cluster; never a default:
  without it such a command is a usage error (exit 2).
- Ansible's own flags, with ansible-playbook's meaning, on every command that runs ansible-playbook:
  `-l/--limit`, `-e/--extra-vars`, `-f/--forks`, `-u/--user`, `-v/--verbose` (repeatable),
  `-T/--connect-timeout` and `-K/--ask-become-pass` (with `--become-password-file`).
- `--timeout SECONDS` bounds the whole run; `-T/--connect-timeout SECONDS` each connection.
"""

from __future__ import annotations

import click

INVENTORY_ENV = "PROVISION_INVENTORY"


def inventory_option(func):
    return click.option("-i", "--inventory", "inventory", envvar=INVENTORY_ENV, metavar="PATH", default=None,
                        help="Ansible inventory (file, directory or host list), e.g. inventory/lab/ "
                             f"[or ${INVENTORY_ENV}]; required.")(func)


def limit_option(func):
    return click.option("-l", "--limit", "limit", metavar="PATTERN", default=None,
                        help="Only these hosts (an Ansible host pattern, as ansible-playbook --limit).")(func)


def extra_vars_option(func):
    return click.option("-e", "--extra-vars", "extra_vars", multiple=True, metavar="VARS",
                        help="Extra variables, as ansible-playbook -e (KEY=VALUE, JSON or @FILE; repeatable).")(func)


def forks_option(default: int | None = None):
    def deco(func):
        return click.option("-f", "--forks", "forks", type=click.IntRange(1, 1024), default=default,
                            show_default=default is not None,
                            help="Hosts handled at once (as ansible-playbook --forks)"
                                 + ("." if default is not None else " [default: ansible.cfg's]."))(func)
    return deco


def user_option(func):
    return click.option("-u", "--user", "user", metavar="USER", default=None,
                        help="Remote user (as ansible-playbook --user) [default: the inventory's ansible_user].")(func)


def verbose_option(func):
    return click.option("-v", "--verbose", "verbose", count=True,
                        help="More output: passed to ansible-playbook (-vvv for more), and its output shown "
                             "when a run breaks.")(func)


def connect_timeout_option(default: float | None = None):
    def deco(func):
        return click.option("-T", "--connect-timeout", "connect_timeout", type=click.FloatRange(1, 3600),
                            default=default, show_default=default is not None, metavar="SECONDS",
                            help="Seconds allowed for each connection (as ansible-playbook --timeout)"
                                 + ("." if default is not None else " [default: ansible.cfg's]."))(func)
    return deco


def become_options(func):
    """-K/--ask-become-pass and --become-password-file, as ansible-playbook has them: the sudo password
    of the login user (ansible_user with ansible_become), passed to every ansible-playbook the command runs."""
    func = click.option("--become-password-file", "become_password_file", metavar="FILE", default=None,
                        help="Read the become (sudo) password from the first line of FILE (yours, mode 0600).")(func)
    func = click.option("-K", "--ask-become-pass", "ask_become_pass", is_flag=True,
                        help="Ask for the become (sudo) password on the terminal (not echoed).")(func)
    return func


def ansible_options(func):
    """Every flag of a command that runs ansible-playbook (applied in this order, shown in this order)."""
    for deco in reversed((inventory_option, limit_option, extra_vars_option, forks_option(), user_option,
                          connect_timeout_option(), verbose_option, become_options)):
        func = deco(func)
    func.__provision_runs_ansible__ = True
    return func


def ansible_args(forks: int | None = None, user: str | None = None, verbose: int = 0,
                 connect_timeout: float | None = None) -> list[str]:
    """The arguments of ansible-playbook for -f, -u, -v and -T (limit, -e and the become password are
    passed by the caller, which has its own use for them)."""
    args: list[str] = []
    if forks:
        args += ["--forks", str(forks)]
    if user:
        args += ["--user", user]
    if connect_timeout:
        args += ["--timeout", str(int(round(connect_timeout)))]
    if verbose:
        args.append("-" + "v" * min(verbose, 6))
    return args


def deprecated(old: str, new: str) -> None:
    click.echo(f"warning: {old} is deprecated; use {new}", err=True)
