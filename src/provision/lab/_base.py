"""What every part of the lab uses: the error type, labels, and running podman."""

from __future__ import annotations

import contextlib
import fcntl
import re
import subprocess
import time

LABEL = "provision.lab"
LABEL_INDEX = "provision.lab.index"
LABEL_RECIPE = "provision.recipe"
LABEL_ADDRESS = "provision.lab.address"
LABEL_SIDE = "provision.lab.side_address"
LABEL_OS = "provision.lab.os"
LABEL_INIT = "provision.lab.init"
LABEL_FLAVOUR = "provision.lab.flavour"
# containers of a lab that are not nodes (the package mirror) carry LABEL and this one
LABEL_ROLE = "provision.lab.role"
# a node's own podman run options (--shm-size, --node-option) as JSON: a snapshot restores them
LABEL_RUN = "provision.lab.run"
# the snapshot a node was restored from (provision lab up --from)
LABEL_SNAPSHOT = "provision.lab.snapshot"


class LabError(RuntimeError):
    """A lab operation failed; the message is one line naming the problem and the fix."""


# One rule for every lab name, in every lab command (issue 31): the name becomes podman container and
# network names (NAME-node1, NAME-side1: podman's own rule, [a-zA-Z0-9][a-zA-Z0-9_.-]*), a label value,
# and a directory under ~/.cache/provision/labs/ that `lab down` removes: no '/', no leading '.' or '-'
# (so never '..', an absolute path or an option), at most 63 characters. plugins/inventory/lab.py
# applies the same expression (a test keeps the two equal).
NAME_RULE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
_NAME = re.compile(NAME_RULE)


def check_name(name: str) -> str:
    """name when it is a valid lab name, else LabError in one line with the rule and the fix."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise LabError(f"{name!r} is not a lab name: letters, digits, '_', '.' and '-', starting with a letter or "
                       "digit, at most 63 characters (no '/', no '..'); fix: --name provlab or another such name")
    return name


def _run(argv: list[str], *, check: bool = True, input_text: str | None = None,
         timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, input=input_text,
                              timeout=timeout, check=False, env=env)
    except FileNotFoundError as exc:
        raise LabError(f"{argv[0]} is not installed: run `provision lab setup`") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"`{' '.join(argv[:4])} ...` did not finish within {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise LabError(f"`{' '.join(argv[:5])}` failed: {err[-1] if err else proc.returncode}")
    return proc


def podman(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    return _run(["podman", *args], check=check, timeout=timeout)


@contextlib.contextmanager
def machine_lock(name: str, *, timeout: float, what: str):
    """One process at a time on this machine for NAME (several labs, checkouts or test workers share
    podman's networks, the image store and the caches): waits up to TIMEOUT seconds, then says what
    holds it (WHAT) and where the lock is."""
    from provision.paths import cache_dir

    path = cache_dir() / "locks" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LabError(f"{what} has been busy in another process for over {timeout:.0f} s; "
                                   f"remove {path} if none runs") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
