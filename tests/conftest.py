from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bounds  # noqa: E402
import snapshots  # noqa: E402
from helpers import FIXTURES, STRICT, lab_cmd, lab_name, podman_available  # noqa: E402


def pytest_collection_modifyitems(config, items):
    labs = [item for item in items if "lab" in item.keywords or "molecule" in item.keywords]
    if not labs or podman_available():
        return
    reason = "podman is not usable here (`podman info` failed); run scripts/test.sh (it installs it)"
    if STRICT:
        # scripts/test.sh and CI: a lab test that cannot run is a failure, not a skip
        raise pytest.UsageError(f"{reason}: {len(labs)} lab tests cannot run (PROVISION_TEST_STRICT=1)")
    for item in labs:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    assert FIXTURES.is_dir(), f"fixtures missing at {FIXTURES}"
    return FIXTURES


class Lab:
    """A lab brought up for the tests and removed at the end of the session (unless PROVISION_KEEP_LABS=1)."""

    def __init__(self, name: str, nodes: int = 2, options: list[str] | None = None):
        self.name = name
        self.nodes = nodes
        self.options = options or []
        self.snapshot: str | None = None   # the snapshot reset() brings back
        self.first_run = None              # site.yml's fresh run, when this session made the lab
        self.dirty = False                 # a test module left it changed: reset() before the next one

    def up(self) -> "Lab":
        # a fresh lab: nodes left over from an interrupted run are not bare any more
        lab_cmd("down", lab_name=self.name, check=False, timeout=bounds.LAB_UP)
        lab_cmd("up", "--nodes", str(self.nodes), *self.options, lab_name=self.name, timeout=bounds.LAB_UP)
        return self

    def save(self, snapshot: str) -> None:
        lab_cmd("save", snapshot, lab_name=self.name, timeout=bounds.LAB_UP)
        self.snapshot = snapshot

    def reset(self, *options: str) -> None:
        """The lab as its snapshot holds it (every node re-created from its image): seconds, not a site.yml."""
        assert self.snapshot, f"lab {self.name} has no snapshot to reset to"
        lab_cmd("up", "--from", self.snapshot, *options, lab_name=self.name, timeout=bounds.LAB_UP)
        self.dirty = bool(options)

    def down(self) -> None:
        if os.environ.get("PROVISION_KEEP_LABS") != "1":
            lab_cmd("down", lab_name=self.name, check=False, timeout=bounds.LAB_UP)


@pytest.fixture(scope="session")
def lab_factory():
    """lab_factory(name, nodes=2, options=[...]) -> Lab that is up; all removed at session end."""
    made: list[Lab] = []

    def make(name: str, nodes: int = 2, options: list[str] | None = None, *, up: bool = True) -> Lab:
        lab = Lab(name, nodes, options)
        if up:
            lab.up()
        made.append(lab)
        return lab

    yield make
    for lab in made:
        lab.down()


def _converged(lab_factory, short: str, nodes: int, timeout: float) -> Lab:
    """A lab of NODES on which site.yml ran green, from its snapshot when one exists for exactly this
    content (tests/snapshots.py), else fresh: site.yml on new nodes, then saved as that snapshot."""
    from helpers import run_playbook

    lab = lab_factory(lab_name(short), nodes=nodes, up=False)
    snapshot = snapshots.name_for(lab_name(short), nodes)
    if snapshots.reuse() and snapshots.exists(snapshot):
        lab.snapshot = snapshot
        lab.reset()
        return lab
    lab.up()
    first = run_playbook("site.yml", lab_name=lab.name, timeout=timeout)
    assert first.rc == 0, first
    lab.first_run = first
    snapshots.forget_older(lab_name(short), keep=snapshot)
    lab.save(snapshot)
    return lab


@pytest.fixture(scope="session")
def converged_lab(lab_factory):
    """A 2-node lab on which site.yml ran green (tests/snapshots.py: from a snapshot when one exists for
    this content). Use it through `converged` (tests that leave it as they found it) or `scratch_lab`."""
    return _converged(lab_factory, "site", 2, bounds.SITE_FRESH)


@pytest.fixture(scope="module")
def converged(converged_lab):
    """The converged 2-node lab, as its snapshot holds it; the module's tests restore what they change."""
    if converged_lab.dirty:
        converged_lab.reset()
    return converged_lab


@pytest.fixture(scope="module")
def scratch_lab(converged_lab):
    """The converged 2-node lab for a module that changes it (installs, faults it does not undo): reset
    before the next module that uses it."""
    if converged_lab.dirty:
        converged_lab.reset()
    yield converged_lab
    converged_lab.dirty = True


@pytest.fixture(scope="session")
def four_node_lab(lab_factory):
    """A 4-node lab on which site.yml ran green: the bad-node tests (issue 21) and the lifecycle
    tests (issue 24) share it; each test restores what it changed before it ends."""
    return _converged(lab_factory, "four", 4, bounds.SITE_FRESH_4)
