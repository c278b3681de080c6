"""Renderers (plugins/filter/launchers.py); the launch_dir decision and job control: tests/unit/plugins/module_utils/common/test_launch.py."""

from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest
import yaml

import helpers  # noqa: F401  (puts collections/ on sys.path)
from ansible_collections.provision.cluster.plugins.filter import launchers as L



def nodes(*slots, names=None, ips=None):
    names = names or ["node%d" % (i + 1) for i in range(len(slots))]
    hostvars = {n: {"cluster_address": "10.89.77.%d" % (11 + i), "launchers_slots": s}
                for i, (n, s) in enumerate(zip(names, slots, strict=True))}
    if ips:
        for n, devs in zip(names, ips, strict=True):
            hostvars[n]["launchers_hccl_device_ips"] = devs
    return L.launch_nodes(names, hostvars)


# ---- node list -----------------------------------------------------------------------------

def test_slots_come_from_override_then_nodelist_then_gpus_then_default():
    hv = {
        "a": {"cluster_address": "10.0.0.1", "launchers_slots": 3, "slots": 5, "gpu_count": 8},
        "b": {"cluster_address": "10.0.0.2", "slots": 5, "gpu_count": 8},
        "c": {"cluster_address": "10.0.0.3", "gpu_count": 8},
        "d": {"cluster_address": "10.0.0.4", "gpu_facts": {"gpu_count": 4}},
        "e": {"cluster_address": "10.0.0.5", "gpu_count": 0},
        "f": {"ansible_host": "f.example"},
    }
    got = L.launch_nodes(list(hv), hv, default_slots=2)
    assert [(n["name"], n["slots"], n["rank"]) for n in got] == [
        ("a", 3, 0), ("b", 5, 1), ("c", 8, 2), ("d", 4, 3), ("e", 2, 4), ("f", 2, 5)]
    assert got[5]["address"] == "f.example"


def test_master_is_rank_zero_and_others_keep_order():
    hv = {n: {"cluster_address": n} for n in ("n1", "n2", "n3")}
    got = L.launch_nodes(["n1", "n2", "n3"], hv, master="n2")
    assert [(n["name"], n["rank"]) for n in got] == [("n2", 0), ("n1", 1), ("n3", 2)]


def test_bad_inputs_name_the_problem():
    with pytest.raises(L.LaunchError, match="empty"):
        L.deepspeed_hostfile([])
    with pytest.raises(L.LaunchError, match="node2 has 0 slots"):
        nodes(1, 0)
    with pytest.raises(L.LaunchError, match="nodeX is not one of the nodes"):
        L.node_rank(nodes(1, 1), "nodeX")


# ---- hostfiles and command lines -----------------------------------------------------------

def test_hostfiles():
    ns = nodes(8, 8)
    assert L.deepspeed_hostfile(ns) == "node1 slots=8\nnode2 slots=8\n"
    assert L.mpi_hostfile(ns, header="managed") == "# managed\nnode1 slots=8\nnode2 slots=8\n"
    assert L.colossalai_hostfile(ns) == "node1\nnode2\n"


def test_horovodrun_line_as_in_the_seed():
    # seed 004: horovodrun ... -p 12345 --mpi -H {host_1_ip}:8,{host_2_ip}:8
    assert L.horovodrun_command(nodes(8, 8), ssh_port=12345) == "horovodrun -np 16 -H node1:8,node2:8 -p 12345"
    assert L.horovodrun_command(nodes(8, 4)) == "horovodrun -np 12 -H node1:8,node2:4 -p 2222"


def test_torchrun_static_differs_per_node_and_c10d_is_identical():
    ns = nodes(2, 2)
    static = [L.torchrun_static_command(ns, n, "10.89.77.11", 29500) for n in ("node1", "node2")]
    assert static[0].split() == ["python3", "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
                                 "--node-rank=0", "--master-addr=10.89.77.11", "--master-port=29500"]
    assert "--node-rank=1" in static[1]
    c10d = L.torchrun_c10d_command(ns, "10.89.77.11", 29400, python="/opt/venv/bin/python")
    argv = shlex.split(c10d)
    assert argv[:3] == ["/opt/venv/bin/python", "-m", "torch.distributed.run"]
    assert "--rdzv-backend=c10d" in argv and "--rdzv-endpoint=10.89.77.11:29400" in argv
    assert [a for a in argv if a.startswith("--rdzv-id=")] == ["--rdzv-id=" + L.rdzv_id(ns, 29400)]
    files = [L.launch_files(ns, n, "10.89.77.11") for n in ("node1", "node2")]
    assert files[0]["torchrun-c10d.sh"] == files[1]["torchrun-c10d.sh"]
    assert files[0]["torchrun-static.sh"] != files[1]["torchrun-static.sh"]


def test_c10d_refuses_uneven_slots():
    with pytest.raises(L.LaunchError, match="slots differ: node1=2, node2=1"):
        L.torchrun_c10d_command(nodes(2, 1), "10.0.0.1")
    files = L.launch_files(nodes(2, 1), "node1", "10.0.0.1")
    assert "torchrun-c10d.sh" not in files and "torchrun-static.sh" in files


def test_scripts_are_executable_sh_that_pass_arguments(tmp_path):
    files = L.launch_files(nodes(1, 1), "node2", "10.0.0.1", header="managed")
    for name, spec in files.items():
        (tmp_path / name).write_text(spec["content"])
        os.chmod(tmp_path / name, int(spec["mode"], 8))
    script = files["torchrun-static.sh"]["content"]
    assert script.startswith("#!/bin/sh\n# managed\n") and files["torchrun-static.sh"]["mode"] == "0755"
    # the env file is valid sh and the script passes "$@" through: replace python by echo
    (tmp_path / "torchrun-static.sh").write_text(script.replace("exec python3", "exec echo"))
    out = subprocess.run([str(tmp_path / "torchrun-static.sh"), "train.py", "--lr", "a b"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("--master-port=29500 train.py --lr a b")
    env = subprocess.run(["sh", "-c", "set -a; . %s/launch.env; env" % tmp_path],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert {"NODE_RANK=1", "NNODES=2", "WORLD_SIZE=2", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500",
            "PROVISION_SSH_PORT=2222", "PROVISION_NODES=node1,node2"} <= set(env)


def _render(tmp_path, name="node1", use_gpu=True, *slots):
    files = L.launch_files(nodes(*(slots or (1, 1))), name, "10.0.0.1", python="/opt/venv/bin/python",
                           use_gpu=use_gpu)
    for fname, spec in files.items():
        (tmp_path / fname).write_text(spec["content"])
        os.chmod(tmp_path / fname, int(spec["mode"], 8))
    return files


def _stand_in(tmp_path, name):
    """An executable NAME on PATH that prints its argv (one per line) and the job's variables."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / name).write_text('#!/bin/sh\nfor a in "$@"; do echo "ARG $a"; done\n'
                               'env | grep -E "^(OMPI_ALLOW|ACCELERATE_USE_CPU|MASTER_)" | sed "s/^/ENV /" | sort\n')
    os.chmod(bindir / name, 0o755)
    return {**os.environ, "PATH": "%s:%s" % (bindir, os.environ["PATH"])}


def test_mpirun_script_gives_every_rank_torch_distributed_variables(tmp_path):
    _render(tmp_path)
    out = subprocess.run([str(tmp_path / "mpirun.sh"), "train.py", "--lr", "a b"], env=_stand_in(tmp_path, "mpirun"),
                         capture_output=True, text=True, check=True).stdout.splitlines()
    argv = [ln[4:] for ln in out if ln.startswith("ARG ")]
    assert argv[:6] == ["-np", "2", "--hostfile", "%s/hostfile.mpi" % tmp_path, "--mca", "plm_rsh_args"]
    assert argv[6:11] == ["-p 2222", "-x", "MASTER_ADDR", "-x", "MASTER_PORT"]
    assert argv[11:13] == ["sh", "-c"] and argv[14:] == ["sh", "/opt/venv/bin/python", "train.py", "--lr", "a b"]
    assert "ENV MASTER_ADDR=10.0.0.1" in out and "ENV MASTER_PORT=29500" in out
    root = os.getuid() == 0
    assert ("ENV OMPI_ALLOW_RUN_AS_ROOT=1" in out) is root and ("ENV OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" in out) is root
    # what Open MPI then starts on each node: the rank's variables from OMPI_COMM_WORLD_*, the
    # program with its arguments intact
    rank = subprocess.run(argv[11:13] + [argv[13], "sh", "sh", "-c", 'echo "$RANK $WORLD_SIZE $LOCAL_RANK '
                                                                     '$LOCAL_WORLD_SIZE|$1"', "x", "a b"],
                          env={**os.environ, "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
                               "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
                          capture_output=True, text=True, check=True).stdout
    assert rank == "3 4 1 2|a b\n"
    # --no-python: the program as it is (a binary, a shell script)
    out = subprocess.run([str(tmp_path / "mpirun.sh"), "--no-python", "hostname"], env=_stand_in(tmp_path, "mpirun"),
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert [ln[4:] for ln in out if ln.startswith("ARG ")][-2:] == ["sh", "hostname"]


@pytest.mark.parametrize("use_gpu", [True, False])
def test_accelerate_script_runs_the_venv_accelerate(tmp_path, use_gpu):
    _render(tmp_path, "node2", use_gpu)
    env = _stand_in(tmp_path, "python")
    script = (tmp_path / "accelerate.sh").read_text().replace("/opt/venv/bin/python", "python")
    (tmp_path / "accelerate.sh").write_text(script)
    out = subprocess.run([str(tmp_path / "accelerate.sh"), "train.py", "--x"], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    argv = [ln[4:] for ln in out if ln.startswith("ARG ")]
    # without GPUs: accelerate's torchrun path (--multi_gpu) with ACCELERATE_USE_CPU, since its
    # MULTI_CPU path starts one process per node that sees world size 1 (measured; README)
    flags = [] if use_gpu else ["--multi_gpu"]
    assert argv == ["-m", "accelerate.commands.launch", *flags, "--config_file", "%s/accelerate.yaml" % tmp_path,
                    "train.py", "--x"]
    assert ("ENV ACCELERATE_USE_CPU=true" in out) is (not use_gpu)


def test_accelerate_single_cpu_process_needs_no_multi_gpu():
    assert "--multi_gpu" not in L.accelerate_command(nodes(1), "a.yaml", use_gpu=False)


def test_accelerate_config_per_node():
    ns = nodes(4, 4)
    cfg = [yaml.safe_load(L.accelerate_config(ns, n, "10.89.77.11", 29500, header="m")) for n in ("node1", "node2")]
    assert cfg[0]["machine_rank"] == 0 and cfg[1]["machine_rank"] == 1
    for c in cfg:
        assert c["main_process_ip"] == "10.89.77.11" and c["main_process_port"] == 29500
        assert c["num_machines"] == 2 and c["num_processes"] == 8
        assert c["rdzv_backend"] == "c10d" and c["same_network"] is False
        assert c["distributed_type"] == "MULTI_GPU" and c["use_cpu"] is False
    cpu = yaml.safe_load(L.accelerate_config(ns, "node1", "10.0.0.1", use_gpu=False))
    assert cpu["distributed_type"] == "MULTI_CPU" and cpu["use_cpu"] is True


def test_accelerate_config_takes_the_address_as_ansible_hands_it_in():
    """ansible-core < 2.19 gives a filter a templated string as AnsibleUnsafeText (whose str() is itself), which
    yaml.safe_dump cannot represent: site.yml failed in the launchers stage on 2.16 ("cannot represent an
    object: '10.89.176.11'", the version matrix's lab cell). wrap_var gives what this ansible-core hands in."""
    from ansible.utils.unsafe_proxy import wrap_var

    class Unsafe(str):   # the < 2.19 behaviour, also checked on 2.19 (where wrap_var gives a plain str)
        def __str__(self):
            return self

    for addr in (wrap_var("10.89.176.11"), Unsafe("10.89.176.11")):
        cfg = yaml.safe_load(L.accelerate_config(nodes(2), "node1", addr, 29500, header="m"))
        assert cfg["main_process_ip"] == "10.89.176.11"


def test_sbatch_script_uses_first_host_of_allocation(tmp_path):
    text = L.sbatch_script(nodes(8, 8), 29500, python="/opt/venv/bin/python",
                           extra_directives=["--partition=gpu"])
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert "#SBATCH --nodes=2" in lines and "#SBATCH --gpus-per-node=8" in lines and "#SBATCH --partition=gpu" in lines
    assert 'hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST")' in lines and "head_node=${hosts%%$'\\n'*}" in lines
    assert "srun --export=ALL --kill-on-bad-exit=1 /opt/venv/bin/python -m torch.distributed.run" in text
    assert '--rdzv-backend=c10d --rdzv-endpoint="$head_node:29500" --rdzv-id="$SLURM_JOB_ID"' in text
    # SBATCH directives must come before the first command
    first_cmd = next(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
    assert all(i < first_cmd for i, ln in enumerate(lines) if ln.startswith("#SBATCH"))
    (tmp_path / "s.sh").write_text(text)
    subprocess.run(["bash", "-n", str(tmp_path / "s.sh")], check=True)


FAKE_SLURM = {
    # srun as far as these tests need it: drop its options, run the task here (the environment it was given)
    "srun": '#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n',
    # the host list in two writes, the second after a reader of one line has gone (as scontrol's stdio buffer
    # of a large allocation): `scontrol ... | head -n1` under pipefail died of SIGPIPE (141) here, at random
    # before this pause made it certain
    "scontrol": "#!/bin/sh\necho node1\nsleep 0.3\necho node2\n",
}


def _slurm_sandbox(tmp_path):
    """A fake venv python (prints what the job sees) and a fake srun/scontrol under /usr/local/bin-like dir."""
    bin_dir = tmp_path / "bin"
    venv = tmp_path / "venv" / "bin"
    for d in (bin_dir, venv):
        d.mkdir(parents=True)
    for name, body in FAKE_SLURM.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    py = venv / "python"
    py.write_text('#!/bin/sh\necho "python=$0 args=$* NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME-unset} '
                  'VIRTUAL_ENV=${VIRTUAL_ENV-unset} HOME=${HOME-unset}"\n')
    py.chmod(0o755)
    launch = tmp_path / "launch"
    launch.mkdir()
    env = {"env": {"NCCL_SOCKET_IFNAME": "eth1", "VIRTUAL_ENV": str(venv.parent)}, "path": [str(venv)],
           "ld_library_path": [], "source": []}
    files = L.launch_files(nodes(1, 1), "node1", "10.0.0.1", python=str(py), use_gpu=False, environment=env,
                           launch_dir=str(launch))
    for fname, f in files.items():
        (launch / fname).write_text(f["content"])
        (launch / fname).chmod(int(f["mode"], 8))
    return bin_dir, py, launch


def test_sbatch_job_takes_its_environment_from_us_not_the_submitter(tmp_path):
    """`sbatch --export=NONE` (no PATH, no HOME, no venv: srun gets SLURM_EXPORT_ENV=NONE): the task still
    runs the environment's python, with the cluster's variables, because the script names both."""
    bin_dir, py, launch = _slurm_sandbox(tmp_path)
    text = (launch / "sbatch.sh").read_text()
    assert "srun --export=ALL" in text and f"{launch}/cluster.env.sh" in text.replace("'", "")
    # what slurmd runs with --export=NONE: nothing of the submitter's environment (no HOME, no venv); the
    # fake srun first on the PATH
    env = {"SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_ID": "7",
           "SLURM_EXPORT_ENV": "NONE", "PATH": f"{bin_dir}:/usr/bin:/bin"}
    out = subprocess.run(["/bin/bash", str(launch / "sbatch.sh"), "train.py"], env=env, capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert f"python={py} args=-m torch.distributed.run" in out and "train.py" in out
    assert "NCCL_SOCKET_IFNAME=eth1" in out and f"VIRTUAL_ENV={py.parent.parent}" in out and "HOME=unset" not in out


def test_launch_scripts_source_the_cluster_environment_themselves(tmp_path):
    """Started with no environment at all (cron, sudo -u, a portal): the venv's python, the cluster's variables."""
    _bin, py, launch = _slurm_sandbox(tmp_path)
    out = subprocess.run([str(launch / "torchrun-c10d.sh"), "train.py"], env={}, capture_output=True, text=True,
                         timeout=30, check=True).stdout
    assert f"python={py} args=-m torch.distributed.run" in out and "NCCL_SOCKET_IFNAME=eth1" in out


def test_launch_dir_path_expression():
    assert L._path_expr("~trainer/.provision/launch") == "~trainer/.provision/launch"
    assert L._path_expr("~trainer/my dir") == "~trainer/'my dir'"
    assert L._path_expr("/data/launch") == "/data/launch"
    with pytest.raises(L.LaunchError):
        L._path_expr("relative/launch")
    with pytest.raises(L.LaunchError):
        L._path_expr("~$(reboot)/x")


def test_sbatch_without_gpus_asks_for_none():
    assert "--gpus-per-node" not in L.sbatch_script(nodes(1, 1), use_gpu=False)


def test_hccl_rank_table_matches_the_seed_format():
    ips = [["192.168.100.%d" % (101 + d) for d in range(8)], ["192.168.101.%d" % (101 + d) for d in range(8)]]
    table = L.hccl_rank_table(nodes(8, 8, ips=ips))
    assert table["server_count"] == "2" and table["status"] == "completed" and table["version"] == "1.0"
    assert [s["server_id"] for s in table["server_list"]] == ["10.89.77.11", "10.89.77.12"]
    ranks = [int(d["rank_id"]) for s in table["server_list"] for d in s["device"]]
    assert ranks == list(range(16))
    second = table["server_list"][1]["device"]
    assert second[0] == {"device_id": "0", "device_ip": "192.168.101.101", "rank_id": "8"}
    assert sorted(table) == ["server_count", "server_list", "status", "version"]
    files = L.launch_files(nodes(8, 8, ips=ips), "node1", "10.0.0.1")
    assert json.loads(files["hccl_rank_table.json"]["content"]) == table
    assert "hccl_rank_table.json" not in L.launch_files(nodes(8, 8), "node1", "10.0.0.1")


def test_hccl_needs_ips_on_every_node():
    with pytest.raises(L.LaunchError, match="node2 has no device IPs"):
        L.hccl_rank_table(nodes(1, 1, ips=[["1.1.1.1"], []]))


def test_filters_are_registered_and_documented():
    names = L.FilterModule().filters()
    assert "launch_nodes" in names and "hccl_rank_table" in names
    for name, func in names.items():
        assert callable(func)
        doc = yaml.safe_load((helpers.REPO / "plugins" / "filter" / f"{name}.yml").read_text())
        assert doc["DOCUMENTATION"]["name"] == name


def test_launch_files_checks_and_counts_once_and_renders_as_each_renderer_alone():
    """launch_files checks the node list and counts its slots once for all its files: the files are those
    the renderers make each on their own, and a bad list is refused as each of them refuses it."""
    for ns in (nodes(2, 2, 2), nodes(4, 2, 1), nodes(8, 8, ips=[["1.1.1.%d" % i for i in range(8)]] * 2)):
        files = L.launch_files(ns, "node2", "10.89.77.11", header="h")
        assert files["hostfile.mpi"]["content"] == L.mpi_hostfile(ns, header="h")
        assert files["hostfile.deepspeed"]["content"] == L.deepspeed_hostfile(ns, header="h")
        assert files["hostfile.colossalai"]["content"] == L.colossalai_hostfile(ns)
        assert files["launch.env"]["content"] == L.launch_env(ns, "node2", "10.89.77.11", header="h")
        assert ("sbatch.sh" in files) == (L.uniform_slots(ns) is not None)
        if "sbatch.sh" in files:
            assert files["sbatch.sh"]["content"] == L.sbatch_script(ns, header="h")
            assert "--nproc-per-node=%d " % L.uniform_slots(ns) in files["torchrun-c10d.sh"]["content"]
        assert "mpirun -np %d " % L.total_slots(ns) in files["mpirun.sh"]["content"]
    twice = nodes(1, 1) + nodes(1)
    with pytest.raises(L.LaunchError, match="node1 appears twice"):
        L.launch_files(twice, "node1", "10.0.0.1")
    with pytest.raises(L.LaunchError, match="empty"):
        L.launch_files([], "node1", "10.0.0.1")


def test_an_unknown_environment_never_empties_the_nodes_cluster_env(tmp_path):
    """launchers run alone from another inventory (its own fact cache: no shell_env merge known) once wrote an
    empty cluster.env.sh over the node's, and every launcher lost the venv: unknown keeps what the node has."""
    env = {"env": {"VIRTUAL_ENV": "/opt/provision/venv"}, "path": ["/opt/provision/venv/bin"]}
    known = L.launch_files(nodes(2, 1), "node1", "10.0.0.1", environment=env)
    unknown = L.launch_files(nodes(2, 1), "node1", "10.0.0.1", environment={}, environment_known=False)
    assert "keep" not in known["cluster.env.sh"] and unknown["cluster.env.sh"]["keep"] is True
    # the scripts source it either way
    assert unknown["deepspeed.sh"]["content"] == known["deepspeed.sh"]["content"]
    launch = tmp_path / "launch"
    launch.mkdir()
    (launch / "cluster.env.sh").write_text("export VIRTUAL_ENV=/opt/provision/venv\n")
    res = helpers.run_module("launch_dir", {"path": str(launch), "files": unknown, "absent": []})
    assert "cluster.env.sh" not in res["written"] and "deepspeed.sh" in res["written"], res
    assert (launch / "cluster.env.sh").read_text() == "export VIRTUAL_ENV=/opt/provision/venv\n"
    # a node that has none gets the fallback
    (launch / "cluster.env.sh").unlink()
    res = helpers.run_module("launch_dir", {"path": str(launch), "files": unknown, "absent": []})
    assert "cluster.env.sh" in res["written"] and (launch / "cluster.env.sh").exists()
