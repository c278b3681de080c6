# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations


class ModuleDocFragment:
    # A stage's module that runs a check of the verify catalog after its own work, in the same process
    # (plugins/module_utils/verify/stage_check.py), when the check action asks it to.
    DOCUMENTATION = r"""
options:
  check:
    description:
      - The arguments of the catalog check this module runs after its work, on the node, in the same process
        (the options of that check's read-only module, named above). The result is returned as C(check_result).
      - Set by the action M(provision.cluster.check) (its O(provision.cluster.check#module:module) names this
        module), which builds them as C(provision verify) does and keeps the result as the check's record;
        site.yml's verify pass takes it instead of running the check again when this call changed nothing.
      - Unset, no check runs.
    type: dict
"""
