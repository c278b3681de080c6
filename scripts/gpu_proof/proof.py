#!/usr/bin/env python3
# Copyright: provision developers
# Apache License 2.0
"""The Python half of scripts/gpu_proof.sh (docs/gpu-proof.md): prerequisites, the one-node
inventory, each step's verdict, the expected busbw and the summary.

Runs with the interpreter that holds torch (the node's python) and only the standard library; the
expected-busbw step imports the collection's module_utils.allreduce.bandwidth from this checkout.

    proof.py prereq  OUT SITE WHEELS   check (and install from WHEELS into SITE) what the run needs
    proof.py plan    OUT               GPUs, the master port, the inventory; prints shell assignments
    proof.py vars    OUT BACKEND       extra vars of an all-reduce step (JSON file path printed)
    proof.py step    OUT NAME RC SECS  judge a step that ran, append it to steps.jsonl, print one line
    proof.py skip    OUT NAME REASON   record a step that did not run
    proof.py expected OUT              the busbw this node's hardware should give (expected-busbw.json)
    proof.py reap    RUN_ROOT          kill an all-reduce supervisor a killed step left behind
    proof.py summary OUT SECS          summary.json and summary.txt; exit 1 when a step failed
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIN_PYTHON = (3, 10)
ANSIBLE_RANGE = ((2, 16), (2, 20))      # pyproject.toml: ansible-core>=2.16,<2.20
# import name -> distribution: what ansible-playbook and `provision verify` import (nothing else of
# the package's dependencies is needed on the node: paramiko is bootstrap's, python-hostlist nodelist's)
NEEDED = [("ansible", "ansible-core"), ("yaml", "PyYAML"), ("jinja2", "Jinja2"), ("markupsafe", "MarkupSafe"),
          ("packaging", "packaging"), ("click", "click"), ("rich", "rich"), ("markdown_it", "markdown-it-py"),
          ("mdurl", "mdurl"), ("pygments", "Pygments")]
# installed from the wheelhouse when missing, never required (ansible-galaxy's resolver)
OPTIONAL = [("resolvelib", "resolvelib")]
NO_GPU = "nvidia-smi not found: no NVIDIA driver on this node"

# name, what it proves, GPU step (skipped without a GPU)
STEPS = [
    ("prereq", "python, torch, ansible-core and the CLI's modules importable", False),
    ("versions", "versions and the node's platform (raw/)", False),
    ("nvidia_smi", "raw nvidia-smi outputs (raw/)", True),
    ("preflight", "playbooks/preflight.yml: the one-node plan, ports, facts", False),
    ("python_env", "playbooks/python_env.yml adopting the torch already there", False),
    ("gpu", "playbooks/cuda_toolkit.yml: gpu_facts and gpu_health_info", True),
    ("nccl_net", "playbooks/nccl_net.yml: the NCCL interface and IB settings", False),
    ("allreduce", "playbooks/allreduce_smoke.yml, NCCL, one rank per GPU", True),
    ("allreduce_gloo", "playbooks/allreduce_smoke.yml, gloo (stands in for NCCL without a GPU)", False),
    ("verify_local", "provision verify --local --json", False),
    ("expected_busbw", "module_utils/allreduce/bandwidth.py on the hardware read", True),
]
TITLES = {name: title for name, title, _gpu in STEPS}


# ---------------------------------------------------------------- small helpers

def load(path, default=None):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def dump(path, data):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def first_line(*texts):
    for text in texts:
        for line in str(text or "").splitlines():
            if line.strip():
                return line.strip()[:400]
    return ""


def events(out, step):
    """The task results the gpu_proof_results callback wrote for a step."""
    path = Path(out) / "results" / f"{step}.jsonl"
    found = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return found


def last_of(evs, action, status=None):
    """The last result of a module (by its action name, short or FQCN) in a step's events; a stage that ran
    it through provision.cluster.check names it in the result's check_module."""
    for ev in reversed(evs):
        act = str(ev.get("action") or "")
        if act == "check" or act.endswith(".check"):
            act = str((ev.get("result") or {}).get("check_module") or act)
        if (act == action or act.endswith("." + action)) and (status is None or ev.get("status") in status):
            return ev
    return None


def failure(evs):
    """The first failed task of a step as one line, or None."""
    for ev in evs:
        if ev.get("status") in ("failed", "unreachable"):
            res = ev.get("result") or {}
            msg = res.get("msg")
            if isinstance(msg, list):
                msg = "; ".join(str(m) for m in msg)
            text = first_line(msg, res.get("module_stderr"), res.get("stderr")) or "failed"
            return f"{ev.get('task')}: {text}"
    return None


def log_error(out, step):
    """The first ERROR line of a step's log (ansible-playbook's own errors, before any task ran)."""
    try:
        text = (Path(out) / "logs" / f"{step}.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith("ERROR!") or line.startswith("[ERROR]") or "Traceback" in line:
            return line.strip()[:400]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:400] if lines else ""


def check_counts(checks):
    counts = {}
    for c in checks or []:
        counts[c.get("status")] = counts.get(c.get("status"), 0) + 1
    return ", ".join(f"{counts[k]} {k}" for k in ("pass", "warn", "fail", "skip") if counts.get(k)) or "no checks"


def bad_checks(checks):
    return [c for c in checks or [] if c.get("status") in ("fail", "warn")]


# ---------------------------------------------------------------- prereq

_IMPORTS = r"""
import importlib, json, sys
out = {}
for name in json.loads(sys.argv[1]):
    try:
        mod = importlib.import_module(name)
    except Exception as exc:
        out[name] = {"error": "%s: %s" % (type(exc).__name__, exc)}
        continue
    version = getattr(mod, "__version__", None)
    if name == "ansible":
        from ansible.release import __version__ as version
    out[name] = {"version": str(version) if version else "", "file": getattr(mod, "__file__", "") or ""}
print(json.dumps(out))
"""

_TORCH = r"""
import json, platform, sys
from importlib import metadata
out = {"python": platform.python_version(), "python_full": sys.version.replace("\n", " "),
       "executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix}
try:
    out["numpy"] = metadata.version("numpy")
except Exception:
    out["numpy"] = None
import torch
import torch.distributed as dist
out.update(torch=torch.__version__, torch_file=torch.__file__, cuda=torch.version.cuda)
try:
    out["nccl"] = list(torch.cuda.nccl.version()) if torch.cuda.is_available() or torch.version.cuda else None
except Exception as exc:
    out["nccl"] = None
    out["nccl_error"] = str(exc)
out["cuda_available"] = bool(torch.cuda.is_available())
out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
out["devices"] = [torch.cuda.get_device_name(i) for i in range(out["device_count"])]
out["backends"] = {b: bool(getattr(dist, "is_%s_available" % b)()) for b in ("nccl", "gloo", "mpi")}
print(json.dumps(out))
"""


def _run_py(python, code, args, timeout, env=None):
    try:
        proc = subprocess.run([python, "-c", code] + list(args), capture_output=True, text=True, timeout=timeout,
                              env=env, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"did not finish in {timeout} s"
    except OSError as exc:
        return None, str(exc)
    if proc.returncode != 0:
        return None, first_line(proc.stderr.splitlines()[-1] if proc.stderr.strip() else "", proc.stdout) or f"rc={proc.returncode}"
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1]), ""
    except (ValueError, IndexError):
        return None, "printed no JSON"


def _version_tuple(text):
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:2]) or (0, 0)


def _dist_of_wheel(name):
    """'ansible_core-2.19.14-py3-none-any.whl' -> 'ansible-core' (normalized)."""
    return re.sub(r"[-_.]+", "-", name.split("-", 1)[0]).lower()


def _normalize(dist):
    return re.sub(r"[-_.]+", "-", dist).lower()


def find_imports(python, names, site):
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH", "")) if p)
    found, err = _run_py(python, _IMPORTS, [json.dumps(names)], 120, env)
    if found is None:
        return {n: {"error": err} for n in names}
    return found


def missing_of(found):
    """Needed imports that fail, or ansible-core outside the supported range -> {import name: why}."""
    out = {}
    for name, _dist in NEEDED:
        info = found.get(name) or {}
        if info.get("error"):
            out[name] = info["error"]
        elif name == "ansible":
            v = _version_tuple(info.get("version"))
            if not (ANSIBLE_RANGE[0] <= v < ANSIBLE_RANGE[1]):
                out[name] = f"ansible-core {info.get('version')} here, 2.16 to 2.19 needed"
    return out


def become_problem(euid=None, sudo=None):
    """Why the stages could not become root here ('' when they can): they run with become (the one-node
    inventory is the stages' own), so a user other than root needs a sudo that asks no password. The
    preflight step would say it too, but after each later step had failed on it."""
    if (os.geteuid() if euid is None else euid) == 0:
        return ""
    sudo = sudo if sudo is not None else (shutil.which("sudo") or "")
    if not sudo:
        return "sudo is not installed"
    try:
        proc = subprocess.run([sudo, "-n", "true"], capture_output=True, text=True, timeout=15, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`sudo -n true` did not run: {exc}"
    return "" if proc.returncode == 0 else f"`sudo -n true` fails: {first_line(proc.stderr) or 'rc %d' % proc.returncode}"


def prereq(out, site, wheels):
    """Check what the run needs; install the missing pure-python pieces from the wheelhouse into SITE."""
    out = Path(out)
    python = sys.executable
    problems, notes = [], []
    info = {"python": python, "python_version": ".".join(map(str, sys.version_info[:3])), "site": site,
            "wheels": wheels, "installed_from_wheels": []}
    if sys.version_info[:2] < MIN_PYTHON:
        problems.append(f"python >= {'.'.join(map(str, MIN_PYTHON))} ({python} is {info['python_version']})")
    for tool in ("timeout", "bash", "tar"):
        if not shutil.which(tool):
            problems.append(f"{tool} (coreutils) not on PATH")
    names = [n for n, _ in NEEDED + OPTIONAL]
    found = find_imports(python, names, site)
    missing = missing_of(found)
    absent_optional = [n for n, _ in OPTIONAL if (found.get(n) or {}).get("error")]
    if missing or absent_optional:
        wheel_files = sorted(p for p in Path(wheels).glob("*.whl")) if wheels and Path(wheels).is_dir() else []
        by_dist = {_dist_of_wheel(p.name): p for p in wheel_files}
        dists = dict(NEEDED + OPTIONAL)
        todo = [by_dist[_normalize(dists[n])] for n in list(missing) + absent_optional if _normalize(dists[n]) in by_dist]
        if todo:
            argv = [python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                    "--disable-pip-version-check", "--no-warn-script-location", "--target", site] + [str(p) for p in todo]
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False,
                                      stdin=subprocess.DEVNULL)
                rc, err = proc.returncode, proc.stderr
            except (OSError, subprocess.TimeoutExpired) as exc:
                rc, err = 1, str(exc)
            if rc != 0:
                problems.append(f"pip install from {wheels} failed: {first_line(err.splitlines()[-1] if err.strip() else '') or rc}")
            else:
                info["installed_from_wheels"] = [p.name for p in todo]
            found = find_imports(python, names, site)
            missing = missing_of(found)
        if missing:
            where = (f"and no wheel of them in {wheels}" if wheels and Path(wheels).is_dir() else
                     f"and no wheelhouse ({wheels or 'none given'})")
            whys = sorted({why for why in missing.values() if "ansible-core" in why})
            problems.append(f"{', '.join(dists[n] for n in missing)} (not importable by {python}{'; ' if whys else ''}"
                            f"{'; '.join(whys)}) {where}: build one where an index is reachable with "
                            "`scripts/gpu_proof.sh --prepare DIR`, carry it and give --wheels DIR")
    info["imports"] = found
    become = become_problem()
    if become:
        who = pwd.getpwuid(os.geteuid()).pw_name
        problems.append(f"root (the stages become root, and for {who} {become}: run it as root, or as a user with "
                        "passwordless sudo)")
    torch, err = _run_py(python, _TORCH, [], 240)
    if torch is None:
        problems.append(f"torch (not importable by {python}: {err}; the proof uses the PyTorch already there and "
                        "installs none: --python names the interpreter that holds it)")
    info["torch"] = torch or {"error": err}
    smi = shutil.which("nvidia-smi") or next((p for p in ("/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi",
                                                           "/usr/local/bin/nvidia-smi") if os.access(p, os.X_OK)), None)
    info["nvidia_smi"] = smi
    if not smi:
        notes.append("nvidia-smi not found: the GPU steps will be skipped")
    if torch:
        raw = out / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        nccl = tuple(torch["nccl"]) if torch.get("nccl") else None
        (raw / "torch-versions.txt").write_text(
            f"{torch['python_full']}\n{torch['torch']} {torch['cuda']} {nccl} "
            f"{torch['devices'][0] if torch['devices'] else None} {torch['device_count']}\n"
            + " ".join(f"{b} {v}" for b, v in torch["backends"].items()) + "\n", encoding="utf-8")
    info["problems"], info["notes"] = problems, notes
    if problems:
        info["line"] = "gpu_proof: cannot proceed: missing: " + "; ".join(problems + notes)
    else:
        ans = found.get("ansible") or {}
        where = ("from the wheelhouse " + wheels if any(n.startswith("ansible_core") for n in info["installed_from_wheels"])
                 else "installed")
        info["line"] = (
            f"prerequisites: python {info['python_version']} ({python}), torch {torch['torch']} (CUDA {torch['cuda']}, "
            f"{'GPU visible to torch' if torch['cuda_available'] else 'no GPU visible to torch'}) from "
            f"{os.path.dirname(os.path.dirname(torch['torch_file']))}, ansible-core {ans.get('version')} ({where})"
            + (f", also from the wheelhouse: {', '.join(info['installed_from_wheels'])}" if info["installed_from_wheels"] else "")
            + (f"; nvidia-smi {smi}" if smi else "") + ("; " + "; ".join(notes) if notes else ""))
    dump(out / "prereq.json", info)
    print(info["line"], flush=True)
    return 2 if problems else 0


# ---------------------------------------------------------------- plan

QUERY_GPU = "--query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,compute_cap"


def gpu_inventory(smi, timeout=20):
    """(count, reason) from the query gpu_facts runs (`nvidia-smi --query-gpu=... --format=csv,noheader`)."""
    if not smi:
        return 0, NO_GPU
    try:
        proc = subprocess.run([smi, QUERY_GPU, "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 0, f"nvidia-smi --query-gpu did not answer in {timeout} s (a wedged driver)"
    except OSError as exc:
        return 0, f"nvidia-smi --query-gpu: {exc}"
    if proc.returncode != 0:
        return 0, f"nvidia-smi --query-gpu failed (rc={proc.returncode}): {first_line(proc.stdout, proc.stderr)}"
    gpus = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not gpus:
        return 0, "nvidia-smi lists no GPU"
    return len(gpus), ""


def port_is_free(port):
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            sock.bind((addr, port))
        except OSError:
            return False
        finally:
            sock.close()
    return True


def free_port(first=29500, last=29599):
    for port in range(first, last + 1):
        if port_is_free(port):
            return port
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def public_version(version):
    return (version or "").split("+", 1)[0]


def plan(out):
    """The one-node inventory (inventory/hosts.ini + group_vars/cluster.yml) and what bash needs."""
    out = Path(out)
    pre = load(out / "prereq.json", {})
    torch = pre.get("torch") or {}
    gpus, reason = gpu_inventory(pre.get("nvidia_smi"))
    node = os.environ.get("GPU_PROOF_NODE") or "localhost"
    port = int(os.environ.get("GPU_PROOF_PORT") or free_port())
    prefix = torch.get("prefix") or ""
    env_python = os.path.join(prefix, "bin", "python")
    adopt = bool(prefix) and os.access(env_python, os.X_OK)
    adopt_reason = "" if adopt else (
        f"{sys.executable} is not inside an environment whose bin/python runs ({env_python}): python_env adopts a "
        "venv or conda env; the all-reduce uses the interpreter directly")
    group_vars = {
        "cluster_master_port": port,
        # one node: the all-reduce stage runs with one
        "preflight_stage_min_nodes": {"ssh_mesh": 1, "allreduce_smoke": 1},
        "preflight_gather_facts": "always",
        # python_env adopts the environment that holds torch: nothing downloaded, installed or re-owned
        "python_env_install": False,
        "python_env_path": prefix,
        "python_env_torch_spec": f"torch=={public_version(torch.get('torch'))}",
        "python_env_extra_packages": [f"numpy=={torch['numpy']}"] if torch.get("numpy") else [],
        # no cache file written into that environment
        "python_env_probe_cache": False,
        # read only: no toolkit installed
        "cuda_toolkit_version": "",
        "allreduce_smoke_python": sys.executable,
        "allreduce_smoke_run_root": str(out / "allreduce"),
        "allreduce_smoke_result_path": str(out / "allreduce" / "result.json"),
        "allreduce_smoke_rerun": "always",
        "allreduce_smoke_timeout": 90,
    }
    inv = out / "inventory"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "hosts.ini").write_text(
        "# written by scripts/gpu_proof.sh: this machine as the only node, over Ansible's local connection\n"
        f"[cluster]\n{node} ansible_connection=local ansible_python_interpreter={sys.executable}\n", encoding="utf-8")
    (inv / "group_vars" / "cluster.yml").write_text(
        "---\n# written by scripts/gpu_proof.sh (JSON is YAML)\n" + json.dumps(group_vars, indent=1, sort_keys=True) + "\n",
        encoding="utf-8")
    data = {"node": node, "hostname": socket.gethostname(), "gpu_count": gpus, "gpu_reason": reason, "port": port,
            "adopt": adopt, "adopt_reason": adopt_reason, "env_prefix": prefix, "group_vars": group_vars}
    dump(out / "plan.json", data)
    for key, value in (("GPU_COUNT", gpus), ("GPU_REASON", reason), ("ADOPT", "1" if adopt else ""),
                       ("ADOPT_REASON", adopt_reason), ("MASTER_PORT", port), ("NODE", node)):
        print(f"{key}={shlex.quote(str(value))}")
    return 0


def allreduce_vars(out, backend):
    """Extra vars of an all-reduce step: the backend, one rank per GPU, and the environment nccl_net
    chose (what the shell_env block would export), so the workers run with it."""
    out = Path(out)
    p = load(out / "plan.json", {})
    ev = last_of(events(out, "nccl_net"), "nccl_net_facts", ("ok",))
    env = dict(((ev or {}).get("result") or {}).get("env") or {})
    # the workers start from a clean environment and ~/.bashrc (what ssh gives a launcher): the caller's
    # LD_LIBRARY_PATH goes along (a GPU image may find libcuda only through it; raw/ldconfig.txt says
    # whether the linker cache has it), and the summary says so
    if os.environ.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    extra = {"allreduce_smoke_backend": backend, "allreduce_smoke_env": env}
    if backend == "nccl":
        extra["allreduce_smoke_nproc_per_node"] = max(int(p.get("gpu_count") or 0), 1)
    path = out / "vars" / f"allreduce-{backend}.json"
    dump(path, extra)
    print(path)
    return 0


# ---------------------------------------------------------------- verdicts

def step_record(out, name, status, seconds, detail, data=None, rc=None):
    rec = {"step": name, "title": TITLES.get(name, name), "status": status, "seconds": round(float(seconds), 1),
           "detail": detail, "rc": rc, "data": data or {}}
    with open(Path(out) / "steps.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec, sort_keys=True, default=str) + "\n")
    return rec


def _timed_out(rc):
    return rc in (124, 137)


def _raw_commands(out):
    rows = []
    try:
        for line in (Path(out) / "raw" / "commands.tsv").read_text(encoding="utf-8").splitlines():
            rc, _, rest = line.partition("\t")
            name, _, cmd = rest.partition("\t")
            rows.append({"rc": int(rc), "file": name, "cmd": cmd})
    except (OSError, ValueError):
        pass
    return rows


def judge_raw(out, name, rc):
    rows = [r for r in _raw_commands(out) if (r["file"].startswith("nvidia-smi") or r["file"].startswith("proc-driver"))
            == (name == "nvidia_smi")]
    if not rows:
        return "failed", "no command ran", {}
    bad = [r for r in rows if r["rc"] != 0]
    data = {"files": [r["file"] for r in rows], "failed": bad}
    if name == "nvidia_smi":
        main = next((r for r in rows if r["file"] == "nvidia-smi-q.xml"), None)
        if main is None or main["rc"] != 0:
            return "failed", f"nvidia-smi -q -x failed (rc={main['rc'] if main else '?'})", data
    detail = f"{len(rows) - len(bad)} of {len(rows)} captured into raw/"
    if bad:
        detail += "; not available here: " + ", ".join(f"{r['cmd']} (rc={r['rc']})" for r in bad)
    return "ok", detail, data


def judge_preflight(evs):
    ports = last_of(evs, "port_facts")
    checks = ((ports or {}).get("result") or {}).get("checks") or []
    setup = last_of(evs, "setup", ("ok",))
    facts = ((setup or {}).get("result") or {}).get("ansible_facts") or {}
    what = (f"{facts.get('ansible_distribution', '?')} {facts.get('ansible_distribution_version', '')}, "
            f"{facts.get('ansible_processor_vcpus', '?')} vCPUs, {facts.get('ansible_memtotal_mb', '?')} MB")
    return "ok", f"plan and inventory valid; {what}; ports: {check_counts(checks)}", {"checks": checks}


def judge_python_env(evs, plan_data):
    # the stage's python_venv call runs the versions check after its work (provision.cluster.check sets the fact)
    venv = last_of(evs, "python_venv")
    res = (venv or {}).get("result") or {}
    versions = (res.get("ansible_facts") or {}).get("python_env_versions") or {}
    where = plan_data.get("env_prefix")
    how = ("adopted as it is: nothing downloaded, installed or re-owned" if res.get("adopted")
           else "changed" if res.get("changed") else "unchanged")
    detail = (f"torch {versions.get('torch')} (CUDA {versions.get('torch_cuda')}, NCCL {versions.get('nccl')}, "
              f"cuda_available {versions.get('cuda_available')}, {versions.get('device_count')} device(s)) "
              f"from {where}, python {versions.get('python')}; {how}")
    return "ok", detail, {"versions": versions, "env": where}


def toolkits_shown(facts):
    """'none', or each toolkit's path and version with the one exported: '/usr/local/cuda-13.0 13.0,
    /usr/local/cuda 13.0 (CUDA_HOME)'."""
    kits = facts.get("toolkits") or []
    return ", ".join(f"{t.get('path')} {t.get('version')}" + (" (CUDA_HOME)" if t.get("path") == facts.get("cuda_home") else "")
                     for t in kits) or "none"


def _gpu_facts(evs):
    ev = last_of(evs, "gpu_facts", ("ok",))
    return (((ev or {}).get("result") or {}).get("ansible_facts") or {}).get("gpu_facts") or {}


def _health(evs):
    ev = last_of(evs, "gpu_health_info", ("ok",))
    return (ev or {}).get("result") or {}


def judge_gpu(evs, rc):
    facts, health = _gpu_facts(evs), _health(evs)
    checks = health.get("checks") or []
    data = {"gpu_facts": facts, "health_checks": checks}
    if rc != 0 and bad_checks(checks):
        return "failed", ("the role stopped on a GPU finding: " + "; ".join(
            f"{c.get('check')}: {c.get('detail')}" for c in bad_checks(checks) if c.get("status") == "fail")[:600]), data
    if rc != 0:
        return None, None, data
    if not facts.get("gpu_count"):
        return "skipped", (f"no NVIDIA GPU: {facts.get('reason') or 'gpu_count 0'} (the cuda_toolkit role ran its "
                           "no-GPU branch: gpu_count 0 with the reason, no health read)"), data
    names = sorted({g.get("name") or "?" for g in facts.get("gpus") or []})
    detail = (f"{facts['gpu_count']} x {', '.join(names)}, driver {facts.get('driver_version')}, CUDA "
              f"{facts.get('driver_cuda_version')} ({facts.get('driver_cuda_source')}); toolkits "
              f"{toolkits_shown(facts)}; health: {check_counts(checks)}")
    return "ok", detail, data


def judge_nccl_net(evs):
    ev = last_of(evs, "nccl_net_facts", ("ok",))
    res = (ev or {}).get("result") or {}
    env = res.get("env") or {}
    checks = res.get("checks") or []
    detail = (f"{' '.join(f'{k}={v}' for k, v in sorted(env.items()))}; checks: {check_counts(checks)}")
    return "ok", detail, {"env": env, "checks": checks, "socket_ifname": res.get("socket_ifname"),
                          "link": (res.get("interfaces") or {}).get(res.get("socket_ifname") or "")}


def nccl_lines(out):
    """NCCL_DEBUG lines of the ranks' logs, gathered into raw/nccl-debug-info.log."""
    run = Path(out) / "allreduce" / "run"
    lines = []
    for log in sorted(run.glob("rank*.log")):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if " NCCL " in line or line.startswith("NCCL"):
                lines.append(line)
    if lines:
        (Path(out) / "raw").mkdir(parents=True, exist_ok=True)
        (Path(out) / "raw" / "nccl-debug-info.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def judge_allreduce(out, evs, rc, backend):
    result = load(Path(out) / "allreduce" / "result.json")
    report = last_of(evs, "allreduce_smoke")
    data = {"result": result}
    if backend == "nccl":
        data["nccl_lines"] = nccl_lines(out)
    if not result:
        return None, None, data
    rows = result.get("rows") or []
    big = rows[-1] if rows else {}
    nccl = next(iter((result.get("nccl") or {}).values()), {}) or {}
    detail = (f"{result.get('backend')} over {result.get('world_size')} rank(s), sum "
              f"{'correct' if result.get('correct') else 'NOT correct'}, {len(rows)} sizes"
              + (f", largest {big.get('bytes')} B in {big.get('time_us')} us (algbw {big.get('algbw')} GB/s, busbw "
                 f"{big.get('busbw')}: 0 by definition with one rank)" if big else "")
              + (f"; NCCL {nccl.get('version')}, network {nccl.get('network')}" if nccl else "")
              + (f"; {data['nccl_lines']} NCCL_DEBUG lines in raw/nccl-debug-info.log" if data.get("nccl_lines") else ""))
    given = (load(Path(out) / "vars" / f"allreduce-{backend}.json", {}) or {}).get("allreduce_smoke_env") or {}
    if given:
        detail += "; workers given " + " ".join(f"{k}={v}" if k != "LD_LIBRARY_PATH" else "the caller's LD_LIBRARY_PATH"
                                                for k, v in sorted(given.items()))
    if result.get("status") == "fail":
        return "failed", "; ".join(f.get("detail", "") for f in result.get("failures") or [])[:600] or detail, data
    if rc != 0 and report is None:
        return None, None, data
    return "ok", detail, data


def judge_verify(out, rc):
    doc = load(Path(out) / "verify-local.json")
    if not isinstance(doc, dict) or "checks" not in doc:
        return None, None, {}
    s = doc.get("summary") or {}
    bad = bad_checks(doc["checks"])
    detail = (f"document ok={doc.get('ok')} (exit {rc}): {s.get('pass', 0)} pass, {s.get('fail', 0)} fail, "
              f"{s.get('warn', 0)} warn, {s.get('skip', 0)} skip in {doc.get('duration_s')} s"
              + (f"; findings: {', '.join(c['check'] for c in bad)}" if bad else ""))
    # exit 1 is verify reporting this machine's failed checks (listed under findings), not a broken run
    return ("ok" if rc in (0, 1) else "failed"), detail, {"findings": bad, "ok": doc.get("ok")}


def judge(out, name, rc, seconds):
    out = Path(out)
    evs = events(out, name)
    plan_data = load(out / "plan.json", {})
    status, detail, data = None, None, {}
    if name == "prereq":
        pre = load(out / "prereq.json", {})
        status = "failed" if pre.get("problems") or rc != 0 else "ok"
        detail = (pre.get("line") or f"exit {rc}").split(": ", 1)[-1]
        data = {"torch": pre.get("torch")}
    elif name in ("versions", "nvidia_smi"):
        status, detail, data = judge_raw(out, name, rc)
    elif name == "verify_local":
        status, detail, data = judge_verify(out, rc)
    elif name == "expected_busbw":
        doc = load(out / "expected-busbw.json", {})
        status, detail, data = doc.get("status"), doc.get("detail"), {}
    elif name in ("allreduce", "allreduce_gloo"):
        status, detail, data = judge_allreduce(out, evs, rc, "nccl" if name == "allreduce" else "gloo")
    elif name == "gpu":
        status, detail, data = judge_gpu(evs, rc)
    elif rc == 0:
        status, detail, data = {"preflight": lambda: judge_preflight(evs),
                                "python_env": lambda: judge_python_env(evs, plan_data),
                                "nccl_net": lambda: judge_nccl_net(evs)}[name]()
    if _timed_out(rc) and status != "failed":
        status, detail = "failed", f"timed out after {seconds:.0f} s (its bound)" + (f"; {detail}" if detail else "")
    elif status is None or (rc != 0 and status == "ok" and name not in ("verify_local", "prereq")):
        status = "failed"
        detail = failure(evs) or log_error(out, name) or f"exit {rc}"
    return step_record(out, name, status, seconds, detail, data, rc)


def show(rec):
    print(f"[{rec['status']}] {rec['step']} ({rec['seconds']:.1f} s): {rec['detail']}", flush=True)


# ---------------------------------------------------------------- expected busbw

def expected(out):
    """The busbw this node's hardware should give, alone and as one of two such nodes (bandwidth.py)."""
    out = Path(out)
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.provision.cluster.plugins.module_utils.allreduce import bandwidth as B

    gpu_evs = events(out, "gpu")
    facts = _gpu_facts(gpu_evs)
    health = _health(gpu_evs).get("gpu_health") or {}
    net = judge_nccl_net(events(out, "nccl_net"))[2]
    fabric = None
    for step in ("nccl_net",):
        ev = last_of(events(out, step), "fabric_health_info", ("ok",))
        if ev:
            fabric = (ev.get("result") or {}).get("fabric_health")
    link = net.get("link") or {}
    eth = B.link_gbps(link)
    cap = B.capability_from_facts(health, fabric, eth)
    alone = B.expected_busbw([cap])
    pair = B.expected_busbw([cap, cap])
    pcie = [(g.get("pcie") or {}) for g in health.get("gpus") or []]
    doc = {"capability": cap, "one_node": alone, "two_such_nodes": pair, "nic": link, "nic_gbps": eth,
           "pcie": pcie, "gpu_count": facts.get("gpu_count") or health.get("gpu_count") or 0}
    gpus = doc["gpu_count"]
    parts = [f"{gpus} GPU(s)"]
    if cap.get("intra"):
        parts.append(f"intra-node {cap['intra']['busbw']} GB/s ({cap['intra']['basis']})")
    if cap.get("inter"):
        parts.append(f"inter-node {cap['inter']['busbw']} GB/s ({cap['inter']['basis']})")
    else:
        parts.append(f"inter-node: {cap.get('inter_reason')}")
    for p in pcie[:1]:
        if p.get("gen_max") and (p.get("width_current") or p.get("width_max")):
            parts.append(f"PCIe Gen{p.get('gen_current')}/{p.get('gen_max')} x{p.get('width_current')}/{p.get('width_max')} "
                         f"(model {B.pcie_busbw(p.get('gen_max'), p.get('width_current') or p.get('width_max'))} GB/s host<->GPU)")
    parts.append("this node alone: " + (f"{alone['busbw']} GB/s" if alone.get("busbw") else f"none ({alone.get('reason')})"))
    parts.append("two such nodes: " + (f"{pair['busbw']} GB/s ({pair['bound']})" if pair.get("busbw") else f"none ({pair.get('reason')})"))
    if not gpus:
        doc["status"] = "skipped"
        doc["detail"] = (f"no NVIDIA GPU: {facts.get('reason') or load(out / 'plan.json', {}).get('gpu_reason') or 'none read'}"
                         f" (the model ran: {'; '.join(parts[1:])})")
    else:
        doc["status"] = "ok"
        doc["detail"] = "; ".join(parts)
    dump(out / "expected-busbw.json", doc)
    return 0


# ---------------------------------------------------------------- reap

def reap(run_root):
    """Kill the all-reduce supervisor's process group when a killed step left it running."""
    try:
        pid = int((Path(run_root) / "current.pid").read_text().strip())
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return 0
    if b"allreduce_worker.py" not in cmd:
        return 0
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except OSError:
            return 0
        time.sleep(2)
    print(f"killed the all-reduce supervisor {pid} a stopped step left behind", flush=True)
    return 0


# ---------------------------------------------------------------- summary

def summary(out, seconds):
    out = Path(out)
    recs = {}
    try:
        for line in (out / "steps.jsonl").read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            recs[rec["step"]] = rec
    except (OSError, ValueError):
        pass
    pre = load(out / "prereq.json", {})
    plan_data = load(out / "plan.json", {})
    torch = pre.get("torch") or {}
    ordered = [recs[n] for n, _t, _g in STEPS if n in recs]
    failed = [r for r in ordered if r["status"] == "failed"]
    findings = []
    for r in ordered:
        for c in (r.get("data") or {}).get("findings") or []:
            findings.append(f"{r['step']}: {c.get('status')} {c.get('check')}: {c.get('detail')}")
        for c in bad_checks((r.get("data") or {}).get("health_checks")):
            findings.append(f"{r['step']}: {c.get('status')} {c.get('check')}: {c.get('detail')}")
        for c in bad_checks((r.get("data") or {}).get("checks")):
            findings.append(f"{r['step']}: {c.get('status')} {c.get('check')}: {c.get('detail')}")
    doc = {"schema": 1, "started": os.environ.get("GPU_PROOF_STARTED"), "seconds": round(float(seconds), 1),
           "budget_s": int(os.environ.get("GPU_PROOF_BUDGET") or 0), "hostname": socket.gethostname(),
           "node": plan_data.get("node"), "gpu_count": plan_data.get("gpu_count"),
           "gpu_reason": plan_data.get("gpu_reason"), "python": pre.get("python"), "torch": torch.get("torch"),
           "ansible_core": ((pre.get("imports") or {}).get("ansible") or {}).get("version"),
           "installed_from_wheels": pre.get("installed_from_wheels") or [],
           "steps": ordered, "findings": findings, "failed": [r["step"] for r in failed],
           "ok": not failed, "exit_code": 2 if "prereq" in [r["step"] for r in failed] else 1 if failed else 0}
    gpu_rec = (recs.get("gpu") or {}).get("data") or {}
    names = [g.get("name") for g in (gpu_rec.get("gpu_facts") or {}).get("gpus") or []]
    dump(out / "summary.json", doc)
    lines = [f"GPU proof on {doc['hostname']} (inventory node {doc['node']}), started {doc['started']}, "
             f"{doc['seconds']} s of a {doc['budget_s']} s budget",
             (f"GPUs: {doc['gpu_count']}" + (f" ({doc['gpu_reason']})" if doc["gpu_reason"] else "")
              + (f" ({', '.join(names)})" if names else "") if plan_data else "GPUs: not read (the run stopped first)")
             + (f"; torch {doc['torch']} from {torch.get('prefix')}" if doc["torch"] else "; torch: none")
             + f"; ansible-core {doc['ansible_core'] or 'none'}"
             + (f" (from the wheelhouse: {', '.join(doc['installed_from_wheels'])})" if doc["installed_from_wheels"] else ""),
             "", f"{'step':<15} {'status':<8} {'seconds':>7}  detail"]
    for r in ordered:
        lines.append(f"{r['step']:<15} {r['status']:<8} {r['seconds']:>7.1f}  {r['detail']}")
    if findings:
        lines += ["", "findings on this machine (checks that failed or warned; the steps themselves ran):"]
        lines += [f"  {f}"[:400] for f in findings]
    counts = {s: sum(1 for r in ordered if r["status"] == s) for s in ("ok", "skipped", "failed")}
    lines += ["", f"result: {counts['ok']} ok, {counts['skipped']} skipped, {counts['failed']} failed"
              + (f" ({', '.join(doc['failed'])})" if failed else "") + f"; exit {doc['exit_code']}",
              f"outputs: {os.environ.get('GPU_PROOF_PACKED_AS') or out}"]
    text = "\n".join(lines) + "\n"
    (out / "summary.txt").write_text(text, encoding="utf-8")
    print(text, end="", flush=True)
    return doc["exit_code"]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "prereq":
        return prereq(*args[:3])
    if cmd == "plan":
        return plan(args[0])
    if cmd == "vars":
        return allreduce_vars(args[0], args[1])
    if cmd == "step":
        show(judge(args[0], args[1], int(args[2]), float(args[3])))
        return 0
    if cmd == "skip":
        show(step_record(args[0], args[1], "skipped", 0, args[2]))
        return 0
    if cmd == "expected":
        return expected(args[0])
    if cmd == "reap":
        return reap(args[0])
    if cmd == "summary":
        return summary(args[0], float(args[1]))
    print(f"unknown command {cmd}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
