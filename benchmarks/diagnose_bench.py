#!/usr/bin/env python3
"""Benchmark: `provision diagnose` on long, noisy logs (issue 33: linear time, bounded memory).

1. Single-line logs of 1 MiB (no newline at all), each must end in under 1 s: word characters, a real
   NCCL error line repeated, rich markup and ESC sequences repeated, a tqdm progress bar redrawn with
   "\\r" and a real error glued after it.
2. A big log (default 500 MB, --size MB) generated here, never committed: real lines of the fixtures
   (a healthy NCCL_DEBUG=INFO run, a gloo run, the NCCL WARNs of a working nccl-tests run), repeated,
   with noise between them (tqdm progress bars redrawn with "\\r", Python UserWarnings, training
   step lines with numbers that change); a real failure log (tests/fixtures/diagnose/...) in the
   middle and a node's OOM kill near the end. `provision diagnose --json` runs on it in a child
   process: its wall and CPU time and peak RSS (ru_maxrss of the child) are printed with the load
   average (a shared machine's wall time is the CPU time times its contention), and the diagnosis
   must name the failures (under a minute, under 200 MB).

    python benchmarks/diagnose_bench.py [--size 500] [--keep] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "tests" / "fixtures"
sys.path.insert(0, str(REPO / "src"))

HEALTHY = [FIX / "h100-node" / "nccl-debug-info-1rank-socket.log", FIX / "h100-node" / "gloo-2rank-allreduce.log",
           FIX / "diagnose" / "neg-success-nccl-tests.log"]
FAILURE = FIX / "diagnose" / "nccl-shm-fallocate-horovod.log"
OOM = FIX / "diagnose" / "slurm-oom-kill-srun.log"


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def noise(rng: random.Random, step: int) -> str:
    """One noisy block as a training job prints it (numbers change, so nothing repeats exactly)."""
    bar = "".join("\rEpoch %d: %3d%%|%s%s| %d/1000 [%02d:%02d<%02d:%02d, %.2fit/s, loss=%.4f]"
                  % (step % 90, p, "█" * (p // 5), " " * (20 - p // 5), p * 10, p // 60, p % 60, 9, 59 - p % 60,
                     rng.uniform(1, 9), rng.random()) for p in range(0, 101, 4))
    return (bar + "\n"
            + "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader "
              "will create %d worker processes in total.\n" % rng.randint(2, 64)
            + "step %d loss %.5f lr %.2e grad_norm %.3f tokens/s %d\n"
            % (step, rng.random() * 4, rng.random() * 1e-3, rng.random() * 10, rng.randint(10000, 99999)))


def make_big(path: Path, size_mb: int) -> int:
    rng = random.Random(33)
    healthy = [ln for p in HEALTHY for ln in lines_of(p)]
    target = size_mb * 1000 * 1000
    written, step, failure_at = 0, 0, target // 2
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            block = "\n".join(rng.choice(healthy) for _ in range(40)) + "\n" + noise(rng, step)
            if failure_at is not None and written >= failure_at:
                block += "\n".join(lines_of(FAILURE)) + "\n"
                failure_at = None
            out.write(block)
            written += len(block.encode("utf-8"))
            step += 1
        out.write("\n".join(lines_of(OOM)) + "\n")
    return path.stat().st_size


def one_line_cases() -> dict[str, str]:
    size = 1 << 20
    nccl = ("gpu2-ru7:1234:5678 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment "
            "nccl-shm-recv-abc (size 9637888) ")
    glued = "".join("\rEpoch 0: %d%%|%s| [E ProcessGroupNCCL.cpp:458] " % (i % 100, "█" * (i % 20))
                    for i in range(30000))
    glued = glued[:size - 200] + ("\n[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation "
                                  "timeout: WorkNCCL(SeqNum=96120, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for "
                                  "1800000 milliseconds before timing out.\n")
    return {
        "word characters": ("abcdefghij" * (size // 10 + 1))[:size],
        "an NCCL error line repeated": (nccl * (size // len(nccl) + 1))[:size],
        "markup and ESC sequences": ("[/red][bold]\x1b[31mError[/] \x1b]0;title\x07" * (size // 40 + 1))[:size],
        "a \\r progress bar, then an error": glued,
    }


def time_one_line(text: str) -> tuple[float, dict]:
    from provision import diagnose as core

    started = time.perf_counter()
    doc = core.diagnose([("one-line.log", text)])
    return time.perf_counter() - started, doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=500, help="MB of the big log (default 500)")
    ap.add_argument("--dir", default=None, help="where to write the big log (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the big log")
    args = ap.parse_args()
    ok = True

    print("1. one line of 1 MiB, no newline (limit 1 s each)")
    for name, text in one_line_cases().items():
        secs, doc = time_one_line(text)
        named = [c["data"]["cause"] for c in doc["causes"]]
        ok &= secs < 1.0
        print("   %-34s %6.3f s  %s  causes %s" % (name, secs, "ok" if secs < 1.0 else "TOO SLOW", named))

    workdir = Path(args.dir or tempfile.mkdtemp(prefix="diagnose-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    big = workdir / "big.log"
    started = time.perf_counter()
    size = make_big(big, args.size)
    print("2. %s: %.1f MB generated in %.1f s" % (big, size / 1e6, time.perf_counter() - started))
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "provision", "diagnose", "--json", str(big)], env=env,
                          capture_output=True, text=True, check=False)
    secs = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss_mb, cpu = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        print(proc.stderr[-2000:])
        return 1
    named = [(c["data"]["cause"], c.get("node"), c["data"]["role"]) for c in doc["causes"]]
    want = {"shm", "host_oom"}
    found = {n[0] for n in named}
    fast, small = secs < 60, rss_mb < 200
    ok &= fast and small and want <= found and proc.returncode == 1
    print("   diagnose --json: %.1f s wall (%.1f MB/s), %.1f s CPU, peak RSS %.0f MB, exit %d; load average %s on %d CPUs"
          % (secs, size / 1e6 / secs, cpu, rss_mb, proc.returncode, " ".join("%.1f" % x for x in os.getloadavg()),
             os.cpu_count()))
    print("   causes: %s" % named)
    print("   %s" % ("ok" if ok else "FAILED: want < 60 s, < 200 MB and causes %s" % sorted(want)))
    if not args.keep:
        big.unlink()
        if not args.dir:
            workdir.rmdir()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
