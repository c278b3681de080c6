"""Every module declares check_mode and diff_mode as attributes (doc fragment provision.cluster.attributes),
and the declaration matches the code: a module that says it runs in check mode tells AnsibleModule so."""

from __future__ import annotations

import json
import re
import subprocess

import helpers
import pytest

MODULE_DIR = helpers.REPO / "plugins" / "modules"
ACTION_DIR = helpers.REPO / "plugins" / "action"
NAMES = sorted(p.stem for p in MODULE_DIR.glob("*.py") if p.stem != "__init__")
SUPPORT = {"full", "partial", "none", "N/A"}


@pytest.fixture(scope="module")
def docs():
    proc = subprocess.run([helpers.tool("ansible-doc"), "--json", *("provision.cluster.%s" % n for n in NAMES)],
                          cwd=helpers.REPO, env=helpers.ansible_env(), capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return {name.rsplit(".", 1)[1]: entry["doc"] for name, entry in json.loads(proc.stdout).items()}


@pytest.mark.parametrize("name", NAMES)
def test_check_and_diff_mode_are_declared_attributes(docs, name):
    attrs = docs[name].get("attributes") or {}
    for key in ("check_mode", "diff_mode"):
        assert attrs.get(key, {}).get("support") in SUPPORT, (name, key)
        assert attrs[key].get("description"), (name, key)          # from the fragment
    notes = " ".join(docs[name].get("notes") or [])
    assert "Supports check mode" not in notes, name                 # said once, in the attributes


@pytest.mark.parametrize("name", NAMES)
def test_the_declaration_matches_the_code(docs, name):
    support = docs[name]["attributes"]["check_mode"]["support"]
    source = (MODULE_DIR / f"{name}.py").read_text()
    action = ACTION_DIR / f"{name}.py"
    if "AnsibleModule(" in source:
        declared = re.search(r"supports_check_mode=True", source) is not None
        assert declared == (support != "none"), name
    else:                                                           # done by its action plugin
        assert action.exists(), name
    if docs[name]["attributes"]["diff_mode"]["support"] in ("full", "partial"):
        assert "diff" in (action.read_text() if action.exists() else "") + source, name
