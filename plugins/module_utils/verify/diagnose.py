# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The one mapping from a failed multi-node job's log lines to a cause, the node it concerns and a fix.

Plain Python (no Ansible import, Python 3.9+): the all-reduce smoke test (``allreduce_smoke``),
node_runtime's resource explanations, ``provision diagnose`` and ``provision launch`` all read it.

A cause is a regular expression over one log line, the sentence that explains it, the fix, and how
it ranks against the others:

- ``CAUSES`` is ordered most specific first. Each cause has a *tier*: ``cause`` (a configuration,
  resource or hardware fault that starts a failure by itself), ``hang`` (a collective that timed out,
  NCCL's "unhandled system error": the first failure only when nothing harder came before) or
  ``symptom`` (what every surviving rank reports when another one failed: a reset connection, a
  rendezvous that timed out).
- ``suppresses`` names causes a more specific one explains (a NIC that is down also makes HCCL's
  listen fail; an ssh host key failure is why mpirun could not start its daemons).
- ``requires`` is a pattern that must appear on some line of the same log (NCCL listing lo among
  its interfaces is only a cause when a connection then failed); ``unless`` one that must not
  (NCCL on sockets is no fault when NCCL_IB_DISABLE=1 asked for it).

Reading is streamed and bounded (``Scanner``): logs are read in chunks, a line (``\\r`` or ``\\n``
ends one, as a terminal shows a progress bar) is cut at ``MAX_SEGMENT`` bytes, each pattern is only
tried on the lines that hold one of its literal words (found with ``bytes.find`` over the chunk, so
the cost is linear in the input), and every pattern uses bounded repetition. ANSI escape and control
characters are removed before matching and before anything is shown.

A job's logs (``diagnose_job``) are read each on its own; then the events are ordered by time (the
timestamps the lines carry, when every event has one) or else by tier and file order, the first
failure is named (``root``), the other real causes stay causes and everything that follows from the
first failure (``hang`` and ``symptom`` tiers) is a *consequence* of it.

Nodes come from the line's own prefix: pdsh/DeepSpeed ``node2: ...``, SLURM ``srun: error: node3:``,
Open MPI ``[node2:12345]``, ``[host:rank]:``, ``provision launch``'s ``[node] ``, syslog/journal
``Mon DD HH:MM:SS host kernel:``, NCCL's ``host:pid:tid [dev]``; ranks from torchrun's
``[rank3]:``/``[default3]:``, mpirun ``--tag-output`` ``[1,3]<stderr>:`` and ``srun --label`` ``3:``.
A log with no node on the line gets the caller's default node, else the one node the log names.
"""

from __future__ import annotations

import collections
import re

try:  # Python 3.11+
    from re import _parser as _sre_parse  # pylint: disable=protected-access
except ImportError:  # pragma: no cover - Python 3.9/3.10
    import sre_parse as _sre_parse  # pylint: disable=deprecated-module

from ansible_collections.provision.cluster.plugins.module_utils.verify.checks import failed

CHECK_PREFIX = "diagnose."
MAX_EVIDENCE = 220
MAX_UNKNOWN_LINES = 25
MAX_MATCHES = 500        # per cause and log: enough lines to name every node, bounded work on huge logs
MAX_SEGMENT = 16 << 10   # a line longer than this (between \r/\n) is cut: its rest is not read
MAX_RECORD_LINES = 20    # line numbers kept per record
CHUNK = 1 << 20          # bytes read at a time
LOOKBACK = 32 << 10      # lines kept before the next unread line (timestamps, torchrun's failure table)
LOOKAHEAD = 2 * MAX_SEGMENT + 2  # bytes kept unread after a line until the next chunk (patterns over two lines)
MAX_HOST_LINES = 2000    # the first lines of a log searched for the hosts it names
MAX_HOSTS = 256

CAUSE, HANG, SYMPTOM = "cause", "hang", "symptom"
TIER_RANK = {CAUSE: 0, HANG: 1, SYMPTOM: 2}
ROOT, ALSO, CONSEQUENCE = "root", "cause", "consequence"

# --------------------------------------------------------------------------- fixes shared by causes
_FIX_NCCL_IFNAME = "set NCCL_SOCKET_IFNAME to the interface that holds the cluster address (nccl_net role picks it)"
_FIX_MEMLOCK = ("make memlock unlimited for the training user (`ulimit -l unlimited`: node_runtime's limits.d drop-in "
                "on bare metal; --ulimit memlock=-1:-1 --cap-add IPC_LOCK for containers) and start the job from a new login")
_FIX_SSH = ("make `ssh -o BatchMode=yes NODE true` work from the launching node to every node "
            "(ssh_mesh role: keys, known_hosts, ~/.ssh/config)")


# --------------------------------------------------------------------------- the words a pattern cannot match without
def _required(items, icase):
    """A set of literal strings, one of which is in every text the parsed pattern items match (None: no such set)."""
    candidates, run = [], []

    def flush():
        if run:
            candidates.append({"".join(run)})
            del run[:]

    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            run.append(chr(av).lower() if icase else chr(av))
            continue
        if name == "AT":  # ^ $ \b: match no character, the literal text around them stays contiguous
            continue
        flush()
        found = None
        if name == "SUBPATTERN":
            found = _required(list(av[-1]), icase)
        elif name == "ATOMIC_GROUP":
            found = _required(list(av), icase)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and av[0] >= 1:
            found = _required(list(av[2]), icase)
        elif name == "BRANCH":
            sets = [_required(list(branch), icase) for branch in av[1]]
            if all(sets):
                found = set().union(*sets)
        if found:
            candidates.append(found)
    flush()
    if not candidates:
        return None
    return max(candidates, key=lambda s: (min(len(x) for x in s), -len(s)))


def keywords(pattern, flags=0):
    """The literal words (lower-cased when the pattern ignores case) one of which every match of pattern holds.

    ValueError when the pattern can match without a word of at least 3 characters: every pattern must
    name one, so that only the lines holding it are tried."""
    icase = bool(flags & re.I)
    found = _required(list(_sre_parse.parse(pattern, flags)), icase)
    if not found or min(len(w) for w in found) < 3:
        raise ValueError("pattern %r has no literal word of 3+ characters in every match" % pattern)
    return tuple(sorted(found)), icase


class _Rx:
    """A compiled pattern and the words that select the lines it is tried on."""

    def __init__(self, pattern, flags=0):
        self.regex = re.compile(pattern, flags)
        self.words, self.icase = keywords(pattern, flags)

    def search(self, text):
        return self.regex.search(text)


class Cause:
    """One known cause: a pattern, what it means, the fix, and how it ranks against the others."""

    def __init__(self, cause, pattern, detail, fix, *, tier=CAUSE, suppresses=(), requires=None, unless=None,
                 context=None, detail_context=None, node_from="node", flags=0, resource=False, verify=None,
                 span=0, symptom=None):
        self.cause = cause
        self.rx = _Rx(pattern, flags)
        self.regex = self.rx.regex
        self.detail = detail                  # str.format template over the named groups (+ context)
        self.fix = fix
        self.tier = SYMPTOM if symptom else tier
        self.symptom = self.tier == SYMPTOM
        self.suppresses = tuple(suppresses)
        self.requires = [_Rx(p, flags) for p in ([requires] if isinstance(requires, str) else requires or [])]
        self.unless = [_Rx(p, flags) for p in ([unless] if isinstance(unless, str) else unless or [])]
        # name -> pattern searched on every line; the first group of its first match enriches the detail
        self.context = {k: _Rx(v) for k, v in (context or {}).items()}
        self.detail_context = detail_context  # the template used when every context value was found
        self.resource = resource              # one of node_runtime's checks (shm, ipc, memlock, nofile)
        self.node_from = node_from            # the group or context value that names the node, when there is one
        self.verify = verify                  # the `provision verify` check that confirms it on the node
        self.span = span                      # the pattern may run over this many following lines

    def explain(self, groups, context):
        """(detail, fix, values) for one match: the templates filled from the match's groups and the context."""
        values = dict(context, **{k: v for k, v in groups.items() if v is not None})
        template = self.detail
        if self.detail_context and self.context and all(k in context for k in self.context):
            template = self.detail_context
        return _fill(template, values), _fill(self.fix, values), values


class _Blank(dict):
    def __missing__(self, key):
        return ""


def _fill(template, values):
    """str.format with the groups that did not take part in the match left empty."""
    return template.format_map(_Blank(values))


# --------------------------------------------------------------------------- the mapping, most specific first
_IB_EXPECTED = [  # what says InfiniBand/RoCE was wanted on that node
    r"NCCL_IB_HCA set (?:by environment )?to (?P<hca>[^\s\"',]{1,200})",
    r"NCCL_IB_DISABLE set by environment to 0",
    r"NCCL_NET set by environment to IB",
    r"(?:Bootstrap|NET/Socket) ?: Using (?:\[\d{1,3}\])?ib\w{0,30}[:.]",  # an IPoIB interface: IB is there
    r"Unable to open device \w{1,60}",
    r"Call to ibv_open_device failed",
    r"no userspace device-specific driver found for /sys/class/infiniband",
]

_FIX_HANG = ("find the rank that stopped first: every rank's log before the timeout (an OOM kill, a GPU fault, an "
             "exception on one rank, a rank that skipped a collective); `py-spy dump --pid PID` on a hung rank shows "
             "where it waits; `provision verify --smoke` checks that a collective completes on every node")
_FIX_NAMES = ("make every node's name resolve on every node (/etc/hosts entries, as the ssh_mesh role writes them, "
              "or DNS; check `getent hosts NAME` on each node) or give MASTER_ADDR and the hostfile as IP addresses; "
              "`provision verify --only nccl` checks that the node names resolve to their nodes")
_MASTER = {"master": r"MASTER_ADDR[=:] ?['\"]?(?P<v>[\w.-]{1,255})|--master[_-]addr[= ]['\"]?(?P<v2>[\w.-]{1,255})"}
_NAME_HIDES = ("ssh_failed", "mpi_daemons", "rendezvous_timeout", "rendezvous_connection", "peer_unreachable")

CAUSES = [
    # ---- hardware: a GPU that fails takes the job down wherever it is
    Cause("gpu_fault",
          r"(?P<what>uncorrectable ECC error encountered|CUDA_ERROR_ECC_UNCORRECTABLE|cudaErrorECCUncorrectable"
          r"|GPU has fallen off the bus|fallen off the bus and is not responding"
          r"|Xid \((?:PCI:)?(?P<pci>[\w:.]{1,20})\): (?P<xid>48|62|63|64|74|79|92|94|95|119|120|123)\b"
          r"|PCIe Bus Error: severity=Uncorrect(?:ed|able)|AER: (?:Multiple )?Uncorrect(?:ed|able) \((?:Non-)?Fatal\) error"
          r"|Unable to determine the device handle for (?:GPU|gpu) ?(?P<dev>[\w:.]{1,20}): (?:Unknown Error|GPU is lost)"
          r"|RmInitAdapter failed)",
          "the GPU failed in hardware ({what}{xid}): a job on this GPU keeps failing until it is reset or replaced",
          "drain the node and run `provision verify -l NODE --check gpu_health` there (Xid, ECC, retired pages/remapped "
          "rows, PCIe link); reset the GPU (`nvidia-smi -r`) or reboot, and replace it if the fault comes back",
          verify="gpu_health"),
    # ---- GPU placement
    Cause("duplicate_gpu",
          r"Duplicate GPU detected : rank (?P<a>\d{1,6}) and rank (?P<b>\d{1,6}) both on CUDA device (?P<dev>\w{1,40})",
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
    # ---- names that do not resolve
    Cause("name_unresolved",
          r"The IPv4 network addresses of \((?P<name>[^,\s]{1,255}), (?P<port>\d{1,5})\) cannot be retrieved "
          r"\(gai error: -?\d{1,6} - (?P<why>[^)]{1,80})\)",
          "the name {name} does not resolve on this node ({why}){role}",
          _FIX_NAMES, context=_MASTER, suppresses=_NAME_HIDES, verify="nccl"),
    Cause("name_unresolved",
          # alone a warning torch prints before it tries IPv4: a cause only when a connection then failed
          r"The IPv6 network addresses of \((?P<name>[^,\s]{1,255}), (?P<port>\d{1,5})\) cannot be retrieved "
          r"\(gai error: -?\d{1,6} - (?P<why>[^)]{1,80})\)",
          "the name {name} does not resolve on this node ({why}) and the connection to it then failed{role}",
          _FIX_NAMES, requires=r"failed to connect to (?:any network address of \(|\[)",
          context=_MASTER, suppresses=_NAME_HIDES, verify="nccl"),
    Cause("name_unresolved",
          r"ssh: Could not resolve hostname (?P<name>[^:\s]{1,255}): (?P<why>[^\n]{1,60})",
          "ssh cannot resolve the node name {name} ({why}): the launcher cannot reach that node{role}",
          _FIX_NAMES, context=_MASTER, suppresses=_NAME_HIDES, verify="nccl"),
    Cause("name_unresolved",
          r"gaierror: \[Errno -?\d{1,6}\] (?P<why>Name or service not known|Temporary failure in name resolution"
          r"|nodename nor servname provided, or not known|No address associated with hostname)"
          r"|host not found: (?P<why2>Name or service not known)",
          "a host name the job connects to does not resolve on this node ({why}{why2}): MASTER_ADDR or a node's name",
          _FIX_NAMES, context=_MASTER, suppresses=_NAME_HIDES, verify="nccl",
          detail_context="a host name the job connects to does not resolve on this node ({why}{why2}): "
                         "MASTER_ADDR is {master}"),
    Cause("name_unresolved",
          r"\bhostname: (?P<why>Name or service not known|Temporary failure in name resolution)",
          "this node's own hostname does not resolve ({why}): `hostname -I` / `hostname -f` fail, and the launchers "
          "that use them with it",
          _FIX_NAMES, suppresses=_NAME_HIDES, verify="nccl"),
    # (not "The hostname of the client socket cannot be retrieved": a warning torch prints and goes on)
    # ---- interfaces
    Cause("no_interface",
          r"no socket interface found|no NCCL_SOCKET_IFNAME interface found",
          "NCCL found no usable socket interface",
          _FIX_NCCL_IFNAME,
          context={"ifname": r"NCCL_SOCKET_IFNAME set (?:by environment )?to ([^\s\"',]{1,200})"},
          detail_context="NCCL found no usable interface: NCCL_SOCKET_IFNAME={ifname} matches no interface that is up",
          suppresses=("nccl_connect_refused", "peer_lost", "nccl_system_error"), verify="nccl"),
    Cause("no_interface",
          r"ncclSocketInit: connecting to address\s{1,8}with family (?P<family>\d{1,6}) is neither AF_INET",
          "NCCL has no address to connect to (address family {family}): no usable socket interface",
          _FIX_NCCL_IFNAME,
          requires=r"NCCL_SOCKET_IFNAME set (?:by environment )?to \S",
          context={"ifname": r"NCCL_SOCKET_IFNAME set (?:by environment )?to ([^\s\"',]{1,200})"},
          detail_context="NCCL has no address to connect to: NCCL_SOCKET_IFNAME={ifname} matches no interface on the node",
          suppresses=("nccl_system_error",), verify="nccl"),
    Cause("no_interface",
          # NCCL prints it when it finds no usable IP interface at all (a container without a network)
          r"Socket creation failed : Address family not supported by protocol",
          "NCCL could not create a socket (`Address family not supported by protocol`): the node (container) has no "
          "usable IP interface",
          "give the container a network interface (docker --net=host, or the pod network) and set NCCL_SOCKET_IFNAME "
          "to it; `provision verify --only nccl` checks the interface",
          suppresses=("nccl_system_error",), verify="nccl"),
    Cause("no_interface",
          r"Unable to find address for:? ?(?P<ifname>\^[^\s\"',]{1,200})",
          "gloo found no usable interface {ifname}: GLOO_SOCKET_IFNAME takes one interface name, not NCCL's ^exclude list",
          "set GLOO_SOCKET_IFNAME to the one interface that holds the cluster address (e.g. eth1); "
          "keep the ^lo,docker form for NCCL_SOCKET_IFNAME only"),
    Cause("no_interface",
          r"Unable to find address for:? ?(?P<ifname>[^\s\"',]{1,200})|interface (?P<ifname2>[^\s\"',]{1,200}) not found|"
          r"(?:getifaddrs|ifname).{0,200}[Nn]o such device",
          "gloo found no usable interface {ifname}{ifname2}",
          "set GLOO_SOCKET_IFNAME to the interface that holds the cluster address"),
    Cause("gloo_loopback",
          r"Unable to resolve hostname to a \(local\) address\. Using the loopback|"
          r"pair\.cc:\d{1,6}\] connect \[127\.[\d.]{1,15}\]:\d{1,5}: Connection refused|"
          r"SO_ERROR: Connection refused,?\s{1,8}remote=\[127\.[\d.]{1,15}\]",
          "gloo fell back to a loopback address: the node's hostname does not resolve to a cluster address, "
          "so peers are told to connect to 127.x",
          "set GLOO_SOCKET_IFNAME to the interface that holds the cluster address on every node (shell_env exports it), "
          "or make the hostname resolve to the cluster address in /etc/hosts",
          context={"addr": r"(?:connect \[|remote=\[)(127\.[\d.]{1,15})\]"},
          detail_context="gloo gave peers the loopback address {addr}: the node's hostname resolves to 127.x "
                         "instead of its cluster address, so peers connect to themselves",
          suppresses=("peer_lost",), verify="nccl"),
    Cause("nccl_loopback_interface",
          r"NET : Using interface lo:127\.|NET/Socket : Using .{0,300}\blo:127\.|Bootstrap : Using (?:\[\d{1,3}\])?lo:127\.",
          "NCCL uses the loopback interface lo for inter-node traffic: peers are told 127.0.0.1 is this node",
          "set NCCL_SOCKET_IFNAME to the cluster interface (or ^lo,docker) on every node (nccl_net role)",
          requires=r"Connection refused|[Cc]onnect(?:ion)? timed? ?out|Connection closed by remote peer",
          suppresses=("nccl_connect_refused", "peer_lost"), verify="nccl"),
    # ---- NCCL on TCP sockets where InfiniBand/RoCE was wanted
    Cause("nccl_socket_fallback",
          r"(?P<why>NET/IB : No device found|Failed to open libibverbs\.so|NET/IB : Unable to open device \w{1,60}"
          r"|Call to ibv_open_device failed|no userspace device-specific driver found for /sys/class/infiniband\S{0,60}"
          r"|Net/IB: call to devices\(\) returned 0 devices|Failed to initialize NET plugin IB)",
          "NCCL cannot use InfiniBand/RoCE on this node and runs on TCP sockets ({why}) although it was expected "
          "({expected}): every inter-node collective is many times slower, or times out",
          "give the job the RDMA devices: in containers --device=/dev/infiniband (or --privileged), --cap-add=IPC_LOCK, "
          "--ulimit memlock=-1, and rdma-core/libibverbs with the HCA's provider (libmlx5) in the image; NCCL_IB_HCA must "
          "name an HCA `ibv_devinfo` lists; `provision verify --only fabric` shows the HCAs and their state",
          requires=_IB_EXPECTED,
          unless=[r"NCCL_IB_DISABLE set by environment to 1", r"NCCL_NET set by environment to Socket",
                  r"NET/IB : Using \[\d"],
          context={"expected": "(" + "|".join(_IB_EXPECTED) + ")"},
          verify="fabric"),
    # ---- node runtime limits (node_runtime's checks: shm, ipc, memlock, nofile)
    Cause("shm",
          r"[Ff]ailed to extend /dev/shm/\S{1,255} to \d{1,20} bytes|posix_fallocate failed\s{0,8}:\s{0,8}No space left"
          r"|[Ee]rror while creating shared memory segment|include/shm\.h.{0,300}[Nn]o space left"
          r"|[Ii]nsufficient shared memory \(shm\)|[Uu]nable to allocate shared memory"
          r"|[Uu]nable to (?:open|write to) (?:shared memory object|file <?/?torch_)"
          r"|[Nn]o space left on device.{0,300}shm",
          "/dev/shm is too small or full for NCCL's shared-memory segments (64 MiB container default?)",
          "give the node a larger /dev/shm (node_runtime: docker/podman --shm-size=1g or more, --ipc=host; "
          "Kubernetes emptyDir medium: Memory on /dev/shm) and remove stale /dev/shm/nccl-* files",
          resource=True, suppresses=("nccl_system_error",), verify="runtime"),
    Cause("ipc",
          r"[Ee]rror while attaching to shared memory segment \S{1,255}.{0,300}[Nn]o such file or directory",
          "ranks on one host do not share /dev/shm (separate IPC namespaces/containers) or systemd-logind "
          "RemoveIPC deleted the segments",
          "run the ranks of one host in one container or with --ipc=host; set RemoveIPC=no in "
          "/etc/systemd/logind.conf when the training user logs out during a run",
          resource=True, suppresses=("nccl_system_error",), verify="runtime"),
    Cause("memlock",
          r"ibv_reg_mr\S{0,40}\s{1,8}failed|[Uu]nable to register memory|RLIMIT_MEMLOCK is \d{1,20} bytes"
          r"|ibv_reg_dmabuf_mr\S{0,40} failed|fi_mr_reg failed"
          r"|(?:NET/IB|ib_plugin|ibvwrap).{0,300}[Cc]annot allocate memory",
          "RDMA memory registration failed: the locked-memory limit (ulimit -l) is not unlimited",
          _FIX_MEMLOCK,
          resource=True, suppresses=("nccl_system_error",), verify="runtime"),
    Cause("nofile",
          r"[Tt]oo many open files|EMFILE|received 0 items of ancdata",
          "the open-files limit (ulimit -n) is too low for the ranks' sockets and DataLoader workers",
          "raise nofile (node_runtime_min_nofile; --ulimit nofile=N:N in containers)",
          resource=True, verify="runtime"),
    # ---- RDMA
    Cause("ib_qp_create",
          r"Call to ibv_create_(?:qp|cq) failed|ibv_create_cq\(\) failed",
          "creating an RDMA queue pair failed (ibv_create_qp): most often the locked-memory limit (ulimit -l) inside "
          "the job (srun, container) is too low",
          "check `srun bash -c 'ulimit -l'` (or inside the container) shows unlimited; " + _FIX_MEMLOCK,
          suppresses=("nccl_system_error",), verify="runtime"),
    Cause("ib_fabric_path",
          r"Call to ibv_modify_qp failed with (?:error )?(?:\d{1,6} )?(?P<err>Network is unreachable|Connection timed out)|"
          r"NET/IB : Got completion (?:from peer \S{1,255} )?with (?P<code>error 12|status=12)\b",
          "the RDMA NICs cannot reach each other ({err}{code}): NCCL's TCP bootstrap worked, the IB/RoCE path did not "
          "(GID index, routing, or a rail-only fabric)",
          "test the pair with `ib_write_bw`; set NCCL_IB_GID_INDEX to the RoCE v2 IPv4 GID (`show_gids`), NCCL_IB_HCA "
          "to HCAs on the same fabric, NCCL_CROSS_NIC=0 on rail-optimized fabrics",
          suppresses=("peer_lost", "nccl_system_error"), verify="fabric"),
    # ---- ports
    Cause("port_held",
          r"EADDRINUSE|[Aa]ddress already in use",
          "the master port is already in use on the master node",
          "stop the process holding it (`ss -ltnp` / fuser PORT/tcp) or set cluster_master_port to a free port",
          context={"port": r"port: (\d{1,5})|failed to bind to \S{1,255}:(\d{1,5})"},
          detail_context="the master port {port} is already in use on the master node",
          suppresses=("rendezvous_connection", "rendezvous_timeout", "peer_lost"), verify="ports"),
    Cause("hccl_port_held",
          r"listen on ip\[[^\]]{0,64}\] and specific port\[\d{1,5}\] fail|EJ0003\b|Failed to bind the IP port"
          r"|EI0019\b|Bind_IP_Port|host nic listen start failed, port\[\d{1,5}\]",
          "HCCL could not bind its listening IP and port: another process (another job, or a stale one) holds it",
          "stop the process holding it (`ss -ltnp | grep PORT`) or give each job its own HCCL ports "
          "(HCCL_IF_BASE_PORT for the host NIC)",
          context={"port": r"(?:specific port|listen start failed, port)\[(\d{1,5})\]"},
          detail_context="HCCL could not listen on port {port}: another process (another job, or a stale one) holds it",
          suppresses=("hccl_socket_timeout",)),
    # ---- ssh (pdsh/DeepSpeed, mpirun)
    Cause("ssh_host_key",
          r"Host key verification failed",
          "ssh rejected the node's host key (unknown or changed) so the launcher could not start there",
          "add the nodes' host keys to known_hosts (ssh_mesh role; `ssh-keygen -R NODE` after a reinstall); "
          + _FIX_SSH,
          suppresses=("mpi_daemons", "ssh_failed"), verify="mesh"),
    Cause("ssh_refused",
          r"ssh: connect to host (?P<node>\S{1,255}) port (?P<port>\d{1,5}): Connection refused",
          "nothing accepts ssh on {node} port {port} (sshd not running there, or it listens on another port)",
          "start sshd on that node or point the launcher at its port (~/.ssh/config Port; DeepSpeed --ssh_port); "
          "`ssh -p PORT NODE true` must work",
          suppresses=("mpi_daemons", "ssh_failed"), verify="sshd"),
    Cause("ssh_unreachable",
          r"ssh: connect to host (?P<node>\S{1,255}) port (?P<port>\d{1,5}): (?P<why>No route to host|Connection timed out"
          r"|Network is unreachable)",
          "cannot reach {node} port {port} over ssh ({why})",
          "put the node's cluster-network address in the hostfile/inventory and check routes and firewall between the nodes",
          suppresses=("mpi_daemons", "ssh_failed"), verify="reach"),
    Cause("ssh_failed",
          r"host=(?P<node>\S{1,255}) was not reachable via ssh|Command '\[?'?ssh (?:-o \S{1,200} ){0,10}(?P<node2>[^\s']{1,255}) "
          r"hostname(?: -I)?'?\]?' returned non-zero exit status 255",
          "the launcher's ssh check to {node}{node2} failed (ssh exit 255: unreachable, host key or key authentication)",
          _FIX_SSH, verify="mesh"),
    Cause("remote_command_not_found",
          r"(?:bash|sh|zsh): (?:line \d{1,9}: )?(?P<cmd>[^\s:]{1,255}): command not found",
          "a command the launcher ran on the node was not found there: `{cmd}`",
          "check `ssh NODE 'command -v CMD'`: install it there or use its absolute path; the env block "
          "(shell_env role) must come before ~/.bashrc's non-interactive guard", verify="env"),
    # ---- Open MPI
    Cause("mpi_tcp_blocked",
          r"A process or daemon was unable to complete a TCP connection",
          "Open MPI could not open a TCP connection between its daemons (firewall or wrong interface)",
          "open the ports between the nodes or pin Open MPI to the cluster interface "
          "(--mca btl_tcp_if_include IFACE --mca oob_tcp_if_include IFACE)",
          context={"local": r"Local host:\s{0,40}(\S{1,255})", "remote": r"Remote host:\s{0,40}(\S{1,255})"},
          detail_context="Open MPI could not open a TCP connection from {local} to {remote} (firewall or wrong interface)",
          node_from="local", suppresses=("mpi_daemons",)),
    Cause("mpi_not_enough_slots",
          r"There are not enough slots available in the system to satisfy the (?P<n>\d{1,9})\s{1,8}slots",
          "mpirun asked for {n} slots but the hostfile/--host grant fewer",
          "give each host `slots=N` (its GPU count) in the hostfile or `-H host:N`; --oversubscribe only for CPU tests",
          span=1),
    # ---- SLURM
    Cause("slurm_preempted",
          r"\*\*\* JOB (?P<job>\d{1,12}) ON (?P<node>\S{1,255}) CANCELLED AT \S{1,40} DUE TO PREEMPTION",
          "SLURM preempted job {job} (a higher-priority job took its nodes)",
          "resubmit with --requeue and resume from a checkpoint, or use a partition/QOS that is not preemptible"),
    # ---- reachability of the master / peers
    Cause("peer_unreachable",
          r"failed to connect to (?P<host>\S{1,255}?):(?P<port>\d{1,5}) \(errno: \d{1,4} - (?P<why>Network is unreachable|"
          r"No route to host|Connection timed out)\)",
          "cannot reach the master {host}:{port} ({why})",
          "use an address on the cluster network for cluster_master_addr and check routes/firewall between "
          "the nodes on that interface",
          # the address torch was asked for: where the node cannot resolve names (a dead resolver), torch prints
          # the per-address attempt from an unfilled buffer ("[84d0:0:d487:0:7ffc::]:7223", "0.0.0.0:7223")
          context={"endpoint": r"failed to connect/validate to host (\S{1,255}?:\d{1,5}) - retrying"},
          detail_context="cannot reach the master {endpoint} ({why})", verify="nccl"),
    Cause("peer_unreachable",
          r"Connect to (?P<host>\S{1,255}?)<(?P<port>\d{1,5})> (?:returned \d{1,4}\(|failed : )(?P<why>No route to host|"
          r"Network is unreachable|Connection timed out)",
          "NCCL cannot reach peer {host} port {port} ({why}) on the interface it chose",
          _FIX_NCCL_IFNAME + " on every node, and check routes/firewall between the nodes on it",
          suppresses=("nccl_system_error",), verify="nccl"),
    Cause("nccl_connect_refused",
          r"Connect to (?P<host>\S{1,255}?)<(?P<port>\d{1,5})> failed : Connection refused",
          "NCCL's connection to {host} port {port} was refused: nothing listens at the address that peer advertised "
          "(it chose another interface, already exited, or a stale file:// init file named an old address)",
          _FIX_NCCL_IFNAME + " on every node (the same on all); check that address belongs to a node of this job",
          suppresses=("nccl_system_error",), verify="nccl"),
    Cause("nccl_connect_refused",
          r"Call to connect (?:returned|timeout :|failed :) ?Connection refused",
          "NCCL's connection to a peer was refused: nothing listens at the address that peer advertised "
          "(it chose another interface or already exited)",
          _FIX_NCCL_IFNAME + " on every node (the same on all)", suppresses=("nccl_system_error",), verify="nccl"),
    Cause("rendezvous_connection",
          r"RendezvousConnectionError",
          "could not talk to the c10d rendezvous store on the master port (a foreign listener or no server)",
          "check what listens on the master port on the master node; make sure nothing but the job uses it",
          context={"endpoint": r"trying to connect to (\S{1,255}:\d{1,5})|failed to connect/validate to host (\S{1,255}:\d{1,5})"},
          detail_context="could not talk to the c10d rendezvous store at {endpoint} (a foreign listener or no server)",
          suppresses=("peer_lost",), verify="ports"),
    # ---- killed for host memory
    Cause("host_oom",
          r"(?P<what>Detected \d{1,9} oom[-_]kill events?|Some of the step tasks have been OOM Killed"
          r"|task \d{1,9}: Out Of Memory|oom-kill:constraint=|Out of memory: Killed process \d{1,12}"
          r"|Memory cgroup out of memory: Killed process \d{1,12}|OOMKilled)",
          "the kernel's out-of-memory killer killed a rank for host memory ({what}): the node (or the job's cgroup, "
          "--mem) ran out of RAM",
          "lower host memory per node (fewer DataLoader workers, load the model once per node or memory-mapped, "
          "smaller CPU-side buffers) or give the job more RAM (SLURM --mem / a bigger node); `sacct -j JOB -o "
          "MaxRSS,ReqMem` or `journalctl -k | grep -i 'killed process'` on the node shows how much it used",
          suppresses=("worker_killed",)),
    Cause("worker_killed",
          r"failed \(exitcode: -9\)|exits with return code = -9|(?<![\w(])exitcode\s{1,8}: -9\b"
          r"|Signal 9 \(SIGKILL\) received by PID|died with <Signals\.SIGKILL: 9>",
          "a rank was killed with SIGKILL (exit -9): most often the kernel's OOM killer (host RAM), else the "
          "scheduler or an operator",
          "look for `Killed process` in `journalctl -k` (or `dmesg -T`) on that node at that time; if it is the OOM "
          "killer, lower host memory per rank (DataLoader workers, model loading) or give the job more RAM"),
    # ---- hangs: a collective that never finished, NCCL's own errors (real cause in its WARN lines)
    Cause("nccl_timeout",
          r"Watchdog caught collective operation timeout: WorkNCCL\((?P<work>.{1,300}?)\) ran for (?P<ms>\d{1,15}) "
          r"(?:milliseconds|ms)|\bWorkNCCL\((?P<work2>.{1,300}?)\) ran for (?P<ms2>\d{1,15}) (?:milliseconds|ms)",
          "a collective did not finish in time: WorkNCCL({work}{work2}) ran for {ms}{ms2} ms; the ranks hung waiting "
          "for one that stopped (it died, is stuck, or took another code path)",
          _FIX_HANG, tier=HANG, verify="smoke"),
    Cause("nccl_timeout",
          r"(?P<what>WorkNCCL\(.{1,300}?\) timed out in blocking wait|Watchdog caught collective operation timeout"
          r"|Some NCCL operations have failed or timed out|Timeout at NCCL work: \d{1,15})",
          "a collective did not finish in time ({what}); the ranks hung waiting for one that stopped (it died, is "
          "stuck, or took another code path)",
          _FIX_HANG, tier=HANG, verify="smoke"),
    Cause("nccl_timeout",
          r"ProcessGroupNCCL's watchdog got stuck for (?P<stuck>\d{1,9}) seconds",
          "ProcessGroupNCCL's watchdog itself was stuck for {stuck} s: an NCCL or CUDA call hung (a GPU or a peer "
          "that stopped answering, or a deadlock)",
          _FIX_HANG, tier=HANG, verify="smoke"),
    Cause("nccl_system_error",
          r"unhandled system error|ncclSystemError|ncclInternalError|internal error - please report this issue"
          r"|NCCL Error [23]\b",
          "{why}",
          "{fix}",
          tier=HANG, verify="smoke"),
    Cause("nccl_system_error",
          # the WARN itself names the fault: a topology/graph XML that names a device this node does not have
          r"(?<=NCCL WARN )(?P<warn>XML Import Channel : dev \d{1,4} not found|Attribute \w{1,40} of node \w{1,40} not found"
          r"|Could not find real path of \S{1,255})",
          "NCCL's topology/graph XML names a device this node does not have (NCCL WARN {warn})",
          "unset NCCL_GRAPH_FILE and NCCL_TOPO_FILE (environment, /etc/nccl.conf, ~/.nccl.conf) or give the files "
          "written for this machine type; rerun with NCCL_DEBUG=INFO",
          tier=HANG),
    # ---- symptoms: what every rank reports when another failed first
    Cause("nccl_id_timeout",
          r"is setting up NCCL communicator and retr(?:ie|ei)ving ncclUniqueId from \[(?P<root>\d{1,6})\] via c10d key-value "
          r"store by key '[^']{0,200}', but store->get\('[^']{0,200}'\) got error: (?P<err>.{1,300})",
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
          r"RendezvousTimeoutError|[Ww]ait timeout|[Tt]imed out.{0,200}(?:workers|rendezvous)|"
          r"client socket has timed out|Socket Timeout|timed out after \d{1,12}ms while trying to connect|"
          r"waiting for clients\. (?P<joined>\d{1,6}/\d{1,6}) clients joined",
          "rendezvous timed out: not every rank joined in time",
          "start the job on every node (same nnodes/world size and master address/port); "
          "check the master address is reachable from every node",
          symptom=True),
    Cause("peer_lost",
          r"Connection reset by peer|Connection closed by peer|[Bb]roken pipe|TCPStore server has shut down too early"
          r"|NCCL error.{0,300}remote process exited|Connection closed by remote peer (?P<peer>[^\s<]{1,255})",
          "a peer went away during the collective (it died or exited first, or the network dropped): this rank is a "
          "consequence, the cause is in the log of the peer that failed first",
          "read the log of the rank/node that failed first (give diagnose every node's log); rerun when every node "
          "is healthy",
          context={"peer": r"Connection closed by remote peer ([^\s<]{1,255})|(?:Read error|closed by peer) "
                           r"\[([^\]\s]{1,64})\]|remote=\[([^\]\s]{1,255})\]"},
          detail_context="a peer ({peer}) went away during the collective (it died or exited first, or the network "
                         "dropped): this rank is a consequence, the cause is in the log of the peer that failed first",
          symptom=True),
]

BY_ID = {}
for _c in CAUSES:
    BY_ID.setdefault(_c.cause, _c)
RESOURCE_CAUSES = tuple(c.cause for c in CAUSES if c.resource)

# the verify check that confirms a cause on the node, as a command
VERIFY = {"smoke": "provision verify --smoke"}


# --------------------------------------------------------------------------- what else is read from the lines
# lines that look like errors, for the logs where no cause is known
_ERRORISH = _Rx(r"(?:Error|Exception|Interrupt)\b|\berror:|\bERROR\b|\bWARN(?:ING)?\b|\bFAILED\b|"
                r"\bfailed\b|Traceback \(most recent call last\)|\bKilled\b|\bTerminated\b|CANCELLED")
_NOISE = re.compile(r"^\s{0,40}File \"|^\s{0,40}\^+\s{0,40}$|NCCL INFO |^\s{0,40}frame #\d|^\s{0,40}warnings\.warn\(")
# NCCL's own WARN lines ("host:pid:tid [dev] file.cc:123 NCCL WARN ..."; NCCL 2.3 wrote "include/socket.h:311 WARN ...")
_NCCL_WARN = _Rx(r"(?:NCCL WARN|\.(?:cc|cu|h):\d{1,6} WARN) (?P<msg>.{1,400})")
# WARNs that are no fault by themselves (no RDMA library on an Ethernet node, a ring order NCCL falls back from)
_BENIGN_WARN = re.compile(r"Failed to open libibverbs|Could not find a path for pattern|NCCL_\w{1,40} set by environment")
_REMOTE_GONE = re.compile(r"Connection closed by remote peer|Connection reset by peer|socketProgress|Broken pipe"
                          r"|remote process exited|Net : Connection closed")
_EXITS = [
    _Rx(r"^srun: error: (?P<node>[\w.-]{1,255}): tasks? (?P<task>[\d,-]{1,100}): (?P<what>Exited with exit code "
        r"(?P<code>-?\d{1,4})|Terminated|Killed|Segmentation fault.{0,100}|Aborted.{0,100}|Out Of Memory)\s{0,8}$"),
    _Rx(r"^pdsh@\S{1,255}: (?P<node>[\w.-]{1,255}): ssh exited with exit code (?P<code>\d{1,4})"),
    _Rx(r"failed \(exitcode: (?P<code>-?\d{1,4})\) local_rank: (?P<local_rank>\d{1,6})"),
    _Rx(r"exits with return code = (?P<code>-?\d{1,4})"),
]
# torchrun's ChildFailedError table: "host : X" / "rank : N (local_rank: M)" / "exitcode : C" on three lines
_TABLE_EXIT = _Rx(r"(?<![\w(])exitcode\s{1,8}:\s{0,8}(?P<code>-?\d{1,4})")
_TABLE_HOST = re.compile(r"(?<![\w(])host\s{1,8}:\s{0,8}(?P<node>\S{1,255})")
_TABLE_RANK = re.compile(r"(?<![\w(])rank\s{1,8}:\s{0,8}(?P<rank>\d{1,6})")
_RANK_IN_TEXT = re.compile(r"\[(?:PG[^\]]{0,80} )?Rank (?P<rank>\d{1,6})\]")

# ESC sequences (CSI, OSC, two-character) and the other control characters, removed before matching and showing
_ANSI = re.compile(r"\x1b\[[0-?]{0,64}[ -/]{0,16}[@-~]|\x1b\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)|\x1b[@-Z\\-_]"
                   r"|[\x00-\x08\x0b-\x1f\x7f\x9b]")


def clean(text):
    """text without ESC sequences and control characters (a tab stays)."""
    return _ANSI.sub("", text) if text else ""


# --------------------------------------------------------------------------- line prefixes -> node / rank
_FILE_EXT = re.compile(r"\.(?:py|sh|json|ya?ml|cc|c|cpp|cu|h|hpp|so|log|txt|md|ts)$")
_NOT_A_HOST = re.compile(r"^E[A-Z]\d{4}$|^ERR\d+$|(?:Error|Exception|Warning|Interrupt|Exit)$|_"
                         r"|^(?:torch|deepspeed|transformers|accelerate|colossalai|megatron|lightning|vllm|sglang|ray"
                         r"|horovod|apex|numpy|__main__)(?:\.|$)")  # a Python logger's name
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_MON = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_PREFIXES = [
    # [2026-04-22 21:34:20] timestamps (NCCL_DEBUG_TIMESTAMP_FORMAT, CI runners), dmesg [ 123.456]
    ("skip", re.compile(r"\[\d{4}-\d\d-\d\d[ T][\d:.,]{1,30}Z?\]\s{0,8}|\[\s{0,12}\d{1,9}\.\d{1,9}\]\s{0,8}")),
    # 2025-02-18 12:54 / 2024-11-28T07:42:14.532Z | ...: a collector's own timestamp
    ("skip", re.compile(r"\d{4}-\d\d-\d\d[ T][\d:.,]{4,30}Z?\s{1,8}(?:\|\s{1,8})?")),
    ("skip", re.compile(r"\s{0,8}\|\s{1,8}")),
    # a quoted log ("> line") or a numbered one ("[80746] line")
    ("skip", re.compile(r">\s|\[\d{1,9}\]\s")),
    # syslog / journalctl: "Apr 29 19:24:11 host kernel: ..."
    ("syslog", re.compile(_MON + r" {1,2}\d{1,2} \d\d:\d\d:\d\d (?P<v>[\w.-]{1,255}) (?=\w[\w.-]{0,40}(?:\[\d{1,9}\])?: )")),
    # ray: "(CommandActor pid=369, ip=10.131.6.134) "
    ("node", re.compile(r"\(\w{1,64} pid=\d{1,9}, ip=(?P<v>[\d.]{7,15})\)\s")),
    # mpirun --tag-output: [1,3]<stderr>:
    ("rank", re.compile(r"\[\d{1,6},(?P<v>\d{1,6})\]<(?:stdout|stderr|stddiag)>:\s?")),
    # torchrun --tee / log prefixes: [rank3]: [default3]: (vLLM prints "[rank8] ")
    ("rank", re.compile(r"\[(?P<v>(?:rank|default)\d{1,6})\]:?\s?")),
    # torchx roles: [trainer3]: [trainer0|0]:, its local ranks [0]:
    ("rank", re.compile(r"\[(?P<v>[A-Za-z][\w-]{0,60}?\d{1,6}(?:\|\d{1,6})?)\]:\s?")),
    ("rank", re.compile(r"\[(?P<v>\d{1,6})\]:\s?")),
    # [host:local_rank]: (accelerate, lightning)
    ("node", re.compile(r"\[(?P<v>[A-Za-z0-9][\w.-]{0,254}):\d{1,9}\]:\s?")),
    # Open MPI [host:pid] (plm/btl verbose)
    ("node", re.compile(r"\[(?P<v>[A-Za-z0-9][\w.-]{0,254}):\d{1,9}\]\s")),
    # provision launch: "[node2 ] line" (the name padded to the longest)
    ("node", re.compile(r"\[(?P<v>[A-Za-z0-9][\w.-]{0,254}) {0,64}\] ")),
    # srun --label: "3: "
    ("task", re.compile(r"(?P<v>\d{1,6}): ")),
    # pdsh: "pdsh@launcher: node2: ..." then "node2: ..."
    ("skip", re.compile(r"pdsh@[\w.-]{1,255}: ")),
    ("node", re.compile(r"(?P<v>[A-Za-z0-9][\w.-]{0,254}): ")),
]
_NCCL_HOST = re.compile(r"(?P<v>[A-Za-z0-9][\w.-]{0,254}):\d{1,9}:\d{1,9} \[\d{1,4}\] ")
_SLURM_NODE = re.compile(r"^srun: error: (?P<node>[\w.-]{1,255}): tasks? (?P<task>[\d,-]{1,100}): |"
                         r"\*\*\* (?:STEP|JOB) \S{1,40} ON (?P<node2>\S{1,255}) CANCELLED")
# a shell prompt names the node the commands after it ran on: "root@node1:~#", "(venv) user@cn-234 ~ %"
_PROMPT = re.compile(r"^(?:\([\w.-]{1,64}\) )?[\w.-]{1,64}@(?P<v>[A-Za-z0-9][\w.-]{0,254})[:\s]")


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
    rest = line[:1024]
    for _i in range(8):
        for kind, regex in _PREFIXES:
            m = regex.match(rest)
            if not m or not m.end() or (kind == "node" and not looks_like_host(m.group("v"))):
                continue
            if kind == "syslog":
                out.setdefault("node", m.group("v"))
            elif kind != "skip":
                out.setdefault(kind, m.group("v"))
            rest = rest[m.end():]
            break
        else:
            break
    m = _NCCL_HOST.match(rest)
    if m:
        out["host"] = m.group("v")
    m = _SLURM_NODE.search(line[:1024])
    if m:
        out["node"] = m.group("node") or m.group("node2")
        if m.group("task"):
            out["task"] = m.group("task")
    return out


# --------------------------------------------------------------------------- timestamps
_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}
_DAYS_BEFORE = [0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334]
_TS_ISO = re.compile(r"(?<!\d)(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d)(?::(\d\d)(?:[.,](\d{1,9}))?)?")
_TS_DMESG_T = re.compile(r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (" + _MON + r") {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\]")
_TS_GLOG = re.compile(r"(?<![\w.:])[IWEF](\d{3,4}) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?")
_TS_SYSLOG = re.compile(r"(?<![\w])(" + _MON + r") {1,2}(\d{1,2}) {1,2}(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?")


def _secs(month, day, hh, mm, ss, frac):
    if not (1 <= month <= 12 and 1 <= day <= 31 and hh < 24 and mm < 60 and ss < 61):
        return None
    return ((_DAYS_BEFORE[month] + day - 1) * 24 + hh) * 3600 + mm * 60 + ss + (float("0." + frac) if frac else 0.0)


def _show_time(year, secs):
    """'2026-11-27 08:28:33.559' (or '11-27 08:28:33.559' without a year) for seconds into the year."""
    day, rest = divmod(secs, 86400)
    month = max(m for m in range(1, 13) if _DAYS_BEFORE[m] <= day)
    hh, rest = divmod(rest, 3600)
    mm, ss = divmod(rest, 60)
    text = "%02d-%02d %02d:%02d:%06.3f" % (month, day - _DAYS_BEFORE[month] + 1, hh, mm, ss)
    return ("%04d-" % year + text) if year else text


def timestamp(head):
    """(year or None, seconds into the year, the time as shown) of the first timestamp in a line's first 160
    characters, or None. Years are absent from glog (E0105 12:34:56) and syslog (Jan  5 12:34:56) stamps."""
    head = head[:160]
    found = None
    m = _TS_ISO.search(head)
    if m:
        s = _secs(int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), int(m.group(6) or 0), m.group(7))
        found = (int(m.group(1)), s) if s is not None else None
    if not found:
        m = _TS_DMESG_T.search(head)
        if m:
            s = _secs(_MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), None)
            found = (int(m.group(6)), s) if s is not None else None
    if not found:
        m = _TS_GLOG.search(head)
        if m:
            md = m.group(1)
            s = _secs(int(md[:-2]), int(md[-2:]), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5))
            found = (None, s) if s is not None else None
    if not found:
        m = _TS_SYSLOG.search(head)
        if m:
            s = _secs(_MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)),
                      m.group(6))
            found = (None, s) if s is not None else None
    return (found[0], found[1], _show_time(*found)) if found else None


# --------------------------------------------------------------------------- the words searched in each chunk
def _index():
    """The words searched in every chunk and, for each, its consumers: ('cause', i) ('exit', j) ('table',).

    The words of a cause's
    `requires`, `unless` and context are in AUX: they are only searched in a log once the cause matched there
    (from LOOKBACK bytes before it on), so a healthy log pays only for the causes' own words."""
    users = collections.OrderedDict()

    def add(rx, consumer):
        for word in rx.words:
            users.setdefault((word.encode("utf-8"), rx.icase), []).append(consumer)

    for i, c in enumerate(CAUSES):
        add(c.rx, ("cause", i))
        for rx in c.requires:
            add(rx, ("req", i))
        for rx in c.unless:
            add(rx, ("unless", i))
        for name, rx in c.context.items():
            add(rx, ("ctx", i, name))
    for j, rx in enumerate(_EXITS):
        add(rx, ("exit", j))
    add(_TABLE_EXIT, ("table",))
    merged = collections.OrderedDict((key, users[key]) for key in sorted(users, key=lambda w: (len(w[0]), w[0])))
    aux = {}
    for i, c in enumerate(CAUSES):
        items = [(rx, ("req", i)) for rx in c.requires] + [(rx, ("unless", i)) for rx in c.unless] + \
                [(rx, ("ctx", i, name)) for name, rx in c.context.items()]
        aux[i] = [(word.encode("utf-8"), rx.icase, consumer) for rx, consumer in items for word in rx.words]
    if any(icase for _w, icase in merged):
        raise ValueError("a cause's pattern ignores case: write its case variants ([Nn]o space) instead")
    return list(merged), list(merged.values()), aux


WORDS, WORD_USERS, AUX = _index()
_ERR_WORDS = [(w.encode("utf-8"), _ERRORISH.icase) for w in _ERRORISH.words]
TAIL = 4 << 20  # the last bytes of a log searched for lines that look like errors (when no cause is known)
# Bytes of log text, most frequent first (a noisy NCCL_DEBUG=INFO training log and the fixtures' logs); bytes not
# listed are rarer still. A word is looked for by its part that starts at its rarest byte (its "anchor"): all
# anchors at once with one pattern, so the search only stops where such a byte is, and runs at tens to hundreds of
# MB/s whatever the number of words.
_COMMON = b' 0en:ot/1israc46l-29.pCh5v]N3[8dmu,b7^fILFOgy>k|*_=Ex<()%wPTR#BDSA"+UG'
_RANK = {b: i for i, b in enumerate(_COMMON)}


def _anchor(word):
    """The part of word (16 bytes at most) that starts at its rarest byte with 4 bytes at least after it (all of a
    word of 4 bytes or fewer)."""
    if len(word) <= 4:
        return word
    p = max(range(len(word) - 3), key=lambda q: (_RANK.get(word[q], len(_COMMON)), -q))
    return word[p:p + 16]


ANCHORS = [_anchor(w) for w, _icase in WORDS]
# an anchor found -> the words whose anchor it starts with (the search reports the longest at a place)
_BY_ANCHOR = {a: [wid for wid, b in enumerate(ANCHORS) if a.startswith(b)] for a in set(ANCHORS)}
_TRIES = {}


_RARE_FROM = 60  # anchors that start at one of the bytes ranked from here on (or unlisted) are searched apart


def _tries(ids):
    """The compiled patterns that find the anchors of these word ids (cached): one for the anchors that start at a
    rare byte, one for the others (each search then stops only at its own first bytes)."""
    key = frozenset(ids)
    found = _TRIES.get(key)
    if found is None:
        groups = ([w for w in key if _RANK.get(ANCHORS[w][0], len(_COMMON)) >= _RARE_FROM],
                  [w for w in key if _RANK.get(ANCHORS[w][0], len(_COMMON)) < _RARE_FROM])
        found = [re.compile(_alternation([ANCHORS[w] for w in group])) for group in groups if group]
        if len(_TRIES) > 64:
            _TRIES.clear()
        _TRIES[key] = found
    return found


def _alternation(words):
    """A pattern matching any of words, as a tree of their common prefixes (the engine tries each prefix once)."""
    tree = {}
    for word in words:
        node = tree
        for ch in word:
            node = node.setdefault(ch, {})
        node[-1] = {}

    def emit(node):
        alts = [re.escape(bytes([ch])) + emit(sub) for ch, sub in sorted(node.items()) if ch != -1]
        if not alts:
            return b""
        body = alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"
        return b"(?:" + body + b")?" if -1 in node else body

    return emit(tree)


class _Event:
    __slots__ = ("ci", "line", "stream", "ts", "groups", "text", "attr", "warns", "tier", "why", "fix", "start")

    def __init__(self, ci, line, stream, ts, groups, text, attr, start=0):
        self.ci, self.line, self.stream, self.ts, self.groups, self.text, self.attr, self.start = \
            ci, line, stream, ts, groups, text, attr, start
        self.warns = None
        self.tier = CAUSES[ci].tier
        self.why = self.fix = None


def _find_lines(hay, words, start, limit, hits=None, tag=None):
    """{segment start: [segment end, {tags}]} of the \\r/\\n-separated segments in hay[start:limit] that hold
    one of words ([(bytes, icase, tag)]); each word is searched with bytes.find, one hit per segment."""
    hits = {} if hits is None else hits
    for word, tag in words:
        i = hay.find(word, start, limit)
        while i >= 0:
            back = max(start, i - MAX_SEGMENT - 1)
            ls = max(hay.rfind(b"\n", back, i), hay.rfind(b"\r", back, i)) + 1
            ls = max(ls, start)
            ahead = min(limit, i + MAX_SEGMENT + 1)
            e1, e2 = hay.find(b"\n", i, ahead), hay.find(b"\r", i, ahead)
            le = min(x for x in (e1, e2, ahead) if x >= 0)
            entry = hits.get(ls)
            if entry is None:
                hits[ls] = [le, {tag}]
            else:
                entry[1].add(tag)
            i = hay.find(word, le, limit) if le < limit else -1
    return hits


# --------------------------------------------------------------------------- one log, streamed
class Scanner:
    """Reads one log (a file, a stream, a node's output as it arrives) in bounded memory and time.

    ``feed(data)`` any number of times (bytes or str), then ``close()`` for the result that
    ``diagnose_job`` reads: the events (every match of a cause, with its line, stream and time), the
    hosts the log names, the launchers' exit lines and the lines that look like errors."""

    def __init__(self, source=None, node=None):
        self.source = source
        self.node = node
        self._buf = b""
        self._low = None          # _buf lower-cased, made when a case-blind word is searched
        self._scan_from = 0       # bytes of _buf before this were already read (kept as context)
        self._line0 = 0           # newlines before _buf[0]
        self._seg = 0             # length of the partial segment at the end of what was accepted
        self._skipping = False    # in the part of a segment past MAX_SEGMENT
        self._host_lines = 0
        self._tail = collections.deque()  # (line number of its first byte, bytes): the last TAIL bytes read
        self._tail_bytes = 0
        self.bytes = 0
        self.long_lines = 0
        self.line_count = 0
        self.events = []
        self._count = collections.Counter()       # events per cause
        self._active = set()                      # causes seen: their requires/unless/context words are searched
        self.requires = set()                     # cause ids whose `requires` was seen
        self.unless = set()
        self.context = {}                         # (cause id, name) -> first value
        self.hosts = []
        self.exits = []
        self._pending = []                        # system error events waiting for the NCCL WARNs after them
        self._real = False                        # a cause (not a symptom) was seen
        self._live = None                         # the words searched now (recomputed when a consumer is done)
        self._limit = 0
        self.closed = False

    # ------------------------------------------------------------------ input
    def feed(self, data):
        if not data:
            return
        if isinstance(data, str):
            data = data.encode("utf-8", "replace")
        self.bytes += len(data)
        data = self._cap(data)
        if data:
            self._buf += data
            self._run(final=False)

    def close(self):
        if not self.closed:
            self.closed = True
            self._run(final=True)
            self.line_count = self._line0 + self._buf.count(b"\n") + (1 if self._buf and self._buf[-1:] != b"\n" else 0)
            self._buf = self._low = b""
        return self

    def _cap(self, data):
        """data with each \\r/\\n-separated segment cut to MAX_SEGMENT bytes (the rest of a longer one dropped)."""
        if not self._skipping and self._seg + len(data) <= MAX_SEGMENT:
            cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
            self._seg = len(data) - cut - 1 if cut >= 0 else self._seg + len(data)
            return data
        parts = data.replace(b"\r", b"\n").split(b"\n")
        longest = max(self._seg + len(parts[0]), max(map(len, parts[1:])) if len(parts) > 1 else 0)
        if not self._skipping and longest <= MAX_SEGMENT:
            self._seg = len(parts[-1]) if len(parts) > 1 else self._seg + len(parts[0])
            return data
        out = []
        for piece in re.split(b"([\r\n])", data):
            if piece in (b"\r", b"\n"):
                out.append(piece)
                self._skipping, self._seg = False, 0
            elif piece and not self._skipping:
                room = MAX_SEGMENT - self._seg
                if len(piece) > room:
                    out.append(piece[:room])
                    self._skipping, self._seg = True, MAX_SEGMENT
                    self.long_lines += 1
                else:
                    out.append(piece)
                    self._seg += len(piece)
        return b"".join(out)

    # ------------------------------------------------------------------ scanning
    def _run(self, final):
        buf = self._buf
        if final:
            limit = len(buf)
        else:
            cut = len(buf) - LOOKAHEAD
            if cut <= self._scan_from:
                return
            limit = max(buf.rfind(b"\n", self._scan_from, cut), buf.rfind(b"\r", self._scan_from, cut)) + 1
            if limit <= self._scan_from:
                return
        self._low = None
        if limit > self._scan_from:
            first_line = self._line0 + buf.count(b"\n", 0, self._scan_from) + 1
            if self._host_lines < MAX_HOST_LINES:
                self._hosts_from_lines(buf, self._scan_from, limit)
            self._limit = limit
            self._scan(buf, self._scan_from, limit)
            self._keep_tail(first_line, buf[self._scan_from:limit])
        keep = max(0, limit - LOOKBACK)
        if keep:
            nl = buf.find(b"\n", keep, limit)
            keep = nl + 1 if nl >= 0 else keep
            self._line0 += buf.count(b"\n", 0, keep)
            self._buf = buf[keep:]
            self._low = None
        self._scan_from = limit - keep

    def _hay(self, icase):
        if not icase:
            return self._buf
        if self._low is None:
            self._low = self._buf.lower()
        return self._low

    def _keep_tail(self, first_line, data):
        self._tail.append((first_line, data))
        self._tail_bytes += len(data)
        while self._tail_bytes - len(self._tail[0][1]) >= TAIL:
            self._tail_bytes -= len(self._tail.popleft()[1])

    def _hosts_from_lines(self, buf, start, limit):
        lines = buf[start:limit].split(b"\n")
        room = MAX_HOST_LINES - self._host_lines
        for raw in lines[:room]:
            head = clean(raw[:300].decode("utf-8", "replace"))
            a = attribute(head)
            for key in ("node", "host"):
                if a.get(key):
                    self._add_host(a[key])
            m = _PROMPT.match(head)
            if m and looks_like_host(m.group("v")):
                self._add_host(m.group("v"))
        self._host_lines += min(len(lines), room)

    def _add_host(self, host):
        if host not in self.hosts and len(self.hosts) < MAX_HOSTS:
            self.hosts.append(host)

    def _words(self):
        """The ids of the words searched now: a cause's own words until it was seen MAX_MATCHES times, the exit
        lines' always, and the requires/unless/context words of the causes seen in this log until found."""
        if self._live is None:
            self._live = [wid for wid in range(len(WORDS)) if any(self._wanted(u) for u in WORD_USERS[wid])]
        return self._live

    def _wanted(self, consumer):
        if consumer[0] in ("req", "unless", "ctx") and consumer[1] not in self._active:
            return False
        return not self._done(consumer)

    def _scan(self, buf, start, limit):
        ids = self._words()
        hits = {}
        tries = _tries(ids)
        for rx in tries:
            pos = start
            while pos < limit:
                m = rx.search(buf, pos, limit)
                if not m:
                    break
                i = m.start()
                back = max(start, i - MAX_SEGMENT - 1)
                ls = max(buf.rfind(b"\n", back, i), buf.rfind(b"\r", back, i), start - 1) + 1
                ahead = min(limit, i + MAX_SEGMENT + 1)
                le = buf.find(b"\n", i, ahead)
                if le < 0:
                    le = ahead
                cr = buf.find(b"\r", i, le)
                if cr >= 0:
                    le = cr
                hits.setdefault(ls, [le, set()])
                pos = le + 1
        live = set(ids)
        for ls, entry in hits.items():
            seg = buf[ls:entry[0]]
            for rx in tries:
                for found in set(rx.findall(seg)):
                    entry[1].update(wid for wid in _BY_ANCHOR[found] if wid in live and WORDS[wid][0] in seg)
        if not hits:
            return
        pos, line = 0, self._line0
        for ls in sorted(hits):
            le, tags = hits[ls]
            consumers = []
            for tag in tags:
                for consumer in WORD_USERS[tag]:
                    if consumer not in consumers and self._wanted(consumer):
                        consumers.append(consumer)
            if not consumers:
                continue
            line += buf.count(b"\n", pos, ls)
            pos = ls
            self._line(buf, ls, le, line + 1, consumers)

    def _text_at(self, buf, ls, le):
        """(text, head, line start): the segment's text and the start of its line (prefix, time)."""
        text = clean(buf[ls:le].decode("utf-8", "replace"))
        if ls == 0 or buf[ls - 1] == 10:
            return text, text, ls
        line_start = buf.rfind(b"\n", max(0, ls - MAX_SEGMENT - 1), ls) + 1
        return text, clean(buf[line_start:line_start + 600].decode("utf-8", "replace")), line_start

    def _line(self, buf, ls, le, number, consumers):
        text, head, line_start = self._text_at(buf, ls, le)
        self._flags(text, consumers)
        attr = None
        for consumer in consumers:
            kind = consumer[0]
            if kind == "cause":
                ci = consumer[1]
                c = CAUSES[ci]
                if self._count[ci] >= MAX_MATCHES:
                    continue
                target = text + "\n" + self._next_lines(buf, le, c.span) if c.span else text
                m = c.regex.search(target)
                if not m or _CODE_LINE.match(text):
                    continue
                if attr is None:
                    attr = attribute(head)
                    if _TABLE_EXIT.search(text):  # torchrun's failure table names the host and the global rank
                        host, rank = self._table_of(buf, line_start)
                        attr = dict({k: v for k, v in (("node", host), ("rank", rank)) if v}, **attr)
                self._event(ci, m, number, attr, head, text, buf, line_start, le)
            elif kind == "exit":
                m = _EXITS[consumer[1]].search(text)
                if m and len(self.exits) < 200:
                    item = {k: v for k, v in m.groupdict().items() if v is not None}
                    item["line"] = number
                    if "code" in item:
                        item["code"] = int(item["code"])
                    self.exits.append(item)
            elif kind == "table":
                m = _TABLE_EXIT.search(text)
                if m:
                    self._table_exit(buf, line_start, number, int(m.group("code")))

    def _flags(self, text, consumers):
        """The file-wide values a line gives: a cause's `requires` or `unless` seen, its context values."""
        for consumer in consumers:
            kind, ci = consumer[0], consumer[1] if len(consumer) > 1 else None
            if kind == "req" and ci not in self.requires:
                if any(rx.search(text) for rx in CAUSES[ci].requires):
                    self.requires.add(ci)
                    self._live = None
            elif kind == "unless" and ci not in self.unless:
                if any(rx.search(text) for rx in CAUSES[ci].unless):
                    self.unless.add(ci)
                    self._live = None
            elif kind == "ctx" and (ci, consumer[2]) not in self.context:
                m = CAUSES[ci].context[consumer[2]].search(text)
                if m:
                    self.context[(ci, consumer[2])] = next((g for g in m.groups() if g is not None), m.group(0))
                    self._live = None

    def _activate(self, ci, buf):
        """The first match of cause ci in this log: its requires/unless/context words are searched from now on,
        and in what is still in memory before (LOOKBACK bytes) and after (this chunk) it."""
        self._active.add(ci)
        self._live = None
        words = [(word, (icase, consumer)) for word, icase, consumer in AUX[ci]]
        if not words:
            return
        for icase in (False, True):
            mine = [(w, tag) for w, tag in words if tag[0] == icase]
            if not mine:
                continue
            hits = _find_lines(self._hay(icase), mine, 0, self._limit)
            for ls in sorted(hits):
                le, tags = hits[ls]
                text = clean(buf[ls:le].decode("utf-8", "replace"))
                self._flags(text, [tag[1] for tag in tags])

    def _next_lines(self, buf, le, count):
        end = le
        for _i in range(count):
            nxt = buf.find(b"\n", end + 1, end + 2 + MAX_SEGMENT)
            end = nxt if nxt >= 0 else min(len(buf), end + 1 + MAX_SEGMENT)
        return clean(buf[le + 1:end].decode("utf-8", "replace"))

    @staticmethod
    def _stream(attr):
        return (attr.get("node"), attr.get("rank") or attr.get("task"))

    def _table_of(self, buf, line_start):
        """(host, rank) of torchrun's failure table around an "exitcode :" line (the lines just before it)."""
        host = rank = None
        end = line_start - 1
        for _i in range(3):
            if end <= 0:
                break
            start = buf.rfind(b"\n", max(0, end - 400), end) + 1
            prev = buf[start:end].decode("utf-8", "replace")
            m = _TABLE_RANK.search(prev)
            if m:
                rank = m.group("rank")
            m = _TABLE_HOST.search(prev)
            if m:
                host = m.group("node")
                break
            end = start - 1
        return host, rank

    def _event(self, ci, m, number, attr, head, text, buf, line_start, le):
        stream = self._stream(attr)
        ts = timestamp(head) or self._inherited_time(buf, line_start, stream)
        groups = m.groupdict()
        ev = _Event(ci, number, stream, ts, groups, text, attr, m.start() if m.start() < len(text) else 0)
        c = CAUSES[ci]
        for key in ("node", "host"):
            if attr.get(key):
                self._add_host(attr[key])
        if c.cause == "nccl_system_error" and not groups.get("warn"):
            ev.warns = self._warns_around(buf, line_start, le, number, stream)
        self.events.append(ev)
        self._count[ci] += 1
        if self._count[ci] >= MAX_MATCHES:
            self._live = None
        if ci not in self._active:
            self._activate(ci, buf)
        if c.tier == CAUSE and not c.requires and not c.unless:
            self._real = True

    def _inherited_time(self, buf, line_start, stream, lines=8):
        """The timestamp of the nearest earlier line of the same stream (within 8 lines), or None."""
        end = line_start - 1
        for _i in range(lines):
            if end <= 0:
                return None
            start = buf.rfind(b"\n", max(0, end - 4096), end) + 1
            head = clean(buf[start:start + 200].decode("utf-8", "replace"))
            ts = timestamp(head)
            if ts and self._stream(attribute(head)) == stream:
                return ts
            end = start - 1
        return None

    def _warns_around(self, buf, line_start, le, number, stream):
        """The NCCL WARN lines of the same stream within LOOKBACK bytes before an error and 16 KiB after it."""
        out = []
        for lo, hi, before in ((max(0, line_start - LOOKBACK), line_start, True), (le, min(len(buf), le + 16384), False)):
            hits = _find_lines(buf, [(b"WARN", 0)], lo, hi)
            for ls in sorted(hits):
                text = clean(buf[ls:hits[ls][0]].decode("utf-8", "replace"))
                m = _NCCL_WARN.search(text)
                if not m or _BENIGN_WARN.search(m.group("msg")) or self._stream(attribute(text)) != stream:
                    continue
                where = number - buf.count(b"\n", ls, line_start) if before else number + buf.count(b"\n", le, ls)
                out.append((where, _evidence(text), m.group("msg").strip()))
        before = [w for w in out if w[0] <= number][-8:]
        return before + [w for w in out if w[0] > number][:4]

    def _table_exit(self, buf, line_start, number, code):
        host, rank = self._table_of(buf, line_start)
        if host and len(self.exits) < 200:
            item = {"node": host, "code": code, "line": number}
            if rank:
                item["rank"] = rank
            self.exits.append(item)

    def _done(self, consumer):
        kind = consumer[0]
        if kind == "cause":
            return self._count[consumer[1]] >= MAX_MATCHES
        if kind == "req":
            return consumer[1] in self.requires
        if kind == "unless":
            return consumer[1] in self.unless
        if kind == "ctx":
            return (consumer[1], consumer[2]) in self.context
        return False

    # ------------------------------------------------------------------ the result
    def error_lines(self):
        """The last MAX_UNKNOWN_LINES distinct lines that look like errors, from the last TAIL bytes read (the
        end of a log says why it stopped)."""
        items = collections.OrderedDict()
        for first_line, data in self._tail:
            hits = {}
            low = None
            for word, icase in _ERR_WORDS:
                if icase and low is None:
                    low = data.lower()
                _find_lines(low if icase else data, [(word, 0)], 0, len(data), hits)
            pos, line = 0, first_line - 1
            for ls in sorted(hits):
                line += data.count(b"\n", pos, ls)
                pos = ls
                text, head, _start = self._text_at(data, ls, hits[ls][0])
                if not text.strip() or _NOISE.search(text) or not _ERRORISH.search(text):
                    continue
                key = re.sub(r"\d+", "#", text.strip()[:300])
                if key in items:
                    continue
                attr = attribute(head)
                item = {"line": line + 1, "text": _evidence(text)}
                node = attr.get("node") or self.node or attr.get("host")
                if node:
                    item["node"] = node
                if self.source:
                    item["file"] = self.source
                items[key] = item
        return list(items.values())[-MAX_UNKNOWN_LINES:]


# a match on a line of source code quoted in a traceback is not evidence ("raise RendezvousTimeoutError")
_CODE_LINE = re.compile(r"^\s{0,40}(?:\[[^\]]{0,80}\]:?\s{0,8}){0,4}(?:raise |File \"|except |return |if |elif |def |class |#)")


def _evidence(line, start=0):
    """The line as shown (220 characters at most); a match far into a long line (after a progress bar) is shown
    from a little before it, marked with a leading '...'."""
    line = line.strip()
    if len(line) > MAX_EVIDENCE and start > MAX_EVIDENCE - 80:
        line = "..." + line[start - 60:].strip()
    return line if len(line) <= MAX_EVIDENCE else line[:MAX_EVIDENCE - 3] + "..."


# --------------------------------------------------------------------------- a job: every log, ordered
_SYS_FIXES = [
    (re.compile(r"XML|[Tt]opo|graph|Attribute \w+ of node|real path", re.I),
     "NCCL's topology/graph files name a device this node does not have: unset NCCL_GRAPH_FILE and NCCL_TOPO_FILE "
     "(environment, /etc/nccl.conf, ~/.nccl.conf) or give the files written for this machine type"),
    (re.compile(r"libcuda|CUDA library|cuInit|Cuda failure|nvml", re.I),
     "NCCL could not use the CUDA driver: check `nvidia-smi` on the node and that the container gets the driver "
     "(--gpus all / the NVIDIA runtime); `provision verify -l NODE --check gpu` checks driver and toolkit"),
    (re.compile(r"socket|connect|bind|[Aa]ddress|Net|Bootstrap|getaddrinfo|poll", re.I),
     "a socket call failed (the WARN names it): the same NCCL_SOCKET_IFNAME on every node, holding the cluster "
     "address, and the nodes reaching each other on it; `provision verify --only nccl` checks both"),
]
_SYS_FIX_DEFAULT = ("read the NCCL WARN line: it names the call that failed; rerun with NCCL_DEBUG=INFO "
                    "NCCL_DEBUG_SUBSYS=INIT,NET for the lines around it")
_SYS_FIX_NO_WARN = ("rerun with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET): the NCCL WARN line before the error names "
                    "the call that failed; `provision verify --smoke` runs a collective on every node")


def _kept(ev, scanner):
    """An event stays when its cause's `requires` was seen in the same log and its `unless` was not."""
    c = CAUSES[ev.ci]
    return (not c.requires or ev.ci in scanner.requires) and not (c.unless and ev.ci in scanner.unless)


def _resolve_system_errors(events):
    """NCCL's "unhandled system error": explained by a real cause near it in the same stream (dropped), a peer
    that went away (a consequence), else the NCCL WARN line around it (or the lack of one) says what failed."""
    out = []
    for ev in events:
        c = CAUSES[ev.ci]
        if c.cause != "nccl_system_error" or ev.groups.get("warn"):
            out.append(ev)
            continue
        explained = any(o is not ev and o.stream == ev.stream and CAUSES[o.ci].tier == CAUSE
                        and CAUSES[o.ci].cause != "nccl_system_error" and -300 <= o.line - ev.line <= 60
                        for o in events)
        if explained:
            continue
        err = c.regex.search(ev.text).group(0)
        warns = ev.warns or []
        before = [w for w in warns if w[0] <= ev.line]
        after = [w for w in warns if w[0] > ev.line]
        warn = before[-1] if before else (after[0] if after else None)
        if warn and _REMOTE_GONE.search(warn[2]):
            ev.tier = SYMPTOM
            ev.why = ("NCCL failed with `%s` because a peer closed its connection (NCCL WARN %s): that peer died or "
                      "exited first, this rank is a consequence" % (err, warn[2][:160]))
            ev.fix = BY_ID["peer_lost"].fix
        elif warn:
            ev.why = "NCCL failed with `%s`; the NCCL WARN line %s says what failed: %s" % (
                err, "before it" if before else "after it", warn[2][:200])
            ev.fix = next((fix for rx, fix in _SYS_FIXES if rx.search(warn[2])), _SYS_FIX_DEFAULT)
        else:
            ev.why = ("NCCL failed with `%s` and the log has no NCCL WARN line that says why (NCCL_DEBUG was not "
                      "INFO or WARN)" % err)
            ev.fix = _SYS_FIX_NO_WARN
        if warn:
            ev.warns = [warn]
        out.append(ev)
    return out


def _context_of(scanner, ci):
    return {name: v for (i, name), v in scanner.context.items() if i == ci}


def _node_of(ev, scanner, file_node):
    """The node an event concerns: the node the matched text names, the launcher prefix of the line, the
    caller's default (the node the log came from), NCCL's hostname on the line, else the one node the log names."""
    c = CAUSES[ev.ci]
    a = ev.attr
    named = ev.groups.get(c.node_from) or ev.groups.get(c.node_from + "2") or \
        _context_of(scanner, ev.ci).get(c.node_from)
    for value in (named, a.get("node"), scanner.node, a.get("host"), file_node):
        if value:
            return value
    return None


def _rank_of(ev):
    """The global rank an event's line names: its rank prefix ([rank3]:, [default3]:, [1,3]<stderr>:), else
    "[Rank 3]" in the message; None when it names none (srun's task number is not a rank)."""
    rank = ev.attr.get("rank")
    if rank:
        m = re.match(r"^(?:rank|default)(\d+)$", rank)
        return m.group(1) if m else rank
    m = _RANK_IN_TEXT.search(ev.text)
    return m.group("rank") if m else None


class _Record:
    """One cause on one node (or, with no node known, in one log): its events, lines, files and ranks."""

    def __init__(self, cause, node, fi, scanner, ev):
        self.cause, self.node = cause, node
        self.first = (fi, scanner, ev)
        self.tier = ev.tier
        self.lines = [ev.line]
        self.files = [scanner.source]
        self.ranks = []
        self.evidence = []
        self.earliest = ev.ts
        self.add(fi, scanner, ev, first=True)

    def add(self, fi, scanner, ev, first=False):
        if not first:
            if fi == self.first[0] and ev.line not in self.lines and len(self.lines) < MAX_RECORD_LINES:
                self.lines = sorted(self.lines + [ev.line])
            if (fi, ev.line) < (self.first[0], self.first[2].line):
                self.first = (fi, scanner, ev)
            if scanner.source not in self.files:
                self.files.append(scanner.source)
            if ev.ts and (not self.earliest or _time_key(ev.ts) < _time_key(self.earliest)):
                self.earliest = ev.ts
        rank = _rank_of(ev)
        if rank and rank not in self.ranks and len(self.ranks) < 64:
            self.ranks.append(rank)
        if len(self.evidence) < 4:
            for line, text in [(w[0], w[1]) for w in (ev.warns or [])] + [(ev.line, _evidence(ev.text, ev.start))]:
                item = {"line": line, "text": text}
                if scanner.source:
                    item["file"] = scanner.source
                if item not in self.evidence and len(self.evidence) < 4:
                    self.evidence.append(item)


def _time_key(ts):
    return (ts[0] or 0, ts[1])


def _order(records):
    """The records sorted as the failure unfolded: by time when every one has a timestamp (with a year on all, or
    on none), else by tier (a hard fault before a hang, a hang before a symptom) and file and line order."""
    stamps = [r.earliest for r in records]
    if records and all(stamps):
        with_year = {s[0] is not None for s in stamps}
        if len(with_year) == 1:
            return sorted(records, key=lambda r: (_time_key(r.earliest) if r.earliest[0] else (0, r.earliest[1]),
                                                  TIER_RANK[r.tier], r.first[0], r.first[2].line))
    return sorted(records, key=lambda r: (TIER_RANK[r.tier], r.first[0], r.first[2].line))


def _verify(c, node):
    if not c.verify:
        return None
    if c.verify in VERIFY:
        return VERIFY[c.verify]
    return "provision verify %s--check %s" % ("-l %s " % node if node else "", c.verify)


def _check(rec, role, root):
    fi, scanner, ev = rec.first
    c = CAUSES[ev.ci]
    values = dict(_context_of(scanner, ev.ci))
    if c.cause == "name_unresolved":
        name = ev.groups.get("name")
        values["role"] = ""
        if name and name == values.get("master"):
            values["role"] = ": it is MASTER_ADDR"
        elif name and name in (ev.attr.get("host"), ev.attr.get("node"), scanner.node, rec.node):
            values["role"] = ": it is this node's own hostname"
    detail, fix, _values = c.explain(ev.groups, values)
    if ev.why:
        detail, fix = ev.why, ev.fix
    verify = _verify(c, rec.node)
    if verify and "provision verify" not in fix:
        fix = "%s; `%s` confirms it" % (fix, verify)
    if role == CONSEQUENCE and root is not None:
        where_root = root.node or "(node unknown, %s)" % str(root.first[1].source or "its log").rsplit("/", 1)[-1]
        detail += " (a consequence of the first failure: %s on %s)" % (root.cause, where_root)
    evidence = _evidence(ev.text, ev.start)
    where = "%s:%d" % (scanner.source, ev.line) if scanner.source else "line %d" % ev.line
    data = {"cause": c.cause, "symptom": rec.tier == SYMPTOM, "tier": rec.tier, "role": role,
            "line": ev.line, "lines": rec.lines[:MAX_RECORD_LINES], "evidence": evidence,
            "evidence_lines": rec.evidence}
    if scanner.source:
        data["file"] = scanner.source
    if len(rec.files) > 1:
        data["files"] = rec.files
    for key in ("task", "host"):
        if ev.attr.get(key) and ev.attr[key] != rec.node:
            data[key] = ev.attr[key]
    if rec.ranks:
        data["rank"] = rec.ranks[0]
    if len(rec.ranks) > 1:
        data["ranks"] = rec.ranks
    if rec.earliest:
        data["time"] = rec.earliest[2]
    if verify:
        data["verify"] = verify
    if role == CONSEQUENCE and root is not None:
        data["after"] = {"cause": root.cause, "node": root.node}
    return failed(CHECK_PREFIX + c.cause, '%s -- %s: "%s"' % (detail, where, evidence), fix, node=rec.node, data=data)


def diagnose_job(scanners):
    """Several logs of one job, each a ``Scanner`` (fed, closed or not) -> {'causes', 'consequences',
    'first_failure', 'files', 'unknown_error_lines'}.

    Each log is read on its own (its default node is the scanner's); a cause on a node is one record whatever
    the number of lines or logs that show it, and a cause with no node known is one record per log (two logs
    never merge). The records are ordered as the failure unfolded (``_order``): the first real cause is the
    ``root`` (the first failure), the other faults of tier ``cause`` stay causes, and the hangs and symptoms
    after it are its consequences. With no real cause, the symptoms are the causes (the first failure is in a
    log that was not given)."""
    records = collections.OrderedDict()
    files = []
    for fi, scanner in enumerate(scanners):
        scanner.close()
        events = _resolve_system_errors([e for e in scanner.events if _kept(e, scanner)])
        suppressed = set()
        for ev in events:
            suppressed.update(CAUSES[ev.ci].suppresses)
        file_node = scanner.hosts[0] if len(scanner.hosts) == 1 else None
        for ev in events:
            c = CAUSES[ev.ci]
            if c.cause in suppressed:
                continue
            node = _node_of(ev, scanner, file_node)
            key = (c.cause, node) if node else (c.cause, None, fi)
            if key in records:
                records[key].add(fi, scanner, ev)
            else:
                records[key] = _Record(c.cause, node, fi, scanner, ev)
        files.append({"path": scanner.source, "lines": scanner.line_count, "bytes": scanner.bytes,
                      "long_lines": scanner.long_lines, "nodes": list(scanner.hosts), "exits": scanner.exits,
                      "causes": [], "consequences": []})
    for key in [k for k in records if k[1] is None]:
        fi = key[2]
        homes = [r for k, r in records.items() if k[0] == key[0] and k[1] is not None and r.first[0] == fi]
        if len(homes) == 1:  # "slurmstepd: ... oom-kill" then "srun: error: node7: task 0: Out Of Memory": one fault
            rec = records.pop(key)
            homes[0].add(fi, rec.first[1], rec.first[2])
    ordered = _order(list(records.values()))
    real = [r for r in ordered if r.tier != SYMPTOM]
    root = real[0] if real else None
    causes, consequences = [], []
    for rec in ordered:
        if rec is root:
            role = ROOT
        elif root is not None and rec.tier == CAUSE:
            role = ALSO
        else:
            role = CONSEQUENCE
        record = _check(rec, role, root)
        (consequences if role == CONSEQUENCE and root is not None else causes).append(record)
        for fi, entry in enumerate(files):
            if scanners[fi].source in rec.files or rec.first[0] == fi:
                (entry["consequences"] if role == CONSEQUENCE else entry["causes"]).append(record["check"])
    unknown = []
    for fi, scanner in enumerate(scanners):
        # the lines that look like errors: of every log with nothing known, and of the logs with only consequences
        # when the first failure is in none of the logs
        if not files[fi]["causes"] and (not files[fi]["consequences"] or root is None):
            unknown.extend(scanner.error_lines())
    first = None
    if root is not None:
        fi, scanner, ev = root.first
        first = {"check": CHECK_PREFIX + root.cause, "cause": root.cause, "node": root.node, "file": scanner.source,
                 "line": ev.line}
        if root.earliest:
            first["time"] = root.earliest[2]
        if root.ranks:
            first["rank"] = root.ranks[0]
    return {"causes": causes, "consequences": consequences, "first_failure": first, "files": files,
            "unknown_error_lines": unknown}


def scan_text(text, source=None, node=None):
    """A closed Scanner over one text (a str or bytes already in memory)."""
    scanner = Scanner(source, node)
    for i in range(0, len(text or ""), CHUNK):
        scanner.feed(text[i:i + CHUNK])
    return scanner.close()


def classify_log(text):
    """The most likely cause named by one log text: {cause, detail, fix} or None (the smoke test's view): a real
    cause before a symptom, the most specific first."""
    job = diagnose_job([scan_text(text)])
    records = job["causes"] + job["consequences"]
    if not records:
        return None
    top = min(records, key=lambda r: (r["data"]["symptom"],
                                      next(i for i, c in enumerate(CAUSES) if c.cause == r["data"]["cause"]),
                                      r["data"]["line"]))
    return {"cause": top["data"]["cause"], "detail": top["detail"].split(" -- ", 1)[0], "fix": top["fix"]}


def explain_resource_error(text):
    """node_runtime's view: (cause, explanation, fix) for /dev/shm, IPC, memlock and nofile errors, else None."""
    lines = [line[:MAX_SEGMENT] for line in clean(text or "").splitlines()]
    for c in CAUSES:
        if c.resource and any(c.regex.search(line) for line in lines):
            return c.cause, c.detail, c.fix
    return None
