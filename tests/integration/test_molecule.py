"""Every molecule scenario, run the way a role developer runs it: `molecule test -s NAME`."""

from __future__ import annotations

import re
import subprocess

import pytest
import bounds
from helpers import REPO, ansible_env, tool

pytestmark = [pytest.mark.lab, pytest.mark.molecule]

SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario):
    env = ansible_env()
    env.pop("ANSIBLE_CONFIG", None)  # molecule writes its own from molecule.yml
    proc = subprocess.run([tool("molecule"), "test", "-s", scenario], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=bounds.MOLECULE, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    # molecule's closing summary: every action of the scenario (idempotence included) succeeded
    summary = re.search(rf"^\s*{re.escape(scenario)}\s*:\s*actions=(\d+)\s+successful=(\d+).*failed=(\d+)", out, re.M)
    assert summary and summary.group(1) == summary.group(2) and summary.group(3) == "0", out[-4000:]
