"""`provision site`: run the shipped site.yml (or one stage) with the shipped configuration.

For users who installed the package and never cloned the repository; from a checkout,
`ansible-playbook site.yml -i inventory/<name>/` does the same.
"""

from __future__ import annotations

import os

import click

from provision import ansible
from provision.app import Application


def playbook_argv(inventory: str, stage: str | None, extra: tuple[str, ...]) -> list[str]:
    return ansible.playbook_argv("site.yml" if stage is None else f"playbooks/{stage}.yml", inventory, args=extra)


@click.command("site", context_settings={"ignore_unknown_options": True})
@click.option("-i", "--inventory", required=True, help="Inventory file or directory.")
@click.option("--stage", type=click.Choice(ansible.collection_module("cluster_plan").STAGES), default=None,
              help="Run one stage only.")
@click.argument("ansible_args", nargs=-1, type=click.UNPROCESSED)
def command(inventory: str, stage: str | None, ansible_args: tuple[str, ...]) -> None:
    """Run site.yml (all stages, or --stage NAME) against an inventory.

    Arguments after the options go to ansible-playbook (e.g. --check --diff, --limit node2), the sudo
    password options among them: -K/--ask-become-pass (ansible-playbook asks, not echoed) or
    --become-password-file FILE.
    """
    app = Application()
    if not os.path.exists(inventory):
        app.usage(f"inventory {inventory} does not exist; fix: pass -i inventory/<name>/ "
                  "(see `provision lab up` for a local one)")
    argv = playbook_argv(inventory, stage, ansible_args)
    os.execve(argv[0], argv, ansible.environment())
