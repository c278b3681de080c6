"""Every molecule scenario, run the way a role developer runs it: `molecule test -s NAME`.

`default` (site.yml on a 2-node lab: converge, idempotence, verify) is the very run the suite makes on
its converged lab (the README's block, test_site's re-run and --check, test_verify): the suite checks
that its configuration loads and its playbooks parse (`molecule syntax`), and runs the others, whose
nodes it has nowhere else (three releases, three nodes with a non-root user, bare systemd nodes)."""

from __future__ import annotations

import re
import subprocess

import pytest
import bounds
from helpers import REPO, ansible_env, tool

pytestmark = [pytest.mark.lab, pytest.mark.molecule]

SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
COVERED = {"default"}


def molecule(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = ansible_env()
    env.pop("ANSIBLE_CONFIG", None)  # molecule writes its own from molecule.yml
    return subprocess.run([tool("molecule"), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s not in COVERED])
def test_molecule_scenario(scenario):
    proc = molecule("test", "-s", scenario, timeout=bounds.MOLECULE)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    # molecule's closing summary: every action of the scenario (idempotence included) succeeded
    summary = re.search(rf"^\s*{re.escape(scenario)}\s*:\s*actions=(\d+)\s+successful=(\d+).*failed=(\d+)", out, re.M)
    assert summary and summary.group(1) == summary.group(2) and summary.group(3) == "0", out[-4000:]


@pytest.mark.parametrize("scenario", sorted(COVERED))
def test_covered_scenario_loads_and_parses(scenario):
    assert scenario in SCENARIOS
    proc = molecule("syntax", "-s", scenario, timeout=bounds.COMMAND)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
