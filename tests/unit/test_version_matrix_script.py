"""scripts/version_matrix.py: its last line says how many cells its verdict rests on."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from helpers import REPO

spec = importlib.util.spec_from_file_location("version_matrix", REPO / "scripts" / "version_matrix.py")
matrix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(matrix)

OVER = "(not run: over the --budget of 0 s)"


def test_a_matrix_whose_cells_were_all_over_the_budget_ran_nothing():
    """CI gave the matrix a budget of 0 s for many runs and it printed "all ok in 0 s": sanity had not run,
    and its findings (pep8, pylint, non-empty module_utils __init__.py) piled up unseen."""
    cells = ["venv 0 s", f"sanity - {OVER}", f"units - {OVER}", "units ok (scripts/test.sh, same ansible-core)",
             f"doc - {OVER}", "lab -"]
    line = matrix.summary_line(True, cells, 0.4, Path("/tmp/m"))
    assert line == "version matrix: nothing run (0 cells run; 3 not run: over the budget) in 0 s (logs in /tmp/m)"


def test_the_verdict_counts_the_cells_that_ran():
    cells = ["venv 3 s", "sanity ok (24 tests; 54 s)", "doc ok (70 plugins; 8 s)", f"units - {OVER}",
             "sanity FAIL (2 errors, e.g. x; 50 s)"]
    assert matrix.summary_line(True, cells[:4], 62, Path("/l")).startswith(
        "version matrix: all ok (2 cells run; 1 not run: over the budget) in 62 s")
    assert matrix.summary_line(False, cells, 112, Path("/l")).startswith("version matrix: FAILED (3 cells run;")
