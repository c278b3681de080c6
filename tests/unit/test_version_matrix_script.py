"""scripts/version_matrix.py: its last line says how many cells its verdict rests on."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from helpers import REPO

spec = importlib.util.spec_from_file_location("version_matrix", REPO / "scripts" / "version_matrix.py")
matrix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(matrix)

def test_a_matrix_whose_cells_were_all_over_the_budget_ran_nothing():
    """CI gave the matrix a budget of 0 s for many runs and it printed "all ok in 0 s": sanity had not run,
    and its findings (pep8, pylint, non-empty module_utils __init__.py) piled up unseen."""
    line = matrix.summary_line(True, 0, 3, 0.4, Path("/tmp/m"))
    assert line == "version matrix: nothing run (0 cells run; 3 not run: over the budget) in 0 s (logs in /tmp/m)"


def test_the_verdict_counts_the_cells_that_ran():
    assert matrix.summary_line(True, 2, 1, 62, Path("/l")).startswith(
        "version matrix: all ok (2 cells run; 1 not run: over the budget) in 62 s")
    assert matrix.summary_line(False, 3, 1, 112, Path("/l")).startswith("version matrix: FAILED (3 cells run;")
    assert matrix.summary_line(True, 8, 0, 219, Path("/l")) == "version matrix: all ok (8 cells run) in 219 s (logs in /l)"


def test_the_bounds_cells_come_first_the_versions_between_them_last():
    """The oldest's site.yml (the longest cell) starts first; the oldest's and newest's sanity, units and lab
    and every version's ansible-doc come before 2.17's and 2.18's (--budget, in CI, may leave any out but
    ansible-doc)."""
    plan = matrix.plan_cells(["2.16", "2.17", "2.18", "2.19"], {"2.16", "2.19"})
    assert plan[0] == ("2.16", "lab", True)
    required = [(v, c) for v, c, req in plan if req]
    assert sorted(required) == sorted([("2.16", "lab"), ("2.16", "doc"), ("2.17", "doc"), ("2.18", "doc"),
                                       ("2.19", "doc"), ("2.16", "sanity"), ("2.19", "sanity"), ("2.16", "units"),
                                       ("2.19", "units"), ("2.19", "lab")])
    assert [(v, c) for v, c, req in plan if not req] == [("2.17", "sanity"), ("2.17", "units"),
                                                          ("2.18", "sanity"), ("2.18", "units")]
    # every cell once, the required ones before the others
    assert len({(v, c) for v, c, _ in plan}) == len(plan) == 14
    assert [req for _, _, req in plan] == sorted((req for _, _, req in plan), reverse=True)


def test_one_version_or_two_have_only_bounds():
    assert matrix.plan_cells(["2.19"], set()) == [("2.19", "doc", True), ("2.19", "sanity", True), ("2.19", "units", True)]
    assert all(req for _, _, req in matrix.plan_cells(["2.16", "2.19"], {"2.16"}))
