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
