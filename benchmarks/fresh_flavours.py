#!/usr/bin/env python3
"""Benchmark: a fresh site.yml on 2 nodes of each lab flavour, in one run (issue 19).

For each flavour, one after the other on the same machine: bring up a fresh 2-node lab, time
`ansible-playbook site.yml` on it (first contact), then the re-run (changed must be 0) and
`provision verify`. The default flavour's image carries every package the roles need; the bare
systemd flavour installs them from the lab's package mirror (its build time and size are printed by
`provision lab up`, and kept in its --json status).

    python benchmarks/fresh_flavours.py [--flavour default --flavour bare-systemd] [--keep]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_rerun import BIN, RECAP, env_for, run  # noqa: E402

FLAVOURS = {
    "default": [],
    "bare-systemd": ["--init", "systemd", "--image", "bare"],
}


def one(flavour: str, keep: bool) -> dict:
    lab = f"fresh-{flavour}"
    env = env_for(lab)
    subprocess.run([str(BIN / "provision"), "lab", "down", "--name", lab], env=env, capture_output=True, timeout=300)
    up_s, up = run([str(BIN / "provision"), "lab", "up", "--name", lab, "--nodes", "2", *FLAVOURS[flavour]],
                     env, 1800)
    if up.returncode != 0:
        raise SystemExit(f"{flavour}: lab up failed:\n{up.stdout}\n{up.stderr}")
    site = [str(BIN / "ansible-playbook"), "site.yml", "-i", "inventory/lab"]
    try:
        fresh_s, fresh = run(site, env, 3600)
        rerun_s, rerun = run(site, env, 1800)
        verify_s, verify = run([str(BIN / "provision"), "verify", "-i", "inventory/lab"], env, 600)
    finally:
        if not keep:
            subprocess.run([str(BIN / "provision"), "lab", "down", "--name", lab], env=env,
                           capture_output=True, timeout=300)
    changed = sum(int(r[2]) for r in RECAP.findall(rerun.stdout))
    return {"flavour": flavour, "lab_up_s": round(up_s, 1), "site_fresh_s": round(fresh_s, 1),
            "site_fresh_rc": fresh.returncode, "site_rerun_s": round(rerun_s, 1), "rerun_changed": changed,
            "verify_s": round(verify_s, 1), "verify_rc": verify.returncode,
            "lab_up_tail": up.stdout.strip().splitlines()[-3:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flavour", action="append", choices=list(FLAVOURS))
    ap.add_argument("--keep", action="store_true", help="leave the labs up")
    args = ap.parse_args()
    rows = [one(f, args.keep) for f in (args.flavour or list(FLAVOURS))]
    print(json.dumps(rows, indent=1))
    print("\n| flavour | lab up | site.yml fresh | re-run (changed) | verify |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['flavour']} | {r['lab_up_s']} s | {r['site_fresh_s']} s (rc {r['site_fresh_rc']}) | "
              f"{r['site_rerun_s']} s ({r['rerun_changed']}) | {r['verify_s']} s (rc {r['verify_rc']}) |")
    return 0 if all(r["site_fresh_rc"] == 0 and r["rerun_changed"] == 0 and r["verify_rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
