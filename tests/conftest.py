from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import FIXTURES, STRICT, lab_cmd, podman_available  # noqa: E402


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
    """A lab brought up for a test module and removed after it (unless PROVISION_KEEP_LABS=1)."""

    def __init__(self, name: str, nodes: int = 2, options: list[str] | None = None):
        self.name = name
        self.nodes = nodes
        self.options = options or []

    def up(self) -> "Lab":
        # a fresh lab: nodes left over from an interrupted run are not bare any more
        lab_cmd("down", lab_name=self.name, check=False)
        lab_cmd("up", "--nodes", str(self.nodes), *self.options, lab_name=self.name)
        return self

    def down(self) -> None:
        if os.environ.get("PROVISION_KEEP_LABS") != "1":
            lab_cmd("down", lab_name=self.name, check=False)


@pytest.fixture(scope="session")
def lab_factory():
    """lab_factory(name, nodes=2, options=[...]) -> Lab that is up; all removed at session end."""
    made: list[Lab] = []

    def make(name: str, nodes: int = 2, options: list[str] | None = None) -> Lab:
        lab = Lab(name, nodes, options).up()
        made.append(lab)
        return lab

    yield make
    for lab in made:
        lab.down()


@pytest.fixture(scope="session")
def converged_lab(lab_factory):
    """A 2-node lab on which site.yml ran once (green). Shared by read-only tests; a test
    that breaks a node must restore it before it ends."""
    from helpers import lab_name, run_playbook

    lab = lab_factory(lab_name("site"), nodes=2)
    first = run_playbook("site.yml", lab_name=lab.name, timeout=1800)
    assert first.rc == 0, first
    lab.first_run = first
    return lab


@pytest.fixture(scope="session")
def four_node_lab(lab_factory):
    """A 4-node lab on which site.yml ran once (green): the bad-node tests (issue 21) and the lifecycle
    tests (issue 24) share it; each test restores what it changed before it ends."""
    from helpers import lab_name, run_playbook

    lab = lab_factory(lab_name("four"), nodes=4)
    first = run_playbook("site.yml", lab_name=lab.name, timeout=2400)
    assert first.rc == 0, first
    return lab
