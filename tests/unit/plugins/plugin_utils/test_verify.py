# -*- coding: utf-8 -*-
"""plugins/plugin_utils/verify.py: the variables the verify action plugins read."""
from __future__ import annotations

import helpers  # noqa: F401  (puts collections/ on sys.path)
from ansible.errors import AnsibleUndefinedVariable

from ansible_collections.provision.cluster.plugins.plugin_utils.verify import Variables


class CountingHostvars:
    """Ansible's hostvars as the action sees it: hostvars[host] gathers that host's variables (each time);
    .get of an undefined host's view raises."""

    def __init__(self, data):
        self.data, self.gathered = data, []

    def __getitem__(self, host):
        self.gathered.append(host)
        if host not in self.data:
            return Undefined()
        return dict(self.data[host])


class Undefined:
    def get(self, name, default=None):
        raise AnsibleUndefinedVariable("hostvars['%s'] is undefined" % name)


def test_each_hosts_variables_are_gathered_once_per_run():
    hostvars = CountingHostvars({"n1": {"a": 1, "b": None}, "n2": {"a": 2}})
    var = Variables({"hostvars": hostvars}, templar=None, loader=None)
    got = [var.hostvar(h, name, "-") for h in ("n1", "n2", "n3") for name in ("a", "b", "c")]
    assert got == [1, "-", "-", 2, "-", "-", "-", "-", "-"]
    # the action reads several variables of every host: hostvars[host] (all of its variables) once each
    assert hostvars.gathered == ["n1", "n2", "n3"]
    assert Variables({}, None, None).hostvar("n1", "a", "x") == "x"


class RawHostvars(CountingHostvars):
    """hostvars with raw_get (Ansible's: a host's variables without templating them); __getitem__'s view
    templates each value it hands out (here: counts it)."""

    templated = 0

    def raw_get(self, host):
        self.gathered.append(host)
        return dict(self.data[host]) if host in self.data else Undefined()

    def __getitem__(self, host):
        view = super().__getitem__(host)
        return Templating(view) if isinstance(view, dict) else view


class Templating(dict):
    def get(self, name, default=None):
        RawHostvars.templated += 1
        return super().get(name, default)


def test_registered_results_are_read_as_they_are_once_per_host():
    result = {"checks": [{"check": "gcc", "status": "pass"}], "data": {"versions": {}}}
    hostvars = RawHostvars({"n1": {"verify_node_result": result, "ansible_host": "10.0.0.1"}, "n2": {}})
    var = Variables({"hostvars": hostvars}, templar=None, loader=None)
    assert var.hostdata("n1", "verify_node_result") == result and var.hostdata("n1", "verify_reach", {}) == {}
    assert var.hostdata("n2", "verify_node_result", "-") == "-" and var.hostdata("n9", "x", "-") == "-"
    assert hostvars.gathered == ["n1", "n2", "n9"] and RawHostvars.templated == 0
    # the inventory's connection variables (templates allowed there) still go through the templating view
    assert var.hostvar("n1", "ansible_host") == "10.0.0.1" and RawHostvars.templated == 1
    # plain dicts as hostvars (the benchmarks, the tests' contexts)
    assert Variables({"hostvars": {"n1": {"a": 1}}}, None, None).hostdata("n1", "a") == 1


def test_the_cluster_plan_fact_is_read_as_data_never_templated():
    """Templating the plan walks every node of it: 0.13 s for 4,096 nodes, on every call of the check and
    verify actions on every node (about ten per node in a site.yml run)."""
    from ansible_collections.provision.cluster.plugins.plugin_utils.verify import cluster_plan

    class Templar:
        def template(self, value):
            raise AssertionError("templated: %r" % (value,))

    plan = {"nodes": [{"name": "n1", "address": "10.0.0.1"}], "hosts": ["n1"], "run": "1-2"}
    var = Variables({"cluster_plan": plan}, Templar(), None)
    assert cluster_plan(var, ["n1"]) is plan
