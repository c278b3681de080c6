#!/usr/bin/env python3
"""Benchmark: what logging in as an admin with sudo costs (issue 30), root vs sudo on the same lab shape.

For each login (root, sudo, and with --password sudo-password), one after the other on the same machine:
a fresh 2-node lab of the default image (no systemd) in that login shape, `ansible-playbook site.yml` on it
(fresh), the re-run (changed must be 0) and `provision verify`, each timed. A root lab is reached over podman
until its sshd runs, then over ssh as root; a sudo lab as `ops` over ssh on port 22 with become from the
first task (the lab's key, host keys read at the console).

    python benchmarks/login_cost.py [--login root --login sudo] [--keep] [--prefix lg-]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_rerun import BIN, RECAP, env_for, run  # noqa: E402

PASSWORD = "bench-sudo-pw"


def one(login: str, keep: bool, pwfile: str, prefix: str = "") -> dict:
    lab = f"{prefix}login-{login}"
    env = env_for(lab)
    opts = {"root": [], "sudo": ["--login", "sudo"],
            "sudo-password": ["--login", "sudo-password", "--sudo-password-file", pwfile]}[login]
    become = ["--become-password-file", pwfile] if login == "sudo-password" else []
    subprocess.run([str(BIN / "provision"), "lab", "down", "--name", lab], env=env, capture_output=True, timeout=300)
    up_s, up = run([str(BIN / "provision"), "lab", "up", "--name", lab, "--nodes", "2", *opts], env, 1800)
    if up.returncode != 0:
        raise SystemExit(f"{login}: lab up failed:\n{up.stdout}\n{up.stderr}")
    site = [str(BIN / "ansible-playbook"), "site.yml", "-i", "inventory/lab", *become]
    try:
        fresh_s, fresh = run(site, env, 3600)
        rerun_s, rerun = run(site, env, 1800)
        verify_s, verify = run([str(BIN / "provision"), "verify", "-i", "inventory/lab", *become], env, 600)
    finally:
        if not keep:
            subprocess.run([str(BIN / "provision"), "lab", "down", "--name", lab], env=env,
                           capture_output=True, timeout=300)
    changed = sum(int(r[2]) for r in RECAP.findall(rerun.stdout))
    return {"login": login, "lab_up_s": round(up_s, 1), "site_fresh_s": round(fresh_s, 1),
            "site_fresh_rc": fresh.returncode, "site_rerun_s": round(rerun_s, 1), "rerun_changed": changed,
            "verify_s": round(verify_s, 1), "verify_rc": verify.returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--login", action="append", choices=["root", "sudo", "sudo-password"])
    ap.add_argument("--keep", action="store_true", help="leave the labs up")
    ap.add_argument("--prefix", default="", help="put before the labs' names (login-root, login-sudo)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pwfile = os.path.join(tmp, "pw")
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, (PASSWORD + "\n").encode())
        os.close(fd)
        rows = [one(login, args.keep, pwfile, args.prefix) for login in (args.login or ["root", "sudo"])]
    print(json.dumps(rows, indent=1))
    return 0 if all(r["site_fresh_rc"] == 0 and r["rerun_changed"] == 0 and r["verify_rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
