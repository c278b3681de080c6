"""The per-node view of `provision verify` (src/provision/views.py) at 8, 32 and 1,000 nodes, 80 and 200
columns, on synthetic documents (tests/unit/synthetic_verify.py): nothing cut to "…", every failing node
on its own row with its failing checks intact, the healthy ones folded, the grid only when it fits or is
asked for; the JSON and the exit code are those of the document."""

from __future__ import annotations

import io
import json
import re

import pytest
from click.testing import CliRunner
from rich.console import Console
from unit.synthetic_verify import recorded, synthetic_document

import helpers  # noqa: F401
from provision import ansible, views
from provision.cli import cli
from provision.commands.verify import render
from provision.terminal import Terminal

SIZES = (8, 32, 1000)
WIDTHS = (80, 200)


def faults(n: int) -> dict:
    """Faults spread over the cluster: two nodes down, a small /dev/shm on two, one slow link."""
    return {"down": (3, n - 1), "shm_small": (2, n // 2 + 1), "slow_link": n // 2 + 2}


@pytest.fixture(scope="module")
def docs():
    return {n: synthetic_document(n, **faults(n)) for n in SIZES}


def rendered(doc: dict, width: int, grid: bool | None = None) -> str:
    term = Terminal()
    term.out = Console(file=io.StringIO(), width=width, soft_wrap=True, highlight=False, color_system=None)
    render(term, doc, grid=grid)
    return term.out.file.getvalue()


def failing_nodes(doc: dict) -> set[str]:
    return {r["node"] for r in views.node_summaries(doc) if r["state"] in ("down", "fail", "slow")}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("n", SIZES)
def test_per_node_view_names_every_failing_node_and_cuts_nothing(docs, n, width):
    doc = docs[n]
    out = rendered(doc, width)
    assert "…" not in out and "..." not in out.replace("... and", "")
    lines = [ln.plain for ln in views.per_node_lines(doc, width)]
    assert all(len(ln) <= width for ln in lines), [ln for ln in lines if len(ln) > width]
    bad = failing_nodes(doc)
    assert len(bad) >= 5
    rows = {ln.split()[0]: ln for ln in lines[1:] if ln and not ln.startswith(" ")}
    for node in bad:
        assert node in rows, node                     # its own row, its name whole
    summaries = {r["node"]: r for r in views.node_summaries(doc)}
    text = "\n".join(lines)
    for node in bad:
        for check in summaries[node]["failing"]:       # each failing check id whole, on one line
            assert any(check in ln for ln in lines), (node, check)
    # the stopped nodes are down with the cause; the slow link's sender is named
    for i in faults(n)["down"]:
        assert re.search(rf"^gpu-node-{i:04d}\s+down\s+node reachable", text, re.M)
    slow = f"gpu-node-{faults(n)['slow_link']:04d}"
    assert re.search(rf"^{slow}\s+(fail|slow)\s", text, re.M)
    # the healthy nodes are one folded line (plus its wrapped node list), not a row each
    ok = [r["node"] for r in summaries.values() if r["state"] == "ok"]
    if len(ok) > views.FOLD_AT:
        assert f"{len(ok)} nodes, every check passed" in text
        assert not any(ln.startswith(ok[0] + " ") for ln in lines)
    assert len(lines) < 12 * len(bad) + 40


@pytest.mark.parametrize("width", WIDTHS)
def test_1000_nodes_is_a_page_not_a_book(docs, width):
    out = rendered(docs[1000], width)
    assert len(out.splitlines()) < 250, len(out.splitlines())
    assert "checks (* = one cell per peer" not in out          # the grid does not fit: not drawn
    assert re.search(r"ssh mesh: \d+ of \d+ logins between 998 nodes worked", out)
    assert "versions (1000 nodes" not in out or "(all)" in out


def test_grid_is_drawn_when_it_fits_and_in_slices_when_asked(docs):
    small = recorded("healthy-2nodes.json") | {"inventory": "x", "limit": None, "duration_s": 1.0}
    assert "checks (* = one cell per peer, the worst shown)" in rendered(small, 80)
    assert "checks (* = one cell" not in rendered(small, 80, grid=False)
    out = rendered(docs[32], 80, grid=True)
    assert "…" not in out
    titles = re.findall(r"nodes (\d+)-(\d+) of 32", out)
    assert len(titles) > 1 and titles[0][0] == "1" and titles[-1][1] == "32"
    for i in range(1, 33):                                # every node a column header, whole
        assert f"gpu-node-{i:04d}" in out
    assert "checks (* = one cell" not in rendered(docs[32], 80)
    assert "checks (* = one cell per peer, the worst shown)" in rendered(docs[8], 200)


def test_hostlist_wrapping_never_splits_a_name():
    names = [f"gpu-node-{i:04d}" for i in range(1, 1001) if i % 7]
    for width in (20, 37, 80):
        parts = views._pack_joined(views.hostlist_tokens(names), width)
        joined = "".join(parts)
        assert joined == views.hostlist(names)
        assert all(len(p) <= width for p in parts)
        assert all(not re.search(r"\d$", p) or p.endswith(("]", ",")) or p == parts[-1] for p in parts)


def test_failures_of_one_kind_on_many_nodes_are_told_once(docs):
    doc = synthetic_document(40, shm_small=tuple(range(1, 41)), smoke=False)
    groups = [g for g in views.failure_groups(doc) if g["check"] == "shm"]
    assert len(groups) == 1 and len(groups[0]["nodes"]) == 40
    out = rendered(doc, 120)
    assert "FAIL shm on 40 nodes: gpu-node-[0001-0040]" in out
    assert out.count("cause: /dev/shm is 64 MiB") == 1


def fake_run(report):
    def run(argv, env, *, timeout=300, on_event=None, events=False, become_password=None):
        return ansible.Run(rc=0, stdout="", stderr="", duration_s=0.5, report=report)
    return run


def test_cli_same_json_and_exit_code_at_scale(monkeypatch, tmp_path, docs):
    report = {k: v for k, v in docs[32].items() if k not in ("inventory", "limit", "duration_s")}
    monkeypatch.setattr(ansible, "run_playbook", fake_run(report))
    as_json = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--json"])
    assert as_json.exit_code == 1
    doc = json.loads(as_json.stdout)
    assert doc["checks"] == docs[32]["checks"] and doc["allreduce"] == docs[32]["allreduce"]
    human = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path)], env={"COLUMNS": "120"})
    assert human.exit_code == 1 and "…" not in human.stdout
    assert "gpu-node-0003  down" in human.stdout and "verify: FAILED: 32 node(s)" in human.stdout
    grid = CliRunner().invoke(cli, ["verify", "-i", str(tmp_path), "--grid"], env={"COLUMNS": "120"})
    assert grid.exit_code == 1 and "nodes 1-" in grid.stdout


@pytest.mark.parametrize("name, bad", [("smoke-3nodes-slow-link.json", {"node2", "node3"}),
                                       ("smoke-3nodes-node2-stopped.json", {"node1", "node2"})])
@pytest.mark.parametrize("width", WIDTHS)
def test_recorded_lab_runs(name, bad, width):
    """The recorded 3-node lab runs (a link limited to a tenth; node2 stopped): the nodes the faults
    touched are rows with their checks, nothing is cut."""
    doc = recorded(name)
    out = rendered(doc, width)
    assert "…" not in out
    rows = {r["node"]: r for r in views.node_summaries(doc)}
    assert {n for n, r in rows.items() if r["state"] != "ok"} == bad
    for node in bad:
        assert re.search(rf"^{node}\s+(fail|down|slow)\s", out, re.M), node
    if "stopped" in name:
        assert rows["node2"]["state"] == "down" and rows["node2"]["cause"].startswith("node2 does not answer at")
    else:
        assert "link node3->node1 baseline" in rows["node3"]["failing"]
        assert "slow link node3->node1" in rows["node3"]["failing"]


# ---------------------------------------------------------------- the grid's row keys at fleet size

def _row_key_by_scan(check: str, nodes: list[str]) -> str:
    """The row key as it was first written (every name tried on every id, N x N at fleet size): the
    reference the prepared RowKeys must agree with."""
    key = check
    stripped = True
    while stripped:
        stripped = False
        for node in sorted(nodes, key=len, reverse=True):
            if key.endswith(node) and key != node:
                key = key[: -len(node)].rstrip(" .->:/")
                stripped = True
    return f"{key} *" if key != check and key else check


def test_row_keys_agree_with_the_scan_of_every_name():
    import random

    rng = random.Random(32)
    tricky = ["node1", "node10", "node11", "1", "11", "e1", "de1", "a.b", "b", "node1->node1", "x"]
    for nodes in (tricky, tricky + ["node1"], ["ab", "cd"], ["cd", "ab"], ["a12", "12"], ["12", "a12"], ["", "n1"],
                  [f"gpu-node-{i:04d}" for i in range(1, 40)]):
        ids = ["ssh node1->node10", "nccl_net.reach.node11", "pdsh from node1", "x-cd-ab", "x-a12", "gcc", "node1",
               "node1->node1", "ssh gpu-node-0001->gpu-node-0039", "link gpu-node-0003->gpu-node-0004 baseline",
               "e1", "de1", "a.b.b", "", "shm"]
        letters = "".join(set("".join(nodes))) + " .->"
        ids += ["".join(rng.choice(letters) for _ in range(rng.randint(0, 12))) for _ in range(300)]
        ids += [rng.choice(nodes) + rng.choice(["", "->", " ", "."]) + rng.choice(nodes) for _ in range(300)]
        keys = views.RowKeys(nodes)
        for check in ids:
            assert keys(check) == _row_key_by_scan(check, nodes) == views.row_key(check, nodes), (nodes, check)


class _Counted(str):
    """A node name that counts how often its length is asked for (sorting the names by length asks once
    per name): how many names a view looked at."""

    looked = 0

    def __len__(self):
        _Counted.looked += 1
        return str.__len__(self)


def test_grid_and_failure_groups_look_at_each_name_a_few_times_not_once_per_check():
    doc = synthetic_document(200, **faults(200))
    for n in doc["nodes"]:
        n["name"] = _Counted(n["name"])
    _Counted.looked = 0
    rows, _slices = views.grid_slices(doc, 200)
    groups = views.failure_groups(doc)
    # the scan of every name for every check id looked at 200 names for each of the ~4,000 checks
    assert len(doc["checks"]) > 3000 and _Counted.looked <= 6 * 200
    assert set(rows) >= {"ssh *", "nccl_net.reach *", "pdsh from *"}
    shm = [g for g in groups if g["check"] == "shm"]
    assert len(shm) == 1 and shm[0]["nodes"] == ["gpu-node-0002", "gpu-node-0101"]


@pytest.mark.parametrize("width", WIDTHS)
def test_recorded_32_node_lab_run_with_a_node_stopped_and_a_slow_link(width):
    """The 32-node lab of the closing run (node17 stopped, node9's link at 50 mbit): one row per node the
    faults touched, the stopped node `down`, the slow one `slow` with the pair search's figures, the other
    28 folded into one hostlist; no empty all-reduce table where the all-reduce did not run."""
    doc = recorded("smoke-32nodes-node17-stopped-node9-slow.json")
    out = rendered(doc, width)
    assert "…" not in out
    rows = {r["node"]: r for r in views.node_summaries(doc)}
    assert {n: r["state"] for n, r in rows.items() if r["state"] != "ok"} == {
        "node1": "fail", "node16": "fail", "node9": "slow", "node17": "down"}
    assert rows["node9"]["cause"].startswith("node9: every pair it was in was bad: with node10 0.006 GB/s")
    assert re.search(r"^\s+ok\s+28 nodes, every check passed or skipped:\s*$", out, re.M)
    assert "node[2-8,10-15,18-32]" in out
    assert "all-reduce: no figures (world_size: 0, nodes: 32, correct: False): it did not run on every node" in out
    assert "size (B)" not in out                                       # no table without rows
    assert ".json: no all-node figures in this run to compare" in " ".join(out.split())
    flat = " ".join(out.split())                                       # lines wrapped at the width
    assert "bad node search, round 1: 15 pairs, 14 without a named node; node9+node10 ok 0.006 GB/s" in flat


def test_a_round_where_every_pair_timed_out_is_one_outcome_once():
    doc = recorded("smoke-32nodes-node17-stopped-node9-slow.json")
    rnd = doc["allreduce"]["isolation"]["rounds"][0]
    rnd["outcome"] = ["timeout (no result within the time limit)"] * len(rnd["pairs"])
    out = rendered(doc, 200)
    line = next(ln for ln in out.splitlines() if ln.startswith("bad node search, round 1:"))
    assert line.count("timeout (no result within the time limit)") == 1 and "node1+node2, node3+node4" in line, line
