# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The cluster plan: which nodes, where each is reached, the master, the ports, the user.

One function computes it from the inventory (``plan_from_hostvars``), with the defaults of the
settings every stage shares (``DEFAULTS``: nowhere else). The preflight stage publishes it as the
fact ``cluster_plan``; every stage, the verify pass, the launchers and the CLI read that one dict:

    {"nodes": [{"name", "address", "rank"}], "hosts": [names], "address_of": {name: address},
     "ranks": {name: rank}, "master", "master_addr", "master_port", "ssh_port", "user", "group"}

Validation comes with it: each problem is one line naming the host, what is wrong and the fix, e.g.
    node2: address 10.0.0.5 is also used by node1; fix: give each host its own cluster_address/ansible_host

Plain Python, no Ansible import.
"""

from __future__ import annotations

import ipaddress
import re

# The stages of site.yml, in order (each is playbooks/<stage>.yml and roles/<stage>, tagged with its name).
STAGES = ["preflight", "packages", "gcc_toolchain", "cuda_toolkit", "python_env", "sshd", "ssh_mesh", "pdsh",
          "node_runtime", "nccl_net", "shell_env", "launchers", "allreduce_smoke"]
# The inventory variables every stage shares, and their defaults (README: Inventory variables): written
# here and nowhere else (tests/unit/test_defaults_once.py fails on a restatement). A role's own settings
# have theirs in roles/<role>/defaults/main.yml (module_utils/common/settings.py reads both).
DEFAULTS = {
    "cluster_group": "cluster",
    "cluster_user": "root",
    "sshd_port": 2222,
    "cluster_master_port": 29500,
    "cluster_master": "",
}
DEFAULT_SSH_PORT = DEFAULTS["sshd_port"]
DEFAULT_MASTER_PORT = DEFAULTS["cluster_master_port"]
# The ansible_connection values that reach a host over SSH (the controller's own login: the sshd and
# ssh_mesh roles keep and record that port, bootstrap makes first contact over it).
SSH_CONNECTIONS = ("ssh", "smart", "ansible.builtin.ssh", "paramiko", "paramiko_ssh", "ansible.builtin.paramiko_ssh")


def is_ssh_connection(connection):
    """Whether a host's ansible_connection (None: Ansible's default, ssh) logs in over SSH."""
    return str(connection or "ssh") in SSH_CONNECTIONS


# ---------------------------------------------------------------- names and addresses
# Every name and address of the inventory ends up in files and commands on the nodes (~/.ssh/config,
# known_hosts, /etc/hosts, hostfiles, a shell task's --bind): each is checked here first.
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(r"^%s(?:\.%s)*\.?$" % (_LABEL, _LABEL))
# a POSIX user name as useradd accepts it (letters, digits, '_', '-', '.'; not starting with '-')
_USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")


def shown(text):
    """text for a one-line message: as it is when printable, else its repr (a newline stays one line)."""
    text = str(text)
    return text if text.isprintable() and text.strip() == text and text else repr(text)


def is_ip(text):
    try:
        ipaddress.ip_address(str(text))
    except ValueError:
        return False
    return True


def is_host_name(text):
    """An RFC 1123 host name: dot-separated labels of letters, digits and inner '-', each at most 63
    characters, at most 253 in all (a trailing dot allowed)."""
    text = str(text)
    return len(text.rstrip(".")) <= 253 and bool(_HOST_NAME.match(text))


def url_host(address):
    """An address or host name as the host part of a URL: an IPv6 address in brackets (RFC 3986)."""
    text = str(address)
    return "[%s]" % text if ":" in text and not text.startswith("[") else text


def address_problem(text):
    """None when text is an IP address or a host name, else why not (one phrase)."""
    text = str(text)
    if is_ip(text) or is_host_name(text):
        return None
    if text.startswith("[") and text.endswith("]") and is_ip(text[1:-1]):
        return "%s is an address in brackets: write it without them" % text
    return "%s is neither an IP address nor an RFC 1123 host name (letters, digits, '-' and '.')" % shown(text)


def user_problem(text):
    """None when text is a user name useradd accepts, else why not."""
    if _USER_NAME.match(str(text)):
        return None
    return ("%s is not a user name (letters, digits, '_', '-' and '.', at most 32, not starting with a digit, "
            "'-' or '.')" % shown(text))


_MIRROR_URL = re.compile(r"^(https?|file)://[^\s\[\]\"'#;]+$")


def _truthy(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def mirror_trust(hostvars, hosts):
    """(problems, warnings) of cluster_package_mirror (issue 31): a mirror apt trusts must be signed
    (packages_mirror_keyring) or said to be insecure on purpose (cluster_package_mirror_insecure: true,
    e.g. the lab's, on its own internal network); an unsigned one is a warning, one that is neither
    a problem, and so is a URL that would not be one word in a sources.list line."""
    problems, warnings = [], []
    for name in hosts or []:
        hv = hostvars[name]
        url = str(hv.get("cluster_package_mirror") or "")
        if not url:
            continue
        if not _MIRROR_URL.match(url):
            problems.append(f"{shown(name)}: cluster_package_mirror {shown(url)} is not an http(s):// or file:// URL "
                            "without spaces or quotes; fix: set it to the mirror's base URL")
        elif hv.get("packages_mirror_keyring"):
            continue
        elif _truthy(hv.get("cluster_package_mirror_insecure", False)):
            warnings.append(f"{shown(name)}: the package mirror {url} is trusted unsigned "
                            "(cluster_package_mirror_insecure: true): apt installs whatever it (or anyone between it "
                            "and the node) serves, as root; fix: packages_mirror_keyring for a mirror outside a "
                            "network you control")
        else:
            problems.append(f"{shown(name)}: the package mirror {url} has no packages_mirror_keyring: apt would install "
                            "unsigned packages from it as root; fix: set packages_mirror_keyring to the keyring that "
                            "signs its Release file, or cluster_package_mirror_insecure: true for a mirror on a network "
                            "you control")
    n = len(hosts or [])
    return merge_same_problem(problems, n), merge_same_problem(warnings, n)


def node_address(hostvars, name):
    """Where the other nodes reach a node: cluster_address, else ansible_host, else its name."""
    return str(hostvars.get("cluster_address") or hostvars.get("ansible_host") or name)


def _port(value, what, host, problems):
    try:
        port = int(str(value).strip())
    except (TypeError, ValueError):
        problems.append(f"{host}: {what} {value!r} is not a number; fix: set {what} to a port between 1 and 65535")
        return None
    if not 1 <= port <= 65535:
        problems.append(f"{host}: {what} {port} is out of range; fix: set {what} to a port between 1 and 65535")
        return None
    return port


def _address_key(address):
    """Normalise an address for duplicate detection (IPs canonical, names lower-case)."""
    text = str(address).strip()
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        return text.lower().rstrip(".")


def normalize_hosts(hosts):
    """hosts: list of dicts {name, address, ssh_port, master_port, controller_port?}."""
    out = []
    for rank, host in enumerate(hosts):
        out.append({
            "name": str(host["name"]),
            "address": str(host.get("address") or host["name"]),
            "ssh_port": host.get("ssh_port", DEFAULT_SSH_PORT),
            "master_port": host.get("master_port", DEFAULT_MASTER_PORT),
            "controller_port": host.get("controller_port"),
            "rank": rank,
        })
    return out


def validate_inventory(hosts, master=None, stages=None, stage_min_nodes=None, master_addr=None, user=None):
    """Return (problems, plan).

    hosts: list of dicts in inventory order: name, address, ssh_port, master_port.
    master: the inventory name chosen as master (None/"" = first host).
    stages: the stages this run will execute (None = all known).
    master_addr, user: cluster_master_addr and cluster_user when set (checked as an address and a user name).
    plan: {"nodes": [{name, address, rank}], "master", "master_addr", "master_port", "ssh_port"}.
    """
    problems = []
    nodes = normalize_hosts(hosts)
    if not nodes:
        return ["inventory: no hosts in the cluster group; fix: list your nodes under the group "
                "`cluster` (see inventory/example/hosts.yml)"], {}

    seen_names = {}
    seen_addrs = {}
    for node in nodes:
        if address_problem(node["name"]):
            problems.append(f"{shown(node['name'])}: the inventory name is not an RFC 1123 host name (letters, "
                            "digits, '-' and '.'): it goes into ~/.ssh/config, /etc/hosts and the hostfiles; fix: "
                            "rename the host in the inventory")
        why = address_problem(node["address"])
        if why:
            problems.append(f"{shown(node['name'])}: cluster address {why}; fix: set cluster_address (or "
                            "ansible_host) to the node's IP address or host name")
        key = node["name"].lower()
        if key in seen_names:
            problems.append(f"{node['name']}: name duplicates {seen_names[key]} (names differ only in case); "
                            "fix: give every node a distinct inventory name")
        else:
            seen_names[key] = node["name"]
        addr = _address_key(node["address"])
        if addr in ("127.0.0.1", "::1", "localhost") and len(nodes) > 1:
            problems.append(f"{node['name']}: address {node['address']} is a loopback address, which peers "
                            "cannot reach; fix: set cluster_address to the node's cluster-network address")
        if addr in seen_addrs:
            problems.append(f"{node['name']}: address {node['address']} is also used by {seen_addrs[addr]}; "
                            "fix: give each host its own cluster_address/ansible_host")
        else:
            seen_addrs[addr] = node["name"]

    ssh_ports = set()
    master_ports = set()
    for node in nodes:
        ssh = _port(node["ssh_port"], "sshd_port", node["name"], problems)
        mport = _port(node["master_port"], "cluster_master_port", node["name"], problems)
        if ssh is not None:
            ssh_ports.add(ssh)
        if mport is not None:
            master_ports.add(mport)
        if ssh is not None and mport is not None and ssh == mport:
            problems.append(f"{node['name']}: sshd_port and cluster_master_port are both {ssh}; "
                            f"fix: use different ports (defaults: sshd_port {DEFAULT_SSH_PORT}, cluster_master_port "
                            f"{DEFAULT_MASTER_PORT})")
        node["ssh_port"], node["master_port"] = ssh, mport
    if len(ssh_ports) > 1:
        problems.append(f"cluster: sshd_port differs between nodes ({', '.join(map(str, sorted(ssh_ports)))}); "
                        "fix: set one sshd_port for the whole group (launchers use one port for all nodes)")
    if len(master_ports) > 1:
        problems.append(f"cluster: cluster_master_port differs between nodes "
                        f"({', '.join(map(str, sorted(master_ports)))}); fix: set it once in group_vars")

    names = [n["name"] for n in nodes]
    if master_addr not in (None, "") and address_problem(master_addr):
        problems.append(f"cluster: cluster_master_addr {address_problem(master_addr)}; fix: set it to the "
                        "rendezvous IP address or host name")
    if user not in (None, "") and user_problem(user):
        problems.append(f"cluster: cluster_user {user_problem(user)}; fix: set cluster_user to the training "
                        "user's login name")
    if master in (None, ""):
        master = names[0]
    elif master not in names:
        problems.append(f"cluster: cluster_master {master!r} is not a host of the cluster group; "
                        f"fix: set cluster_master to one of {', '.join(names[:8])}")
        master = names[0]

    # Stages that need more than one node to mean anything: a stage listed in `stages` that needs more
    # nodes than the inventory has fails preflight before anything changes (preflight_stage_min_nodes,
    # whose default the preflight role writes)
    if stage_min_nodes is None:
        from ansible_collections.provision.cluster.plugins.module_utils.common.settings import default

        stage_min_nodes = default("preflight_stage_min_nodes")
    wanted = dict(stage_min_nodes)
    for stage, need in sorted(wanted.items()):
        if stages is not None and stage not in stages:
            continue
        if len(nodes) < int(need):
            problems.append(f"cluster: stage {stage} needs at least {need} nodes, the inventory has {len(nodes)}; "
                            f"fix: add nodes to the cluster group or skip the stage (--skip-tags {stage})")

    problems = merge_same_problem(problems, len(nodes))
    by_name = {n["name"]: n for n in nodes}
    plan = {
        "nodes": [{"name": n["name"], "address": n["address"], "rank": n["rank"]} for n in nodes],
        "hosts": names,
        "address_of": {n["name"]: n["address"] for n in nodes},
        "ranks": {n["name"]: n["rank"] for n in nodes},
        "master": master,
        "master_addr": by_name[master]["address"],
        "master_port": by_name[master]["master_port"] or DEFAULT_MASTER_PORT,
        "ssh_port": by_name[master]["ssh_port"] or DEFAULT_SSH_PORT,
    }
    return problems, plan


def running_stages(stages, run_tags, skip_tags):
    """The stages a run with these --tags/--skip-tags executes ("all": every stage of site.yml)."""
    if stages == "all":
        stages = STAGES
    run = set(run_tags or ["all"])
    skip = set(skip_tags or [])
    return [s for s in stages or [] if s not in skip and ("all" in run or s in run)]


def plan_from_hostvars(hostvars, hosts, master="", master_port=None, user=None, group=None, stages=None,
                       run_tags=None, skip_tags=None, stage_min_nodes=None, master_addr=None):
    """-> {"problems": [...], "plan": {...}, "warnings": [...]} for the hosts of the cluster group (inventory order).

    hostvars: name -> that host's variables (a mapping: Ansible's hostvars, or plain dicts in tests).
    master_addr: cluster_master_addr when the inventory sets it (the rendezvous address every rank
    dials, e.g. a VIP or another interface of the master), else the master's cluster address.
    """
    rows = []
    for name in hosts or []:
        hv = hostvars[name]
        rows.append({
            "name": name,
            "address": node_address(hv, name),
            "ssh_port": hv.get("sshd_port", DEFAULTS["sshd_port"]),
            "master_port": hv.get("cluster_master_port", master_port or DEFAULTS["cluster_master_port"]),
        })
    problems, plan = validate_inventory(
        rows, master=master or None,
        stages=running_stages(stages, run_tags, skip_tags) if stages is not None else None,
        stage_min_nodes=stage_min_nodes, master_addr=master_addr, user=user)
    mirror_problems, warnings = mirror_trust(hostvars, hosts)
    problems += mirror_problems
    if plan:
        if master_addr:
            plan["master_addr"] = str(master_addr)
        plan["user"] = str(user or DEFAULTS["cluster_user"])
        plan["group"] = str(group or DEFAULTS["cluster_group"])
    return {"problems": problems, "plan": plan, "warnings": warnings}


def merge_same_problem(problems, node_count):
    """'node1: X' and 'node2: X' become 'node1, node2: X' ('cluster: X' when every node has it)."""
    order = []
    hosts_by_text = {}
    for line in problems:
        host, sep, text = line.partition(": ")
        if not sep or host == "cluster" or " " in host:
            host, text = None, line
        if text not in hosts_by_text:
            hosts_by_text[text] = []
            order.append(text)
        if host:
            hosts_by_text[text].append(host)
    out = []
    for text in order:
        hosts = hosts_by_text[text]
        if not hosts:
            out.append(text)
        elif len(hosts) == 1:
            out.append(f"{hosts[0]}: {text}")
        elif len(hosts) == node_count:
            out.append(f"cluster (all {node_count} nodes): {text}")
        else:
            shown = ", ".join(hosts[:4]) + (f" and {len(hosts) - 4} more" if len(hosts) > 4 else "")
            out.append(f"{shown}: {text}")
    return out


def python_problem(host, version_text):
    """Decide from `python3 --version` output (or None when absent) whether Ansible can run."""
    fix = ("fix: install python3 on the node (apt-get install -y python3 / dnf install -y python3) "
           "or set ansible_python_interpreter")
    if not version_text:
        return f"{host}: no python3 on the node; {fix}"
    parts = version_text.strip().split()
    try:
        major, minor = (int(x) for x in parts[-1].split(".")[:2])
    except (ValueError, IndexError):
        return f"{host}: cannot read the python version from {version_text.strip()!r}; {fix}"
    if (major, minor) < (3, 6):
        return f"{host}: python {major}.{minor} is too old for Ansible's modules (need 3.6+); {fix}"
    return None
