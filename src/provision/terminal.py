"""One place for what the CLI prints: rich for people, plain JSON for machines."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from provision.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE  # noqa: F401

SCHEMA = 1  # the version of every --json document that does not carry its own


class Terminal:
    def __init__(self, *, json_mode: bool = False, quiet: bool = False) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        # human output goes to stderr when stdout carries JSON
        self.out = Console(stderr=json_mode, highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)

    def info(self, message: str) -> None:
        if not self.quiet:
            self.out.print(message, markup=False)

    def success(self, message: str) -> None:
        if not self.quiet:
            self.out.print(f"[green]{message}[/green]")

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]warning:[/yellow] {message}")

    def error(self, message: str) -> None:
        self.err.print(f"[red]error:[/red] {message}")

    def table(self, table: Table) -> None:
        self.out.print(table)

    def emit_json(self, document: Any) -> None:
        """The one JSON document of --json, on stdout; every document carries its `schema` version."""
        if isinstance(document, dict) and "schema" not in document:
            document = {"schema": SCHEMA, **document}
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")
        sys.stdout.flush()

    def status(self, message: str):
        """A spinner while something runs (no-op when not a tty)."""
        return self.err.status(message)


def make_table(title: str | None, columns: list[str]) -> Table:
    table = Table(title=title, show_lines=False, header_style="bold")
    for col in columns:
        table.add_column(col)
    return table
