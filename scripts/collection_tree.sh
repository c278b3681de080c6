#!/usr/bin/env bash
# Lay out the collection as users get it, for ansible-test: build the tarball with
# `ansible-galaxy collection build` (galaxy.yml's build_ignore decides what is in it), unpack it
# into DIR/ansible_collections/provision/cluster (ansible-test must run inside such a path), and
# add galaxy.yml, tests/config.yml and tests/sanity/ (the ignore files), which ansible-test reads.
# Prints that path.
# Usage: scripts/collection_tree.sh [DIR]   (ANSIBLE_GALAXY=... picks the ansible-galaxy to use)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
galaxy=${ANSIBLE_GALAXY:-$repo/.venv/bin/ansible-galaxy}
base=${1:-$(mktemp -d "${TMPDIR:-/tmp}/provision-ac.XXXXXX")}
dest="$base/ansible_collections/provision/cluster"
rm -rf "$dest" "$base/build"
mkdir -p "$dest" "$base/build"
"$galaxy" collection build --force --output-path "$base/build" "$repo" >/dev/null
tar -xzf "$base"/build/provision-cluster-*.tar.gz -C "$dest"
rm -f "$dest/MANIFEST.json" "$dest/FILES.json"
cp "$repo/galaxy.yml" "$dest/"
mkdir -p "$dest/tests"
cp "$repo/tests/config.yml" "$dest/tests/"
cp -r "$repo/tests/sanity" "$dest/tests/"
echo "$dest"
