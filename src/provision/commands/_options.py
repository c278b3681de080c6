"""Options several commands share."""

from __future__ import annotations

import click


def become_options(func):
    """-K/--ask-become-pass and --become-password-file, as ansible-playbook has them: the sudo password
    of the login user (ansible_user with ansible_become), passed to every ansible-playbook the command runs."""
    func = click.option("--become-password-file", "become_password_file", metavar="FILE", default=None,
                        help="Read the become (sudo) password from the first line of FILE (yours, mode 0600).")(func)
    func = click.option("-K", "--ask-become-pass", "ask_become_pass", is_flag=True,
                        help="Ask for the become (sudo) password on the terminal (not echoed).")(func)
    return func
