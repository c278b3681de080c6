"""`provision report`: one self-contained HTML page (and, when asked, JUnit XML and Prometheus text)
from a `provision verify --json` document and the cluster's saved baselines."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from provision import export
from provision import report as core
from provision.app import Application


@click.command("report")
@click.argument("document", metavar="VERIFY_JSON")
@click.option("-o", "--output", metavar="FILE",
              help="The HTML file to write [default: VERIFY_JSON with .html; required when VERIFY_JSON is -].")
@click.option("--baseline", "baselines", multiple=True, metavar="FILE|DIR",
              help="A saved baseline, or a directory of them (every *.json), for the busbw history and the "
                   "comparison (repeatable) [default: the baseline the verify run used, when it is there].")
@click.option("--title", metavar="TEXT", help="The page's title [default: provision verify report].")
@click.option("--junit", "junit", metavar="FILE", help="Also write the checks as JUnit XML (one testcase per check and node).")
@click.option("--prometheus", "prometheus", metavar="FILE",
              help="Also write the Prometheus text format (node_exporter textfile collector), atomically.")
@click.option("--no-html", is_flag=True, help="Write only --junit/--prometheus, no HTML page.")
def command(document: str, output: str | None, baselines: tuple[str, ...], title: str | None, junit: str | None,
            prometheus: str | None, no_html: bool) -> None:
    """Make one HTML page from a verify document; exit 0 written, 2 bad input (one line).

    \b
    provision verify -i inventory/lab/ --smoke --json > verify.json
    provision report verify.json                          # -> verify.html, no network needed to view it
    provision report verify.json -o cluster.html --baseline inventory/lab/.provision/
    provision report verify.json --no-html --junit verify.xml --prometheus provision.prom
    """
    app = Application()
    if document == "-" and not output and not no_html:
        app.usage("reading the document from standard input: give the page's name with -o FILE")
    if no_html and not (junit or prometheus):
        app.usage("--no-html writes nothing without --junit FILE or --prometheus FILE")
    target = output or str(Path(document).with_suffix(".html"))
    if not no_html and Path(target).resolve() == Path(document).resolve():
        app.usage(f"-o {target} is the document itself: give another name")
    stdin_text = sys.stdin.read() if document == "-" else None
    try:
        page, doc, warnings = core.build(document, baselines=list(baselines), title=title, stdin_text=stdin_text)
        for w in warnings:
            app.warn(w)
        written = []
        if junit:
            written.append(export.write_atomic(junit, export.junit_xml(doc)))
        if prometheus:
            written.append(export.write_atomic(prometheus, export.prometheus_text(doc)))
        if not no_html:
            written.append(export.write_atomic(target, page))
    except (core.ReportError, export.OutputError) as exc:
        app.usage(f"report: {exc}")
    for path in written:
        app.info(f"wrote {path}")
    app.done(True)
