"""The `provision` command line: a thin layer over the core modules and Ansible."""

from __future__ import annotations

import sys

import click

from provision import __version__
from provision.terminal import EXIT_USAGE


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provision")
def cli() -> None:
    """Provision N Linux machines for multi-node PyTorch training, and prove it.

    \b
    provision lab up           bring up a local container lab (podman)
    ansible-playbook site.yml -i inventory/lab/
    provision verify -i inventory/lab/
    """


def _register_subcommands() -> None:
    from provision.commands import load_commands

    for cmd in load_commands():
        cli.add_command(cmd)


_register_subcommands()


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(EXIT_USAGE)
    except click.exceptions.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(0)
