"""What `ansible-test sanity` (the version matrix, minutes per version, late in CI) would refuse, found in a
second: pep8 with ansible-test's own settings, and the ignore files naming every documented plugin that
carries no GPLv3 header (the collection is Apache-2.0). A CI run went red on both after every test passed."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

IGNORE_FILES = sorted((REPO / "tests" / "sanity").glob("ignore-*.txt"))
# the plugin types validate-modules reads the documentation of (filters are documented by YAML beside them)
DOCUMENTED = ("modules", "cache", "callback", "inventory", "lookup")
LICENSE = "validate-modules:missing-gplv3-license"


def shipped_python():
    """The .py files the collection tarball ships, which is what sanity reads (galaxy.yml's build_ignore
    leaves out src/, tests/unit, tests/integration, scripts/, benchmarks/, molecule/)."""
    names = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    left_out = ("src/", "tests/", "scripts/", "benchmarks/", "molecule/")
    return sorted(n for n in names if not n.startswith(left_out))


def ansible_test_pep8_ignore():
    spec = importlib.util.find_spec("ansible_test")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("ansible_test (part of ansible-core) is not importable here")
    path = Path(list(spec.submodule_search_locations)[0]) / "_util/controller/sanity/pep8/current-ignore.txt"
    return sorted(ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#"))


def test_shipped_python_passes_ansible_tests_pep8():
    if importlib.util.find_spec("pycodestyle") is None:
        pytest.skip("pycodestyle is not installed (pip install -e .[dev])")
    files = shipped_python()
    assert any(f.startswith("plugins/modules/") for f in files), files[:5]
    # the command ansible_test/_internal/commands/sanity/pep8.py runs
    proc = subprocess.run([sys.executable, "-m", "pycodestyle", "--max-line-length", "160", "--config", "/dev/null",
                           "--ignore", ",".join(ansible_test_pep8_ignore())] + files,
                          cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, "ansible-test sanity's pep8 would fail:\n" + proc.stdout + proc.stderr


def documented_plugins():
    return sorted(str(p.relative_to(REPO)) for kind in DOCUMENTED for p in (REPO / "plugins" / kind).glob("*.py")
                  if p.name != "__init__.py" and re.search(r"^DOCUMENTATION\s*=", p.read_text(), re.M))


@pytest.mark.parametrize("ignore", IGNORE_FILES, ids=lambda p: p.name)
def test_every_documented_plugin_is_in_the_license_ignores_and_nothing_else(ignore):
    listed = {ln.split()[0] for ln in ignore.read_text().splitlines() if LICENSE in ln}
    plugins = set(documented_plugins())
    assert len(plugins) > 20
    assert not plugins - listed, f"{ignore.name} misses (sanity fails on them): {sorted(plugins - listed)}"
    assert not listed - plugins, f"{ignore.name} names what is not a documented plugin: {sorted(listed - plugins)}"
    for line in ignore.read_text().splitlines():
        if line.strip():
            assert (REPO / line.split()[0]).exists(), f"{ignore.name}: {line.split()[0]} does not exist"


def test_the_ignore_files_are_the_same_for_every_version():
    texts = {p.name: p.read_text() for p in IGNORE_FILES}
    assert len(texts) >= 4
    assert len(set(texts.values())) == 1, sorted(texts)


def pylint_bad_names():
    """ansible-test's pylint settings for collections (bad-names): its pylint cell takes minutes."""
    spec = importlib.util.find_spec("ansible_test")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("ansible_test (part of ansible-core) is not importable here")
    cfg = Path(list(spec.submodule_search_locations)[0]) / "_util/controller/sanity/pylint/config/collection.cfg"
    block = re.search(r"^bad-names=\n((?:[ \t]+\S.*\n)+)", cfg.read_text(), re.M)
    assert block, cfg
    return {w.strip().rstrip(",") for w in block.group(1).splitlines() if w.strip()}


def test_shipped_python_binds_no_name_pylint_refuses():
    bad = pylint_bad_names()
    assert "_" in bad
    hits = []
    for name in shipped_python():
        for node in ast.walk(ast.parse((REPO / name).read_text(), name)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in bad:
                hits.append("%s:%d: %s" % (name, node.lineno, node.id))
    assert not hits, "ansible-test sanity's pylint refuses these names (disallowed-name): %s" % hits
