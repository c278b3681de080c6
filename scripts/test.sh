#!/usr/bin/env bash
# All tests: unit, CLI, lab integration (podman) and molecule; see docs/contributing.md (Tests).
#   bash scripts/test.sh            everything: the lab tests and the unit tests run at once, as two
#                                   pytest runs (the lab tests wait on their nodes much of the time, and
#                                   run in two workers themselves: PROVISION_TEST_LAB_WORKERS)
#   bash scripts/test.sh --quick    the edit loop: the unit and CLI tests, and one 2-node lab (site.yml
#                                   fresh, its re-run, --check, verify): the lab tests marked `quick`
#   bash scripts/test.sh ARGS...    one pytest run with ARGS (e.g. tests/unit, -k verify, -m lab)
set -uo pipefail
cd "$(dirname "$0")/.."
mode=all
if [ "${1:-}" = "--quick" ]; then mode=quick; shift; fi
if [ $# -gt 0 ]; then mode=args; fi
bash scripts/setup.sh || exit 1
source .venv/bin/activate
# everything is installed now: a test that cannot run (no podman, a failed download) fails, not skips
export PROVISION_TEST_STRICT="${PROVISION_TEST_STRICT:-1}"

pytest_rc() {  # pytest's exit status, with "collected nothing" (5) a failure
  local rc=$1 what=$2
  if [ "$rc" = 5 ]; then echo "pytest collected no $what tests: that is a failure" >&2; return 1; fi
  return "$rc"
}

if [ "$mode" = args ]; then
  python -m pytest "$@"
  pytest_rc $? "" ; exit $?
fi
labs='lab or molecule'
[ "$mode" = quick ] && labs='quick'
units_log=$(mktemp /tmp/provision-units-XXXXXX.log)
start=$(date +%s)
python -m pytest -m 'not lab and not molecule' -p no:cacheprovider >"$units_log" 2>&1 &
units_pid=$!
# the lab tests in PROVISION_TEST_LAB_WORKERS pytest-xdist workers (2; 1: one process): a lab test waits on
# its nodes much of the time; the tests that share a lab stay in one worker, heaviest first (tests/lab_groups.py)
workers=${PROVISION_TEST_LAB_WORKERS:-}
[ "$mode" = quick ] && workers=1   # one lab: nothing to share out
read -r -a parallel < <(python -c 'import sys; sys.path.insert(0, "tests"); import lab_groups; print(*lab_groups.xdist_args(sys.argv[1]))' "$workers")
# the 25 slowest lab steps close its output: where the suite's time goes, in every CI log
labs_junit=$(mktemp /tmp/provision-labs-XXXXXX.xml)
python -m pytest -m "$labs" -p no:cacheprovider "${parallel[@]}" --durations=25 --durations-min=20 --junitxml="$labs_junit"
labs_rc=$?
python tests/lab_groups.py "$labs_junit" || true   # each unit's seconds: what tests/lab_groups.py's COST is kept from
wait "$units_pid"
units_rc=$?
echo
echo "==================== unit and CLI tests (ran beside the lab tests; log $units_log) ===================="
if [ "$units_rc" = 0 ]; then tail -n 8 "$units_log"; else cat "$units_log"; fi
pytest_rc "$labs_rc" lab; labs_rc=$?
pytest_rc "$units_rc" unit; units_rc=$?
echo "tests took $(( $(date +%s) - start )) s: lab tests exit $labs_rc, unit tests exit $units_rc"
[ "$labs_rc" = 0 ] && [ "$units_rc" = 0 ]
