"""`provision setup`: the collections the roles use, and the lab's host packages."""

from __future__ import annotations

import sys

import click

from provision import lab as lab_core
from provision.terminal import EXIT_FAILED, Terminal


@click.command("setup")
@click.option("--lab/--no-lab", default=True, show_default=True,
              help="Also install what the local lab needs (podman, runc, debootstrap).")
def command(lab: bool) -> None:
    """Install the collections the roles use (and the lab's host packages)."""
    from provision import deps

    term = Terminal()
    try:
        names = deps.ensure_collections(log=term.info)
        term.info(f"installed collections: {', '.join(names)}" if names
                  else "collections: all present")
        if lab:
            done = lab_core.setup_host(log=term.info)
            term.info("; ".join(done) if done else "lab host packages: all present")
    except (RuntimeError, lab_core.LabError) as exc:
        term.error(str(exc))
        sys.exit(EXIT_FAILED)
