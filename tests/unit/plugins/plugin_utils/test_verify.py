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
