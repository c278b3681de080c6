"""One version for the package, the collection and the CLI."""

from __future__ import annotations

import re

import yaml
from click.testing import CliRunner

from helpers import REPO
import provision
from provision.cli import cli


def test_one_version_everywhere():
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert galaxy["version"] == provision.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", provision.__version__)
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'path = "src/provision/__init__.py"' in pyproject
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"provision, version {provision.__version__}"


def test_galaxy_metadata_has_no_placeholder():
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert "example.invalid" not in (REPO / "galaxy.yml").read_text()
    assert galaxy["namespace"] == "provision" and galaxy["name"] == "cluster"
    assert galaxy["license"] == ["Apache-2.0"] and galaxy["authors"] and galaxy["description"]
