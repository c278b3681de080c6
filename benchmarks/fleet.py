#!/usr/bin/env python3
"""Benchmark: what the controller computes over all nodes, at fleet size, without a node.

Every piece the controller computes from every node's inputs (issue 32, "The controller at fleet
size"), timed on synthetic node sets of --nodes (default 8, 32, 1,000 and 4,096), each piece on its
own: CPU time of the process (process_time, the best of --repeat runs; a shared machine's load
moves wall time far more) and, in a further run, peak memory (tracemalloc: the Python objects the
piece allocates, its inputs not counted; the inputs are kept out of the garbage collector's passes,
gc.freeze). At the end, per piece, the growth from the second largest to the largest N as an exponent (time ~ N^k):
N log N is k of about 1.13 between 1,000 and 4,096, N x N is 2; `>` marks a piece above 1.3.

    python benchmarks/fleet.py [--nodes 8 32 1000 4096] [--only PIECE ...] [--timeout 120] [--json OUT]
    python benchmarks/fleet.py --ansible [--nodes 1000 4096]   # Ansible's own part: inventory, hostvars

SYNTHETIC INPUTS, built from real parts (nothing here is presented as captured):
- hostvars: the lab inventory's variables (plugins/inventory/lab.py: cluster_address, ansible_host,
  ansible_port, ansible_user, sshd_port from inventory/lab/group_vars) for N nodes gpu-node-0001...
- each node's check records: node2's of the recorded healthy lab (tests/fixtures/verify/
  healthy-2nodes.json) renamed, as tests/unit/synthetic_verify.py builds them;
- each node's kept data: versions as recorded there; GPUs from the H100 node's nvidia-smi
  (tests/fixtures/h100-node/nvidia-smi-query-gpu.csv, 8 GPUs); RDMA ports read by fabric_health from
  the seed's InfiniBand tree (tests/unit/netenv_trees.py, tests/fixtures/seed-ib/); the NCCL
  interface's link as the lab's eth1; SSH file summaries made by the ssh_mesh role's own renderers for
  every node (keys: well-formed ssh-ed25519 public key blobs from a hash of the node name, not key
  pairs). The healthy nodes' file maps are one shared object (a real controller holds one per node:
  the size of one is printed, the all-pairs data is N times that);
- faults, so that the failure paths run: one node in 500 with another kernel, one in 1,000 with
  another torch, one in 700 with 7 GPUs, one in 900 down; the all-reduce's document as
  tests/unit/synthetic_verify.py builds it (a slow link, a node down, a small /dev/shm).
"""

from __future__ import annotations

import argparse
import base64
import gc
import hashlib
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "collections"), str(REPO / "tests" / "unit"), str(REPO / "tests"), str(REPO / "src")]

import synthetic_verify as SV  # noqa: E402
from ansible_collections.provision.cluster.plugins.filter import launchers as L  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.allreduce import baseline as B  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.common import settings as ST  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.verify import catalog as K  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.gpu import fabric_health as F  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.gpu import gpu as G  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.allreduce import isolation as I  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.ssh import mesh_audit as M  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.ssh import ssh_mesh as S  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import plan_from_hostvars  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.common.python_env import compare_outcome  # noqa: E402
from ansible_collections.provision.cluster.plugins.module_utils.verify.verify_report import build_document, fail_lines  # noqa: E402

FIX = REPO / "tests" / "fixtures"
PORT = 2222


# ---------------------------------------------------------------- synthetic inputs

def fake_key(kind: str, name: str) -> str:
    """A well-formed ssh-ed25519 public key line (32 bytes from a hash of the name; not a key pair)."""
    blob = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + hashlib.sha256(f"{kind}:{name}".encode()).digest()
    return "ssh-ed25519 " + base64.b64encode(blob).decode()


def hostvars_of(names: list[str]) -> dict[str, dict]:
    return {n: {"cluster_address": SV.address(i), "ansible_host": SV.address(i), "ansible_port": PORT,
                "ansible_user": "root", "ansible_connection": "ssh", "sshd_port": PORT, "cluster_user": "root",
                "lab_name": "fleet", "lab_container": f"fleet-{n}", "gpu_facts": {"gpu_count": 8}}
            for i, n in enumerate(names, 1)}


def gpu_facts() -> dict:
    gpus = G.parse_query_csv((FIX / "h100-node" / "nvidia-smi-query-gpu.csv").read_text()) * 8
    driver = gpus[0]["driver_version"]
    return {"gpu_count": len(gpus), "reason": "", "driver_version": driver,
            "driver_cuda_version": G.cuda_max_for_driver(driver), "gpus": [dict(g, index=i) for i, g in enumerate(gpus)],
            "cuda_home": "/usr/local/cuda"}


def rdma_ports() -> list[dict]:
    from netenv_trees import seed_ib_tree

    with tempfile.TemporaryDirectory() as tmp:
        return F.read_ports(str(seed_ib_tree(Path(tmp))))


def mesh_files(names: list[str], addr: dict[str, str]) -> dict:
    """One node's SSH files as the ssh_mesh role writes them for every node, as summarize() reads them."""
    records = [{"name": n, "hostname": n, "address": addr[n], "port": PORT, "user": "root",
                "user_key": fake_key("user", n), "host_keys": [fake_key("host", n)]} for n in names]
    kh, _ = S.render_known_hosts("", "cluster", records)
    ak = S.merge_block("", "cluster", S.authorized_keys_lines([r["user_key"] for r in records]))
    cfg = S.merge_block("", "cluster", S.ssh_config_lines(records, "root", "~/.ssh/id_ed25519"))
    hosts = S.merge_block("127.0.0.1 localhost\n", "cluster", S.etc_hosts_lines(records), position="start")
    return M.summarize([], "", "", kh, ak, cfg, hosts, "cluster")


class Inputs:
    """Everything the pieces read, for N nodes."""

    def __init__(self, n: int):
        self.n = n
        self.names = SV.node_names(n)
        self.addr = {nm: SV.address(i) for i, nm in enumerate(self.names, 1)}
        self.hostvars = hostvars_of(self.names)
        self.plan = plan_from_hostvars(self.hostvars, self.names, user="root", group="cluster")["plan"]
        healthy = SV.recorded("healthy-2nodes.json")
        template = [c for c in healthy["checks"] if c["node"] == "node2"]
        versions = SV._nested_versions(healthy)
        gpu, ports = gpu_facts(), rdma_ports()
        files = mesh_files(self.names, self.addr)
        self.summary_bytes = len(json.dumps(files))
        self.down = {self.names[i] for i in range(899, n, 900)}
        self.results, self.data = {}, {}
        for i, nm in enumerate(self.names):
            nxt, half = self.names[(i + 1) % n], self.names[(i + n // 2) % n]
            checks = SV._node_checks(template, nm, self.names[0], nxt, self.addr[nm])
            v = dict(versions, torch="2.12.1+cpu") if i % 1000 == 999 else versions
            g = dict(gpu, gpu_count=7, gpus=gpu["gpus"][:7]) if i % 700 == 699 else gpu
            kernel = "6.1.0-27-amd64" if i % 500 == 499 else "6.1.0-28-amd64"
            summary = dict(files, identity={"host_keys": [M.fingerprint(fake_key("host", nm))],
                                            "user_key": M.fingerprint(fake_key("user", nm)), "hostname": nm})
            data = {"mesh": {"row": [{"target": t, "ok": True, "error": "", "detail": t} for t in
                                     M.ring_targets(self.names, nm)], "reports": {}, "landing": None, "summary": summary},
                    "versions": {"versions": v}, "gpu": {"gpu": g},
                    "gpu_health": {"gpu_health": {"gpu_count": g["gpu_count"], "driver_version": g["driver_version"]}},
                    "fabric": {"fabric_health": {"ports": ports}},
                    "nccl": {"socket_ifname": "eth1", "kernel": kernel,
                             "link": {"name": "eth1", "mtu": 1500, "speed": 10000, "driver": "veth", "virtual": True}},
                    "runtime": {"identity": {"machine_id": hashlib.md5(nm.encode()).hexdigest()}}}
            self.data[nm] = data
            self.results[nm] = {"checks": checks, "data": data, "reused": [], "changed": False}
            _ = half
        self.nodes_doc = {nm: {"address": self.addr[nm], "reachable": nm not in self.down,
                               "reach_detail": "ssh: connect to host %s port 2222: No route to host" % self.addr[nm]
                               if nm in self.down else "",
                               "checks": self.results[nm]["checks"],
                               "connection": {"connection": "ssh", "host": self.addr[nm], "port": PORT, "user": "root"}}
                          for nm in self.names}
        self.versions = {nm: self.data[nm]["versions"]["versions"] for nm in self.names if nm not in self.down}
        self.gpus = {nm: self.data[nm]["gpu"]["gpu"] for nm in self.names if nm not in self.down}
        self.mesh_rows = {nm: self.data[nm]["mesh"]["row"] for nm in self.names if nm not in self.down}
        # the all-reduce's document (views, report, export) and its baselines
        bad = [i for i in (3, n // 2) if 1 <= i <= n]
        self.doc = SV.synthetic_document(n, down=tuple(sorted({min(n, 900)} if n >= 900 else set())),
                                         shm_small=tuple(bad[:1]), slow_link=bad[-1] if n >= 4 else None)
        self.baselines = [dict(b, path=f"inventory/synthetic/.provision/baseline-{i}.json")
                          for i, b in enumerate(SV.synthetic_baselines(self.doc, files=3, runs=3))]
        smoke = self.doc["allreduce"]
        self.smoke_result = {k: v for k, v in smoke.items() if k not in ("baseline",)}
        self.rounds = self._rounds()

    def _rounds(self) -> list[dict]:
        """The pair search's rounds with node 3 bad: what next_round plans, each result filled in."""
        bad = self.names[min(2, self.n - 1)]
        rounds: list[dict] = []
        while len(rounds) < I.MAX_ROUNDS:
            pairs = I.next_round(self.names, rounds)
            if not pairs:
                break
            rounds.append({"pairs": pairs, "results": {I.pair_key(a, b): {
                "status": "ok", "busbw": 0.3 if bad in (a, b) else 3.0, "detail": ""} for a, b in pairs}})
        return rounds


def cluster_context(inp: Inputs) -> K.ClusterContext:
    var = SimpleNamespace(hostvar=lambda host, name, default=None: default)
    var_call = type("Var", (), {"__call__": lambda self, name, default=None: default,
                                "hostvar": lambda self, host, name, default=None: default})()
    _ = var
    order = [n for n in inp.names if n not in inp.down]
    return K.ClusterContext(order, {h: inp.data[h] for h in order}, var_call, plan=inp.plan)


def action_run(inp: Inputs):
    """plugins/action/verify_report.py's run() over every node's results (Ansible's own objects
    replaced by plain dicts: hostvars as dicts, a templar that returns what it is given)."""
    from ansible_collections.provision.cluster.plugins.action.verify_report import ActionModule

    hostvars = {}
    for h in inp.names:
        hv = dict(inp.hostvars[h])
        if h in inp.down:
            hv["verify_reach"] = {"unreachable": True, "msg": inp.nodes_doc[h]["reach_detail"]}
        else:
            hv["verify_node_result"] = inp.results[h]
            hv["verify_peers_result"] = {"checks": []}
        hostvars[h] = hv
    task_vars = {"ansible_play_hosts_all": list(inp.names), "hostvars": hostvars,
                 "cluster_plan": dict(inp.plan, problems=[]), "groups": {"cluster": list(inp.names)}}
    action = ActionModule.__new__(ActionModule)
    action._task = SimpleNamespace(args={"stats": True}, async_val=0, check_mode=False, action="verify_report")
    action._connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/nonexistent"))
    action._templar = SimpleNamespace(template=lambda value: value)
    action._loader = None
    action._supports_async = action._supports_check_mode = True

    def run():
        out = action.run(task_vars=task_vars)
        assert out["document"]["nodes"], out
        return out
    return run


# ---------------------------------------------------------------- the pieces

def pieces(inp: Inputs) -> dict:
    """name -> (what grows with N by design, a callable); each callable computes what the controller
    computes for all N nodes at once."""
    names, plan = inp.names, inp.plan
    cc = cluster_context(inp)
    bad_hostvars = {h: dict(v, sshd_port="22x") for h, v in inp.hostvars.items()}
    lnodes = L.launch_nodes(names, inp.hostvars, 1, names[0])
    peers = [{"name": h, "address": inp.addr[h], "identity": inp.data[h]["mesh"]["summary"]["identity"]} for h in names]
    doc = inp.doc

    def baseline():
        old = inp.baselines[-1]
        ok, diff = B.comparable(old, inp.smoke_result)
        assert ok, diff[:3]
        B.compare(old, inp.smoke_result, names[0], ST.default("verify_baseline_tolerance"),
                  ST.default("verify_baseline_link_tolerance"))
        B.make(inp.smoke_result, saved_at=SV.T0, old=old)

    def pair_search():
        rounds: list[dict] = []
        for rnd in inp.rounds:
            assert I.next_round(names, rounds) == rnd["pairs"]
            rounds.append(rnd)
        I.next_round(names, rounds)
        I.verdict(names, rounds, timeout=30)

    def document():
        d = build_document(names, inp.nodes_doc, selected=K.select(), mesh_rows=inp.mesh_rows, versions=inp.versions,
                           gpus=inp.gpus)
        fail_lines(d)

    def views(kind):
        from provision import views as V

        def run():
            if kind == "per-node":
                V.per_node_lines(doc, 200)
            elif kind == "failures":
                V.failure_lines(doc, 200)
            elif kind == "grid":
                V.grid_slices(doc, 200)
            elif kind == "versions":
                V.versions_lines(doc["versions"], 200)
                V.versions_fit(doc["versions"], 200)
            elif kind == "mesh":
                V.mesh_lines(doc["mesh"], 200)
                V.matrix_fits(doc["mesh"].get("nodes") or [], 200)
        return run

    def report():
        from provision import report as R

        R.render_html(doc, inp.baselines)

    def export(kind):
        from provision import export as E

        return (lambda: E.junit_xml(doc)) if kind == "junit" else (lambda: E.prometheus_text(doc, now=SV.T0))

    def cluster(entry):
        return lambda: K.BY_NAME[entry].cluster(cc)

    return {
        "plan (preflight filter)": ("", lambda: plan_from_hostvars(inp.hostvars, names, user="root", group="cluster",
                                                                    stages="all")),
        "plan, a problem on every node": ("", lambda: plan_from_hostvars(bad_hostvars, names, stages="all")),
        "ring targets of every node": ("N per node: its place in the host list (each node's own action)",
                                       lambda: [M.ring_targets(names, h) for h in names]),
        "versions_compare": ("", lambda: compare_outcome(inp.versions, names, fail=False)),
        "cluster: versions equal": ("", cluster("compare")),
        "cluster: consistency": ("", cluster("consistency")),
        "cluster: gpu_count": ("", cluster("gpu_count")),
        "cluster: fabric consistency": ("", cluster("fabric_consistency")),
        "cluster: mesh files (all pairs)": ("N per distinct file set (the same blocks on every node: one)",
                                            cluster("mesh_files")),
        "mesh audit of one node": ("N: one node's files", lambda: M.audit(names[0], inp.data[names[0]]["mesh"]["summary"],
                                                                         peers, PORT, "root")),
        "build_document + fail_lines": ("", document),
        "verify_report action (all of it)": ("", action_run(inp)),
        "baseline comparable/compare/make": ("", baseline),
        "pair search plan + verdict": ("", pair_search),
        "launch files of the master": ("", lambda: L.launch_files(lnodes, names[0], plan["master_addr"])),
        "launch files of every node": ("N x N: every node's hostfiles hold every node",
                                       lambda: [L.launch_files(lnodes, h, plan["master_addr"]) for h in names]),
        "launch_nodes (plan of the launch)": ("", lambda: L.launch_nodes(names, inp.hostvars, 1, names[0])),
        "views: per-node": ("", views("per-node")),
        "views: failures": ("", views("failures")),
        "views: grid": ("", views("grid")),
        "views: versions": ("", views("versions")),
        "views: mesh": ("", views("mesh")),
        "report: HTML page": ("", report),
        "export: JUnit": ("", export("junit")),
        "export: Prometheus": ("", export("prom")),
    }


class Timeout(Exception):
    pass


def _alarm(_sig, _frame):
    raise Timeout()


def measure(fn, timeout: float, repeat: int) -> tuple[float | None, float | None]:
    """(CPU seconds of this process, peak MiB); None where it ran past timeout (wall clock). CPU time, not
    wall time: on a shared machine the wall time also counts the time other processes had the CPU."""
    signal.signal(signal.SIGALRM, _alarm)
    best = None
    for _ in range(repeat):
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            t0 = time.process_time()
            fn()
            secs = time.process_time() - t0
        except Timeout:
            return None, None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        best = secs if best is None else min(best, secs)
    tracemalloc.start()
    signal.setitimer(signal.ITIMER_REAL, timeout * 3)
    try:
        fn()
        peak = tracemalloc.get_traced_memory()[1] / 2**20
    except Timeout:
        peak = None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        tracemalloc.stop()
    return best, peak


def fmt_s(v):
    if v is None:
        return "timeout"
    return f"{v * 1000:.1f}ms" if v < 1 else f"{v:.2f}s"


def controller(args) -> dict:
    results: dict[str, dict[int, tuple]] = {}
    notes: dict[str, str] = {}
    extra = {}
    for n in args.nodes:
        t0 = time.perf_counter()
        inp = Inputs(n)
        extra[n] = {"inputs_s": round(time.perf_counter() - t0, 1), "summary_bytes": inp.summary_bytes,
                    "checks": len(inp.doc["checks"])}
        print(f"# N={n}: inputs built in {extra[n]['inputs_s']} s; one node's SSH file summary "
              f"{inp.summary_bytes / 1024:.0f} KiB as JSON; the document has {extra[n]['checks']} checks", flush=True)
        todo = pieces(inp)
        # the inputs stay out of the collector's passes: a full pass walks every live object, and the
        # inputs of 4,096 nodes are millions of them, which would charge each piece for their number
        gc.collect()
        gc.freeze()
        for name, (note, fn) in todo.items():
            if args.only and not any(o in name for o in args.only):
                continue
            notes[name] = note
            secs, peak = measure(fn, args.timeout, args.repeat)
            results.setdefault(name, {})[n] = (secs, peak)
            print(f"  {name:<36} {fmt_s(secs):>10} {'-' if peak is None else f'{peak:.1f}':>8} MiB", flush=True)
        gc.unfreeze()
        del inp, todo
    sizes = list(args.nodes)
    print()
    head = f"{'piece':<36}" + "".join(f"{'N=' + str(n):>19}" for n in sizes) + "   growth"
    print(head)
    print(f"{'':<36}" + "".join(f"{'time':>10}{'MiB':>9}" for _ in sizes) + f"   k({sizes[-2] if len(sizes) > 1 else '-'}->{sizes[-1]})")
    total = {n: 0.0 for n in sizes}
    default_total = {n: 0.0 for n in sizes}
    for name, per in results.items():
        row = f"{name:<36}"
        for n in sizes:
            secs, peak = per.get(n, (None, None))
            row += f"{fmt_s(secs):>10}{'-' if peak is None else f'{peak:.1f}':>9}"
            if secs is not None:
                total[n] += secs
                if not notes[name].startswith(("N x N", "N per node")) and "master" not in name and "one node" not in name:
                    default_total[n] += secs
        k = ""
        if len(sizes) > 1:
            a, b = per.get(sizes[-2], (None,))[0], per.get(sizes[-1], (None,))[0]
            if a and b and a > 1e-4:
                k = "%.2f" % (math.log(b / a) / math.log(sizes[-1] / sizes[-2]))
                k += " >" if float(k.split()[0]) > 1.3 else ""
        print(row + f"   {k:<7}{notes[name]}")
    print(f"{'sum of the N log N pieces':<36}" + "".join(f"{fmt_s(default_total[n]):>10}{'':>9}" for n in sizes))
    print(f"{'sum of every piece':<36}" + "".join(f"{fmt_s(total[n]):>10}{'':>9}" for n in sizes))
    return {"results": {k: {str(n): v for n, v in per.items()} for k, per in results.items()}, "notes": notes,
            "inputs": extra}


# ---------------------------------------------------------------- Ansible's own part

def write_inventory(path: Path, n: int) -> None:
    """A static YAML inventory of n hosts with the lab inventory's per-host variables."""
    names = SV.node_names(n)
    lines = ["cluster:", "  vars:", "    cluster_user: root", f"    sshd_port: {PORT}", "    ansible_user: root",
             "  hosts:"]
    for i, nm in enumerate(names, 1):
        lines += [f"    {nm}:", f"      ansible_host: {SV.address(i)}", f"      cluster_address: {SV.address(i)}",
                  f"      ansible_port: {PORT}", f"      lab_container: fleet-{nm}"]
    path.write_text("\n".join(lines) + "\n")


def ansible_part(args) -> dict:
    """CPU seconds of: ansible-inventory --list on a static inventory of N hosts (a subprocess, as a user
    runs it), then
    in one process: parsing the inventory, every host's variables, templating the preflight's cluster
    plan through Ansible's hostvars (what the preflight's set_fact costs at that size), and the reads
    of every host's variables verify_report's action makes (plugin_utils.verify.Variables: 3 registered
    results and 4 connection variables per host), each host holding a verify_node_result of the
    synthetic size as a registered fact, and verify.yml's count of the nodes that answered
    (__verify_answered: every host's result through hostvars), templated once, and the ssh_mesh role's
    node records (__ssh_mesh_nodes: every host's registered identity through hostvars), templated once:
    what one host's task pays for them (the role's tasks that take them template them on every host)."""
    out = {}
    bin_dir = Path(sys.executable).parent
    print(f"{'N':>6} {'ansible-inventory --list':>25} {'parse':>8} {'get_vars x N':>13} {'plan via hostvars':>18}"
          f" {'verify_report reads':>19} {'answered count':>16} {'ssh_mesh nodes':>18}")
    for n in args.nodes:
        with tempfile.TemporaryDirectory() as tmp:
            inv = Path(tmp) / "hosts.yml"
            write_inventory(inv, n)
            env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"))
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run([str(bin_dir / "ansible-inventory"), "-i", str(inv), "--list"], env=env,
                                  capture_output=True, text=True, timeout=1800, check=False)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            listed = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            assert proc.returncode == 0, proc.stderr[-2000:]
            assert len(json.loads(proc.stdout)["cluster"]["hosts"]) == n
            code = (
                "import sys, time, json\n"
                "from ansible.plugins.loader import init_plugin_loader\n"
                "init_plugin_loader()\n"
                "from ansible.parsing.dataloader import DataLoader\n"
                "from ansible.inventory.manager import InventoryManager\n"
                "from ansible.vars.manager import VariableManager\n"
                "from ansible.template import Templar\n"
                "t0 = time.process_time(); loader = DataLoader()\n"
                "inv = InventoryManager(loader=loader, sources=[sys.argv[1]])\n"
                "vm = VariableManager(loader=loader, inventory=inv); t1 = time.process_time()\n"
                "from ansible.vars.hostvars import HostVars\n"
                "vm._hostvars = HostVars(inventory=inv, variable_manager=vm, loader=loader)  # as the TaskQueueManager\n"
                "hosts = inv.get_hosts()\n"
                "for h in hosts: vm.get_vars(host=h, include_hostvars=False)\n"
                "t2 = time.process_time()\n"
                "v = vm.get_vars(host=hosts[0])\n"
                "templar = Templar(loader=loader, variables=v)\n"
                "expr = \"{{ hostvars | provision.cluster.cluster_plan(groups['cluster'], user='root') }}\"\n"
                "try:\n"
                "    from ansible.template import trust_as_template\n"
                "    expr = trust_as_template(expr)\n"
                "except ImportError:\n"
                "    pass\n"
                "plan = templar.template(expr)\n"
                "t3 = time.process_time()\n"
                "assert len(plan['plan']['hosts']) == len(hosts), plan['problems']\n"
                "import copy\n"
                "result = json.load(open(sys.argv[2]))\n"
                "for h in hosts: vm.set_nonpersistent_facts(h.name, {'verify_node_result': copy.deepcopy(result)})\n"
                "from ansible_collections.provision.cluster.plugins.plugin_utils.verify import Variables\n"
                "t4 = time.process_time()\n"
                "var = Variables(vm.get_vars(host=hosts[0]), templar, loader)\n"
                "data = getattr(var, 'hostdata', var.hostvar)  # registered results: hostdata where there is one\n"
                "got = []\n"
                "for h in hosts:\n"
                "    got += [data(h.name, n) for n in ('verify_node_result', 'verify_peers_result', 'verify_reach')]\n"
                "    got += [var.hostvar(h.name, n) for n in ('ansible_connection', 'ansible_host', 'ansible_port',\n"
                "                                             'ansible_user')]\n"
                "t5 = time.process_time()\n"
                "assert sum(1 for g in got if isinstance(g, dict)) == len(hosts)\n"
                "v = dict(vm.get_vars(host=hosts[0]), ansible_play_hosts_all=[h.name for h in hosts])\n"
                "answered = (\"{{ ansible_play_hosts_all | map('extract', hostvars) | selectattr('verify_node_result', \"\n"
                "            \"'defined') | map(attribute='verify_node_result') | rejectattr('unreachable', 'defined') \"\n"
                "            \"| rejectattr('failed', 'true') | list | length }}\")\n"
                "try:\n"
                "    answered = trust_as_template(answered)\n"
                "except NameError:\n"
                "    pass\n"
                "t6 = time.process_time()\n"
                "count = Templar(loader=loader, variables=v).template(answered)\n"
                "t7 = time.process_time()\n"
                "assert int(count) == len(hosts), count\n"
                "for i, h in enumerate(hosts):  # ssh_identity's node record, as the ssh_mesh role registers it\n"
                "    vm.set_nonpersistent_facts(h.name, {'__ssh_mesh_identity': {'changed': False, 'node': {\n"
                "        'name': h.name, 'hostname': h.name, 'address': '10.0.%d.%d' % (i >> 8, i & 255), 'port': 2222,\n"
                "        'user': 'root', 'user_key': 'ssh-ed25519 AAAA' + 'x' * 64, 'host_keys': ['ssh-ed25519 AAAA' + 'y' * 64]}}})\n"
                "mesh = \"{{ ansible_play_hosts | map('extract', hostvars, ['__ssh_mesh_identity', 'node']) | list }}\"\n"
                "try:\n"
                "    mesh = trust_as_template(mesh)\n"
                "except NameError:\n"
                "    pass\n"
                "v['ansible_play_hosts'] = v['ansible_play_hosts_all']\n"
                "t8 = time.process_time()\n"
                "records = Templar(loader=loader, variables=v).template(mesh)\n"
                "t9 = time.process_time()\n"
                "assert len(records) == len(hosts)\n"
                "print(json.dumps([t1 - t0, t2 - t1, t3 - t2, t5 - t4, t7 - t6, t9 - t8]))\n")
            result = Path(tmp) / "result.json"
            inp = Inputs(8)
            one = dict(inp.results[inp.names[1]])
            one["data"] = {k: v for k, v in one["data"].items() if k != "mesh"}
            one["failed"] = False  # as Ansible registers every task's result
            result.write_text(json.dumps(one))
            proc = subprocess.run([sys.executable, "-c", code, str(inv), str(result)], env=env, capture_output=True,
                                  text=True, timeout=3600, check=False)
            assert proc.returncode == 0, proc.stderr[-3000:]
            parse, get_vars, plan, reads, answered, mesh = json.loads(proc.stdout.strip().splitlines()[-1])
        out[n] = {"inventory_list_s": listed, "parse_s": parse, "get_vars_s": get_vars, "plan_via_hostvars_s": plan,
                  "verify_report_reads_s": reads, "verify_answered_count_s": answered, "ssh_mesh_nodes_s": mesh}
        print(f"{n:>6} {listed:>24.2f}s {parse:>7.2f}s {get_vars:>12.2f}s {plan:>17.2f}s {reads:>18.2f}s"
              f" {answered:>15.2f}s {mesh:>17.2f}s", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[8, 32, 1000, 4096])
    ap.add_argument("--only", nargs="*", help="pieces whose name contains one of these words")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one piece may take (default 120)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each piece, the best kept (default 3)")
    ap.add_argument("--ansible", action="store_true", help="measure Ansible's own part instead (inventory, hostvars)")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    figures = ansible_part(args) if args.ansible else controller(args)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
