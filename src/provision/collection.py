"""The collection's plain-Python module_utils (checks, diagnose, ...) imported by the CLI.

They live in the Ansible collection (plugins/module_utils) so that modules shipped to the nodes
carry them; the CLI imports the same files through ``provision.paths.collections_dir()`` (the
checkout's collections/ or the copy inside the wheel), so there is one implementation of each.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from provision.paths import collections_dir

PACKAGE = "ansible_collections.provision.cluster.plugins.module_utils"


def module_utils(name: str) -> ModuleType:
    """plugins/module_utils/NAME.py of this collection, e.g. module_utils("diagnose")."""
    path = str(collections_dir())
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(f"{PACKAGE}.{name}")
