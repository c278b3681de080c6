"""`provision setup`: the collections the roles use; the lab's host tools and collection only when asked
(a controller that drives real machines never hears of podman)."""

from __future__ import annotations

import json

import helpers  # noqa: F401
import pytest
from click.testing import CliRunner

from provision import deps
from provision import lab as lab_core
from provision.cli import cli


def _collections(tmp_path, *names):
    """A collections path holding these collections (their MANIFEST.json), as ensure_collections looks for."""
    for name in names:
        ns, coll = name.split(".")
        path = tmp_path / "ansible_collections" / ns / coll
        path.mkdir(parents=True)
        (path / "MANIFEST.json").write_text(json.dumps({"collection_info": {"namespace": ns, "name": coll}}))
    return tmp_path


def test_requirements_without_the_lab_leave_out_podman():
    assert "containers.podman" in deps.required_collections()
    assert deps.required_collections(lab=False) == [n for n in deps.required_collections()
                                                    if n not in deps.LAB_COLLECTIONS]
    assert "ansible.posix" in deps.required_collections(lab=False)


def test_setup_on_a_controller_without_podman_never_mentions_it(monkeypatch, tmp_path):
    """PATH without podman (nor apt-get), the roles' collections present: setup succeeds, installs and prints
    nothing of the lab."""
    colls = _collections(tmp_path / "colls", *deps.required_collections(lab=False))
    monkeypatch.setattr(deps, "user_collections_dir", lambda: colls)
    monkeypatch.setattr(deps, "_ansible_wheel", lambda log: pytest.fail("nothing to download"))
    monkeypatch.setattr(lab_core, "setup_host", lambda **kw: pytest.fail("must not set up the lab"))
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    result = CliRunner().invoke(cli, ["setup"])
    assert result.exit_code == 0, result.output
    assert "podman" not in result.output.lower()
    assert "collections: all present" in result.output
    assert not (colls / "ansible_collections" / "containers").exists()


def test_setup_lab_installs_the_lab_collection_and_host_tools(monkeypatch, tmp_path):
    colls = _collections(tmp_path / "colls", *deps.required_collections(lab=False))
    monkeypatch.setattr(deps, "user_collections_dir", lambda: colls)
    installed = []

    def ensure(dest=None, log=print, lab=False):
        installed.extend(deps.missing_collections(colls, lab))
        return list(installed)

    monkeypatch.setattr(deps, "ensure_collections", ensure)
    calls = []
    monkeypatch.setattr(lab_core, "setup_host", lambda **kw: calls.append(kw) or ["installed podman runc"])
    result = CliRunner().invoke(cli, ["setup", "--lab"])
    assert result.exit_code == 0, result.output
    assert installed == list(deps.LAB_COLLECTIONS) and len(calls) == 1
    assert "installed collections: containers.podman" in result.output and "installed podman runc" in result.output
