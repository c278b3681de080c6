#!/usr/bin/env bash
# All tests: unit, CLI, lab integration (podman) and molecule. Extra args go to pytest,
# e.g. `bash scripts/test.sh -m "not lab and not molecule"` for the fast ones only.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
source .venv/bin/activate
# everything is installed now: a test that cannot run (no podman, a failed download) fails, not skips
export PROVISION_TEST_STRICT="${PROVISION_TEST_STRICT:-1}"
python -m pytest "$@"
rc=$?
if [ "$rc" = 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$rc"
