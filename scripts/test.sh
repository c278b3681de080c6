#!/usr/bin/env bash
# All tests: unit, CLI, lab integration (podman) and molecule. Extra args go to pytest,
# e.g. `bash scripts/test.sh tests/unit` or `bash scripts/test.sh -k verify`.
#   --quick   the edit loop: every unit and CLI test, and one 2-node lab (site.yml fresh, its re-run,
#             --check, and verify on it): the tests marked `quick` (a few minutes)
set -uo pipefail
cd "$(dirname "$0")/.."
select=()
if [ "${1:-}" = "--quick" ]; then
  shift
  select=(-m "(not lab and not molecule) or quick")
fi
bash scripts/setup.sh || exit 1
source .venv/bin/activate
# everything is installed now: a test that cannot run (no podman, a failed download) fails, not skips
export PROVISION_TEST_STRICT="${PROVISION_TEST_STRICT:-1}"
python -m pytest "${select[@]}" "$@"
rc=$?
if [ "$rc" = 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$rc"
