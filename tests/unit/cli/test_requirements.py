"""requirements.yml pins the collection versions the roles are tested with: exact versions, the ones
`provision setup` installs (from the pinned `ansible` wheel), within galaxy.yml's ranges."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from helpers import REPO, cannot_run
from provision import deps


def _pins() -> dict[str, str]:
    data = yaml.safe_load((REPO / "requirements.yml").read_text())
    return {c["name"]: str(c["version"]) for c in data["collections"]}


def test_requirements_pin_exact_versions_of_every_dependency():
    pins = _pins()
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert set(pins) == set(galaxy["dependencies"]), (pins, galaxy["dependencies"])
    for name, version in pins.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), (name, version)
        low = re.fullmatch(r">=(\d+\.\d+\.\d+)", galaxy["dependencies"][name]).group(1)
        assert tuple(map(int, version.split("."))) >= tuple(map(int, low.split("."))), (name, version, low)
    assert deps.ANSIBLE_WHEEL_SPEC == f"ansible=={deps.ANSIBLE_WHEEL_VERSION}"


def test_installed_collections_are_the_pinned_ones():
    """What `provision setup` put in ~/.ansible/collections (from the pinned wheel) is what is pinned."""
    base = Path(deps.user_collections_dir()) / "ansible_collections"
    found = {}
    for name in _pins():
        manifest = base.joinpath(*name.split("."), "MANIFEST.json")
        if manifest.is_file():
            found[name] = json.loads(manifest.read_text())["collection_info"]["version"]
    if not found:
        cannot_run("no collections in ~/.ansible/collections (run scripts/setup.sh)")
    assert found == {n: v for n, v in _pins().items() if n in found}


def test_claimed_ansible_core_range_is_the_tested_one():
    """meta/runtime.yml and pyproject claim exactly the ansible-core minors the version matrix runs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("version_matrix", REPO / "scripts" / "version_matrix.py")
    matrix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(matrix)
    versions = matrix.DEFAULT_VERSIONS
    low = versions[0]
    major, minor = versions[-1].split(".")
    high = f"{major}.{int(minor) + 1}"
    assert [f"2.{m}" for m in range(int(low.split('.')[1]), int(minor) + 1)] == versions
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == f">={low}.0,<{high}.0"
    assert f'"ansible-core>={low},<{high}"' in (REPO / "pyproject.toml").read_text()
