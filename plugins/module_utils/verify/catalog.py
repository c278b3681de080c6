# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The check catalog: every check of ``provision verify``, defined once.

An entry says what a check is called (``name``, the ``--check NAME``), what it covers, which
read-only module produces its Check records (plugins/module_utils/verify/checks.py) and with which
arguments, which stage fixes it, and which stage result may stand in for it inside site.yml.
``provision verify``, ``playbooks/verify.yml`` (the action plugins ``verify_node`` and
``verify_report``), the CLI's ``--list-checks`` and the JSON document all read this list; adding a
check is one entry here plus its module and its tests (docs/contributing.md: "Adding a check").

Arguments are computed from a ``Context``: the node's name, the cluster plan (``cluster_plan``,
plugins/module_utils/common/cluster_plan.py), and ``var(name)``: the node's variable, else the default of
the role that owns the name (``node_runtime_min_nofile`` -> roles/node_runtime/defaults/main.yml),
so no default is restated here. Controller-side only (the action plugins and the CLI import it).
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C
from ansible_collections.provision.cluster.plugins.module_utils.ssh.become import become_problem
from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import DEFAULT_MASTER_PORT, DEFAULT_SSH_PORT, DEFAULTS
from ansible_collections.provision.cluster.plugins.module_utils.verify import consistency
from ansible_collections.provision.cluster.plugins.module_utils.gpu import fabric_health, gpu_health
from ansible_collections.provision.cluster.plugins.module_utils.ssh import mesh_audit
from ansible_collections.provision.cluster.plugins.module_utils.net.ports import port_result
from ansible_collections.provision.cluster.plugins.module_utils.common.python_env import (
    compare_checks, compare_outcome, env_python, package_names)


def as_bool(value):
    """A setting or task argument as a bool: true, "true", "yes", "on", "1" (any case)."""
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")


def env_python_of(var):
    """The python_env role's interpreter for a node, from its settings (var: the node's variables)."""
    return env_python(var("python_env_backend"), var("python_env_path"), var("python_env_conda_prefix"),
                      var("python_env_conda_env_name"))


# Phases: "node" checks run on each node at once (verify_node, play 1); "peers" checks run on each
# node with every node's "node" results at hand (verify_node phase peers, play 2); "cluster" checks
# are computed once on the controller from every node's results (verify_report); "smoke" is the
# all-reduce (the allreduce_smoke role, only with --smoke).
NODE, PEERS, CLUSTER, SMOKE = "node", "peers", "cluster", "smoke"


class Context:
    """What an entry's functions see for one node."""

    def __init__(self, host, plan, hosts, var, results=None, matrix=None):
        self.host = host          # inventory name of the node
        self.plan = plan          # cluster_plan
        self.hosts = hosts        # the play's hosts (verify --limit narrows it), inventory order
        self.var = var            # var(name) -> the node's variable, else its role's default, else None
        self.results = results if results is not None else {}   # check name -> module result (this node)
        self.matrix = matrix      # "full" or "ring": a stage's choice (the check action's matrix), else verify_matrix

    def user(self):
        return self.plan.get("user") or DEFAULTS["cluster_user"]

    def nodes(self):
        """[{name, address}] of the play's hosts, from the plan."""
        addr = self.plan.get("address_of") or {}
        return [{"name": h, "address": addr.get(h, h)} for h in self.hosts]

    def rendezvous(self):
        """The master (rank 0) at its rendezvous address (cluster_master_addr), else the play's first node."""
        addr = self.plan.get("address_of") or {}
        master = self.plan.get("master")
        if master in self.hosts:
            return {"name": master, "address": self.plan.get("master_addr") or addr.get(master, master),
                    "port": self.master_port()}
        return {"name": self.hosts[0], "address": addr.get(self.hosts[0], self.hosts[0]), "port": self.master_port()}

    def ssh_port(self):
        return int(self.plan.get("ssh_port") or DEFAULT_SSH_PORT)

    def master_port(self):
        return int(self.plan.get("master_port") or DEFAULT_MASTER_PORT)

    def full_matrix(self):
        """verify_matrix: full (provision verify --full): every node logs in to every node (a stage may decide
        otherwise for its call: the ssh_mesh stage checks N x N after a change, a ring on an unchanged re-run)."""
        return str(self.matrix or self.var("verify_matrix")).lower() == "full"

    def ring(self):
        """The nodes this node logs in to (mesh_audit.ring_targets): all of them with full_matrix()."""
        return mesh_audit.ring_targets(self.hosts, self.host, self.full_matrix())

    def cluster(self):
        """Every node of the plan (the inventory's cluster group), whatever the run's --limit."""
        return list(self.plan.get("hosts") or self.hosts)

    def reached(self):
        """The nodes a check of this node's way to the others (pdsh, the NCCL probe) may reach: every node
        of the plan, not only the play's (site.yml or verify --limit node2 still proves node2 -> node1);
        a limit with a '!' in it (--limit '!node2', what site.yml advises for a node that is down: go on
        without it, so nothing waits for it or fails on it) keeps the play's nodes only."""
        hosts = self.cluster()
        if "!" in str(self.var("ansible_limit") or ""):
            play = set(self.hosts)
            hosts = [h for h in hosts if h in play]
        return hosts

    def plan_ring(self):
        """This node's ring among reached(); all of them with full_matrix()."""
        return mesh_audit.ring_targets(self.reached(), self.host, self.full_matrix())

    def left_out(self):
        """Whether the run leaves nodes of the plan out on purpose (a '!' --limit)."""
        return len(self.reached()) != len(self.cluster())

    def python(self):
        """The training environment's interpreter (verify_python, else the python_env role's)."""
        return self.var("verify_python") or env_python_of(self.var)


class ClusterContext:
    """What a cluster entry sees: every node's kept data, the variables."""

    def __init__(self, order, data, var, plan=None):
        self.order = order        # node names, inventory order
        self.plan = plan if plan is not None else {}  # cluster_plan
        self.data = data          # node -> entry name -> what its keep() kept
        self.var = var            # the controller's variables (var.hostvar(host, name) for a node's)

    def values(self, entry, key):
        """node -> data[node][entry][key], for the nodes that have it (inventory order)."""
        out = {}
        for h in self.order:
            value = ((self.data.get(h) or {}).get(entry) or {}).get(key)
            if value is not None:
                out[h] = value
        return out


class Spec:
    """One catalog entry."""

    def __init__(self, name, title, summary, module=None, args=None, phase=NODE, group=None, needs=(),
                 adjust=None, keep=None, when=None, stage=None, fix_names_stage=False, cluster=None,
                 default=True, local=True, stage_keys=(), derive=None, derive_from=(), writers=()):
        self.name = name            # the entry's id; --check NAME for the public ones
        self.title = title          # the check id of a result that carries no check of its own
        self.summary = summary      # --list-checks
        self.module = module        # FQCN of the read-only module (None: computed by verify_report)
        self.args = args            # Context -> module arguments
        self.phase = phase
        self.group = group or name  # the --check NAME that runs it and under which it is reported
        self.needs = tuple(needs)   # entries whose results (on this node) it reads: they run first
        self.adjust = adjust        # (node, record, Context) -> the record as people read it
        self.keep = keep            # module result -> the data later phases need (small)
        self.when = when            # Context -> run it on this node? (default: always)
        self.stage = stage          # the site.yml stage that makes what it checks (skipped with it inside site.yml)
        self.fix_names_stage = fix_names_stage  # a failing check's fix also names that stage's command
        self.cluster = cluster      # phase cluster: ClusterContext -> (records, extra fields of the document)
        self.default = default      # public: selected when no --check is given
        self.local = local          # runs with the node alone (verify --local): no ssh to peers, no controller
        # the arguments its stage adds to the check's own when it runs the module through the check action:
        # what the stage plans or configures with (never one that changes what the check reads or judges)
        self.stage_keys = frozenset(stage_keys)
        # the stage's modules that run the check themselves after their work, in the same process (the
        # check action's `module`; plugins/module_utils/verify/stage_check.py): their call is the record
        self.writers = tuple(writers)
        # Context -> its result without running it, when another check's result of this node at hand
        # (ctx.results) already decides it (no GPU read: gpu_health's skips), else None
        self.derive = derive
        # the entries whose results derive reads: where they run in the same pass, this one waits for them
        # (unlike needs, they are not added to a selection: without them the entry runs its module)
        self.derive_from = tuple(derive_from)

    def records(self, node, result, ctx=None):
        """The Check records of one module result, named for this node."""
        if result.get("skipped"):
            return []
        found = [c for c in result.get("checks") or [] if isinstance(c, dict)]
        if result.get("unreachable") or (not found and result.get("failed")):
            # sudo (become) failed on a node that answers: say what is wrong with become
            message = " ".join(str(result.get(k) or "") for k in ("msg", "module_stderr", "module_stdout"))
            user = ctx.var("ansible_user") if ctx is not None and getattr(ctx, "var", None) else None
            become = become_problem(node, message, user)
            if become is not None:
                return [C.failed(self.title, become[0], become[1], node=node)]
        if result.get("unreachable"):
            return [C.failed(self.title, result.get("msg") or "unreachable", "make %s reachable and re-run" % node,
                             node=node)]
        if not found and result.get("failed"):
            return [C.failed(self.title, result.get("msg") or result.get("module_stderr") or "the check failed",
                             "see `provision verify --only %s -v`" % self.group, node=node)]
        out = []
        for c in found:
            c = C.check(c.get("check") or self.title, c.get("status"), c.get("detail"), c.get("fix"), node=node,
                        data=c.get("data"))
            if self.adjust:
                c = self.adjust(node, c, ctx)
            if c["status"] == C.FAIL and self.fix_names_stage and "--tags %s" % self.stage not in c["fix"]:
                c["fix"] = "%s; the %s role does it: ansible-playbook site.yml --tags %s --limit %s" % (
                    c["fix"] or "fix the cause above", self.stage, self.stage, node)
            out.append(c)
        return out


# ---------------------------------------------------------------- a stage's call, standing in for verify's
# A stage runs its check through the check action (plugins/action/check.py): the module of the entry, with
# the arguments args(ctx) builds here, plus the stage's own (stage_keys). The action keeps what verify needs
# of that call in the node's `provision_checks` fact, keyed by the entry's name (record()). site.yml's
# verify pass takes a record instead of running the check again under one rule (stand_in()): made in this
# run, with the arguments verify would pass now, by a call that failed nowhere and changed nothing. A stage
# that changes what a check reads after calling it calls it again (the last call of a run is the record).

RECORDS = "provision_checks"
# the arguments of a check's own that its stage may set otherwise: how the call runs (a bound, what it
# writes, whether a failed check stops the task), never what it reads or how it judges
HOW = frozenset(("timeout", "manage_limits", "manage_shm", "require_torch", "fail_on_error"))


def fingerprint(args):
    """One string for a check's arguments: equal when verify would pass the same (order-blind)."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def record(spec, run, args, result):
    """What the check action keeps of one call of `spec`'s module (the node's provision_checks[spec.name])."""
    result = result if isinstance(result, dict) else {}
    checks = [c for c in result.get("checks") or [] if isinstance(c, dict)]
    ok = bool(checks) and not any(result.get(k) for k in ("failed", "changed", "skipped", "unreachable"))
    out = {"run": run, "args": fingerprint(args), "ok": ok}
    if ok:
        out["checks"] = checks
        if spec.keep:
            out["keep"] = spec.keep(result)
        facts = {k: v for k, v in (result.get("ansible_facts") or {}).items() if k in HOST_FACTS}
        if facts:
            out["facts"] = facts
    return out


def records_of(data):
    """This node's records (data(name): its own variables as set): the fact, also where facts are not
    injected as variables (inject_facts_as_vars: false)."""
    return data(RECORDS) or (data("ansible_facts") or {}).get(RECORDS) or {}


def stand_in(spec, ctx):
    """The stage's record of this check that site.yml's verify pass takes instead of running it, or None:
    a record of this run (cluster_plan.run), made with the arguments verify would pass now, by a call that
    failed nowhere and changed nothing."""
    run = ctx.plan.get("run")
    found = records_of(ctx.var.data).get(spec.name) if run else None
    if not (isinstance(found, dict) and found.get("ok") and found.get("run") == run):
        return None
    if spec.args is None or found.get("args") != fingerprint(spec.args(ctx)):
        return None
    out = {"checks": found.get("checks") or []}
    out.update(found.get("keep") or {})
    if found.get("facts"):
        out["ansible_facts"] = found["facts"]
    return out


def taken(spec, ctx):
    """What site.yml's verify pass takes instead of running the entry: its stage's record (stand_in())."""
    return stand_in(spec, ctx)


# the facts of a check module that stay on the host (the smoke test reads the hardware the health modules saw)
HOST_FACTS = ("gpu_health", "fabric_health")


# ---------------------------------------------------------------- the entries' functions

INIT_SYSTEMS = ("systemd", "init", "openrc-init", "runit", "s6-svscan")


def _adjust_sshd(node, c, ctx):
    """sshd listening: named as such, and on a node without an init system (a container) the reason a
    restart lost it and the two ways to keep it."""
    if not c["check"].startswith("sshd "):
        c = dict(c, check="sshd listening (%s)" % c["check"])
    init = ((ctx.results if ctx else {}).get("sshd") or {}).get("init")
    if c["status"] == C.FAIL and init and init not in INIT_SYSTEMS:
        port = ctx.ssh_port()
        c = dict(c, detail="%s; PID 1 is %s, no init system: nothing starts sshd again after the node restarts"
                 % (c["detail"], init),
                 fix="ansible-playbook site.yml --tags sshd --limit %s after every restart, or start sshd from the "
                     "container's command (e.g. sh -c 'ssh-keygen -A; mkdir -p /run/sshd; exec /usr/sbin/sshd -D -p %d')"
                     % (node, port))
    return c


def _sshd_args(ctx):
    return {"ports": [ctx.ssh_port()], "expect": "listening", "allowed_holders": ["sshd"]}


def _sshd_from_ports(ctx):
    """Where the ports check read a listener on the SSH port: port_facts' own result on that reading (its
    port_result with the sshd check's arguments), without reading the sockets a second time. Nothing
    listening there: None (the module then also reads where else sshd listens, to say so)."""
    args = _sshd_args(ctx)
    found = ctx.results.get("ports") or {}
    report = next((r for r in found.get("ports") or () if isinstance(r, dict) and r.get("port") == args["ports"][0]), None)
    if report is None or not report.get("listening"):
        return None
    return port_result([report], args["expect"], args["allowed_holders"], found.get("listening") or (), found.get("init") or "")


def _versions_packages(ctx):
    """The packages the versions check reports and compares: python_env's pinned extras, then verify_packages."""
    return package_names(ctx.var("python_env_extra_packages"), ctx.var("verify_packages"))


def _facts(result, name):
    return ((result or {}).get("ansible_facts") or {}).get(name) or {}


def _dcgm(ctx):
    """verify_dcgm: dcgmi diag in the gpu_health check."""
    return as_bool(ctx.var("verify_dcgm"))


def _gpu_health_without_gpu(ctx):
    """Where the gpu check read no GPU and none on the PCI bus: the skips gpu_health_info gives there
    (both read nvidia-smi and the PCI bus)."""
    facts = _keep_gpu(ctx.results.get("gpu") or {}).get("gpu") or {}
    if facts.get("gpu_count") == 0 and facts.get("pci_gpus") == [] and not _dcgm(ctx):
        return {"checks": gpu_health.no_gpu_checks(facts.get("reason") or "no GPU", ctx.host),
                "gpu_health": {"gpu_count": 0, "driver_version": ""}}
    return None


def _fabric_without_rdma(ctx):
    """Where the nccl check found no RDMA device: the skips fabric_health_info gives there (both read
    /sys/class/infiniband)."""
    rdma = (ctx.results.get("nccl") or {}).get("rdma")
    if rdma is not None and len(rdma) == 0:
        return {"checks": fabric_health.skipped_all(fabric_health.NO_DEVICE, ctx.host), "fabric_health": {"ports": []}}
    return None


def _ports_args(ctx):
    """The cluster's ports: the rendezvous port free, the SSH port free or held by sshd (preflight_port_allowed_holders)."""
    return {"ports": [ctx.ssh_port(), ctx.master_port()], "expect": "free",
            "allowed_holders": list(ctx.var("preflight_port_allowed_holders") or [])}


def _adjust_ports(node, c, ctx):
    """port N free; the SSH port: free or held by what may hold it."""
    holders = ctx.var("preflight_port_allowed_holders") if ctx is not None else None
    if ctx is not None and c["check"] == "port %d" % ctx.ssh_port() and holders:
        return dict(c, check="%s free or held by %s" % (c["check"], "/".join(holders)))
    return dict(c, check="%s free" % c["check"])


def _runtime_args(ctx):
    return {
        "cluster_user": ctx.var("node_runtime_user") or ctx.user(),
        "limits_source": ctx.var("node_runtime_limits_source"),
        "ssh_host": ctx.host,
        "min_nofile": ctx.var("node_runtime_min_nofile"),
        "shm_min": ctx.var("node_runtime_shm_min"),
        "shm_per_gpu": ctx.var("node_runtime_shm_per_gpu"),
        "gpus": ctx.var("node_runtime_gpus_per_node") or None,
        "require_memlock_unlimited": str(ctx.var("node_runtime_require_memlock_unlimited")).lower(),
        "on_container_limit": ctx.var("node_runtime_on_container_limit"),
        "container": str(ctx.var("node_runtime_container")).lower(),
        "node_id": ctx.host,
        "node_id_file": ctx.var("node_runtime_node_id_file"),
        "limits_file": ctx.var("node_runtime_limits_file"),
        "cluster_address": (ctx.plan.get("address_of") or {}).get(ctx.host, ctx.host),
        "manage_limits": False,
        "manage_shm": False,
    }


def _launch_args(ctx):
    """The launch directory (launchers_dir) and the cluster it must name: every node of the plan (not only
    the play's: verify --limit checks fewer nodes, the files list them all) and the master (rank 0)."""
    return {"path": ctx.var("launchers_dir"), "user": ctx.user(), "node": ctx.host,
            "nodes": ctx.cluster(), "master": ctx.plan.get("master"),
            "master_addr": ctx.plan.get("master_addr") or ctx.rendezvous()["address"],
            "master_port": ctx.master_port(), "ssh_port": ctx.ssh_port()}


def _nccl_args(ifname=None):
    def args(ctx):
        # every node of the cluster, not only the play's (site.yml --limit node1 still probes node1's
        # peers, as verify --limit does): the decision and the probes are about the node's way to them
        nodes = [{"name": n["name"], "address": n["address"]} for n in ctx.plan.get("nodes") or []
                 if isinstance(n, dict) and n.get("name")] or ctx.nodes()
        out = {"peers": nodes, "self_name": ctx.host,
               "probe_port": int(ctx.var("nccl_net_probe_port") or ctx.ssh_port()),
               "probe_timeout": int(ctx.var("nccl_net_probe_timeout")), "fail_on_error": False,
               # what the nccl_net stage decides the network with, read as it reads it
               "gloo": as_bool(ctx.var("nccl_net_gloo")), "probe": as_bool(ctx.var("nccl_net_probe")),
               "ib_mix_link_layers": as_bool(ctx.var("nccl_net_ib_mix_link_layers")),
               "extra_env": dict(ctx.var("nccl_net_extra_env") or {})}
        for key in ("ib_hca", "ib_disable", "ib_gid_index"):
            value = ctx.var("nccl_net_" + key)
            if value not in (None, ""):
                out[key] = value
        if as_bool(ctx.var("nccl_net_rendezvous_probe")):
            out["rendezvous"] = ctx.rendezvous()
        if not ctx.full_matrix() or ctx.left_out():
            # the ring's nodes: each TCP connect to a peer's sshd makes that sshd fork a pre-auth child
            # (about 8 ms of the peer's CPU, measured in the lab), N x N of them across the cluster
            out["probe_peers"] = [h for h in ctx.plan_ring() if h != ctx.host]
        chosen = ifname(ctx) if ifname else ctx.var("nccl_net_socket_ifname")
        if chosen:
            out["socket_ifname"] = chosen
        return out
    return args


def _env_ifname(ctx):
    """NCCL_SOCKET_IFNAME as non-interactive ssh gets it from the env block (what NCCL really uses)."""
    return ((ctx.results.get("env") or {}).get("seen") or {}).get("NCCL_SOCKET_IFNAME") or ""


def _in_effect_differs(ctx):
    env_if = _env_ifname(ctx)
    return bool(env_if) and env_if != (ctx.results.get("nccl") or {}).get("socket_ifname")


def _adjust_in_effect(node, c, ctx):
    """The NCCL check of the interface the env block exports (not the one nccl_net chose): say so."""
    if c["status"] != C.FAIL:
        return c
    ifname = _env_ifname(ctx) or "?"
    detail = c["detail"].replace("nccl_net_socket_ifname=%s: " % ifname, "")
    return dict(c, detail="NCCL_SOCKET_IFNAME=%s from ~/.bashrc (what non-interactive ssh gets): %s" % (ifname, detail),
                fix="the env block exports another interface than nccl_net chose: ansible-playbook site.yml "
                    "--tags shell_env --limit %s rewrites it; or %s" % (node, c["fix"]))


def _keep_mesh(result):
    out = {"row": result.get("row") or [], "reports": result.get("reports") or {}, "landing": result.get("landing")}
    if result.get("summary"):
        out["summary"] = result["summary"]
    return out


def _mesh_args(ctx):
    # the ssh_mesh role's user and bounds (-e ssh_mesh_check_connect_timeout=... reaches both)
    return {"source": ctx.host, "user": ctx.var("ssh_mesh_user") or ctx.user(), "nodes": ctx.ring(),
            "connect_timeout": int(ctx.var("ssh_mesh_check_connect_timeout")),
            "timeout": int(ctx.var("ssh_mesh_check_timeout")),
            "landing": True, "summary": True, "block_name": str(ctx.var("ssh_mesh_block_name")),
            "key_file": str(ctx.var("ssh_mesh_key_file")), "hosts_file": str(ctx.var("ssh_mesh_hosts_file"))}


def _pdsh_args(ctx):
    # the pdsh role's settings (-e pdsh_connect_timeout=30 for a large cluster reaches both)
    out = {"hosts": list(ctx.var("pdsh_hosts") or ctx.cluster()), "hosts_file": ctx.var("pdsh_hosts_file"),
           "user": ctx.var("pdsh_check_user") or ctx.user(),
           "connect_timeout": int(ctx.var("pdsh_connect_timeout")),
           "command_timeout": int(ctx.var("pdsh_command_timeout")), "node": ctx.host}
    if not ctx.full_matrix() or ctx.left_out():
        # the node's ring among the cluster's nodes (verify --limit node2 still proves node2 -> node1;
        # --limit '!node2' reaches every node but node2); the file lists them all
        out["targets"] = ctx.plan_ring()
    return out


def _keep_runtime(result):
    return {"identity": _facts(result, "node_runtime").get("identity") or result.get("identity")}


def _keep_versions(result):
    return {"versions": _facts(result, "python_env_versions") or result.get("versions")}


def _keep_gpu(result):
    return {"gpu": _facts(result, "gpu_facts") or result.get("gpu")}


def _keep_env(result):
    return {"seen": result.get("seen") or {}}


def _keep_nccl(result):
    iface = (result.get("interfaces") or {}).get(result.get("socket_ifname") or "") or result.get("link") or {}
    rdma = result.get("rdma")
    return {"socket_ifname": result.get("socket_ifname"),
            "link": {k: iface.get(k) for k in ("name", "mtu", "speed", "driver", "virtual")} if iface else {},
            "kernel": result.get("kernel"), "rdma": sorted(rdma) if rdma is not None else None}


def _cluster_compare(cc):
    """versions equal on every node: one "versions equal" check per compared node."""
    versions = cc.values("versions", "versions")
    if not versions:
        return [], {}
    compared = [h for h in cc.order if h in versions]
    compare, _msg = compare_outcome(versions, compared, fail=False)
    return list(compare_checks(compare, compared).values()), {"differing_nodes": list(compare.get("differing_hosts") or [])}


def _cluster_mesh_files(cc):
    """Each node's authorized_keys, known_hosts, ~/.ssh/config and /etc/hosts against every node's real
    keys (what each node's mesh check read of itself): the all-pairs half of the SSH mesh, without a
    login (mesh_audit). A node whose mesh result was a stage's (inside site.yml) has no summary: that
    stage wrote and checked the files in this run."""
    summaries = {h: s for h, s in cc.values("mesh", "summary").items() if isinstance(s, dict)}
    if not summaries:
        return [], {}
    addr = cc.plan.get("address_of") or {}
    peers = [{"name": h, "address": addr.get(h, h), "identity": (summaries.get(h) or {}).get("identity")}
             for h in cc.order]
    port, user = int(cc.plan.get("ssh_port") or DEFAULT_SSH_PORT), cc.plan.get("user") or ""
    audited = mesh_audit.audit_all({h: summaries[h] for h in cc.order if h in summaries}, peers, port, user)
    return [dict(c, node=h) for h, recs in audited.items() for c in recs], {}


def _cluster_gpu_count(cc):
    counts = {h: (g or {}).get("gpu_count") or 0 for h, g in cc.values("gpu_health", "gpu_health").items()}
    expected = int(cc.var("gpu_health_expected_gpus") or 0)
    return (gpu_health.cluster_gpu_counts(counts, expected) if counts else []), {}


def _cluster_fabric(cc):
    ports = {h: (f or {}).get("ports") or [] for h, f in cc.values("fabric", "fabric_health").items()}
    if not ports:
        return [], {}
    return fabric_health.cluster_link_layers(ports) + fabric_health.cluster_port_rates(ports), {}


def _cluster_consistency(cc):
    """The same platform on every node (kernel, the NCCL interface's MTU/speed/driver, NVIDIA driver,
    CUDA, NCCL, RDMA firmware): a node that differs is named with the value."""
    values = {}
    for h in cc.order:
        d = cc.data.get(h) or {}
        nccl, gpu = d.get("nccl") or {}, (d.get("gpu") or {}).get("gpu") or {}
        link = nccl.get("link") or {}
        ports = ((d.get("fabric") or {}).get("fabric_health") or {}).get("ports") or []
        versions = (d.get("versions") or {}).get("versions") or {}
        row = {"mtu": link.get("mtu"), "speed": link.get("speed"), "nic_driver": link.get("driver"),
               "kernel": nccl.get("kernel"), "nvidia_driver": gpu.get("driver_version"),
               "cuda": gpu.get("driver_cuda_version"), "nccl": versions.get("nccl"),
               "rdma_fw": ",".join(sorted({p.get("fw_ver") for p in ports if p.get("fw_ver")})) or None}
        if d:
            values[h] = {k: v for k, v in row.items() if v not in (None, "")}
    return (consistency.compare(values) if values else []), {}


def _keep_gpu_health(result):
    facts = result.get("gpu_health") or {}
    return {"gpu_health": {"gpu_count": facts.get("gpu_count", 0), "driver_version": facts.get("driver_version")}}


def _keep_fabric(result):
    return {"fabric_health": {"ports": (result.get("fabric_health") or {}).get("ports") or []}}


CATALOG = [
    Spec("reach", "node reachable", "node reachable from the controller", phase=NODE),
    Spec("sshd", "sshd listening", "sshd listening on the cluster port (sshd_port)",
         module="provision.cluster.port_facts", stage="sshd", fix_names_stage=True,
         args=_sshd_args, adjust=_adjust_sshd, derive=_sshd_from_ports, derive_from=("ports",)),
    Spec("ports", "ports free", "rendezvous and cluster ports free or held by the expected process",
         module="provision.cluster.port_facts", stage="preflight",
         args=_ports_args, adjust=_adjust_ports),
    Spec("mesh", "ssh mesh",
         "SSH logins on a ring (itself, the next node, the node half the ring away; N x N with --full), BatchMode, "
         "real host keys; every pair's keys, known_hosts, ~/.ssh/config and /etc/hosts entries compared with the "
         "nodes' real keys; ~/.ssh modes sshd accepts",
         module="provision.cluster.ssh_mesh_check", stage="ssh_mesh", args=_mesh_args, keep=_keep_mesh, local=False,
         stage_keys=("hostnames", "landing_peers")),
    # every node's files against every node's real keys (the all-pairs half of the mesh, no login):
    # computed once on the controller from the mesh entry's summaries (verify_report)
    Spec("mesh_files", "ssh files", "every node's key authorized and host keys known on every node (no login)",
         phase=CLUSTER, group="mesh", needs=("mesh",), stage="ssh_mesh", cluster=_cluster_mesh_files, default=False, local=False),
    Spec("pdsh", "pdsh", "pdsh present, hosts file as the inventory, reaching the ring's nodes (every node with --full); "
         "ssh's own error line and its fix when it does not",
         module="provision.cluster.pdsh_config", stage="pdsh", args=_pdsh_args, local=False,
         stage_keys=("check", "check_if_changed", "expect_hostnames", "fail_on_check", "fail_if_absent",
                     "export_env")),
    Spec("env", "env block", "the ~/.bashrc env block above the non-interactive guard; ssh <self> env sees its values",
         module="provision.cluster.shell_env_check",
         stage="shell_env", writers=("provision.cluster.shell_env_block",),
         args=lambda ctx: dict({"user": ctx.var("shell_env_user") or ctx.user(), "ssh_host": ctx.host},
                               **({"bashrc": ctx.var("shell_env_bashrc")} if ctx.var("shell_env_bashrc") else {})),
         keep=_keep_env, local=False),
    Spec("gcc", "gcc", "GCC >= gcc_toolchain_min_version", module="provision.cluster.gcc_facts", stage="gcc_toolchain",
         args=lambda ctx: {"min_version": str(ctx.var("gcc_toolchain_min_version")), "node": ctx.host,
                           "toolset": ctx.var("gcc_toolchain_toolset"),
                           "debian_packages": list(ctx.var("gcc_toolchain_debian_packages") or [])},
         stage_keys=("fail_below",)),
    Spec("gpu", "gpu", "GPUs, driver, the CUDA the driver supports and the toolkit: consistent (skip without GPU)",
         module="provision.cluster.gpu_facts", stage="cuda_toolkit",
         args=lambda ctx: {"cuda_version": ctx.var("cuda_toolkit_version") or "",
                           "nccl_dirs": list(ctx.var("cuda_toolkit_nccl_dirs") or []),
                           "timeout": int(ctx.var("cuda_toolkit_smi_timeout"))},
         keep=_keep_gpu, stage_keys=("source", "runfile", "install_root", "runfile_dir")),
    Spec("versions", "python_env",
         "python / torch / CUDA / NCCL / backends / extras equal across nodes; DeepSpeed ops built for the torch and CUDA installed",
         module="provision.cluster.python_versions", stage="python_env", writers=("provision.cluster.python_venv",),
         args=lambda ctx: {"python": ctx.python(), "packages": _versions_packages(ctx), "require_torch": False,
                           "timeout": int(ctx.var("verify_versions_timeout")),
                           # python_env's cache (python_env_probe_cache; written by the stage, read-only in
                           # verify): its key changes with any install, removal, a replaced torch library or
                           # another NVIDIA driver; without it, torch is imported
                           "cache": (ctx.python().rsplit("/", 2)[0] + "/.provision-versions.json")
                           if as_bool(ctx.var("python_env_probe_cache")) else None},
         keep=_keep_versions, stage_keys=("require_torch", "timeout")),
    Spec("nccl", "nccl_net",
         "NCCL interface in effect exists, is up and reaches the ring's nodes (every node with --full); IB HCAs active; "
         "node names resolve to their nodes, not to another node or loopback; the master's rendezvous port reachable",
         module="provision.cluster.nccl_net_facts", stage="nccl_net", args=_nccl_args(), keep=_keep_nccl,
         stage_keys=("fail_on_error",)),
    # NCCL gets the interface the env block exports (as non-interactive ssh sees it): when that is not
    # the one the check above used, that interface is checked too
    Spec("nccl_in_effect", "nccl_net", "the NCCL interface the env block exports reaches the ring's nodes (every node with --full)",
         module="provision.cluster.nccl_net_facts", stage="nccl_net", args=_nccl_args(_env_ifname), group="nccl",
         needs=("env", "nccl"),
         when=_in_effect_differs, adjust=_adjust_in_effect, default=False, local=False),
    Spec("runtime", "node runtime", "/dev/shm, memlock, nofile (and the pam_limits line that lowers them); ssh <name> lands on that node",
         module="provision.cluster.node_runtime", stage="node_runtime", args=_runtime_args,
         keep=_keep_runtime, stage_keys=("manage_limits", "manage_shm", "fail_on_check", "warn_on_check")),
    Spec("landing", "landing", "ssh <name> from every node lands in that node", module="provision.cluster.ssh_landing",
         stage="node_runtime",
         phase=PEERS, group="runtime", needs=("runtime",), default=False, local=False),
    # the files every launcher reads, against the inventory of now: a node added or removed, a master moved
    # since the launchers stage last ran (the directory's absence warns: jobs may start another way)
    Spec("launchers", "launch files", "the launch directory (launchers_dir): hostfiles, launch.env and the launch scripts "
         "there, naming the inventory's nodes, rendezvous and ssh port; each hostfile as launch.env",
         module="provision.cluster.launch_files_info", stage="launchers", args=_launch_args,
         writers=("provision.cluster.launch_dir",),
         when=lambda ctx: bool(ctx.var("launchers_dir")), local=False),
    Spec("compare", "versions equal", "versions equal on every node", phase=CLUSTER, group="versions", stage="python_env",
         needs=("versions",), cluster=_cluster_compare, default=False),
    Spec("gpu_health", "gpu health",
         "GPUs healthy: count (gpu_health_expected_gpus, else the same on every node), ECC, retired pages/remapped rows, "
         "PCIe link below its maximum, NVLink links down or erroring, fault throttling, Xid errors with their meaning, "
         "persistence, MIG, fabric manager; dcgmi diag with verify_dcgm (skip without GPU)",
         module="provision.cluster.gpu_health_info", stage="cuda_toolkit", derive=_gpu_health_without_gpu, derive_from=("gpu",),
         args=lambda ctx: {"node": ctx.host, "expected_gpus": int(ctx.var("gpu_health_expected_gpus") or 0),
                           "dcgm_diag": _dcgm(ctx)},
         keep=_keep_gpu_health),
    Spec("gpu_count", "gpu_count", "the same GPU count on every node (gpu_health_expected_gpus, else the first GPU node's)",
         phase=CLUSTER, group="gpu_health", needs=("gpu_health",), cluster=_cluster_gpu_count, stage="cuda_toolkit",
         default=False),
    Spec("fabric", "fabric health",
         "InfiniBand/RoCE ports: state and physical state, rate below the port's maximum or the cluster's, error "
         "counters growing between two reads, MTU, one link layer on every node; GPUDirect RDMA prerequisites "
         "(nvidia_peermem, PCIe ACS); RDMA devices and memlock in containers (skip without RDMA)",
         module="provision.cluster.fabric_health_info", stage="nccl_net", derive=_fabric_without_rdma, derive_from=("nccl",),
         args=lambda ctx: {"node": ctx.host, "counter_interval": int(ctx.var("verify_counter_interval")),
                           "required_ports": [h for h in str(ctx.var("nccl_net_ib_hca") or "").split(",") if h]},
         keep=_keep_fabric),
    Spec("fabric_consistency", "ib_link_layer", "one RDMA link layer and the same port rates on every node",
         phase=CLUSTER, group="fabric", needs=("fabric",), cluster=_cluster_fabric, stage="nccl_net", default=False),
    Spec("consistency", "consistency",
         "the same platform on every node: kernel, the NCCL interface's MTU (a difference fails), speed and driver, "
         "NVIDIA driver, CUDA, NCCL, RDMA firmware", phase=CLUSTER, needs=("nccl", "gpu", "versions"),
         cluster=_cluster_consistency),
    Spec("smoke", "allreduce", "all-reduce across all nodes (only with --smoke): sum checked, algbw/busbw judged against "
         "the bandwidth the hardware should give and the baseline; the bad node named", phase=SMOKE,
         stage="allreduce_smoke", default=False, local=False),
]

BY_NAME = {s.name: s for s in CATALOG}
# the names users pick (--check, --list-checks), in table order
PUBLIC = [s.name for s in CATALOG if s.default] + ["smoke"]
ALWAYS = ("reach",)
# `provision verify --local` (SLURM's health check) without --check: what this node alone can prove,
# read-only and in seconds, without ssh to its peers (the rendezvous port is left out: a running job
# holds it)
LOCAL_DEFAULT = ("runtime", "nccl", "gpu", "gpu_health", "fabric")


class UnknownCheck(ValueError):
    pass


def select(names=None, smoke=False):
    """The public check names to run, in catalog order (None: every one but smoke; "reach" always);
    UnknownCheck names the unknown ones."""
    unknown = [n for n in names or () if n not in PUBLIC]
    if unknown:
        raise UnknownCheck("unknown check %s; known: %s" % (", ".join(unknown), ", ".join(PUBLIC)))
    wanted = set(names) if names is not None else {n for n in PUBLIC if n != "smoke"}
    if smoke:
        wanted.add("smoke")
    wanted.update(ALWAYS)
    return [n for n in PUBLIC if n in wanted]


def in_stages(selected, running):
    """The public names whose stage runs (site.yml's verify pass: --skip-tags python_env skips `versions`)."""
    return [n for n in selected if BY_NAME[n].stage is None or BY_NAME[n].stage in running]


def reported(selected):
    """The entries whose records the document shows for these public names, in catalog order."""
    return [s.name for s in CATALOG if s.group in set(selected)]


def expand(selected, running=None, local=False):
    """The entries to run for these public names: the reported ones and what they need (inside site.yml,
    running: only those of the stages this run executes; local: only those that run on the node alone)."""
    names = set(reported(selected))
    todo = list(names)
    while todo:
        for need in BY_NAME[todo.pop()].needs:
            if need not in names:
                names.add(need)
                todo.append(need)
    return [s.name for s in CATALOG if s.name in names
            and (running is None or s.stage is None or s.stage in running) and (s.local or not local)]


def describe():
    """[(name, summary)] of the public checks (provision verify --list-checks)."""
    return [(n, BY_NAME[n].summary) for n in PUBLIC]


def describe_checks():
    """The public checks as `provision verify --list-checks --json` lists them (and docs/verify.md's
    table, generated from that list): per check its name, summary, the read-only modules that run for it
    on the nodes, whether the controller compares the nodes' results, the stage that makes what it
    checks, whether it runs without --check, and whether `verify --local` runs it (named, or by default);
    phase: where its main entry runs (node, peers, cluster: on the controller, smoke: the all-reduce role)."""
    out = []
    for name in PUBLIC:
        entries = [BY_NAME[e] for e in reported([name])]
        modules = []
        for e in entries:
            if e.module and e.module not in modules:
                modules.append(e.module)
        spec = BY_NAME[name]
        out.append({
            "name": name,
            "summary": spec.summary,
            "modules": modules,
            "controller": any(e.phase == CLUSTER for e in entries),
            "phase": spec.phase,
            "stage": spec.stage,
            "default": spec.default,
            "always": name in ALWAYS,
            "local": spec.local,
            "local_default": name in LOCAL_DEFAULT,
        })
    return out
