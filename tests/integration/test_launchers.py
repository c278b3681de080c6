"""launchers in a real 2-node lab: rendered files, the c10d torchrun command started on both nodes,
`provision launch` (success and fail-fast), and the nodelist inventory plugin driving the lab.

torch comes from the controller's wheel (/opt/wheels, pinned 2.13.0): a wheelhouse is made here
once (cached) and installed into a venv on each node, as the python_env role will do in site.yml.
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

from helpers import REPO, ansible_env, lab_name, node_exec, run_playbook, tool

pytestmark = pytest.mark.lab

LAB = lab_name("ln")
VENV = "/opt/ln-venv"
LAUNCH_DIR = "/root/.provision/launch"
WHEELHOUSE = Path.home() / ".cache" / "provision" / "wheelhouse-torch"
DS_WHEELHOUSE = Path.home() / ".cache" / "provision" / "wheelhouse-deepspeed"
DEEPSPEED = "deepspeed==0.19.8"
DS_DEPS = ["hjson", "ninja", "msgpack", "psutil", "py-cpuinfo", "pydantic", "tqdm", "einops", "packaging", "numpy"]

PROBE = """\
import os, socket, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
print("PROBE host=%s rank=%d world=%d group_rank=%s sum=%d" % (socket.gethostname(), rank, world,
      os.environ.get("GROUP_RANK", "-"), int(t.item())), flush=True)
dist.destroy_process_group()
"""

FAIL = """\
import os, sys, time
print("FAIL host-rank", os.environ["GROUP_RANK"], flush=True)
if os.environ["GROUP_RANK"] == "1":
    sys.exit(3)
time.sleep(600)
"""


def _wheelhouse() -> Path:
    # torch does not require numpy, but the nodes install both (torch warns without it)
    if not list(WHEELHOUSE.glob("torch-2.13.0*.whl")) or not list(WHEELHOUSE.glob("numpy-*.whl")):
        WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d",
                               str(WHEELHOUSE), "torch==2.13.0", "numpy"], capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            pytest.skip(f"cannot build a torch 2.13.0 wheelhouse on the controller: {proc.stderr[-300:]}")
    return WHEELHOUSE


def _install_torch(node: int, wheelhouse: Path) -> None:
    container = f"{LAB}-node{node}"
    if node_exec(LAB, node, f"{VENV}/bin/python -c 'import torch'", check=False).returncode == 0:
        return
    subprocess.run(["podman", "cp", str(wheelhouse), f"{container}:/tmp/wheelhouse"], check=True, timeout=300)
    node_exec(LAB, node, f"python3 -m venv {VENV} && {VENV}/bin/pip install -q --no-compile --no-index "
                         f"--find-links /tmp/wheelhouse torch==2.13.0 numpy && rm -rf /tmp/wheelhouse", timeout=600)


def _lab_status() -> dict:
    return json.loads(subprocess.run([tool("provision"), "lab", "status", "--name", LAB, "--json"],
                                     capture_output=True, text=True, check=True, timeout=120).stdout)


@pytest.fixture(scope="module")
def lab(lab_factory):
    lab = lab_factory(LAB, nodes=2)
    wheelhouse = _wheelhouse()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda n: _install_torch(n, wheelhouse), (1, 2)))
    # Node names must resolve to cluster addresses (c10d checks whether the endpoint is this host,
    # gloo binds to the host name's address). The ssh_mesh role writes these /etc/hosts entries
    # in site.yml; this module runs the launchers stage alone, so it writes them itself.
    hosts = "".join(f"{n['address']} {n['name']}\n" for n in _lab_status()["nodes"])
    for node in (1, 2):
        node_exec(LAB, node, f"grep -q ' node1$' /etc/hosts || printf '{hosts}' >> /etc/hosts; "
                             f"cat > /tmp/probe.py <<'EOF'\n{PROBE}EOF\ncat > /tmp/fail.py <<'EOF'\n{FAIL}EOF")
    return lab


@pytest.fixture(scope="module")
def rendered(lab):
    first = run_playbook("playbooks/launchers.yml", lab_name=LAB, extra_vars={"launchers_python": f"{VENV}/bin/python"},
                         timeout=600)
    assert first.rc == 0, first
    second = run_playbook("playbooks/launchers.yml", lab_name=LAB,
                          extra_vars={"launchers_python": f"{VENV}/bin/python"}, timeout=600)
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


def _probe_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if "PROBE " in line:
            out.append(dict(kv.split("=", 1) for kv in line.split("PROBE ", 1)[1].split()))
    return out


def test_rendered_c10d_command_runs_on_both_nodes(rendered):
    procs = [subprocess.Popen(["podman", "exec", f"{LAB}-node{n}", "timeout", "120",
                               f"{LAUNCH_DIR}/torchrun-c10d.sh", "/tmp/probe.py"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n in (1, 2)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    seen = [_probe_lines(o) for o in outs]
    # c10d orders nodes by host name: node1 gets rank 0, node2 rank 1; one process per node (1 slot)
    assert [(s[0]["host"], s[0]["rank"], s[0]["group_rank"]) for s in seen] == [("node1", "0", "0"),
                                                                              ("node2", "1", "1")], outs
    assert all(s[0]["world"] == "2" and s[0]["sum"] == "3" for s in seen), outs


def _launch(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([tool("provision"), "launch", "-i", str(REPO / "inventory" / "lab"), *args],
                          cwd=REPO, env=ansible_env(LAB), capture_output=True, text=True, timeout=timeout)


def test_provision_launch_streams_prefixed_output(rendered):
    started = time.monotonic()
    proc = _launch("--timeout", "180", "--", "/tmp/probe.py")
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if "PROBE " in ln]
    assert sorted(ln.split("]", 1)[0] + "]" for ln in lines) == ["[node1]", "[node2]"], proc.stdout
    by_node = {ln.split("]", 1)[0].strip("[ "): _probe_lines(ln)[0] for ln in lines}
    assert by_node["node1"]["rank"] == "0" and by_node["node2"]["rank"] == "1"
    assert {p["world"] for p in by_node.values()} == {"2"}
    print(f"provision launch (2 nodes, torchrun c10d): {took:.1f} s")


def test_provision_launch_stops_the_others_when_one_fails(rendered):
    started = time.monotonic()
    proc = _launch("--timeout", "240", "--", "/tmp/fail.py")
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "failed (exit 1); stopping node1" in proc.stderr, proc.stderr
    assert took < 200, "the sleeping node was not stopped"
    # nothing of the job is left on the node that was stopped
    left = node_exec(LAB, 1, "pgrep -f '[/]tmp/fail.py' || true").stdout.strip()
    assert left == "", left


def test_provision_launch_usage_errors_exit_2(tmp_path):
    proc = subprocess.run([tool("provision"), "launch", "-i", str(tmp_path / "missing.yml"), "--", "x.py"],
                          cwd=REPO, env=ansible_env(LAB), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def _nodelist_inventory(tmp_path: Path, body: str) -> Path:
    subnet = _lab_status()["nodes"][0]["address"].rsplit(".", 1)[0]
    cfg = tmp_path / "lab.nodelist.yml"
    cfg.write_text(body + f"""
address_template: "{subnet}.{{{{ number + 10 }}}}"
vars:
  ansible_connection: containers.podman.podman
  ansible_host: "{LAB}-{{{{ name }}}}"
  ansible_user: root
  launchers_python: {VENV}/bin/python
""")
    return cfg


def test_nodelist_inventory_from_slurm_ranges_drives_the_lab(rendered, tmp_path):
    cfg = _nodelist_inventory(tmp_path, "plugin: provision.cluster.nodelist\nnodelist: node[1-2]\n")
    # reaches both nodes, and renders exactly what the lab inventory rendered (same names,
    # addresses, slots): nothing changes
    res = run_playbook("playbooks/launchers.yml", lab_name=LAB, inventory=cfg, timeout=600)
    assert res.rc == 0 and res.changed == 0 and sorted(res.recap) == ["node1", "node2"], res


def test_nodelist_inventory_from_pbs_file(rendered, tmp_path):
    (tmp_path / "nodefile").write_text("node1\nnode1\nnode2\nnode2\n")
    cfg = _nodelist_inventory(tmp_path, f"plugin: provision.cluster.nodelist\npbs_nodefile: {tmp_path}/nodefile\n")
    res = run_playbook("playbooks/launchers.yml", lab_name=LAB, inventory=cfg,
                       extra_vars={"launchers_dir": "/root/.provision/launch-pbs"}, timeout=600)
    assert res.rc == 0, res
    assert node_exec(LAB, 2, "cat /root/.provision/launch-pbs/hostfile.mpi").stdout.splitlines()[1:] == [
        "node1 slots=2", "node2 slots=2"]
    assert "--nproc-per-node=2" in node_exec(LAB, 1, "cat /root/.provision/launch-pbs/torchrun-c10d.sh").stdout


def test_check_mode_changes_nothing(rendered):
    node_exec(LAB, 2, f"echo junk >> {LAUNCH_DIR}/hostfile.mpi")
    res = run_playbook("playbooks/launchers.yml", lab_name=LAB, extra_args=["--check", "--diff"],
                       extra_vars={"launchers_python": f"{VENV}/bin/python"}, timeout=600)
    assert res.rc == 0 and res.recap["node2"]["changed"] == 1 and res.recap["node1"]["changed"] == 0, res
    assert "junk" in _read(2, "hostfile.mpi")
    res = run_playbook("playbooks/launchers.yml", lab_name=LAB, extra_vars={"launchers_python": f"{VENV}/bin/python"},
                       timeout=600)
    assert res.rc == 0 and "junk" not in _read(2, "hostfile.mpi")



# ---- DeepSpeed's own runner over pdsh, with our hostfile -----------------------------------

def _deepspeed_wheelhouse() -> Path:
    """DeepSpeed has no wheel on PyPI: build one from the sdist (no ops: DS_BUILD_OPS=0), plus its deps."""
    if not list(DS_WHEELHOUSE.glob("deepspeed-*.whl")):
        pytest.importorskip("torch", reason="building the DeepSpeed wheel needs torch==2.13.0 in the test venv")
        DS_WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DS_BUILD_OPS": "0"}
        for argv in (["wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(DS_WHEELHOUSE), DEEPSPEED],
                     ["download", "-q", "--only-binary", ":all:", "-d", str(DS_WHEELHOUSE), *DS_DEPS]):
            proc = subprocess.run([sys.executable, "-m", "pip", *argv], capture_output=True, text=True,
                                  timeout=900, env=env)
            if proc.returncode != 0:
                pytest.skip(f"cannot make a DeepSpeed wheelhouse here: {proc.stderr[-300:]}")
    return DS_WHEELHOUSE


def _ssh_mesh(nodes: list[dict]) -> None:
    """What sshd + ssh_mesh do in site.yml, by hand: sshd on 2222, a key pair per node (made on the
    node), every public key authorized everywhere, real host keys in known_hosts, `ssh nodeN`
    configured for port 2222. No host-key checking is turned off."""
    pubs, hostkeys = [], []
    for n in nodes:
        out = node_exec(LAB, n["index"], "set -e; ssh-keygen -A >/dev/null; mkdir -p /run/sshd /root/.ssh; "
                                         "chmod 700 /root/.ssh; pgrep -x sshd >/dev/null || /usr/sbin/sshd -p 2222; "
                                         "test -f /root/.ssh/id_ed25519 || "
                                         "ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519; "
                                         "cat /root/.ssh/id_ed25519.pub; cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub"
                        ).stdout.splitlines()
        pubs.append(out[0])
        hostkeys.append(f"[{n['name']}]:2222,[{n['address']}]:2222 {out[1]}")
    config = "".join(f"Host {n['name']}\n  HostName {n['address']}\n  Port 2222\n  User root\n"
                     f"  IdentityFile /root/.ssh/id_ed25519\n" for n in nodes)
    files = {"authorized_keys": "\n".join(pubs) + "\n", "known_hosts": "\n".join(hostkeys) + "\n", "config": config}
    for n in nodes:
        for name, text in files.items():
            node_exec(LAB, n["index"], f"cat > /root/.ssh/{name} <<'EOF'\n{text}EOF\nchmod 600 /root/.ssh/{name}")


def test_deepspeed_runner_over_pdsh_with_our_hostfile(rendered):
    wheelhouse = _deepspeed_wheelhouse()
    nodes = _lab_status()["nodes"]

    def install(index: int) -> None:
        subprocess.run(["podman", "cp", str(wheelhouse), f"{LAB}-node{index}:/tmp/whds"], check=True, timeout=300)
        node_exec(LAB, index, f"{VENV}/bin/pip install -q --no-compile --no-index --find-links /tmp/whds "
                              f"{DEEPSPEED} && rm -rf /tmp/whds", timeout=600)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(install, [n["index"] for n in nodes]))
    _ssh_mesh(nodes)
    node_exec(LAB, 1, "ssh -o BatchMode=yes node2 true && pdsh -R ssh -w node1,node2 true", timeout=60)
    # `provision launch --launcher deepspeed` starts deepspeed.sh on the master only: DeepSpeed's
    # runner reads our hostfile and starts both ranks over pdsh (ssh on 2222)
    proc = _launch("--launcher", "deepspeed", "--timeout", "240", "--", "/tmp/probe.py")
    seen = _probe_lines(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Running on the following workers: node1,node2" in proc.stdout
    assert sorted((p["host"], p["rank"], p["world"], p["sum"]) for p in seen) == [
        ("node1", "0", "2", "3"), ("node2", "1", "2", "3")], proc.stdout[-3000:]
