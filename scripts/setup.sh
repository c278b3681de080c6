#!/usr/bin/env bash
# Install what the tests need on this machine (Debian/Ubuntu; idempotent, fast when done):
# a venv in .venv with the package, its test tools and torch (.[dev,torch]), the collections the
# roles and the lab use, and the lab's host packages (podman, runc, mmdebstrap) plus its
# containers.conf. A controller for real machines needs only `pip install .` and `provision setup`.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
apt_install() {
  log "apt-get install $*"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

command -v python3 >/dev/null || apt_install python3
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then apt_install python3-venv; fi
missing=()
for tool in podman runc mmdebstrap ssh ssh-keygen git chromium; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  pkgs=()
  for t in "${missing[@]}"; do
    case "$t" in ssh|ssh-keygen) pkgs+=(openssh-client) ;; *) pkgs+=("$t") ;; esac
  done
  apt_install $(printf '%s\n' "${pkgs[@]}" | sort -u)
fi

stamp=.venv/.provision-installed
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  log "installing provision and its dev tools into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[dev,torch]'
  touch "$stamp"
fi

# promtool (tests/unit/cli/test_export.py checks the Prometheus textfile with it): only the binary out of
# Debian's prometheus package, so that no server is installed or started
if [ ! -x .venv/bin/promtool ] && ! command -v promtool >/dev/null; then
  tmp=$(mktemp -d)
  if (cd "$tmp" && { apt-get download prometheus >/dev/null 2>&1 \
        || { $SUDO apt-get update -qq && apt-get download prometheus >/dev/null 2>&1; }; } \
        && dpkg-deb -x prometheus_*.deb x); then
    cp "$tmp/x/usr/bin/promtool" .venv/bin/promtool
  else
    log "promtool not installed (apt-get download prometheus failed): tests/unit/cli/test_export.py will fail"
  fi
  rm -rf "$tmp"
fi

# collections (from the ansible wheel; Galaxy may be unreachable) and the lab host setup
.venv/bin/provision setup --lab >&2
log "done; use it with: source .venv/bin/activate"
