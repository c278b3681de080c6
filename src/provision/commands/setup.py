"""`provision setup`: the collections the roles use; with --lab, what the local lab needs too."""

from __future__ import annotations

import click

from provision.app import Application


@click.command("setup")
@click.option("--lab/--no-lab", default=False, show_default=True,
              help="Also install what the local lab needs (as `provision lab setup`: its host packages, "
                   "their configuration and the collection that reaches its nodes).")
def command(lab: bool) -> None:
    """Install the collections the roles use (from the `ansible` wheel on PyPI: Galaxy may be unreachable)."""
    from provision import deps

    app = Application()
    with app.guard():
        names = deps.ensure_collections(log=app.info, lab=lab)
        app.info(f"installed collections: {', '.join(names)}" if names else "collections: all present")
        if lab:
            from provision import lab as lab_core

            done = lab_core.setup_host(log=app.info)
            app.info("; ".join(done) if done else "lab host packages: all present")
