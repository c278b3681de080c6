"""`pip install .` (not editable) into a fresh venv outside the checkout gives a working CLI
that finds the playbooks, roles and plugins it ships."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import bounds
from helpers import REPO, lab_name

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("pkg")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", str(REPO)], capture_output=True,
                          text=True, cwd=base, timeout=bounds.DOWNLOAD)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return base, venv


def _run(venv, *argv, cwd, **kw):
    # the installed copy alone: no checkout on the import path (PYTHONPATH) or as the content root
    env = {k: v for k, v in os.environ.items() if k not in ("PROVISION_CONTENT_ROOT", "VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return subprocess.run([str(venv / "bin" / argv[0]), *argv[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=bounds.COMMAND, **kw)


def test_cli_and_content_come_from_the_wheel(installed):
    base, venv = installed
    help_ = _run(venv, "provision", "--help", cwd=base)
    assert help_.returncode == 0 and "lab" in help_.stdout
    root = _run(venv, "python", "-c", "from provision.paths import content_root, collections_dir;"
                "print(content_root()); print(collections_dir())", cwd=base)
    content, colls = root.stdout.split()
    assert "site-packages" in content and str(REPO) not in content
    for rel in ("site.yml", "ansible.cfg", "playbooks/preflight.yml", "roles/preflight/tasks/main.yml",
                "plugins/module_utils/common/cluster_plan.py", "plugins/inventory/lab.py", "inventory/lab/lab.yml"):
        assert os.path.exists(os.path.join(content, rel)), rel
    assert os.path.isdir(os.path.join(colls, "ansible_collections", "provision", "cluster", "roles"))
    # the controller only: ansible-core and the CLI's libraries, nothing of the lab, the tests or torch
    listed = _run(venv, "python", "-m", "pip", "list", "--format=json", cwd=base)
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "ansible-core" in names and "paramiko" in names, names
    assert not names & {"molecule", "molecule-plugins", "pytest", "torch", "ansible-lint"}, names


def test_shipped_site_yml_parses_with_shipped_collection(installed, tmp_path):
    base, venv = installed
    inv = tmp_path / "hosts.yml"
    inv.write_text("cluster:\n  hosts:\n    a: {ansible_host: 10.0.0.1}\n    b: {ansible_host: 10.0.0.2}\n")
    proc = _run(venv, "provision", "site", "-i", str(inv), "--syntax-check", cwd=base)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_lab_commands_work_from_the_wheel(installed):
    base, venv = installed
    name = lab_name("pkg")
    proc = _run(venv, "provision", "lab", "up", "--name", name, "--nodes", "1", cwd=base)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = json.loads(_run(venv, "provision", "lab", "status", "--name", name, "--json", cwd=base).stdout)
        assert doc["up"] and doc["nodes"][0]["name"] == "node1"
    finally:
        _run(venv, "provision", "lab", "down", "--name", name, cwd=base)


# ---- the collection as Galaxy users get it: `ansible-galaxy collection build`, then `install` ----

# what the tarball must not carry (galaxy.yml build_ignore): the CLI package, tests and their
# fixtures, lab/CI tooling, caches, venvs, VCS data
# (of tests/, only tests/config.yml and tests/sanity/ ship: ansible-test sanity reads them)
_NOT_SHIPPED = ("src/", "tests/unit", "tests/integration", "tests/fixtures", "tests/conftest", "tests/helpers",
                "benchmarks/", "molecule/", "scripts/", ".venv/", ".cache/", ".git/", "collections/",
                ".ci/", "pyproject.toml", "execution-environment.yml")


@pytest.fixture(scope="module")
def galaxy_install(tmp_path_factory):
    """The tarball built from this checkout, installed into a fresh collections path outside it."""
    import tarfile

    from helpers import tool

    base = tmp_path_factory.mktemp("galaxy")
    build = subprocess.run([tool("ansible-galaxy"), "collection", "build", "--output-path", str(base), str(REPO)],
                           capture_output=True, text=True, cwd=base, timeout=bounds.COMMAND)
    assert build.returncode == 0, build.stdout + build.stderr
    tarball = next(base.glob("provision-cluster-*.tar.gz"))
    with tarfile.open(tarball) as tf:
        names = tf.getnames()
    colls = base / "collections"
    # --no-deps: Galaxy is unreachable here; the two collections it depends on come from
    # ~/.ansible/collections, where `provision setup` put the versions requirements.yml pins
    proc = subprocess.run([tool("ansible-galaxy"), "collection", "install", "--no-deps", "-p", str(colls), str(tarball)],
                          capture_output=True, text=True, cwd=base, timeout=bounds.COMMAND,
                          env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(colls)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return base, tarball, names, colls / "ansible_collections" / "provision" / "cluster"


def test_tarball_holds_the_collection_and_nothing_else(galaxy_install):
    import provision

    _, tarball, names, installed = galaxy_install
    assert tarball.name == f"provision-cluster-{provision.__version__}.tar.gz"
    for needed in ("MANIFEST.json", "FILES.json", "site.yml", "meta/runtime.yml", "requirements.yml",
                   "playbooks/preflight.yml", "roles/sshd/tasks/main.yml", "plugins/modules/sshd_service.py",
                   "plugins/inventory/lab.py", "inventory/lab/lab.yml", "changelogs/changelog.yaml",
                   "meta/execution-environment.yml", "docs/support.md", "tests/config.yml",
                   "tests/sanity/ignore-2.19.txt", "plugins/modules/verify_node.py"):
        assert needed in names, needed
    # of tests/, only what ansible-test sanity reads in the installed collection
    assert {n.rstrip("/") for n in names if n.startswith("tests/")} <= (
        {"tests/config.yml", "tests/sanity"} | {f"tests/sanity/{p.name}" for p in (REPO / "tests" / "sanity").iterdir()}), names
    shipped = [n for n in names if n.startswith(_NOT_SHIPPED) or "__pycache__" in n or n.endswith((".pyc", ".retry"))
               or "/.provision/" in n]
    assert not shipped, shipped
    assert tarball.stat().st_size < 1_000_000, tarball.stat().st_size
    assert (installed / "MANIFEST.json").is_file() and (installed / "site.yml").is_file()


def test_site_yml_runs_from_the_installed_collection(galaxy_install, converged):
    """site.yml of the installed collection on the nodes this checkout's site.yml converged, from a
    directory outside the checkout, with no ansible.cfg of ours (Ansible's defaults: memory fact cache,
    no pipelining): green, and it changes nothing: the tarball does what the checkout does."""
    from helpers import PlaybookResult, tool

    base, _, _, installed = galaxy_install
    lab = converged
    run_dir = base / "elsewhere"
    run_dir.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "PROVISION_CONTENT_ROOT")) and k != "VIRTUAL_ENV"}
    env.update(PROVISION_LAB_NAME=lab.name, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([str(installed.parent.parent.parent),
                                                         os.path.expanduser("~/.ansible/collections")]))
    argv = [tool("ansible-playbook"), str(installed / "site.yml"), "-i", str(installed / "inventory" / "lab")]
    proc = subprocess.run(argv, cwd=run_dir, env=env, capture_output=True, text=True, timeout=bounds.STAGES, check=False)
    first = PlaybookResult(proc)
    assert first.rc == 0, first
    assert set(first.recap) == {"node1", "node2"}, first
    assert all(h["failed"] == 0 and h["unreachable"] == 0 for h in first.recap.values()), first
    assert first.changed == 0, first
