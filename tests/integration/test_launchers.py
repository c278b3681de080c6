"""launchers in a real 2-node lab: rendered files, the c10d torchrun command started on both nodes,
`provision launch` (success and fail-fast), the nodelist inventory plugin driving the lab, and
every launcher that installs here started for real by `provision launch --launcher X` (DeepSpeed
over pdsh, Open MPI's mpirun, accelerate, Colossal-AI's CLI) over the fabric the sshd, ssh_mesh,
nccl_net and shell_env roles make, each rank checked for world size, rank and the environment
our ~/.bashrc block sets.

The lab is the session's converged 2-node lab (site.yml green: torch 2.13.0 in the python_env venv,
sshd on 2222, the key mesh, the environment block), reset to its snapshot with the lab's package
mirror (`provision lab up --from SNAPSHOT --mirror`) and reset again before the next module.
The launchers' Python packages are downloaded on the controller (the only machine that reaches
PyPI), copied into the nodes and installed with --no-index into that venv; Open MPI comes from the
lab's package mirror, Debian's openmpi-bin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import bounds
from helpers import REPO, ansible_env, cannot_run, lab_name, need_module, node_exec, nodelist_inventory, probe_lines, run_playbook, tool

pytestmark = pytest.mark.lab

LAB = lab_name("site")     # the converged lab (tests/conftest.py)
VENV = "/opt/provision/venv"  # python_env's venv
LAUNCH_DIR = "/root/.provision/launch"
DS_WHEELHOUSE = Path.home() / ".cache" / "provision" / "wheelhouse-deepspeed"
DEEPSPEED = "deepspeed==0.19.8"
DS_DEPS = ["hjson", "ninja", "msgpack", "psutil", "py-cpuinfo", "pydantic", "tqdm", "einops", "packaging", "numpy"]
PY_WHEELHOUSE = Path.home() / ".cache" / "provision" / "wheelhouse-launchers"
ACCELERATE = "accelerate==1.15.0"
# Colossal-AI 0.5.0 pins torch<=2.5.1 (and transformers, ray, bitsandbytes, diffusers...): it is
# installed without its dependencies next to torch 2.13.0, with what its CLI imports (README)
COLOSSALAI = "colossalai==0.5.0"
COLOSSALAI_CLI_DEPS = ["fabric", "click", "psutil", "packaging", "numpy"]

PROBE = """\
import os, socket, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
env = " ".join("env.%s=%s" % (k, v) for k, v in sorted(os.environ.items())
               if k in ("PATH", "VIRTUAL_ENV", "WCOLL") or k.startswith(("NCCL_", "GLOO_", "PDSH_")))
# the record and its newline in one write (a relaying launcher cannot put another node's text between)
os.write(1, ("PROBE host=%s rank=%d world=%d group_rank=%s sum=%d exe=%s %s\\n" % (socket.gethostname(), rank, world,
         os.environ.get("GROUP_RANK", "-"), int(t.item()), sys.executable, env)).encode())
dist.destroy_process_group()
"""

# the same through accelerate: its Accelerator sets up the process group from what its launcher set
ACC_PROBE = """\
import os, socket, sys, torch, torch.distributed as dist
from accelerate import Accelerator
acc = Accelerator()
t = torch.tensor([acc.process_index + 1.0])
dist.all_reduce(t)
env = " ".join("env.%s=%s" % (k, v) for k, v in sorted(os.environ.items())
               if k in ("PATH", "VIRTUAL_ENV", "WCOLL") or k.startswith(("NCCL_", "GLOO_", "PDSH_")))
os.write(1, ("PROBE host=%s rank=%d world=%d type=%s backend=%s sum=%d exe=%s %s\\n" % (socket.gethostname(),
         acc.process_index, acc.num_processes, acc.distributed_type.value, acc.state.backend, int(t.item()),
         sys.executable, env)).encode())
dist.destroy_process_group()
"""

FAIL = """\
import os, sys, time
print("FAIL host-rank", os.environ["GROUP_RANK"], flush=True)
if os.environ["GROUP_RANK"] == "1":
    sys.exit(3)
time.sleep(600)
"""


def _lab_status() -> dict:
    return json.loads(subprocess.run([tool("provision"), "lab", "status", "--name", LAB, "--json"],
                                     capture_output=True, text=True, check=True, timeout=bounds.COMMAND).stdout)


@pytest.fixture(scope="module")
def lab(scratch_lab):
    assert scratch_lab.name == LAB
    # the package mirror beside the converged nodes: Debian's openmpi-bin for mpirun.sh
    scratch_lab.reset("--mirror")
    for node in (1, 2):
        node_exec(LAB, node, f"cat > /tmp/probe.py <<'EOF'\n{PROBE}EOF\ncat > /tmp/fail.py <<'EOF'\n{FAIL}EOF\n"
                             f"cat > /tmp/acc_probe.py <<'EOF'\n{ACC_PROBE}EOF")
    return scratch_lab


@pytest.fixture(scope="module")
def rendered(lab):
    first = run_playbook("playbooks/launchers.yml", lab_name=LAB, timeout=bounds.STAGES)
    assert first.rc == 0, first
    second = run_playbook("playbooks/launchers.yml", lab_name=LAB, timeout=bounds.STAGES)
    assert second.rc == 0 and second.changed == 0, second
    return first


def _read(node: int, name: str) -> str:
    return node_exec(LAB, node, f"cat {LAUNCH_DIR}/{name}").stdout


def test_files_rendered_on_every_node(rendered):
    for node in (1, 2):
        assert _read(node, "hostfile.deepspeed").splitlines()[1:] == ["node1 slots=1", "node2 slots=1"]
        assert _read(node, "hostfile.colossalai") == "node1\nnode2\n"
        assert "horovodrun -np 2 -H node1:1,node2:1 -p 2222" in _read(node, "horovodrun.sh")
        assert f"machine_rank: {node - 1}" in _read(node, "accelerate.yaml")
        assert f"NODE_RANK={node - 1}" in _read(node, "launch.env")
        node_exec(LAB, node, f"test -x {LAUNCH_DIR}/torchrun-c10d.sh && bash -n {LAUNCH_DIR}/sbatch.sh")
    assert _read(1, "torchrun-c10d.sh") == _read(2, "torchrun-c10d.sh")
    assert _read(1, "torchrun-static.sh") != _read(2, "torchrun-static.sh")


def test_rendered_c10d_command_runs_on_both_nodes(rendered):
    # bounded, with room for a loaded 2-core host (the nodes and the controller share it)
    procs = [subprocess.Popen(["podman", "exec", f"{LAB}-node{n}", "timeout", "300",
                               f"{LAUNCH_DIR}/torchrun-c10d.sh", "/tmp/probe.py"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n in (1, 2)]
    outs = [p.communicate(timeout=bounds.JOB)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    seen = [probe_lines(o) for o in outs]
    # c10d orders nodes by host name: node1 gets rank 0, node2 rank 1; one process per node (1 slot)
    assert [(s[0]["host"], s[0]["rank"], s[0]["group_rank"]) for s in seen] == [("node1", "0", "0"),
                                                                              ("node2", "1", "1")], outs
    assert all(s[0]["world"] == "2" and s[0]["sum"] == "3" for s in seen), outs


def _launch(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([tool("provision"), "launch", "-i", str(REPO / "inventory" / "lab"), *args],
                          cwd=REPO, env=ansible_env(LAB), capture_output=True, text=True, timeout=timeout)


def test_provision_launch_streams_prefixed_output(rendered):
    started = time.monotonic()
    proc = _launch("--timeout", str(int(bounds.JOB_INNER)), "--", "/tmp/probe.py", timeout=bounds.JOB)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if "PROBE " in ln]
    assert sorted(ln.split("]", 1)[0] + "]" for ln in lines) == ["[node1]", "[node2]"], proc.stdout
    by_node = {ln.split("]", 1)[0].strip("[ "): probe_lines(ln)[0] for ln in lines}
    assert by_node["node1"]["rank"] == "0" and by_node["node2"]["rank"] == "1"
    assert {p["world"] for p in by_node.values()} == {"2"}
    print(f"provision launch (2 nodes, torchrun c10d): {took:.1f} s")


def test_provision_launch_stops_the_others_when_one_fails(rendered):
    started = time.monotonic()
    # node1 sleeps 600 s; the job's own bound is JOB_INNER: the failure of node2 must end it long before
    proc = _launch("--timeout", str(int(bounds.JOB_INNER)), "--", "/tmp/fail.py", timeout=bounds.JOB)
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "failed (exit 1); stopping node1" in proc.stderr, proc.stderr
    assert bounds.well_before(took, bounds.JOB_INNER), f"the sleeping node was not stopped ({took:.0f} s)"
    # nothing of the job is left on the node that was stopped
    left = node_exec(LAB, 1, "pgrep -f '[/]tmp/fail.py' || true").stdout.strip()
    assert left == "", left


def test_provision_launch_refuses_launch_files_of_another_cluster(rendered):
    """Files written for another node set (here: node2's launch.env names node3 too, as after node3 left the
    inventory without a site.yml run): the start is refused on that node in one line with the fix, and the
    job started nowhere (the other node's start is stopped)."""
    env_file = f"{LAUNCH_DIR}/launch.env"
    node_exec(LAB, 2, f"cp -p {env_file} /tmp/launch.env.mine && "
                      f"sed -i 's/^PROVISION_NODES=.*/PROVISION_NODES=node1,node2,node3/' {env_file}")
    try:
        proc = _launch("--timeout", "60", "--", "/tmp/probe.py", timeout=bounds.JOB)
    finally:
        node_exec(LAB, 2, f"mv /tmp/launch.env.mine {env_file}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next((ln for ln in proc.stderr.splitlines() if ln.startswith("provision launch: node2: launch files: ")), None)
    assert line and "launch.env lists 3 nodes, the inventory has 2 (listed but not in the inventory: node3)" in line, \
        proc.stderr
    assert line.split("; fix: ")[1].startswith("ansible-playbook site.yml --tags launchers"), line
    assert "PROBE " not in proc.stdout, proc.stdout


def test_provision_launch_usage_errors_exit_2(tmp_path):
    proc = subprocess.run([tool("provision"), "launch", "-i", str(tmp_path / "missing.yml"), "--", "x.py"],
                          cwd=REPO, env=ansible_env(LAB), capture_output=True, text=True, timeout=bounds.COMMAND)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def _nodelist_inventory(tmp_path: Path, body: str) -> Path:
    return nodelist_inventory(tmp_path / "lab.nodelist.yml", LAB, _lab_status()["nodes"][0]["address"], body,
                              f"{VENV}/bin/python")


def test_nodelist_inventory_from_slurm_ranges_drives_the_lab(rendered, tmp_path):
    cfg = _nodelist_inventory(tmp_path, "plugin: provision.cluster.nodelist\nnodelist: node[1-2]\n")
    # reaches both nodes, and renders exactly what the lab inventory rendered (same names,
    # addresses, slots): nothing changes
    res = run_playbook("playbooks/launchers.yml", lab_name=LAB, inventory=cfg, timeout=bounds.STAGES)
    assert res.rc == 0 and res.changed == 0 and sorted(res.recap) == ["node1", "node2"], res


def test_nodelist_inventory_from_pbs_file(rendered, tmp_path):
    (tmp_path / "nodefile").write_text("node1\nnode1\nnode2\nnode2\n")
    cfg = _nodelist_inventory(tmp_path, f"plugin: provision.cluster.nodelist\npbs_nodefile: {tmp_path}/nodefile\n")
    res = run_playbook("playbooks/launchers.yml", lab_name=LAB, inventory=cfg,
                       extra_vars={"launchers_dir": "/root/.provision/launch-pbs"}, timeout=bounds.STAGES)
    assert res.rc == 0, res
    assert node_exec(LAB, 2, "cat /root/.provision/launch-pbs/hostfile.mpi").stdout.splitlines()[1:] == [
        "node1 slots=2", "node2 slots=2"]
    assert "--nproc-per-node=2" in node_exec(LAB, 1, "cat /root/.provision/launch-pbs/torchrun-c10d.sh").stdout


def test_check_mode_changes_nothing(rendered):
    node_exec(LAB, 2, f"echo junk >> {LAUNCH_DIR}/hostfile.mpi")
    res = run_playbook("playbooks/launchers.yml", lab_name=LAB, extra_args=["--check", "--diff"], timeout=bounds.STAGES)
    assert res.rc == 0 and res.recap["node2"]["changed"] == 1 and res.recap["node1"]["changed"] == 0, res
    assert "junk" in _read(2, "hostfile.mpi")
    res = run_playbook("playbooks/launchers.yml", lab_name=LAB, timeout=bounds.STAGES)
    assert res.rc == 0 and "junk" not in _read(2, "hostfile.mpi")



# ---- the real launchers, over the fabric the roles make ------------------------------------

# every stage that exports to the environment block runs here (python_env: VIRTUAL_ENV and PATH, pdsh, nccl_net):
# shell_env merges what this run's stages export, and a stage left out would only be known from the fact cache
FABRIC_TAGS = "python_env,sshd,ssh_mesh,pdsh,nccl_net,shell_env,launchers"


@pytest.fixture(scope="module")
def fabric(rendered):
    """What site.yml does before a launcher runs, by the roles themselves: sshd on 2222, the key
    mesh with real host keys and `~/.ssh/config`, /etc/hosts, NCCL/GLOO interface from the node's
    own interfaces, the ~/.bashrc block (the node venv first on PATH). From here on the lab
    inventory reaches the nodes over ssh (first contact is done), as on a real cluster: the
    launcher on each node starts from a shell that read the block.
    -> {node: {"env": {NAME: value}, "path": {"PATH": [dirs]}}} what each node's block sets."""
    from ansible_collections.provision.cluster.plugins.module_utils.common.shell_env_check import block_exports

    started = time.monotonic()
    res = run_playbook("site.yml", lab_name=LAB, extra_args=["--tags", FABRIC_TAGS], timeout=bounds.STAGES)
    assert res.rc == 0, res
    print(f"{FABRIC_TAGS} stages: {time.monotonic() - started:.0f} s")
    blocks = {}
    for node in (1, 2):
        text = node_exec(LAB, node, "sed -n '/^# BEGIN provision managed environment/,/^# END provision managed/p' "
                                    "/root/.bashrc").stdout
        blocks[f"node{node}"] = block_exports(text)
        assert blocks[f"node{node}"]["env"].get("NCCL_SOCKET_IFNAME"), text
    return blocks


def _assert_block_env(seen: list[dict], blocks: dict) -> None:
    """Every rank has what its node's ~/.bashrc block exports, the block's PATH entries first, and
    runs the node venv's python."""
    for probe in seen:
        block = blocks[probe["host"]]
        for name, value in block["env"].items():
            assert probe.get(f"env.{name}") == value, (probe["host"], name, probe)
        dirs = block["path"]["PATH"]
        assert probe["env.PATH"].split(":")[:len(dirs)] == dirs, probe
        assert probe["exe"] in (f"{VENV}/bin/python", f"{VENV}/bin/python3"), probe


def _pip(*argv: str, env: dict | None = None, timeout: float = 900) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        cannot_run(f"pip {argv[0]} failed on the controller: {proc.stderr[-300:]}")


def _deepspeedtorch_wheelhouse() -> Path:
    """DeepSpeed has no wheel on PyPI: build one from the sdist (no ops: DS_BUILD_OPS=0), plus its deps."""
    if not list(DS_WHEELHOUSE.glob("deepspeed-*.whl")):
        DS_WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        _pip("wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(DS_WHEELHOUSE), DEEPSPEED,
             env={"DS_BUILD_OPS": "0"})
        _pip("download", "-q", "--only-binary", ":all:", "-d", str(DS_WHEELHOUSE), *DS_DEPS)
    return DS_WHEELHOUSE


def _pythontorch_wheelhouse() -> Path:
    """accelerate with its dependencies (torch itself is in the node venv already), and Colossal-AI
    (a wheel built from its sdist, no CUDA kernels) with what its CLI imports."""
    if not list(PY_WHEELHOUSE.glob("colossalai-*.whl")):
        PY_WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        _pip("download", "-q", "--only-binary", ":all:", "-d", str(PY_WHEELHOUSE), ACCELERATE, "torch==2.13.0",
             *COLOSSALAI_CLI_DEPS)
        for torch_wheel in PY_WHEELHOUSE.glob("torch-*.whl"):
            torch_wheel.unlink()  # in the node venv already (200 MB less to copy)
        _pip("wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(PY_WHEELHOUSE), COLOSSALAI)
    return PY_WHEELHOUSE


def _install_python_launchers(node: int, wheelhouses: list[Path]) -> None:
    """The wheelhouses copied into the node (podman cp: the nodes reach no index), installed into
    its venv with --no-index: DeepSpeed, accelerate, then Colossal-AI without its dependencies."""
    for wh in wheelhouses:
        subprocess.run(["podman", "cp", str(wh), f"{LAB}-node{node}:/tmp/wh-{wh.name}"], check=True, timeout=bounds.INSTALL)
    links = " ".join(f"--find-links /tmp/wh-{wh.name}" for wh in wheelhouses)
    pip = f"{VENV}/bin/pip install -q --no-compile --no-index {links}"
    node_exec(LAB, node, f"({pip} {DEEPSPEED} {ACCELERATE} {' '.join(COLOSSALAI_CLI_DEPS)} && "
                         f"{pip} --no-deps {COLOSSALAI}) && rm -rf /tmp/wh-*", timeout=bounds.INSTALL)


def _install_openmpi(node: int, mirror_url: str) -> None:
    """Debian's openmpi-bin from the lab's package mirror (the only apt source of that command)."""
    node_exec(LAB, node, f"""set -e
command -v mpirun >/dev/null && exit 0
echo 'deb [trusted=yes] {mirror_url}/bookworm ./' > /tmp/lab-mirror.list
o="-q -o Dir::Etc::SourceList=/tmp/lab-mirror.list -o Dir::Etc::SourceParts=/dev/null -o Acquire::http::Timeout=20"
o="$o -o DPkg::Options::=--force-unsafe-io"
export DEBIAN_FRONTEND=noninteractive
apt-get $o update >/tmp/apt-mpi.log 2>&1 && apt-get $o install -y --no-install-recommends openmpi-bin \
    >>/tmp/apt-mpi.log 2>&1 || {{ tail -20 /tmp/apt-mpi.log; exit 1; }}""", timeout=bounds.INSTALL)


@pytest.fixture(scope="module")
def launchers_installed(fabric):
    """DeepSpeed, accelerate, Colossal-AI (pip) and Open MPI (apt) on both nodes, all at once."""
    need_module("torch", "building the DeepSpeed/Colossal-AI wheels needs torch==2.13.0 in the test venv")
    wheelhouses = [_deepspeedtorch_wheelhouse(), _pythontorch_wheelhouse()]
    url = _lab_status()["mirror"]["url"]
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        jobs = [pool.submit(_install_python_launchers, n, wheelhouses) for n in (1, 2)]
        jobs += [pool.submit(_install_openmpi, n, url) for n in (1, 2)]
        for job in jobs:
            job.result()
    print(f"deepspeed, accelerate, colossalai (pip) and openmpi-bin (lab mirror) on 2 nodes: "
          f"{time.monotonic() - started:.0f} s")


def _run_launcher(launcher: str, program: str) -> tuple[subprocess.CompletedProcess, list[dict], float]:
    started = time.monotonic()
    # bounded, with room for a loaded 2-core host (every node and the controller share it)
    proc = _launch("--launcher", launcher, "--timeout", str(int(bounds.JOB_INNER)), "--", program, timeout=bounds.JOB)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, probe_lines(proc.stdout), took


# ---- DeepSpeed's own runner over pdsh, with our hostfile -----------------------------------

def test_deepspeed_runner_over_pdsh_with_our_hostfile(fabric, launchers_installed):
    node_exec(LAB, 1, "ssh -o BatchMode=yes node2 true && pdsh -R ssh -w node1,node2 true", timeout=bounds.COMMAND)
    # `provision launch --launcher deepspeed` starts deepspeed.sh on the master only: DeepSpeed's
    # runner reads our hostfile and starts both ranks over pdsh (ssh on 2222)
    proc, seen, took = _run_launcher("deepspeed", "/tmp/probe.py")
    assert "Running on the following workers: node1,node2" in proc.stdout
    assert sorted((p["host"], p["rank"], p["world"], p["sum"]) for p in seen) == [
        ("node1", "0", "2", "3"), ("node2", "1", "2", "3")], proc.stdout[-3000:]
    _assert_block_env(seen, fabric)
    print(f"provision launch --launcher deepspeed: world 2, {took:.1f} s")


# ---- Open MPI's mpirun (Debian's openmpi-bin from the lab mirror) ---------------------------

def test_mpirun_over_our_hostfile_and_ssh_config(fabric, launchers_installed):
    version = node_exec(LAB, 1, "mpirun --version").stdout.splitlines()[0]
    proc, seen, took = _run_launcher("mpirun", "/tmp/probe.py")
    # mpirun runs on the master only: both ranks' lines come back through it, each names its host
    assert {ln.split("]", 1)[0] for ln in proc.stdout.splitlines() if "PROBE " in ln} == {"[node1"}
    assert sorted((p["host"], p["rank"], p["world"], p["sum"]) for p in seen) == [
        ("node1", "0", "2", "3"), ("node2", "1", "2", "3")], proc.stdout[-3000:]
    _assert_block_env(seen, fabric)
    print(f"provision launch --launcher mpirun ({version}): world 2, {took:.1f} s")


# ---- accelerate (CPU, gloo) ------------------------------------------------------------------

def test_accelerate_with_our_config(fabric, launchers_installed):
    proc, seen, took = _run_launcher("accelerate", "/tmp/acc_probe.py")
    # accelerate.sh runs on every node; machine_rank from each node's accelerate.yaml
    assert sorted((p["host"], p["rank"], p["world"], p["type"], p["backend"], p["sum"]) for p in seen) == [
        ("node1", "0", "2", "MULTI_CPU", "gloo", "3"), ("node2", "1", "2", "MULTI_CPU", "gloo", "3")], proc.stdout[-3000:]
    _assert_block_env(seen, fabric)
    print(f"provision launch --launcher accelerate: world 2, {took:.1f} s")


# ---- Colossal-AI's CLI (`colossalai run --hostfile`) -------------------------------------------

def test_colossalai_run_with_our_hostfile(fabric, launchers_installed):
    proc, seen, took = _run_launcher("colossalai", "/tmp/probe.py")
    # colossalai run on the master reaches node2 over ssh (fabric, our ~/.ssh/config, port 2222)
    # and starts torchrun there with node ranks in hostfile order
    assert sorted((p["host"], p["rank"], p["world"], p["group_rank"], p["sum"]) for p in seen) == [
        ("node1", "0", "2", "0", "3"), ("node2", "1", "2", "1", "3")], proc.stdout[-3000:]
    assert "node2: success" in proc.stdout
    _assert_block_env(seen, fabric)
    print(f"provision launch --launcher colossalai: world 2, {took:.1f} s")
