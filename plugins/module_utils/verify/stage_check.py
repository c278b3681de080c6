# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""A catalog check run by its own read-only module, or by the module of the stage that makes what it
checks, after that module's work, in the same process (on the node).

A check is one function ``run(params, module) -> result`` (the read-only module's result without
``changed``: ``checks`` and what the check returns beside them) and one argument spec; it raises
``Stop`` where its module stops (fail_json). The read-only module is ``exit_check`` around them;
a stage's module that runs the check (the catalog entry's ``writers``, called through the check
action with the check's arguments as its option ``check``) calls ``stage_check`` after its own work
and returns the check's result under ``check_result``. The check action keeps that as the check's
record (catalog.record), which site.yml's verify pass takes instead of running the check again: one
module run per node for the stage and its check, not two.
"""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

# the option a writing module takes: the check's arguments, as the check action builds them
CHECK_OPTION = {"check": {"type": "dict"}}
RESULT = "check_result"


class Stop(Exception):
    """The check stops its module: msg, and the fields of the failed result."""

    def __init__(self, msg, **fields):
        super().__init__(msg)
        self.msg = msg
        self.fields = fields


def exit_check(module, run):
    """The read-only module: run the check with the module's parameters, exit with its result."""
    try:
        out = run(module.params, module)
    except Stop as exc:
        module.fail_json(msg=exc.msg, **exc.fields)
    module.exit_json(changed=False, **out)


def stage_check(module, argspec, run, result):
    """A writing module after its work: RESULT plus the check's result under check_result when the check
    action asked for the check (option `check`); a check that stops fails the module with its message."""
    args = module.params.get("check")
    if args is None:
        return result
    validated = ArgumentSpecValidator(argspec).validate(dict(args))
    if validated.error_messages:
        module.fail_json(msg="check: %s" % "; ".join(validated.error_messages), **result)
    try:
        out = run(validated.validated_parameters, module)
    except Stop as exc:
        module.fail_json(msg=exc.msg, **dict(result, **{RESULT: dict(exc.fields, failed=True, msg=exc.msg)}))
    return dict(result, **{RESULT: out})
