#!/usr/bin/env python3
"""Benchmark: site.yml and provision verify at 2, 8 and 32 nodes in one run (issue 24, Scale).

1. Fresh labs hx-s<N> (`--prefix`) for every N, and site.yml once on each from bare nodes, **all
   labs at once** (on a shared 2-core machine the fresh runs, 32 torch installs, take most of the
   hour; run one after the other they would not fit): the fresh times are therefore measured side by
   side and are not comparable with each other; the wheel bytes each node got from the controller
   and from another node (python_env_result.wheel_bytes, read from the fact cache) are exact.
2. Then, one N after the other, nothing else of ours running: the fixed 10-task reference play
   (benchmarks/ref_play.yml: Ansible's own floor on this machine at this N), the idempotent
   site.yml re-run and `provision verify` (`--repeat` times each, median; every run kept).
3. The labs are taken down (32 nodes hold memory), unless --keep. Prints per N the times, the ratios to the reference play, and the normalized fan-out
of each against the smallest N: (X_N / ref_N) / (X_2 / ref_2); 1.0 is a cost per node flat in N.

    python benchmarks/scale.py [--nodes 2 8 32] [--repeat 3] [--repeat-large 2] [--out FILE] [--keep]
    python benchmarks/scale.py --skip-first ...   # the labs of an interrupted run, converged: time only

Each row is printed (JSON) as soon as it is measured and appended to --out, so an interrupted run
keeps what it measured. The load average of the machine is recorded before and after each phase.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from site_rerun import BIN, RECAP, REPO, env_for, lab_is_up, playbook, run  # noqa: E402


def load() -> float:
    return round(os.getloadavg()[0], 2)


def wheel_bytes(lab: str) -> dict[str, dict[str, int]]:
    """node -> {controller, peer}: the wheel bytes python_env moved in the last run (fact cache)."""
    out = {}
    for path in sorted(glob.glob(os.path.expanduser(f"~/.cache/provision/facts-{lab}/*"))):
        try:
            with open(path, encoding="utf-8") as handle:
                facts = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(facts.get("__payload__"), str):  # ansible-core 2.19's cache entry: the facts as a JSON string
            facts = json.loads(facts["__payload__"])
        got = (facts.get("python_env_result") or {}).get("wheel_bytes")
        if isinstance(got, dict):
            node = os.path.basename(path).split("_", 1)[-1]
            out[node] = {k: int(got.get(k) or 0) for k in ("controller", "peer")}
    return out


def verify(env: dict[str, str]) -> tuple[float, int, int]:
    secs, proc = run([str(BIN / "provision"), "verify", "-i", str(REPO / "inventory/lab"), "--json"], env, timeout=900)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = {"checks": []}
    failed = [f"{c['node']}: {c['check']}: {c['detail']}" for c in doc.get("checks", []) if c.get("status") == "fail"]
    if proc.returncode != 0:
        sys.stderr.write("verify failed:\n" + "\n".join(failed[:20]) + proc.stderr[-2000:] + "\n")
    return secs, proc.returncode, len(doc.get("checks", []))


ELAPSED = re.compile(r"\(\d+:\d+:[\d.]+\)\s+(\d+):(\d+):([\d.]+) \*+\s*$", re.M)


def first_from_log(row: dict) -> dict:
    """A fresh site.yml already run by an earlier `scale.py` (its log /tmp/scale-site-first-<lab>.log):
    its wall time (the profile_tasks clock on its last line), failures and wheel bytes. A lab converged
    some other way (no such log: e.g. site_rerun.py's) has no fresh figures (None), only its wheel bytes."""
    per_node = wheel_bytes(row["lab"])
    wheels = {"controller": sum(v["controller"] for v in per_node.values()),
              "peer": sum(v["peer"] for v in per_node.values()), "nodes": len(per_node)}
    path = Path(f"/tmp/scale-site-first-{row['lab']}.log")
    if not path.exists():
        return dict(site_first_s=None, site_first_rc=None, site_first_changed=None, site_first_from_log=False,
                    wheel_bytes=wheels)
    text = path.read_text(encoding="utf-8", errors="replace")
    recap = RECAP.findall(text)
    clock = ELAPSED.findall(text)
    h, m, sec = clock[-1] if clock else ("0", "0", "0")
    return dict(site_first_s=round(int(h) * 3600 + int(m) * 60 + float(sec), 1),
                site_first_rc=0 if recap and not any(int(r[3]) or int(r[4]) for r in recap) else 1,
                site_first_changed=sum(int(r[2]) for r in recap), site_first_from_log=True,
                wheel_bytes=wheels)


def converge_all(nodes: list[int], args) -> dict[int, dict]:
    """Fresh labs, then site.yml on all of them at once; per N: lab_up_s, site_first_s, wheel_bytes."""
    rows: dict[int, dict] = {}
    if args.skip_first:
        for n in nodes:
            rows[n] = {"nodes": n, "lab": f"{args.prefix}{n}", "load_before": load()}
            rows[n].update(first_from_log(rows[n]))
            print(json.dumps({k: rows[n][k] for k in ("nodes", "site_first_s", "site_first_rc", "wheel_bytes")}),
                  flush=True)
        return rows
    for n in nodes:
        lab = f"{args.prefix}{n}"
        env = env_for(lab)
        rows[n] = {"nodes": n, "lab": lab, "load_before": load()}
        if args.reuse_labs and lab_is_up(lab, n, env):
            continue
        run([str(BIN / "provision"), "lab", "down", "--name", lab], env)
        shutil.rmtree(os.path.expanduser(f"~/.cache/provision/facts-{lab}"), ignore_errors=True)
        secs, proc = run([str(BIN / "provision"), "lab", "up", "--name", lab, "--nodes", str(n)], env)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        rows[n]["lab_up_s"] = round(secs, 1)
    procs = {}
    for n in nodes:
        lab = rows[n]["lab"]
        log = open(f"/tmp/scale-site-first-{lab}.log", "w", encoding="utf-8")  # noqa: SIM115
        procs[n] = (time.monotonic(), log, subprocess.Popen(
            # the lab inventory raises the waits of a lab larger than this machine (plugins/inventory/lab.py)
            [str(BIN / "ansible-playbook"), str(REPO / "site.yml"), "-i", str(REPO / "inventory/lab")],
            cwd=REPO, env=env_for(lab), stdout=log, stderr=subprocess.STDOUT, text=True))
    for n, (t0, log, proc) in procs.items():
        rc = proc.wait()
        log.close()
        text = Path(log.name).read_text(encoding="utf-8", errors="replace")
        recap = RECAP.findall(text)
        per_node = wheel_bytes(rows[n]["lab"])
        rows[n].update(site_first_s=round(time.monotonic() - t0, 1), site_first_rc=rc,
                       site_first_changed=sum(int(r[2]) for r in recap),
                       site_first_failed=sum(int(r[4]) + int(r[3]) for r in recap),
                       wheel_bytes={"controller": sum(v["controller"] for v in per_node.values()),
                                    "peer": sum(v["peer"] for v in per_node.values()), "nodes": len(per_node)},
                       load_after_first=load())
        print(json.dumps({k: rows[n][k] for k in ("nodes", "site_first_s", "site_first_rc", "wheel_bytes")}),
              flush=True)
        if rc != 0:
            sys.stderr.write(text[-4000:])
    return rows


def measure(n: int, row: dict, args) -> dict:
    lab = row["lab"]
    env = env_for(lab)
    repeat = args.repeat if n < 16 else args.repeat_large
    ref = [playbook("benchmarks/ref_play.yml", lab)[0] for _ in range(repeat)]
    reruns = [playbook("site.yml", lab) for _ in range(repeat)]
    ver = [verify(env) for _ in range(repeat)]
    row.update({
        "ref_s": round(statistics.median(ref), 2), "ref_runs_s": [round(x, 2) for x in ref],
        "site_rerun_s": round(statistics.median(r[0] for r in reruns), 2),
        "site_rerun_runs_s": [round(r[0], 2) for r in reruns], "site_rerun_changed": max(r[1] for r in reruns),
        "verify_s": round(statistics.median(v[0] for v in ver), 2), "verify_runs_s": [round(v[0], 2) for v in ver],
        "verify_rc": max(v[1] for v in ver), "verify_checks": ver[-1][2], "load_after": load(),
    })
    if not args.keep:
        run([str(BIN / "provision"), "lab", "down", "--name", lab], env)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 8, 32])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each timing below 16 nodes")
    ap.add_argument("--repeat-large", type=int, default=2, help="runs of each timing from 16 nodes")
    ap.add_argument("--prefix", default="hx-s", help="lab name prefix (lab = PREFIX<N>)")
    ap.add_argument("--out", default="", help="append each row (JSON) to this file")
    ap.add_argument("--keep", action="store_true", help="leave the labs up")
    ap.add_argument("--reuse-labs", action="store_true", help="use a lab that is up as it is")
    ap.add_argument("--skip-first", action="store_true",
                    help="the labs are up and converged by an earlier run: take its fresh site.yml figures from "
                         "its logs (/tmp/scale-site-first-LAB.log) and the fact cache, and only time")
    args = ap.parse_args()
    t0 = time.monotonic()
    rows = converge_all(args.nodes, args)
    for n in args.nodes:
        if rows[n].get("site_first_rc") and not args.skip_first:
            raise SystemExit(f"site.yml failed on {rows[n]['lab']} (rc={rows[n]['site_first_rc']})")
    for n in args.nodes:
        row = measure(n, rows[n], args)
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
    base = rows[args.nodes[0]]
    print(f"\n{'nodes':>5} {'ref s':>7} {'site 1st s':>10} {'re-run s':>9} {'re/ref':>7} {'verify s':>9} "
          f"{'ver/ref':>8} {'fan re':>7} {'fan ver':>8} {'ctrl MB':>8} {'peer MB':>8}")
    for n, r in rows.items():
        fan_re = (r["site_rerun_s"] / r["ref_s"]) / (base["site_rerun_s"] / base["ref_s"])
        fan_ver = (r["verify_s"] / r["ref_s"]) / (base["verify_s"] / base["ref_s"])
        wb = r["wheel_bytes"]
        first = "-" if r["site_first_s"] is None else f"{r['site_first_s']:.1f}"
        print(f"{n:>5} {r['ref_s']:>7.2f} {first:>10} {r['site_rerun_s']:>9.2f} "
              f"{r['site_rerun_s'] / r['ref_s']:>7.2f} {r['verify_s']:>9.2f} {r['verify_s'] / r['ref_s']:>8.2f} "
              f"{fan_re:>7.2f} {fan_ver:>8.2f} {wb['controller'] / 1e6:>8.1f} {wb['peer'] / 1e6:>8.1f}")
    print("fresh site.yml (all labs at once): " + ", ".join(
        f"{n} nodes {rows[n]['site_first_s']:.0f} s" for n in rows if rows[n]["site_first_s"] is not None))
    print(f"total {time.monotonic() - t0:.0f} s; verify rc per N: {[rows[n]['verify_rc'] for n in rows]}; "
          f"re-run changed per N: {[rows[n]['site_rerun_changed'] for n in rows]}")
    return 0 if all(r["verify_rc"] == 0 for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
