"""Jobs on the lab's real SLURM (issue 23), on one 3-node `lab up --slurm` shared by the module:

- the launchers stage's `sbatch.sh`, rendered for node[1-2] and submitted with `sbatch`, runs the
  2-node torch.distributed job through `srun`; the job's output shows world size 2 and ranks 0, 1;
- inside `salloc -N 2 -x node1` (made on node1), the nodelist inventory plugin reads the allocation's
  SLURM_JOB_NODELIST (node[2-3]) and `provision verify` checks exactly those two nodes;
- `provision verify --local --slurm-drain`, run on node2 as slurmd runs its HealthCheckProgram (an
  almost empty environment, SLURMD_NODENAME set): node2 drained with `provision: shm: ...` in
  `sinfo -R` while its /dev/shm is too small, back to idle once fixed, and an admin's drain left alone.

node2 gets provision (the health check) and node1/node2 torch (the job, last: the slowest to set up)
from the controller's wheels; node3 gets nothing (the salloc test only needs it in SLURM).
"""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import bounds
from helpers import REPO, ansible_env, install_wheels, lab_cmd, lab_name, node_exec, nodelist_inventory, probe_lines, run_playbook, tool, torch_wheelhouse

pytestmark = pytest.mark.lab

VENV = "/opt/hs-venv"
LAUNCH = "/root/.provision/launch"
HEALTHCHECK = "/usr/local/sbin/provision-healthcheck"

PROBE = """\
import os, socket, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
print("PROBE host=%s rank=%d world=%d slurm_procid=%s sum=%d" % (socket.gethostname(), rank, world,
      os.environ.get("SLURM_PROCID", "-"), int(t.item())), flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def slurm3(lab_factory, provision_wheels):
    """The 3-node SLURM lab; provision (from this checkout) in a venv on node2, for the health check."""
    t0 = time.monotonic()
    lab = lab_factory(lab_name("slurm3"), nodes=3, options=["--slurm"])
    up = time.monotonic() - t0
    nodes = json.loads(lab_cmd("status", "--json", lab_name=lab.name).stdout)["nodes"]
    install_wheels(lab.name, 2, provision_wheels, VENV, "provision", "ansible provision")
    # what site.yml's ssh_mesh stage writes (/etc/hosts: names -> cluster addresses; gloo and c10d
    # need them) and node_runtime's soft nofile for login sessions; this module runs no other stage
    hosts = "".join(f"{n['address']} {n['name']}\n" for n in nodes)
    for n in (1, 2, 3):
        node_exec(lab.name, n, f"grep -q ' node1$' /etc/hosts || printf '{hosts}' >> /etc/hosts; "
                               "printf '* soft nofile 16384\\nroot soft nofile 16384\\n' > /etc/security/limits.d/90-provision.conf")
    lab.nodes = nodes
    print(f"3-node SLURM lab up in {up:.0f} s, provision on node2 in {time.monotonic() - t0 - up:.0f} s")
    yield lab


@pytest.fixture(scope="module")
def torch_nodes(slurm3):
    """torch on node1 and node2 (the sbatch job's nodes), and the probe."""
    wheels = torch_wheelhouse()
    t0 = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda n: install_wheels(slurm3.name, n, wheels, VENV, "torch==2.13.0 numpy"), (1, 2)))
    for n in (1, 2):
        node_exec(slurm3.name, n, f"cat > /tmp/probe.py <<'EOF'\n{PROBE}EOF")
    print(f"torch on node1/node2 in {time.monotonic() - t0:.0f} s")
    return slurm3


def _sinfo(lab) -> dict[str, tuple[str, str]]:
    """node -> (state, reason). The state without sinfo's trailing '*' ("not responding": slurmctld's
    last ping of that slurmd went unanswered, as happens on the loaded 2-core CI machine; it says
    nothing about the drain/resume these tests check, and slurmctld clears it at the next ping)."""
    out = node_exec(lab.name, 1, "sinfo -h -N -p lab -o '%N|%t|%E'").stdout
    return {n: (t.rstrip("*"), e) for n, t, e in (line.split("|", 2) for line in out.splitlines() if line.strip())}


def _nodelist_inventory(lab, path: Path, body: str) -> Path:
    return nodelist_inventory(path, lab.name, lab.nodes[0]["address"], body, f"{VENV}/bin/python")


def test_salloc_nodelist_inventory_verifies_exactly_the_allocated_nodes(slurm3, tmp_path):
    name = slurm3.name
    node_exec(name, 1, "rm -f /tmp/alloc.env /tmp/alloc.done")
    # the allocation, held by salloc on node1 until the test says done (bounded: 300 s)
    hold = subprocess.Popen(["podman", "exec", f"{name}-node1", "timeout", "300", "salloc", "-N", "2", "-x", "node1",
                             "-J", "hs-alloc", "bash", "-c",
                             "env | grep ^SLURM_ > /tmp/alloc.env.tmp && mv /tmp/alloc.env.tmp /tmp/alloc.env; "
                             "for i in $(seq 600); do test -e /tmp/alloc.done && break; sleep 0.5; done"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        env = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and hold.poll() is None:
            got = node_exec(name, 1, "cat /tmp/alloc.env 2>/dev/null", check=False).stdout
            if got:
                env = dict(line.split("=", 1) for line in got.splitlines() if "=" in line)
                break
            time.sleep(1)
        assert env.get("SLURM_JOB_NODELIST") == "node[2-3]", (env, hold.poll())
        squeue = node_exec(name, 1, "squeue -h -o '%j %T %N'").stdout.split()
        assert squeue == ["hs-alloc", "RUNNING", "node[2-3]"], squeue
        inv = _nodelist_inventory(slurm3, tmp_path / "slurm.nodelist.yml", "plugin: provision.cluster.nodelist\nsource: slurm\n")
        alloc_env = {k: env[k] for k in ("SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_TASKS_PER_NODE", "SLURM_NNODES")
                     if k in env}
        t0 = time.monotonic()
        # reach: a generous bound, podman exec on the shared 2-core machine took > 20 s under load
        proc = subprocess.run([tool("provision"), "verify", "-i", str(inv), "--only", "gcc", "--only", "ports",
                               "-e", "verify_reach_timeout=120", "--json"], cwd=REPO, env=ansible_env(name, **alloc_env),
                              capture_output=True, text=True, timeout=bounds.DOWNLOAD)
        took = time.monotonic() - t0
        assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
        doc = json.loads(proc.stdout)
        # exactly the allocated nodes, each checked (node1, where salloc runs, is not one of them)
        assert [n["name"] for n in doc["nodes"]] == ["node2", "node3"], proc.stdout[-2000:]
        assert {c["node"] for c in doc["checks"]} == {"node2", "node3"}
        failed = [(c["node"], c["check"], c["detail"]) for c in doc["checks"] if c["status"] == "fail"]
        assert doc["ok"] and not failed, failed
        # the selected checks ran on both allocated nodes (not skipped, not only a reach record)
        passed = [(c["node"], c["check"]) for c in doc["checks"] if c["status"] == "pass"]
        for node in ("node2", "node3"):
            assert (node, "gcc") in passed and any(n == node and check.startswith("port ") for n, check in passed), passed
        print(f"salloc -N 2 -x node1 -> SLURM_JOB_NODELIST={env['SLURM_JOB_NODELIST']}; provision verify checked "
              f"{[n['name'] for n in doc['nodes']]} in {took:.1f} s (ok={doc['ok']}, failed: {failed})")
    finally:
        node_exec(name, 1, "touch /tmp/alloc.done", check=False)
        try:
            hold.wait(timeout=bounds.COMMAND)
        except subprocess.TimeoutExpired:
            hold.kill()
    assert hold.returncode == 0, hold.stdout.read() if hold.stdout else ""


def _healthcheck(lab, node: int) -> tuple[subprocess.CompletedProcess, float]:
    """The health check as slurmd runs HealthCheckProgram: as root, an almost empty environment with
    SLURMD_NODENAME, from /."""
    t0 = time.monotonic()
    proc = subprocess.run(["podman", "exec", "-w", "/", f"{lab.name}-node{node}", "env", "-i",
                           f"SLURMD_NODENAME=node{node}", HEALTHCHECK], capture_output=True, text=True, timeout=bounds.VERIFY)
    return proc, time.monotonic() - t0


def _shm(lab, node: int, size: str) -> None:
    subprocess.run(["podman", "exec", "--privileged", f"{lab.name}-node{node}", "mount", "-o", f"remount,size={size}",
                    "/dev/shm"], check=True, capture_output=True, timeout=bounds.COMMAND)


def test_health_check_drains_a_broken_node_and_resumes_it_once_fixed(slurm3):
    name = slurm3.name
    # the wrapper README's "SLURM health check" shows (HealthCheckProgram takes no arguments)
    node_exec(name, 2, f"printf '#!/bin/sh\\nexec {VENV}/bin/provision verify --local --slurm-drain --timeout 300\\n' "
                       f"> {HEALTHCHECK} && chmod 755 {HEALTHCHECK}")
    assert _sinfo(slurm3)["node2"][0] == "idle"
    _shm(slurm3, 2, "64m")
    try:
        proc, took_drain = _healthcheck(slurm3, 2)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        state, reason = _sinfo(slurm3)["node2"]
        assert state == "drain" and reason.startswith("provision: shm: /dev/shm is 64 MiB, need >= 1 GiB"), (state, reason)
        sinfo_r = node_exec(name, 1, "sinfo -R -h -o '%N|%u|%E'").stdout.strip()  # %u: who set the reason
        assert sinfo_r.startswith("node2|root|provision: shm: /dev/shm is 64 MiB"), sinfo_r
        print(f"broken: drained in {took_drain:.1f} s; sinfo -R: {sinfo_r}")
    finally:
        _shm(slurm3, 2, "1g")
    try:
        proc, took_resume = _healthcheck(slurm3, 2)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "resumed" in proc.stdout and _sinfo(slurm3)["node2"][0] == "idle", (proc.stdout, _sinfo(slurm3))
        print(f"fixed: resumed in {took_resume:.1f} s; sinfo: {_sinfo(slurm3)['node2']}")
    finally:  # the sbatch test needs node2
        node_exec(name, 1, "sinfo -h -n node2 -o %t | grep -q drain && scontrol update nodename=node2 state=resume",
                  check=False)

    # an admin's drain is not ours: a healthy node stays drained with the admin's reason
    node_exec(name, 1, "scontrol update nodename=node2 state=drain reason='disk swap, ticket 7'")
    try:
        proc, took = _healthcheck(slurm3, 2)
        assert proc.returncode == 0 and "not ours to resume" in proc.stdout, proc.stdout + proc.stderr
        assert _sinfo(slurm3)["node2"] == ("drain", "disk swap, ticket 7")
        print(f"admin drain kept ({took:.1f} s)")
    finally:
        node_exec(name, 1, "scontrol update nodename=node2 state=resume", check=False)


def test_rendered_sbatch_runs_the_two_node_job_through_srun(torch_nodes, tmp_path):
    slurm3 = torch_nodes
    # the launchers stage for the two nodes the job runs on (the nodelist inventory, as inside an allocation)
    inv = _nodelist_inventory(slurm3, tmp_path / "job.nodelist.yml", "plugin: provision.cluster.nodelist\nnodelist: node[1-2]\n")
    res = run_playbook("playbooks/launchers.yml", lab_name=slurm3.name, inventory=inv, timeout=bounds.STAGES)
    assert res.rc == 0 and sorted(res.recap) == ["node1", "node2"], res
    script = node_exec(slurm3.name, 1, f"cat {LAUNCH}/sbatch.sh").stdout
    assert "#SBATCH --nodes=2\n" in script and "srun --export=ALL --kill-on-bad-exit=1" in script, script
    t0 = time.monotonic()
    job, out, seen = _sbatch_probe(slurm3, f"cd {LAUNCH} && timeout 420 sbatch")
    took = time.monotonic() - t0
    # one srun task per node (SLURM_PROCID 0 and 1), each a torchrun with one rank
    assert sorted(p["slurm_procid"] for p in seen) == ["0", "1"], out[-4000:]
    acct = node_exec(slurm3.name, 1, f"scontrol show job {job} -o", check=False).stdout
    print(f"sbatch job {job}: 2 nodes, world size 2, {took:.1f} s from sbatch to its end; {acct[:200]}")


def _sbatch_probe(slurm3, submit: str) -> tuple[str, str, list[dict]]:
    """SUBMIT (the sbatch command line up to its options) of the rendered sbatch.sh running the probe on
    node1 and node2 -> (job id, its output, the probe records); the job ran on both nodes, world size 2.
    --wait: sbatch returns when the job ends, with its exit code; the job may not take more than 5 min."""
    proc = node_exec(slurm3.name, 1, f"{submit} --parsable --wait --time=5 --nodelist=node1,node2 sbatch.sh /tmp/probe.py",
                     check=False, timeout=bounds.JOB)
    job = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else "?"
    out = node_exec(slurm3.name, 1, f"cat {LAUNCH}/slurm-{job}.out", check=False).stdout
    assert proc.returncode == 0, f"sbatch: {proc.stdout}{proc.stderr}\njob output:\n{out[-4000:]}"
    seen = probe_lines(out)
    assert sorted((p["host"], p["rank"], p["world"], p["sum"]) for p in seen) == [
        ("node1", "0", "2", "3"), ("node2", "1", "2", "3")], out[-4000:]
    return job, out, seen


@pytest.mark.parametrize("submitter", ["export-none", "no-venv-shell"])
def test_sbatch_job_takes_its_environment_from_us_whoever_submits_it(torch_nodes, tmp_path, submitter):
    """Issue 30: the rendered sbatch.sh names its interpreter (the environment's python, absolute: here the
    python_env role's default for python_env_path /opt/hs-venv, not a launchers_python override) and each
    srun task sources its node's cluster.env.sh. Submitted with `--export=NONE` (a common site default:
    srun then hands the tasks no environment) or from a shell without the venv and almost no environment
    (cron, a CI runner), the job runs on both nodes. Before: "execve(): python3: No such file or
    directory" and "No module named 'torch'"."""
    slurm3 = torch_nodes
    inv = _nodelist_inventory(slurm3, tmp_path / "job.nodelist.yml", "plugin: provision.cluster.nodelist\nnodelist: node[1-2]\n")
    inv.write_text(inv.read_text().replace(f"launchers_python: {VENV}/bin/python", f"python_env_path: {VENV}"))
    assert "launchers_python" not in inv.read_text()
    res = run_playbook("playbooks/launchers.yml", lab_name=slurm3.name, inventory=inv, timeout=bounds.STAGES)
    assert res.rc == 0, res
    script = node_exec(slurm3.name, 1, f"cat {LAUNCH}/sbatch.sh").stdout
    assert f"{VENV}/bin/python -m torch.distributed.run" in script and "cluster.env.sh" in script, script
    submit = {"export-none": f"cd {LAUNCH} && timeout 420 sbatch --export=NONE",
              "no-venv-shell": f"cd {LAUNCH} && env -i PATH=/usr/bin:/bin HOME=/root timeout 420 sbatch"}[submitter]
    _sbatch_probe(slurm3, submit)
