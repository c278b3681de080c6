"""The README's runnable blocks (`<!-- runnable: lab -->` before a code block) run as a user runs them:
`provision lab up`, site.yml, `provision verify`, `provision lab down`, on a 2-node lab of their own
(PROVISION_LAB_NAME: a test-prefixed name, which the commands and the lab inventory read)."""

from __future__ import annotations

import subprocess

import pytest
from helpers import REPO, ansible_env, lab_cmd, lab_name

from unit.test_docs import README, blocks

pytestmark = pytest.mark.lab


def test_readme_lab_blocks_run():
    runnable = [b for b in blocks(README) if b["marker"] == "lab"]
    assert runnable
    name = lab_name("readme")
    env = ansible_env(name)
    lab_cmd("down", lab_name=name, check=False)  # a lab left by an interrupted run is not fresh
    try:
        for block in runnable:
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]], cwd=REPO, env=env,
                                  capture_output=True, text=True, timeout=2400, check=False)
            out = proc.stdout + proc.stderr
            assert proc.returncode == 0, f"README.md:{block['line']} failed ({proc.returncode}):\n{out[-6000:]}"
            if "provision verify" in block["code"]:
                assert "verify: OK" in out, out[-6000:]
            if "site.yml" in block["code"]:
                assert "failed=0" in out and "unreachable=0" in out, out[-6000:]
        status = lab_cmd("status", "--json", lab_name=name, check=False)
        assert '"up": false' in status.stdout, "the README's block must take its lab down"
    finally:
        lab_cmd("down", lab_name=name, check=False)
