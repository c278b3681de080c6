"""The `provision` command line: a thin layer over the core modules and Ansible."""

from __future__ import annotations

import sys

import click

from provision import __version__
from provision.exits import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE


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


def run(argv: list[str] | None = None) -> int:
    """One command line -> its exit status (provision.exits): a usage error is 2 (with --json, one JSON
    document on stdout says so too), Ctrl-C 3."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        cli.main(args, prog_name="provision", standalone_mode=False)
    except click.exceptions.Abort:  # Ctrl-C (click turns KeyboardInterrupt and EOF into Abort)
        click.echo("provision: interrupted", err=True)
        return EXIT_INTERRUPTED
    except click.exceptions.ClickException as exc:
        exc.show()
        if "--json" in args:
            from provision.app import error_document
            from provision.terminal import Terminal

            Terminal(json_mode=True).emit_json(error_document(exc.format_message(), EXIT_USAGE))
        return EXIT_USAGE
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else 1)
    return EXIT_OK


def main() -> None:
    sys.exit(run())
