"""The README's runnable blocks (`<!-- runnable: lab -->` before a code block) run as a user runs them:
`provision lab up`, site.yml, `provision verify`, `provision lab down`, on a 2-node lab of their own
(PROVISION_LAB_NAME: a test-prefixed name, which the commands and the lab inventory read).

The session's converged 2-node lab is made by these very commands when no snapshot holds it
(tests/conftest.py `_converged`): then this test reads what they printed, and runs the block's last
command, `provision lab down`, on a lab of its own. With the converged lab from a snapshot, it runs
the whole block on a fresh lab."""

from __future__ import annotations

import pytest

import bounds
from helpers import lab_cmd, lab_name, readme_lab_block

pytestmark = pytest.mark.lab


def check(steps: list[dict]) -> None:
    assert steps, "the README has no runnable lab block"
    for step in steps:
        res = step["result"]
        assert res.rc == 0, f"README.md:{step['line']} `{step['command']}` failed ({res.rc}):\n{res.output[-6000:]}"
        if step["command"].startswith("provision verify"):
            assert "verify: OK" in res.output, res.output[-6000:]
        if step["command"].startswith("ansible-playbook site.yml"):
            assert res.recap and all(h["failed"] == 0 and h["unreachable"] == 0 for h in res.recap.values()), res


def test_readme_lab_blocks_run(converged_lab):
    if converged_lab.readme is not None:
        check(converged_lab.readme)   # up, site.yml and verify made the session's converged lab
        name = lab_name("readme-down")
        lab_cmd("up", "--nodes", "1", lab_name=name, timeout=bounds.LAB_UP)
        steps = readme_lab_block(name, only="provision lab down")   # the block's last command
    else:
        name = lab_name("readme")
        lab_cmd("down", lab_name=name, check=False)   # a lab left by an interrupted run is not fresh
        steps = readme_lab_block(name)
    try:
        assert steps[-1]["command"].startswith("provision lab down"), steps[-1]["command"]
        check(steps)
        status = lab_cmd("status", "--json", lab_name=name, check=False)
        assert '"up": false' in status.stdout, "the README's block must take its lab down"
    finally:
        lab_cmd("down", lab_name=name, check=False)
