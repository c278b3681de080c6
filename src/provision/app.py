"""One command run's terminal, exit codes and errors (the shape of hatch's Application).

Every command makes one `Application` and says through it what happened: `app.info/warn/table/
emit_json` (rich for people, plain JSON on stdout for machines), `app.usage(msg)` for a usage or
inventory problem (exit 2), `app.abort(msg)` for a failure (exit 1), `app.done(ok)` at the end, and
`with app.guard():` around the core call, which turns the core's known errors into one line and the
right exit code (never a traceback).
"""

from __future__ import annotations

import contextlib
import sys
from typing import NoReturn

from provision.terminal import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Terminal


def _usage_errors() -> tuple[type[BaseException], ...]:
    """Errors of the core that mean the user asked for something impossible (exit 2)."""
    from provision.ansible import AnsibleError
    from provision.diagnose import DiagnoseError
    from provision.verify import VerifyError

    return (AnsibleError, DiagnoseError, VerifyError)


def _failures() -> tuple[type[BaseException], ...]:
    """Errors of the core that mean the work was tried and failed (exit 1)."""
    from provision.lab import LabError

    return (LabError, TimeoutError, RuntimeError)


class Application(Terminal):
    def usage(self, message: str) -> NoReturn:
        self.error(message)
        sys.exit(EXIT_USAGE)

    def abort(self, message: str, code: int = EXIT_FAILED) -> NoReturn:
        self.error(message)
        sys.exit(code)

    def done(self, ok: bool = True) -> NoReturn:
        sys.exit(EXIT_OK if ok else EXIT_FAILED)

    @contextlib.contextmanager
    def guard(self):
        """The core's known errors as one line and their exit code."""
        try:
            yield self
        except _usage_errors() as exc:
            self.usage(str(exc))
        except _failures() as exc:
            self.abort(str(exc))
