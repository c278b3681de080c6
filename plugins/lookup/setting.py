# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
name: setting
short_description: A role's setting as the node has it, outside that role
description:
  - For each term (a variable name such as C(launchers_dir) or C(node_runtime_min_nofile)), the node's
    value of that variable when the inventory or the play sets it, else the default of the role that
    owns the name (the role whose name prefixes it, C(roles/<role>/defaults/main.yml)), templated for
    the node. Playbooks that use a role's setting without running the role (C(playbooks/launch.yml),
    C(provision verify)) read it this way instead of restating the default.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  _terms:
    description: Variable names.
    required: true
"""

EXAMPLES = r"""
launch_dir: "{{ lookup('provision.cluster.setting', 'launchers_dir') }}"
"""

RETURN = r"""
_raw:
  description: One value per term (null when neither the node nor a role defines it).
  type: list
"""

from ansible.plugins.loader import filter_loader
from ansible.plugins.lookup import LookupBase

from ansible_collections.provision.cluster.plugins.plugin_utils.verify import Variables


def _load_filters_once():
    """Load this collection's filter plugins in the process that loads this lookup first.

    ansible-playbook forks a worker per task and host, and a worker that templates one of this
    collection's filters loads every filter file of the collection (ansible-core finds a filter by
    its name across the files): 0.1-0.3 s each time, some 2 s of the controller's time in a 2-node
    site.yml re-run. Every play of site.yml, verify.yml and launch.yml names its hosts with this
    lookup, which ansible-playbook templates in its main process before it forks a task's workers:
    loaded there once, the filters are inherited by every worker (docs/performance.md)."""
    try:
        filter_loader.get("provision.cluster.url_host")
    except Exception:  # noqa: BLE001 - only a head start: a worker loads what it needs as before
        pass


_load_filters_once()


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        var = Variables(variables or {}, self._templar, self._loader)
        return [var(str(term)) for term in terms]
