# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The one mapping from a failed multi-node job's log lines to a cause, the node it concerns and a fix.

Plain Python (no Ansible import, Python 3.9+): the all-reduce smoke test (``allreduce_smoke``),
node_runtime's resource explanations, ``provision diagnose`` and ``provision launch`` all read it.

A cause is a regular expression over the log, the sentence that explains it, the fix, and how it
ranks against the others:

- ``CAUSES`` is ordered most specific first; ``classify_log`` returns the first that matches (what
  the smoke test prints), ``diagnose_text`` every cause that matches, as Check records
  (``checks.py``), one per cause and node.
- A *symptom* (a rendezvous that timed out, a peer that went away, an HCCL socket timeout, mpirun's
  "could not start daemons") is what every rank reports when another one failed: it is reported
  only when no real cause was found in any log of the job.
- ``suppresses`` names causes a more specific one explains (a NIC that is down also makes HCCL's
  listen fail; an ssh host key failure is why mpirun could not start its daemons).
- ``requires`` is a second pattern that must appear somewhere in the same log (NCCL listing lo
  among its interfaces is only a cause when a connection then failed).

Nodes come from the line's own prefix: pdsh/DeepSpeed ``node2: ...``, SLURM ``srun: error: node3:``,
Open MPI ``[node2:12345]``, ``[host:rank]:``, NCCL's ``host:pid:tid [dev]``; ranks from torchrun's
``[rank3]:``/``[default3]:``, mpirun ``--tag-output`` ``[1,3]<stderr>:`` and ``srun --label`` ``3:``.
A log with no node on the line gets the caller's default node, else the one node the log names.
"""

from __future__ import annotations

import bisect
import re

from ansible_collections.provision.cluster.plugins.module_utils.checks import failed

CHECK_PREFIX = "diagnose."
MAX_EVIDENCE = 220
MAX_UNKNOWN_LINES = 25
MAX_MATCHES = 500  # per cause and log: enough lines to name every node, bounded work on huge logs

# --------------------------------------------------------------------------- fixes shared by causes
_FIX_NCCL_IFNAME = "set NCCL_SOCKET_IFNAME to the interface that holds the cluster address (nccl_net role picks it)"
_FIX_MEMLOCK = ("make memlock unlimited for the training user (`ulimit -l unlimited`: node_runtime's limits.d drop-in "
                "on bare metal; --ulimit memlock=-1:-1 --cap-add IPC_LOCK for containers) and start the job from a new login")
_FIX_SSH = ("make `ssh -o BatchMode=yes NODE true` work from the launching node to every node "
            "(ssh_mesh role: keys, known_hosts, ~/.ssh/config)")


class Cause:
    """One known cause: a pattern, what it means, the fix, and how it ranks against the others."""

    def __init__(self, cause, pattern, detail, fix, *, symptom=False, suppresses=(), requires=None, context=None,
                 detail_context=None, node_from="node", flags=0, resource=False):
        self.cause = cause
        self.regex = re.compile(pattern, flags | re.M)
        self.detail = detail                  # str.format template over the named groups (+ context)
        self.fix = fix
        self.symptom = symptom
        self.suppresses = tuple(suppresses)
        self.requires = re.compile(requires, flags | re.M) if requires else None
        # name -> pattern searched anywhere in the text; its first group enriches the detail
        self.context = {k: re.compile(v, re.M) for k, v in (context or {}).items()}
        self.detail_context = detail_context  # the template used when every context value was found
        self.resource = resource              # one of node_runtime's checks (shm, ipc, memlock, nofile)
        self.node_from = node_from            # the group or context value that names the node, when there is one

    def context_values(self, text):
        """The context values found anywhere in text (the first group of each context pattern's first match)."""
        found = {}
        for name, regex in self.context.items():
            hit = regex.search(text)
            if hit:
                found[name] = next((g for g in hit.groups() if g is not None), hit.group(0))
        return found

    def explain(self, match, text, context=None):
        """(detail, fix, values) for one match: the templates filled from the match's groups and the context."""
        found = self.context_values(text) if context is None else context
        values = dict(found, **{k: v for k, v in match.groupdict().items() if v is not None})
        template = self.detail
        if self.detail_context and self.context and len(found) == len(self.context):
            template = self.detail_context
        return _fill(template, values), _fill(self.fix, values), values


class _Blank(dict):
    def __missing__(self, key):
        return ""


def _fill(template, values):
    """str.format with the groups that did not take part in the match left empty."""
    return template.format_map(_Blank(values))


# --------------------------------------------------------------------------- the mapping, most specific first
CAUSES = [
    # ---- GPU placement
    Cause("duplicate_gpu",
          r"Duplicate GPU detected : rank (?P<a>\d+) and rank (?P<b>\d+) both on CUDA device (?P<dev>\w+)",
          "two ranks on one GPU: rank {a} and rank {b} both on CUDA device {dev}",
          "start one rank per GPU (nproc_per_node <= GPU count) and call torch.cuda.set_device(LOCAL_RANK); "
          "check CUDA_VISIBLE_DEVICES"),
    # ---- Ascend HCCL: a NIC that is down explains the listen failure and the timeouts after it
    Cause("hccl_nic_down",
          r"EJ0002\b|[Tt]he network port is down|ra rdma init failed|\brdma init fail\b",
          "HCCL could not bring up the NPU's network port (RDMA init failed / port down)",
          "check the NPU links on that node (`hccn_tool -i DEV -link -g`, `hccn_tool -i DEV -ip -g`, `npu-smi info`) "
          "and give every NPU port an IP before starting the job",
          suppresses=("hccl_port_held", "hccl_socket_timeout")),
    # ---- interfaces
    Cause("no_interface",
          r"no socket interface found|no NCCL_SOCKET_IFNAME interface found",
          "NCCL found no usable socket interface",
          _FIX_NCCL_IFNAME,
          context={"ifname": r"NCCL_SOCKET_IFNAME set (?:by environment )?to ([^\s\"',]+)"},
          detail_context="NCCL found no usable interface: NCCL_SOCKET_IFNAME={ifname} matches no interface that is up",
          suppresses=("nccl_connect_refused", "peer_lost")),
    Cause("no_interface",
          r"ncclSocketInit: connecting to address\s+with family (?P<family>\d+) is neither AF_INET",
          "NCCL has no address to connect to (address family {family}): no usable socket interface",
          _FIX_NCCL_IFNAME,
          requires=r"NCCL_SOCKET_IFNAME set (?:by environment )?to \S+",
          context={"ifname": r"NCCL_SOCKET_IFNAME set (?:by environment )?to ([^\s\"',]+)"},
          detail_context="NCCL has no address to connect to: NCCL_SOCKET_IFNAME={ifname} matches no interface on the node"),
    Cause("no_interface",
          r"Unable to find address for:? ?(?P<ifname>\^[^\s\"',]+)",
          "gloo found no usable interface {ifname}: GLOO_SOCKET_IFNAME takes one interface name, not NCCL's ^exclude list",
          "set GLOO_SOCKET_IFNAME to the one interface that holds the cluster address (e.g. eth1); "
          "keep the ^lo,docker form for NCCL_SOCKET_IFNAME only"),
    Cause("no_interface",
          r"Unable to find address for:? ?(?P<ifname>[^\s\"',]+)|interface (?P<ifname2>[^\s\"',]+) not found|"
          r"(?:getifaddrs|ifname).*[Nn]o such device",
          "gloo found no usable interface {ifname}{ifname2}",
          "set GLOO_SOCKET_IFNAME to the interface that holds the cluster address"),
    Cause("gloo_loopback",
          r"Unable to resolve hostname to a \(local\) address\. Using the loopback|"
          r"pair\.cc:\d+\] connect \[127\.[\d.]+\]:\d+: Connection refused|"
          r"SO_ERROR: Connection refused,?\s+remote=\[127\.[\d.]+\]",
          "gloo fell back to a loopback address: the node's hostname does not resolve to a cluster address, "
          "so peers are told to connect to 127.x",
          "set GLOO_SOCKET_IFNAME to the interface that holds the cluster address on every node (shell_env exports it), "
          "or make the hostname resolve to the cluster address in /etc/hosts",
          context={"addr": r"(?:connect \[|remote=\[)(127\.[\d.]+)\]"},
          detail_context="gloo gave peers the loopback address {addr}: the node's hostname resolves to 127.x "
                         "instead of its cluster address, so peers connect to themselves"),
    Cause("nccl_loopback_interface",
          r"NET : Using interface lo:127\.|NET/Socket : Using .*\blo:127\.|Bootstrap : Using (?:\[\d+\])?lo:127\.",
          "NCCL uses the loopback interface lo for inter-node traffic: peers are told 127.0.0.1 is this node",
          "set NCCL_SOCKET_IFNAME to the cluster interface (or ^lo,docker) on every node (nccl_net role)",
          requires=r"Connection refused|[Cc]onnect(?:ion)? timed? ?out|Connection closed by remote peer",
          suppresses=("nccl_connect_refused", "peer_lost")),
    # ---- node runtime limits (node_runtime's checks: shm, ipc, memlock, nofile)
    Cause("shm",
          r"failed to extend /dev/shm/\S+ to \d+ bytes|posix_fallocate failed\s*:\s*No space left"
          r"|Error while creating shared memory segment|include/shm\.h.*No space left"
          r"|insufficient shared memory \(shm\)|unable to allocate shared memory"
          r"|Unable to (?:open|write to) (?:shared memory object|file <?/?torch_)"
          r"|No space left on device.*shm",
          "/dev/shm is too small or full for NCCL's shared-memory segments (64 MiB container default?)",
          "give the node a larger /dev/shm (node_runtime: docker/podman --shm-size=1g or more, --ipc=host; "
          "Kubernetes emptyDir medium: Memory on /dev/shm) and remove stale /dev/shm/nccl-* files",
          flags=re.I, resource=True),
    Cause("ipc",
          r"Error while attaching to shared memory segment \S+.*No such file or directory",
          "ranks on one host do not share /dev/shm (separate IPC namespaces/containers) or systemd-logind "
          "RemoveIPC deleted the segments",
          "run the ranks of one host in one container or with --ipc=host; set RemoveIPC=no in "
          "/etc/systemd/logind.conf when the training user logs out during a run",
          flags=re.I, resource=True),
    Cause("memlock",
          r"ibv_reg_mr\S*\s+failed|Unable to register memory|RLIMIT_MEMLOCK is \d+ bytes"
          r"|ibv_reg_dmabuf_mr\S* failed|fi_mr_reg failed"
          r"|(?:NET/IB|ib_plugin|ibvwrap).*Cannot allocate memory",
          "RDMA memory registration failed: the locked-memory limit (ulimit -l) is not unlimited",
          _FIX_MEMLOCK,
          flags=re.I, resource=True),
    Cause("nofile",
          r"Too many open files|EMFILE|received 0 items of ancdata",
          "the open-files limit (ulimit -n) is too low for the ranks' sockets and DataLoader workers",
          "raise nofile (node_runtime_min_nofile; --ulimit nofile=N:N in containers)",
          flags=re.I, resource=True),
    # ---- RDMA
    Cause("ib_qp_create",
          r"Call to ibv_create_(?:qp|cq) failed|ibv_create_cq\(\) failed",
          "creating an RDMA queue pair failed (ibv_create_qp): most often the locked-memory limit (ulimit -l) inside "
          "the job (srun, container) is too low",
          "check `srun bash -c 'ulimit -l'` (or inside the container) shows unlimited; " + _FIX_MEMLOCK),
    Cause("ib_fabric_path",
          r"Call to ibv_modify_qp failed with (?:error )?(?:\d+ )?(?P<err>Network is unreachable|Connection timed out)|"
          r"NET/IB : Got completion (?:from peer \S+ )?with (?P<code>error 12|status=12)\b",
          "the RDMA NICs cannot reach each other ({err}{code}): NCCL's TCP bootstrap worked, the IB/RoCE path did not "
          "(GID index, routing, or a rail-only fabric)",
          "test the pair with `ib_write_bw`; set NCCL_IB_GID_INDEX to the RoCE v2 IPv4 GID (`show_gids`), NCCL_IB_HCA "
          "to HCAs on the same fabric, NCCL_CROSS_NIC=0 on rail-optimized fabrics",
          suppresses=("peer_lost",)),
    # ---- ports
    Cause("port_held",
          r"EADDRINUSE|[Aa]ddress already in use",
          "the master port is already in use on the master node",
          "stop the process holding it (`ss -ltnp` / fuser PORT/tcp) or set cluster_master_port to a free port",
          context={"port": r"port: (\d+)|failed to bind to \S+:(\d+)"},
          detail_context="the master port {port} is already in use on the master node",
          suppresses=("rendezvous_connection", "rendezvous_timeout", "peer_lost")),
    Cause("hccl_port_held",
          r"listen on ip\[[^\]]*\] and specific port\[\d+\] fail|EJ0003\b|Failed to bind the IP port"
          r"|EI0019\b|Bind_IP_Port|host nic listen start failed, port\[\d+\]",
          "HCCL could not bind its listening IP and port: another process (another job, or a stale one) holds it",
          "stop the process holding it (`ss -ltnp | grep PORT`) or give each job its own HCCL ports "
          "(HCCL_IF_BASE_PORT for the host NIC)",
          context={"port": r"(?:specific port|listen start failed, port)\[(\d+)\]"},
          detail_context="HCCL could not listen on port {port}: another process (another job, or a stale one) holds it",
          suppresses=("hccl_socket_timeout",)),
    # ---- ssh (pdsh/DeepSpeed, mpirun)
    Cause("ssh_host_key",
          r"Host key verification failed",
          "ssh rejected the node's host key (unknown or changed) so the launcher could not start there",
          "add the nodes' host keys to known_hosts (ssh_mesh role; `ssh-keygen -R NODE` after a reinstall); "
          + _FIX_SSH,
          suppresses=("mpi_daemons", "ssh_failed")),
    Cause("ssh_refused",
          r"ssh: connect to host (?P<node>\S+) port (?P<port>\d+): Connection refused",
          "nothing accepts ssh on {node} port {port} (sshd not running there, or it listens on another port)",
          "start sshd on that node or point the launcher at its port (~/.ssh/config Port; DeepSpeed --ssh_port); "
          "`ssh -p PORT NODE true` must work",
          suppresses=("mpi_daemons", "ssh_failed")),
    Cause("ssh_unreachable",
          r"ssh: connect to host (?P<node>\S+) port (?P<port>\d+): (?P<why>No route to host|Connection timed out"
          r"|Network is unreachable)",
          "cannot reach {node} port {port} over ssh ({why})",
          "put the node's cluster-network address in the hostfile/inventory and check routes and firewall between the nodes",
          suppresses=("mpi_daemons", "ssh_failed")),
    Cause("ssh_failed",
          r"host=(?P<node>\S+) was not reachable via ssh|Command '\[?'?ssh (?:-o \S+ )*(?P<node2>[^\s']+) hostname"
          r"(?: -I)?'?\]?' returned non-zero exit status 255",
          "the launcher's ssh check to {node}{node2} failed (ssh exit 255: unreachable, host key or key authentication)",
          _FIX_SSH),
    Cause("remote_command_not_found",
          r"(?:bash|sh|zsh): (?:line \d+: )?(?P<cmd>[^\s:]+): command not found",
          "a command the launcher ran on the node was not found there: `{cmd}`",
          "check `ssh NODE 'command -v CMD'`: install it there or use its absolute path; the env block "
          "(shell_env role) must come before ~/.bashrc's non-interactive guard"),
    # ---- Open MPI
    Cause("mpi_tcp_blocked",
          r"A process or daemon was unable to complete a TCP connection",
          "Open MPI could not open a TCP connection between its daemons (firewall or wrong interface)",
          "open the ports between the nodes or pin Open MPI to the cluster interface "
          "(--mca btl_tcp_if_include IFACE --mca oob_tcp_if_include IFACE)",
          context={"local": r"Local host:\s*(\S+)", "remote": r"Remote host:\s*(\S+)"},
          detail_context="Open MPI could not open a TCP connection from {local} to {remote} (firewall or wrong interface)",
          node_from="local", suppresses=("mpi_daemons",)),
    Cause("mpi_not_enough_slots",
          r"There are not enough slots available in the system to satisfy the (?P<n>\d+)\s+slots",
          "mpirun asked for {n} slots but the hostfile/--host grant fewer",
          "give each host `slots=N` (its GPU count) in the hostfile or `-H host:N`; --oversubscribe only for CPU tests"),
    # ---- SLURM
    Cause("slurm_preempted",
          r"\*\*\* JOB (?P<job>\d+) ON (?P<node>\S+) CANCELLED AT \S+ DUE TO PREEMPTION",
          "SLURM preempted job {job} (a higher-priority job took its nodes)",
          "resubmit with --requeue and resume from a checkpoint, or use a partition/QOS that is not preemptible"),
    # ---- reachability of the master / peers
    Cause("peer_unreachable",
          r"failed to connect to (?P<host>\S+?):(?P<port>\d+) \(errno: \d+ - (?P<why>Network is unreachable|"
          r"No route to host|Connection timed out)\)",
          "cannot reach the master {host}:{port} ({why})",
          "use an address on the cluster network for cluster_master_addr and check routes/firewall between "
          "the nodes on that interface"),
    Cause("peer_unreachable",
          r"Connect to (?P<host>\S+?)<(?P<port>\d+)> (?:returned \d+\(|failed : )(?P<why>No route to host|"
          r"Network is unreachable|Connection timed out)",
          "NCCL cannot reach peer {host} port {port} ({why}) on the interface it chose",
          _FIX_NCCL_IFNAME + " on every node, and check routes/firewall between the nodes on it"),
    Cause("nccl_connect_refused",
          r"Connect to (?P<host>\S+?)<(?P<port>\d+)> failed : Connection refused",
          "NCCL's connection to {host} port {port} was refused: nothing listens at the address that peer advertised "
          "(it chose another interface, already exited, or a stale file:// init file named an old address)",
          _FIX_NCCL_IFNAME + " on every node (the same on all); check that address belongs to a node of this job"),
    Cause("nccl_connect_refused",
          r"Call to connect (?:returned|timeout :|failed :) ?Connection refused",
          "NCCL's connection to a peer was refused: nothing listens at the address that peer advertised "
          "(it chose another interface or already exited)",
          _FIX_NCCL_IFNAME + " on every node (the same on all)"),
    Cause("rendezvous_connection",
          r"RendezvousConnectionError",
          "could not talk to the c10d rendezvous store on the master port (a foreign listener or no server)",
          "check what listens on the master port on the master node; make sure nothing but the job uses it",
          context={"endpoint": r"trying to connect to (\S+:\d+)|failed to connect/validate to host (\S+:\d+)"},
          detail_context="could not talk to the c10d rendezvous store at {endpoint} (a foreign listener or no server)",
          suppresses=("peer_lost",)),
    # ---- killed workers
    Cause("worker_killed",
          r"failed \(exitcode: -9\)|exits with return code = -9|^\s*exitcode\s*: -9\b",
          "a worker was killed with SIGKILL (exit -9): most often the kernel's OOM killer (host RAM), else the "
          "scheduler or an operator",
          "look for `Killed process` in `journalctl -k` (or dmesg) on that node; lower host memory per rank "
          "(DataLoader workers, model loading) or give the job more RAM"),
    # ---- symptoms: what every rank reports when another failed first
    Cause("nccl_id_timeout",
          r"is setting up NCCL communicator and retr(?:ie|ei)ving ncclUniqueId from \[(?P<root>\d+)\] via c10d key-value "
          r"store by key '[^']*', but store->get\('[^']*'\) got error: (?P<err>[^\n]+)",
          "this rank waited for rank {root}'s NCCL id in the store and got `{err}`: rank {root} never created its "
          "communicator (it failed or is stuck earlier) or the store went away",
          "read rank {root}'s log for its first error; every rank must reach the same collective",
          symptom=True, suppresses=("rendezvous_timeout",)),
    Cause("rendezvous_closed",
          r"RendezvousClosedError",
          "the c10d rendezvous was already closed: another node of this run id finished or failed first "
          "(or an earlier job with the same --rdzv-id closed it)",
          "read the first node that failed; give each job its own --rdzv-id (e.g. $SLURM_JOB_ID)",
          symptom=True),
    Cause("hccl_socket_timeout",
          r"EI0006\b|Getting socket times out|wait socket establish timeout",
          "HCCL timed out waiting for a peer rank's socket (EI0006): a remote rank did not arrive in time "
          "(it failed, is stuck, or started later than HCCL_CONNECT_TIMEOUT)",
          "read the other ranks' logs for the first error; start every rank together; raise HCCL_CONNECT_TIMEOUT "
          "(default 120 s) for slow starts",
          symptom=True),
    Cause("mpi_daemons",
          r"(?:ORTE|PRTE) was unable to reliably start one or more daemons",
          "mpirun could not start its daemon on a node (ssh to it failed, or orted is not on the remote PATH)",
          "check `ssh NODE which orted` non-interactively from the launching node; use --prefix or "
          "--enable-orterun-prefix-by-default",
          symptom=True),
    Cause("rendezvous_timeout",
          r"RendezvousTimeoutError|[Ww]ait timeout|[Tt]imed out.*(?:workers|rendezvous)|"
          r"client socket has timed out|Socket Timeout|timed out after \d+ms while trying to connect|"
          r"waiting for clients\. (?P<joined>\d+/\d+) clients joined",
          "rendezvous timed out: not every rank joined in time",
          "start the job on every node (same nnodes/world size and master address/port); "
          "check the master address is reachable from every node",
          symptom=True),
    Cause("peer_lost",
          r"Connection reset by peer|Connection closed by peer|[Bb]roken pipe|"
          r"NCCL error.*remote process exited|Connection closed by remote peer (?P<peer>[^\s<]+)",
          "a peer went away during the collective (killed, crashed or the network dropped)",
          "look at that node's worker log; rerun when every node is healthy",
          context={"peer": r"Connection closed by remote peer ([^\s<]+)"},
          detail_context="a peer ({peer}) went away during the collective (killed, crashed or the network dropped)",
          symptom=True),
]

BY_ID = {}
for _c in CAUSES:
    BY_ID.setdefault(_c.cause, _c)
RESOURCE_CAUSES = tuple(c.cause for c in CAUSES if c.resource)


# --------------------------------------------------------------------------- line prefixes -> node / rank
_FILE_EXT = re.compile(r"\.(?:py|sh|json|ya?ml|cc|c|cpp|cu|h|hpp|so|log|txt|md|ts)$")
_NOT_A_HOST = re.compile(r"^E[A-Z]\d{4}$|^ERR\d+$|(?:Error|Exception|Warning|Interrupt|Exit)$|_")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_PREFIXES = [
    # [2026-04-22 21:34:20] timestamps (NCCL_DEBUG_TIMESTAMP_FORMAT, CI runners)
    ("skip", re.compile(r"\[\d{4}-\d\d-\d\d[ T][\d:.,]+\]\s*")),
    # mpirun --tag-output: [1,3]<stderr>:
    ("rank", re.compile(r"\[\d+,(?P<v>\d+)\]<(?:stdout|stderr|stddiag)>:\s?")),
    # torchrun --tee / log prefixes: [rank3]: [default3]: (vLLM prints "[rank8] ")
    ("rank", re.compile(r"\[(?P<v>(?:rank|default)\d+)\]:?\s?")),
    # torchx roles: [trainer3]: [trainer0|0]:
    ("rank", re.compile(r"\[(?P<v>[A-Za-z][\w-]*?\d+(?:\|\d+)?)\]:\s?")),
    # [host:local_rank]: (accelerate, lightning)
    ("node", re.compile(r"\[(?P<v>[A-Za-z0-9][\w.-]*):\d+\]:\s?")),
    # Open MPI [host:pid] (plm/btl verbose)
    ("node", re.compile(r"\[(?P<v>[A-Za-z0-9][\w.-]*):\d+\]\s")),
    # srun --label: "3: "
    ("task", re.compile(r"(?P<v>\d+): ")),
    # pdsh: "pdsh@launcher: node2: ..." then "node2: ..."
    ("skip", re.compile(r"pdsh@[\w.-]+: ")),
    ("node", re.compile(r"(?P<v>[A-Za-z0-9][\w.-]*): ")),
]
_NCCL_HOST = re.compile(r"(?P<v>[A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] ")
_SLURM_NODE = re.compile(r"^srun: error: (?P<node>[\w.-]+): tasks? (?P<task>[\d,-]+): |"
                         r"\*\*\* (?:STEP|JOB) \S+ ON (?P<node2>\S+) CANCELLED")


def looks_like_host(token):
    """Whether a 'token: ' or '[token:N]' prefix names a host: localhost, an IPv4 address, or a name with a
    digit, dot or dash that is not an error code (EI0006), a Python exception or a file name."""
    if token == "localhost" or _IPV4.match(token):
        return True
    if _NOT_A_HOST.search(token) or _FILE_EXT.search(token) or re.match(r"^[\d.:-]+$", token):
        return False
    return bool(re.search(r"[\d.-]", token))


def attribute(line):
    """What a line's prefixes say: {'node': node a launcher names, 'host': NCCL's hostname, 'rank', 'task'}."""
    out = {}
    rest = line
    for _i in range(6):
        for kind, regex in _PREFIXES:
            m = regex.match(rest)
            if not m or (kind == "node" and not looks_like_host(m.group("v"))):
                continue
            if kind != "skip":
                out.setdefault(kind, m.group("v"))
            rest = rest[m.end():]
            break
        else:
            break
    m = _NCCL_HOST.match(rest)
    if m:
        out["host"] = m.group("v")
    m = _SLURM_NODE.search(line)
    if m:
        out["node"] = m.group("node") or m.group("node2")
        if m.group("task"):
            out["task"] = m.group("task")
    return out


# --------------------------------------------------------------------------- one log
class _Lines:
    """Line numbers and attributions of one text, computed on demand."""

    def __init__(self, text):
        self.text = text
        self.lines = text.split("\n")
        self.starts = []
        offset = 0
        for line in self.lines:
            self.starts.append(offset)
            offset += len(line) + 1
        self._attr = {}

    def number(self, offset):
        return bisect.bisect_right(self.starts, offset)

    def line(self, number):
        return self.lines[number - 1] if 0 < number <= len(self.lines) else ""

    def attr(self, number):
        if number not in self._attr:
            self._attr[number] = attribute(self.line(number))
        return self._attr[number]

    def hosts(self):
        """Every node or NCCL host the log names, in order of appearance."""
        seen = []
        for n in range(1, len(self.lines) + 1):
            a = self.attr(n)
            for key in ("node", "host"):
                if a.get(key) and a[key] not in seen:
                    seen.append(a[key])
        return seen


# a match on a line of source code quoted in a traceback is not evidence ("raise RendezvousTimeoutError")
_CODE_LINE = re.compile(r"^\s*(?:\[[^\]]*\]:?\s*)*(?:raise |File \"|except |return |if |elif |def |class |#)")


def _evidence(line):
    line = line.strip()
    return line if len(line) <= MAX_EVIDENCE else line[:MAX_EVIDENCE - 3] + "..."


def find_causes(text):
    """Every match of every cause in one text, in CAUSES order then line order:
    [{cause, order, detail, fix, symptom, suppresses, line, evidence, node, attr}]."""
    text = text or ""
    index = _Lines(text)
    found = []
    for order, c in enumerate(CAUSES):
        if c.requires is not None and not c.requires.search(text):
            continue
        context = None
        for count, m in enumerate(c.regex.finditer(text)):
            if count >= MAX_MATCHES:
                break
            number = index.number(m.start())
            if _CODE_LINE.match(index.line(number)):
                continue
            if context is None:
                context = c.context_values(text)
            detail, fix, values = c.explain(m, text, context)
            found.append({"cause": c.cause, "order": order, "detail": detail, "fix": fix, "symptom": c.symptom,
                          "suppresses": c.suppresses, "line": number, "evidence": _evidence(index.line(number)),
                          "node": values.get(c.node_from) or values.get(c.node_from + "2"),
                          "attr": index.attr(number)})
    return found, index


def _unsuppressed(found):
    suppressed = {s for f in found for s in f["suppresses"]}
    return [f for f in found if f["cause"] not in suppressed]


def rank_causes(found):
    """The causes worth naming, most specific first: what a more specific cause explains is dropped, and
    symptoms are dropped when a real cause is there."""
    kept = _unsuppressed(found)
    if any(not f["symptom"] for f in kept):
        kept = [f for f in kept if not f["symptom"]]
    return sorted(kept, key=lambda f: (f["order"], f["line"]))


def classify_log(text):
    """The most likely cause named by one log text: {cause, detail, fix} or None (the smoke test's view)."""
    found, _unused = find_causes(text)
    ranked = rank_causes(found)
    if not ranked:
        return None
    top = ranked[0]
    return {"cause": top["cause"], "detail": top["detail"], "fix": top["fix"]}


def explain_resource_error(text):
    """node_runtime's view: (cause, explanation, fix) for /dev/shm, IPC, memlock and nofile errors, else None."""
    for c in CAUSES:
        if c.resource and c.regex.search(text or ""):
            return c.cause, c.detail, c.fix
    return None


# --------------------------------------------------------------------------- Check records for a job's logs
def _node_of(f, default_node, file_node):
    """The node a cause concerns: the node the matched text names, the launcher prefix of the line, the
    caller's default (the node the log came from), NCCL's hostname on the line, else the one node the log names."""
    a = f["attr"]
    for value in (f.get("node"), a.get("node"), default_node, a.get("host"), file_node):
        if value:
            return value
    return None


_ERRORISH = re.compile(r"\b\w*(?:Error|Exception|Interrupt)\b|\berror:|\bERROR\b|\bWARN(?:ING)?\b|\bFAILED\b|"
                       r"\bfailed\b|Traceback \(most recent call last\)|\bKilled\b|\bTerminated\b|CANCELLED")
_NOISE = re.compile(r"^\s*File \"|^\s*\^+\s*$|NCCL INFO |^\s*frame #\d+|^\s*warnings\.warn\(")


def error_lines(text, source=None, default_node=None, limit=MAX_UNKNOWN_LINES):
    """Lines that look like errors (exception lines, error:, WARN, FAILED), for logs with no known cause."""
    index = _Lines(text or "")
    out, seen = [], set()
    for n, line in enumerate(index.lines, 1):
        if not line.strip() or _NOISE.search(line) or not _ERRORISH.search(line):
            continue
        key = re.sub(r"\d+", "#", line.strip())
        if key in seen:
            continue
        seen.add(key)
        a = index.attr(n)
        item = {"line": n, "text": _evidence(line)}
        node = a.get("node") or default_node or a.get("host")
        if node:
            item["node"] = node
        if source:
            item["file"] = source
        out.append(item)
    return out[-limit:] if len(out) > limit else out


_EXIT_LINES = [
    re.compile(r"^srun: error: (?P<node>[\w.-]+): tasks? (?P<task>[\d,-]+): (?P<what>Exited with exit code (?P<code>-?\d+)"
               r"|Terminated|Killed|Segmentation fault.*|Aborted.*)\s*$", re.M),
    re.compile(r"^pdsh@\S+: (?P<node>[\w.-]+): ssh exited with exit code (?P<code>\d+)", re.M),
    re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local_rank>\d+)", re.M),
    re.compile(r"exits with return code = (?P<code>-?\d+)", re.M),
]


def node_exits(text):
    """Which node/task/rank exited and how, as the launchers report it (srun, pdsh, torchrun, deepspeed)."""
    index = _Lines(text or "")
    out = []
    for regex in _EXIT_LINES:
        for m in regex.finditer(text or ""):
            item = {k: v for k, v in m.groupdict().items() if v is not None}
            item["line"] = index.number(m.start())
            if "code" in item:
                item["code"] = int(item["code"])
            out.append(item)
    # torchrun's ChildFailedError summary: host / rank / exitcode of each failure
    for m in re.finditer(r"host\s*:\s*(?P<node>\S+)\s*\n\s*rank\s*:\s*(?P<rank>\d+)[^\n]*\n\s*exitcode\s*:\s*"
                         r"(?P<code>-?\d+)", text or ""):
        out.append({"node": m.group("node"), "rank": m.group("rank"), "code": int(m.group("code")),
                    "line": index.number(m.start())})
    return sorted(out, key=lambda e: e["line"])


def diagnose_text(text, source=None, default_node=None):
    """One log: {'causes': [Check records], 'found': [raw matches kept], 'nodes': [...], 'exits': [...]}.

    Symptoms are kept here (``diagnose_job`` drops them when another log of the job has a real cause)."""
    found, index = find_causes(text)
    found = _unsuppressed(found)
    hosts = index.hosts()
    file_node = hosts[0] if len(hosts) == 1 else None
    grouped = {}
    for f in sorted(found, key=lambda f: (f["order"], f["line"])):
        node = _node_of(f, default_node, file_node)
        key = (f["cause"], node)
        if key not in grouped:
            grouped[key] = dict(f, lines=[f["line"]])
        elif f["line"] not in grouped[key]["lines"]:
            grouped[key]["lines"].append(f["line"])
    causes = []
    for (cause, node), f in grouped.items():
        data = {"cause": cause, "symptom": f["symptom"], "line": f["lines"][0], "lines": f["lines"][:20],
                "evidence": f["evidence"]}
        if source:
            data["file"] = source
        for key in ("rank", "task", "host"):
            if f["attr"].get(key) and f["attr"][key] != node:
                data[key] = f["attr"][key]
        where = "%s:%d" % (source, f["lines"][0]) if source else "line %d" % f["lines"][0]
        detail = '%s -- %s: "%s"' % (f["detail"], where, f["evidence"])
        causes.append(failed(CHECK_PREFIX + cause, detail, f["fix"], node=node, data=data))
    return {"causes": causes, "nodes": hosts, "exits": node_exits(text)}


def drop_symptoms(causes):
    """A job's causes without the symptoms, when at least one real cause is among them."""
    real = [c for c in causes if not (c.get("data") or {}).get("symptom")]
    return real if real else list(causes)


def diagnose_job(logs, default_node=None):
    """Several logs of one job: [(source, text, node or None)] -> {'causes', 'files', 'unknown_error_lines'}.

    Each log is read on its own (its default node is its own or ``default_node``); the job's causes are merged
    (one record per cause and node, the files listed in data), symptoms dropped when a real cause exists, and
    the logs with no cause contribute the lines that look like errors."""
    files, merged, unknown = [], {}, []
    for source, text, node in logs:
        one = diagnose_text(text, source=source, default_node=node or default_node)
        entry = {"path": source, "lines": (text or "").count("\n") + (1 if text and not text.endswith("\n") else 0),
                 "nodes": one["nodes"], "exits": one["exits"],
                 "causes": [c["check"] for c in one["causes"]]}
        files.append(entry)
        for c in one["causes"]:
            key = (c["check"], c.get("node"))
            if key in merged:
                files_of = merged[key]["data"].setdefault("files", [merged[key]["data"].get("file")])
                if source not in files_of:
                    files_of.append(source)
            else:
                merged[key] = c
        if not one["causes"]:
            unknown.extend(error_lines(text, source=source, default_node=node or default_node))
    causes = drop_symptoms(list(merged.values()))
    kept = {c["check"] for c in causes}
    for entry in files:
        entry["causes"] = [c for c in entry["causes"] if c in kept]
    return {"causes": causes, "files": files, "unknown_error_lines": unknown}
