#!/usr/bin/env python3
"""busbw / one-way TCP ratio of the gloo all-reduce between the nodes of a podman lab.

Runs the allreduce_smoke worker (plugins/module_utils/allreduce/allreduce_worker.py, the very file the
role ships) on every node of a lab at once, once per variant and repeat, interleaving variants
so that the machine's load hits them alike, and prints for each run the busbw at the largest
size, the one-way TCP bandwidth the worker's own probe measured in the same run (the slower
direction), and their ratio; then the median per variant.

    provision lab up --name sm --nodes 2        # torch in /opt/provision/venv on the nodes
    python benchmarks/allreduce_ratio.py --lab sm --repeat 3
    python benchmarks/allreduce_ratio.py --lab sm --variant baseline --variant tuned --size 128M

Variants (--variant NAME, repeatable; default: baseline and devices2, the role default):
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.provision.cluster.plugins.module_utils.allreduce.allreduce_smoke import bandwidth  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.common.sizes import parse_size  # noqa: E402

WORKER = REPO / "plugins" / "module_utils" / "allreduce" / "allreduce_worker.py"
# gloo_devices: GLOO_SOCKET_IFNAME repeated N times (N TCP pairs per peer);
# chunk_bytes: split into async all-reduces of that size (they spread over the devices);
# threads: torch.set_num_threads in the workers.
VARIANTS = {
    "baseline": {"gloo_devices": 1, "chunk_bytes": 0, "threads": 0},
    "devices2": {"gloo_devices": 2, "chunk_bytes": 0, "threads": 0},
    "devices4": {"gloo_devices": 4, "chunk_bytes": 0, "threads": 0},
    "chunk8m": {"gloo_devices": 1, "chunk_bytes": 8 << 20, "threads": 0},
    "tuned": {"gloo_devices": 2, "chunk_bytes": 8 << 20, "threads": 0},
    "dev2chunk16m": {"gloo_devices": 2, "chunk_bytes": 16 << 20, "threads": 0},
    "dev4chunk4m": {"gloo_devices": 4, "chunk_bytes": 4 << 20, "threads": 0},
    "tuned_threads1": {"gloo_devices": 2, "chunk_bytes": 8 << 20, "threads": 1},
    "dev4chunk2m": {"gloo_devices": 4, "chunk_bytes": 2 << 20, "threads": 0},
    "dev4chunk8m": {"gloo_devices": 4, "chunk_bytes": 8 << 20, "threads": 0},
    "dev8chunk4m": {"gloo_devices": 8, "chunk_bytes": 4 << 20, "threads": 0},
    "dev8chunk2m": {"gloo_devices": 8, "chunk_bytes": 2 << 20, "threads": 0},
}
__doc__ += "".join(f"  {k:<15} {v}\n" for k, v in VARIANTS.items())


def lab_nodes(lab: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "provision", "lab", "status", "--name", lab, "--json"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    nodes = json.loads(out.stdout)["nodes"]
    if len(nodes) < 2 or any(n["state"] != "running" for n in nodes):
        raise SystemExit(f"lab {lab}: needs >= 2 running nodes (provision lab up --name {lab})")
    return nodes


def run_once(nodes: list[dict], python: str, variant: dict, sizes: list[int], run_id: str,
             probe_seconds: float, port: int) -> dict:
    run_dir = f"/tmp/provision-allreduce-bench/{run_id}"
    with tempfile.TemporaryDirectory() as tmp:
        for rank, node in enumerate(nodes):
            cfg = {"run_dir": run_dir, "run_id": run_id, "backend": "gloo", "rendezvous": "static",
                   "master_addr": nodes[0]["address"], "master_port": port, "node_rank": rank,
                   "nnodes": len(nodes), "address": node["address"], "sizes": sizes, "warmup": 2,
                   "iters": 10, "timeout": 180, "rendezvous_timeout": 60, "tcp_probe_seconds": probe_seconds,
                   **variant}
            path = Path(tmp) / f"config{rank}.json"
            path.write_text(json.dumps(cfg))
            subprocess.run(["podman", "exec", node["container"], "mkdir", "-p", run_dir], check=True)
            for src, dst in ((WORKER, "allreduce_worker.py"), (path, "config.json")):
                subprocess.run(["podman", "cp", str(src), f"{node['container']}:{run_dir}/{dst}"], check=True)

        def start(node):
            return subprocess.run(["podman", "exec", node["container"], "bash", "-c",
                                   f'[ -r ~/.bashrc ] && . ~/.bashrc >/dev/null 2>&1; exec {python} '
                                   f'{run_dir}/allreduce_worker.py supervise {run_dir}/config.json'],
                                  capture_output=True, text=True, timeout=240, check=False)

        with ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(start, nodes))
    got = subprocess.run(["podman", "exec", nodes[0]["container"], "cat", f"{run_dir}/rank0.json"],
                         capture_output=True, text=True, check=False)
    for node in nodes:
        subprocess.run(["podman", "exec", node["container"], "rm", "-rf", run_dir], check=False)
    res = json.loads(got.stdout or "{}")
    if not res.get("sweep"):
        return {"error": res.get("error") or "no result"}
    last = res["sweep"][-1]
    _, busbw = bandwidth(last["bytes"], last["time_s"], res["world_size"])
    tcp = min(p["gbps"] for p in res["tcp"])
    ring = min((p.get("gbps") or 0.0 for p in res.get("tcp_ring") or []), default=0.0)
    return {"busbw": busbw, "tcp": tcp, "ratio": busbw / tcp if tcp else 0.0, "correct": res.get("correct"),
            "ring": ring, "ratio_ring": busbw / ring if ring else 0.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lab", default="provlab")
    ap.add_argument("--python", default="/opt/provision/venv/bin/python")
    ap.add_argument("--size", default="64M", help="largest size (the ratio is read there)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--probe-seconds", type=float, default=1.0)
    ap.add_argument("--port", type=int, default=29511, help="master port (not the default: keep 29500 free)")
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    args = ap.parse_args(argv)
    nodes = lab_nodes(args.lab)
    names = args.variant or ["baseline", "devices2"]
    sizes = [parse_size(args.size)]
    runs: dict[str, list[dict]] = {n: [] for n in names}
    print(f"lab {args.lab}: {len(nodes)} nodes, gloo, {args.size}, {args.repeat} repeats, variants {names}")
    for rep in range(args.repeat):
        for name in names:
            t0 = time.monotonic()
            res = run_once(nodes, args.python, VARIANTS[name], sizes, f"b{rep}-{name}", args.probe_seconds, args.port)
            runs[name].append(res)
            if "error" in res:
                print(f"  {name:<15} run {rep + 1}: ERROR {res['error']}")
            else:
                print(f"  {name:<15} run {rep + 1}: busbw {res['busbw']:.3f} GB/s  TCP {res['tcp']:.3f} GB/s  "
                      f"ratio {res['ratio']:.2f}  TCP ring {res['ring']:.3f} GB/s  ratio_ring {res['ratio_ring']:.2f}  "
                      f"sum {'ok' if res['correct'] else 'WRONG'}  "
                      f"({time.monotonic() - t0:.0f} s)")
    print("median per variant:")
    for name in names:
        ok = [r for r in runs[name] if "ratio" in r]
        if ok:
            print(f"  {name:<15} ratio {statistics.median(r['ratio'] for r in ok):.2f}  busbw "
                  f"{statistics.median(r['busbw'] for r in ok):.3f} GB/s  TCP "
                  f"{statistics.median(r['tcp'] for r in ok):.3f} GB/s  TCP ring "
                  f"{statistics.median(r['ring'] for r in ok):.3f} GB/s  ratio_ring "
                  f"{statistics.median(r['ratio_ring'] for r in ok):.2f}  ({len(ok)} runs) {VARIANTS[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
