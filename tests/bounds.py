"""Every wait of the lab tests, in one place.

A bound is how long a test lets something take before it calls it hung: a wait that ends early on
success (polling, a subprocess timeout), never a figure the test asserts. The values are sized for
the CI machine, 2 cores that run the lab's nodes, Ansible and the test itself at once; each is a
few times what that machine took at its busiest (the suite beside a 2-process CPU hog), so that load
never reaches one. PROVISION_TEST_TIME_SCALE multiplies all of them (a slower machine, many more
nodes); nothing in the tests writes its own number instead.

What a test asserts about time is not a bound: it compares within one run (a failure named before
the timeout that would otherwise end it: `well_before`), never a wall time against a constant.
"""

from __future__ import annotations

import os

SCALE = float(os.environ.get("PROVISION_TEST_TIME_SCALE") or "1")


def scaled(seconds: float) -> float:
    return seconds * SCALE


# one command in a node (podman exec) or a quick CLI call on the controller
COMMAND = scaled(120)
# `provision lab up/down` of a few nodes (an image build on a fresh machine included)
LAB_UP = scaled(900)
# a poll for a state to appear (a daemon answering, a process starting): checked every POLL_STEP
POLL = scaled(60)
POLL_STEP = 0.2
# a playbook of one stage or a few, or a re-run of site.yml on converged nodes
STAGES = scaled(900)
# site.yml on fresh nodes: 2 nodes (torch 2.13.0 into a venv on each included), 4 nodes
SITE_FRESH = scaled(1800)
SITE_FRESH_4 = scaled(2400)
# `provision verify` (with --smoke: an all-reduce and the ring probe)
VERIFY = scaled(600)
# a launcher job started by `provision launch` (torchrun, deepspeed, mpirun, ...), and the command's own --timeout
JOB = scaled(600)
JOB_INNER = scaled(480)
# pip download / wheel builds on the controller (PyPI), copying and installing wheels into a node
DOWNLOAD = scaled(900)
INSTALL = scaled(1500)
# one molecule scenario (create, converge, idempotence, verify, destroy)
MOLECULE = scaled(2400)


def well_before(took: float, timeout: float) -> bool:
    """A failure was named well before TIMEOUT ended the wait (half of it): what a fast failure means,
    whatever the machine's load, as long as TIMEOUT is far above the time a named failure takes."""
    return took < timeout / 2
