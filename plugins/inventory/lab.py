# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
name: lab
short_description: Nodes of a local provision lab (podman containers)
description:
  - Lists the containers that C(provision lab up) started for one lab, in node order, with their
    cluster-network address as C(cluster_address).
  - Hosts land in the groups C(cluster) (what site.yml targets) and C(lab).
  - The connection is chosen per node. C(auto) uses SSH once first contact is done (the node's
    sshd answers on O(ssh_port) and its host key is in the lab's known_hosts, which the ssh_mesh
    role writes), and the podman connection before that.
  - Nodes that are not running (stopped, created, paused) stay in the inventory, so that a node
    that is down is named as down. Every host has C(lab_state), the container's state
    (C(running), C(exited), C(paused), ...). A node that is not running and not paused is reached
    over SSH at its cluster address with a short connect timeout, so Ansible reports it
    UNREACHABLE within a few seconds; a paused (frozen) node keeps its usual connection, as a
    frozen machine would.
  - Every host also has C(lab_os) (the Debian release, bullseye, bookworm or trixie),
    C(lab_init) (C(none) for no init system and sshd not running, C(systemd) for systemd as
    PID 1 running sshd on port 22), C(lab_flavour) (full, minimal or bare) and C(lab_bare)
    (true for bare nodes, which have python3 and apt only, plus openssh-server on systemd nodes).
  - When the lab serves a package mirror (C(provision lab up --image bare) or C(--mirror)), every host
    has C(cluster_package_mirror), its base URL (C(http://10.89.K.2:8080)), and
    C(cluster_package_mirror_insecure) true (unsigned, on the lab's own internal network), and
    C(cluster_package_mirror_layout) C(flat), meaning one flat repository per release at
    C(<base>/<codename>/), for the apt line C(deb [trusted=yes] <base>/<codename> ./).
  - When the lab runs SLURM (C(provision lab up --slurm)), every host has C(lab_slurm_controller)
    (node1) and C(lab_slurm_partition) (lab).
  - The lab's nodes share this machine's cores, where a cluster gives each node its own. When the lab has
    more than four nodes per core, the waits the roles size for one node's CPU are raised for every host,
    once, here (never in playbooks or tests) - C(ssh_mesh_check_connect_timeout), C(ssh_mesh_check_timeout),
    C(pdsh_connect_timeout), C(pdsh_command_timeout) and C(allreduce_smoke_isolate_timeout) (a round of the
    bad-node search runs every pair at once) by C(ceil(nodes / (4 x cores))), and
    C(allreduce_smoke_timeout), whose ring grows with the nodes, by C(ceil(nodes^2 / (64 x cores))) - each
    the role default times that factor. C(lab_time_scale) holds the first factor. Variables set in the
    inventory's group_vars or with C(-e) still win.
  - A lab made with C(provision lab up --login sudo) (or C(sudo-password), or C(--bastion)) is logged into
    as its users log into clusters - as the admin C(ops) over ssh on port 22 with the lab's key
    (C(ansible_ssh_private_key_file), in the lab's state directory), host keys checked against the lab's
    known_hosts (read at the nodes' console when the lab came up), C(ansible_become) true, and
    C(cluster_user) the training user C(trainer). Never through podman, which would bypass that login.
    With C(--bastion) through the lab's bastion (C(ProxyJump) through a C(Host) of the lab's ssh_config,
    whose host key is checked in the same known_hosts). C(lab_login) is C(root), C(sudo) or
    C(sudo-password); with C(sudo-password) the password is the user's to give (C(-K),
    C(--become-password-file)), never the inventory's.
  - The config file must end in C(lab.yml) or C(lab.yaml).
options:
  plugin:
    description: The name of this plugin.
    required: true
    choices: [provision.cluster.lab]
  lab_name:
    description: The lab, as given to C(provision lab up --name).
    default: provlab
    env:
      - name: PROVISION_LAB_NAME
  connection:
    description: C(auto), C(podman) or C(ssh).
    default: auto
    choices: [auto, podman, ssh]
    env:
      - name: PROVISION_LAB_CONNECTION
  ssh_port:
    description: The port the sshd role puts sshd on (C(sshd_port)); unset, the default of C(sshd_port).
    type: int
  state_dir:
    description: Controller-side state of the lab (known_hosts). Defaults to ~/.cache/provision/labs/NAME.
    type: path
"""

EXAMPLES = r"""
# inventory/lab/lab.yml
plugin: provision.cluster.lab
lab_name: provlab
"""

import json
import os
import re
import socket
import subprocess

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin

from ansible_collections.provision.cluster.plugins.module_utils.common import settings
from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import DEFAULT_SSH_PORT

LABEL = "provision.lab"
LABEL_INDEX = "provision.lab.index"
LABEL_ADDRESS = "provision.lab.address"
LABEL_SIDE = "provision.lab.side_address"
LABEL_OS = "provision.lab.os"
LABEL_INIT = "provision.lab.init"
LABEL_FLAVOUR = "provision.lab.flavour"
LABEL_RECIPE = "provision.recipe"
LABEL_ROLE = "provision.lab.role"
LABEL_MIRROR_URL = "provision.lab.mirror_url"
# the lab name rule of `provision lab` (src/provision/lab/_base.py NAME_RULE; a test keeps them equal):
# the name becomes a directory under ~/.cache/provision/labs/
NAME_RULE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


def _port_open(addr, port, timeout=0.3):
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True
    except OSError:
        return False


def _known(known_hosts, addr, port):
    marker = "[%s]:%d " % (addr, port)
    try:
        with open(known_hosts, encoding="utf-8") as handle:
            return any(line.startswith(marker) or (",%s" % marker) in line for line in handle)
    except OSError:
        return False


# the login shapes (src/provision/lab/login.py): how a node says it was made, its admin and training user
LABEL_LOGIN = "provision.lab.login"
LABEL_BASTION = "provision.lab.bastion"
ADMIN = "ops"
TRAINER = "trainer"


# (variable, which factor): the bounds a lab larger than its machine raises (see DOCUMENTATION)
_SCALED = (("ssh_mesh_check_connect_timeout", "login"), ("ssh_mesh_check_timeout", "login"),
           ("pdsh_connect_timeout", "login"), ("pdsh_command_timeout", "login"),
           # a round of the bad-node search runs every pair at once: N processes of constant work each
           ("allreduce_smoke_isolate_timeout", "login"),
           ("allreduce_smoke_timeout", "ring"))


def lab_scales(nodes, cores):
    """{"login": factor, "ring": factor} for NODES lab nodes on CORES cores (1 up to 4 nodes per core)."""
    cores = max(1, int(cores or 1))
    return {"login": max(1, -(-nodes // (4 * cores))), "ring": max(1, -(-nodes * nodes // (64 * cores)))}


def _role_default(name):
    """The number a role's defaults/main.yml gives NAME (module_utils/common/settings.py: plain YAML, not through
    Ansible's loader, which would cache the file without the template trust the role's own loading gives
    it; ansible-core 2.19: the role's templated defaults would then stay untemplated)."""
    try:
        return settings.default(name)
    except KeyError:  # no such default: that bound is not raised
        return None


class InventoryModule(BaseInventoryPlugin):
    NAME = "provision.cluster.lab"

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(("lab.yml", "lab.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        name = self.get_option("lab_name")
        if not re.match(NAME_RULE, str(name)):
            raise AnsibleParserError("lab inventory: %r is not a lab name (letters, digits, '_', '.' and '-', starting "
                                     "with a letter or digit, at most 63); fix: PROVISION_LAB_NAME or lab_name" % (name,))
        mode = self.get_option("connection")
        port = int(self.get_option("ssh_port") or DEFAULT_SSH_PORT)
        state_dir = self.get_option("state_dir") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "provision", "labs", name)
        known_hosts = os.path.join(state_dir, "known_hosts")
        slurm = None
        try:
            with open(os.path.join(state_dir, "slurm.json"), encoding="utf-8") as handle:
                slurm = json.load(handle)
        except (OSError, ValueError):
            pass
        try:
            proc = subprocess.run(
                ["podman", "ps", "-a", "--filter", "label=%s=%s" % (LABEL, name), "--format", "json"],
                capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AnsibleParserError("lab inventory: cannot run podman (%s); run `provision lab setup`" % exc) from exc
        if proc.returncode != 0:
            raise AnsibleParserError("lab inventory: podman ps failed: %s" % proc.stderr.strip())
        # the lab's own helpers (its package mirror) carry a role label: they are not nodes
        everything = json.loads(proc.stdout or "[]")
        containers = [c for c in everything if not (c.get("Labels") or {}).get(LABEL_ROLE)]
        mirror = next((c for c in everything if (c.get("Labels") or {}).get(LABEL_ROLE) == "mirror"), None)
        bastion = next((c for c in everything if (c.get("Labels") or {}).get(LABEL_ROLE) == "bastion"), None)
        mirror_url = (mirror.get("Labels") or {}).get(LABEL_MIRROR_URL) if mirror else None
        if not containers:
            raise AnsibleParserError(
                "lab inventory: lab %r has no node; run `provision lab up --name %s`" % (name, name))
        nodes = sorted(containers, key=lambda c: int((c.get("Labels") or {}).get(LABEL_INDEX, "0")))
        for group in ("cluster", "lab"):
            self.inventory.add_group(group)
        scales = lab_scales(len(nodes), os.cpu_count())
        self.inventory.set_variable("lab", "lab_time_scale", scales["login"])
        for var, kind in _SCALED:
            default = _role_default(var) if scales[kind] > 1 else None
            if isinstance(default, (int, float)):
                self.inventory.set_variable("lab", var, default * scales[kind])
        for c in nodes:
            labels = c.get("Labels") or {}
            idx = int(labels.get(LABEL_INDEX, "0"))
            host = "node%d" % idx
            addr, side = labels.get(LABEL_ADDRESS), labels.get(LABEL_SIDE)
            if not addr:
                raise AnsibleParserError(
                    "lab inventory: container %s has no address label (made by an older provision); "
                    "run `provision lab down --name %s` and `provision lab up`" % (c["Names"][0], name))
            for group in ("cluster", "lab"):
                self.inventory.add_host(host, group=group)
            setv = self.inventory.set_variable
            setv(host, "cluster_address", addr)
            setv(host, "lab_name", name)
            setv(host, "lab_container", c["Names"][0])
            setv(host, "lab_side_address", side)
            setv(host, "lab_known_hosts", known_hosts)
            flavour = labels.get(LABEL_FLAVOUR)
            if not flavour:  # a node made before nodes were labelled with it: in its image tag
                flavour = labels.get(LABEL_RECIPE, "").rpartition(":")[2].split("-", 1)[0]
                flavour = flavour if flavour in ("full", "minimal", "bare") else "full"
            setv(host, "lab_os", labels.get(LABEL_OS) or "bookworm")
            setv(host, "lab_init", labels.get(LABEL_INIT) or "none")
            setv(host, "lab_flavour", flavour)
            setv(host, "lab_bare", flavour == "bare")
            if slurm:
                setv(host, "lab_slurm_controller", slurm.get("controller"))
                setv(host, "lab_slurm_partition", slurm.get("partition"))
            if mirror_url:
                setv(host, "cluster_package_mirror", mirror_url)
                setv(host, "cluster_package_mirror_layout", "flat")
                # unsigned, on the lab's own internal network: trusted on purpose (preflight says so)
                setv(host, "cluster_package_mirror_insecure", True)
            state = str(c.get("State") or "unknown").lower()
            setv(host, "lab_state", state)
            down = state not in ("running", "paused")
            login = labels.get(LABEL_LOGIN) or "root"
            setv(host, "lab_login", login)
            setv(host, "lab_bastion", labels.get(LABEL_BASTION) == "1")
            if login != "root":
                self._login_host(host, addr, name, state_dir, known_hosts, labels.get(LABEL_BASTION) == "1",
                                 bastion, down)
                continue
            use_ssh = down or mode == "ssh" or (
                mode == "auto" and _known(known_hosts, addr, port) and _port_open(addr, port))
            if use_ssh:
                setv(host, "ansible_connection", "ssh")
                setv(host, "ansible_host", addr)
                setv(host, "ansible_port", port)
                setv(host, "ansible_user", "root")
                setv(host, "ansible_ssh_common_args",
                     "-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes" % known_hosts)
                if down:
                    # nothing answers at that address: fail fast (ssh takes the first value of an
                    # option, and ansible.cfg's ssh_args come first: replace them for this host)
                    setv(host, "ansible_ssh_args", "-o ConnectTimeout=3 -o ConnectionAttempts=1")
                    setv(host, "ansible_ssh_timeout", 3)
                    setv(host, "ansible_ssh_retries", 0)
            else:
                setv(host, "ansible_connection", "containers.podman.podman")
                setv(host, "ansible_host", c["Names"][0])
                setv(host, "ansible_user", "root")
                setv(host, "ansible_podman_executable", "podman")

    def _login_host(self, host, addr, lab, state_dir, known_hosts, behind, bastion, down):
        """A node of a login lab: the admin over ssh on 22 with become, never podman (lab/login.py)."""
        setv = self.inventory.set_variable
        args = ["-o UserKnownHostsFile=%s" % known_hosts, "-o StrictHostKeyChecking=yes", "-o IdentitiesOnly=yes"]
        if behind:
            if bastion is None:
                raise AnsibleParserError("lab inventory: lab %r was made with --bastion but has no bastion "
                                         "container; run `provision lab up --name %s --bastion` again" % (lab, lab))
            # ssh hands -F (not -o) to the jump connection: the bastion's Host block there names its key,
            # user and known_hosts
            args = ["-F %s" % os.path.join(state_dir, "ssh_config"), "-o ProxyJump=%s-bastion" % lab] + args
        setv(host, "ansible_connection", "ssh")
        setv(host, "ansible_host", addr)
        setv(host, "ansible_port", 22)
        setv(host, "ansible_user", ADMIN)
        setv(host, "ansible_become", True)
        setv(host, "ansible_ssh_private_key_file", os.path.join(state_dir, "id_ed25519"))
        setv(host, "ansible_ssh_common_args", " ".join(args))
        setv(host, "cluster_user", TRAINER)
        # the lab's console authorized the lab's key: the controller's own key is not spread to the nodes
        setv(host, "ssh_mesh_controller_access", False)
        if down:
            setv(host, "ansible_ssh_args", "-o ConnectTimeout=3 -o ConnectionAttempts=1")
            setv(host, "ansible_ssh_timeout", 3)
            setv(host, "ansible_ssh_retries", 0)
