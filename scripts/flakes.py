#!/usr/bin/env python3
"""Find flaky tests: run the lab suite (or any pytest selection) N times and report every test that
failed at least once, with the runs it failed in and its first error, the output of every run kept.

    python scripts/flakes.py                       # the lab suite (-m "lab or molecule", its 2 workers), 3 runs
    python scripts/flakes.py --runs 5 --hog 2      # 5 runs beside 2 busy processes (a loaded machine)
    python scripts/flakes.py --runs 2 -- tests/integration/test_verify.py -k fault

Each run is `python -m pytest` with its own --junitxml under --keep (default
/tmp/provision-flakes/<date>), its whole output in run-N.log. Runs 2..N reuse the converged labs'
snapshots that run 1 made (tests/snapshots.py), as a developer's repeated runs do; the tests that
are about fresh runs still run fresh every time. The report is printed and written to report.json:
per test, the runs it failed in ("2/3") and the first line of its first failure. Exit status 1 when
any test failed in any run, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def results(junit: Path) -> dict[str, dict]:
    """{test id: {"outcome": passed|failed|error|skipped, "message": first line}} from a JUnit XML file."""
    out: dict[str, dict] = {}
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return out
    for case in root.iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                text = (node.get("message") or node.text or "").strip()
                message = text.splitlines()[0][:300] if text else ""
                break
        out[test] = {"outcome": outcome, "message": message}
    return out


def report(runs: list[dict[str, dict]]) -> list[dict]:
    """Every test that failed (or errored) in at least one run."""
    tests = sorted({t for run in runs for t in run})
    rows = []
    for test in tests:
        bad = [i + 1 for i, run in enumerate(runs) if run.get(test, {}).get("outcome") in ("failed", "error")]
        if bad:
            first = runs[bad[0] - 1][test]["message"]
            rows.append({"test": test, "failed_in": bad, "runs": len(runs), "first_failure": first})
    return rows


def hog(count: int) -> list[subprocess.Popen]:
    """COUNT processes that each keep a core busy until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hog", type=int, default=0, metavar="N", help="N busy processes beside the runs")
    parser.add_argument("--keep", type=Path, default=None, help="where the logs and JUnit files go")
    parser.add_argument("pytest_args", nargs="*", help='after --: what pytest runs (default: -m "lab or molecule")')
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    keep = args.keep or Path("/tmp/provision-flakes") / time.strftime("%Y%m%d-%H%M%S")
    keep.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO / "tests"))
    import lab_groups  # the lab run's workers, as scripts/test.sh runs them (PROVISION_TEST_LAB_WORKERS)

    selection = args.pytest_args or ["-m", "lab or molecule", *lab_groups.xdist_args()]
    env = dict(os.environ, PROVISION_TEST_STRICT=os.environ.get("PROVISION_TEST_STRICT", "1"))
    hogs = hog(args.hog)
    runs, times = [], []
    try:
        for i in range(1, args.runs + 1):
            junit = keep / f"run-{i}.xml"
            started = time.monotonic()
            with open(keep / f"run-{i}.log", "w", encoding="utf-8") as log:
                rc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-ra",
                                     f"--junitxml={junit}", *selection], cwd=REPO, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, check=False).returncode
            took = time.monotonic() - started
            found = results(junit)
            runs.append(found)
            times.append(took)
            counts = {o: sum(1 for r in found.values() if r["outcome"] == o) for o in ("passed", "failed", "error", "skipped")}
            print(f"run {i}/{args.runs}: exit {rc}, {took:.0f} s, " + ", ".join(f"{v} {k}" for k, v in counts.items()),
                  flush=True)
    finally:
        for proc in hogs:
            proc.kill()
    rows = report(runs)
    doc = {"runs": args.runs, "hog": args.hog, "selection": selection, "seconds": [round(t) for t in times],
           "flaky_or_failing": rows, "logs": str(keep)}
    (keep / "report.json").write_text(json.dumps(doc, indent=1))
    if rows:
        print(f"\n{len(rows)} test(s) failed at least once (logs: {keep}):")
        for row in rows:
            print(f"  {row['test']}: failed in run(s) {','.join(map(str, row['failed_in']))} of {row['runs']}: "
                  f"{row['first_failure']}")
    else:
        print(f"\nno test failed in {args.runs} run(s) (logs: {keep})")
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main())
