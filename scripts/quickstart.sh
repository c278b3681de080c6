#!/usr/bin/env bash
# A newcomer's first command: install what is missing, bring up the 2-node lab, provision it
# with site.yml, and check it with provision verify.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source .venv/bin/activate
nodes="${PROVISION_LAB_NODES:-2}"
provision lab up --nodes "$nodes"
ansible-playbook site.yml -i inventory/lab/
if provision --help | grep -q verify; then
  provision verify -i inventory/lab/
fi
