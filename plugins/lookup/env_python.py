# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
name: env_python
short_description: The interpreter of the training environment the python_env role makes
description:
  - Returns the path of the python of the node's training environment (the venv's C(bin/python), or
    the conda env's), from the node's C(python_env_*) variables, falling back to the python_env
    role's own defaults. Other roles (allreduce_smoke, launchers) and C(provision verify) use it, so
    the environment's location is written only in the python_env role.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options: {}
"""

EXAMPLES = r"""
allreduce_smoke_python: "{{ lookup('provision.cluster.env_python') }}"
"""

RETURN = r"""
_raw:
  description: One path, e.g. C(/opt/provision/venv/bin/python).
  type: list
  elements: str
"""

from ansible.plugins.lookup import LookupBase

from ansible_collections.provision.cluster.plugins.module_utils.verify.catalog import env_python_of
from ansible_collections.provision.cluster.plugins.plugin_utils.verify import Variables


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [env_python_of(Variables(variables or {}, self._templar, self._loader))]
