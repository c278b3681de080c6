# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Where each setting's default is written, read as plain data (controller side).

A default is written once: the settings every stage shares in ``cluster_plan.DEFAULTS``, a role's
own settings (``pdsh_connect_timeout``, ``verify_matrix``, ...) in ``roles/<role>/defaults/main.yml``
of the role whose name prefixes them. Playbooks and the verify action plugins read a role's setting
with the role's defaults templated for the node (the ``provision.cluster.setting`` lookup,
plugin_utils/verify.py ``Variables``); Python that runs outside a play (the lab inventory, the CLI's
help texts, tests) reads the same file here, untemplated.

Plain Python, no Ansible import (PyYAML, which Ansible needs anyway).
"""

from __future__ import annotations

import os
import threading

from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import DEFAULTS

# plugins/module_utils/common/settings.py -> the collection root -> roles/
ROLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))), "roles")
_CACHE = {}
_LOCK = threading.Lock()


def role_of(name):
    """The role whose defaults define a variable: the longest role name that prefixes it (None: none)."""
    try:
        roles = sorted((r for r in os.listdir(ROLES) if os.path.isdir(os.path.join(ROLES, r))), key=len, reverse=True)
    except OSError:
        return None
    return next((r for r in roles if str(name).startswith(r + "_")), None)


def role_defaults(role):
    """roles/<role>/defaults/main.yml as plain YAML (untemplated; {} when the role has none), read once."""
    with _LOCK:
        if role not in _CACHE:
            import yaml

            path = os.path.join(ROLES, role, "defaults", "main.yml")
            try:
                with open(path, encoding="utf-8") as handle:
                    _CACHE[role] = yaml.safe_load(handle) or {}
            except (OSError, yaml.YAMLError):
                _CACHE[role] = {}
        return _CACHE[role]


def default(name):
    """The default of a setting where it is written (cluster_plan.DEFAULTS, else its role's defaults file);
    KeyError when neither writes one."""
    if name in DEFAULTS:
        return DEFAULTS[name]
    role = role_of(name)
    values = role_defaults(role) if role else {}
    if name not in values:
        raise KeyError("no default is written for %s (cluster_plan.DEFAULTS, roles/<role>/defaults/main.yml)" % name)
    return values[name]
