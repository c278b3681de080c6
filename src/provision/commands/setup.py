"""`provision setup`: the collections the roles use, and the lab's host packages."""

from __future__ import annotations

import click

from provision import lab as lab_core
from provision.app import Application


@click.command("setup")
@click.option("--lab/--no-lab", default=True, show_default=True,
              help="Also install what the local lab needs (podman, runc, debootstrap).")
def command(lab: bool) -> None:
    """Install the collections the roles use (and the lab's host packages)."""
    from provision import deps

    app = Application()
    with app.guard():
        names = deps.ensure_collections(log=app.info)
        app.info(f"installed collections: {', '.join(names)}" if names else "collections: all present")
        if lab:
            done = lab_core.setup_host(log=app.info)
            app.info("; ".join(done) if done else "lab host packages: all present")
