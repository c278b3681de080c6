"""Subcommands of `provision`, one module each (verify, bootstrap, launch, ...).

A module here that defines a click command or group named `command` is added to the CLI, so a
new subcommand needs no edit of cli.py.
"""

from __future__ import annotations

import importlib
import pkgutil

import click


def load_commands() -> list[click.Command]:
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        cmd = getattr(module, "command", None)
        if isinstance(cmd, click.Command):
            found.append(cmd)
    return found
