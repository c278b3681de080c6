#!/usr/bin/env python3
"""Benchmark: site.yml re-run time and fan-out, 2 vs 8 lab nodes (issue: performance).

In one run, for N in (2, 8): bring up a fresh lab of N nodes, run site.yml once (first
contact over podman, later over SSH), then time (a) benchmarks/ref_play.yml, a fixed 10-task
idempotent play, and (b) the idempotent site.yml re-run, each `--repeat` times (median).
Prints the re-run times, changed counts and the normalized fan-out
(site8/ref8) / (site2/ref2): 1.0 means site.yml costs no more per node at 8 than at 2,
relative to Ansible's own floor on this machine.

    python benchmarks/site_rerun.py [--nodes 2 8] [--repeat 3] [--keep] [--verify] [--reuse-labs]

--reuse-labs keeps a lab bench<N> that is already up (from an earlier --keep) instead of making it
anew; its first site.yml run then is a re-run too (it brings the lab to the current code).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def env_for(lab: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "PROVISION_LAB_NAME": lab,
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": os.path.expanduser(f"~/.cache/provision/facts-{lab}"),
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    })
    return env


def run(argv: list[str], env: dict[str, str], timeout: float = 3600) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return time.monotonic() - t0, proc


def playbook(path: str, lab: str, extra: tuple[str, ...] = ()) -> tuple[float, int, int]:
    secs, proc = run([str(BIN / "ansible-playbook"), str(REPO / path), "-i", str(REPO / "inventory/lab"), *extra],
                     env_for(lab))
    recap = RECAP.findall(proc.stdout)
    if proc.returncode != 0 or not recap:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-2000:])
        raise SystemExit(f"{path} failed on lab {lab} (rc={proc.returncode})")
    changed = sum(int(r[2]) for r in recap)
    return secs, changed, len(recap)


def lab_is_up(lab: str, n: int, env: dict[str, str]) -> bool:
    _, proc = run([str(BIN / "provision"), "lab", "status", "--name", lab, "--json"], env)
    try:
        nodes = json.loads(proc.stdout)["nodes"]
    except (ValueError, KeyError):
        return False
    return len(nodes) == n and all(node.get("state") == "running" for node in nodes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="leave the labs up")
    ap.add_argument("--verify", action="store_true", help="also time `provision verify` (no smoke)")
    ap.add_argument("--reuse-labs", action="store_true", help="use lab PREFIX<N> as it is when it is up")
    ap.add_argument("--prefix", default="bench", help="lab name prefix (lab = PREFIX<N>), e.g. hx-s for scale.py's labs")
    args = ap.parse_args()
    results = {}
    for n in args.nodes:
        lab = f"{args.prefix}{n}"
        env = env_for(lab)
        if not (args.reuse_labs and lab_is_up(lab, n, env)):
            run([str(BIN / "provision"), "lab", "down", "--name", lab], env)
        secs, proc = run([str(BIN / "provision"), "lab", "up", "--name", lab, "--nodes", str(n)], env)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        first, first_changed, _ = playbook("site.yml", lab)
        ref = [playbook("benchmarks/ref_play.yml", lab)[0] for _ in range(args.repeat)]
        reruns = [playbook("site.yml", lab) for _ in range(args.repeat)]
        row = {
            "nodes": n, "lab_up_s": round(secs, 1), "site_first_s": round(first, 1),
            "site_first_changed": first_changed,
            "ref_s": round(statistics.median(ref), 2),
            "site_rerun_s": round(statistics.median(r[0] for r in reruns), 2),
            "site_rerun_changed": max(r[1] for r in reruns),
            # every run, so that the spread of a noisy machine shows
            "ref_runs_s": [round(x, 2) for x in ref], "site_rerun_runs_s": [round(r[0], 2) for r in reruns],
        }
        if args.verify:
            ver = []
            for _ in range(args.repeat):
                secs, proc = run([str(BIN / "provision"), "verify", "-i", str(REPO / "inventory/lab")], env)
                ver.append(secs)
                row["verify_rc"] = proc.returncode
            row["verify_s"] = round(statistics.median(ver), 2)
            row["verify_runs_s"] = [round(x, 2) for x in ver]
        results[n] = row
        print(json.dumps(row), flush=True)
        if not args.keep:
            run([str(BIN / "provision"), "lab", "down", "--name", lab], env)
    if len(args.nodes) >= 2:
        lo, hi = results[args.nodes[0]], results[args.nodes[-1]]
        fan = (hi["site_rerun_s"] / hi["ref_s"]) / (lo["site_rerun_s"] / lo["ref_s"])
        print(f"\n{'nodes':>6} {'ref play s':>11} {'site re-run s':>14} {'changed':>8} {'site/ref':>9}"
              + ("  verify s" if args.verify else ""))
        for n in args.nodes:
            r = results[n]
            print(f"{n:>6} {r['ref_s']:>11.2f} {r['site_rerun_s']:>14.2f} {r['site_rerun_changed']:>8} "
                  f"{r['site_rerun_s'] / r['ref_s']:>9.2f}" + (f"  {r['verify_s']:>8.2f}" if args.verify else ""))
        print(f"normalized fan-out (site{hi['nodes']}/ref{hi['nodes']}) / (site{lo['nodes']}/ref{lo['nodes']}) = {fan:.2f}"
              f"  (target <= 1.1); re-run on {lo['nodes']} nodes {lo['site_rerun_s']:.1f} s (target <= 15 s, changed=0)")
        if args.verify:
            vfan = (hi["verify_s"] / hi["ref_s"]) / (lo["verify_s"] / lo["ref_s"])
            print(f"verify: {lo['verify_s']:.1f} s on {lo['nodes']}, {hi['verify_s']:.1f} s on {hi['nodes']}; "
                  f"normalized fan-out {vfan:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
