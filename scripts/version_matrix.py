#!/usr/bin/env python3
"""The ansible-core version matrix: each supported ansible-core in its own venv, one line each.

For every version (default: 2.16 2.17 2.18 2.19, the newest release of each on the package
index; 2.20 and later need Python >= 3.12 and do not install on this machine's 3.11):

- sanity: `ansible-test sanity --venv` on the collection as `ansible-galaxy collection build`
  ships it (scripts/collection_tree.sh), with that version's tests/sanity/ignore-X.Y.txt;
- units:  `pytest -m "not lab and not molecule"` (the whole fast suite, plugins and CLI) with
  that ansible-core imported;
- doc:    `ansible-doc` on every plugin of the collection (each type's list must name every
  plugin file, and each one's documentation must load);
- lab:    site.yml on a fresh 2-node lab (`provision lab up --nodes 2`), for the oldest and the
  newest version only (--lab-versions), then the lab is taken down.

Venvs: ~/.cache/provision/matrix/ansible-core-X.Y (under $XDG_CACHE_HOME when set) holds ansible-core X.Y and its own
dependencies; a .pth file appends this checkout's .venv site-packages (pytest, torch, the
provision package...) after them, so that nothing but ansible-core and its requirements is
installed per version. They are kept between runs (a re-run installs nothing; pip's cache makes
a fresh one quick). Output: one line per version, `ansible-core X.Y.Z: sanity ok (N s), units
ok (...), doc ok (...), lab ok (...)`; the exit status is 1 when any cell failed. Logs of each
step are kept in --logs (default /tmp/provision-matrix).

The oldest and the newest version are the claim's bounds: their cells, and ansible-doc of every
version, come first (the oldest's lab run first: it is the longest). The versions between them come
last. With --budget SECONDS a cell whose usual cost (COST) would end past the budget is not started and
says so in its line, the bounds' cells too; only ansible-doc (seconds) runs whatever the budget (CI passes
what is left of its time; a run by hand without --budget runs every cell). --jobs cells run at
once (default 2: each cell is one process, mostly on one core; the venvs are made first, one by one).

Usage: python scripts/version_matrix.py [--versions 2.16,2.19] [--lab-versions oldest,newest|none]
       [--skip sanity,units,doc,lab] [--lab-prefix hc-] [--budget SECONDS]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAIN_VENV = REPO / ".venv"
DEFAULT_VERSIONS = ["2.16", "2.17", "2.18", "2.19"]
PLUGIN_TYPES = ["module", "inventory", "lookup", "filter", "cache", "callback"]
CELLS = ["sanity", "units", "doc", "lab"]
# a cell's cost on the 2-core CI machine (seconds), for --budget: about twice what a quiet one took
# (2026-11-25: sanity 36-45 s, ansible-doc 4-6 s, units 97-101 s, the lab's site.yml 94 s with the
# image and wheels already cached by scripts/test.sh's lab tests)
COST = {"sanity": 90, "doc": 15, "units": 200, "lab": 240}


def summary_line(all_ok: bool, ran: int, skipped: int, seconds: float, logs: Path) -> str:
    """The matrix's last line: the verdict, and how many cells it rests on (RAN cells run here, SKIPPED not
    started for the budget: a run whose cells were all over the budget is not "all ok": it checked nothing)."""
    verdict = "FAILED" if not all_ok else ("all ok" if ran else "nothing run")
    extra = f"; {skipped} not run: over the budget" if skipped else ""
    return f"version matrix: {verdict} ({ran} cells run{extra}) in {seconds:.0f} s (logs in {logs})"


def plan_cells(versions: list[str], lab_versions: set[str]) -> list[tuple[str, str, bool]]:
    """(version, cell, required) in the order the workers take them. Required: the oldest and newest
    version's cells and ansible-doc of every version, the oldest's lab first; then the versions between
    them (sanity, units, a lab if asked for). Under --budget only ansible-doc runs whatever the time."""
    ends = [versions[0], versions[-1]] if len(versions) > 1 else versions[:1]
    plan = [(versions[0], "lab", True)] if versions[0] in lab_versions else []
    plan += [(v, "doc", True) for v in versions]
    plan += [(v, "sanity", True) for v in ends]
    for v in ends:
        plan += [(v, "units", True)] + ([(v, "lab", True)] if v in lab_versions and v != versions[0] else [])
    for v in versions[1:-1]:
        plan += [(v, "sanity", False), (v, "units", False)] + ([(v, "lab", False)] if v in lab_versions else [])
    return plan


def log_path(logs: Path, version: str, cell: str) -> Path:
    return logs / f"{version}-{cell}.log"


def run(argv, *, log: Path, env=None, cwd=REPO, timeout=1800) -> int:
    with open(log, "a", encoding="utf-8") as fh:
        fh.write("$ %s\n" % " ".join(map(str, argv)))
        fh.flush()
        try:
            return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False).returncode
        except subprocess.TimeoutExpired:
            fh.write(f"\ntimed out after {timeout} s\n")
            return 124


def tail(log: Path, n=1) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def main_site_packages() -> Path:
    py = MAIN_VENV / "bin" / "python"
    out = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def make_venv(version: str, base: Path, log: Path) -> tuple[Path, str]:
    """The venv for ansible-core `version` (X.Y) -> (its path, the exact ansible-core version)."""
    venv = base / f"ansible-core-{version}"
    py = venv / "bin" / "python"
    stamp = venv / ".provision-matrix"
    want = f"ansible-core=={version}.*"
    if not (py.exists() and stamp.exists() and stamp.read_text().strip() == want):
        shutil.rmtree(venv, ignore_errors=True)
        if run([sys.executable, "-m", "venv", venv], log=log) != 0:
            raise RuntimeError("cannot create the venv")
        if run([py, "-m", "pip", "install", "-q", want], log=log, timeout=900) != 0:
            raise RuntimeError(f"pip install {want} failed")
        stamp.write_text(want + "\n")
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # after the venv's own packages: the test tools and the provision package of this checkout (written
    # on every run: the venvs are shared by every checkout on the machine)
    Path(purelib, "zz_provision_matrix.pth").write_text(f"{main_site_packages()}\n{REPO / 'src'}\n")
    # the CLI the tests run (`provision ...`), with this venv's python, so with its ansible-core
    script = venv / "bin" / "provision"
    if not script.exists():
        script.write_text(f"#!{py}\nimport sys\nfrom provision.cli import main\nsys.exit(main())\n")
        script.chmod(0o755)
    exact = subprocess.run([str(py), "-c", "import ansible.release as r; print(r.__version__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return venv, exact


def venv_env(venv: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["ANSIBLE_NOCOLOR"] = "1"
    env.update(extra)
    return env


def cell_sanity(venv: Path, version: str, log: Path, work: Path) -> tuple[bool, str]:
    ignore = REPO / "tests" / "sanity" / f"ignore-{version}.txt"
    if not ignore.exists():
        return False, f"no {ignore.relative_to(REPO)}"
    py = venv / "bin" / "python"
    run([py, REPO / "scripts" / "ansible_test_pip.py"], log=log, env=venv_env(venv))
    base = work / f"sanity-{version}"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "collection_tree.sh"), str(base)], capture_output=True,
                          text=True, env=venv_env(venv, ANSIBLE_GALAXY=str(venv / "bin" / "ansible-galaxy")), check=False)
    if proc.returncode != 0:
        log.write_text(proc.stdout + proc.stderr)
        return False, "collection build failed"
    tree = proc.stdout.strip().splitlines()[-1]
    rc = run([venv / "bin" / "ansible-test", "sanity", "--venv", "--python", "%d.%d" % sys.version_info[:2],
              "--color", "no"], log=log, cwd=tree, env=venv_env(venv))
    text = log.read_text(errors="replace")
    tests = text.count('Running sanity test "')
    errors = [ln for ln in text.splitlines() if ln.startswith("ERROR: ") and not ln.startswith("ERROR: Found")]
    if rc == 0:
        return True, f"{tests} tests"
    return False, f"{len(errors)} errors, e.g. {errors[0][7:160] if errors else tail(log)}"


def cell_units(venv: Path, version: str, log: Path, work: Path) -> tuple[bool, str]:
    # the GPU proof adopts the torch of the venv it runs in, and this venv has torch only through a .pth into
    # the checkout's .venv: its python_env step finds none there (torch None) and its gloo all-reduce fails.
    # scripts/test.sh runs it with the newest ansible-core, in the venv that holds torch
    rc = run([venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not lab and not molecule",
              "--ignore", "tests/integration/test_gpu_proof.py", "tests"], log=log, env=venv_env(venv))
    summary = next((ln.strip("= ") for ln in reversed(log.read_text(errors="replace").splitlines())
                    if " passed" in ln or " failed" in ln or " error" in ln), tail(log))
    return rc == 0, summary.split(" in ")[0]


def plugin_files(kind: str) -> set[str]:
    folder = {"module": "modules"}.get(kind, kind)
    if kind == "filter":
        return set()  # filters are named by the FilterModule classes, not the files
    return {Path(p).stem for p in glob.glob(str(REPO / "plugins" / folder / "*.py")) if not p.endswith("__init__.py")}


def cell_doc(venv: Path, version: str, log: Path, work: Path) -> tuple[bool, str]:
    env = venv_env(venv, ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([str(REPO / "collections"),
                                                                   os.path.expanduser("~/.ansible/collections")]))
    doc = venv / "bin" / "ansible-doc"
    total, problems = 0, []
    for kind in PLUGIN_TYPES:
        proc = subprocess.run([str(doc), "-t", kind, "-l", "provision.cluster", "-j"], capture_output=True, text=True,
                              env=env, cwd=REPO, check=False)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"$ ansible-doc -t {kind} -l provision.cluster -j\n{proc.stdout[-2000:]}{proc.stderr}\n")
        if proc.returncode != 0:
            problems.append(f"{kind} list rc {proc.returncode}")
            continue
        listed = json.loads(proc.stdout or "{}")
        names = sorted(listed)
        missing = {f for f in plugin_files(kind)} - {n.rsplit(".", 1)[-1] for n in names}
        if missing:
            problems.append(f"{kind} not listed: {', '.join(sorted(missing))}")
        if not names:
            continue
        proc = subprocess.run([str(doc), "-t", kind, "-j", *names], capture_output=True, text=True, env=env, cwd=REPO,
                              check=False)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"$ ansible-doc -t {kind} -j {' '.join(names)}\nrc {proc.returncode}\n{proc.stderr}\n")
        docs = json.loads(proc.stdout or "{}") if proc.returncode == 0 else {}
        bad = [n for n in names if not (docs.get(n) or {}).get("doc")]
        if proc.returncode != 0 or bad or proc.stderr.strip():
            problems.append(f"{kind}: rc {proc.returncode} {', '.join(bad[:3])} {proc.stderr.strip()[:120]}")
        total += len(names) - len(bad)
    return not problems, (f"{total} plugins" if not problems else "; ".join(problems))


def cell_lab(venv: Path, version: str, log: Path, work: Path, prefix: str) -> tuple[bool, str]:
    name = f"{prefix}mx{version.replace('.', '')}"
    provision = MAIN_VENV / "bin" / "provision"
    env = venv_env(venv, PROVISION_LAB_NAME=name,
                   ANSIBLE_CACHE_PLUGIN_CONNECTION=os.path.expanduser(f"~/.cache/provision/facts-{name}"))
    run([provision, "lab", "down", "--name", name], log=log, env=env)
    try:
        if run([provision, "lab", "up", "--name", name, "--nodes", "2"], log=log, env=env, timeout=900) != 0:
            return False, f"lab up failed: {tail(log)}"
        rc = run([venv / "bin" / "ansible-playbook", REPO / "site.yml", "-i", REPO / "inventory" / "lab"], log=log,
                 env=env, timeout=1800)
        recap = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if "ok=" in ln and "failed=" in ln]
        failed = [ln for ln in recap if "failed=0" not in ln or "unreachable=0" not in ln]
        ok = rc == 0 and len(recap) == 2 and not failed
        return ok, "site.yml on 2 nodes" + ("" if ok else f" rc {rc}: {(failed or [tail(log)])[0][:160]}")
    finally:
        run([provision, "lab", "down", "--name", name], log=log, env=env)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--versions", default=",".join(DEFAULT_VERSIONS))
    ap.add_argument("--lab-versions", default="oldest,newest",
                    help="versions that also run site.yml on a lab: X.Y,... or oldest,newest or none")
    ap.add_argument("--skip", default="", help="cells to leave out: sanity,units,doc,lab")
    ap.add_argument("--lab-prefix", default=os.environ.get("PROVISION_TEST_LAB_PREFIX", "t-"))
    ap.add_argument("--main-covers", action="store_true",
                    help="scripts/test.sh already ran (and passed) with the checkout's .venv: for the version it has, "
                         "the units and lab cells are that run's (the same tests, site.yml on a 2-node lab in test_site)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds this run may take: a cell whose usual cost would go past it is reported as not run")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="cells run at once (default: 2, or 1 on one core); each is one process")
    from provision.paths import cache_dir  # XDG_CACHE_HOME, as every cache of provision

    ap.add_argument("--venvs", default=str(cache_dir() / "matrix"))
    ap.add_argument("--logs", default="/tmp/provision-matrix")
    args = ap.parse_args()
    versions = [v for v in args.versions.split(",") if v]
    lab_versions = set()
    for item in args.lab_versions.split(","):
        if item == "oldest":
            lab_versions.add(versions[0])
        elif item == "newest":
            lab_versions.add(versions[-1])
        elif item and item != "none":
            lab_versions.add(item)
    skip = {s for s in args.skip.split(",") if s}
    logs, base = Path(args.logs), Path(args.venvs)
    logs.mkdir(parents=True, exist_ok=True)
    base.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"provision-matrix-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    main_core = ""
    if args.main_covers:
        main_core = subprocess.run([str(MAIN_VENV / "bin" / "python"), "-c", "import ansible.release as r; print(r.__version__)"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    # the bounds' cells first (the oldest's lab first), the versions between them last; --budget may leave any out
    planned = plan_cells(versions, lab_versions)
    plan = [(v, c) for v, c, _required in planned]
    results: dict[tuple[str, str], str] = {}
    venvs: dict[str, tuple[Path, str] | None] = {}
    all_ok = True
    counts = {"ran": 0, "skipped": 0}  # cells run here, cells not started for the budget
    lock = threading.Lock()
    # the venvs first, one after the other (pip; quick once cached), then the cells, --jobs at a time
    for version in versions:
        for old in logs.glob(f"{version}-*.log"):
            old.unlink()
        t0 = time.monotonic()
        try:
            venvs[version] = make_venv(version, base, log_path(logs, version, "venv"))
            results[(version, "venv")] = f"venv {time.monotonic() - t0:.0f} s"
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            venvs[version] = None
            results[(version, "venv")] = f"venv failed ({exc}; {log_path(logs, version, 'venv')})"
            all_ok = False
    todo = list(plan)
    # two sanity runs at once would share ansible-test's own venvs (~/.ansible/test/venv): one at a time,
    # the other worker takes the next cell of another kind meanwhile
    running: set[str] = set()

    def take() -> tuple[str, str] | None:
        with lock:
            for item in todo:
                if not (item[1] == "sanity" and "sanity" in running):
                    todo.remove(item)
                    running.add(item[1])
                    return item
            return None if not todo else ("", "wait")

    def worker() -> None:
        while True:
            item = take()
            if item is None:
                return
            version, cell = item
            if cell == "wait":
                time.sleep(0.5)
                continue
            try:
                run_cell(version, cell)
            finally:
                with lock:
                    running.discard(cell)

    def run_cell(version: str, cell: str) -> None:
        nonlocal all_ok
        if venvs[version] is None:
            return
        venv, exact = venvs[version]
        if cell in skip or (cell == "lab" and version not in lab_versions):
            results[(version, cell)] = f"{cell} -"
            return
        if cell in ("units", "lab") and exact == main_core:
            results[(version, cell)] = f"{cell} ok (scripts/test.sh, same ansible-core)"
            return
        if (args.budget is not None and cell != "doc"
                and time.monotonic() - start + COST[cell] > args.budget):
            results[(version, cell)] = f"{cell} - (not run: over the --budget of {args.budget:.0f} s)"
            with lock:
                counts["skipped"] += 1
            return
        log = log_path(logs, version, cell)
        t0 = time.monotonic()
        try:
            if cell == "lab":
                ok, what = cell_lab(venv, version, log, work, args.lab_prefix)
            else:
                ok, what = globals()[f"cell_{cell}"](venv, version, log, work)
        except Exception as exc:  # a broken cell is a failed cell, the others still run
            ok, what = False, f"{type(exc).__name__}: {exc}"
        with lock:
            all_ok &= ok
            counts["ran"] += 1
            results[(version, cell)] = f"{cell} {'ok' if ok else 'FAIL'} ({what}; {time.monotonic() - t0:.0f} s)"
            print(f"  {version} {results[(version, cell)]}", file=sys.stderr, flush=True)

    try:
        threads = [threading.Thread(target=worker) for _ in range(max(1, args.jobs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for version in versions:
        exact = (venvs.get(version) or (None, version))[1]
        cells = [results[(version, c)] for c in ["venv", *CELLS] if (version, c) in results]
        print(f"ansible-core {exact}: " + ", ".join(cells), flush=True)
    print(summary_line(all_ok, counts["ran"], counts["skipped"], time.monotonic() - start, logs), flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
