"""One command run's terminal, exit codes and errors (the shape of hatch's Application).

Every command makes one `Application` and says through it what happened: `app.info/warn/table/
emit_json` (rich for people, plain JSON on stdout for machines), `app.usage(msg)` for a usage or
inventory problem (exit 2), `app.abort(msg)` for a failure (exit 1), `app.done(ok)` at the end, and
`with app.guard():` around the core call, which turns the core's known errors into one line and the
right exit code (never a traceback): provision.exits has them all. With --json, an error that ends the
command before its document is one JSON document too ({"schema", "ok": false, "error", "exit_code"}).
"""

from __future__ import annotations

import contextlib
import sys
from typing import NoReturn

from provision.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, ExitCode
from provision.terminal import Terminal


def _usage_errors() -> tuple[type[BaseException], ...]:
    """Errors of the core that mean the user asked for something impossible (exit 2)."""
    from provision.ansible import AnsibleError
    from provision.diagnose import DiagnoseError
    from provision.verify import VerifyError

    return (AnsibleError, DiagnoseError, VerifyError)


def _failures() -> tuple[type[BaseException], ...]:
    """Errors of the core that mean the work was tried and failed (exit 1)."""
    from provision.lab import LabError

    return (LabError, RuntimeError)


def error_document(message: str, code: int) -> dict:
    """What --json prints when the command ends before its own document."""
    return {"ok": False, "error": message, "exit_code": int(code)}


class Application(Terminal):
    def usage(self, message: str) -> NoReturn:
        self.abort(message, EXIT_USAGE)

    def abort(self, message: str, code: int = EXIT_FAILED) -> NoReturn:
        self.error(message)
        if self.json_mode:
            self.emit_json(error_document(message, code))
        sys.exit(int(code))

    def done(self, ok: bool = True) -> NoReturn:
        sys.exit(EXIT_OK if ok else EXIT_FAILED)

    def exit(self, code: ExitCode | int) -> NoReturn:
        sys.exit(int(ExitCode(code)))

    @contextlib.contextmanager
    def guard(self):
        """The core's known errors as one line and their exit code."""
        try:
            yield self
        except _usage_errors() as exc:
            self.usage(str(exc))
        except _failures() as exc:
            self.abort(str(exc))
        except TimeoutError as exc:  # a --timeout passed: the run could not finish
            self.abort(str(exc), EXIT_INTERRUPTED)
        except KeyboardInterrupt:
            self.abort("interrupted", EXIT_INTERRUPTED)
