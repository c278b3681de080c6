"""Every molecule scenario, run the way a role developer runs it: `molecule test -s NAME`."""

from __future__ import annotations

import subprocess

import pytest
from helpers import REPO, ansible_env, tool

pytestmark = [pytest.mark.lab, pytest.mark.molecule]

SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario):
    env = ansible_env()
    env.pop("ANSIBLE_CONFIG", None)  # molecule writes its own from molecule.yml
    proc = subprocess.run([tool("molecule"), "test", "-s", scenario], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=2400, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    # idempotence ran and found nothing to change
    assert "Idempotence completed successfully" in out or "idempotence" not in out.lower(), out[-4000:]
