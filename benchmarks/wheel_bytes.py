#!/usr/bin/env python3
"""Bytes the controller sends to give fresh nodes the wheelhouse (issue 24, Scale), per lab.

For each converged lab PREFIX<N> (benchmarks/scale.py's): remove the node wheelhouse from every node
(/var/cache/provision/wheelhouse: as fresh for this stage), then run the python_env stage's wheel copy
alone (benchmarks/wheel_bytes.yml) and report (a) the wheel bytes each node got from the controller and
from the serving node (the action plugin's counts) and (b) every byte the controller sent to the lab's
cluster network during that run (the bridge's tx counter: Ansible's module payloads included; the
controller reaches converged lab nodes over SSH on that network).

    python benchmarks/wheel_bytes.py [--nodes 2 8 32] [--prefix hx-s] [--no-peers]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from site_rerun import BIN, REPO, env_for, run  # noqa: E402


def bridge(lab: str) -> str:
    out = subprocess.run(["podman", "network", "inspect", lab, "--format", "{{.NetworkInterface}}"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return out


def tx(dev: str) -> int:
    return int(Path(f"/sys/class/net/{dev}/statistics/tx_bytes").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 8, 32])
    ap.add_argument("--prefix", default="hx-s")
    ap.add_argument("--no-peers", action="store_true", help="python_env_wheel_peers=false (every node from the controller)")
    args = ap.parse_args()
    for n in args.nodes:
        lab = f"{args.prefix}{n}"
        for i in range(1, n + 1):
            subprocess.run(["podman", "exec", f"{lab}-node{i}", "rm", "-rf", "/var/cache/provision/wheelhouse"],
                           check=True)
        dev = bridge(lab)
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            argv = [str(BIN / "ansible-playbook"), str(REPO / "benchmarks/wheel_bytes.yml"), "-i", str(REPO / "inventory/lab"),
                    "-e", f"wheel_bytes_out={out.name}"]
            if args.no_peers:
                argv += ["-e", "python_env_wheel_peers=false"]
            before = tx(dev)
            secs, proc = run(argv, env_for(lab))
            sent = tx(dev) - before
            if proc.returncode != 0:
                sys.stderr.write(proc.stdout[-3000:])
                raise SystemExit(f"wheel copy failed on {lab}")
            per_node = json.loads(Path(out.name).read_text() or "{}")
        row = {"nodes": n, "lab": lab, "peers": not args.no_peers, "seconds": round(secs, 1),
               "wheel_bytes_from_controller": sum(v["controller"] for v in per_node.values()),
               "wheel_bytes_from_peer": sum(v["peer"] for v in per_node.values()),
               "controller_tx_bytes_on_cluster_network": sent,
               "peer_errors": {h: v["peer_errors"] for h, v in per_node.items() if v.get("peer_errors")}}
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
