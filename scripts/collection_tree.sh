#!/usr/bin/env bash
# Lay out the collection as users get it, for ansible-test: build the tarball with
# `ansible-galaxy collection build` (galaxy.yml's build_ignore decides what is in it) and install
# it with `ansible-galaxy collection install` into DIR/ansible_collections/provision/cluster, the
# way Galaxy and Automation Hub test an uploaded collection: nothing is added, so tests/config.yml
# and tests/sanity/ (the ignore files) are the ones the tarball ships. Prints that path.
# Usage: scripts/collection_tree.sh [DIR]   (ANSIBLE_GALAXY=... picks the ansible-galaxy to use)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
galaxy=${ANSIBLE_GALAXY:-$repo/.venv/bin/ansible-galaxy}
base=${1:-$(mktemp -d "${TMPDIR:-/tmp}/provision-ac.XXXXXX")}
dest="$base/ansible_collections/provision/cluster"
rm -rf "$dest" "$base/build"
mkdir -p "$base/build"
"$galaxy" collection build --force --output-path "$base/build" "$repo" >/dev/null
# --no-deps: the tarball alone (its dependencies are not what sanity tests, and Galaxy may be unreachable)
ANSIBLE_COLLECTIONS_PATH="$base" "$galaxy" collection install --force --no-deps -p "$base" "$base"/build/provision-cluster-*.tar.gz >/dev/null
echo "$dest"
