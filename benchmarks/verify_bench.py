#!/usr/bin/env python3
"""Benchmark: `provision verify` (no --smoke) end to end on healthy labs of 2 and 8 nodes.

For each N: bring up a lab of N nodes (or reuse one with --reuse), converge it with site.yml once,
then time `provision verify -i inventory/lab/ --json` --repeat times (median, wall clock of the whole
command as a user sees it) and the fixed 10-task reference play benchmarks/ref_play.yml (the
machine's Ansible floor, shared with benchmarks/site_rerun.py). Prints per N the verify time, its
exit code and check count, and at the end the raw ratio verify(8)/verify(2) (target <= 1.5,
2 nodes <= 10 s) and the ratio normalized by the reference play.

    python benchmarks/verify_bench.py [--nodes 2 8] [--repeat 3] [--reuse] [--keep] [--prefix vfb]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from site_rerun import BIN, RECAP, REPO, env_for, run  # noqa: E402


def lab_env(lab: str) -> dict[str, str]:
    """site_rerun.env_for, keeping ansible.cfg's callbacks (an empty ANSIBLE_CALLBACKS_ENABLED
    makes ansible-core 2.19 fail with "A non-empty plugin name is required")."""
    env = env_for(lab)
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    return env


def playbook(path: str, lab: str, inventory: str) -> tuple[float, int]:
    """site_rerun.playbook with any inventory: (seconds, changed)."""
    secs, proc = run([str(BIN / "ansible-playbook"), str(REPO / path), "-i", inventory], lab_env(lab))
    recap = RECAP.findall(proc.stdout)
    if proc.returncode != 0 or not recap:
        raise SystemExit(f"{path} failed on lab {lab} (rc={proc.returncode}): {proc.stdout[-2000:]}")
    return secs, sum(int(r[2]) for r in recap)


def verify_once(env: dict[str, str], inventory: str, checks: list[str]) -> tuple[float, dict]:
    argv = [str(BIN / "provision"), "verify", "-i", inventory, "--json"]
    for name in checks:
        argv += ["--only", name]
    secs, proc = run(argv, env, timeout=600)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"provision verify failed (rc={proc.returncode}): {proc.stderr.strip()[-2000:]}")
    doc = json.loads(proc.stdout)
    doc["rc"] = proc.returncode
    return secs, doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--prefix", default="vfb", help="lab name prefix (lab = PREFIX<N>)")
    ap.add_argument("--reuse", action="store_true", help="use a lab that is already up and converged")
    ap.add_argument("--keep", action="store_true", help="leave the labs up")
    ap.add_argument("--check", action="append", default=[], metavar="NAME",
                    help="only these checks (as provision verify --only), to compare like with like")
    ap.add_argument("--inventory", default=str(REPO / "inventory/lab"),
                    help="inventory to verify (default the lab inventory)")
    args = ap.parse_args()
    rows = {}
    for n in args.nodes:
        lab = f"{args.prefix}{n}"
        env = lab_env(lab)
        row: dict = {"nodes": n, "lab": lab}
        if not args.reuse:
            run([str(BIN / "provision"), "lab", "down", "--name", lab], env)
            secs, proc = run([str(BIN / "provision"), "lab", "up", "--name", lab, "--nodes", str(n)], env)
            if proc.returncode != 0:
                raise SystemExit(proc.stderr)
            row["site_first_s"] = round(playbook("site.yml", lab, args.inventory)[0], 1)
        row["ref_s"] = round(statistics.median(playbook("benchmarks/ref_play.yml", lab, args.inventory)[0]
                                               for _ in range(args.repeat)), 2)
        times, docs = [], []
        for _ in range(args.repeat):
            secs, doc = verify_once(env, args.inventory, args.check)
            times.append(secs)
            docs.append(doc)
        last = docs[-1]
        row.update({
            "verify_s": round(statistics.median(times), 2),
            "verify_runs_s": [round(t, 2) for t in times],
            "verify_rc": last["rc"],
            "checks": len(last["checks"]),
            "failed": [f"{c['node']}: {c['check']}" for c in last["checks"] if c["status"] == "fail"],
        })
        rows[n] = row
        print(json.dumps(row), flush=True)
        if not args.keep and not args.reuse:
            run([str(BIN / "provision"), "lab", "down", "--name", lab], env)
    print(f"\n{'nodes':>6} {'verify s':>9} {'rc':>3} {'checks':>7} {'ref play s':>11} {'verify/ref':>11}")
    for n, r in rows.items():
        print(f"{n:>6} {r['verify_s']:>9.2f} {r['verify_rc']:>3} {r['checks']:>7} {r['ref_s']:>11.2f} "
              f"{r['verify_s'] / r['ref_s']:>11.2f}")
    if len(rows) >= 2:
        lo, hi = rows[args.nodes[0]], rows[args.nodes[-1]]
        raw = hi["verify_s"] / lo["verify_s"]
        norm = (hi["verify_s"] / hi["ref_s"]) / (lo["verify_s"] / lo["ref_s"])
        print(f"verify {lo['nodes']} nodes: {lo['verify_s']:.1f} s (target <= 10 s); "
              f"{hi['nodes']}/{lo['nodes']} nodes: {raw:.2f}x (target <= 1.5x), normalized by the reference play {norm:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
