"""The exit status of every `provision` command, in one place (docs/cli.md: Exit status).

    0 OK           everything asked for was done, every check passed
    1 FAILED       it ran and something failed: a check, a host, the job
    2 USAGE        the command line or the inventory is wrong; nothing was run
    3 UNREACHABLE  it could not finish: a host was unreachable, the run timed out or was interrupted

Commands return these and nothing else; `from_ansible` maps ansible-playbook's own statuses onto them.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    UNREACHABLE = 3
    INTERRUPTED = 3  # an alias: Ctrl-C, SIGTERM or a --timeout that passed


# ansible-playbook's exit statuses (ansible.errors.ExitCode; 2 and 4 are bit flags: 6 is both)
_ANSIBLE = {
    0: ExitCode.OK,
    1: ExitCode.FAILED,        # GENERIC_ERROR
    2: ExitCode.FAILED,        # HOST_FAILED: some host failed
    4: ExitCode.UNREACHABLE,   # HOST_UNREACHABLE: some host unreachable, none failed
    6: ExitCode.FAILED,        # failed and unreachable hosts: the failure wins, as in ansible-playbook
    5: ExitCode.USAGE,         # bad or incomplete options
    99: ExitCode.INTERRUPTED,  # user interrupted
}


def from_ansible(rc: int) -> ExitCode:
    """ansible-playbook's status as ours: failed hosts 1, unreachable or interrupted 3, bad options 2;
    killed by a signal (negative rc) 3; anything else (250: an unexpected error) 1."""
    if rc < 0:
        return ExitCode.INTERRUPTED
    return _ANSIBLE.get(rc, ExitCode.FAILED)


EXIT_OK = ExitCode.OK
EXIT_FAILED = ExitCode.FAILED
EXIT_USAGE = ExitCode.USAGE
EXIT_UNREACHABLE = ExitCode.UNREACHABLE
EXIT_INTERRUPTED = ExitCode.INTERRUPTED
