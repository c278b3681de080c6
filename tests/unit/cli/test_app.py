"""src/provision/app.py: one command run's terminal, exit codes and errors."""

from __future__ import annotations

import pytest

import helpers  # noqa: F401
from provision.ansible import AnsibleError
from provision.app import Application
from provision.lab import LabError
from provision.verify import VerifyError


@pytest.mark.parametrize("error, code", [(VerifyError("no inventory"), 2), (AnsibleError("inventory x: bad"), 2),
                                         (LabError("podman failed"), 1), (TimeoutError("took too long"), 3)])
def test_guard_turns_the_cores_errors_into_one_line_and_their_exit_code(error, code, capsys):
    app = Application()
    with pytest.raises(SystemExit) as ended:
        with app.guard():
            raise error
    assert ended.value.code == code
    err = capsys.readouterr().err
    assert err.strip() == f"error: {error}"


def test_an_unknown_error_is_not_swallowed():
    with pytest.raises(KeyError):
        with Application().guard():
            raise KeyError("a bug must show its traceback")


def test_done_usage_abort():
    app = Application()
    for call, code in ((lambda: app.done(True), 0), (lambda: app.done(False), 1), (lambda: app.usage("u"), 2),
                       (lambda: app.abort("a"), 1)):
        with pytest.raises(SystemExit) as ended:
            call()
        assert ended.value.code == code
