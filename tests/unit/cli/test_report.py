"""`provision report` (src/provision/report.py, src/provision/commands/report.py): one self-contained HTML
page from a verify document and the saved baselines, opened in a real headless browser (Debian's
chromium, through the DevTools protocol: tests/unit/browser.py): it renders, its plots have data, its
script works, nothing is fetched and nothing is logged as an error; screenshots go to tests/output/.
Bad input is one line and exit 2, and leaves no file behind."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from unit.browser import Browser, find_browser
from unit.synthetic_verify import RECORDED, recorded, synthetic_document, synthetic_baselines

import helpers  # noqa: F401
from helpers import cannot_run
from provision import report
from provision.cli import cli

OUTPUT = Path(__file__).resolve().parents[2] / "output"
LAB_DOC = RECORDED / "smoke-3nodes-slow-link.json"
LAB_BASELINE = RECORDED / "baseline-3nodes.json"


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags(page: str) -> list[tuple[str, dict]]:
    p = Tags()
    p.feed(page)
    return p.tags


def assert_self_contained(page: str) -> None:
    for tag, attrs in tags(page):
        assert tag not in ("link", "iframe", "img", "object", "embed"), tag
        if tag == "script":
            assert "src" not in attrs
        for key in ("src", "href"):
            value = attrs.get(key) or ""
            assert not value or value.startswith("#"), (tag, key, value)
    assert not re.search(r"url\(|@import|https?://", re.sub(r"<footer>.*?</footer>", "", page)), "a reference outside the page"


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """32 synthetic nodes (two down, two with a small /dev/shm, one slow link) and a directory of three
    saved baselines of them (9 runs over 9 days)."""
    doc = synthetic_document(32, down=(3, 31), shm_small=(2, 17), slow_link=15)
    folder = tmp_path_factory.mktemp("baselines")
    for i, b in enumerate(synthetic_baselines(doc, files=3, runs=3)):
        (folder / f"baseline-{i}.json").write_text(json.dumps(b))
    path = tmp_path_factory.mktemp("doc") / "verify.json"
    path.write_text(json.dumps(doc))
    return path, folder, doc


def test_page_from_the_recorded_lab_run_has_every_section_and_nothing_outside_it():
    page, doc, warnings = report.build(str(LAB_DOC), baselines=[str(LAB_BASELINE)])
    assert warnings == []
    assert_self_contained(page)
    ids = {a.get("id") for _t, a in tags(page)}
    assert {"nodes", "checks", "allreduce", "links", "history", "busbw-plot", "heatmap", "history-plot",
            "node-table", "check-table", "allreduce-table", "slow-links"} <= ids
    slow = doc["allreduce"]["slow_links"]
    assert slow and page.count('class="cell slow"') == len(slow)
    assert page.count('<circle class="pt run"') == len(doc["allreduce"]["rows"])
    saved = json.loads(LAB_BASELINE.read_text())
    assert page.count('<circle class="pt base"') == len(saved["rows"])
    assert page.count('<circle class="pt h0"') == len(saved["samples"])
    for c in doc["checks"]:
        if c["status"] == "fail" and c.get("fix"):
            assert report.esc(c["fix"]) in page


def test_cli_writes_the_page_and_the_machine_outputs(big, tmp_path):
    path, folder, _doc = big
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", str(path), "-o", str(out), "--baseline", str(folder),
                                      "--junit", str(tmp_path / "r.xml"), "--prometheus", str(tmp_path / "r.prom")])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("<!DOCTYPE html>") and (tmp_path / "r.xml").exists() and (tmp_path / "r.prom").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.prom", "r.xml"]   # no temporary left
    # default name: next to the document
    result = CliRunner().invoke(cli, ["report", str(path), "--baseline", str(folder)])
    assert result.exit_code == 0 and path.with_suffix(".html").exists()


def bad(args: list[str], tmp_path: Path, *, stdin: str | None = None) -> str:
    out = tmp_path / "out.html"
    out.write_text("the page before\n")
    result = CliRunner().invoke(cli, ["report", *args, "-o", str(out)], input=stdin)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert out.read_text() == "the page before\n"                          # untouched
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []   # no temporary left
    return lines[0]


def test_a_truncated_document_is_one_line(tmp_path):
    cut = tmp_path / "cut.json"
    cut.write_text(LAB_DOC.read_text()[:5000])
    line = bad([str(cut)], tmp_path)
    assert "ends early: a truncated file?" in line and "cut.json" in line


def test_a_foreign_json_is_one_line(tmp_path):
    foreign = tmp_path / "package.json"
    foreign.write_text(json.dumps({"name": "left-pad", "version": "1.3.0"}))
    assert "not a provision verify --json document" in bad([str(foreign)], tmp_path)
    assert "not a provision verify --json document (found list" in bad(["-"], tmp_path, stdin="[1, 2]")
    # a baseline given as the document
    assert "not a provision verify --json document" in bad([str(LAB_BASELINE)], tmp_path)
    # a document given as the baseline
    assert "not a provision baseline" in bad([str(LAB_DOC), "--baseline", str(LAB_DOC)], tmp_path)
    garbage = tmp_path / "garbage.json"
    garbage.write_text("<html>not json</html>")
    assert "not valid JSON" in bad([str(garbage)], tmp_path)
    newer = tmp_path / "v2.json"
    newer.write_text(json.dumps(dict(recorded("unreachable.json"), schema=2)))
    assert "schema 2; this provision reads schema 1" in bad([str(newer)], tmp_path)


def test_an_empty_baseline_directory_is_one_line(tmp_path):
    empty = tmp_path / "baselines"
    empty.mkdir()
    assert "no baseline (*.json) in this directory" in bad([str(LAB_DOC), "--baseline", str(empty)], tmp_path)
    assert "no such file or directory" in bad([str(LAB_DOC), "--baseline", str(tmp_path / "nope")], tmp_path)


def test_a_baseline_of_another_node_set_is_one_line_or_left_out_of_a_directory(big, tmp_path):
    _path, folder, _doc = big
    line = bad([str(LAB_DOC), "--baseline", str(next(folder.glob("*.json")))], tmp_path)
    assert "a baseline of another node set (gpu-node-[0001-0032] then, node[1-3] in the document)" in line
    assert "no baseline of this document's 3 nodes in it (3 of another node set)" in bad(
        [str(LAB_DOC), "--baseline", str(folder)], tmp_path)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "a.json").write_text(LAB_BASELINE.read_text())
    (mixed / "b.json").write_text(next(folder.glob("*.json")).read_text())
    result = CliRunner().invoke(cli, ["report", str(LAB_DOC), "--baseline", str(mixed), "-o", str(tmp_path / "m.html")])
    assert result.exit_code == 0, result.output
    assert "b.json: left out: a baseline of another node set" in result.stderr
    assert "a.json" not in result.stderr


def test_reading_the_document_from_stdin_needs_an_output_name(tmp_path):
    result = CliRunner().invoke(cli, ["report", "-"], input=LAB_DOC.read_text())
    assert result.exit_code == 2 and "give the page's name with -o FILE" in result.stderr


def test_1000_nodes_page_stays_a_page(tmp_path):
    doc = synthetic_document(1000, down=(5,), slow_link=500)
    page = report.render_html(doc)
    assert len(page) < 12_000_000, len(page)
    assert page.count('class="cell') == len(doc["allreduce"]["links"])
    assert_self_contained(page)


def browser_or_skip():
    if find_browser() is None:
        cannot_run("no chromium here: scripts/setup.sh installs Debian's chromium for this test")


def check_in_browser(b: Browser, page: Path, shot: Path, doc: dict) -> dict:
    seen = b.open(page)
    assert seen["errors"] == [], seen["errors"]
    assert all(u.startswith(("file:", "data:", "about:")) for u in seen["requests"]), seen["requests"]
    assert b.evaluate("document.body.dataset.ready") == "1"
    counts = b.evaluate("""JSON.stringify({
        busbw: document.querySelectorAll('#busbw-plot circle.pt').length,
        busbw_h: document.querySelector('#busbw-plot') ? document.querySelector('#busbw-plot').getBoundingClientRect().height : 0,
        heat: document.querySelectorAll('#heatmap rect.cell').length,
        slow: document.querySelectorAll('#heatmap rect.cell.slow').length,
        history: document.querySelectorAll('#history-plot circle.pt.h0').length,
        rows: document.querySelectorAll('#node-table tbody tr').length,
        grid: document.querySelectorAll('#check-table td.c').length,
        fails: document.querySelectorAll('#check-table td.c.fail').length})""")
    counts = json.loads(counts)
    smoke = doc["allreduce"]
    assert counts["busbw"] >= len(smoke["rows"]) > 0 and counts["busbw_h"] > 100
    assert counts["heat"] == len([lk for lk in smoke["links"] if lk.get("ring_gbps") or lk.get("one_way_gbps")])
    assert counts["slow"] == len(smoke["slow_links"]) > 0
    assert counts["history"] > 0
    assert counts["rows"] == len(doc["nodes"]) and counts["fails"] > 0
    # the script: a click on a failing cell shows its cause and fix
    detail = b.evaluate("""(function(){ var td = document.querySelector('#check-table td.c.fail');
        td.click(); var p = document.getElementById('cell-detail'); return p.hidden ? '' : p.textContent; })()""")
    assert "FAIL" in detail
    b.screenshot(shot)
    assert shot.stat().st_size > 20_000
    return counts


def test_the_page_renders_in_a_real_browser_with_data_in_its_plots(big, tmp_path):
    browser_or_skip()
    path, folder, doc = big
    lab_page = tmp_path / "lab.html"
    lab_page.write_text(report.build(str(LAB_DOC), baselines=[str(LAB_BASELINE)])[0])
    big_page = tmp_path / "big.html"
    big_page.write_text(report.build(str(path), baselines=[str(folder)])[0])
    with Browser(timeout=90) as b:
        check_in_browser(b, lab_page, OUTPUT / "report-lab-3nodes.png", recorded("smoke-3nodes-slow-link.json"))
        counts = check_in_browser(b, big_page, OUTPUT / "report-synthetic-32nodes.png", doc)
        assert counts["history"] == 9
        # the filter: with 'only nodes with a problem' ticked, the healthy rows go
        shown = b.evaluate("""(function(){ var box = document.querySelector('.only-problems[data-target=node-table]');
            box.checked = true; box.dispatchEvent(new Event('change'));
            return document.querySelectorAll('#node-table tbody tr:not([hidden])').length; })()""")
        problems = sum(1 for r in report.views.node_summaries(doc) if r["state"] != "ok")
        assert shown == problems
        # a run whose all-reduce could not start (node2 stopped): the page says so, and nothing breaks
        stopped = tmp_path / "stopped.html"
        stopped.write_text(report.build(str(RECORDED / "smoke-3nodes-node2-stopped.json"),
                                        baselines=[str(LAB_BASELINE)])[0])
        seen = b.open(stopped)
        assert seen["errors"] == [] and b.evaluate("document.body.dataset.ready") == "1"
        assert b.evaluate("document.querySelector('#node-table tr[data-node=node2] td.state').textContent") == "down"
        assert b.evaluate("document.querySelectorAll('#busbw-plot circle.pt.run').length") == 0   # no run to draw
        assert b.evaluate("document.querySelectorAll('#busbw-plot circle.pt.base').length") == 4  # the baseline still


# ---------------------------------------------------------------- the table's columns at fleet size

def _column_key_by_alternation(check: str, nodes: list[str]) -> str:
    """The column key as it was first written (an alternation of every name, longest first, which re
    tries name after name at every position): the reference the trie must agree with."""
    alt = "|".join(re.escape(n) for n in sorted(nodes, key=len, reverse=True))
    return re.sub(r"(?<!\w)(?:%s)(?!\w)" % alt, "*", check)


def test_column_keys_agree_with_the_alternation_of_every_name():
    import random

    rng = random.Random(32)
    sets = [["node1", "node10", "node1-a", "n", "a.b", "a", "b+c", "x y", "10.0.0.1", "10.0.0.10", "é1"],
            ["ab", "abc", "abd", "a"], ["", "n1"], [""], [f"gpu-node-{i:04d}" for i in range(1, 300)]]
    for nodes in sets:
        ids = ["ssh node1->node10", "link gpu-node-0003->gpu-node-0004 baseline", "abcd abc ab a", "b+c.b+cc",
               "x y z", "10.0.0.1:2222 10.0.0.10", "é1 é12", "", "gcc", "node1-a->node1-ab"]
        letters = "".join(set("".join(nodes))) + " .->_:"
        ids += ["".join(rng.choice(letters) for _ in range(rng.randint(0, 16))) for _ in range(400)]
        ids += [rng.choice(nodes) + rng.choice(["", "->", " ", ".", "_"]) + rng.choice(nodes) for _ in range(400)]
        report._PATTERNS.clear()
        for check in ids:
            assert report.column_key(check, nodes) == _column_key_by_alternation(check, nodes), (nodes, check)
