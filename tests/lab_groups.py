"""The lab tests in two workers at once (scripts/test.sh, scripts/flakes.py: pytest-xdist, xdist_args()).

A lab test waits on its nodes a good part of the time (a CI run: the 2 cores about 70% busy with one
lab test at a time), so two run side by side. What must stay together does: a unit of work is a test
module (its module-scoped lab is made once, its tests keep their order), and the modules that share a
session lab (tests/conftest.py: the converged 2-node lab, the 4-node lab, the bastion lab, the
3-release lab) are one unit, so that lab is made once, in one worker. SHARED says which modules those
are; every collection checks it against the fixtures the tests use (a module that starts using a
shared lab and is not listed stops the run, naming the line to add).

The units are handed out heaviest first (longest processing time first: the last unit to start is a
short one, so the two workers end close together). COST is each unit's rough share of a CI run in
seconds: scripts/test.sh ends the lab run with every unit's seconds (`python tests/lab_groups.py
JUNIT.xml`, the run's setup, calls and teardowns summed), from which it is kept; it only orders the
units, nothing asserts it, and a unit it does not name counts as DEFAULT_COST.

xdist's own `loadgroup` would group by marks, but it renames test ids through an attribute pytest 9.2
no longer reads, so the marks are silently ignored there (pytest-dev/pytest-xdist#1386, open: with
xdist 3.8.0 and pytest 9.2.0 here, the tests of one group went to both workers); this scheduler needs
only the module of each test id.
Without xdist, or with one worker (`PROVISION_TEST_LAB_WORKERS=1`), nothing here changes the run.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

# a session lab (fixture) -> its unit, and the modules that use it (directly or through `converged`,
# `scratch_lab`)
SHARED_LABS = {
    "converged_lab": "lab-site",
    "four_node_lab": "lab-four",
    "bastion_lab": "lab-bastion",
    "release_lab": "lab-release",
}
SHARED = {
    "lab-site": ("test_allreduce_smoke", "test_launchers", "test_packaging", "test_readme", "test_site", "test_verify"),
    "lab-four": ("test_bad_node", "test_lifecycle"),
    "lab-bastion": ("test_login_bastion", "test_trust_boundary"),
    "lab-release": ("test_lab_flavours", "test_lab_mirror"),
}
COST = {
    "lab-site": 1100,        # the README block's fresh site.yml, re-run/--check, verify, all-reduce, launchers
    "lab-four": 800,         # a fresh 4-node site.yml, the bad node, the lifecycle
    "test_molecule": 600,    # releases (3 bare systemd nodes, a reboot), ssh (a non-root user)
    "lab-bastion": 550,      # the bastion and sudo login shapes, the trust boundary
    "lab-release": 350,      # 3 bare systemd images and their mirrors
    "test_health_timer": 280,
    "test_login_password": 170,
    "test_ssh_fabric": 170,
    "test_netenv": 150,
    "test_toolchains": 150,
}
DEFAULT_COST = 60
# the workers a lab run gets (scripts/test.sh, scripts/flakes.py): the CI machine has 2 cores
DEFAULT_WORKERS = 2
_UNIT_OF_MODULE = {module: unit for unit, modules in SHARED.items() for module in modules}


def xdist_args(workers: int | str | None = None) -> list[str]:
    """pytest's arguments for a lab run in WORKERS workers (PROVISION_TEST_LAB_WORKERS, else DEFAULT_WORKERS):
    none for one worker (one process, as before)."""
    import os

    count = int(workers or os.environ.get("PROVISION_TEST_LAB_WORKERS") or DEFAULT_WORKERS)
    return ["-n", str(count), "--dist", "loadscope", "--no-loadscope-reorder"] if count > 1 else []


def module_of(nodeid: str) -> str:
    """`test_site` of `tests/integration/test_site.py::test_x[param]`."""
    return PurePosixPath(nodeid.split("::", 1)[0]).stem


def unit_of_module(module: str) -> str:
    """A module's unit: the shared lab it is listed under, else the module itself."""
    return _UNIT_OF_MODULE.get(module, module)


def unit_of(nodeid: str) -> str:
    """The unit of a test id."""
    return unit_of_module(module_of(nodeid))


def check_shared(items: list[pytest.Item]) -> None:
    """Every test that uses a shared lab is in a module SHARED lists for that lab."""
    for item in items:
        module = module_of(item.nodeid)
        for fixture, unit in SHARED_LABS.items():
            if fixture in item.fixturenames and unit_of_module(module) != unit:
                raise pytest.UsageError(
                    f"{item.nodeid} uses the shared lab `{fixture}`, but tests/lab_groups.py does not put {module} "
                    f"in that lab's unit: fix: add \"{module}\" to SHARED[\"{unit}\"] (two workers would make that lab "
                    "twice, at once)")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: every collection checks every lab test
def pytest_collection_modifyitems(config, items):
    check_shared(items)
    if hasattr(config, "workerinput"):  # an xdist worker: the scheduler takes the units in this order
        items.sort(key=lambda item: -COST.get(unit_of(item.nodeid), DEFAULT_COST))  # stable: a unit keeps its order


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # an xdist hook; before xdist's own (the first answer is taken)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LabUnits(LoadScopeScheduling):
        """loadscope with our units: a module, or the modules of one shared lab."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return LabUnits(config, log)


def unit_seconds(junit: str) -> dict[str, float]:
    """{unit: seconds} from a JUnit XML file of a lab run (each test's setup, call and teardown)."""
    import xml.etree.ElementTree as ET

    out: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        unit = unit_of_module((case.get("classname") or "").rpartition(".")[2])
        out[unit] = out.get(unit, 0.0) + float(case.get("time") or 0)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    import sys

    seconds = unit_seconds(sys.argv[1])
    print(f"lab units by time ({sum(seconds.values()):.0f} s in all; COST in tests/lab_groups.py orders them): "
          + ", ".join(f"{unit} {s:.0f}" for unit, s in seconds.items()))
