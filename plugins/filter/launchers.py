# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Renderers for every launcher's files, as Jinja filters (FQCN provision.cluster.<name>).

All functions are pure: they take a normalized node list and return text (or a dict). The node
list is what `launch_nodes` builds from the inventory:

    [{"name": "node1", "address": "10.89.77.11", "slots": 2, "rank": 0,
      "device_ips": ["192.168.100.101", ...]}, ...]

`name` is what the launchers put in hostfiles (the inventory name: the ssh_mesh role makes it
resolvable through /etc/hosts and ~/.ssh/config), `address` is the cluster address (used for the
rendezvous endpoint), `slots` is the number of processes on that node (GPUs, or a variable).
"""

from __future__ import annotations

import hashlib
import json
import shlex

import yaml

from ansible_collections.provision.cluster.plugins.module_utils.common.bashrc import render_block
from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import DEFAULT_MASTER_PORT, DEFAULT_SSH_PORT, node_address
from ansible_collections.provision.cluster.plugins.module_utils.common.launch import launch_order

DEFAULT_PORT = DEFAULT_MASTER_PORT


class LaunchError(ValueError):
    """An input no launcher can use (message names the problem)."""


# Scripts find their files next to themselves: `here` is set at the top of every launch script.
HERE = '"$here"'


def _q(arg):
    arg = str(arg)
    if arg.startswith(HERE):
        return HERE + shlex.quote(arg[len(HERE):])
    return shlex.quote(arg)


def _header(header):
    if not header:
        return ""
    return "".join("# %s\n" % line if line else "#\n" for line in str(header).splitlines())


class _Checked(list):
    """A node list _check() has passed, as launch_files hands it to each renderer, with its world size and
    its slots per node: checked and counted once, not once per renderer (each reads every node)."""

    def __init__(self, nodes):
        super().__init__(nodes)
        slots = [_slots(n) for n in self]
        self.total = sum(slots)
        counts = set(slots)
        self.uniform = counts.pop() if len(counts) == 1 else None


def _check(nodes):
    if isinstance(nodes, _Checked):
        return nodes
    if not nodes:
        raise LaunchError("no nodes: the group is empty")
    seen = set()
    for node in nodes:
        if node["name"] in seen:
            raise LaunchError("node %s appears twice" % node["name"])
        seen.add(node["name"])
        if int(node.get("slots", 0)) < 1:
            raise LaunchError("node %s has %r slots (needs >= 1)" % (node["name"], node.get("slots")))
    return nodes


def _slots(node):
    return int(node["slots"])


def total_slots(nodes):
    """Number of processes of the whole job (world size)."""
    if isinstance(nodes, _Checked):
        return nodes.total
    return sum(_slots(n) for n in _check(nodes))


def uniform_slots(nodes):
    """The slots per node when every node has the same number, else None."""
    if isinstance(nodes, _Checked):
        return nodes.uniform
    counts = {_slots(n) for n in _check(nodes)}
    return counts.pop() if len(counts) == 1 else None


def launch_nodes(hosts, hostvars, default_slots=1, master=None):
    """Build the node list from play hosts and their hostvars.

    slots: host var `launchers_slots` if set, else host var `slots` (set by the nodelist
    inventory from a hostfile or PBS node file), else the GPU count from facts (`gpu_count`, or
    `gpu_facts.gpu_count` from the gpu_facts module) when > 0, else `default_slots`.
    The master (default: first host) is rank 0; the others keep inventory order.
    """
    nodes = []
    for host in hosts:
        hv = hostvars[host]
        slots = hv.get("launchers_slots")
        if slots in (None, ""):
            slots = hv.get("slots")  # from the nodelist inventory (hostfile slots=N, PBS repeats)
        if slots in (None, ""):
            gpus = hv.get("gpu_count")
            if gpus in (None, ""):
                gpus = (hv.get("gpu_facts") or {}).get("gpu_count")
            slots = int(gpus) if gpus not in (None, "") and int(gpus) > 0 else int(default_slots)
        node = {
            "name": str(host),
            "address": node_address(hv, host),
            "slots": int(slots),
        }
        ips = hv.get("launchers_hccl_device_ips")
        if ips:
            node["device_ips"] = [str(ip) for ip in ips]
        nodes.append(node)
    by_name = {n["name"]: n for n in nodes}
    nodes = [by_name[n] for n in launch_order([n["name"] for n in nodes], master)]
    for rank, node in enumerate(nodes):
        node["rank"] = rank
    return _check(nodes)


def _node(nodes, name):
    for node in _check(nodes):
        if node["name"] == name:
            return node
    raise LaunchError("%s is not one of the nodes (%s)" % (name, ", ".join(n["name"] for n in nodes)))


def node_rank(nodes, name):
    """The rank (0 = master) of node NAME."""
    return _node(nodes, name)["rank"]


def rdzv_id(nodes, port=DEFAULT_PORT):
    """A stable rendezvous id for this set of nodes: the same on every node, every run."""
    key = ",".join(n["name"] for n in nodes) + ":%s" % port
    return "provision-" + hashlib.sha256(key.encode()).hexdigest()[:12]


# ---- hostfiles -----------------------------------------------------------------------------

def deepspeed_hostfile(nodes, header=None):
    """DeepSpeed's hostfile: `name slots=N` per line (deepspeed.launcher.runner.fetch_hostfile)."""
    return _header(header) + "".join("%s slots=%d\n" % (n["name"], _slots(n)) for n in _check(nodes))


def mpi_hostfile(nodes, header=None):
    """OpenMPI's hostfile: `name slots=N` per line (mpirun --hostfile)."""
    return _header(header) + "".join("%s slots=%d\n" % (n["name"], _slots(n)) for n in _check(nodes))


def colossalai_hostfile(nodes):
    """Colossal-AI's hostfile: one host name per line, nothing else (colossalai run --hostfile)."""
    return "".join("%s\n" % n["name"] for n in _check(nodes))


# ---- command lines -------------------------------------------------------------------------

def horovodrun_command(nodes, ssh_port=DEFAULT_SSH_PORT):
    """`horovodrun -np T -H a:N,b:N -p PORT` (the program follows)."""
    hosts = ",".join("%s:%d" % (n["name"], _slots(n)) for n in _check(nodes))
    return "horovodrun -np %d -H %s -p %d" % (total_slots(nodes), hosts, int(ssh_port))


def _torchrun(python):
    return "%s -m torch.distributed.run" % _q(python)


def torchrun_static_command(nodes, name, master_addr, master_port=DEFAULT_PORT, python="python3"):
    """torchrun with static rendezvous: one command per node (its --node-rank)."""
    node = _node(nodes, name)
    return ("%s --nnodes=%d --nproc-per-node=%d --node-rank=%d --master-addr=%s --master-port=%d"
            % (_torchrun(python), len(nodes), _slots(node), node["rank"], _q(master_addr), int(master_port)))


def torchrun_c10d_command(nodes, master_addr, master_port=DEFAULT_PORT, python="python3", run_id=None):
    """torchrun with c10d rendezvous: the same command on every node.

    Needs the same slots on every node (the command must be identical); --max-restarts=0 so a
    failure ends the job instead of re-forming it.
    """
    per_node = uniform_slots(nodes)
    if per_node is None:
        raise LaunchError("c10d command must be identical on all nodes, but slots differ: %s"
                          % ", ".join("%s=%d" % (n["name"], _slots(n)) for n in nodes))
    return ("%s --nnodes=%d --nproc-per-node=%d --rdzv-backend=c10d --rdzv-endpoint=%s:%d --rdzv-id=%s"
            " --max-restarts=0"
            % (_torchrun(python), len(nodes), per_node, master_addr, int(master_port),
               _q(run_id or rdzv_id(nodes, master_port))))


def deepspeed_command(nodes, hostfile, master_addr, master_port=DEFAULT_PORT, ssh_port=DEFAULT_SSH_PORT,
                      launcher="pdsh", python="python3"):
    """The `deepspeed` runner (as `PYTHON -m deepspeed.launcher.runner`, so the venv's own) on the
    master over our hostfile; it reaches the others over pdsh, ssh on the cluster port."""
    _check(nodes)
    return ("%s -m deepspeed.launcher.runner --hostfile=%s --master_addr=%s --master_port=%d --ssh_port=%d"
            " --launcher=%s" % (_q(python), _q(hostfile), _q(master_addr), int(master_port), int(ssh_port),
                                launcher))


# Each rank of mpirun.sh: torch.distributed's variables from Open MPI's own (MASTER_ADDR and
# MASTER_PORT come from launch.env, forwarded with -x), then the program.
MPI_RANK_ENV = ('export RANK="$OMPI_COMM_WORLD_RANK" WORLD_SIZE="$OMPI_COMM_WORLD_SIZE"'
                ' LOCAL_RANK="$OMPI_COMM_WORLD_LOCAL_RANK" LOCAL_WORLD_SIZE="$OMPI_COMM_WORLD_LOCAL_SIZE"; exec "$@"')


def mpirun_command(nodes, hostfile, ssh_port=DEFAULT_SSH_PORT):
    """Open MPI `mpirun` over our hostfile, ssh on the cluster port; every rank gets RANK,
    WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (from OMPI_COMM_WORLD_*) and MASTER_ADDR/MASTER_PORT,
    then runs the program that follows (mpirun.sh puts the Python in front of it)."""
    return ("mpirun -np %d --hostfile %s --mca plm_rsh_args %s -x MASTER_ADDR -x MASTER_PORT sh -c %s sh"
            % (total_slots(nodes), _q(hostfile), _q("-p %d" % int(ssh_port)), _q(MPI_RANK_ENV)))


def mpirun_prelude(python="python3"):
    """mpirun.sh before its command: PYTHON in front of the program (`--no-python` runs it as is),
    and Open MPI told that root may run it (it refuses otherwise; containers often run as root)."""
    return ('case "${1-}" in --no-python) shift ;; *) set -- %s "$@" ;; esac\n'
            '[ "$(id -u)" != 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n'
            % _q(python))


def accelerate_command(nodes, config, python="python3", use_gpu=True):
    """`accelerate launch --config_file CONFIG` as `PYTHON -m accelerate.commands.launch` (the venv's).

    Without GPUs and with more than one process, `--multi_gpu` (accelerate's torchrun path: every
    process gets RANK/WORLD_SIZE) with ACCELERATE_USE_CPU set by accelerate_prelude: accelerate's
    own MULTI_CPU path starts one plain process per node that sees world size 1 unless it is
    given an MPI hostfile."""
    cmd = "%s -m accelerate.commands.launch" % _q(python)
    if not use_gpu and total_slots(nodes) > 1:
        cmd += " --multi_gpu"
    return cmd + " --config_file %s" % _q(config)


def accelerate_prelude(use_gpu=True):
    return "" if use_gpu else "export ACCELERATE_USE_CPU=true\n"


def colossalai_command(nodes, hostfile, master_addr, master_port=DEFAULT_PORT, ssh_port=DEFAULT_SSH_PORT):
    per_node = uniform_slots(nodes)
    if per_node is None:
        raise LaunchError("colossalai run needs the same slots on every node")
    return ("colossalai run --nproc_per_node %d --hostfile %s --master_addr %s --master_port %d --ssh-port %d"
            % (per_node, _q(hostfile), _q(master_addr), int(master_port), int(ssh_port)))


# The cluster's environment (what the shell_env role puts in ~/.bashrc: the venv, CUDA, NCCL/Gloo), as a
# file of the launch directory every script sources itself: a job gets it whoever starts it (sudo -u, cron,
# a CI runner, `sbatch --export=NONE`), not only from a login shell.
CLUSTER_ENV = "cluster.env.sh"


# what a login would have given, for a script started with no environment at all
_BASE_ENV = ('PATH=${PATH:-/usr/local/bin:/usr/bin:/bin}; export PATH\n'
             '[ -n "${HOME:-}" ] || HOME=$(getent passwd "$(id -u)" | cut -d: -f6); export HOME\n')


def cluster_env_script(environment, header=None):
    """The sourceable sh file of the merged environment (the ~/.bashrc block's lines)."""
    return _header(header) + render_block(environment or {})


def _path_expr(path):
    """A shell word for PATH that bash expands the same for every user: `~user/` stays unquoted (tilde
    expansion through the passwd entry, no $HOME needed), the rest is quoted."""
    path = str(path)
    if path.startswith("~"):
        head, sep, rest = path.partition("/")
        if head[1:] and not all(c.isalnum() or c in "._-" for c in head[1:]):
            raise LaunchError("launchers_dir %r: not a user name after ~" % path)
        return head + sep + (shlex.quote(rest) if rest else "")
    if not path.startswith("/"):
        raise LaunchError("launchers_dir %r must be absolute or start with ~user/" % path)
    return shlex.quote(path)


def launch_script(command, header=None, env_file=None, prelude="", cluster_env=None):
    """A small executable sh script: sets `here` (its own directory), sources CLUSTER_ENV and ENV_FILE
    (names in that directory) if given, runs PRELUDE (sh lines), then execs COMMAND "$@"."""
    lines = ["#!/bin/sh\n", _header(header), "set -e\n", 'here=$(cd "$(dirname "$0")" && pwd)\n']
    if cluster_env:
        # the cluster's environment, whoever starts this script (PATH may be unset: sbatch --export=NONE)
        lines.append(_BASE_ENV + ". %s\n" % _q(HERE + "/" + cluster_env))
    if env_file:
        lines.append("set -a\n. %s\nset +a\n" % _q(HERE + "/" + env_file))
    lines.append(prelude)
    lines.append('exec %s "$@"\n' % command)
    return "".join(lines)


# ---- config files --------------------------------------------------------------------------

class _Dumper(yaml.SafeDumper):
    """yaml.safe_dump's dumper that also writes a str subclass as a str: ansible-core < 2.19 hands templated
    strings to filters as AnsibleUnsafeText (whose str() is itself again), which SafeDumper cannot represent."""


_Dumper.add_multi_representer(str, lambda dumper, value: dumper.represent_str(str.__str__(value)))


def accelerate_config(nodes, name, master_addr, master_port=DEFAULT_PORT, use_gpu=True, header=None):
    """accelerate's config YAML for one node (accelerate launch --config_file)."""
    _check(nodes)
    config = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": "MULTI_GPU" if use_gpu else "MULTI_CPU",
        "downcast_bf16": "no",
        "gpu_ids": "all",
        "machine_rank": node_rank(nodes, name),
        "main_process_ip": str(master_addr),
        "main_process_port": int(master_port),
        "main_training_function": "main",
        "mixed_precision": "no",
        "num_machines": len(nodes),
        "num_processes": total_slots(nodes),
        "rdzv_backend": "c10d",
        "same_network": False,
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "use_cpu": not use_gpu,
    }
    return _header(header) + yaml.dump(config, Dumper=_Dumper, default_flow_style=False, sort_keys=True)


def sbatch_script(nodes, master_port=DEFAULT_PORT, python="python3", job_name="provision", use_gpu=True,
                  header=None, extra_directives=None, cluster_env=None):
    """A SLURM batch script: one srun task per node, each running torchrun with c10d rendezvous
    on the first host of the allocation. Submit: `sbatch sbatch.sh script.py args...`.

    CLUSTER_ENV: the path of the cluster environment file (cluster.env.sh of the launch directory; sbatch
    runs a copy of this script, so not relative to it). Each task sources its own node's file, and srun
    passes the tasks the environment explicitly (--export=ALL): `sbatch --export=NONE` (a common site
    default) makes srun export nothing otherwise (SLURM_EXPORT_ENV=NONE), and the submitter's shell need not
    have the venv. PYTHON is the environment's own interpreter (absolute), never the submitter's python3."""
    per_node = uniform_slots(nodes)
    if per_node is None:
        raise LaunchError("sbatch script needs the same slots on every node")
    directives = ["--job-name=%s" % job_name, "--nodes=%d" % len(nodes), "--ntasks-per-node=1"]
    if use_gpu:
        directives.append("--gpus-per-node=%d" % per_node)
    directives += list(extra_directives or [])
    task = ""
    if cluster_env:
        # bash -c: $0 is the environment file (expanded here, the same path on every node), then the command
        task = "/bin/bash -c 'set -a; . \"$0\"; set +a; exec \"$@\"' %s " % _path_expr(cluster_env)
    return "".join([
        "#!/bin/bash\n",
        "".join("#SBATCH %s\n" % d for d in directives),
        _header(header),
        "set -euo pipefail\n",
        "# the interpreter and the environment are named here: the job does not depend on who submits it\n",
        _BASE_ENV,
        # no `| head -n1`: under pipefail, scontrol writing its next lines after head has gone dies of
        # SIGPIPE and the job ends with 141 before it starts (a large allocation's host list is many writes)
        'hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST")\n',
        "head_node=${hosts%%$'\\n'*}\n",
        "export MASTER_ADDR=\"$head_node\" MASTER_PORT=%d\n" % int(master_port),
        "srun --export=ALL --kill-on-bad-exit=1 %s%s --nnodes=\"$SLURM_JOB_NUM_NODES\" --nproc-per-node=%d \\\n"
        % (task, _torchrun(python), per_node),
        "    --rdzv-backend=c10d --rdzv-endpoint=\"$head_node:%d\" --rdzv-id=\"$SLURM_JOB_ID\""
        " --max-restarts=0 \\\n" % int(master_port),
        '    "$@"\n',
    ])


def hccl_rank_table(nodes):
    """Ascend HCCL rank table (dict; dump with to_json) from each node's `device_ips`.

    Master's devices first, rank ids ascending across nodes, all values strings as Ascend's
    samples have them. Every node must list its device IPs (device_id = index)."""
    servers = []
    rank = 0
    for node in _check(nodes):
        ips = node.get("device_ips") or []
        if not ips:
            raise LaunchError("node %s has no device IPs (launchers_hccl_device_ips)" % node["name"])
        devices = []
        for device_id, ip in enumerate(ips):
            devices.append({"device_id": str(device_id), "device_ip": str(ip), "rank_id": str(rank)})
            rank += 1
        servers.append({"device": devices, "server_id": str(node["address"])})
    return {"server_count": str(len(servers)), "server_list": servers, "status": "completed", "version": "1.0"}


def launch_env(nodes, name, master_addr, master_port=DEFAULT_PORT, ssh_port=DEFAULT_SSH_PORT, header=None,
               extra=None):
    """KEY=value lines (sourceable by sh, readable by `env -S`/systemd) describing the job."""
    values = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": int(master_port),
        "NNODES": len(_check(nodes)),
        "NODE_RANK": node_rank(nodes, name),
        "NPROC_PER_NODE": _slots(_node(nodes, name)),
        "WORLD_SIZE": total_slots(nodes),
        "PROVISION_SSH_PORT": int(ssh_port),
        "PROVISION_NODES": ",".join(n["name"] for n in nodes),
    }
    values.update(extra or {})
    return _header(header) + "".join("%s=%s\n" % (k, _q(v)) for k, v in values.items())


def launch_files(nodes, name, master_addr, master_port=DEFAULT_PORT, ssh_port=DEFAULT_SSH_PORT,
                 python="python3", use_gpu=True, header=None, sbatch_directives=None, environment=None,
                 launch_dir=None, environment_known=True):
    """Every file of the launch directory for node NAME: {filename: {"content": str, "mode": "0644"}}.

    The scripts refer to the files next to them (wherever the directory is). ENVIRONMENT: the node's
    merged cluster environment (the shell_env role's), written as cluster.env.sh, which every script
    sources; LAUNCH_DIR: the directory as configured (launchers_dir), for sbatch.sh's copy to find it.
    ENVIRONMENT_KNOWN false (launchers run alone, with no shell_env merge in this run or the fact cache, e.g.
    from another inventory): cluster.env.sh is written only where it is missing, never emptied."""
    nodes = _Checked(_check(nodes))
    d = HERE
    env_file = "launch.env"
    cluster_env = CLUSTER_ENV if environment is not None else None
    files = {}

    def add(fname, content, mode="0644"):
        files[fname] = {"content": content, "mode": mode}

    def script(fname, command, prelude=""):
        add(fname, launch_script(command, header=header, env_file=env_file, prelude=prelude,
                                 cluster_env=cluster_env), "0755")

    if cluster_env:
        add(CLUSTER_ENV, cluster_env_script(environment, header))
        if not environment_known:
            files[CLUSTER_ENV]["keep"] = True
    add("launch.env", launch_env(nodes, name, master_addr, master_port, ssh_port, header=header))
    add("hostfile.deepspeed", deepspeed_hostfile(nodes, header=header))
    add("hostfile.mpi", mpi_hostfile(nodes, header=header))
    add("hostfile.colossalai", colossalai_hostfile(nodes))
    add("accelerate.yaml", accelerate_config(nodes, name, master_addr, master_port, use_gpu, header=header))
    script("torchrun-static.sh", torchrun_static_command(nodes, name, master_addr, master_port, python))
    script("deepspeed.sh", deepspeed_command(nodes, d + "/hostfile.deepspeed", master_addr, master_port, ssh_port,
                                             python=python))
    script("mpirun.sh", mpirun_command(nodes, d + "/hostfile.mpi", ssh_port), mpirun_prelude(python))
    script("horovodrun.sh", horovodrun_command(nodes, ssh_port))
    script("accelerate.sh", accelerate_command(nodes, d + "/accelerate.yaml", python, use_gpu),
           accelerate_prelude(use_gpu))
    if uniform_slots(nodes) is not None:
        script("torchrun-c10d.sh", torchrun_c10d_command(nodes, master_addr, master_port, python))
        script("colossalai.sh", colossalai_command(nodes, d + "/hostfile.colossalai", master_addr, master_port,
                                                   ssh_port))
        env_path = None
        if cluster_env and launch_dir:
            env_path = str(launch_dir).rstrip("/") + "/" + CLUSTER_ENV
        add("sbatch.sh", sbatch_script(nodes, master_port, python, use_gpu=use_gpu, header=header,
                                       extra_directives=sbatch_directives, cluster_env=env_path), "0755")
    if all(n.get("device_ips") for n in nodes):
        add("hccl_rank_table.json", json.dumps(hccl_rank_table(nodes), indent=4) + "\n")
    return files


class FilterModule:
    """The renderers usable in templates (each documented in plugins/filter/<name>.yml); the
    other functions here are their building blocks."""

    def filters(self):
        return {
            "launch_nodes": launch_nodes,
            "launch_files": launch_files,
            "deepspeed_hostfile": deepspeed_hostfile,
            "mpi_hostfile": mpi_hostfile,
            "colossalai_hostfile": colossalai_hostfile,
            "horovodrun_command": horovodrun_command,
            "torchrun_static_command": torchrun_static_command,
            "torchrun_c10d_command": torchrun_c10d_command,
            "accelerate_config": accelerate_config,
            "sbatch_script": sbatch_script,
            "hccl_rank_table": hccl_rank_table,
        }
