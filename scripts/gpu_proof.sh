#!/usr/bin/env bash
# One-shot proof of every GPU path on one machine, as the only node over Ansible's local connection
# (docs/gpu-proof.md): preflight, python_env adopting the torch already there, GPU facts and health,
# nccl_net, the all-reduce on NCCL (one rank per GPU), `provision verify --local --json` and the
# expected busbw from the hardware it reads. Every result and the raw outputs land in one folder with
# summary.txt saying ok/failed/skipped per step and why. Without a GPU the GPU steps are skipped with
# their reason and the rest runs for real (exit 0).
#
#   scripts/gpu_proof.sh [--out DIR] [--python PY] [--wheels DIR] [--budget SECONDS] [--keep-work]
#   scripts/gpu_proof.sh --prepare DIR [--python-version 3.12] [--ansible-core VERSION]
#
# It changes nothing outside its output folder and a temporary work folder (removed at the end):
# no package, no venv, no ~/.bashrc, no sshd; Ansible's home, temp and fact cache live in the work
# folder. Exit 0: no step failed; 1: a step failed; 2: a prerequisite is missing (one line says which).
set -uo pipefail

usage() {
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  cat <<'EOF'

Options:
  --out DIR          the output folder (default: $OUT/gpu-proof-<UTC time>, packed into $OUT as one
                     .tar.gz with summary.txt and summary.json beside it, when $OUT is set; else
                     ./gpu-proof-<UTC time>)
  --python PY        the interpreter that holds torch (default: $GPU_PROOF_PYTHON, else python3)
  --wheels DIR       wheelhouse for what that interpreter lacks (default: $GPU_PROOF_WHEELS, else .whl
                     in the repo when present); installed into the work folder only
  --budget SECONDS   the whole run's time bound (default: $GPU_PROOF_BUDGET, else 420); each step gets
                     its own bound within what is left, a step with no time left is skipped
  --keep-work        keep the work folder (installed wheels, Ansible's temp and fact cache)
  --prepare DIR      on a controller with an index: download the pure-python wheels the run may need
                     (ansible-core and the CLI's modules) plus PyYAML and MarkupSafe for
                     --python-version (default 3.12) into DIR, to carry to the GPU machine
EOF
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HELPER="$REPO/scripts/gpu_proof/proof.py"
OUTDIR=""
PY="${GPU_PROOF_PYTHON:-}"
WHEELS="${GPU_PROOF_WHEELS:-}"
BUDGET="${GPU_PROOF_BUDGET:-420}"
KEEP_WORK=""
PREPARE=""
PREP_PYVER="3.12"
ANSIBLE_CORE_VERSION=""

while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUTDIR=${2:?--out needs a folder}; shift 2 ;;
    --python) PY=${2:?--python needs an interpreter}; shift 2 ;;
    --wheels) WHEELS=${2:?--wheels needs a folder}; shift 2 ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift 2 ;;
    --keep-work) KEEP_WORK=1; shift ;;
    --prepare) PREPARE=${2:?--prepare needs a folder}; shift 2 ;;
    --python-version) PREP_PYVER=${2:?}; shift 2 ;;
    --ansible-core) ANSIBLE_CORE_VERSION=${2:?}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_proof: unknown argument $1 (scripts/gpu_proof.sh --help)" >&2; exit 2 ;;
  esac
done
case "$BUDGET" in ''|*[!0-9]*) echo "gpu_proof: --budget takes whole seconds, not $BUDGET" >&2; exit 2 ;; esac

# ---------------------------------------------------------------- --prepare: the wheelhouse to carry
prepare() {
  local py=${PY:-python3} dir=$1 pins=() d v abi
  command -v "$py" >/dev/null || { echo "gpu_proof --prepare: $py not found (give --python)" >&2; exit 2; }
  mkdir -p "$dir" || exit 2
  # the versions this controller runs (and its tests ran) where it has them, else the newest
  for d in ansible-core resolvelib jinja2 markupsafe pyyaml packaging click rich markdown-it-py mdurl pygments; do
    v=$("$py" -c "from importlib.metadata import version; print(version('$d'))" 2>/dev/null)
    if [ "$d" = ansible-core ]; then
      if [ -n "$ANSIBLE_CORE_VERSION" ]; then v=$ANSIBLE_CORE_VERSION
      else case "$v" in 2.16.*|2.17.*|2.18.*|2.19.*) ;; *) v="" ;; esac; fi
      [ -n "$v" ] && pins+=("ansible-core==$v") || pins+=("ansible-core>=2.16,<2.20")
    else
      [ -n "$v" ] && pins+=("$d==$v") || pins+=("$d")
    fi
  done
  abi="cp${PREP_PYVER/./}"
  echo "gpu_proof --prepare: downloading ${pins[*]} for CPython $PREP_PYVER into $dir" >&2
  "$py" -m pip download --disable-pip-version-check --no-deps --only-binary=:all: --dest "$dir" \
    --python-version "$PREP_PYVER" --implementation cp --abi "$abi" --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    "${pins[@]}" || { echo "gpu_proof --prepare: pip download failed (an index must be reachable here)" >&2; exit 1; }
  ls -l "$dir"/*.whl
  du -sh "$dir" | sed 's/^/gpu_proof --prepare: carry this folder (64 MiB with the repo at most): /'
  exit 0
}
[ -n "$PREPARE" ] && prepare "$PREPARE"

# ---------------------------------------------------------------- the run
if [ -z "$PY" ]; then
  PY=$(command -v python3) || { echo "gpu_proof: cannot proceed: missing: python3 (not on PATH; --python PY names the interpreter that holds torch)"; exit 2; }
fi
command -v timeout >/dev/null || { echo "gpu_proof: cannot proceed: missing: timeout (coreutils)"; exit 2; }
if [ ! -x "$PY" ]; then
  found=$(command -v "$PY") || { echo "gpu_proof: cannot proceed: missing: the interpreter $PY (--python: not found or not executable)"; exit 2; }
  PY=$found
fi
ORIG_ENV=$(env)
T0=$(date +%s%N)
export GPU_PROOF_STARTED GPU_PROOF_BUDGET="$BUDGET"
GPU_PROOF_STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-proof-work.XXXXXX") || exit 2
PACK=""
if [ -z "$OUTDIR" ]; then
  if [ -n "${OUT:-}" ]; then OUTDIR="$WORK/gpu-proof-$STAMP"; PACK="$OUT"; else OUTDIR="$PWD/gpu-proof-$STAMP"; fi
fi
if [ -e "$OUTDIR" ] && [ -n "$(ls -A "$OUTDIR" 2>/dev/null)" ]; then
  echo "gpu_proof: the output folder $OUTDIR is not empty: give a new one with --out"; rm -rf "$WORK"; exit 2
fi
mkdir -p "$OUTDIR/logs" "$OUTDIR/results" "$OUTDIR/raw" "$OUTDIR/vars" || exit 2
R=$(cd "$OUTDIR" && pwd)
[ -z "$WHEELS" ] && [ -d "$REPO/.whl" ] && WHEELS="$REPO/.whl"
[ -n "$WHEELS" ] && [ -d "$WHEELS" ] && WHEELS=$(cd "$WHEELS" && pwd)
SITE="$WORK/site"

cleanup() {
  "$PY" "$HELPER" reap "$R/allreduce" 2>/dev/null
  [ -n "$KEEP_WORK" ] && echo "gpu_proof: work folder kept: $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo "gpu_proof: interrupted"; exit 130' INT TERM

elapsed_ms() { echo $(( ($(date +%s%N) - T0) / 1000000 )); }
# a step's bound: its own, within what is left of the budget (20 s kept for the summary)
bound() { local left=$(( BUDGET - $(elapsed_ms) / 1000 - 20 )); [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }
secs() { awk -v a="$1" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }
helper() { timeout -k 5 120 "$PY" "$HELPER" "$@"; }
# under $OUT, the verdicts so far go along as each step ends: a run killed from outside still tells how far it got
progress() { [ -n "$PACK" ] && cp "$R/steps.jsonl" "$PACK/steps.jsonl" 2>/dev/null; return 0; }
skip() { helper skip "$R" "$1" "$2"; progress; }

# run_step NAME MAX_SECONDS [--stdout FILE] CMD...: bounded, logged, judged from its results
run_step() {
  local name=$1 max=$2 stdout="" t start rc
  shift 2
  if [ "$1" = --stdout ]; then stdout=$2; shift 2; fi
  t=$(bound "$max")
  if [ "$t" -lt 15 ]; then skip "$name" "out of time: the run's budget of $BUDGET s is spent"; return; fi
  start=$(date +%s%N)
  if [ -n "$stdout" ]; then
    GPU_PROOF_EVENTS="$R/results/$name.jsonl" timeout -k 10 "$t" "$@" >"$stdout" 2>"$R/logs/$name.log" </dev/null
  else
    GPU_PROOF_EVENTS="$R/results/$name.jsonl" timeout -k 10 "$t" "$@" >"$R/logs/$name.log" 2>&1 </dev/null
  fi
  rc=$?
  helper step "$R" "$name" "$rc" "$(secs "$start")"
  progress
}

# capture FILE CMD...: one raw output into raw/FILE (stderr beside it when there is any)
capture() {
  local file=$1 rc t
  shift
  t=$(bound 30)
  [ "$t" -lt 5 ] && return 124
  timeout -k 5 "$t" "$@" >"$R/raw/$file" 2>"$R/raw/$file.err" </dev/null
  rc=$?
  [ -s "$R/raw/$file.err" ] || rm -f "$R/raw/$file.err"
  printf '%s\t%s\t%s\n' "$rc" "$file" "$*" >>"$R/raw/commands.tsv"
  return "$rc"
}

export LC_ALL=C.UTF-8 LANG=C.UTF-8 PYTHONUNBUFFERED=1
export PYTHONPATH="$SITE:$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
echo "gpu_proof: output folder $R (budget $BUDGET s)"

# 1. prerequisites, in one line (and what is missing installed from the wheelhouse, into the work folder)
start=$(date +%s%N)
timeout -k 5 300 "$PY" "$HELPER" prereq "$R" "$SITE" "$WHEELS"
rc=$?
"$PY" "$HELPER" step "$R" prereq "$rc" "$(secs "$start")" >/dev/null; progress
if [ "$rc" -ne 0 ]; then
  "$PY" "$HELPER" summary "$R" "$(( $(elapsed_ms) / 1000 ))" >/dev/null
  [ -n "$PACK" ] && { tar -C "$(dirname "$R")" -czf "$PACK/$(basename "$R").tar.gz" "$(basename "$R")"; cp "$R/summary.txt" "$R/summary.json" "$PACK/"; rm -f "$PACK/steps.jsonl"; }
  exit 2
fi

# Ansible runs with this interpreter, from this checkout, with its home, temp and fact cache in the work folder
mkdir -p "$WORK/bin"
for tool in playbook inventory; do
  printf '#!/bin/sh\nexec %q -m ansible %s "$@"\n' "$PY" "$tool" >"$WORK/bin/ansible-$tool"
  chmod +x "$WORK/bin/ansible-$tool"
done
export PATH="$WORK/bin:$PATH"
export ANSIBLE_CONFIG="$REPO/ansible.cfg" ANSIBLE_HOME="$WORK/ansible-home" ANSIBLE_LOCAL_TEMP="$WORK/ansible-tmp" \
  ANSIBLE_REMOTE_TEMP="$WORK/ansible-remote-tmp" ANSIBLE_CACHE_PLUGIN=provision.cluster.lean_jsonfile \
  ANSIBLE_CACHE_PLUGIN_CONNECTION="$WORK/facts" ANSIBLE_COLLECTIONS_PATH="$REPO/collections" \
  ANSIBLE_ROLES_PATH="$REPO/roles" ANSIBLE_CALLBACK_PLUGINS="$REPO/scripts/gpu_proof/callback_plugins" \
  ANSIBLE_CALLBACKS_ENABLED=gpu_proof_results ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 \
  ANSIBLE_RETRY_FILES_ENABLED=0 ANSIBLE_DEPRECATION_WARNINGS=0 \
  PROVISION_PAYLOAD_CACHE_DIR="$WORK/payloads"  # the module payloads the CLI's runs keep (payload_cache)
cd "$REPO" || exit 2

# the node: GPUs (the --query-gpu CSV gpu_facts reads), a free rendezvous port, the inventory under $R/inventory
plan_out=$(helper plan "$R") || { echo "gpu_proof: cannot plan the run: $plan_out"; exit 2; }
eval "$plan_out"
INV="$R/inventory"

# 2. versions and the platform (raw/)
start=$(date +%s%N)
capture uname.txt uname -a
capture os-release cat /etc/os-release
printf '%s\n' "$ORIG_ENV" | grep -E '^(CUDA|NCCL|NVIDIA|LD_LIBRARY_PATH|PATH|CONDA|VIRTUAL_ENV|TORCH)' | sort >"$R/raw/cuda-env.txt"
command -v gcc >/dev/null && capture gcc-version.txt gcc --version
NVCC=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
[ -n "$NVCC" ] && capture nvcc-version.txt "$NVCC" --version
capture ansible-version.txt ansible-playbook --version
capture pip-list.txt "$PY" -m pip list --format=freeze --disable-pip-version-check
capture sys-class-infiniband-net.txt ls -la /sys/class/infiniband /sys/class/net
capture ldconfig.txt sh -c "ldconfig -p | grep -E 'libcuda\\.|libnccl|libnvidia-ml|libibverbs'"
helper step "$R" versions 0 "$(secs "$start")"; progress

# 3. raw nvidia-smi outputs (GPU)
SMI=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("nvidia_smi") or "")' "$R/prereq.json")
if [ -n "$SMI" ]; then
  start=$(date +%s%N)
  if capture nvidia-smi.txt "$SMI" || [ $? -ne 124 ]; then
    capture nvidia-smi-q.xml "$SMI" -q -x
    capture nvidia-smi-q.txt "$SMI" -q
    capture nvidia-smi-L.txt "$SMI" -L
    capture nvidia-smi-topo-m.txt "$SMI" topo -m
    capture nvidia-smi-query-gpu.csv "$SMI" --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,compute_cap --format=csv,noheader
    capture nvidia-smi-nvlink-s.txt "$SMI" nvlink -s
    capture nvidia-smi-nvlink-e.txt "$SMI" nvlink -e
    capture proc-driver-nvidia-version.txt cat /proc/driver/nvidia/version
    capture proc-driver-nvidia-gpus.txt sh -c 'cat /proc/driver/nvidia/gpus/*/information'
  fi
  helper step "$R" nvidia_smi 0 "$(secs "$start")"; progress
else
  skip nvidia_smi "no NVIDIA GPU: $GPU_REASON"
fi

# 4.-7. the stages, each a playbook of its own on the one-node inventory
run_step preflight 90 ansible-playbook -i "$INV" playbooks/preflight.yml
if [ -n "$ADOPT" ]; then
  run_step python_env 150 ansible-playbook -i "$INV" playbooks/python_env.yml
else
  skip python_env "$ADOPT_REASON"
fi
run_step gpu 120 ansible-playbook -i "$INV" playbooks/cuda_toolkit.yml
run_step nccl_net 60 ansible-playbook -i "$INV" playbooks/nccl_net.yml

# 8. the all-reduce: NCCL, one rank per GPU; without a GPU, gloo stands in for it (same role, same inventory)
if [ "${GPU_COUNT:-0}" -gt 0 ]; then
  vars=$(helper vars "$R" nccl)
  run_step allreduce 150 ansible-playbook -i "$INV" playbooks/allreduce_smoke.yml -e "@$vars"
  helper reap "$R/allreduce"
else
  skip allreduce "no NVIDIA GPU: $GPU_REASON (the NCCL backend needs one; allreduce_gloo runs the same role on gloo)"
  vars=$(helper vars "$R" gloo)
  run_step allreduce_gloo 150 ansible-playbook -i "$INV" playbooks/allreduce_smoke.yml -e "@$vars"
  helper reap "$R/allreduce"
fi

# 9. provision verify --local --json (its own playbook run; the JSON document is its stdout)
run_step verify_local 110 --stdout "$R/verify-local.json" "$PY" -m provision verify --local --json --timeout 90

# 10. the busbw the hardware read should give
start=$(date +%s%N)
helper expected "$R" >"$R/logs/expected_busbw.log" 2>&1
helper step "$R" expected_busbw "$?" "$(secs "$start")"

# summary.txt / summary.json (and, under $OUT, one tarball beside them)
[ -n "$PACK" ] && export GPU_PROOF_PACKED_AS="$PACK/$(basename "$R").tar.gz (the output folder, packed)"
"$PY" "$HELPER" summary "$R" "$(awk -v ms="$(elapsed_ms)" 'BEGIN { printf "%.1f", ms / 1000 }')"
rc=$?
if [ -n "$PACK" ]; then
  tar -C "$(dirname "$R")" -czf "$PACK/$(basename "$R").tar.gz" "$(basename "$R")" && cp "$R/summary.txt" "$R/summary.json" "$PACK/" \
    && rm -f "$PACK/steps.jsonl" && echo "gpu_proof: packed into $PACK/$(basename "$R").tar.gz"
fi
exit "$rc"
