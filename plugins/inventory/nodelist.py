# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
name: nodelist
short_description: Inventory from a scheduler's or launcher's node list (hostfile, SLURM, PBS)
description:
  - Builds the cluster inventory from the node list a job already has, in its order
    (first node = master), so the roles and C(provision launch) run on exactly the allocated nodes.
  - "Sources: a DeepSpeed/OpenMPI hostfile (C(name slots=N)); C(SLURM_JOB_NODELIST) with compressed
    ranges such as C(gpu[01-04,07],cpu3) (expanded by the python-hostlist library, like
    C(scontrol show hostnames)) and C(SLURM_TASKS_PER_NODE) as slots; C(PBS_NODEFILE), where a
    name repeated N times means N slots."
  - Hosts land in O(group) (default C(cluster), what site.yml targets). Each host gets
    C(cluster_address) (from O(address_map), else O(address_template), else the name itself),
    C(slots) when the source gives a count, C(nodelist_index) (1-based position) and
    C(nodelist_number) (trailing number of the name, e.g. 7 for C(gpu07)).
  - O(vars) are set on every host; string values are Jinja2 templates over C(name), C(index),
    C(number) and C(address) (e.g. a per-node C(ansible_host)). C(compose), C(groups) and
    C(keyed_groups) work as in other constructed inventories.
  - The config file must end in C(nodelist.yml) or C(nodelist.yaml).
extends_documentation_fragment:
  - constructed
options:
  plugin:
    description: The name of this plugin.
    required: true
    choices: [provision.cluster.nodelist, nodelist]
  source:
    description:
      - Which node list to read. C(auto) takes the first available of O(hostfile), O(nodelist)
        (C(SLURM_JOB_NODELIST)) and O(pbs_nodefile) (C(PBS_NODEFILE)).
    type: str
    default: auto
    choices: [auto, hostfile, slurm, pbs]
  hostfile:
    description: A DeepSpeed/OpenMPI hostfile (relative paths are relative to the config file).
    type: str
    env:
      - name: PROVISION_HOSTFILE
  nodelist:
    description: A SLURM node list in compressed form.
    type: str
    env:
      - name: SLURM_JOB_NODELIST
      - name: SLURM_NODELIST
  tasks_per_node:
    description: SLURM's tasks per node (C(2(x3),1)), used as slots; ignored when it does not match the node list.
    type: str
    env:
      - name: SLURM_TASKS_PER_NODE
  pbs_nodefile:
    description: A PBS/Torque node file (one line per slot).
    type: str
    env:
      - name: PBS_NODEFILE
  group:
    description: The group the hosts are put in (the roles' C(cluster_group)).
    type: str
    default: cluster
  address_map:
    description: "C({name: address}) for nodes whose cluster address is not their name."
    type: dict
    default: {}
  address_template:
    description:
      - Jinja2 template of the cluster address of nodes not in O(address_map), over C(name),
        C(index) and C(number), e.g. C(10.89.77.{{ number + 10 }}).
    type: str
  vars:
    description: Variables set on every host; string values are Jinja2 templates (see above).
    type: dict
    default: {}
"""

EXAMPLES = r"""
# slurm.nodelist.yml: inside an allocation (salloc/sbatch), the allocated nodes
#   plugin: provision.cluster.nodelist
#   source: slurm

# hostfile.nodelist.yml: the nodes of a DeepSpeed hostfile, reached by their names
#   plugin: provision.cluster.nodelist
#   hostfile: /job/hostfile

# lab.nodelist.yml: `node[1-2]` mapped onto the podman lab `ln` (see tests/integration/test_launchers.py)
plugin: provision.cluster.nodelist
nodelist: node[1-2]
address_template: "10.89.123.{{ number + 10 }}"
vars:
  ansible_connection: containers.podman.podman
  ansible_host: "ln-{{ name }}"
  ansible_user: root
"""

import os

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Constructable
from ansible_collections.provision.cluster.plugins.module_utils.common.nodelist import (
    NodeListError,
    node_number,
    parse_hostfile,
    parse_pbs_nodefile,
    parse_slurm_nodelist,
)


def _render(env, value, context):
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        return env.from_string(value).render(**context)
    return value


def read_nodes(source, hostfile=None, nodelist=None, tasks_per_node=None, pbs_nodefile=None):
    """Return (kind, [(name, slots or None)]) from the chosen source (NodeListError when none)."""
    if source == "auto":
        source = "hostfile" if hostfile else "slurm" if nodelist else "pbs" if pbs_nodefile else None
        if source is None:
            raise NodeListError("no node list: set hostfile, nodelist (SLURM_JOB_NODELIST) or PBS_NODEFILE")
    if source == "slurm":
        if not nodelist:
            raise NodeListError("source slurm: SLURM_JOB_NODELIST is not set (run inside an allocation)")
        try:
            return source, parse_slurm_nodelist(nodelist, tasks_per_node)
        except NodeListError:
            if not tasks_per_node:
                raise
            return source, parse_slurm_nodelist(nodelist)
    path = hostfile if source == "hostfile" else pbs_nodefile
    if not path:
        raise NodeListError("source %s: no file given" % source)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise NodeListError("cannot read %s: %s" % (path, exc.strerror)) from None
    nodes = parse_hostfile(text) if source == "hostfile" else parse_pbs_nodefile(text)
    if not nodes:
        raise NodeListError("%s lists no node" % path)
    return source, nodes


class InventoryModule(BaseInventoryPlugin, Constructable):
    NAME = "provision.cluster.nodelist"

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(("nodelist.yml", "nodelist.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        from jinja2.sandbox import SandboxedEnvironment

        base = os.path.dirname(path)
        hostfile = self.get_option("hostfile")
        if hostfile:
            hostfile = os.path.join(base, os.path.expanduser(hostfile))
        pbs = self.get_option("pbs_nodefile")
        try:
            kind, nodes = read_nodes(self.get_option("source"), hostfile, self.get_option("nodelist"),
                                     self.get_option("tasks_per_node"), pbs and os.path.expanduser(pbs))
        except NodeListError as exc:
            raise AnsibleParserError("nodelist inventory %s: %s" % (path, exc)) from None
        env = SandboxedEnvironment()
        group = self.inventory.add_group(self.get_option("group"))
        address_map = self.get_option("address_map") or {}
        template = self.get_option("address_template")
        strict = self.get_option("strict")
        for index, (name, slots) in enumerate(nodes, 1):
            context = {"name": name, "index": index, "number": node_number(name)}
            if name in address_map:
                address = str(address_map[name])
            elif template:
                try:
                    address = _render(env, template, context).strip()
                except Exception as exc:  # a template error is a config error: one line
                    raise AnsibleParserError("nodelist inventory %s: address_template for %s: %s"
                                             % (path, name, exc)) from None
            else:
                address = name
            context["address"] = address
            self.inventory.add_host(name, group=group)
            setv = self.inventory.set_variable
            setv(name, "cluster_address", address)
            setv(name, "nodelist_index", index)
            setv(name, "nodelist_number", context["number"])
            setv(name, "nodelist_source", kind)
            if slots is not None:
                setv(name, "slots", slots)
            for key, value in (self.get_option("vars") or {}).items():
                setv(name, key, _render(env, value, context))
            hostvars = self.inventory.get_host(name).get_vars()
            self._set_composite_vars(self.get_option("compose"), hostvars, name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, name, strict=strict)
