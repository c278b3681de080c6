# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations


class ModuleDocFragment:
    # The attributes every module of this collection declares (their support is set per module).
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
"""

    # A read-only module: it never changes the node.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: This module never changes the node; check mode runs it unchanged.
  diff_mode:
    support: N/A
    details: This module never changes the node.
"""

    # A module name whose work is done by an action plugin of the same name (plugins/action/), as the
    # verify playbook's tasks are: the module file holds only its documentation.
    FLOW = r"""
options: {}
attributes:
  action:
    description: Has an action plugin of the same name; part or all of the work runs on the controller.
  async:
    description: Can be used with the C(async) task keyword.
"""
